package simrules

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodelet/nodelet/pkg/stage"
)

// Load reads and compiles the objects of kwok's kinds above in YAML
// files (several documents each, as in kwok's --config files) and in the
// .yaml, .yml and .json files of directories, in name order: the same
// files as the stages', whose Stages and other kinds it skips. An error
// names the file, the object and the field; the objects at fault are
// left out of the rules returned. CEL expressions are compiled in env
// (nil: kwok's on the wall clock).
func Load(env *CEL, paths ...string) ([]*Rule, error) {
	var out []*Rule
	err := stage.EachFile("rules", paths, func(f string) error {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("rules: %w", err)
		}
		objs, decodeErr := Decode(data)
		rules, err := CompileAll(objs, env)
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
	objs, err := stage.DecodeKwok(data, func(kind string) (any, string) {
		k, ok := KindNamed(kind)
		if !ok {
			return nil, ""
		}
		return k.New(), kind
	})
	var out []runtime.Object
	for _, o := range objs {
		out = append(out, o.(runtime.Object))
	}
	return out, err
}
