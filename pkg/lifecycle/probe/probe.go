package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/clock"
)

// maxOutput is how much of a command's output or a response body is kept for
// a result message.
const maxOutput = 10 << 10

// defaultTimeout is the timeout of one attempt when the probe sets none.
const defaultTimeout = time.Second

// Execer runs a command in a container and returns its combined output (at
// most 10 KiB kept) and exit code. A command that ran and exited non-zero is
// not an error: err is for failing to run it at all. When ctx ends first the
// command is abandoned and ExecSync returns an error.
type Execer interface {
	ExecSync(ctx context.Context, container string, argv []string) (output []byte, exitCode int, err error)
}

// Target is what a probe or hook is run against.
type Target struct {
	// Container gives named ports (containerPort name → number), the
	// environment for $(VAR) references in exec probes and the container
	// name passed to Exec.
	Container *corev1.Container
	// PodIP is the host for httpGet, tcpSocket and grpc when the handler
	// names none.
	PodIP string
	// Exec runs exec handlers; without it they fail.
	Exec Execer
	// Clock times sleep hooks; nil means the real clock.
	Clock clock.Clock
}

func (t Target) containerName() string {
	if t.Container == nil {
		return ""
	}
	return t.Container.Name
}

func (t Target) clock() clock.Clock {
	if t.Clock == nil {
		return clock.RealClock{}
	}
	return t.Clock
}

// Result is the outcome of a probe.
type Result int

const (
	// Unknown means no verdict: the probe could not be run (a bad spec, an
	// exec that could not start) or, for a startup worker, no verdict yet.
	Unknown Result = iota
	// Success means the container passed the probe.
	Success
	// Failure means the container failed the probe.
	Failure
	// Warning means the container passed the probe but the attempt has
	// something to report (an httpGet answered with a redirect to another
	// host). It counts as Success.
	Warning
)

func (r Result) String() string {
	switch r {
	case Success:
		return "Success"
	case Failure:
		return "Failure"
	case Warning:
		return "Warning"
	default:
		return "Unknown"
	}
}

// Once runs one attempt of probe handler p against t, giving up after timeout
// (1 s when zero or negative), and returns the result and a message for
// events: the command output, response body or error. Unknown means the probe
// could not be run at all; the kubelet discards such attempts.
func Once(ctx context.Context, p *corev1.ProbeHandler, timeout time.Duration, t Target) (Result, string) {
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p == nil:
		return Unknown, "no probe handler"
	case p.Exec != nil:
		return execProbe(ctx, p.Exec, timeout, t)
	case p.HTTPGet != nil:
		return httpProbe(ctx, p.HTTPGet, t)
	case p.TCPSocket != nil:
		return tcpProbe(ctx, p.TCPSocket, t)
	case p.GRPC != nil:
		return grpcProbe(ctx, p.GRPC, timeout, t)
	default:
		return Unknown, "probe handler names no action (exec, httpGet, tcpSocket or grpc)"
	}
}

// resolvePort turns an int or named port into a port number, looking names
// up in the container's ports.
func resolvePort(port intstr.IntOrString, c *corev1.Container) (int, error) {
	n := 0
	if port.Type == intstr.String {
		name := port.StrVal
		found := false
		if c != nil {
			for _, p := range c.Ports {
				if p.Name == name {
					n, found = int(p.ContainerPort), true
					break
				}
			}
		}
		if !found {
			// A numeric string is accepted as a number, as the API
			// sometimes carries one.
			v, err := strconv.Atoi(name)
			if err != nil {
				return 0, fmt.Errorf("no container port named %q", name)
			}
			n = v
		}
	} else {
		n = port.IntValue()
	}
	if n <= 0 || n > 65535 {
		return 0, fmt.Errorf("invalid port number %d", n)
	}
	return n, nil
}

// address joins host (t.PodIP when empty) and port.
func address(host string, port int, t Target) (string, error) {
	if host == "" {
		host = t.PodIP
	}
	if host == "" {
		return "", errors.New("no host: the handler names none and the target has no host IP")
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// truncate keeps at most maxOutput bytes of b.
func truncate(b []byte) string {
	if len(b) > maxOutput {
		b = b[:maxOutput]
	}
	return string(b)
}

var (
	kubeVersionOnce sync.Once
	kubeVersion     string
)

// fallbackKubeVersion is used when the build carries no module information.
const fallbackKubeVersion = "1.36"

// userAgent returns "<component>/<major.minor>" with the Kubernetes minor
// this binary's client libraries belong to (k8s.io/api v0.X.Y is 1.X), as the
// kubelet sends its own version.
func userAgent(component string) string {
	kubeVersionOnce.Do(func() {
		kubeVersion = fallbackKubeVersion
		info, ok := debug.ReadBuildInfo()
		if !ok {
			return
		}
		for _, dep := range info.Deps {
			if dep.Path != "k8s.io/api" {
				continue
			}
			parts := strings.Split(strings.TrimPrefix(dep.Version, "v"), ".")
			if len(parts) >= 2 && parts[0] == "0" {
				if _, err := strconv.Atoi(parts[1]); err == nil {
					kubeVersion = "1." + parts[1]
				}
			}
		}
	})
	return component + "/" + kubeVersion
}
