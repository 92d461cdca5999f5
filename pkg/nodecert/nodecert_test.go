package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var serials atomic.Int64

// sign issues the certificate a CSR asks for, valid from notBefore for life,
// as the cluster's kubelet-serving signer would.
func (ca *testCA) sign(t *testing.T, req *x509.CertificateRequest, notBefore time.Time, life time.Duration) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(100 + serials.Add(1)),
		Subject:      req.Subject,
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPAddresses,
		NotBefore:    notBefore,
		NotAfter:     notBefore.Add(life),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, req.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// csrFake is a fake clientset that names and numbers CSRs and selects them
// by metadata.name as the API server does (the fake tracker does neither).
// Its watches start from now, not from the listed resource version: a test
// changes a CSR only once it is watched (whenWatched), or the change is lost.
type csrFake struct {
	*fake.Clientset
	mu      sync.Mutex
	watched map[string]bool // CSR names
}

func csrClient() *csrFake {
	client := &csrFake{Clientset: fake.NewClientset(), watched: map[string]bool{}}
	var n atomic.Int64
	client.PrependReactor("create", "certificatesigningrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		obj := action.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		i := n.Add(1)
		if obj.Name == "" {
			obj.Name = fmt.Sprintf("%s%d", obj.GenerateName, i)
		}
		obj.UID = types.UID(fmt.Sprintf("uid-%d", i))
		return false, nil, nil
	})
	gvr := certificatesv1.SchemeGroupVersion.WithResource("certificatesigningrequests")
	gvk := certificatesv1.SchemeGroupVersion.WithKind("CertificateSigningRequest")
	selected := func(sel fields.Selector, obj runtime.Object) bool {
		csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
		return !ok || sel.Matches(fields.Set{"metadata.name": csr.Name})
	}
	client.PrependReactor("list", "certificatesigningrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sel := action.(k8stesting.ListAction).GetListRestrictions().Fields
		if sel == nil || sel.Empty() {
			return false, nil, nil
		}
		obj, err := client.Tracker().List(gvr, gvk, "")
		if err != nil {
			return true, nil, err
		}
		list := obj.(*certificatesv1.CertificateSigningRequestList)
		list.Items = slices.DeleteFunc(list.Items, func(c certificatesv1.CertificateSigningRequest) bool { return !selected(sel, &c) })
		return true, list, nil
	})
	client.PrependWatchReactor("certificatesigningrequests", func(action k8stesting.Action) (bool, watch.Interface, error) {
		sel := action.(k8stesting.WatchAction).GetWatchRestrictions().Fields
		w, err := client.Tracker().Watch(gvr, "")
		if err != nil || sel == nil || sel.Empty() {
			return true, w, err
		}
		if name, ok := sel.RequiresExactMatch("metadata.name"); ok {
			client.mu.Lock()
			client.watched[name] = true
			client.mu.Unlock()
		}
		return true, watch.Filter(w, func(e watch.Event) (watch.Event, bool) { return e, selected(sel, e.Object) }), nil
	})
	return client
}

// whenWatched waits until someone watches the CSR named name.
func (c *csrFake) whenWatched(t *testing.T, name string) {
	t.Helper()
	poll(t, "CSR "+name+" watched", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.watched[name]
	})
}

// poll checks cond every 10ms until it holds, failing the test after 10s.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitCSRs waits for n CSRs and returns the newest.
func waitCSRs(t *testing.T, client *csrFake, n int) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var list *certificatesv1.CertificateSigningRequestList
	poll(t, fmt.Sprintf("%d CSRs", n), func() bool {
		var err error
		list, err = client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
		return err == nil && len(list.Items) >= n
	})
	if len(list.Items) != n {
		t.Fatalf("%d CSRs, want %d", len(list.Items), n)
	}
	newest := slices.MaxFunc(list.Items, func(a, b certificatesv1.CertificateSigningRequest) int {
		return strings.Compare(string(a.UID), string(b.UID))
	})
	return &newest
}

