package stage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kwokv1alpha1 "sigs.k8s.io/kwok/pkg/apis/v1alpha1"
	"sigs.k8s.io/yaml"
)

// Load reads the Stages of YAML files (several documents each, as in
// kwok's --config files) and of the .yaml, .yml and .json files of
// directories, in name order. Documents of other kinds are skipped.
// Every error names the file, and the stage where there is one.
func Load(paths ...string) ([]*kwokv1alpha1.Stage, error) {
	var out []*kwokv1alpha1.Stage
	err := eachFile(paths, func(f string) error {
		stages, err := loadFile(f)
		out = append(out, stages...)
		return err
	})
	return out, err
}

// eachFile calls fn with every file of paths (as Load finds them),
// joining the errors of all.
func eachFile(paths []string, fn func(file string) error) error {
	return EachFile("stages", paths, fn)
}

// EachFile calls fn with every file of paths: each path that is a file,
// and the .yaml, .yml and .json files of each that is a directory, in
// name order. It joins the errors of all; those of a path it cannot read
// start with what ("stages: …").
func EachFile(what string, paths []string, fn func(file string) error) error {
	var errs []error
	for _, p := range paths {
		files, err := filesOf(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			continue
		}
		for _, f := range files {
			if err := fn(f); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// loadFile reads the Stages of one file; an error names it.
func loadFile(f string) ([]*kwokv1alpha1.Stage, error) {
	data, err := os.ReadFile(f)
	if err != nil {
		return nil, fmt.Errorf("stages: %w", err)
	}
	stages, err := Decode(data)
	if err != nil {
		return stages, fmt.Errorf("stages: %s: %w", f, err)
	}
	return stages, nil
}

func filesOf(p string) ([]string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				out = append(out, filepath.Join(p, e.Name()))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// Decode reads the Stages of YAML or JSON documents, strictly (an
// unknown field is an error naming the stage), skipping other kinds.
func Decode(data []byte) ([]*kwokv1alpha1.Stage, error) {
	objs, err := DecodeKwok(data, func(kind string) (any, string) {
		if kind != kwokv1alpha1.StageKind {
			return nil, ""
		}
		return &kwokv1alpha1.Stage{}, "stage"
	})
	var out []*kwokv1alpha1.Stage
	for _, o := range objs {
		out = append(out, o.(*kwokv1alpha1.Stage))
	}
	return out, err
}

// DecodeKwok reads the YAML or JSON documents of data that are objects of
// kwok's API, in order: for each, into returns a new object to decode it
// into (strictly: an unknown field is an error) and what errors call its
// kind, or nil to skip a kind it does not read. It returns the objects
// decoded; an error names the document, or the object by that word and
// its name.
func DecodeKwok(data []byte, into func(kind string) (obj any, called string)) ([]any, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []any
	var errs []error
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i, err))
			continue
		}
		obj, called := into(head.Kind)
		if obj == nil {
			continue // a comment-only document, or a kind not read
		}
		if head.APIVersion != kwokv1alpha1.GroupVersion.String() {
			errs = append(errs, fmt.Errorf("%s %q: apiVersion %q is not %s", called, head.Metadata.Name, head.APIVersion, kwokv1alpha1.GroupVersion))
			continue
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", called, head.Metadata.Name, err))
			continue
		}
		out = append(out, obj)
	}
	return out, errors.Join(errs...)
}

// LoadLifecycle is the compiled stages of Load's files; an error names
// the file and the stage.
func LoadLifecycle(paths ...string) (Lifecycle, error) {
	var out Lifecycle
	err := eachFile(paths, func(f string) error {
		stages, loadErr := loadFile(f)
		l, err := CompileAll(stages)
		if err != nil {
			err = fmt.Errorf("stages: %s: %w", f, err)
		}
		out = append(out, l...)
		return errors.Join(loadErr, err)
	})
	return out, err
}

// CompileAll compiles stages, skipping those kwok ignores (no
// selector); the error joins those of every stage at fault.
func CompileAll(stages []*kwokv1alpha1.Stage) (Lifecycle, error) {
	var out Lifecycle
	var errs []error
	for _, in := range stages {
		s, err := Compile(in)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if s != nil {
			out = append(out, s)
		}
	}
	return out, errors.Join(errs...)
}
