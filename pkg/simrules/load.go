package simrules

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kwokv1alpha1 "sigs.k8s.io/kwok/pkg/apis/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/pkg/stage"
)

// Load reads and compiles the objects of kwok's kinds above in YAML
// files (several documents each, as in kwok's --config files) and in the
// .yaml, .yml and .json files of directories, in name order: the same
// files as the stages', whose Stages and other kinds it skips. An error
// names the file, the object and the field; the objects at fault are
// left out of the rules returned.
func Load(paths ...string) ([]*Rule, error) {
	var out []*Rule
	err := stage.EachFile("rules", paths, func(f string) error {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("rules: %w", err)
		}
		objs, decodeErr := Decode(data)
		rules, err := CompileAll(objs)
		out = append(out, rules...)
		if err := errors.Join(decodeErr, err); err != nil {
			return fmt.Errorf("rules: %s: %w", f, err)
		}
		return nil
	})
	return out, err
}

// Decode reads the objects of kwok's kinds above in YAML or JSON
// documents, strictly (an unknown field is an error naming the object),
// skipping other kinds.
func Decode(data []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	var errs []error
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("document %d: %w", i, err)
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i, err))
			continue
		}
		kind, ok := KindNamed(head.Kind)
		if !ok {
			continue
		}
		if head.APIVersion != kwokv1alpha1.GroupVersion.String() {
			errs = append(errs, fmt.Errorf("%s %q: apiVersion %q is not %s", head.Kind, head.Metadata.Name, head.APIVersion, kwokv1alpha1.GroupVersion))
			continue
		}
		obj := kind.New()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", head.Kind, head.Metadata.Name, err))
			continue
		}
		out = append(out, obj)
	}
	return out, errors.Join(errs...)
}
