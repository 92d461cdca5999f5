package app

import (
	"runtime/debug"

	"github.com/nodelet/nodelet/pkg/config"
)

// goRuntimeTuning is what the config asks of the Go runtime's garbage
// collector: nil fields are left as the runtime has them.
type goRuntimeTuning struct {
	memoryLimit *int64 // bytes, for debug.SetMemoryLimit
	gcPercent   *int   // for debug.SetGCPercent
}

// goRuntimeTuningOf is cfg's goMemoryLimit and goGCPercent, each unless the
// environment variable the runtime reads for it at start (GOMEMLIMIT,
// GOGC) is set: the operator's environment wins over the config file, and
// the runtime has applied it already.
func goRuntimeTuningOf(cfg *config.Config, getenv func(string) string) goRuntimeTuning {
	var t goRuntimeTuning
	if cfg.GoMemoryLimit != nil && getenv("GOMEMLIMIT") == "" {
		limit := cfg.GoMemoryLimit.Value()
		t.memoryLimit = &limit
	}
	if cfg.GoGCPercent != nil && getenv("GOGC") == "" {
		percent := int(*cfg.GoGCPercent)
		t.gcPercent = &percent
	}
	return t
}

// apply sets what t holds, and returns it as key/value pairs for the log
// (none when it sets nothing).
func (t goRuntimeTuning) apply() []any {
	var kv []any
	if t.memoryLimit != nil {
		debug.SetMemoryLimit(*t.memoryLimit)
		kv = append(kv, "goMemoryLimit", *t.memoryLimit)
	}
	if t.gcPercent != nil {
		debug.SetGCPercent(*t.gcPercent)
		kv = append(kv, "goGCPercent", *t.gcPercent)
	}
	return kv
}
