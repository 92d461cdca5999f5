package podrules

import (
	"testing"
	"time"
)

func TestBackOff(t *testing.T) {
	for _, tt := range []struct {
		earlier int
		want    time.Duration
	}{
		{-1, 10 * time.Second},
		{0, 10 * time.Second},
		{1, 20 * time.Second},
		{3, 80 * time.Second},
		{4, 160 * time.Second},
		{5, 5 * time.Minute}, // 320 s, capped
		{1000, 5 * time.Minute},
	} {
		if got := BackOff(tt.earlier); got != tt.want {
			t.Errorf("BackOff(%d) = %s, want %s", tt.earlier, got, tt.want)
		}
	}
}

func TestRestartBackOff(t *testing.T) {
	for _, tt := range []struct {
		restarts int
		ran      time.Duration
		want     time.Duration
	}{
		{0, time.Second, 0}, // the first exit restarts at once
		{1, time.Second, 10 * time.Second},
		{2, time.Second, 20 * time.Second},
		{4, time.Second, 80 * time.Second},
		{10, time.Second, 5 * time.Minute},
		{10, 10*time.Minute - time.Second, 5 * time.Minute},
		{10, 10 * time.Minute, 0}, // a long run starts it over
		{-1, time.Second, 0},
	} {
		if got := RestartBackOff(tt.restarts, tt.ran); got != tt.want {
			t.Errorf("RestartBackOff(%d, %s) = %s, want %s", tt.restarts, tt.ran, got, tt.want)
		}
	}
}
