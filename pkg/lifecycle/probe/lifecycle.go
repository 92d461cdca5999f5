package probe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ErrTCPSocketHook is returned for a lifecycle handler that uses tcpSocket:
// the API keeps the field for compatibility only and no runtime supports it.
var ErrTCPSocketHook = errors.New("tcpSocket lifecycle handlers are deprecated and unsupported")

// RunHandler runs a postStart or preStop handler against t, with ctx as its
// deadline, and returns an error describing the failure for the
// FailedPostStartHook or FailedPreStopHook event. exec fails on a non-zero
// exit code; httpGet fails only when no response is had (the status code is
// not looked at, as the kubelet does); sleep fails when ctx ends first.
func RunHandler(ctx context.Context, h *corev1.LifecycleHandler, t Target) error {
	switch {
	case h == nil:
		return errors.New("no lifecycle handler")
	case h.Exec != nil:
		return runExecHook(ctx, h.Exec, t)
	case h.HTTPGet != nil:
		return runHTTPHook(ctx, h.HTTPGet, t)
	case h.Sleep != nil:
		return runSleepHook(ctx, h.Sleep, t)
	case h.TCPSocket != nil:
		return ErrTCPSocketHook
	default:
		return errors.New("lifecycle handler names no action (exec, httpGet or sleep)")
	}
}

// runExecHook runs the hook command as written: unlike exec probes, hooks
// get no $(VAR) expansion from the kubelet either.
func runExecHook(ctx context.Context, a *corev1.ExecAction, t Target) error {
	if t.Exec == nil {
		return errors.New("exec lifecycle hook: no way to run commands in the container")
	}
	cmd := strings.Join(a.Command, " ")
	out, code, err := t.Exec.ExecSync(ctx, t.containerName(), a.Command)
	if err != nil {
		return fmt.Errorf("exec lifecycle hook %q: %w", cmd, err)
	}
	if code != 0 {
		return fmt.Errorf("exec lifecycle hook %q exited with code %d: %q", cmd, code, truncate(out))
	}
	return nil
}

// runSleepHook waits the given seconds, or until ctx ends, which is a failure
// because the container is then stopped before its hook finished.
func runSleepHook(ctx context.Context, a *corev1.SleepAction, t Target) error {
	if a.Seconds <= 0 {
		return nil
	}
	timer := t.clock().NewTimer(time.Duration(a.Seconds) * time.Second)
	defer timer.Stop()
	select {
	case <-timer.C():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sleep lifecycle hook of %ds ended early: %w", a.Seconds, context.Cause(ctx))
	}
}
