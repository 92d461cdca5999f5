package podrules

import "time"

// The crash-loop back-off, as the kubelet's: 10 s doubling to 5 min, back
// to none after a run of 10 min.
const (
	InitialBackOff = 10 * time.Second
	MaxBackOff     = 5 * time.Minute
	BackOffReset   = 10 * time.Minute
)

// BackOff is the crash-loop back-off that follows earlier ones:
// InitialBackOff for the first (earlier = 0), doubling with each one
// before it, at most MaxBackOff.
func BackOff(earlier int) time.Duration {
	d := InitialBackOff
	for i := 0; i < earlier && d < MaxBackOff; i++ {
		d *= 2
	}
	return min(d, MaxBackOff)
}

// RestartBackOff is the kubelet's wait before restarting a container that
// has just exited, after a run that lasted ran. restarts counts the
// container's restarts since its back-off last started over (it was
// created, or its spec changed). The first exit since then restarts at
// once; each later one waits BackOff(restarts-1); a run of BackOffReset or
// more starts the back-off over, so it too restarts at once.
func RestartBackOff(restarts int, ran time.Duration) time.Duration {
	if restarts <= 0 || ran >= BackOffReset {
		return 0
	}
	return BackOff(restarts - 1)
}
