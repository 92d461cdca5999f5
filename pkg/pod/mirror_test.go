package pod

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// static makes p a static pod of hash h, as the provider runs it.
func static(h string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Annotations = map[string]string{podrules.ConfigSourceAnnotation: "file", podrules.ConfigHashAnnotation: h}
	}
}

// mirror makes p the mirror pod of the static pod of hash h.
func mirror(h string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Annotations = map[string]string{podrules.ConfigSourceAnnotation: "file", podrules.ConfigHashAnnotation: h, podrules.ConfigMirrorAnnotation: h}
	}
}

func deleting(p *corev1.Pod) {
	now := metav1.Now()
	p.DeletionTimestamp = &now
}

func TestMirrorStatusWanted(t *testing.T) {
	tests := []struct {
		name           string
		mirror, static *corev1.Pod
		want           bool
	}{
		{"mirror of the running version", testPod("m", "n", mirror("h1")), testPod("h1", "n", static("h1")), true},
		{"mirror of another version", testPod("m", "n", mirror("h0")), testPod("h1", "n", static("h1")), false},
		{"mirror being deleted", testPod("m", "n", mirror("h1"), deleting), testPod("h1", "n", static("h1")), false},
		{"an API pod runs under the name", testPod("m", "n", mirror("h1")), testPod("a", "n"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mirrorStatusWanted(tt.mirror, tt.static); got != tt.want {
				t.Errorf("mirrorStatusWanted() = %v, want %v", got, tt.want)
			}
		})
	}
}

// A static pod's status reaches its mirror pod; the static pod, whose UID
// the API does not know, is not taken for a dangling pod, and the mirror
// pod is never run.
func TestMirrorPodGetsTheStaticPodStatus(t *testing.T) {
	p := newFakeProvider(testPod("h1", "n", static("h1"), runningStatus))
	client := startController(t, p, testPod("m", "n", mirror("h1")))
	eventually(t, "mirror pod Running", func() bool {
		pod, err := getPod(client, "p")
		return err == nil && pod.Status.Phase == corev1.PodRunning
	})
	if got := p.deletedKeys(); len(got) != 0 {
		t.Errorf("provider deletions = %v, want none", got)
	}
	if got, _ := p.GetPod(context.Background(), "ns", "p"); got == nil || got.UID != "uid-h1" {
		t.Errorf("provider runs %v, want the static pod", got)
	}
}

// Syncs of mirror pods and of static pods without one never touch the
// provider: no create for a mirror pod without its static pod, no stop of
// a static pod whose mirror pod is gone or being deleted.
func TestMirrorAndStaticPodsAreNotRun(t *testing.T) {
	tests := []struct {
		name string
		prov []*corev1.Pod
		api  []*corev1.Pod
	}{
		{"mirror pod without static pod", nil, []*corev1.Pod{testPod("m", "n", mirror("h1"))}},
		{"static pod without mirror pod", []*corev1.Pod{testPod("h1", "n", static("h1"), runningStatus)}, nil},
		{"mirror pod being deleted", []*corev1.Pod{testPod("h1", "n", static("h1"), runningStatus)}, []*corev1.Pod{testPod("m", "n", mirror("h1"), deleting)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newFakeProvider(tt.prov...)
			_, c := runController(t, p, tt.api...)
			<-c.Synced()
			// A sync as after any event: the API pod's, or the provider's notification.
			if err := c.sync(context.Background(), "ns/p"); err != nil {
				t.Fatalf("sync: %v", err)
			}
			if got := p.deletedKeys(); len(got) != 0 {
				t.Errorf("provider deletions = %v, want none", got)
			}
			pods, _ := p.GetPods(context.Background())
			if len(pods) != len(tt.prov) {
				t.Errorf("provider runs %d pods, want %d", len(pods), len(tt.prov))
			}
		})
	}
}

// An API pod with the name of a static pod does not stop it.
func TestAPIPodDoesNotReplaceStaticPod(t *testing.T) {
	p := newFakeProvider(testPod("h1", "n", static("h1"), runningStatus))
	client, c := runController(t, p, testPod("a", "n"))
	<-c.Synced()
	if err := c.sync(context.Background(), "ns/p"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if got := p.deletedKeys(); len(got) != 0 {
		t.Errorf("provider deletions = %v, want none", got)
	}
	if _, err := getPod(client, "p"); apierrors.IsNotFound(err) {
		t.Errorf("API pod deleted")
	}
}
