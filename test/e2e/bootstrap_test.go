package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// nodeIdentity is the flags that make a single-node agent join as
// system:node:<node> by TLS bootstrap, with the bootstrap kubeconfig that
// controlplane up wrote beside adminKubeconfig, its credentials kept under
// rootDir. Against a cluster without one (NODELET_E2E_KUBECONFIG) there are
// none, and the agent runs with the admin kubeconfig. The node's CSRs are
// deleted when the test ends.
func nodeIdentity(t *testing.T, node, adminKubeconfig, rootDir string) []string {
	t.Helper()
	bootstrap := filepath.Join(filepath.Dir(adminKubeconfig), "bootstrap.kubeconfig")
	if _, err := os.Stat(bootstrap); err != nil {
		return nil
	}
	t.Cleanup(func() { deleteNodeCSRs(t, client, node) })
	return []string{"--bootstrap-kubeconfig", bootstrap, "--kubeconfig", filepath.Join(rootDir, "kubeconfig")}
}

// nodeCSRs are the CSRs that ask for a certificate of node, oldest first.
func nodeCSRs(t *testing.T, c kubernetes.Interface, node string) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	list, err := c.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list CSRs: %v", err)
	}
	var out []certificatesv1.CertificateSigningRequest
	for _, csr := range list.Items {
		block, _ := pem.Decode(csr.Spec.Request)
		if block == nil {
			continue
		}
		req, err := x509.ParseCertificateRequest(block.Bytes)
		if err == nil && req.Subject.CommonName == "system:node:"+node {
			out = append(out, csr)
		}
	}
	slices.SortFunc(out, func(a, b certificatesv1.CertificateSigningRequest) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return out
}

func deleteNodeCSRs(t *testing.T, c kubernetes.Interface, node string) {
	for _, csr := range nodeCSRs(t, c, node) {
		if err := c.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), csr.Name, metav1.DeleteOptions{}); err != nil {
			t.Logf("delete CSR %s: %v", csr.Name, err)
		}
	}
}

// issued is the certificate of an issued CSR, or nil.
func issued(csr certificatesv1.CertificateSigningRequest) *x509.Certificate {
	block, _ := pem.Decode(csr.Status.Certificate)
	if block == nil {
		return nil
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil
	}
	return cert
}

