package app

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/config"
)

func TestGoRuntimeTuningLeavesTheEnvironmentAlone(t *testing.T) {
	for _, tt := range []struct {
		name        string
		limit       string
		percent     *int32
		env         map[string]string
		wantLimit   *int64
		wantPercent *int
	}{
		{name: "unset: Go's defaults"},
		{name: "both from the config", limit: "460Mi", percent: ptr.To[int32](50),
			wantLimit: ptr.To[int64](460 << 20), wantPercent: ptr.To(50)},
		{name: "GOMEMLIMIT wins", limit: "460Mi", percent: ptr.To[int32](50), env: map[string]string{"GOMEMLIMIT": "1GiB"},
			wantPercent: ptr.To(50)},
		{name: "GOGC wins", limit: "460Mi", percent: ptr.To[int32](-1), env: map[string]string{"GOGC": "200"},
			wantLimit: ptr.To[int64](460 << 20)},
		{name: "an empty variable is unset", percent: ptr.To[int32](80), env: map[string]string{"GOGC": ""},
			wantPercent: ptr.To(80)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			if tt.limit != "" {
				cfg.GoMemoryLimit = ptr.To(resource.MustParse(tt.limit))
			}
			cfg.GoGCPercent = tt.percent
			got := goRuntimeTuningOf(cfg, func(k string) string { return tt.env[k] })
			if !equalPtr(got.memoryLimit, tt.wantLimit) || !equalPtr(got.gcPercent, tt.wantPercent) {
				t.Errorf("tuning %v, %v; want %v, %v", deref(got.memoryLimit), deref(got.gcPercent), deref(tt.wantLimit), deref(tt.wantPercent))
			}
		})
	}
}

func equalPtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}
