package e2e

import (
	"context"
	"fmt"
	"regexp"
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
	for _, want := range []string{
		`Capacity:`, `cpu:\s+32\n`, `pods:\s+110\n`,
		`Addresses:`, `InternalIP:\s+127\.0\.0\.1`, `Hostname:\s+` + node,
		`System Info:`, `Kubelet Version:\s+\S+`,
		`e2e/role=sim`, `kubernetes\.io/hostname=` + node, `Taints:\s+e2e/dedicated=yes:NoSchedule`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("kubectl describe node does not match %q:\n%s", want, out)
		}
	}
	if port := kubectl(t, "get", "node", node, "-o", "jsonpath={.status.daemonEndpoints.kubeletEndpoint.Port}"); port != "10250" {
		t.Errorf("daemonEndpoints port = %q, want 10250", port)
	}
}

// lease reads the node's Lease and checks who holds and owns it.
func lease(t *testing.T, node string) (renewTime, uid string) {
	t.Helper()
	out, err := kubectlErr("get", "lease", "-n", corev1.NamespaceNodeLease, node, "-o",
		"jsonpath={.spec.renewTime} {.metadata.uid} {.spec.holderIdentity} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}")
	if err != nil {
		return "", ""
	}
	f := strings.Fields(out)
	if len(f) != 4 || f[2] != node || f[3] != "Node/"+node {
		t.Errorf("lease %s = %q, want holder %s and an owner reference to Node %s", node, out, node, node)
		return "", ""
	}
	return f[0], f[1]
}

func TestLeaseRenewedAndRecreated(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startNodelet(t, node)
	waitReady(t, node, 10*time.Second)

	var first, uid string
	eventually(t, 10*time.Second, "lease created", func() (bool, string) {
		first, uid = lease(t, node)
		return first != "", "no lease"
	})
	// Renewed every 10 s (a quarter of the default 40 s). renewTime has a
	// fixed-width RFC 3339 form, so later is greater.
	eventually(t, 25*time.Second, "lease renewed", func() (bool, string) {
		r, _ := lease(t, node)
		return r != "" && r > first, fmt.Sprintf("renewTime %s, first seen %s", r, first)
	})

	kubectl(t, "delete", "lease", "-n", corev1.NamespaceNodeLease, node)
	eventually(t, 20*time.Second, "lease recreated", func() (bool, string) {
		r, newUID := lease(t, node)
		return r != "" && newUID != uid, fmt.Sprintf("uid %q (deleted %s)", newUID, uid)
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

	// Two more status reports by nodelet: Ready's heartbeat moves twice.
	c, err := nodeCondition(node, corev1.NodeReady)
	if err != nil || c == nil {
		t.Fatalf("Ready condition: %v %v", c, err)
	}
	last, reports := c.LastHeartbeatTime, 0
	eventually(t, 30*time.Second, "two more status reports", func() (bool, string) {
		c, err := nodeCondition(node, corev1.NodeReady)
		if err == nil && c != nil && last.Before(&c.LastHeartbeatTime) {
			last, reports = c.LastHeartbeatTime, reports+1
		}
		return reports >= 2, fmt.Sprintf("%d reports, last heartbeat %s", reports, last)
	})

	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range n.Status.Conditions {
		found = found || (c.Type == "ExampleCondition" && c.Status == corev1.ConditionTrue && c.Message == "added by e2e")
	}
	if !found {
		t.Errorf("another writer's condition was removed: %+v", n.Status.Conditions)
	}
	if n.Labels["e2e/other"] != "yes" {
		t.Errorf("another writer's label was removed: %v", n.Labels)
	}
	if out := kubectl(t, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="ExampleCondition")].reason}`); out != "Test" {
		t.Errorf("kubectl sees ExampleCondition reason %q, want Test", out)
	}
}

func TestNodeNotReadyWhileStopped(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	a := startNodelet(t, node)
	waitReady(t, node, 10*time.Second)

	a.stop()
	// The controller-manager's node-monitor grace period is 20 s.
	eventually(t, 60*time.Second, "node Ready Unknown after the agent stopped", func() (bool, string) {
		c, err := nodeCondition(node, corev1.NodeReady)
		if err != nil || c == nil {
			return false, fmt.Sprint(c, err)
		}
		return c.Status == corev1.ConditionUnknown, string(c.Status) + " " + c.Reason
	})
	if out := kubectl(t, "get", "node", node, "--no-headers"); !strings.Contains(out, "NotReady") {
		t.Errorf("kubectl get node shows %q, want NotReady", out)
	}

	a.start()
	waitReady(t, node, 20*time.Second)
}
