package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/test/clusteraddons"
)

// TestClusterServicesDNSAndInClusterAPI is make run's cluster: a cri node
// with the cluster's DNS, CoreDNS and kube-proxy started as addonsup
// starts them (package clusteraddons), on a control plane that advertises
// the host's address. What a user tries first must work: a Deployment
// exposed with kubectl expose answers at http://web from another pod,
// kubernetes.default resolves, and a pod's service-account token gets an
// authenticated answer from https://kubernetes.default.svc.
func TestClusterServicesDNSAndInClusterAPI(t *testing.T) {
	node := uniqueName(t)
	c := startCRINodelet(t, node, "--cluster-dns", clusteraddons.DNSServiceIP, "--cluster-domain", clusteraddons.DNSDomain)
	ns := criNamespace(t)
	startAddons(t, node, c.env.Subnet())

	apply(t, ns, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      nodeName: %[1]s
      terminationGracePeriodSeconds: 1
      containers:
      - name: netexec
        image: %[2]s
        args: ["netexec", "--http-port=8080"]
        readinessProbe:
          httpGet: {path: /healthz, port: 8080}
          periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata:
  name: client
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  containers:
  - name: busybox
    image: %[3]s
    command: ["sleep", "3600"]
  - name: agnhost
    image: %[2]s
    args: ["pause"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: default-view
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects:
- {kind: ServiceAccount, name: default}
`, node, agnhostImage, busyboxImage))
	kubectl(t, "expose", "deployment", "web", "-n", ns, "--port=80", "--target-port=8080")
	kubectl(t, "rollout", "status", "-n", ns, "deployment/web", "--timeout=180s")
	waitPodPhase(t, ns, "client", "Running", 3*time.Minute)
	web := podList(t, ns)
	webPod := ""
	for _, p := range web.Items {
		if p.Labels["app"] == "web" {
			webPod = p.Name
		}
	}

	// The Service by its short name, through the cluster's DNS and
	// kube-proxy; both pick the change up within seconds.
	eventually(t, time.Minute, "GET http://web/hostname from a busybox pod", func() (bool, string) {
		out, err := kubectlErr("exec", "-n", ns, "client", "-c", "busybox", "--", "wget", "-qO-", "-T", "5", "http://web/hostname")
		if err != nil {
			return false, err.Error()
		}
		return strings.TrimSpace(out) == webPod, out
	})
	// busybox's nslookup asks the cluster's DNS for the full name (like
	// upstream's, it applies the search path only to names without a
	// dot); agnhost resolves kubernetes.default through the pod's search
	// path, as any glibc or Go client does, and connects.
	eventually(t, time.Minute, "nslookup kubernetes.default.svc.cluster.local from a busybox pod", func() (bool, string) {
		out, err := kubectlErr("exec", "-n", ns, "client", "-c", "busybox", "--", "nslookup", "kubernetes.default.svc."+clusteraddons.DNSDomain)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(out, "Address: 10.96.0.1"), out
	})
	eventually(t, time.Minute, "kubernetes.default:443 from a pod", func() (bool, string) {
		out, err := kubectlErr("exec", "-n", ns, "client", "-c", "agnhost", "--", "/agnhost", "connect", "kubernetes.default:443", "--timeout=5s")
		if err != nil {
			return false, err.Error()
		}
		return true, out
	})
	// An in-cluster client: the pod's own token and CA, the Service's DNS
	// name (which the serving certificate must name), allowed to list the
	// namespace's pods by the RoleBinding.
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	script := fmt.Sprintf(`curl -sS --max-time 5 --cacert %[1]s/ca.crt -H "Authorization: Bearer $(cat %[1]s/token)" `+
		`https://kubernetes.default.svc/api/v1/namespaces/$(cat %[1]s/namespace)/pods`, sa)
	eventually(t, time.Minute, "the pods listed from a pod with its service account", func() (bool, string) {
		out, err := kubectlErr("exec", "-n", ns, "client", "-c", "agnhost", "--", "sh", "-c", script)
		if err != nil {
			return false, err.Error()
		}
		// The API pretty-prints for curl.
		return strings.Contains(strings.ReplaceAll(out, " ", ""), `"kind":"PodList"`) && strings.Contains(out, webPod), lastLines(out, 5)
	})
}

// startAddons runs CoreDNS and kube-proxy for the node until the test
// ends, then checks that kube-proxy's rules are gone with them (where the
// host had none before). Another cluster's add-ons on this host (make
// run's) are waited for, a while.
func startAddons(t *testing.T, node, clusterCIDR string) {
	t.Helper()
	hadRules := exec.Command("iptables", "-w", "-t", "nat", "-S", "KUBE-SERVICES").Run() == nil
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, err := clusteraddons.Start(ctx, clusteraddons.Options{
		BinDir: filepath.Join(root, "bin"), Dir: dir, Kubeconfig: kubeconfig, NodeName: node,
		HostIP: hostIP(t), ClusterCIDR: clusterCIDR, LockWait: 3 * time.Minute,
	})
	if err != nil {
		t.Fatalf("cluster add-ons: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"coredns", "kube-proxy"} {
				data, _ := os.ReadFile(filepath.Join(dir, name+".log"))
				t.Logf("%s.log:\n%s", name, lastLines(string(data), 30))
			}
		}
		if err := a.Stop(); err != nil {
			t.Errorf("stop the cluster add-ons: %v", err)
		}
		if !hadRules && exec.Command("iptables", "-w", "-t", "nat", "-S", "KUBE-SERVICES").Run() == nil {
			t.Error("kube-proxy's KUBE-SERVICES chain left behind")
		}
	})
}
