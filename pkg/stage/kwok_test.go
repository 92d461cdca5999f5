package stage

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// kwokNow is the time kwok's stage tests compute delays at.
var kwokNow = time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC)

// TestKwokStageSets runs the input/output pairs kwok keeps beside its
// published stage sets (testdata/kwok, from kwok v0.8.0) as kwok's
// kustomize/stage/stage_test.go runs them: every stage of the set that the
// input may play, with its delay range, weight and steps, the functions
// of the node and the pod stubbed by placeholders. Patch types are left
// out of the comparison: kwok's test loads its inputs untyped and so
// shows merge patches, where its pod and node controllers (and nodelet)
// send Pods and Nodes strategic merge patches.
func TestKwokStageSets(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "kwok", "*", "*", "testdata", "*.input.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(strings.TrimPrefix(in, filepath.Join("testdata", "kwok")+"/"), ".input.yaml")
		t.Run(strings.Replace(name, "/testdata/", "/", 1), func(t *testing.T) {
			setDir := filepath.Dir(filepath.Dir(in))
			l, err := LoadLifecycle(setDir)
			if err != nil {
				t.Fatal(err)
			}
			got := kwokTestOutput(t, l, in)
			wantData, err := os.ReadFile(strings.TrimSuffix(in, ".input.yaml") + ".output.yaml")
			if err != nil {
				t.Fatal(err)
			}
			var want any
			if err := yaml.Unmarshal(wantData, &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(dropPatchTypes(want), dropPatchTypes(got)); diff != "" {
				t.Errorf("output (-kwok +nodelet):\n%s", diff)
			}
		})
	}
}

func kwokTestOutput(t *testing.T, l Lifecycle, inputFile string) any {
	t.Helper()
	data, err := os.ReadFile(inputFile)
	if err != nil {
		t.Fatal(err)
	}
	jsonData, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := NewObject(jsonData)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := obj.data["metadata"].(map[string]any)
	apiVersion, _ := obj.data["apiVersion"].(string)
	kind, _ := obj.data["kind"].(string)
	out := map[string]any{"apiGroup": apiVersion, "kind": kind, "name": meta["name"]}
	if ns, ok := meta["namespace"]; ok {
		out["namespace"] = ns
	}
	var stages []any
	for _, s := range l.For(apiVersion, kind).Candidates(obj) {
		st := map[string]any{"stage": s.Name()}
		if d, ok := s.delayBounds(obj, kwokNow); ok {
			var ns []any
			for _, x := range d {
				ns = append(ns, float64(x))
			}
			st["delay"] = ns
		}
		if w, ok := s.Weight(obj); ok {
			st["weight"] = float64(w)
		}
		actions, err := s.next(obj, placeholderFuncs())
		if err != nil {
			t.Fatal(err)
		}
		next := []any{}
		for _, a := range actions {
			switch {
			case a.Event != nil:
				next = append(next, map[string]any{"kind": "event", "type": a.Event.Type, "reason": a.Event.Reason, "message": a.Event.Message})
			case a.Delete:
				next = append(next, map[string]any{"kind": "delete"})
			case a.Patch != nil:
				var d any
				if err := yaml.Unmarshal(a.Patch.Data, &d); err != nil {
					t.Fatal(err)
				}
				p := map[string]any{"kind": "patch", "type": string(a.Patch.Type), "data": d}
				if a.Patch.Subresource != "" {
					p["subresource"] = a.Patch.Subresource
				}
				next = append(next, p)
			}
		}
		if s.ImmediateNextStage() {
			next = append(next, map[string]any{"kind": "immediate"})
		}
		st["next"] = next
		stages = append(stages, st)
	}
	if stages == nil {
		stages = []any{}
	}
	out["stages"] = stages
	// Through YAML, as kwok's output is read back.
	b, err := yaml.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// placeholderFuncs stand for the functions of the node and the pod as in
// kwok's stage test: "<Name(args)>", and two of them for lists.
func placeholderFuncs() template.FuncMap {
	call := func(name string, args []any) string {
		if len(args) == 0 {
			return "<" + name + ">"
		}
		var as []string
		for _, a := range args {
			s := fmt.Sprintf("%#v", a)
			if s == "" {
				s = `""`
			}
			as = append(as, s)
		}
		return "<" + name + "(" + strings.Join(as, ", ") + ")>"
	}
	m := template.FuncMap{}
	for _, n := range []string{"NodeIP", "NodeName", "NodePort", "PodIP", "NodeIPWith", "PodIPWith", "Now", "Version"} {
		m[n] = func(args ...any) any { return call(n, args) }
	}
	for _, n := range []string{"NodeIPsWith", "PodIPsWith"} {
		m[n] = func(args ...any) any {
			c := call(n, args)
			return []any{"<0 of " + c[1:], "<1 of " + c[1:]}
		}
	}
	return m
}

func dropPatchTypes(v any) any {
	switch t := v.(type) {
	case map[string]any:
		if t["kind"] == "patch" {
			delete(t, "type")
		}
		for k, x := range t {
			t[k] = dropPatchTypes(x)
		}
	case []any:
		for i := range t {
			t[i] = dropPatchTypes(t[i])
		}
	}
	return v
}
