package probe

import (
	"context"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestTCPProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	target := Target{
		Container: &corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "tcp", ContainerPort: int32(port)}}},
		PodIP:     "127.0.0.1",
	}
	tests := []struct {
		name   string
		action corev1.TCPSocketAction
		want   Result
		msg    string
	}{
		{name: "open", action: corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}, want: Success},
		{name: "named port", action: corev1.TCPSocketAction{Port: intstr.FromString("tcp")}, want: Success},
		{name: "explicit host", action: corev1.TCPSocketAction{Host: "127.0.0.1", Port: intstr.FromInt32(int32(port))}, want: Success},
		{name: "closed", action: corev1.TCPSocketAction{Port: intstr.FromInt32(int32(closedPort(t)))}, want: Failure, msg: "connection refused"},
		{name: "unknown name", action: corev1.TCPSocketAction{Port: intstr.FromString("nope")}, want: Unknown, msg: "no container port named"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := Once(context.Background(), &corev1.ProbeHandler{TCPSocket: &tc.action}, 0, target)
			if got != tc.want || !strings.Contains(msg, tc.msg) {
				t.Errorf("got %v %q, want %v containing %q", got, msg, tc.want, tc.msg)
			}
		})
	}
}

// slowHealth answers Check only when the call's context ends.
type slowHealth struct {
	healthpb.UnimplementedHealthServer
}

func (slowHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func startGRPC(t *testing.T, register func(*grpc.Server)) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().(*net.TCPAddr).Port
}

func TestGRPCProbe(t *testing.T) {
	hs := health.NewServer()
	hs.SetServingStatus("up", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	healthy := startGRPC(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, hs) })
	bare := startGRPC(t, func(*grpc.Server) {})
	slow := startGRPC(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, slowHealth{}) })

	tests := []struct {
		name    string
		port    int
		service *string
		timeout time.Duration
		want    Result
		msg     string
	}{
		{name: "overall serving", port: healthy, want: Success, msg: "service healthy"},
		{name: "service serving", port: healthy, service: ptr.To("up"), want: Success},
		{name: "service not serving", port: healthy, service: ptr.To("down"), want: Failure, msg: `responded with "NOT_SERVING"`},
		{name: "unknown service", port: healthy, service: ptr.To("other"), want: Failure, msg: "health rpc probe failed"},
		{name: "no health service", port: bare, want: Failure, msg: "does not implement the grpc health protocol"},
		{name: "timeout", port: slow, timeout: 100 * time.Millisecond, want: Failure, msg: "timeout: health rpc did not complete within 100ms"},
		{name: "nothing listening", port: closedPort(t), want: Failure},
		{name: "bad port", port: 0, want: Unknown, msg: "invalid port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: int32(tc.port), Service: tc.service}}
			got, msg := Once(context.Background(), h, tc.timeout, Target{PodIP: "127.0.0.1"})
			if got != tc.want || !strings.Contains(msg, tc.msg) {
				t.Errorf("got %v %q, want %v containing %q", got, msg, tc.want, tc.msg)
			}
		})
	}
}

func TestExecProbe(t *testing.T) {
	container := &corev1.Container{Name: "app", Env: []corev1.EnvVar{
		{Name: "FILE", Value: "/tmp/healthy"},
		{Name: "SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}},
	}}
	tests := []struct {
		name    string
		command []string
		exec    execFunc
		timeout time.Duration
		want    Result
		msg     string
	}{
		{
			name: "exit 0", command: []string{"true"},
			exec: func(context.Context, string, []string) ([]byte, int, error) { return []byte("all good"), 0, nil },
			want: Success, msg: "all good",
		},
		{
			name: "exit 1 with output", command: []string{"false"},
			exec: func(context.Context, string, []string) ([]byte, int, error) { return []byte("not yet"), 1, nil },
			want: Failure, msg: "not yet",
		},
		{
			name: "exit 2 without output", command: []string{"check"},
			exec: func(context.Context, string, []string) ([]byte, int, error) { return nil, 2, nil },
			want: Failure, msg: `command "check" exited with code 2`,
		},
		{
			name: "could not run", command: []string{"check"},
			exec: func(context.Context, string, []string) ([]byte, int, error) { return nil, 0, errTest },
			want: Unknown, msg: "container not running",
		},
		{
			name: "timeout", command: []string{"sleep", "10"}, timeout: 50 * time.Millisecond,
			exec: func(ctx context.Context, _ string, _ []string) ([]byte, int, error) {
				<-ctx.Done()
				return nil, 0, ctx.Err()
			},
			want: Failure, msg: `command "sleep 10" timed out after 50ms`,
		},
		{
			name: "output truncated", command: []string{"chatty"},
			exec: func(context.Context, string, []string) ([]byte, int, error) {
				return []byte(strings.Repeat("x", 2*maxOutput)), 1, nil
			},
			want: Failure, msg: strings.Repeat("x", maxOutput),
		},
		{
			name:    "container name and expanded command",
			command: []string{"cat", "$(FILE)", "$(SECRET)", "$(MISSING)", "$$(FILE)", "a$b", "$(open"},
			exec: func(_ context.Context, c string, argv []string) ([]byte, int, error) {
				want := []string{"cat", "/tmp/healthy", "$(SECRET)", "$(MISSING)", "$(FILE)", "a$b", "$(open"}
				if c != "app" || !reflect.DeepEqual(argv, want) {
					return []byte(strings.Join(append([]string{c}, argv...), "|")), 1, nil
				}
				return nil, 0, nil
			},
			want: Success,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: tc.command}}
			got, msg := Once(context.Background(), h, tc.timeout, Target{Container: container, Exec: tc.exec})
			if got != tc.want || !strings.Contains(msg, tc.msg) {
				t.Errorf("got %v %q, want %v containing %q", got, msg, tc.want, tc.msg)
			}
			if len(msg) > maxOutput {
				t.Errorf("message of %d bytes, more than %d", len(msg), maxOutput)
			}
		})
	}
	t.Run("no execer", func(t *testing.T) {
		h := &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}
		if got, _ := Once(context.Background(), h, 0, Target{Container: container}); got != Unknown {
			t.Errorf("got %v, want Unknown", got)
		}
	})
}

func TestOnceDefaultTimeoutAndEmptyHandler(t *testing.T) {
	var deadline time.Time
	h := &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}
	exec := execFunc(func(ctx context.Context, _ string, _ []string) ([]byte, int, error) {
		deadline, _ = ctx.Deadline()
		return nil, 0, nil
	})
	before := time.Now()
	Once(context.Background(), h, 0, Target{Exec: exec})
	if d := deadline.Sub(before); d <= 0 || d > 2*time.Second {
		t.Errorf("deadline %v after the call, want about 1s", d)
	}
	for _, h := range []*corev1.ProbeHandler{nil, {}} {
		if got, _ := Once(context.Background(), h, 0, Target{}); got != Unknown {
			t.Errorf("handler %+v: got %v, want Unknown", h, got)
		}
	}
}
