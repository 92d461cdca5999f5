package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeRegistersReady(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startNodelet(t, node, "--node-labels", "e2e/role=sim", "--register-with-taints", "e2e/dedicated=yes:NoSchedule")
	// The requirement: Ready within 10 s of starting.
	waitReady(t, node, 10*time.Second)

	out := kubectl(t, "describe", "node", node)
	for _, want := range []string{"Capacity:", "cpu:                32", "pods:               110", "Addresses:", "InternalIP:", "Hostname:", "System Info:", "Kubelet Version:", "e2e/role=sim", "e2e/dedicated=yes:NoSchedule"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl describe node lacks %q:\n%s", want, out)
		}
	}
	port := kubectl(t, "get", "node", node, "-o", "jsonpath={.status.daemonEndpoints.kubeletEndpoint.Port}")
	if port != "10250" {
		t.Errorf("daemonEndpoints port = %q, want 10250", port)
	}
}

func leaseRenewTime(t *testing.T, node string) (renew, uid string) {
	out, err := kubectlErr("get", "lease", "-n", corev1.NamespaceNodeLease, node, "-o", "jsonpath={.spec.renewTime} {.metadata.uid} {.spec.holderIdentity} {.metadata.ownerReferences[0].kind}")
	if err != nil {
		return "", ""
	}
	f := strings.Fields(out)
	if len(f) != 4 || f[2] != node || f[3] != "Node" {
		t.Errorf("lease %s = %q, want holder %s and an owner reference to the Node", node, out, node)
		return "", ""
	}
	return f[0], f[1]
}

func TestLeaseRenewedAndRecreated(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startNodelet(t, node)
	waitReady(t, node, 10*time.Second)

	var first string
	eventually(t, 10*time.Second, "lease created", func() (bool, string) {
		first, _ = leaseRenewTime(t, node)
		return first != "", "no lease"
	})
	// Renewed every 10 s (a quarter of 40 s): two renewals within 25 s.
	seen := map[string]bool{first: true}
	eventually(t, 25*time.Second, "lease renewed twice", func() (bool, string) {
		r, _ := leaseRenewTime(t, node)
		if r != "" {
			seen[r] = true
		}
		return len(seen) >= 3, fmt.Sprintf("renew times seen: %v", seen)
	})

	_, oldUID := leaseRenewTime(t, node)
	kubectl(t, "delete", "lease", "-n", corev1.NamespaceNodeLease, node)
	eventually(t, 20*time.Second, "lease recreated", func() (bool, string) {
		r, uid := leaseRenewTime(t, node)
		return r != "" && uid != oldUID, "uid " + uid
	})
}

func TestOtherWritersSurvive(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startNodelet(t, node, "--node-status-report-frequency", "2s")
	waitReady(t, node, 10*time.Second)

	now := time.Now().UTC().Format(time.RFC3339)
	kubectl(t, "patch", "node", node, "--subresource=status", "--type=strategic", "-p",
		`{"status":{"conditions":[{"type":"ExampleCondition","status":"True","reason":"Test","message":"added by e2e","lastHeartbeatTime":"`+now+`","lastTransitionTime":"`+now+`"}]}}`)
	kubectl(t, "label", "node", node, "e2e/other=yes")

	// Wait for two more status reports by nodelet.
	c, err := nodeCondition(node, corev1.NodeReady)
	if err != nil || c == nil {
		t.Fatalf("Ready condition: %v %v", c, err)
	}
	beats := map[string]bool{c.LastHeartbeatTime.String(): true}
	eventually(t, 30*time.Second, "two more status reports", func() (bool, string) {
		c, err := nodeCondition(node, corev1.NodeReady)
		if err == nil && c != nil {
			beats[c.LastHeartbeatTime.String()] = true
		}
		return len(beats) >= 3, fmt.Sprintf("heartbeats: %v", beats)
	})

	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range n.Status.Conditions {
		found = found || (c.Type == "ExampleCondition" && c.Message == "added by e2e")
	}
	if !found {
		t.Errorf("another writer's condition was removed: %+v", n.Status.Conditions)
	}
	if n.Labels["e2e/other"] != "yes" {
		t.Errorf("another writer's label was removed: %v", n.Labels)
	}
}

func TestNodeNotReadyWhileStopped(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	a := startNodelet(t, node)
	waitReady(t, node, 10*time.Second)

	a.stop()
	// The controller-manager's grace period is 20 s.
	eventually(t, 60*time.Second, "node Ready Unknown after the agent stopped", func() (bool, string) {
		c, err := nodeCondition(node, corev1.NodeReady)
		if err != nil || c == nil {
			return false, fmt.Sprint(err)
		}
		return c.Status == corev1.ConditionUnknown, string(c.Status) + " " + c.Reason
	})
	out := kubectl(t, "get", "node", node)
	if !strings.Contains(out, "NotReady") {
		t.Errorf("kubectl get node shows:\n%s\nwant NotReady", out)
	}

	a.start()
	waitReady(t, node, 20*time.Second)
}