func approved(csr certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// TestTLSBootstrap joins a process node with only the bootstrap token: its
// CSR is approved by the controller-manager, it runs as system:node:<name>,
// NodeRestriction keeps it off other nodes, a restart reuses its
// certificate, and a lost certificate is requested again.
func TestTLSBootstrap(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(filepath.Join(filepath.Dir(kubeconfig), "bootstrap.kubeconfig")); err != nil {
		t.Skip("the cluster under test has no bootstrap kubeconfig (controlplane up writes one)")
	}
	node := uniqueName(t)
	a := startProcessNodelet(t, node)

	csrs := nodeCSRs(t, client, node)
	if len(csrs) != 1 {
		t.Fatalf("%d CSRs for node %s, want 1", len(csrs), node)
	}
	csr := csrs[0]
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || !approved(csr) || issued(csr) == nil {
		t.Errorf("CSR %s: signer %s, approved %v, issued %v; want %s, approved and issued",
			csr.Name, csr.Spec.SignerName, approved(csr), issued(csr) != nil, certificatesv1.KubeAPIServerClientKubeletSignerName)
	}
	if !strings.HasPrefix(csr.Spec.Username, "system:bootstrap:") {
		t.Errorf("CSR %s requested by %q, want a bootstrap token's user", csr.Name, csr.Spec.Username)
	}
	if out := kubectl(t, "get", "csr", csr.Name); !strings.Contains(out, "Approved,Issued") {
		t.Errorf("kubectl get csr %s:\n%s\nwant Approved,Issued", csr.Name, out)
	}

	nodeKubeconfig := filepath.Join(a.rootDir, "kubeconfig")
	asNode := func(args ...string) (string, error) {
		return kubectlErr(append([]string{"--kubeconfig", nodeKubeconfig}, args...)...)
	}
	who, err := asNode("auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
	if err != nil || !strings.HasPrefix(who, "system:node:"+node+" ") || !strings.Contains(who, "system:nodes") {
		t.Errorf("the node's kubeconfig is %q (%v), want system:node:%s in system:nodes", who, err, node)
	}

	// Another node's status is out of its reach.
	other := uniqueName(t) + "-other"
	kubectl(t, "create", "-f", writeFile(t, "other-node.yaml", fmt.Sprintf("apiVersion: v1\nkind: Node\nmetadata:\n  name: %s\n", other)))
	t.Cleanup(func() { _, _ = kubectlErr("delete", "node", other, "--ignore-not-found") })
	out, err := asNode("patch", "node", other, "--subresource=status", "--type=merge",
		"-p", `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Spoofed"}]}}`)
	if err == nil || !strings.Contains(strings.ToLower(out+err.Error()), "forbidden") {
		t.Errorf("patching node %s's status as node %s: %q %v, want forbidden", other, node, out, err)
	}

	// A restart keeps the certificate.
	a.stop()
	a.start()
	waitReadyAgain(t, node, a.agent)
	if n := len(nodeCSRs(t, client, node)); n != 1 {
		t.Errorf("%d CSRs after a restart, want the first one only", n)
	}

	// A lost certificate is requested again with the bootstrap token.
	a.stop()
	if err := os.Remove(filepath.Join(a.rootDir, "pki", "nodelet-client-current.pem")); err != nil {
		t.Fatal(err)
	}
	a.start()
	waitReadyAgain(t, node, a.agent)
	csrs = nodeCSRs(t, client, node)
	if len(csrs) != 2 || !approved(csrs[1]) || !strings.HasPrefix(csrs[1].Spec.Username, "system:bootstrap:") {
		t.Errorf("after the certificate was lost: %d CSRs, want a second one from the bootstrap token, approved", len(csrs))
	}
}

// TestClientCertificateRotation runs a node against a control plane that
// issues three-minute certificates: the node renews its own before it
// expires and stays Ready past the first one's end, without a restart.
func TestClientCertificateRotation(t *testing.T) {
	t.Parallel()
	if os.Getenv("NODELET_E2E_KUBECONFIG") != "" {
		t.Skip("needs a control plane of its own")
	}
	cp, err := startControlPlane(false, "--controller-manager-arg=--cluster-signing-duration=3m")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.stop(t.Failed()) })
	admin := filepath.Join(cp.dir, "admin.kubeconfig")
	rc, err := clientcmd.BuildConfigFromFlags("", admin)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	// A control plane without metrics-server still configures its
	// aggregator, as kubeadm does: an extension API server a user runs
	// (the conformance suite's sample API server) trusts the front proxy.
	auth, err := c.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if auth.Data["requestheader-client-ca-file"] == "" {
		t.Errorf("extension-apiserver-authentication has no requestheader-client-ca-file: the aggregator is not configured")
	}

	node := uniqueName(t)
	rootDir := t.TempDir()
	a := startNodelet(t, node, "--root-dir", rootDir,
		"--bootstrap-kubeconfig", filepath.Join(cp.dir, "bootstrap.kubeconfig"), "--kubeconfig", filepath.Join(rootDir, "kubeconfig"))
	ready := func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, fmt.Sprintf("Ready=%s %s", cond.Status, cond.Reason)
			}
		}
		return false, "no Ready condition"
	}
	eventually(t, time.Minute, "node Ready", ready)
	csrs := nodeCSRs(t, c, node)
	if len(csrs) != 1 || issued(csrs[0]) == nil {
		t.Fatalf("%d CSRs, want one issued", len(csrs))
	}
	first := issued(csrs[0])
	// The signer backdates NotBefore; what is left is the 3 minutes.
	if left := time.Until(first.NotAfter); left > 3*time.Minute {
		t.Fatalf("the first certificate ends in %s, want within the control plane's 3m", left)
	}

	eventually(t, 4*time.Minute, "a renewed certificate issued", func() (bool, string) {
		csrs = nodeCSRs(t, c, node)
		return len(csrs) >= 2 && issued(csrs[len(csrs)-1]) != nil, fmt.Sprintf("%d CSRs", len(csrs))
	})
	renewal := csrs[len(csrs)-1]
	if renewal.Spec.Username != "system:node:"+node {
		t.Errorf("renewal CSR %s requested by %q, want the node itself", renewal.Name, renewal.Spec.Username)
	}
	// Past the first certificate's end (and a lease beyond), the node is
	// still Ready and its agent has not restarted.
	until := first.NotAfter.Add(45 * time.Second)
	for time.Now().Before(until) {
		if ok, msg := ready(); !ok {
			t.Fatalf("node not Ready while its certificates rotate: %s", msg)
		}
		if done, err := a.exited(); done {
			t.Fatalf("the agent exited: %v", err)
		}
		time.Sleep(5 * time.Second) // sampling the node's state over time, not waiting for it
	}
	lease, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), node, metav1.GetOptions{})
	switch {
	case err != nil:
		t.Errorf("lease: %v", err)
	case lease.Spec.RenewTime == nil || lease.Spec.RenewTime.Time.Before(first.NotAfter):
		t.Errorf("lease renewed at %v, want after the first certificate expired at %s", lease.Spec.RenewTime, first.NotAfter)
	}
	deleteNodeCSRs(t, c, node)
	_ = c.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
}
