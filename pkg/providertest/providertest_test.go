package providertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/provider"
)

func noProvider(*agent.Env) (agent.Provider, error) { return nil, nil }

// A wrong config is one failed part, "config", naming each wrong field;
// nothing else runs.
func TestCheckRefusesABadConfig(t *testing.T) {
	rec := &Record{}
	Check(context.Background(), rec, Config{Grace: 1500 * time.Millisecond, Pod: &corev1.PodSpec{}})
	results := rec.Results()
	if len(results) != 1 || results[0].Part != "config" || results[0].Err == nil {
		t.Fatalf("results %+v, want one failed part config", results)
	}
	for _, field := range []string{"Client", "NewProvider", "Grace 1.5s", "Pod: no containers"} {
		if !strings.Contains(results[0].Err.Error(), field) {
			t.Errorf("config error %q does not name %s", results[0].Err, field)
		}
	}
}

func TestDefaults(t *testing.T) {
	c, err := Config{Client: &rest.Config{}, NewProvider: noProvider}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Grace != 5*time.Second || c.Timeout != 90*time.Second || c.Slack != 30*time.Second {
		t.Errorf("grace %s, timeout %s, slack %s; want 5s, 90s, 30s", c.Grace, c.Timeout, c.Slack)
	}
	if c.LogLine != DefaultLogLine || len(c.Pod.Containers) != 1 || !strings.Contains(strings.Join(c.Pod.Containers[0].Command, " "), DefaultLogLine) {
		t.Errorf("default pod %+v logs %q; want one container that writes it", c.Pod, c.LogLine)
	}
	if strings.Join(c.Exec, " ") != "echo ok" || c.ExecOutput != "ok\n" {
		t.Errorf("exec %q wants %q; want echo ok", c.Exec, c.ExecOutput)
	}
	own := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}
	c, err = Config{Client: &rest.Config{}, NewProvider: noProvider, Pod: own}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.LogLine != "" || c.Pod == own {
		t.Errorf("with a pod of its own: log line %q, pod copied %t; want no log line and a copy", c.LogLine, c.Pod != own)
	}
}

// The API shows a pod running as the provider reports it only when both
// say Running and Ready with every container running and ready, and the
// pod IPs agree.
func TestRunningAsReported(t *testing.T) {
	pod := func(ip string, ready bool) *corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		return &corev1.Pod{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}},
			Status: corev1.PodStatus{
				Phase: corev1.PodRunning, PodIP: ip,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Ready: ready,
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
			},
		}
	}
	for _, tt := range []struct {
		name      string
		api, prov *corev1.Pod
		want      bool
	}{
		{"alike", pod("10.0.0.1", true), pod("10.0.0.1", true), true},
		{"not ready in the API", pod("10.0.0.1", false), pod("10.0.0.1", true), false},
		{"another pod IP", pod("", true), pod("10.0.0.1", true), false},
		{"not in the provider", pod("10.0.0.1", true), nil, false},
	} {
		o := observation{name: "p", api: tt.api, prov: tt.prov}
		if tt.prov == nil {
			o.provErr = fmt.Errorf("p: %w", provider.ErrNotFound)
		}
		if got := o.runningAsReported(); got != tt.want {
			t.Errorf("%s: runningAsReported = %t, want %t (%s)", tt.name, got, tt.want, o)
		}
	}
}

func TestLogBufferKeepsTheLastLines(t *testing.T) {
	var b logBuffer
	for i := range maxLogLines + 10 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	fmt.Fprint(&b, "unfinished")
	if got, want := b.last(2), fmt.Sprintf("line %d\nline %d", maxLogLines+8, maxLogLines+9); got != want {
		t.Errorf("last(2) = %q, want %q", got, want)
	}
	if n := len(b.lines); n != maxLogLines {
		t.Errorf("%d lines kept, want %d", n, maxLogLines)
	}
}
