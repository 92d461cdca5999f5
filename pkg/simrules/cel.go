package simrules

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/kwok/pkg/kwok/metrics"
)

// CEL is kwok's environment for the expressions of ResourceUsage and
// ClusterResourceUsage (kwok's sigs.k8s.io/kwok/pkg/kwok/metrics, used as
// published): the variables node, pod and container, and the functions
// of kwok's sigs.k8s.io/kwok/pkg/utils/cel (Quantity, Now, Rand,
// SinceSecond, UnixSecond …). Now is read from the clock given; kwok's
// SinceSecond reads the wall clock whatever the clock. kwok's Usage and
// CumulativeUsage methods (another container's, pod's or node's usage)
// are not provided: an expression calling them does not compile.
type CEL struct {
	env *metrics.Environment
}

// NewCEL is kwok's environment with Now read from clk.
func NewCEL(clk clock.PassiveClock) (*CEL, error) {
	env, err := metrics.NewEnvironment(metrics.EnvironmentConfig{Now: clk.Now})
	if err != nil {
		return nil, fmt.Errorf("kwok's CEL environment: %w", err)
	}
	return &CEL{env: env}, nil
}

// wallCEL is the environment on the wall clock, for a nil *CEL.
var wallCEL = sync.OnceValues(func() (*CEL, error) { return NewCEL(clock.RealClock{}) })

// compile compiles an expression; a nil c is kwok's environment on the
// wall clock.
func (c *CEL) compile(src string) (*metrics.Evaluator, error) {
	if c == nil {
		var err error
		if c, err = wallCEL(); err != nil {
			return nil, err
		}
	}
	return c.env.Compile(src)
}

// UsageData is what an expression sees: the node, the pod and the
// container whose usage it gives. None may be nil.
type UsageData struct {
	Node      *corev1.Node
	Pod       *corev1.Pod
	Container *corev1.Container
}

// figure is one resource's usage in an entry: a value, or an expression
// compiled when its object was.
type figure struct {
	value float64
	expr  *metrics.Evaluator
	path  string // the expression's field, for its errors
}

// eval is the figure for data: kwok's fallback 0 and an error when the
// expression fails or gives less than 0.
func (f *figure) eval(ctx context.Context, data UsageData) (float64, error) {
	if f.expr == nil {
		return f.value, nil
	}
	v, err := f.expr.EvaluateFloat64(ctx, metrics.Data{Node: data.Node, Pod: data.Pod, Container: data.Container})
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s: %w", f.path, err)
	case !(v >= 0): // NaN too
		return 0, fmt.Errorf("%s: gave %v, must not be negative", f.path, v)
	}
	return v, nil
}
