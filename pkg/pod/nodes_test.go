package pod

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A node taken over at run time has its bound pods run; a node let go has
// its pods left alone, even when they are deleted from the API.
func TestNodeAddedAndRemovedAtRunTime(t *testing.T) {
	ctx := context.Background()
	onM := testPod("m", "m", func(p *corev1.Pod) { p.Name = "on-m" })
	onN := testPod("n", "n", func(p *corev1.Pod) { p.Name = "on-n" })
	pn, pm := newFakeProvider(), newFakeProvider()
	client, c := runController(t, pn, onM)
	eventually(t, "the pod controller synced", func() bool { return closed(c.Synced()) })
	if _, err := pm.GetPod(ctx, "ns", "on-m"); err == nil {
		t.Fatal("a pod of an unmanaged node ran")
	}

	c.AddNode("m", pm)
	eventually(t, "the taken-over node's pod Running in the API", func() bool {
		pod, err := getPod(client, "on-m")
		return err == nil && pod.Status.Phase == corev1.PodRunning
	})

	c.RemoveNode("m")
	if err := client.CoreV1().Pods("ns").Delete(ctx, "on-m", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod created after the delete on a managed node runs: the delete
	// has been handled by then too (one informer, in order).
	if _, err := client.CoreV1().Pods("ns").Create(ctx, onN, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the managed node's new pod Running", func() bool {
		pod, err := getPod(client, "on-n")
		return err == nil && pod.Status.Phase == corev1.PodRunning
	})
	if got := pm.deletedKeys(); len(got) > 0 {
		t.Errorf("the node let go had pods stopped: %v", got)
	}
	if _, err := pm.GetPod(ctx, "ns", "on-m"); err != nil {
		t.Errorf("the node let go lost its pod: %v", err)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
