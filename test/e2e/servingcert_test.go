package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/test/fault"
)

// TestServingCertFromCSR runs the kubelet API with serverTLSBootstrap, as
// the ServiceAccount of deploy/rbac.yaml: the agent asks for its serving
// certificate with a CSR, serves nothing (and keeps running) until
// `kubectl certificate approve`, then serves the certificate the cluster CA
// issued, and reuses it after a restart.
func TestServingCertFromCSR(t *testing.T) {
	t.Parallel()
	caFile := filepath.Join(filepath.Dir(kubeconfig), "pki", "ca.crt")
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Skipf("no cluster CA next to the kubeconfig (%v): the served certificate cannot be verified", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	ip := hostIP(t)
	node := uniqueName(t)
	// The ServiceAccount's namespace first: it must outlive the agent.
	ns := newNamespace(t)
	kc := serviceAccountKubeconfig(t, ns)
	t.Cleanup(func() { deleteServingCSRs(t, node) })

	port := fault.FreePort(t)
	cfg := writeFile(t, "nodelet.yaml", "apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nserverTLSBootstrap: true\n")
	a := startNodelet(t, node, "--kubeconfig", kc, "--config", cfg, "--enable-server",
		"--port", strconv.Itoa(port), "--address", ip, "--root-dir", t.TempDir())
	addr := net.JoinHostPort(ip, strconv.Itoa(port))

	var csr certificatesv1.CertificateSigningRequest
	eventually(t, 30*time.Second, "a kubelet-serving CSR for "+node, func() (bool, string) {
		csrs, err := servingCSRs(node)
		if err != nil {
			return false, err.Error()
		}
		if len(csrs) == 0 {
			return false, "none"
		}
		csr = csrs[0]
		return true, ""
	})
	if want := "system:serviceaccount:" + ns + ":nodelet"; csr.Spec.Username != want {
		t.Errorf("CSR %s requested by %q, want %q", csr.Name, csr.Spec.Username, want)
	}
	if want := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}; !slices.Equal(csr.Spec.Usages, want) {
		t.Errorf("CSR %s usages %v, want %v", csr.Name, csr.Spec.Usages, want)
	}

	// Pending: the agent runs, says how to approve, and serves nothing.
	eventually(t, 30*time.Second, "the agent's log naming the pending CSR", func() (bool, string) {
		if exited, err := a.exited(); exited {
			t.Fatalf("nodelet exited while CSR %s was pending: %v\n%s", csr.Name, err, lastLines(a.logText(), 30))
		}
		return strings.Contains(a.logText(), "kubectl certificate approve "+csr.Name), lastLines(a.logText(), 5)
	})
	if _, err := servedCert(addr, roots, ip); err == nil {
		t.Errorf("TLS handshake with %s succeeded before CSR %s was approved", addr, csr.Name)
	}

	kubectl(t, "certificate", "approve", csr.Name)
	var served *x509.Certificate
	eventually(t, 60*time.Second, "the kubelet API serving a certificate of the cluster CA for "+ip, func() (bool, string) {
		served, err = servedCert(addr, roots, ip)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if !slices.ContainsFunc(served.IPAddresses, net.ParseIP(ip).Equal) {
		t.Errorf("served certificate's IP SANs %v lack the node's %s", served.IPAddresses, ip)
	}
	if !slices.Contains(served.DNSNames, node) {
		t.Errorf("served certificate's DNS SANs %v lack the node name %s", served.DNSNames, node)
	}
	if want := "system:node:" + node; served.Subject.CommonName != want || !slices.Equal(served.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("served certificate's subject %v, want CN %s O system:nodes", served.Subject, want)
	}
	issued := issuedSerial(t, csr.Name)
	if served.SerialNumber.Cmp(issued) != 0 {
		t.Errorf("served serial %v, want that of CSR %s: %v", served.SerialNumber, csr.Name, issued)
	}

	// A restart serves the kept certificate at once, without a new CSR.
	a.stop()
	a.start()
	eventually(t, 30*time.Second, "the kept certificate served after a restart", func() (bool, string) {
		again, err := servedCert(addr, roots, ip)
		if err != nil {
			return false, err.Error()
		}
		return again.SerialNumber.Cmp(issued) == 0, "serial " + again.SerialNumber.String()
	})
	if csrs, err := servingCSRs(node); err != nil || len(csrs) != 1 {
		t.Errorf("after a restart: %d CSRs for %s (%v), want only %s", len(csrs), node, err, csr.Name)
	}
}

// servedCert connects to addr over TLS, verifying the server's certificate
// with roots for the IP address ip, and returns it.
func servedCert(addr string, roots *x509.CertPool, ip string) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: ip})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// servingCSRs are the kubelet-serving CSRs for node, oldest first.
func servingCSRs(node string) ([]certificatesv1.CertificateSigningRequest, error) {
	list, err := client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.signerName", certificatesv1.KubeletServingSignerName).String(),
	})
	if err != nil {
		return nil, err
	}
	var out []certificatesv1.CertificateSigningRequest
	for _, c := range list.Items {
		block, _ := pem.Decode(c.Spec.Request)
		if block == nil {
			continue
		}
		req, err := x509.ParseCertificateRequest(block.Bytes)
		if err == nil && req.Subject.CommonName == "system:node:"+node {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b certificatesv1.CertificateSigningRequest) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return out, nil
}

// issuedSerial is the serial number of the certificate issued for a CSR.
func issuedSerial(t *testing.T, name string) *big.Int {
	t.Helper()
	c, err := client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(c.Status.Certificate)
	if block == nil {
		t.Fatalf("CSR %s: no certificate issued", name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber
}

func deleteServingCSRs(t *testing.T, node string) {
	csrs, err := servingCSRs(node)
	if err != nil {
		t.Logf("list CSRs of %s: %v", node, err)
	}
	for _, c := range csrs {
		if err := client.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), c.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("delete CSR %s: %v", c.Name, err)
		}
	}
}

// serviceAccountKubeconfig makes a kubeconfig for a new ServiceAccount
// "nodelet" in ns with exactly the rules of deploy/rbac.yaml's ClusterRole
// and Role, copied under names of this test (so that it does not race
// TestLeastPrivilegeRBAC, which applies and deletes the manifest itself).
func serviceAccountKubeconfig(t *testing.T, ns string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "deploy/rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var clusterRules, leaseRules []rbacv1.PolicyRule
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var obj struct {
			Kind  string              `json:"kind"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("deploy/rbac.yaml: %v", err)
		}
		switch obj.Kind {
		case "ClusterRole":
			clusterRules = obj.Rules
		case "Role":
			leaseRules = obj.Rules
		}
	}
	if clusterRules == nil || leaseRules == nil {
		t.Fatal("deploy/rbac.yaml: no ClusterRole or no Role")
	}

	ctx := context.Background()
	name := ns // unique, and a valid RBAC object name
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "nodelet", Namespace: ns}}
	kubectl(t, "create", "serviceaccount", "nodelet", "-n", ns)
	rbac := client.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: clusterRules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   subjects,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	const leaseNS = "kube-node-lease"
	if _, err := rbac.Roles(leaseNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: leaseRules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.Roles(leaseNS).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if _, err := rbac.RoleBindings(leaseNS).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   subjects,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.RoleBindings(leaseNS).Delete(context.Background(), name, metav1.DeleteOptions{}) })

	return tokenKubeconfig(t, ns, "nodelet")
}
