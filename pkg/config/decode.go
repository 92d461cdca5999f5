package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// MaxSize is the largest configuration Decode reads: a ConfigMap holds at
// most 1 MiB.
const MaxSize = 1 << 20

// ErrDecode marks a configuration that could not be decoded: not YAML, not
// a NodeletConfiguration of this version, or with unknown, duplicate or
// mistyped fields. Every such error is a *DecodeError.
var ErrDecode = errors.New("cannot decode configuration")

// DecodeError is every problem Decode found in one configuration.
type DecodeError struct {
	// Source says where the configuration came from, as given to Decode.
	Source string
	// Problems are the problems found, each naming its field when it has
	// one.
	Problems []string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%s: %v: %s", e.Source, ErrDecode, strings.Join(e.Problems, "; "))
}

// Unwrap makes errors.Is(err, ErrDecode) hold.
func (e *DecodeError) Unwrap() error { return ErrDecode }

// Decode decodes a NodeletConfiguration from YAML (or JSON) strictly: it
// must declare apiVersion nodelet.io/v1alpha1 and kind
// NodeletConfiguration, and an unknown or duplicate field is an error that
// names the field. Keys are case-sensitive, as everywhere in Kubernetes.
// source says where data came from ("config file /etc/nodelet.yaml", a
// ConfigMap) and starts every error. The result is neither defaulted nor
// validated: SetDefaults, then Validate.
func Decode(data []byte, source string) (*Config, error) {
	fail := func(problems ...string) (*Config, error) {
		return nil, &DecodeError{Source: source, Problems: problems}
	}
	if len(data) > MaxSize {
		return fail(fmt.Sprintf("%d bytes, more than the limit of %d", len(data), MaxSize))
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return fail("empty: want a " + Kind)
	}
	// Duplicate keys are caught here, with their line.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
		return fail(strings.Join(strings.Fields(msg), " "))
	}
	if trimmed := bytes.TrimSpace(js); len(trimmed) == 0 || trimmed[0] != '{' {
		return fail("not a YAML mapping: want a " + Kind)
	}

	// The version first: the fields of another version are not ours to
	// judge. A missing one is likely forgotten: the fields are judged too.
	var meta struct {
		APIVersion *string `json:"apiVersion"`
		Kind       *string `json:"kind"`
	}
	var problems []string
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &meta); err == nil {
		other := false
		for _, tm := range []struct {
			path string
			got  *string
			want string
		}{{"apiVersion", meta.APIVersion, APIVersion}, {"kind", meta.Kind, Kind}} {
			switch {
			case tm.got == nil || *tm.got == "":
				problems = append(problems, field.Required(field.NewPath(tm.path), "must be "+tm.want).Error())
			case *tm.got != tm.want:
				problems = append(problems, field.NotSupported(field.NewPath(tm.path), *tm.got, []string{tm.want}).Error())
				other = true
			}
		}
		if other {
			return fail(problems...)
		}
	}

	c := &Config{}
	strictErrs, err := kjson.UnmarshalStrict(js, c, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		// A value of the wrong type stops decoding there; the rest is
		// judged without it, so that every problem is reported at once.
		var more []string
		strictErrs, more = decodeAround(js, err)
		problems = append(problems, more...)
	}
	for _, e := range strictErrs {
		problems = append(problems, jsonProblem(e))
	}
	if len(problems) > 0 {
		return fail(problems...)
	}
	return c, nil
}

// jsonProblem is a JSON decoding error without the decoder's prefix and
// Go's names for our types.
func jsonProblem(err error) string {
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return goTypeName.ReplaceAllString(msg, "into $1")
}

var goTypeName = regexp.MustCompile(`into Go (?:struct field \S+|value) of type (\S+)`)

