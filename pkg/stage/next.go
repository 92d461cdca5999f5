package stage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"text/template"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	kwokv1alpha1 "sigs.k8s.io/kwok/pkg/apis/v1alpha1"
	"sigs.k8s.io/yaml"
)

// Action is one thing a stage does next, in order: exactly one field is
// set.
type Action struct {
	// Event is an Event to record on the object.
	Event *kwokv1alpha1.StageEvent
	// Patch is a change to the object: its finalizers (a JSON patch of the
	// object itself), a rendered status template (a patch of the status
	// subresource), or another of the stage's patches.
	Patch *Patch
	// Delete deletes the object.
	Delete bool
}

// Patch is a patch of the object, as kwok would send it.
type Patch struct {
	Type types.PatchType
	// Subresource is "status" for a status template, "" for the object.
	Subresource string
	Data        []byte
}

// Next is what the stage does to obj, in kwok's order: for each step its
// event, then its finalizers, then its delete or else its patch; after a
// delete only events follow. Templates see obj's JSON form and the
// functions of env. The error names the stage and the step.
func (s *Stage) Next(obj *Object, env *Env) ([]Action, error) {
	return s.next(obj, env.funcs())
}

func (s *Stage) next(obj *Object, funcs template.FuncMap) ([]Action, error) {
	var out []Action
	deleted := false
	finalizers := obj.finalizers
	for i := range s.steps {
		st := &s.steps[i]
		if st.event != nil {
			out = append(out, Action{Event: st.event})
		}
		if deleted {
			continue
		}
		if st.finalizers != nil {
			ops, after := finalizerOps(finalizers, st.finalizers)
			if len(ops) > 0 {
				data, err := json.Marshal(ops)
				if err != nil {
					return nil, fmt.Errorf("stage %q: step %d: finalizers: %w", s.name, i, err)
				}
				out = append(out, Action{Patch: &Patch{Type: types.JSONPatchType, Data: data}})
				finalizers = after
			}
		}
		if st.delete {
			deleted = true
			out = append(out, Action{Delete: true})
			continue
		}
		if st.patch != nil {
			p, err := s.render(st.patch, obj, funcs)
			if err != nil {
				return nil, fmt.Errorf("stage %q: step %d: %w", s.name, i, err)
			}
			out = append(out, Action{Patch: p})
		}
	}
	return out, nil
}

func (s *Stage) render(ps *patchStep, obj *Object, funcs template.FuncMap) (*Patch, error) {
	t, err := ps.tmpl.Clone()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := t.Funcs(funcs).Execute(&buf, obj.data); err != nil {
		return nil, fmt.Errorf("render template: %w", err)
	}
	data, err := yaml.YAMLToJSON(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("rendered template is not YAML: %w: %s", err, buf.String())
	}
	typ := ps.typ
	if typ == "" {
		// kwok patches its typed Pods and Nodes with a strategic merge
		// patch, other objects with a merge patch.
		typ = kwokv1alpha1.StagePatchTypeMergePatch
		if s.ref.Kind == "Pod" || s.ref.Kind == "Node" {
			typ = kwokv1alpha1.StagePatchTypeStrategicMergePatch
		}
	}
	p := &Patch{Subresource: ps.subresource}
	switch typ {
	case kwokv1alpha1.StagePatchTypeJSONPatch:
		p.Type = types.JSONPatchType
		if ps.root != "" {
			var ops []map[string]any
			if err := json.Unmarshal(data, &ops); err != nil {
				return nil, fmt.Errorf("rendered JSON patch: %w", err)
			}
			for _, op := range ops {
				if path, ok := op["path"].(string); ok {
					op["path"] = "/" + ps.root + path
				}
			}
			if data, err = json.Marshal(ops); err != nil {
				return nil, err
			}
		}
	case kwokv1alpha1.StagePatchTypeStrategicMergePatch, kwokv1alpha1.StagePatchTypeMergePatch:
		p.Type = types.MergePatchType
		if typ == kwokv1alpha1.StagePatchTypeStrategicMergePatch {
			p.Type = types.StrategicMergePatchType
		}
		if ps.root != "" {
			if data, err = json.Marshal(map[string]json.RawMessage{ps.root: data}); err != nil {
				return nil, err
			}
		}
	}
	p.Data = data
	return p, nil
}

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// finalizerOps is the JSON patch that changes the finalizers have as f
// says (empty, remove, then add, as kwok does), and the finalizers after
// it.
func finalizerOps(have []string, f *kwokv1alpha1.StageFinalizers) ([]jsonPatchOp, []string) {
	values := func(items []kwokv1alpha1.FinalizerItem) []string {
		out := make([]string, 0, len(items))
		for _, it := range items {
			out = append(out, it.Value)
		}
		return out
	}
	var ops []jsonPatchOp
	after := slices.Clone(have)
	empty := f.Empty
	if !empty && len(f.Remove) > 0 {
		remove := values(f.Remove)
		var removeOps []jsonPatchOp
		for i := len(have) - 1; i >= 0; i-- {
			if slices.Contains(remove, have[i]) {
				removeOps = append(removeOps, jsonPatchOp{Op: "remove", Path: "/metadata/finalizers/" + strconv.Itoa(i)})
				after = slices.Delete(after, i, i+1)
			}
		}
		if len(removeOps) == len(have) {
			empty = true
		} else {
			ops = append(ops, removeOps...)
		}
	}
	if empty {
		if len(have) > 0 {
			ops = append(ops, jsonPatchOp{Op: "remove", Path: "/metadata/finalizers"})
		}
		after = nil
	}
	if len(f.Add) > 0 {
		// As kwok: after emptying, the list is written whole; else each
		// finalizer the object did not have is appended.
		add := values(f.Add)
		if empty || len(have) == 0 {
			ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/finalizers", Value: add})
			after = add
		} else {
			for _, v := range add {
				if !slices.Contains(have, v) {
					ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/finalizers/-", Value: v})
					after = append(after, v)
				}
			}
		}
	}
	return ops, after
}

// Apply is obj with p applied, as the API server would apply it: a
// strategic merge patch by the schema of Pods or Nodes (the kinds it
// knows), a merge patch, or a JSON patch.
func Apply(obj []byte, kind string, p *Patch) ([]byte, error) {
	switch p.Type {
	case types.StrategicMergePatchType:
		var schema any
		switch kind {
		case "Pod":
			schema = &corev1.Pod{}
		case "Node":
			schema = &corev1.Node{}
		default:
			return nil, fmt.Errorf("strategic merge patch of a %s: unknown schema", kind)
		}
		return strategicpatch.StrategicMergePatch(obj, p.Data, schema)
	case types.MergePatchType:
		return jsonpatch.MergePatch(obj, p.Data)
	case types.JSONPatchType:
		patch, err := jsonpatch.DecodePatch(p.Data)
		if err != nil {
			return nil, err
		}
		return patch.Apply(obj)
	}
	return nil, fmt.Errorf("patch type %q is not supported", p.Type)
}