func parseRequest(t *testing.T, obj *certificatesv1.CertificateSigningRequest) *x509.CertificateRequest {
	t.Helper()
	block, _ := pem.Decode(obj.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		t.Fatalf("CSR %s: request is not a PEM certificate request", obj.Name)
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// approve approves the CSR, then issues its certificate, as an
// administrator and the signer controller do.
func approve(t *testing.T, client *csrFake, ca *testCA, obj *certificatesv1.CertificateSigningRequest, notBefore time.Time, life time.Duration) *x509.Certificate {
	t.Helper()
	client.whenWatched(t, obj.Name)
	ctx := context.Background()
	obj = obj.DeepCopy()
	obj.Status.Conditions = append(obj.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "TestApproved",
	})
	obj, err := client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, obj.Name, obj, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.Status.Certificate = ca.sign(t, parseRequest(t, obj), notBefore, life)
	if _, err := client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(obj.Status.Certificate)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// refuse sets a Denied or Failed condition on the CSR.
func refuse(t *testing.T, client *csrFake, obj *certificatesv1.CertificateSigningRequest, ct certificatesv1.RequestConditionType) {
	t.Helper()
	client.whenWatched(t, obj.Name)
	obj = obj.DeepCopy()
	obj.Status.Conditions = append(obj.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: ct, Status: corev1.ConditionTrue, Reason: "TestReason", Message: "test message",
	})
	var err error
	if ct == certificatesv1.CertificateDenied {
		_, err = client.CertificatesV1().CertificateSigningRequests().UpdateApproval(context.Background(), obj.Name, obj, metav1.UpdateOptions{})
	} else {
		_, err = client.CertificatesV1().CertificateSigningRequests().UpdateStatus(context.Background(), obj, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// runCerts runs c until the returned stop is called (or the test ends).
func runCerts(ctx context.Context, t *testing.T, c *csrCertificates) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func serialOf(c *csrCertificates) *big.Int {
	if cur := c.cert(); cur != nil {
		return cur.Leaf.SerialNumber
	}
	return nil
}

var testHosts = []string{"node-a", "10.0.0.5", "node-a"}

func TestCSRRequestedIssuedKeptAndRotated(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, ca, dir := csrClient(), newTestCA(t), t.TempDir()
	clk := testingclock.NewFakeClock(time.Now())
	c := newCSRCertificates(client, "node-a", testHosts, dir, clk)
	c.loadStored(ctx) // nothing kept yet
	stop := runCerts(ctx, t, c)

	obj := waitCSRs(t, client, 1)
	if obj.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		t.Errorf("signerName = %q, want %q", obj.Spec.SignerName, certificatesv1.KubeletServingSignerName)
	}
	if want := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}; !slices.Equal(obj.Spec.Usages, want) {
		t.Errorf("usages = %v, want %v", obj.Spec.Usages, want)
	}
	req := parseRequest(t, obj)
	if req.Subject.CommonName != "system:node:node-a" || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("subject = %v, want CN system:node:node-a O system:nodes", req.Subject)
	}
	if !slices.Equal(req.DNSNames, []string{"node-a"}) || len(req.IPAddresses) != 1 || !req.IPAddresses[0].Equal(net.ParseIP("10.0.0.5")) {
		t.Errorf("SANs = %v %v, want node-a 10.0.0.5", req.DNSNames, req.IPAddresses)
	}
	if _, ok := req.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("key is %T, want ECDSA", req.PublicKey)
	}
	poll(t, "handshakes refused naming the pending CSR", func() bool {
		_, err := c.getCertificate(nil)
		return err != nil && strings.Contains(err.Error(), obj.Name)
	})

	issued := approve(t, client, ca, obj, clk.Now(), 10*time.Hour)
	poll(t, "the issued certificate served", func() bool {
		got, err := c.getCertificate(nil)
		return err == nil && got.Leaf.SerialNumber.Cmp(issued.SerialNumber) == 0
	})
	fi, err := os.Stat(filepath.Join(dir, csrFileName))
	if err != nil {
		t.Fatalf("certificate not kept: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("kept certificate mode %v, want 0600 (it holds the key)", fi.Mode().Perm())
	}
	stop()

	// A restart serves the kept certificate at once and asks for nothing
	// before its rotation deadline, at 80% of its 10 h.
	c = newCSRCertificates(client, "node-a", testHosts, dir, clk)
	c.loadStored(ctx)
	if got := serialOf(c); got == nil || got.Cmp(issued.SerialNumber) != 0 {
		t.Fatalf("after a restart serving serial %v, want the kept %v", got, issued.SerialNumber)
	}
	runCerts(ctx, t, c)
	poll(t, "waiting for the rotation deadline", clk.HasWaiters)
	clk.Step(7*time.Hour + 59*time.Minute)
	poll(t, "still waiting for the rotation deadline", clk.HasWaiters)
	if n := len(csrList(t, client)); n != 1 {
		t.Fatalf("%d CSRs before the rotation deadline, want 1", n)
	}
	clk.Step(2 * time.Minute)
	obj = waitCSRs(t, client, 2)
	if got := serialOf(c); got.Cmp(issued.SerialNumber) != 0 {
		t.Errorf("while the new CSR is pending serving serial %v, want the current %v", got, issued.SerialNumber)
	}
	renewed := approve(t, client, ca, obj, clk.Now(), 10*time.Hour)
	poll(t, "the renewed certificate served", func() bool {
		got := serialOf(c)
		return got != nil && got.Cmp(renewed.SerialNumber) == 0
	})
	data, err := os.ReadFile(filepath.Join(dir, csrFileName))
	if err != nil {
		t.Fatal(err)
	}
	kept, err := tls.X509KeyPair(data, data)
	if err != nil || kept.Leaf.SerialNumber.Cmp(renewed.SerialNumber) != 0 {
		t.Errorf("kept certificate after renewal: %v, %v; want serial %v", kept.Leaf, err, renewed.SerialNumber)
	}
}

func csrList(t *testing.T, client *csrFake) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	list, err := client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func TestCSRRefused(t *testing.T) {
	for _, tt := range []struct {
		name    string
		refuse  func(*testing.T, *csrFake, *certificatesv1.CertificateSigningRequest)
		wantErr error
		detail  string
	}{
		{"denied", func(t *testing.T, c *csrFake, o *certificatesv1.CertificateSigningRequest) {
			refuse(t, c, o, certificatesv1.CertificateDenied)
		}, errCSRDenied, "TestReason test message"},
		{"failed", func(t *testing.T, c *csrFake, o *certificatesv1.CertificateSigningRequest) {
			refuse(t, c, o, certificatesv1.CertificateFailed)
		}, errCSRFailed, "TestReason test message"},
		{"deleted", func(t *testing.T, c *csrFake, o *certificatesv1.CertificateSigningRequest) {
			c.whenWatched(t, o.Name)
			if err := c.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), o.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, errCSRGone, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := csrClient()
			c := newCSRCertificates(client, "node-a", testHosts, t.TempDir(), testingclock.NewFakeClock(time.Now()))
			errCh := make(chan error, 1)
			go func() {
				_, _, err := c.request(ctx)
				errCh <- err
			}()
			obj := waitCSRs(t, client, 1)
			tt.refuse(t, client, obj)
			var err error
			select {
			case err = <-errCh:
			case <-time.After(10 * time.Second):
				t.Fatal("request still waiting 10s after the CSR was refused")
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), obj.Name) || !strings.Contains(err.Error(), tt.detail) {
				t.Errorf("request error = %v, want %v naming %s and %q", err, tt.wantErr, obj.Name, tt.detail)
			}
			if c.cert() != nil {
				t.Error("a refused CSR gave a certificate")
			}
		})
	}
}

