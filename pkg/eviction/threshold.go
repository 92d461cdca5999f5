package eviction

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Signal names an eviction signal, as the kubelet's evictionHard keys do.
type Signal string

// The signals nodelet observes. Their order is the order in which met
// thresholds are considered for reclaim after memory, and the order of
// Signals.
const (
	SignalMemoryAvailable   Signal = "memory.available"
	SignalNodeFsAvailable   Signal = "nodefs.available"
	SignalNodeFsInodesFree  Signal = "nodefs.inodesFree"
	SignalImageFsAvailable  Signal = "imagefs.available"
	SignalImageFsInodesFree Signal = "imagefs.inodesFree"
	SignalPIDAvailable      Signal = "pid.available"
)

// Signals lists every supported signal.
var Signals = []Signal{
	SignalMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree,
	SignalImageFsAvailable, SignalImageFsInodesFree, SignalPIDAvailable,
}

// Resources a signal starves that corev1 has no name for; the names are the
// kubelet's, which end up in eviction messages.
const (
	resourceInodes corev1.ResourceName = "inodes"
	resourcePIDs   corev1.ResourceName = "pids"
)

// signalInfo is what the manager needs to know about a signal: the node
// condition it raises and the resource it starves.
var signalInfo = map[Signal]struct {
	condition corev1.NodeConditionType
	resource  corev1.ResourceName
}{
	SignalMemoryAvailable:   {corev1.NodeMemoryPressure, corev1.ResourceMemory},
	SignalNodeFsAvailable:   {corev1.NodeDiskPressure, corev1.ResourceEphemeralStorage},
	SignalNodeFsInodesFree:  {corev1.NodeDiskPressure, resourceInodes},
	SignalImageFsAvailable:  {corev1.NodeDiskPressure, corev1.ResourceEphemeralStorage},
	SignalImageFsInodesFree: {corev1.NodeDiskPressure, resourceInodes},
	SignalPIDAvailable:      {corev1.NodePIDPressure, resourcePIDs},
}

// Value is a threshold or minimum reclaim: an absolute quantity, or a share
// of the signal's capacity.
type Value struct {
	// Quantity, when set, is the value; otherwise Percentage is.
	Quantity *resource.Quantity
	// Percentage is a share of the capacity in (0, 1].
	Percentage float64
}

// of resolves v against a signal's capacity.
func (v Value) of(capacity int64) int64 {
	if v.Quantity != nil {
		return v.Quantity.Value()
	}
	return int64(float64(capacity) * v.Percentage)
}

func (v Value) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return strconv.FormatFloat(v.Percentage*100, 'f', -1, 64) + "%"
}

// Threshold is met when its signal's available amount falls below Value.
type Threshold struct {
	Signal Signal
	Value  Value
	// GracePeriod is how long the threshold must be met continuously before
	// it drives eviction. Zero makes it a hard threshold: at once, and the
	// pod gets almost no time to stop.
	GracePeriod time.Duration
	// MinReclaim, when set, keeps the threshold met until the signal is
	// back above Value + MinReclaim, so that one eviction frees enough not
	// to be followed by another at once.
	MinReclaim *Value
}

// Hard tells whether t acts at once.
func (t Threshold) Hard() bool { return t.GracePeriod == 0 }

// The config fields the thresholds come from, as the kubelet names them.
var (
	pathHard       = field.NewPath("evictionHard")
	pathSoft       = field.NewPath("evictionSoft")
	pathGrace      = field.NewPath("evictionSoftGracePeriod")
	pathMinReclaim = field.NewPath("evictionMinimumReclaim")
)

// ParseThresholds builds the thresholds of the kubelet's evictionHard,
// evictionSoft, evictionSoftGracePeriod and evictionMinimumReclaim: hard
// thresholds first, each list in the order of Signals. A value of "0%" or
// "100%" switches that signal's threshold off, as with the kubelet. The
// error names every bad field and key.
func ParseThresholds(hard, soft, grace, minReclaim map[string]string) ([]Threshold, error) {
	ts, errs := parseThresholds(hard, soft, grace, minReclaim)
	if len(errs) > 0 {
		return nil, fmt.Errorf("eviction thresholds: %w", errs.ToAggregate())
	}
	return ts, nil
}

