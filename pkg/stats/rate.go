package stats

import (
	"sync"
	"time"
)

// CPURates turns cumulative CPU time into a rate (nanocores) per key: the
// node, a system container, a container by its runtime ID. The summary
// API reports both, and a runtime that gives only the cumulative figure
// (or a rate of its own over an interval that another client's request
// cut short) leaves the rate to its caller, as the kubelet's CRI stats
// provider computes it. It is safe for concurrent use.
type CPURates struct {
	// MinInterval is the shortest interval a rate is measured over
	// (default a second): a sample taken sooner after the kept one gives
	// the rate measured last, and is not kept. A workload that wakes up
	// every few seconds can use no CPU at all between two samples a
	// second apart; over ten seconds, as cAdvisor's housekeeping measures
	// the kubelet's rates, it shows what it does.
	MinInterval time.Duration

	mu sync.Mutex
	c  rateCache
}

// Rate records usage (cumulative core-nanoseconds) at the time at for key
// and returns the rate since the key's previous sample, if there is one
// far enough back to measure over.
func (r *CPURates) Rate(key string, at time.Time, usage uint64) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c == nil {
		r.c = rateCache{}
	}
	minInterval := r.MinInterval
	if minInterval <= 0 {
		minInterval = minRateInterval
	}
	return r.c.rate(key, cpuSample{at: at, usage: usage}, minInterval)
}

// Forget drops the keys keep does not keep: containers that are gone.
func (r *CPURates) Forget(keep func(key string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.c {
		if !keep(k) {
			delete(r.c, k)
		}
	}
}

// rateCache is CPURates without its lock.
type rateCache map[string]*rateState

type rateState struct {
	last cpuSample // the sample the next rate is measured from
	rate *uint64   // nanocores over the last interval measured
}

type cpuSample struct {
	at    time.Time
	usage uint64 // cumulative core-nanoseconds
}

// rate returns the rate in nanocores between the key's kept sample and s,
// and keeps s for the next call, unless s comes sooner than minInterval
// after it: then the rate measured last stands.
func (c rateCache) rate(key string, s cpuSample, minInterval time.Duration) (uint64, bool) {
	st, ok := c[key]
	if !ok {
		c[key] = &rateState{last: s}
		return 0, false
	}
	elapsed := s.at.Sub(st.last.at)
	if elapsed < minInterval {
		if st.rate == nil {
			return 0, false
		}
		return *st.rate, true
	}
	if s.usage < st.last.usage {
		// The counter went back (another source, a reset): no rate can be
		// told from this interval.
		st.rate = nil
	} else {
		rate := uint64(float64(s.usage-st.last.usage) / elapsed.Seconds())
		st.rate = &rate
	}
	st.last = s
	if st.rate == nil {
		return 0, false
	}
	return *st.rate, true
}