// bufferedContext is a test context whose logger keeps what it logged.
func bufferedContext(t *testing.T) (klog.Logger, context.Context) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	return logger, klog.NewContext(context.Background(), logger)
}

// logBuffer is what a buffered test logger has logged so far.
func logBuffer(logger klog.Logger) string {
	return logger.GetSink().(ktesting.Underlier).GetBuffer().String()
}

func TestCSRDeniedIsLoggedAndRetried(t *testing.T) {
	logger, ctx := bufferedContext(t)
	client, ca := csrClient(), newTestCA(t)
	clk := testingclock.NewFakeClock(time.Now())
	c := newCSRCertificates(client, "node-a", testHosts, "", clk)
	runCerts(ctx, t, c)

	denied := waitCSRs(t, client, 1)
	refuse(t, client, denied, certificatesv1.CertificateDenied)
	poll(t, "the denial logged", func() bool {
		log := logBuffer(logger)
		return strings.Contains(log, "No serving certificate") && strings.Contains(log, "CSR "+denied.Name+": denied")
	})
	poll(t, "waiting to retry", clk.HasWaiters)
	clk.Step(retryInitial)
	obj := waitCSRs(t, client, 2)
	if obj.Name == denied.Name {
		t.Fatalf("retried with the denied CSR %s", obj.Name)
	}
	issued := approve(t, client, ca, obj, clk.Now(), time.Hour)
	poll(t, "the certificate of the second CSR served", func() bool {
		got := serialOf(c)
		return got != nil && got.Cmp(issued.SerialNumber) == 0
	})
}

