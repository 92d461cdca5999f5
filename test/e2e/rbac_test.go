package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestLeastPrivilegeRBAC runs nodelet as the ServiceAccount of
// deploy/rbac.yaml, as a user would against an existing cluster, and checks
// that those rights are enough for a node and its pods.
func TestLeastPrivilegeRBAC(t *testing.T) {
	manifest := filepath.Join(root, "deploy/rbac.yaml")
	kubectl(t, "apply", "-f", manifest)
	// Wait for the deletion (its namespace above all), so that a second run
	// of the suite can apply the manifest again.
	t.Cleanup(func() {
		if _, err := kubectlErr("delete", "-f", manifest, "--ignore-not-found", "--timeout=90s"); err != nil {
			t.Logf("deploy/rbac.yaml not deleted yet: %v", err)
		}
	})

	path := tokenKubeconfig(t, "nodelet-system", "nodelet")

	node := uniqueName(t)
	a := startNodelet(t, node, "--kubeconfig", path, "--root-dir", t.TempDir())
	deleteNodeEvents(t, node)
	ns := newNamespace(t)
	waitReady(t, node, 20*time.Second)

	// A remote config in nodelet-system, where the manifest lets the agent
	// watch ConfigMaps.
	putConfig(t, "nodelet-system", node, configHeader+"nodeLabels:\n  e2e.nodelet.io/rbac: remote\n")
	assignConfig(t, node, "nodelet-system", node)
	waitConfigOK(t, node, 30*time.Second, corev1.ConditionTrue, "passing all checks", "using current: ConfigMap nodelet-system/"+node)
	eventually(t, 30*time.Second, "the remote config's label on the Node", func() (bool, string) {
		out, err := kubectlErr("get", "node", node, "-o", `jsonpath={.metadata.labels.e2e\.nodelet\.io/rbac}`)
		return err == nil && out == "remote", out
	})
	apply(t, ns, deployment("rbac", node, 2))
	kubectl(t, "rollout", "status", "-n", ns, "deployment/rbac", "--timeout=60s")
	kubectl(t, "scale", "-n", ns, "deployment/rbac", "--replicas=0")
	eventually(t, 30*time.Second, "pods gone", func() (bool, string) {
		n := len(podList(t, ns).Items)
		return n == 0, fmt.Sprintf("%d pods left", n)
	})
	// Events: a pod the node cannot admit gets a Warning Event.
	apply(t, ns, hugePod(node))
	eventually(t, 20*time.Second, "a Warning event written with the ServiceAccount's rights", func() (bool, string) {
		out, _ := kubectlErr("get", "events", "-n", ns, "--field-selector", "involvedObject.name=huge", "-o", "jsonpath={.items[*].reason}")
		return strings.Contains(out, "OutOfcpu"), out
	})
	if log := a.logText(); strings.Contains(log, "forbidden") {
		t.Errorf("nodelet was refused something with the RBAC of deploy/rbac.yaml:\n%s", lastLines(log, 30))
	}
}

// tokenKubeconfig writes a kubeconfig that reaches the control
// plane with a token of the service account ns/name, and returns its path.
func tokenKubeconfig(t *testing.T, ns, name string) string {
	t.Helper()
	token := strings.TrimSpace(kubectl(t, "create", "token", name, "-n", ns, "--duration=1h"))
	admin, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := admin.Contexts[admin.CurrentContext]
	sa := clientcmdapi.NewConfig()
	sa.Clusters["c"] = admin.Clusters[cur.Cluster]
	sa.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	sa.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: name}
	sa.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*sa, path); err != nil {
		t.Fatal(err)
	}
	return path
}
