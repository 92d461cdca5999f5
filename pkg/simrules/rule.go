// Package simrules holds kwok's rules for what a simulated pod does besides
// its lifecycle: the usage it reports (ResourceUsage, ClusterResourceUsage),
// the logs it shows (Logs, ClusterLogs), what exec runs (Exec, ClusterExec),
// what attach follows (Attach, ClusterAttach) and where port-forward goes
// (PortForward, ClusterPortForward). They are
// kwok's own objects (kwok.x-k8s.io/v1alpha1), read from files or watched
// in the cluster, checked, and looked up for a pod and a container as kwok
// looks them up. The CEL expressions of usage are compiled, in kwok's
// own environment (cel.go), when their object is read, and evaluated for
// a container when asked.
//
// It decides and never acts: it reads no log file, runs no command and
// dials nothing (the sim provider does, as a rule says), and it never
// writes to the API server except Events on objects that are left out.
package simrules

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kwokv1alpha1 "sigs.k8s.io/kwok/pkg/apis/v1alpha1"
)

// What a rule is about: each kind of kwok's configures one of these, for
// pods named in its own namespace or, for its Cluster kind, selected.
type what int

const (
	whatLogs what = iota
	whatExec
	whatForward
	whatAttach
	whatUsage
)

// Kind is one of kwok's kinds this package reads.
type Kind struct {
	// Name is kwok's kind ("Logs", "ClusterLogs" …), Resource its
	// resource in the cluster ("logs", "clusterlogs" …).
	Name, Resource string
	// Cluster is set for the cluster-scoped kinds, which select pods;
	// the others are namespaced and name their pod.
	Cluster bool
	what    what
	new     func() runtime.Object
}

// Kinds are the kinds this package reads, in kwok's names.
var Kinds = []Kind{
	{Name: kwokv1alpha1.LogsKind, Resource: "logs", what: whatLogs, new: func() runtime.Object { return &kwokv1alpha1.Logs{} }},
	{Name: kwokv1alpha1.ClusterLogsKind, Resource: "clusterlogs", Cluster: true, what: whatLogs, new: func() runtime.Object { return &kwokv1alpha1.ClusterLogs{} }},
	{Name: kwokv1alpha1.ExecKind, Resource: "execs", what: whatExec, new: func() runtime.Object { return &kwokv1alpha1.Exec{} }},
	{Name: kwokv1alpha1.ClusterExecKind, Resource: "clusterexecs", Cluster: true, what: whatExec, new: func() runtime.Object { return &kwokv1alpha1.ClusterExec{} }},
	{Name: kwokv1alpha1.PortForwardKind, Resource: "portforwards", what: whatForward, new: func() runtime.Object { return &kwokv1alpha1.PortForward{} }},
	{Name: kwokv1alpha1.ClusterPortForwardKind, Resource: "clusterportforwards", Cluster: true, what: whatForward, new: func() runtime.Object { return &kwokv1alpha1.ClusterPortForward{} }},
	{Name: kwokv1alpha1.AttachKind, Resource: "attaches", what: whatAttach, new: func() runtime.Object { return &kwokv1alpha1.Attach{} }},
	{Name: kwokv1alpha1.ClusterAttachKind, Resource: "clusterattaches", Cluster: true, what: whatAttach, new: func() runtime.Object { return &kwokv1alpha1.ClusterAttach{} }},
	{Name: kwokv1alpha1.ResourceUsageKind, Resource: "resourceusages", what: whatUsage, new: func() runtime.Object { return &kwokv1alpha1.ResourceUsage{} }},
	{Name: kwokv1alpha1.ClusterResourceUsageKind, Resource: "clusterresourceusages", Cluster: true, what: whatUsage, new: func() runtime.Object { return &kwokv1alpha1.ClusterResourceUsage{} }},
}

