package simrules

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	kwokv1alpha1 "sigs.k8s.io/kwok/pkg/apis/v1alpha1"
)

// ErrNoRule says that no object of kwok's is for the pod: the sim
// provider then does what it does without them.
var ErrNoRule = errors.New("no kwok object for the pod")

// Rules are the rules in force, looked up as kwok looks them up: the
// namespaced object naming the pod, if there is one, decides alone;
// otherwise the first cluster object (in the order given) that selects
// the pod and has an entry for the container (or port). Within an
// object, the entry naming the container (or port) wins over the first
// entry that names none. A nil *Rules has none.
type Rules struct {
	own     [whatUsage + 1]map[string]*Rule // by namespace/name
	cluster [whatUsage + 1][]*Rule
}

// NewRules indexes rules; of two namespaced objects of a kind for one
// pod the first is kept.
func NewRules(rules []*Rule) *Rules {
	out := &Rules{}
	for _, r := range rules {
		w := r.Kind.what
		if r.Kind.Cluster {
			out.cluster[w] = append(out.cluster[w], r)
			continue
		}
		if out.own[w] == nil {
			out.own[w] = map[string]*Rule{}
		}
		k := r.Namespace + "/" + r.Name
		if _, ok := out.own[w][k]; !ok {
			out.own[w][k] = r
		}
	}
	return out
}

// lookup finds the entry of the rules of w for the pod: entry(r) returns
// the index of r's entry for what is asked, or -1.
func (rs *Rules) lookup(w what, namespace, pod string, entry func(*Rule) int) (*Rule, int, error) {
	if rs == nil {
		return nil, -1, ErrNoRule
	}
	if r, ok := rs.own[w][namespace+"/"+pod]; ok {
		if i := entry(r); i >= 0 {
			return r, i, nil
		}
		return r, -1, fmt.Errorf("%s has no entry for it", r)
	}
	for _, r := range rs.cluster[w] {
		if !r.matches(namespace, pod) {
			continue
		}
		if i := entry(r); i >= 0 {
			return r, i, nil
		}
	}
	return nil, -1, ErrNoRule
}

// pick is the index of the entry whose keys hold k, else of the first
// entry without keys, else -1.
func pick[E any, K comparable](entries []E, keys func(E) []K, k K) int {
	first := -1
	for i, e := range entries {
		ks := keys(e)
		if len(ks) == 0 {
			if first < 0 {
				first = i
			}
			continue
		}
		if contains(ks, k) {
			return i
		}
	}
	return first
}

// Log is the log entry for a container: an error wrapping ErrNoRule when
// no Logs or ClusterLogs is for the pod, another when the pod's Logs has
// no entry for the container.
func (rs *Rules) Log(namespace, pod, container string) (*kwokv1alpha1.Log, error) {
	r, i, err := rs.lookup(whatLogs, namespace, pod, func(r *Rule) int {
		return pick(r.logs, func(l kwokv1alpha1.Log) []string { return l.Containers }, container)
	})
	if err != nil {
		return nil, fmt.Errorf("logs of container %q: %w", container, err)
	}
	return &r.logs[i], nil
}

// Exec is the exec entry for a container, with errors as Log's.
func (rs *Rules) Exec(namespace, pod, container string) (*kwokv1alpha1.ExecTarget, error) {
	r, i, err := rs.lookup(whatExec, namespace, pod, func(r *Rule) int {
		return pick(r.execs, func(e kwokv1alpha1.ExecTarget) []string { return e.Containers }, container)
	})
	if err != nil {
		return nil, fmt.Errorf("exec in container %q: %w", container, err)
	}
	return &r.execs[i], nil
}

// Attach is the attach entry for a container, with errors as Log's.
func (rs *Rules) Attach(namespace, pod, container string) (*kwokv1alpha1.AttachConfig, error) {
	r, i, err := rs.lookup(whatAttach, namespace, pod, func(r *Rule) int {
		return pick(r.attaches, func(a kwokv1alpha1.AttachConfig) []string { return a.Containers }, container)
	})
	if err != nil {
		return nil, fmt.Errorf("attach to container %q: %w", container, err)
	}
	return &r.attaches[i], nil
}

// Forward is the forward entry for a port of the pod, with errors as
// Log's.
func (rs *Rules) Forward(namespace, pod string, port int32) (*kwokv1alpha1.Forward, error) {
	r, i, err := rs.lookup(whatForward, namespace, pod, func(r *Rule) int {
		return pick(r.forwards, func(f kwokv1alpha1.Forward) []int32 { return f.Ports }, port)
	})
	if err != nil {
		return nil, fmt.Errorf("port-forward to port %d: %w", port, err)
	}
	return &r.forwards[i], nil
}

// Usage is the entry of a ResourceUsage or ClusterResourceUsage for a
// container, nil when none has one (a ResourceUsage naming the pod
// without one says nothing of it).
func (rs *Rules) Usage(namespace, pod, container string) *ContainerUsage {
	r, i, err := rs.lookup(whatUsage, namespace, pod, func(r *Rule) int {
		return pick(r.usages, func(u ContainerUsage) []string { return u.containers }, container)
	})
	if err != nil {
		return nil
	}
	return &r.usages[i]
}

// ContainerUsage is an entry of a ResourceUsage or ClusterResourceUsage:
// what the containers it names (or all) use.
type ContainerUsage struct {
	rule       *Rule
	containers []string
	figures    map[string]*figure // by resource name
}

// Resource is the usage of the resource named ("cpu" in cores, "memory"
// in bytes …) for data's container, as its value or expression gives it;
// ok is false when the entry does not name the resource. An expression
// that fails or gives less than 0 gives kwok's fallback, 0, and an error
// naming the object and the field.
func (u *ContainerUsage) Resource(ctx context.Context, name string, data UsageData) (v float64, ok bool, err error) {
	f, ok := u.figures[name]
	if !ok {
		return 0, false, nil
	}
	v, err = f.eval(ctx, data)
	if err != nil {
		return 0, true, fmt.Errorf("%s: %w", u.rule, err)
	}
	return v, true, nil
}

// Rule is the object the entry is of.
func (u *ContainerUsage) Rule() *Rule { return u.rule }

// Empty tells whether there are no rules.
func (rs *Rules) Empty() bool {
	if rs == nil {
		return true
	}
	for w := range rs.own {
		if len(rs.own[w]) > 0 || len(rs.cluster[w]) > 0 {
			return false
		}
	}
	return true
}

// Source gives the rules in force now.
type Source interface {
	Rules() *Rules
}

// Set is a Source of the files' rules followed by the cluster's, which
// are replaced, kind by kind, as they change; it is safe for concurrent
// use.
type Set struct {
	mu      sync.Mutex
	files   []*Rule
	cluster map[string][]*Rule // by kind
	cur     atomic.Pointer[Rules]
}

// NewSet is a Set of the files' rules.
func NewSet(files []*Rule) *Set {
	s := &Set{files: files, cluster: map[string][]*Rule{}}
	s.cur.Store(NewRules(files))
	return s
}

// Rules is the rules in force.
func (s *Set) Rules() *Rules { return s.cur.Load() }

// StoreCluster replaces the cluster's rules of one kind; the caller must
// not change them afterwards.
func (s *Set) StoreCluster(kind string, rules []*Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cluster[kind] = rules
	all := append([]*Rule(nil), s.files...)
	for _, k := range Kinds { // a fixed order of kinds
		all = append(all, s.cluster[k.Name]...)
	}
	s.cur.Store(NewRules(all))
}