// decodeAround reports the value that stopped decoding with err and every
// other one that would: decoding stops at the first value it cannot take (a
// string for a number, "abc" for a duration) and the errors of custom
// decoders do not say where that was. So it finds the field whose value
// fails on its own, reports it with its path, takes it out and decodes
// again, until the rest decodes; then it returns the rest's strict errors
// (unknown and duplicate fields).
func decodeAround(js []byte, err error) (strictErrs []error, problems []string) {
	var tree any
	if kjson.UnmarshalCaseSensitivePreserveInts(js, &tree) != nil {
		return nil, []string{jsonProblem(err)}
	}
	// Decodes left to try: errors are rare and small; this bounds the
	// worst input.
	l := &locator{budget: 500}
	for range 20 {
		steps, leaf, leafErr := l.find(tree)
		if leafErr == nil {
			leafErr = err
		}
		msg := jsonProblem(leafErr)
		if _, isBool := leaf.(bool); isBool && strings.HasPrefix(msg, "cannot unmarshal bool into") {
			msg += " (quote it: YAML reads y, n, yes, no, on and off, in any case, as true or false)"
		} else if strings.HasPrefix(msg, "cannot unmarshal number into") {
			msg += " (quote it)"
		}
		if len(steps) == 0 {
			return nil, append(problems, msg)
		}
		switch leaf.(type) {
		case map[string]any, []any, nil:
			leaf = field.OmitValueType{}
		}
		problems = append(problems, field.Invalid(toPath(steps), leaf, msg).Error())
		if !remove(tree, steps) {
			return nil, problems
		}
		rest, merr := json.Marshal(tree)
		if merr != nil {
			return nil, problems
		}
		strictErrs, err = kjson.UnmarshalStrict(rest, &Config{}, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err == nil {
			return strictErrs, problems
		}
	}
	return nil, problems
}

// A step is a key of an object (string) or an index of an array (int).
type step = any

type locator struct{ budget int }

// decode is the error of decoding a config that holds only v, or nil. It
// is nil too once the budget is spent.
func (l *locator) decode(v any) error {
	if l.budget--; l.budget < 0 {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return kjson.UnmarshalCaseSensitivePreserveInts(b, &Config{})
}

// find returns the path to the deepest part of tree that fails to decode
// on its own, that part and its error (nil if it cannot tell). An object
// or array fails itself when it fails empty (an array where a string
// belongs).
func (l *locator) find(tree any) ([]step, any, error) {
	var steps []step
	var stepErr error
	wrap := func(x any) any { return x }
	v := tree
	for {
		next := false
		switch node := v.(type) {
		case map[string]any:
			if err := l.decode(wrap(map[string]any{})); err != nil {
				return steps, v, err
			}
			for _, k := range sortedKeys(node) {
				outer := wrap
				w := func(x any) any { return outer(map[string]any{k: x}) }
				if err := l.decode(w(node[k])); err != nil {
					steps, wrap, v, stepErr, next = append(steps, k), w, node[k], err, true
					break
				}
			}
		case []any:
			if err := l.decode(wrap([]any{})); err != nil {
				return steps, v, err
			}
			for i, e := range node {
				outer := wrap
				w := func(x any) any { return outer([]any{x}) }
				if err := l.decode(w(e)); err != nil {
					steps, wrap, v, stepErr, next = append(steps, i), w, e, err, true
					break
				}
			}
		}
		if !next {
			return steps, v, stepErr
		}
	}
}

// remove takes the failing value at steps out of tree: the key of the
// innermost object on the way, so that indexes of arrays reported later
// stay true.
func remove(tree any, steps []step) bool {
	last := -1
	for i, s := range steps {
		if _, ok := s.(string); ok {
			last = i
		}
	}
	if last < 0 {
		return false
	}
	v := tree
	for _, s := range steps[:last] {
		switch s := s.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return false
			}
			v = m[s]
		case int:
			a, ok := v.([]any)
			if !ok || s >= len(a) {
				return false
			}
			v = a[s]
		}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	delete(m, steps[last].(string))
	return true
}

func toPath(steps []step) *field.Path {
	var p *field.Path
	for _, s := range steps {
		switch s := s.(type) {
		case string:
			p = p.Child(s)
		case int:
			p = p.Index(s)
		}
	}
	return p
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
