package stage

import "sync/atomic"

// Source gives the stages in force now: a Lifecycle (always the same) or
// a Set (changed at run time).
type Source interface {
	Stages() Lifecycle
}

// Stages is l: a Lifecycle is a Source that never changes.
func (l Lifecycle) Stages() Lifecycle { return l }

// Set is a Source whose stages are replaced at run time (those of the
// cluster, as they change); it is safe for concurrent use.
type Set struct {
	v atomic.Pointer[Lifecycle]
}

// NewSet is a Set holding l.
func NewSet(l Lifecycle) *Set {
	s := &Set{}
	s.Store(l)
	return s
}

// Stages is the stages stored last.
func (s *Set) Stages() Lifecycle {
	if l := s.v.Load(); l != nil {
		return *l
	}
	return nil
}

// Store replaces the stages; the caller must not change l afterwards.
func (s *Set) Store(l Lifecycle) { s.v.Store(&l) }
