package probe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	envvars "github.com/nodelet/nodelet/pkg/lifecycle/env"
)

// execProbe runs the probe command in the container: exit code 0 is Success,
// any other exit code is Failure, and so is running past the deadline.
func execProbe(ctx context.Context, a *corev1.ExecAction, timeout time.Duration, t Target) (Result, string) {
	if t.Exec == nil {
		return Unknown, "exec probe: no way to run commands in the container"
	}
	var env []corev1.EnvVar
	if t.Container != nil {
		env = t.Container.Env
	}
	argv, err := expandCommand(a.Command, env)
	if err != nil {
		return Failure, fmt.Sprintf("exec probe: %v", err)
	}
	out, code, err := t.Exec.ExecSync(ctx, t.containerName(), argv)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return Failure, fmt.Sprintf("command %q timed out after %v", strings.Join(argv, " "), timeout)
		}
		return Unknown, fmt.Sprintf("exec probe: %v", err)
	}
	msg := truncate(out)
	if code != 0 {
		if msg == "" {
			msg = fmt.Sprintf("command %q exited with code %d", strings.Join(argv, " "), code)
		}
		return Failure, msg
	}
	return Success, msg
}

// expandCommand replaces $(NAME) in each argument with the value of the
// container's environment variable NAME when it has a literal value. A
// reference to an unknown name stays as written, and $$ stands for a literal
// $, so $$(NAME) gives $(NAME).
func expandCommand(argv []string, env []corev1.EnvVar) ([]string, error) {
	if len(argv) == 0 {
		return nil, nil
	}
	vars := make(map[string]string, len(env))
	for _, e := range env {
		if e.ValueFrom == nil {
			vars[e.Name] = e.Value
		}
	}
	out := make([]string, len(argv))
	for i, arg := range argv {
		var err error
		if out[i], err = envvars.Expand(arg, envvars.MapLookup(vars)); err != nil {
			return nil, fmt.Errorf("command[%d]: %w", i, err)
		}
	}
	return out, nil
}
