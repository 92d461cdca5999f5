// Package fuzzcheck holds what nodelet's fuzz targets share: a measure of
// the memory one call allocates, so that a target can assert that what it
// parses costs memory in proportion to its input, and Choices, which turn
// the fuzzer's bytes into the decisions that build a structured input (a pod
// spec, a node status) the fuzzer then mutates one decision at a time. It is
// for tests only.
package fuzzcheck

import (
	"runtime/metrics"
	"strings"
)

// Slack is what Allocated may count for a call beyond what its input
// costs: the runtime counts small allocations a span (8 KiB and more) at a
// time, so after a garbage collection each size class a call touches
// counts a whole span, and the first call of a kind in a process fills
// caches (those of encoding/json, one per type). Bounds on Allocated are
// Slack plus a multiple of the input's size: they tell unbounded
// allocation, not a few hundred kilobytes more.
const Slack = 4 << 20

// Allocated returns the bytes allocated on the heap while f ran, by f and by
// any goroutine running at the same time (call it where nothing else runs),
// to within Slack.
func Allocated(f func()) uint64 {
	// runtime/metrics reads without stopping the world, as
	// runtime.ReadMemStats would on every run of a target.
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(sample)
	before := sample[0].Value.Uint64()
	f()
	metrics.Read(sample)
	return sample[0].Value.Uint64() - before
}

// Choices reads decisions from fuzz bytes, one or two bytes per decision.
// Once the bytes run out every decision is the first (zero, false, empty),
// so any input builds a value and a short input builds a small one.
type Choices struct{ data []byte }

// NewChoices reads decisions from data.
func NewChoices(data []byte) *Choices { return &Choices{data: data} }

// Byte returns the next byte, 0 when none is left.
func (c *Choices) Byte() byte {
	if len(c.data) == 0 {
		return 0
	}
	b := c.data[0]
	c.data = c.data[1:]
	return b
}

// Intn returns a number in [0, n); n must be between 1 and 65536.
func (c *Choices) Intn(n int) int {
	if n <= 256 {
		return int(c.Byte()) % n
	}
	return (int(c.Byte())<<8 | int(c.Byte())) % n
}

// Bool returns the next decision as a boolean.
func (c *Choices) Bool() bool { return c.Byte()&1 == 1 }

// Pick returns one of options, the first when the bytes have run out.
func (c *Choices) Pick(options ...string) string { return options[c.Intn(len(options))] }

// String returns up to max bytes taken as they are: a length, then the
// bytes. It is how text the fuzzer may make anything of enters a value.
func (c *Choices) String(max int) string {
	n := min(c.Intn(max+1), len(c.data))
	s := string(c.data[:n])
	c.data = c.data[n:]
	return s
}

// Word returns a string of up to max characters of alphabet: for names
// and values that must look like what they stand for to get past the
// first check.
func (c *Choices) Word(alphabet string, max int) string {
	var b strings.Builder
	for n := c.Intn(max + 1); n > 0; n-- {
		b.WriteByte(alphabet[c.Intn(len(alphabet))])
	}
	return b.String()
}
