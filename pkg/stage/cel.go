package stage

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	kwokcel "sigs.k8s.io/kwok/pkg/utils/cel"
)

// CEL in a stage's selector (matchExpressions[].cel) and in its
// weightFrom and delay's …From (cel), evaluated as kwok evaluates them:
// in kwok's own environment (sigs.k8s.io/kwok/pkg/utils/cel, as
// published: Quantity, Now, Rand, SinceSecond, UnixSecond and the API
// types' fields by their JSON names) with the object as self, typed as
// kwok types it: a Pod or a Node as the API's type (an absent field is
// its zero value), any other kind as its JSON map.

// celExpr is one compiled expression and the kind self is typed as.
type celExpr struct {
	program kwokcel.Program
	typed   typedKind
}

// typedKind is how self is typed: as a map, a Pod or a Node.
type typedKind int

const (
	typedMap typedKind = iota
	typedPod
	typedNode
)

// typedKindOf is how self is typed for a stage's resourceRef.
func typedKindOf(apiGroup, kind string) typedKind {
	if apiGroup != "" && apiGroup != "v1" {
		return typedMap
	}
	switch kind {
	case "Pod":
		return typedPod
	case "Node":
		return typedNode
	}
	return typedMap
}

// celEnvironments are kwok's environments, one per way self is typed,
// made when first needed; each caches the programs it compiled.
var celEnvironments = struct {
	sync.Mutex
	byKind map[typedKind]*kwokcel.Environment
}{byKind: map[typedKind]*kwokcel.Environment{}}

func celEnvironment(t typedKind) (*kwokcel.Environment, error) {
	celEnvironments.Lock()
	defer celEnvironments.Unlock()
	if env, ok := celEnvironments.byKind[t]; ok {
		return env, nil
	}
	var self any = map[string]any{}
	switch t {
	case typedPod:
		self = (*corev1.Pod)(nil)
	case typedNode:
		self = (*corev1.Node)(nil)
	}
	env, err := kwokcel.NewEnvironment(kwokcel.EnvironmentConfig{
		Types:       kwokcel.DefaultTypes,
		Conversions: kwokcel.DefaultConversions,
		Funcs:       kwokcel.DefaultFuncs,
		Methods:     kwokcel.FuncsToMethods(kwokcel.DefaultFuncs),
		Vars:        map[string]any{"self": self},
	})
	if err != nil {
		return nil, fmt.Errorf("kwok's CEL environment: %w", err)
	}
	celEnvironments.byKind[t] = env
	return env, nil
}

// compileCEL compiles an expression of a stage for objects of kind.
func compileCEL(ref refKind, src string) (*celExpr, error) {
	if src == "" {
		return nil, errors.New("expression: is required")
	}
	t := typedKindOf(ref.apiGroup, ref.kind)
	env, err := celEnvironment(t)
	if err != nil {
		return nil, err
	}
	program, err := env.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("expression %q: %w", src, err)
	}
	return &celExpr{program: program, typed: t}, nil
}

// refKind is the kind of object a stage is for.
type refKind struct{ apiGroup, kind string }

// eval evaluates the expression with obj as self.
func (e *celExpr) eval(obj *Object) (kwokcel.Val, error) {
	self, err := obj.celSelf(e.typed)
	if err != nil {
		return nil, err
	}
	out, _, err := e.program.Eval(map[string]any{"self": self})
	return out, err
}

// celSelf is the object as self of an expression typed t: its JSON map,
// or the Pod or Node it decodes to (decoded once).
func (o *Object) celSelf(t typedKind) (any, error) {
	if t == typedMap {
		return o.data, nil
	}
	o.typedOnce.Do(func() {
		raw, err := json.Marshal(o.data)
		if err != nil {
			o.typedErr = err
			return
		}
		var v any = &corev1.Pod{}
		if t == typedNode {
			v = &corev1.Node{}
		}
		o.typedErr = json.Unmarshal(raw, v)
		o.typed = v
	})
	if o.typedErr != nil {
		return nil, fmt.Errorf("the object as self: %w", o.typedErr)
	}
	return o.typed, nil
}
