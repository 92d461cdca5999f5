package nodecert

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
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/csrtest"
)

// runCerts runs c until the returned stop is called (or the test ends).
func runCerts(ctx context.Context, t *testing.T, c *Certificates) (stop func()) {
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

func serialOf(c *Certificates) *big.Int {
	if cur := c.cert(); cur != nil {
		return cur.Leaf.SerialNumber
	}
	return nil
}

var testHosts = []string{"node-a", "10.0.0.5", "node-a"}

// newServing is node-a's serving certificate requested with client.
func newServing(client kubernetes.Interface, hosts []string, dir string, clk clock.WithTicker) *Certificates {
	return New(Serving, "node-a", func() (kubernetes.Interface, error) { return client, nil }, Options{Hosts: hosts, Dir: dir, Clock: clk})
}

func TestCSRRequestedIssuedKeptAndRotated(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, ca, dir := csrtest.NewClient(), csrtest.NewCA(t), t.TempDir()
	clk := testingclock.NewFakeClock(time.Now())
	c := newServing(client, testHosts, dir, clk)
	c.LoadStored(ctx) // nothing kept yet
	stop := runCerts(ctx, t, c)

	obj := client.WaitCSRs(t, 1)
	if obj.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		t.Errorf("signerName = %q, want %q", obj.Spec.SignerName, certificatesv1.KubeletServingSignerName)
	}
	if want := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}; !slices.Equal(obj.Spec.Usages, want) {
		t.Errorf("usages = %v, want %v", obj.Spec.Usages, want)
	}
	req := csrtest.ParseRequest(t, obj)
	if req.Subject.CommonName != "system:node:node-a" || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("subject = %v, want CN system:node:node-a O system:nodes", req.Subject)
	}
	if !slices.Equal(req.DNSNames, []string{"node-a"}) || len(req.IPAddresses) != 1 || !req.IPAddresses[0].Equal(net.ParseIP("10.0.0.5")) {
		t.Errorf("SANs = %v %v, want node-a 10.0.0.5", req.DNSNames, req.IPAddresses)
	}
	if _, ok := req.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("key is %T, want ECDSA", req.PublicKey)
	}
	csrtest.Poll(t, "handshakes refused naming the pending CSR", func() bool {
		_, err := c.GetCertificate(nil)
		return err != nil && strings.Contains(err.Error(), obj.Name)
	})

	issued := client.Approve(t, ca, obj, clk.Now(), 10*time.Hour)
	csrtest.Poll(t, "the issued certificate served", func() bool {
		got, err := c.GetCertificate(nil)
		return err == nil && got.Leaf.SerialNumber.Cmp(issued.SerialNumber) == 0
	})
	fi, err := os.Stat(filepath.Join(dir, Serving.File))
	if err != nil {
		t.Fatalf("certificate not kept: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("kept certificate mode %v, want 0600 (it holds the key)", fi.Mode().Perm())
	}
	stop()

	// A restart serves the kept certificate at once and asks for nothing
	// before its rotation deadline, at 80% of its 10 h.
	c = newServing(client, testHosts, dir, clk)
	c.LoadStored(ctx)
	if got := serialOf(c); got == nil || got.Cmp(issued.SerialNumber) != 0 {
		t.Fatalf("after a restart serving serial %v, want the kept %v", got, issued.SerialNumber)
	}
	runCerts(ctx, t, c)
	csrtest.Poll(t, "waiting for the rotation deadline", clk.HasWaiters)
	clk.Step(7*time.Hour + 59*time.Minute)
	csrtest.Poll(t, "still waiting for the rotation deadline", clk.HasWaiters)
	if n := len(client.List(t)); n != 1 {
		t.Fatalf("%d CSRs before the rotation deadline, want 1", n)
	}
	clk.Step(2 * time.Minute)
	obj = client.WaitCSRs(t, 2)
	if got := serialOf(c); got.Cmp(issued.SerialNumber) != 0 {
		t.Errorf("while the new CSR is pending serving serial %v, want the current %v", got, issued.SerialNumber)
	}
	renewed := client.Approve(t, ca, obj, clk.Now(), 10*time.Hour)
	csrtest.Poll(t, "the renewed certificate served", func() bool {
		got := serialOf(c)
		return got != nil && got.Cmp(renewed.SerialNumber) == 0
	})
	data, err := os.ReadFile(filepath.Join(dir, Serving.File))
	if err != nil {
		t.Fatal(err)
	}
	kept, err := tls.X509KeyPair(data, data)
	if err != nil || kept.Leaf.SerialNumber.Cmp(renewed.SerialNumber) != 0 {
		t.Errorf("kept certificate after renewal: %v, %v; want serial %v", kept.Leaf, err, renewed.SerialNumber)
	}
}

