package process

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
)

// TestSandboxOfAnEarlierAgent: a sandbox whose record does not say that it
// applies security (an earlier agent started it, and it runs every
// container as root with every capability) still runs a container that
// sets no security context, and refuses one that does until the pod is
// recreated.
func TestSandboxOfAnEarlierAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandboxes need root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	opts := sandbox.Options{Exe: exe, RootDir: root, CgroupName: testCgroupName}
	m, err := sandbox.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "old", UID: "uid-old-sandbox"}}
	if _, err := m.EnsureSandbox(ctx, sandbox.SandboxSpec{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.RemoveSandbox(context.Background(), pod.UID); err != nil {
			t.Errorf("RemoveSandbox: %v", err)
		}
	})
	// The record as an earlier agent wrote it.
	path := filepath.Join(root, "pods", string(pod.UID), "sandbox.json")
	var rec map[string]any
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &rec)
	}
	if err != nil {
		t.Fatal(err)
	}
	delete(rec, "appliesSecurity")
	if data, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	adopter, err := sandbox.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	list, err := adopter.Sandboxes(ctx)
	if err != nil || len(list) != 1 || list[0].AppliesSecurity() {
		t.Fatalf("adopted %v, %v; want the one sandbox, not applying security", list, err)
	}
	s := hostSandbox{sb: list[0]}

	plain := &corev1.Container{Name: "plain", Command: []string{"true"}}
	if err := s.StartContainer(ctx, lifecycle.ContainerSpec{Pod: pod, Container: plain, Command: plain.Command}); err != nil {
		t.Fatalf("a container without a security context: %v", err)
	}
	user := &corev1.Container{Name: "user", Command: []string{"true"}, SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](4242)}}
	err = s.StartContainer(ctx, lifecycle.ContainerSpec{Pod: pod, Container: user, Command: user.Command})
	var we *lifecycle.WaitError
	if !errors.As(err, &we) || we.Reason != "CreateContainerConfigError" || !strings.Contains(we.Message, "earlier version of nodelet") {
		t.Fatalf("a container with runAsUser: %v, want CreateContainerConfigError saying why", err)
	}
}
