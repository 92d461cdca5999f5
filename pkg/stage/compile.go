// Package stage plays kwok's Stage objects (kwok.x-k8s.io/v1alpha1, the
// published API types of sigs.k8s.io/kwok) on one object at a time: it
// compiles stages, tells which stage an object matches (selector, weight),
// how long to wait (delay and jitter) and what the stage does next
// (events, finalizers, patches such as the rendered statusTemplate,
// delete), and applies a patch to the object locally.
//
// It decides and never acts: it holds no clients, no timers and no
// goroutines, and imports no agent package. Whoever plays a lifecycle
// (the sim provider) keeps the objects, the clock and the randomness, and
// carries out the actions it is given.
package stage

import (
	"errors"
	"fmt"
	"strings"
	"text/template"
	"time"

	"github.com/itchyny/gojq"
	"k8s.io/apimachinery/pkg/labels"
	kwokv1alpha1 "sigs.k8s.io/kwok/pkg/apis/v1alpha1"
)

// Stage is one compiled kwok Stage.
type Stage struct {
	name string
	ref  kwokv1alpha1.StageResourceRef

	// matchLabels and matchAnnotations are nil when not given.
	matchLabels, matchAnnotations labels.Selector
	exprs                         []requirement

	weight     int64
	weightFrom *valueFrom

	delay *delay
	steps []step

	immediateNext bool
}

// requirement is one matchExpression: a jq query over the object and an
// operator on its results, or a CEL expression.
type requirement struct {
	query    *gojq.Code
	operator kwokv1alpha1.SelectorOperator
	values   []string
	cel      *celExpr
}

// valueFrom is an ExpressionFrom: a jq query or a CEL expression.
type valueFrom struct {
	jq  *gojq.Code
	cel *celExpr
}

// delay is spec.delay: a duration and an upper bound for the jitter, each
// fixed and/or read from the object.
type delay struct {
	duration, jitter         *time.Duration
	durationFrom, jitterFrom *valueFrom
	hasJitter                bool
}

// step is one thing a stage does next, in kwok's order.
type step struct {
	event      *kwokv1alpha1.StageEvent
	finalizers *kwokv1alpha1.StageFinalizers
	delete     bool
	patch      *patchStep
}

type patchStep struct {
	subresource, root string
	typ               kwokv1alpha1.StagePatchType
	tmpl              *template.Template
}

// Name is the stage's name.
func (s *Stage) Name() string { return s.name }

// Kind is the kind of object the stage is for (Pod, Node, …).
func (s *Stage) Kind() string { return s.ref.Kind }

// ImmediateNextStage tells whether the next stage is matched at once after
// this one is played, rather than on the object's next change. (A player
// that matches again after every stage it plays may ignore it.)
func (s *Stage) ImmediateNextStage() bool { return s.immediateNext }

