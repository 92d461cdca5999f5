package eviction

import (
	"strings"
	"testing"
	"time"
)

func TestParseThresholds(t *testing.T) {
	type want struct {
		signal     Signal
		value      string // Value.String()
		grace      time.Duration
		minReclaim string // "" for none
	}
	tests := []struct {
		name                     string
		hard, soft, grace, minRe map[string]string
		want                     []want
		wantErr                  []string // each in the error
	}{
		{name: "kubelet defaults", hard: map[string]string{
			"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
			"imagefs.available": "15%", "imagefs.inodesFree": "5%",
		}, want: []want{
			{SignalMemoryAvailable, "100Mi", 0, ""}, {SignalNodeFsAvailable, "10%", 0, ""}, {SignalNodeFsInodesFree, "5%", 0, ""},
			{SignalImageFsAvailable, "15%", 0, ""}, {SignalImageFsInodesFree, "5%", 0, ""},
		}},
		{name: "none", want: nil},
		{name: "hard and soft with grace and min reclaim",
			hard:  map[string]string{"memory.available": "1Gi", "pid.available": "1000"},
			soft:  map[string]string{"memory.available": "2Gi", "nodefs.available": "7.5%"},
			grace: map[string]string{"memory.available": "1m30s", "nodefs.available": "2m", "imagefs.available": "1m"},
			minRe: map[string]string{"memory.available": "500Mi", "nodefs.available": "5%"},
			want: []want{
				{SignalMemoryAvailable, "1Gi", 0, "500Mi"}, {SignalPIDAvailable, "1k", 0, ""},
				{SignalMemoryAvailable, "2Gi", 90 * time.Second, "500Mi"}, {SignalNodeFsAvailable, "7.5%", 2 * time.Minute, "5%"},
			}},
		{name: "0% and 100% switch a signal off, soft ones need no grace period then",
			hard: map[string]string{"memory.available": "0%", "nodefs.available": "100%", "pid.available": "5%"},
			soft: map[string]string{"imagefs.available": "0%"},
			want: []want{{SignalPIDAvailable, "5%", 0, ""}}},
		{name: "a quantity that is not one", hard: map[string]string{"memory.available": "lots"},
			wantErr: []string{`evictionHard[memory.available]: Invalid value: "lots": must be a quantity such as 100Mi or a percentage such as 10%`}},
		{name: "zero and negative quantities", hard: map[string]string{"memory.available": "0", "pid.available": "-5"},
			wantErr: []string{`evictionHard[memory.available]: Invalid value: "0": must be greater than 0`, `evictionHard[pid.available]: Invalid value: "-5"`}},
		{name: "percentages out of range", hard: map[string]string{"nodefs.available": "150%", "imagefs.available": "-1%", "memory.available": "x%"},
			wantErr: []string{`evictionHard[nodefs.available]: Invalid value: "150%": a percentage must be above 0% and at most 100%`,
				`evictionHard[imagefs.available]: Invalid value: "-1%"`, `evictionHard[memory.available]: Invalid value: "x%"`}},
		{name: "unknown signals", hard: map[string]string{"memory.free": "1Gi"}, soft: map[string]string{"allocatableMemory.available": "1Gi"},
			grace: map[string]string{"cpu": "1m"}, minRe: map[string]string{"disk": "1Gi"},
			wantErr: []string{`evictionHard[memory.free]: Unsupported value: "memory.free": supported values: "memory.available"`,
				`evictionSoft[allocatableMemory.available]: Unsupported value`, `evictionSoftGracePeriod[cpu]: Unsupported value`,
				`evictionMinimumReclaim[disk]: Unsupported value`}},
		{name: "soft without grace period", soft: map[string]string{"memory.available": "1Gi"},
			wantErr: []string{`evictionSoftGracePeriod[memory.available]: Required value: every soft eviction threshold needs a grace period`}},
		{name: "bad grace periods", soft: map[string]string{"memory.available": "1Gi", "nodefs.available": "10%"},
			grace:   map[string]string{"memory.available": "soon", "nodefs.available": "-1m"},
			wantErr: []string{`evictionSoftGracePeriod[memory.available]: Invalid value: "soon"`, `evictionSoftGracePeriod[nodefs.available]: Invalid value: "-1m": must not be negative`}},
		{name: "bad minimum reclaims", minRe: map[string]string{"memory.available": "-1Mi", "nodefs.available": "0%", "imagefs.available": "more"},
			wantErr: []string{`evictionMinimumReclaim[memory.available]: Invalid value: "-1Mi"`, `evictionMinimumReclaim[nodefs.available]: Invalid value: "0%"`,
				`evictionMinimumReclaim[imagefs.available]: Invalid value: "more"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseThresholds(tt.hard, tt.soft, tt.grace, tt.minRe)
			errs := ValidateThresholds(tt.hard, tt.soft, tt.grace, tt.minRe)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("ParseThresholds = %+v, want an error", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				if len(errs) != len(tt.wantErr) {
					t.Errorf("ValidateThresholds = %d errors, want %d: %v", len(errs), len(tt.wantErr), errs)
				}
				return
			}
			if err != nil || len(errs) > 0 {
				t.Fatalf("ParseThresholds: %v; ValidateThresholds: %v", err, errs)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d thresholds %+v, want %d", len(got), got, len(tt.want))
			}
			for i, w := range tt.want {
				g := got[i]
				mr := ""
				if g.MinReclaim != nil {
					mr = g.MinReclaim.String()
				}
				if g.Signal != w.signal || g.Value.String() != w.value || g.GracePeriod != w.grace || mr != w.minReclaim {
					t.Errorf("threshold %d = %s %s grace %s minReclaim %q, want %+v", i, g.Signal, g.Value, g.GracePeriod, mr, w)
				}
				if g.Hard() != (w.grace == 0) {
					t.Errorf("threshold %d: Hard() = %v", i, g.Hard())
				}
			}
		})
	}
}

func TestValueOf(t *testing.T) {
	ts, err := ParseThresholds(map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := ts[0].Value.of(1 << 40); got != 100<<20 {
		t.Errorf("100Mi of any capacity = %d", got)
	}
	if got := ts[1].Value.of(1000); got != 100 {
		t.Errorf("10%% of 1000 = %d, want 100", got)
	}
}
