package env

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodelet/nodelet/internal/fuzzcheck"
)

// FuzzExpand expands arbitrary strings. A string without "$" is itself;
// nothing but references grows a string, and none past MaxExpandedLen; a
// string whose every "$" is doubled is its own literal whatever the
// variables; a reference to a known variable is its value, even between
// literals; and an expansion allocates in proportion to its result.
func FuzzExpand(f *testing.F) {
	for _, seed := range [][3]string{
		{"plain", "A", "a"},
		{"x$(A)y$(B)z", "A", "a"},
		{"$$(A)", "A", "$(A)"},
		{"$$$(A)$", "A", ""},
		{"$(A", "A(", "v"},
		{"$()", "", "empty"},
		{"$(A)$(A)$(A)$(A)", "A", strings.Repeat("x", 100)},
		{"$(a b)$(\x00)", "a b", "$$"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, s, name, value string) {
		vars := MapLookup(map[string]string{name: value})
		none := func(string) (string, bool) { return "", false }

		if got, err := Expand(s, none); err != nil || len(got) > len(s) || !strings.Contains(s, "$") && got != s {
			t.Errorf("Expand(%q) with no variables = %q, %v", s, got, err)
		}
		var (
			got string
			err error
		)
		n := fuzzcheck.Allocated(func() { got, err = Expand(s, vars) })
		refs := strings.Count(s, "$(")
		switch {
		case errors.Is(err, ErrTooLong):
			if len(s)+refs*len(value) <= MaxExpandedLen {
				t.Errorf("Expand(%q) with %s=%q: %v, but %d references cannot make it long", s, name, value, err, refs)
			}
		case err != nil:
			t.Errorf("Expand(%q) with %s=%q: %v", s, name, value, err)
		case len(got) > len(s)+refs*len(value):
			t.Errorf("Expand(%q) with %s=%q is %d bytes, more than %d references can make", s, name, value, len(got), refs)
		case len(got) > max(len(s), MaxExpandedLen):
			t.Errorf("Expand(%q) with %s=%q is %d bytes, past MaxExpandedLen", s, name, value, len(got))
		}
		if n > fuzzcheck.Slack+4*uint64(len(got)+len(s)) {
			t.Errorf("Expand(%q) to %d bytes allocated %d bytes", s, len(got), n)
		}
		literal := strings.ReplaceAll(s, "$", "$$")
		if got, err := Expand(literal, vars); err != nil || got != s {
			t.Errorf("Expand(%q) = %q, %v; want the literal %q", literal, got, err, s)
		}
		if name != "" && !strings.Contains(name, ")") && 2*len(s)+len(value) <= MaxExpandedLen {
			ref := literal + "$(" + name + ")" + literal
			if got, err := Expand(ref, vars); err != nil || got != s+value+s {
				t.Errorf("Expand(%q) with %s=%q = %q, %v; want %q", ref, name, value, got, err, s+value+s)
			}
		}
	})
}

// FuzzEnvironment builds the environment of a container whose env and
// envFrom the fuzzer chooses, with references between the variables. Every
// name appears once, as a valid name; a variable whose last definition is a
// literal has that value; and the environment costs memory in proportion
// to the number of variables, whatever the references between them, since
// no process can be started with more than the kernel's limit anyway.
func FuzzEnvironment(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x04\x00\x01\x00\x00\x03abc\x01\x01\x02\x00\x02\x01\x01\x02\x01\x01"))
	f.Add([]byte("\x08\x02\x05\x00\x01\x02\x06\x01\x01\x01\x02\x03\x00\x01\x02\x07\x00\x02\x01"))
	f.Add([]byte("\x10\x01\x01\x03\x00\x02\x05\x00\x01\x03\x03\x00\x02\x07\x00\x00\x01\x00\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := fuzzcheck.NewChoices(data)
		// The API validates env names; ConfigMap keys that are no
		// variable names are the environment's to skip.
		names := []string{"A", "B", "C", "D", "E", "PATH", "X_Y", "KUBERNETES_SERVICE_HOST"}
		cm := &corev1.ConfigMap{Data: map[string]string{}}
		for n := c.Intn(4); n > 0; n-- {
			cm.Data[c.Pick(append(names, "a=b", "", "\x7f")...)] = c.Word("ab$()", 6)
		}
		pod := testPod()
		pod.Spec.EnableServiceLinks = ptr(c.Bool())
		ctr := &pod.Spec.Containers[0]
		if c.Bool() {
			ctr.EnvFrom = append(ctr.EnvFrom, corev1.EnvFromSource{Prefix: c.Pick("", "P_", "="), ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: c.Pick("cfg", "missing")}, Optional: ptr(true)}})
		}
		for n := c.Intn(32); n > 0; n-- {
			ev := corev1.EnvVar{Name: c.Pick(names...)}
			switch c.Intn(4) {
			case 0:
				ev.Value = c.Word("xyz", 8)
			case 1:
				ev.ValueFrom = &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: c.Pick("metadata.name", "status.podIP", "spec.nodeName", "metadata.labels['tier']", "bad")}}
			default:
				var b strings.Builder
				for k := c.Intn(8); k > 0; k-- {
					switch c.Intn(4) {
					case 0:
						b.WriteString(c.Word("x$()", 3))
					default:
						b.WriteString("$(" + c.Pick(names...) + ")")
					}
				}
				ev.Value = b.String()
			}
			ctr.Env = append(ctr.Env, ev)
		}

		var (
			got []string
			err error
		)
		g := staticGetter{cm: cm}
		size := fuzzcheck.Allocated(func() { got, err = Environment(context.Background(), g, pod, ctr, node) })
		// Each variable is at most MaxExpandedLen, built by doubling.
		if limit := fuzzcheck.Slack + 4*MaxExpandedLen*uint64(len(ctr.Env)+1); size > limit {
			t.Fatalf("the environment of %d variables allocated %d bytes", len(ctr.Env), size)
		}
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, kv := range got {
			name, _, ok := strings.Cut(kv, "=")
			if !ok || seen[name] || !validName(name) {
				t.Fatalf("entry %q: no '=', an invalid name or one seen before in %q", kv, got)
			}
			seen[name] = true
		}
		last := map[string]corev1.EnvVar{}
		for _, ev := range ctr.Env {
			last[ev.Name] = ev
		}
		for name, ev := range last {
			if ev.ValueFrom != nil || strings.Contains(ev.Value, "$") {
				continue
			}
			if want := name + "=" + ev.Value; !contains(got, want) {
				t.Errorf("environment %q lacks %q, the last definition of %s", got, want, name)
			}
		}
	})
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// staticGetter serves one ConfigMap named cfg and the kubernetes Service.
type staticGetter struct{ cm *corev1.ConfigMap }

func (g staticGetter) ConfigMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	if name != "cfg" {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
	}
	return g.cm, nil
}

func (g staticGetter) Secret(_ context.Context, _, name string) (*corev1.Secret, error) {
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func (g staticGetter) Services(context.Context, string) ([]corev1.Service, error) {
	return []corev1.Service{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.0.0.1", Ports: []corev1.ServicePort{{Port: 443}}},
	}}, nil
}