// Compile checks and compiles a kwok Stage. A stage without a selector
// is nil with no error: kwok ignores such stages. The error names the
// stage and each field at fault.
func Compile(in *kwokv1alpha1.Stage) (*Stage, error) {
	spec := &in.Spec
	if spec.Selector == nil {
		return nil, nil
	}
	s := &Stage{
		name:   in.Name,
		ref:    spec.ResourceRef,
		weight: int64(spec.Weight),
	}
	ref := refKind{apiGroup: spec.ResourceRef.APIGroup, kind: spec.ResourceRef.Kind}
	var errs []error
	fail := func(field string, err error) {
		errs = append(errs, fmt.Errorf("%s: %w", field, err))
	}
	if in.Name == "" {
		fail("metadata.name", errors.New("is required"))
	}
	if spec.ResourceRef.Kind == "" {
		fail("spec.resourceRef.kind", errors.New("is required"))
	}

	sel := spec.Selector
	if sel.MatchLabels != nil {
		if err := validateSet(sel.MatchLabels); err != nil {
			fail("spec.selector.matchLabels", err)
		}
		s.matchLabels = labels.SelectorFromSet(sel.MatchLabels)
	}
	if sel.MatchAnnotations != nil {
		s.matchAnnotations = labels.SelectorFromSet(sel.MatchAnnotations)
	}
	for i, e := range sel.MatchExpressions {
		field := fmt.Sprintf("spec.selector.matchExpressions[%d]", i)
		r, err := compileRequirement(ref, e)
		if err != nil {
			fail(field, err)
			continue
		}
		s.exprs = append(s.exprs, r)
	}

	if spec.Weight < 0 {
		fail("spec.weight", fmt.Errorf("%d must not be negative", spec.Weight))
	}
	if spec.WeightFrom != nil {
		q, err := compileFrom(ref, spec.WeightFrom)
		if err != nil {
			fail("spec.weightFrom", err)
		}
		s.weightFrom = q
	}

	if d := spec.Delay; d != nil {
		s.delay = &delay{}
		if d.DurationMilliseconds != nil {
			if *d.DurationMilliseconds < 0 {
				fail("spec.delay.durationMilliseconds", fmt.Errorf("%d must not be negative", *d.DurationMilliseconds))
			}
			s.delay.duration = ptr(time.Duration(*d.DurationMilliseconds) * time.Millisecond)
		}
		if d.JitterDurationMilliseconds != nil {
			if *d.JitterDurationMilliseconds < 0 {
				fail("spec.delay.jitterDurationMilliseconds", fmt.Errorf("%d must not be negative", *d.JitterDurationMilliseconds))
			}
			s.delay.jitter = ptr(time.Duration(*d.JitterDurationMilliseconds) * time.Millisecond)
		}
		if d.DurationFrom != nil {
			q, err := compileFrom(ref, d.DurationFrom)
			if err != nil {
				fail("spec.delay.durationFrom", err)
			}
			s.delay.durationFrom = q
		}
		if d.JitterDurationFrom != nil {
			q, err := compileFrom(ref, d.JitterDurationFrom)
			if err != nil {
				fail("spec.delay.jitterDurationFrom", err)
			}
			s.delay.jitterFrom = q
		}
		s.delay.hasJitter = d.JitterDurationMilliseconds != nil || d.JitterDurationFrom != nil
	}

	steps, field := stepsOf(spec)
	for i, st := range steps {
		f := fmt.Sprintf("%s[%d]", field, i)
		c, err := compileStep(st, f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.steps = append(s.steps, c)
	}
	s.immediateNext = spec.ImmediateNextStage != nil && *spec.ImmediateNextStage

	if err := errors.Join(errs...); err != nil {
		name := in.Name
		if name == "" {
			name = "(unnamed)"
		}
		return nil, fmt.Errorf("stage %q: %w", name, err)
	}
	return s, nil
}

func validateSet(set map[string]string) error {
	_, err := labels.ValidatedSelectorFromSet(set)
	return err
}

// stepsOf is the stage's steps, its next written as steps the way kwok
// converts it when it has none: event, finalizers, the patches (else the
// status template as a patch of the status subresource), delete. field
// names where they come from, for errors.
func stepsOf(spec *kwokv1alpha1.StageSpec) ([]kwokv1alpha1.StageStep, string) {
	if len(spec.Steps) != 0 || spec.Next == nil {
		return spec.Steps, "spec.steps"
	}
	n := spec.Next
	var out []kwokv1alpha1.StageStep
	if n.Event != nil {
		out = append(out, kwokv1alpha1.StageStep{Event: n.Event})
	}
	if n.Finalizers != nil {
		out = append(out, kwokv1alpha1.StageStep{Finalizers: n.Finalizers})
	}
	switch {
	case len(n.Patches) != 0:
		for i := range n.Patches {
			out = append(out, kwokv1alpha1.StageStep{Patch: &n.Patches[i]})
		}
	case n.StatusTemplate != "":
		sub := "status"
		if n.StatusSubresource != nil {
			sub = *n.StatusSubresource
		}
		out = append(out, kwokv1alpha1.StageStep{Patch: &kwokv1alpha1.StagePatch{
			Subresource: sub, Root: "status", Template: n.StatusTemplate,
		}})
	}
	if n.Delete {
		out = append(out, kwokv1alpha1.StageStep{Delete: true})
	}
	return out, "spec.next (as steps)"
}

func compileStep(in kwokv1alpha1.StageStep, field string) (step, error) {
	out := step{event: in.Event, finalizers: in.Finalizers, delete: in.Delete}
	if in.Apply != nil {
		return out, fmt.Errorf("%s.apply: is not supported", field)
	}
	if in.Finalizers != nil {
		for _, set := range [][]kwokv1alpha1.FinalizerItem{in.Finalizers.Add, in.Finalizers.Remove} {
			for _, f := range set {
				if f.Value == "" {
					return out, fmt.Errorf("%s.finalizers: a finalizer value is empty", field)
				}
			}
		}
	}
	if in.Event != nil {
		switch in.Event.Type {
		case "Normal", "Warning":
		default:
			return out, fmt.Errorf("%s.event.type: %q must be Normal or Warning", field, in.Event.Type)
		}
	}
	if p := in.Patch; p != nil {
		ps := &patchStep{subresource: p.Subresource, root: p.Root}
		if p.Type != nil {
			ps.typ = *p.Type
		}
		switch ps.typ {
		case "", kwokv1alpha1.StagePatchTypeMergePatch, kwokv1alpha1.StagePatchTypeStrategicMergePatch, kwokv1alpha1.StagePatchTypeJSONPatch:
		default:
			return out, fmt.Errorf("%s.patch.type: %q is not supported (json, merge or strategic)", field, ps.typ)
		}
		tmpl, err := parseTemplate(p.Template)
		if err != nil {
			what := "patch.template"
			if p.Root == "status" {
				what = "statusTemplate"
			}
			return out, fmt.Errorf("%s.%s: %w", field, what, err)
		}
		ps.tmpl = tmpl
		out.patch = ps
	}
	return out, nil
}

func compileRequirement(ref refKind, e kwokv1alpha1.MatchExpression) (requirement, error) {
	key, op, values := e.Key, e.Operator, e.Values
	switch {
	case e.CEL != nil:
		c, err := compileCEL(ref, e.CEL.Expression)
		if err != nil {
			return requirement{}, fmt.Errorf("cel: %w", err)
		}
		return requirement{cel: c}, nil
	case e.JQ != nil:
		key, op, values = e.JQ.Key, e.JQ.Operator, e.JQ.Values
	}
	if key == "" {
		return requirement{}, errors.New("key: is required")
	}
	q, err := compileQuery(key)
	if err != nil {
		return requirement{}, fmt.Errorf("key %q: %w", key, err)
	}
	switch op {
	case kwokv1alpha1.SelectorOpIn, kwokv1alpha1.SelectorOpNotIn:
		if len(values) == 0 {
			return requirement{}, fmt.Errorf("values: must not be empty for operator %s", op)
		}
	case kwokv1alpha1.SelectorOpExists, kwokv1alpha1.SelectorOpDoesNotExist:
		if len(values) != 0 {
			return requirement{}, fmt.Errorf("values: must be empty for operator %s", op)
		}
	default:
		return requirement{}, fmt.Errorf("operator: %q is not one of In, NotIn, Exists, DoesNotExist", op)
	}
	return requirement{query: q, operator: op, values: values}, nil
}

// compileFrom compiles an ExpressionFrom: its CEL expression, or its jq
// one (its jq form or its older expressionFrom string).
func compileFrom(ref refKind, e *kwokv1alpha1.ExpressionFrom) (*valueFrom, error) {
	expr := e.ExpressionFrom
	switch {
	case e.CEL != nil:
		c, err := compileCEL(ref, e.CEL.Expression)
		if err != nil {
			return nil, fmt.Errorf("cel: %w", err)
		}
		return &valueFrom{cel: c}, nil
	case e.JQ != nil:
		expr = e.JQ.Expression
	}
	if expr == "" {
		return nil, errors.New("expression: is required")
	}
	q, err := compileQuery(expr)
	if err != nil {
		return nil, fmt.Errorf("expression %q: %w", expr, err)
	}
	return &valueFrom{jq: q}, nil
}

func compileQuery(src string) (*gojq.Code, error) {
	q, err := gojq.Parse(src)
	if err != nil {
		return nil, err
	}
	return gojq.Compile(q)
}

// parseTemplate parses a template as kwok does (surrounding space
// trimmed), knowing every function a stage may call.
func parseTemplate(text string) (*template.Template, error) {
	return template.New("template").Option("missingkey=default").Funcs(parseFuncs).Parse(strings.TrimSpace(text))
}

func ptr[T any](v T) *T { return &v }