// KindNamed is the kind of that name, if this package reads it.
func KindNamed(name string) (Kind, bool) {
	for _, k := range Kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// New is an empty object of the kind, to decode into.
func (k Kind) New() runtime.Object { return k.new() }

// Rule is one of kwok's objects, checked: the pods it is for and what it
// says of them.
type Rule struct {
	Kind Kind
	// Namespace and Name are the object's; a namespaced one is for the
	// pod of that namespace and name.
	Namespace, Name string
	selector        *kwokv1alpha1.ObjectSelector

	logs     []kwokv1alpha1.Log
	execs    []kwokv1alpha1.ExecTarget
	forwards []kwokv1alpha1.Forward
	attaches []kwokv1alpha1.AttachConfig
	usages   []ContainerUsage
}

// String names the rule as kubectl would: "Logs default/web".
func (r *Rule) String() string {
	if r.Kind.Cluster {
		return r.Kind.Name + " " + r.Name
	}
	return r.Kind.Name + " " + r.Namespace + "/" + r.Name
}

// matches tells whether the rule is for the pod.
func (r *Rule) matches(namespace, pod string) bool {
	if !r.Kind.Cluster {
		return r.Namespace == namespace && r.Name == pod
	}
	s := r.selector
	if s == nil {
		return true
	}
	return (len(s.MatchNamespaces) == 0 || contains(s.MatchNamespaces, namespace)) &&
		(len(s.MatchNames) == 0 || contains(s.MatchNames, pod))
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// Compile checks one of kwok's objects of the kinds above (a typed
// object: *kwokv1alpha1.Logs …) and makes its rule, compiling the CEL
// expressions of a ResourceUsage or ClusterResourceUsage in env (nil:
// kwok's on the wall clock). A namespaced object without a namespace is
// taken as in "default", as kubectl takes it. An error names the object
// and each field at fault.
func Compile(obj runtime.Object, env *CEL) (*Rule, error) {
	var (
		r        Rule
		kindName string
		meta     metav1.ObjectMeta
		usages   []kwokv1alpha1.ResourceUsageContainer
		errs     field.ErrorList
		spec     = field.NewPath("spec")
	)
	switch o := obj.(type) {
	case *kwokv1alpha1.Logs:
		kindName = kwokv1alpha1.LogsKind
		meta, r.logs = o.ObjectMeta, o.Spec.Logs
	case *kwokv1alpha1.ClusterLogs:
		kindName = kwokv1alpha1.ClusterLogsKind
		meta, r.logs, r.selector = o.ObjectMeta, o.Spec.Logs, o.Spec.Selector
	case *kwokv1alpha1.Exec:
		kindName = kwokv1alpha1.ExecKind
		meta, r.execs = o.ObjectMeta, o.Spec.Execs
	case *kwokv1alpha1.ClusterExec:
		kindName = kwokv1alpha1.ClusterExecKind
		meta, r.execs, r.selector = o.ObjectMeta, o.Spec.Execs, o.Spec.Selector
	case *kwokv1alpha1.PortForward:
		kindName = kwokv1alpha1.PortForwardKind
		meta, r.forwards = o.ObjectMeta, o.Spec.Forwards
	case *kwokv1alpha1.ClusterPortForward:
		kindName = kwokv1alpha1.ClusterPortForwardKind
		meta, r.forwards, r.selector = o.ObjectMeta, o.Spec.Forwards, o.Spec.Selector
	case *kwokv1alpha1.Attach:
		kindName = kwokv1alpha1.AttachKind
		meta, r.attaches = o.ObjectMeta, o.Spec.Attaches
	case *kwokv1alpha1.ClusterAttach:
		kindName = kwokv1alpha1.ClusterAttachKind
		meta, r.attaches, r.selector = o.ObjectMeta, o.Spec.Attaches, o.Spec.Selector
	case *kwokv1alpha1.ResourceUsage:
		kindName = kwokv1alpha1.ResourceUsageKind
		meta, usages = o.ObjectMeta, o.Spec.Usages
	case *kwokv1alpha1.ClusterResourceUsage:
		kindName = kwokv1alpha1.ClusterResourceUsageKind
		meta, usages, r.selector = o.ObjectMeta, o.Spec.Usages, o.Spec.Selector
	default:
		return nil, fmt.Errorf("%T: not one of kwok's kinds for pods' usage, logs, exec, attach or port-forward", obj)
	}
	kind, _ := KindNamed(kindName)
	r.Kind, r.Namespace, r.Name = kind, meta.Namespace, meta.Name
	if !kind.Cluster && r.Namespace == "" {
		r.Namespace = metav1.NamespaceDefault
	}
	if r.Name == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), ""))
	}
	for i, l := range r.logs {
		p := spec.Child("logs").Index(i)
		if l.LogsFile == nil || *l.LogsFile == "" {
			errs = append(errs, field.Required(p.Child("logsFile"), "the file kubectl logs shows"))
		}
		if l.PreviousLogsFile != nil && *l.PreviousLogsFile == "" {
			errs = append(errs, field.Invalid(p.Child("previousLogsFile"), "", "must not be empty when set"))
		}
	}
	for i, e := range r.execs {
		p := spec.Child("execs").Index(i)
		if e.Local == nil {
			errs = append(errs, field.Required(p.Child("local"), "kwok's only way to exec: a command on the agent's host"))
			continue
		}
		for j, env := range e.Local.Envs {
			if env.Name == "" {
				errs = append(errs, field.Required(p.Child("local", "envs").Index(j).Child("name"), ""))
			}
		}
		if sc := e.Local.SecurityContext; sc != nil {
			for _, id := range []struct {
				name string
				v    *int64
			}{{"runAsUser", sc.RunAsUser}, {"runAsGroup", sc.RunAsGroup}} {
				if id.v != nil && (*id.v < 0 || *id.v > 1<<32-2) {
					errs = append(errs, field.Invalid(p.Child("local", "securityContext", id.name), *id.v, "must be a user or group ID"))
				}
			}
		}
	}
	for i, a := range r.attaches {
		if a.LogsFile == nil || *a.LogsFile == "" {
			errs = append(errs, field.Required(spec.Child("attaches").Index(i).Child("logsFile"), "the file kubectl attach follows"))
		}
	}
	for i, f := range r.forwards {
		p := spec.Child("forwards").Index(i)
		for j, port := range f.Ports {
			if port < 1 || port > 65535 {
				errs = append(errs, field.Invalid(p.Child("ports").Index(j), port, "must be a port, 1 to 65535"))
			}
		}
		switch {
		case len(f.Command) > 0:
			if f.Command[0] == "" {
				errs = append(errs, field.Invalid(p.Child("command").Index(0), "", "must name a program"))
			}
		case f.Target == nil:
			errs = append(errs, field.Required(p.Child("target"), "a target or a command"))
		default:
			if f.Target.Address == "" {
				errs = append(errs, field.Required(p.Child("target", "address"), ""))
			}
			if f.Target.Port < 1 || f.Target.Port > 65535 {
				errs = append(errs, field.Invalid(p.Child("target", "port"), f.Target.Port, "must be a port, 1 to 65535"))
			}
		}
	}
	for i, u := range usages {
		p := spec.Child("usages").Index(i).Child("usage")
		entry := ContainerUsage{rule: &r, containers: u.Containers, figures: make(map[string]*figure, len(u.Usage))}
		for _, name := range slices.Sorted(maps.Keys(u.Usage)) { // errors in one order
			v := u.Usage[name]
			switch {
			case v.Expression != nil:
				fp := p.Key(name).Child("expression")
				expr, err := env.compile(*v.Expression)
				if err != nil {
					errs = append(errs, field.Invalid(fp, *v.Expression, err.Error()))
					continue
				}
				entry.figures[name] = &figure{expr: expr, path: fp.String()}
			case v.Value == nil:
				errs = append(errs, field.Required(p.Key(name).Child("value"), ""))
			case v.Value.Sign() < 0:
				errs = append(errs, field.Invalid(p.Key(name).Child("value"), v.Value.String(), "must not be negative"))
			default:
				entry.figures[name] = &figure{value: v.Value.AsApproximateFloat64()}
			}
		}
		r.usages = append(r.usages, entry)
	}
	if err := errs.ToAggregate(); err != nil {
		return nil, fmt.Errorf("%s: %w", r.String(), err)
	}
	return &r, nil
}

// CompileAll compiles objects in env (see Compile), leaving out those at
// fault; the error joins theirs.
func CompileAll(objs []runtime.Object, env *CEL) ([]*Rule, error) {
	var out []*Rule
	var errs []error
	for _, o := range objs {
		r, err := Compile(o, env)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}