func TestCSRPendingIsRemindedNotRecreated(t *testing.T) {
	logger, ctx := bufferedContext(t)
	client := csrClient()
	c := newCSRCertificates(client, "node-a", testHosts, "", testingclock.NewFakeClock(time.Now()))
	c.reminder = 50 * time.Millisecond
	runCerts(ctx, t, c)
	obj := waitCSRs(t, client, 1)
	poll(t, "the reminder logged twice", func() bool {
		return strings.Count(logBuffer(logger), "Still waiting for the serving certificate's CSR to be approved") >= 2
	})
	log := logBuffer(logger)
	if !strings.Contains(log, "kubectl certificate approve "+obj.Name) {
		t.Errorf("the log does not say how to approve %s:\n%s", obj.Name, log)
	}
	if n := len(csrList(t, client)); n != 1 {
		t.Errorf("%d CSRs while one is pending, want 1", n)
	}
}

func TestKeptCertificateMustFit(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ca := newTestCA(t)
	now := time.Now()
	for _, tt := range []struct {
		name      string
		cn        string
		hosts     []string
		notBefore time.Time
		life      time.Duration
		want      bool
	}{
		{"fits", "system:node:node-a", testHosts, now.Add(-time.Hour), 10 * time.Hour, true},
		{"past its rotation deadline, still valid", "system:node:node-a", testHosts, now.Add(-9 * time.Hour), 10 * time.Hour, true},
		{"expired", "system:node:node-a", testHosts, now.Add(-11 * time.Hour), 10 * time.Hour, false},
		{"another node", "system:node:node-b", testHosts, now.Add(-time.Hour), 10 * time.Hour, false},
		{"an address missing", "system:node:node-a", []string{"node-a"}, now.Add(-time.Hour), 10 * time.Hour, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			dns, ips := splitHosts(tt.hosts)
			certPEM := ca.sign(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: tt.cn}, DNSNames: dns, IPAddresses: ips, PublicKey: &key.PublicKey}, tt.notBefore, tt.life)
			keyDER, err := x509.MarshalECPrivateKey(key)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			data := append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
			if err := os.WriteFile(filepath.Join(dir, csrFileName), data, 0o600); err != nil {
				t.Fatal(err)
			}
			c := newCSRCertificates(fake.NewClientset(), "node-a", testHosts, dir, testingclock.NewFakeClock(now))
			c.loadStored(ctx)
			if got := c.cert() != nil; got != tt.want {
				t.Errorf("kept certificate used = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRotationDeadline(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	got := rotationDeadline(&x509.Certificate{NotBefore: start, NotAfter: start.Add(100 * time.Hour)})
	if want := start.Add(80 * time.Hour); !got.Equal(want) {
		t.Errorf("rotation deadline = %v, want %v", got, want)
	}
}

// TestServerTLSBootstrap serves nothing until the CSR is approved, then the
// issued certificate, verifiable with the CA, without a restart.
func TestServerTLSBootstrap(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, ca := csrClient(), newTestCA(t)
	s, err := New(client, newBackend(), Options{
		NodeName: "node-a", Hosts: []string{"node-a", "127.0.0.1"}, TLSBootstrap: true, CertDir: t.TempDir(),
		AuthorizationMode: AuthorizationModeAlwaysAllow, WebhookAuthentication: ptr.To(false), Anonymous: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	dial := func() (*x509.Certificate, error) {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	obj := waitCSRs(t, client, 1)
	if _, err := dial(); err == nil {
		t.Fatal("TLS handshake succeeded before the CSR was approved")
	}
	select {
	case err := <-done:
		t.Fatalf("server stopped while the CSR was pending: %v", err)
	default:
	}
	issued := approve(t, client, ca, obj, time.Now().Add(-time.Minute), time.Hour)
	var served *x509.Certificate
	poll(t, "the issued certificate served", func() bool {
		served, err = dial()
		return err == nil
	})
	if served.SerialNumber.Cmp(issued.SerialNumber) != 0 {
		t.Errorf("served serial %v, want the issued %v", served.SerialNumber, issued.SerialNumber)
	}
}

func TestNewTLSBootstrapOptions(t *testing.T) {
	if _, err := New(fake.NewClientset(), newBackend(), Options{NodeName: "n", TLSBootstrap: true, TLSCertFile: "c", TLSPrivateKeyFile: "k"}); err == nil || !strings.Contains(err.Error(), "tlsBootstrap") {
		t.Errorf("New with tlsBootstrap and tlsCertFile = %v, want an error naming tlsBootstrap", err)
	}
	if _, err := New(nil, newBackend(), Options{NodeName: "n", TLSBootstrap: true, AuthorizationMode: AuthorizationModeAlwaysAllow, Anonymous: true, WebhookAuthentication: ptr.To(false)}); err == nil || !strings.Contains(err.Error(), "tlsBootstrap") {
		t.Errorf("New with tlsBootstrap and no client = %v, want an error naming tlsBootstrap", err)
	}
}
