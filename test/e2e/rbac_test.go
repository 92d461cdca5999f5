package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestLeastPrivilegeRBAC runs nodelet as the ServiceAccount of
// deploy/rbac.yaml, as a user would against an existing cluster, and checks
// that those rights are enough for a node and its pods.
func TestLeastPrivilegeRBAC(t *testing.T) {
	manifest := filepath.Join(root, "deploy/rbac.yaml")
	kubectl(t, "apply", "-f", manifest)
	t.Cleanup(func() { _, _ = kubectlErr("delete", "-f", manifest, "--wait=false") })

	token := strings.TrimSpace(kubectl(t, "create", "token", "nodelet", "-n", "nodelet-system", "--duration=1h"))
	admin, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := admin.Contexts[admin.CurrentContext]
	sa := clientcmdapi.NewConfig()
	sa.Clusters["c"] = admin.Clusters[ctx.Cluster]
	sa.AuthInfos["nodelet"] = &clientcmdapi.AuthInfo{Token: token}
	sa.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "nodelet"}
	sa.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "nodelet.kubeconfig")
	if err := clientcmd.WriteToFile(*sa, path); err != nil {
		t.Fatal(err)
	}

	node := uniqueName(t)
	ns := newNamespace(t)
	a := startNodelet(t, node, "--kubeconfig", path)
	waitReady(t, node, 20*time.Second)
	apply(t, ns, deployment("rbac", node, 2))
	kubectl(t, "rollout", "status", "-n", ns, "deployment/rbac", "--timeout=60s")
	kubectl(t, "scale", "-n", ns, "deployment/rbac", "--replicas=0")
	eventually(t, 30*time.Second, "pods gone", func() (bool, string) {
		n := len(podList(t, ns))
		return n == 0, "pods left"
	})
	if log := a.logText(); strings.Contains(log, "forbidden") {
		t.Errorf("nodelet was refused something with the RBAC of deploy/rbac.yaml:\n%s", lastLines(log, 30))
	}
}
