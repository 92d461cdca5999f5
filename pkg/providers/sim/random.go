package sim

import (
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Two kinds of chance drive the simulation. Decisions that must survive an
// agent restart (which pods complete or fail, which nodes show a condition
// and when) are hashes of stable names. Jitter, which only spreads timings,
// comes from a per-node generator seeded by Options.Seed.

// hash64 hashes parts (FNV-1a, each part terminated by a zero byte, then the
// SplitMix64 finalizer so that close inputs land far apart). It does not
// allocate.
func hash64(parts ...string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for _, s := range parts {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * prime
		}
		h *= prime // the zero byte
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// unit maps a hash to [0, 1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// outcome is what a pod's containers do once running.
type outcome int

const (
	runForever outcome = iota
	complete           // exit 0 after RunDuration
	fail               // exit 1 after RunDuration
)

// outcomeOf decides by the pod's UID alone, so a restored pod keeps its fate:
// the first FailRatio of the hash range fails, the next CompleteRatio
// completes.
func (o *Options) outcomeOf(uid types.UID) outcome {
	if o.FailRatio <= 0 && o.CompleteRatio <= 0 {
		return runForever
	}
	switch u := unit(hash64("outcome", string(uid))); {
	case u < o.FailRatio:
		return fail
	case u < o.FailRatio+o.CompleteRatio:
		return complete
	}
	return runForever
}

// jitterLocked is a uniform random duration in [0, j), or 0 when j is not
// positive. The caller holds the lock (the generator is not safe for
// concurrent use).
func (p *Provider) jitterLocked(j time.Duration) time.Duration {
	if j <= 0 {
		return 0
	}
	return time.Duration(p.rng.Int64N(int64(j)))
}

// selected tells whether node condition entry i applies to this node, and
// at which offset in its period.
func selected(nodeName string, i int, c *NodeCondition) (time.Duration, bool) {
	idx := strconv.Itoa(i)
	if unit(hash64("nodeCondition", nodeName, idx)) >= c.NodeRatio {
		return 0, false
	}
	return time.Duration(hash64("nodeConditionPhase", nodeName, idx) % uint64(c.Every)), true
}
