package fuzzcheck

import "testing"

var sink []byte

func TestAllocated(t *testing.T) {
	if n := Allocated(func() { sink = make([]byte, 1<<20) }); n < 1<<20 || n > 2<<20 {
		t.Errorf("a 1 MiB slice counted as %d bytes", n)
	}
}

func TestChoicesRunOut(t *testing.T) {
	c := NewChoices([]byte{7, 2, 'a', 'b', 'c'})
	if got := c.Intn(5); got != 2 {
		t.Errorf("Intn(5) of 7 = %d, want 2", got)
	}
	if got := c.String(10); got != "ab" {
		t.Errorf("String = %q, want ab", got)
	}
	if got := c.String(10); got != "" {
		t.Errorf("String after the length byte c ran out = %q, want empty", got)
	}
	if c.Bool() || c.Intn(1000) != 0 || c.Pick("x", "y") != "x" || c.Word("ab", 5) != "" {
		t.Error("decisions after the bytes ran out are not the first")
	}
}
