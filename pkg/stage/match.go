package stage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/itchyny/gojq"
	"k8s.io/apimachinery/pkg/labels"
	kwokv1alpha1 "sigs.k8s.io/kwok/pkg/apis/v1alpha1"
	kwokcel "sigs.k8s.io/kwok/pkg/utils/cel"
)

// Object is an object as stages see it: its JSON form (numbers kept as
// written), its labels and its annotations.
type Object struct {
	data                map[string]any
	labels, annotations labels.Set
	finalizers          []string

	// typed is data decoded to its API type, for CEL (celSelf).
	typedOnce sync.Once
	typed     any
	typedErr  error
}

// NewObject is v (a typed object, a map, or JSON bytes) as stages see it.
func NewObject(v any) (*Object, error) {
	raw, ok := v.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("encode object: %w", err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var data map[string]any
	if err := dec.Decode(&data); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	o := &Object{data: data}
	meta, _ := data["metadata"].(map[string]any)
	o.labels = stringMap(meta["labels"])
	o.annotations = stringMap(meta["annotations"])
	if fs, ok := meta["finalizers"].([]any); ok {
		for _, f := range fs {
			if s, ok := f.(string); ok {
				o.finalizers = append(o.finalizers, s)
			}
		}
	}
	return o, nil
}

// Data is the object's JSON form; the caller must not change it.
func (o *Object) Data() map[string]any { return o.data }

// JSON is the object encoded as JSON.
func (o *Object) JSON() ([]byte, error) { return json.Marshal(o.data) }

func stringMap(v any) labels.Set {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	out := make(labels.Set, len(m))
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// Lifecycle is a set of stages for one kind of object.
type Lifecycle []*Stage

// For is the stages of l for objects of kind (Pod, Node …) in apiGroup
// (kwok writes "v1" for the core group).
func (l Lifecycle) For(apiGroup, kind string) Lifecycle {
	var out Lifecycle
	for _, s := range l {
		if s.ref.Kind == kind && (s.ref.APIGroup == apiGroup || s.ref.APIGroup == "" && apiGroup == "v1") {
			out = append(out, s)
		}
	}
	return out
}

// Matching is every stage the object matches, without weights.
func (l Lifecycle) Matching(obj *Object) []*Stage {
	var out []*Stage
	for _, s := range l {
		if s.Matches(obj) {
			out = append(out, s)
		}
	}
	return out
}

// Candidates is the stages Match chooses from, as kwok lists them: the
// matching stages, less those whose weight is 0 (or could not be read)
// when others have one.
func (l Lifecycle) Candidates(obj *Object) []*Stage {
	stages := l.Matching(obj)
	if len(stages) <= 1 {
		return stages
	}
	weights, total, unread := weightsOf(stages, obj)
	if unread == len(stages) || total == 0 && unread == 0 {
		return stages
	}
	var out []*Stage
	for i, s := range stages {
		if weights[i] > 0 || total == 0 && weights[i] == 0 {
			out = append(out, s)
		}
	}
	return out
}

// Match chooses the stage to play next on obj, or nil if none matches:
// among several, at random by their weights, as kwok chooses (uniformly
// when no stage has a weight).
func (l Lifecycle) Match(obj *Object, rng *rand.Rand) *Stage {
	stages := l.Matching(obj)
	switch len(stages) {
	case 0:
		return nil
	case 1:
		return stages[0]
	}
	weights, total, unread := weightsOf(stages, obj)
	if unread == len(stages) || total == 0 && unread == 0 {
		return stages[rng.IntN(len(stages))]
	}
	if total == 0 {
		var weighted []*Stage
		for i, s := range stages {
			if weights[i] == 0 {
				weighted = append(weighted, s)
			}
		}
		return weighted[rng.IntN(len(weighted))]
	}
	off := rng.Int64N(total)
	for i, s := range stages {
		if weights[i] <= 0 {
			continue
		}
		if off -= weights[i]; off < 0 {
			return s
		}
	}
	return stages[len(stages)-1]
}

// weightsOf is each stage's weight (-1 when it could not be read), their
// total and how many could not be read.
func weightsOf(stages []*Stage, obj *Object) (weights []int64, total int64, unread int) {
	weights = make([]int64, len(stages))
	for i, s := range stages {
		w, ok := s.Weight(obj)
		if !ok {
			weights[i] = -1
			unread++
			continue
		}
		weights[i] = w
		total += w
	}
	return weights, total, unread
}

// Matches tells whether obj matches the stage's selector.
func (s *Stage) Matches(obj *Object) bool {
	if s.matchLabels != nil && !s.matchLabels.Matches(obj.labels) {
		return false
	}
	if s.matchAnnotations != nil && !s.matchAnnotations.Matches(obj.annotations) {
		return false
	}
	for i := range s.exprs {
		if !s.exprs[i].matches(obj) {
			return false
		}
	}
	return true
}

func (r *requirement) matches(obj *Object) bool {
	if r.cel != nil {
		// As in kwok, an expression that fails on the object, or gives
		// no bool, does not match it.
		v, err := r.cel.eval(obj)
		if err != nil {
			return false
		}
		ok, err := kwokcel.AsBool(v)
		return err == nil && ok
	}
	got := query(r.query, obj)
	switch r.operator {
	case kwokv1alpha1.SelectorOpIn:
		return slices.ContainsFunc(got, r.isValue)
	case kwokv1alpha1.SelectorOpNotIn:
		return !slices.ContainsFunc(got, r.isValue)
	case kwokv1alpha1.SelectorOpExists:
		return len(got) > 0
	case kwokv1alpha1.SelectorOpDoesNotExist:
		return len(got) == 0
	}
	return false
}

func (r *requirement) isValue(v any) bool {
	var s string
	switch t := v.(type) {
	case string:
		s = t
	case bool:
		s = strconv.FormatBool(t)
	case int:
		s = strconv.Itoa(t)
	case json.Number:
		s = t.String()
	default:
		return false
	}
	return slices.Contains(r.values, s)
}

// query runs q over obj and returns its non-null results. As in kwok, a
// query that fails on this object (iterating over a missing list, say)
// has no results.
//
// A query runs at most queryBudget of jq's instructions and keeps at most
// maxResults: stages from the cluster are anyone's, and jq can loop. The
// bound is the work done, not the time taken: a wall-clock timeout cut
// short, on a busy machine, queries that take microseconds, and the pods
// they failed to match stayed Pending for good.
func query(q *gojq.Code, obj *Object) []any {
	var out []any
	iter := q.RunWithContext(&stepBudget{Context: context.Background(), left: queryBudget}, obj.data)
	for len(out) < maxResults {
		v, ok := iter.Next()
		if !ok {
			return out
		}
		if _, isErr := v.(error); isErr {
			return nil
		}
		if v != nil {
			out = append(out, v)
		}
	}
	return out
}

const (
	queryBudget = 1_000_000
	maxResults  = 1024
)

// stepBudget is a context that jq sees cancelled once it has run left
// instructions: gojq asks for Done before each one.
type stepBudget struct {
	context.Context
	left int
}

// spent is Done's channel once the budget is spent.
var spent = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

var errBudgetSpent = errors.New("the query ran out of its instructions")

func (b *stepBudget) Done() <-chan struct{} {
	if b.left--; b.left < 0 {
		return spent
	}
	return nil // never ready
}

func (b *stepBudget) Err() error {
	if b.left < 0 {
		return errBudgetSpent
	}
	return nil
}

// Weight is the stage's weight for obj: weightFrom's value when it reads
// a number, else spec.weight; ok is false when weightFrom reads a value
// that is no number (kwok then leaves the stage out when others have a
// weight).
func (s *Stage) Weight(obj *Object) (w int64, ok bool) {
	if s.weightFrom == nil {
		return s.weight, true
	}
	if c := s.weightFrom.cel; c != nil {
		v, err := c.eval(obj)
		if err != nil {
			return s.weight, false
		}
		n, err := kwokcel.AsInt64(v)
		return n, err == nil
	}
	got := query(s.weightFrom.jq, obj)
	if len(got) == 0 {
		return s.weight, true
	}
	switch t := got[0].(type) {
	case string:
		n, err := strconv.ParseInt(t, 0, 64)
		return n, err == nil && t != ""
	case json.Number:
		if n, err := t.Int64(); err == nil {
			return n, true
		}
		f, err := t.Float64()
		return int64(f), err == nil
	case int:
		return int64(t), true
	case float64:
		return int64(t), true
	}
	return s.weight, true
}

// Delay is how long to wait before playing the stage on obj at now: its
// duration, or, with a jitter above it, a random time between the two
// (the jitter alone when it is below the duration, as in kwok). A
// duration read from the object is a Go duration ("3s") or a time
// (RFC 3339), taken as the time left until it.
func (s *Stage) Delay(obj *Object, now time.Time, rng *rand.Rand) time.Duration {
	lo, hi := s.DelayRange(obj, now)
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// DelayRange is the least and the most Delay may be for obj at now.
func (s *Stage) DelayRange(obj *Object, now time.Time) (lo, hi time.Duration) {
	d, ok := s.delayBounds(obj, now)
	if !ok {
		return 0, 0
	}
	return d[0], d[len(d)-1]
}

// delayBounds is kwok's possible delays: none (ok false), [d], or [d,
// jitter].
func (s *Stage) delayBounds(obj *Object, now time.Time) ([]time.Duration, bool) {
	if s.delay == nil {
		return nil, false
	}
	d, ok := durationOf(s.delay.duration, s.delay.durationFrom, obj, now)
	if !ok {
		return nil, false
	}
	if !s.delay.hasJitter {
		return []time.Duration{d}, true
	}
	j, ok := durationOf(s.delay.jitter, s.delay.jitterFrom, obj, now)
	if !ok {
		return []time.Duration{d}, true
	}
	if j <= d {
		return []time.Duration{j}, true
	}
	return []time.Duration{d, j}, true
}

func durationOf(value *time.Duration, from *valueFrom, obj *Object, now time.Time) (time.Duration, bool) {
	if from != nil && from.cel != nil {
		// kwok's CEL durations: a duration, a number of nanoseconds or
		// a Go duration string; a failure is no delay.
		v, err := from.cel.eval(obj)
		if err != nil {
			return 0, false
		}
		d, err := kwokcel.AsDuration(v)
		return d, err == nil
	}
	if from != nil {
		if got := query(from.jq, obj); len(got) > 0 {
			if t, ok := got[0].(string); ok {
				if t == "" {
					return 0, false
				}
				if at, err := time.Parse(time.RFC3339Nano, t); err == nil {
					return at.Sub(now), true
				}
				if d, err := time.ParseDuration(t); err == nil {
					return d, true
				}
			}
		}
	}
	if value == nil {
		return 0, false
	}
	return *value, true
}
