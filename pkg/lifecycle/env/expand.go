package env

import (
	"errors"
	"fmt"
	"strings"
)

// MaxExpandedLen is the longest string a reference may make: 128 KiB, the
// most the kernel takes as one argument or environment entry
// (MAX_ARG_STRLEN), so that no longer result could ever be used. Without
// a bound, variables that each refer twice to the one before double at
// every step, and a few lines of a pod spec would take the agent's memory.
const MaxExpandedLen = 128 << 10

// ErrTooLong is the error of an expansion that would pass MaxExpandedLen.
var ErrTooLong = errors.New("expands to more than the kernel takes")

// Expand replaces each $(NAME) in s by lookup(NAME) the way the kubelet
// expands env values, command and args: "$$" stands for a literal "$", and a
// reference whose name lookup does not know, or that is not closed, stays as
// written. It fails with ErrTooLong rather than substitute past
// MaxExpandedLen bytes.
func Expand(s string, lookup func(name string) (string, bool)) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// Unclosed: keep the rest as written.
				b.WriteString(s[i:])
				return b.String(), nil
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok && name != "" {
				if b.Len()+len(v) > MaxExpandedLen {
					return "", fmt.Errorf("$(%s) at byte %d: %w", truncateName(name), i, ErrTooLong)
				}
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
			b.WriteByte(next)
			i++
		}
	}
	return b.String(), nil
}

// truncateName shortens a variable name for an error message.
func truncateName(name string) string {
	if len(name) > 64 {
		return name[:64] + "..."
	}
	return name
}

// MapLookup adapts a map for Expand.
func MapLookup(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}