func TestCSRRefused(t *testing.T) {
	for _, tt := range []struct {
		name    string
		refuse  func(*testing.T, *csrtest.Client, *certificatesv1.CertificateSigningRequest)
		wantErr error
		detail  string
	}{
		{"denied", func(t *testing.T, c *csrtest.Client, o *certificatesv1.CertificateSigningRequest) {
			c.Refuse(t, o, certificatesv1.CertificateDenied)
		}, errCSRDenied, "TestReason test message"},
		{"failed", func(t *testing.T, c *csrtest.Client, o *certificatesv1.CertificateSigningRequest) {
			c.Refuse(t, o, certificatesv1.CertificateFailed)
		}, errCSRFailed, "TestReason test message"},
		{"deleted", func(t *testing.T, c *csrtest.Client, o *certificatesv1.CertificateSigningRequest) {
			c.WhenWatched(t, o.Name)
			if err := c.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), o.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, errCSRGone, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := csrtest.NewClient()
			c := newServing(client, testHosts, t.TempDir(), testingclock.NewFakeClock(time.Now()))
			errCh := make(chan error, 1)
			go func() {
				_, _, err := c.request(ctx)
				errCh <- err
			}()
			obj := client.WaitCSRs(t, 1)
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
	client, ca := csrtest.NewClient(), csrtest.NewCA(t)
	clk := testingclock.NewFakeClock(time.Now())
	c := newServing(client, testHosts, "", clk)
	runCerts(ctx, t, c)

	denied := client.WaitCSRs(t, 1)
	client.Refuse(t, denied, certificatesv1.CertificateDenied)
	csrtest.Poll(t, "the denial logged", func() bool {
		log := logBuffer(logger)
		return strings.Contains(log, "No certificate from the certificates API") && strings.Contains(log, "CSR "+denied.Name+": denied")
	})
	csrtest.Poll(t, "waiting to retry", clk.HasWaiters)
	clk.Step(retryInitial)
	obj := client.WaitCSRs(t, 2)
	if obj.Name == denied.Name {
		t.Fatalf("retried with the denied CSR %s", obj.Name)
	}
	issued := client.Approve(t, ca, obj, clk.Now(), time.Hour)
	csrtest.Poll(t, "the certificate of the second CSR served", func() bool {
		got := serialOf(c)
		return got != nil && got.Cmp(issued.SerialNumber) == 0
	})
}

func TestCSRPendingIsRemindedNotRecreated(t *testing.T) {
	logger, ctx := bufferedContext(t)
	client := csrtest.NewClient()
	c := newServing(client, testHosts, "", testingclock.NewFakeClock(time.Now()))
	c.reminder = 50 * time.Millisecond
	runCerts(ctx, t, c)
	obj := client.WaitCSRs(t, 1)
	csrtest.Poll(t, "the reminder logged twice", func() bool {
		return strings.Count(logBuffer(logger), "Still waiting for the certificate's CSR to be approved") >= 2
	})
	log := logBuffer(logger)
	if !strings.Contains(log, "kubectl certificate approve "+obj.Name) {
		t.Errorf("the log does not say how to approve %s:\n%s", obj.Name, log)
	}
	if n := len(client.List(t)); n != 1 {
		t.Errorf("%d CSRs while one is pending, want 1", n)
	}
}

func TestKeptCertificateMustFit(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ca := csrtest.NewCA(t)
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
			dns, ips := SplitHosts(tt.hosts)
			certPEM := ca.Sign(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: tt.cn}, DNSNames: dns, IPAddresses: ips, PublicKey: &key.PublicKey}, tt.notBefore, tt.life, x509.ExtKeyUsageServerAuth)
			keyDER, err := x509.MarshalECPrivateKey(key)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			data := append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
			if err := os.WriteFile(filepath.Join(dir, Serving.File), data, 0o600); err != nil {
				t.Fatal(err)
			}
			c := newServing(fake.NewClientset(), testHosts, dir, testingclock.NewFakeClock(now))
			c.LoadStored(ctx)
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
