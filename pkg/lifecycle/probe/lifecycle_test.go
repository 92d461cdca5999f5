package probe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	testingclock "k8s.io/utils/clock/testing"
)

func TestRunHandler(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s %s", r.URL.Path, r.UserAgent(), r.Header.Get("X-Hook")))
		mu.Unlock()
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	host, port := hostPort(t, srv)
	container := &corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}}

	tests := []struct {
		name    string
		handler *corev1.LifecycleHandler
		exec    execFunc
		wantErr string // substring; empty means success
		is      error
	}{
		{
			name:    "exec ok",
			handler: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo $(NOT_EXPANDED)"}}},
			exec: func(_ context.Context, c string, argv []string) ([]byte, int, error) {
				if c != "app" || argv[2] != "echo $(NOT_EXPANDED)" {
					return nil, 1, nil
				}
				return []byte("done"), 0, nil
			},
		},
		{
			name:    "exec non-zero",
			handler: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"drain"}}},
			exec:    func(context.Context, string, []string) ([]byte, int, error) { return []byte("busy"), 3, nil },
			wantErr: `exec lifecycle hook "drain" exited with code 3: "busy"`,
		},
		{
			name:    "exec cannot run",
			handler: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"drain"}}},
			exec:    func(context.Context, string, []string) ([]byte, int, error) { return nil, 0, errTest },
			wantErr: "container not running", is: errTest,
		},
		{
			name:    "exec without execer",
			handler: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"drain"}}},
			wantErr: "no way to run commands",
		},
		{
			name: "http ok with named port and headers",
			handler: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("web"),
				HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Hook", Value: "pre"}}}},
		},
		{
			name:    "http 500 is not a failure, as in the kubelet",
			handler: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/fail", Port: intstr.FromInt32(int32(port))}},
		},
		{
			name:    "http refused",
			handler: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(closedPort(t)))}},
			wantErr: "connection refused",
		},
		{
			name:    "https hook answered in http falls back",
			handler: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Scheme: corev1.URISchemeHTTPS, Path: "/fallback", Port: intstr.FromInt32(int32(port))}},
		},
		{
			name:    "http unknown port name",
			handler: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("nope")}},
			wantErr: `no container port named "nope"`,
		},
		{
			name:    "tcpSocket unsupported",
			handler: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}},
			wantErr: "unsupported", is: ErrTCPSocketHook,
		},
		{name: "sleep zero", handler: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 0}}},
		{name: "empty handler", handler: &corev1.LifecycleHandler{}, wantErr: "names no action"},
		{name: "nil handler", wantErr: "no lifecycle handler"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			target := Target{Container: container, PodIP: host}
			if tc.exec != nil {
				target.Exec = tc.exec
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := RunHandler(ctx, tc.handler, target)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			case tc.is != nil && !errors.Is(err, tc.is):
				t.Errorf("error %v is not %v", err, tc.is)
			}
		})
	}

	mu.Lock()
	defer mu.Unlock()
	ua := regexp.MustCompile(`^/ok kube-lifecycle/1\.\d+ pre$`)
	found := map[string]bool{}
	for _, s := range seen {
		found[strings.Fields(s)[0]] = true
		if strings.HasPrefix(s, "/ok ") && !ua.MatchString(s) {
			t.Errorf("hook request %q, want path, kube-lifecycle user agent and header", s)
		}
	}
	for _, p := range []string{"/ok", "/fail", "/fallback"} {
		if !found[p] {
			t.Errorf("no hook request to %s among %q", p, seen)
		}
	}
}

func TestSleepHook(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	target := Target{Clock: clk}
	h := &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}

	t.Run("completes", func(t *testing.T) {
		done := make(chan error, 1)
		go func() { done <- RunHandler(context.Background(), h, target) }()
		waitFor(t, "the sleep timer", clk.HasWaiters)
		clk.Step(4 * time.Second)
		select {
		case err := <-done:
			t.Fatalf("sleep ended after 4s of 5s: %v", err)
		default:
		}
		clk.Step(time.Second)
		if err := <-done; err != nil {
			t.Errorf("unexpected error: %v", err)
		}
	})
	t.Run("cut short", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- RunHandler(ctx, h, target) }()
		waitFor(t, "the sleep timer", clk.HasWaiters)
		cancel()
		err := <-done
		if err == nil || !strings.Contains(err.Error(), "ended early") || !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want one saying the sleep ended early", err)
		}
	})
}