// ValidateThresholds returns every error ParseThresholds would, each with
// its field path (evictionHard[memory.available] …), for config validation.
func ValidateThresholds(hard, soft, grace, minReclaim map[string]string) field.ErrorList {
	_, errs := parseThresholds(hard, soft, grace, minReclaim)
	return errs
}

func parseThresholds(hard, soft, grace, minReclaim map[string]string) ([]Threshold, field.ErrorList) {
	var errs field.ErrorList
	reclaims := map[Signal]*Value{}
	for _, k := range sortedKeys(minReclaim) {
		p := pathMinReclaim.Key(k)
		if err := checkSignal(p, k); err != nil {
			errs = append(errs, err)
			continue
		}
		v, err := parseValue(minReclaim[k], true)
		if err != nil {
			errs = append(errs, field.Invalid(p, minReclaim[k], err.Error()))
			continue
		}
		reclaims[Signal(k)] = &v
	}
	graces := map[Signal]time.Duration{}
	for _, k := range sortedKeys(grace) {
		p := pathGrace.Key(k)
		if err := checkSignal(p, k); err != nil {
			errs = append(errs, err)
			continue
		}
		d, err := time.ParseDuration(grace[k])
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p, grace[k], "must be a duration such as 1m30s"))
		case d < 0:
			errs = append(errs, field.Invalid(p, grace[k], "must not be negative"))
		default:
			graces[Signal(k)] = d
		}
	}
	var out []Threshold
	for _, set := range []struct {
		path *field.Path
		m    map[string]string
		soft bool
	}{{pathHard, hard, false}, {pathSoft, soft, true}} {
		for _, k := range sortedKeys(set.m) {
			p := set.path.Key(k)
			if err := checkSignal(p, k); err != nil {
				errs = append(errs, err)
				continue
			}
			s := Signal(k)
			raw := strings.TrimSpace(set.m[k])
			if raw == "0%" || raw == "100%" {
				continue
			}
			d, hasGrace := graces[s]
			if _, given := grace[k]; set.soft && !given {
				errs = append(errs, field.Required(pathGrace.Key(k), "every soft eviction threshold needs a grace period"))
				continue
			}
			v, err := parseValue(raw, false)
			if err != nil {
				errs = append(errs, field.Invalid(p, set.m[k], err.Error()))
				continue
			}
			if set.soft && !hasGrace {
				continue // its grace period is in error already
			}
			t := Threshold{Signal: s, Value: v, MinReclaim: reclaims[s]}
			if set.soft {
				t.GracePeriod = d
			}
			out = append(out, t)
		}
	}
	return out, errs
}

func checkSignal(p *field.Path, k string) *field.Error {
	if _, ok := signalInfo[Signal(k)]; ok {
		return nil
	}
	names := make([]string, len(Signals))
	for i, s := range Signals {
		names[i] = string(s)
	}
	return field.NotSupported(p, k, names)
}

// sortedKeys orders a config map's keys by the signal order (unknown keys
// last, by name) so that thresholds and errors come out the same each time.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	rank := func(k string) int {
		if i := slices.Index(Signals, Signal(k)); i >= 0 {
			return i
		}
		return len(Signals)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return keys
}

// parseValue reads a quantity ("100Mi", "1000") or a percentage ("10%",
// "7.5%"). A threshold must be positive; a minimum reclaim may be a zero
// quantity, as the kubelet allows.
func parseValue(s string, reclaim bool) (Value, error) {
	s = strings.TrimSpace(s)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(pct, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return Value{}, errors.New("must be a quantity such as 100Mi or a percentage such as 10%")
		}
		if f <= 0 || f > 100 {
			return Value{}, errors.New("a percentage must be above 0% and at most 100%")
		}
		return Value{Percentage: f / 100}, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return Value{}, errors.New("must be a quantity such as 100Mi or a percentage such as 10%")
	}
	if q.Sign() < 0 || q.Sign() == 0 && !reclaim {
		return Value{}, errors.New("must be greater than 0")
	}
	return Value{Quantity: &q}, nil
}
