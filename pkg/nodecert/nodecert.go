package server

// Serving certificates requested through the certificates API, as the
// kubelet does with serverTLSBootstrap: the cluster's kubelet-serving signer
// issues them, so that clients that trust the cluster CA can verify the
// kubelet API. The certificate is kept on disk, served through
// tls.Config.GetCertificate and replaced before it expires.

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
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

// csrFileName holds the issued certificate and its key under CertDir, in
// one file so that they are replaced together.
const csrFileName = "nodelet-server-current.pem"

const (
	// rotateAt is the share of a certificate's lifetime after which a new
	// one is requested.
	rotateAt = 0.8
	// pendingReminder is how often the wait for approval is logged again.
	pendingReminder = 5 * time.Minute
	// retryInitial and retryMax bound the back-off between failed requests
	// (API errors, denied or failed CSRs).
	retryInitial = 10 * time.Second
	retryMax     = 5 * time.Minute
)

// Why a CSR gave no certificate; each error also names the CSR.
var (
	errCSRDenied = errors.New("denied")
	errCSRFailed = errors.New("failed")
	errCSRGone   = errors.New("deleted before a certificate was issued")
)

// csrCertificates keeps a serving certificate issued through a
// CertificateSigningRequest current. Build it with newCSRCertificates, load
// the kept certificate with loadStored, and keep it current with Run.
type csrCertificates struct {
	client   kubernetes.Interface
	nodeName string
	hosts    []string
	dir      string // where the certificate is kept; empty keeps it in memory
	clock    clock.WithTicker
	reminder time.Duration

	mu      sync.Mutex
	current *tls.Certificate // with Leaf set; nil until the first is issued
	pending string           // the CSR awaiting approval, if any
}

func newCSRCertificates(client kubernetes.Interface, nodeName string, hosts []string, dir string, clk clock.WithTicker) *csrCertificates {
	return &csrCertificates{client: client, nodeName: nodeName, hosts: hosts, dir: dir, clock: clk, reminder: pendingReminder}
}

// getCertificate is the tls.Config's GetCertificate. Until a certificate is
// issued (or when the last one expired) handshakes fail, as the kubelet's do.
func (c *csrCertificates) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != nil && c.clock.Now().Before(c.current.Leaf.NotAfter) {
		return c.current, nil
	}
	if c.pending != "" {
		return nil, fmt.Errorf("no serving certificate yet: CSR %s awaits approval", c.pending)
	}
	return nil, errors.New("no serving certificate yet")
}

func (c *csrCertificates) cert() *tls.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

func (c *csrCertificates) setPending(name string) {
	c.mu.Lock()
	c.pending = name
	c.mu.Unlock()
}

// loadStored serves the certificate kept in the directory, if it is still
// valid and was issued for this node and its hosts. One past its rotation
// deadline is served until Run has a new one.
func (c *csrCertificates) loadStored(ctx context.Context) {
	if c.dir == "" {
		return
	}
	logger := klog.FromContext(ctx)
	path := filepath.Join(c.dir, csrFileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		logger.Info("Not using the kept serving certificate", "path", path, "err", err)
		return
	}
	cert, err := tls.X509KeyPair(data, data)
	if err != nil {
		logger.Info("Not using the kept serving certificate", "path", path, "err", err)
		return
	}
	if reason := c.unfit(cert.Leaf); reason != "" {
		logger.Info("Not using the kept serving certificate", "path", path, "reason", reason)
		return
	}
	c.mu.Lock()
	c.current = &cert
	c.mu.Unlock()
	logger.Info("Using the kept serving certificate", "path", path, "notAfter", cert.Leaf.NotAfter, "rotation", rotationDeadline(cert.Leaf))
}

// unfit says why cert cannot serve as this node's certificate now, or "".
func (c *csrCertificates) unfit(cert *x509.Certificate) string {
	if want := "system:node:" + c.nodeName; cert.Subject.CommonName != want {
		return fmt.Sprintf("issued to %q, not %q", cert.Subject.CommonName, want)
	}
	if !c.clock.Now().Before(cert.NotAfter) {
		return "expired at " + cert.NotAfter.String()
	}
	return uncovered(cert, c.hosts)
}

// Run requests a certificate when there is none or the current one is past
// its rotation deadline, and retries failures with back-off, until ctx ends.
func (c *csrCertificates) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	retry := retryInitial
	for {
		if cur := c.cert(); cur != nil {
			if wait := rotationDeadline(cur.Leaf).Sub(c.clock.Now()); wait > 0 {
				if !c.sleep(ctx, wait) {
					return nil
				}
				continue
			}
			logger.Info("Renewing the serving certificate", "notAfter", cur.Leaf.NotAfter)
		}
		cert, name, err := c.request(ctx)
		c.setPending("")
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			logger.Error(err, "No serving certificate from the certificates API; retrying", "retryIn", retry)
			if !c.sleep(ctx, retry) {
				return nil
			}
			retry = min(2*retry, retryMax)
			continue
		}
		retry = retryInitial
		c.mu.Lock()
		c.current = cert
		c.mu.Unlock()
		logger.Info("Serving the certificate issued for CSR", "csr", name, "notAfter", cert.Leaf.NotAfter, "rotation", rotationDeadline(cert.Leaf))
	}
}

// sleep waits for d on the clock; false means ctx ended first.
func (c *csrCertificates) sleep(ctx context.Context, d time.Duration) bool {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// rotationDeadline is when a new certificate is requested in place of cert.
func rotationDeadline(cert *x509.Certificate) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotBefore.Add(time.Duration(float64(life) * rotateAt))
}

// request makes a new key, asks for a certificate for it, waits until the
// certificate is issued and keeps both in the directory. It returns the
// certificate and the name of its CSR.
func (c *csrCertificates) request(ctx context.Context) (*tls.Certificate, string, error) {
	logger := klog.FromContext(ctx)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", fmt.Errorf("generate key: %w", err)
	}
	dnsNames, ips := splitHosts(c.hosts)
	subject := &pkix.Name{CommonName: "system:node:" + c.nodeName, Organization: []string{"system:nodes"}}
	csrPEM, err := certutil.MakeCSR(key, subject, dnsNames, ips)
	if err != nil {
		return nil, "", fmt.Errorf("make certificate request: %w", err)
	}
	// Key encipherment is for RSA keys only: an ECDSA key signs.
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	name, uid, err := csr.RequestCertificateWithContext(ctx, c.client, csrPEM, "", certificatesv1.KubeletServingSignerName, nil, usages, key)
	if err != nil {
		return nil, "", fmt.Errorf("create CSR: %w", err)
	}
	c.setPending(name)
	logger.Info("Waiting for the serving certificate's CSR to be approved", "csr", name, "approve", "kubectl certificate approve "+name)

	certPEM, err := c.waitIssued(ctx, name, uid)
	if err != nil {
		return nil, name, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, name, fmt.Errorf("encode key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, name, fmt.Errorf("certificate issued for CSR %s: %w", name, err)
	}
	if reason := c.unfit(cert.Leaf); reason != "" {
		return nil, name, fmt.Errorf("certificate issued for CSR %s: %s", name, reason)
	}
	if c.dir != "" {
		path := filepath.Join(c.dir, csrFileName)
		err := os.MkdirAll(c.dir, 0o755)
		if err == nil {
			err = atomicfile.Write(path, append(append([]byte{}, certPEM...), keyPEM...), atomicfile.Options{Perm: 0o600})
		}
		if err != nil {
			// Served all the same; a restart requests another one.
			logger.Error(err, "Could not keep the serving certificate", "path", path)
		}
	}
	return &cert, name, nil
}

// waitIssued watches the CSR until its certificate is issued, it is denied
// or failed, or it is deleted. A pending CSR is waited for as long as it
// exists (the cluster deletes unapproved ones after a day), reminding the
// administrator now and then.
func (c *csrCertificates) waitIssued(ctx context.Context, name string, uid types.UID) ([]byte, error) {
	logger := klog.FromContext(ctx)
	for {
		waitCtx, cancel := context.WithTimeout(ctx, c.reminder)
		certPEM, err := csr.WaitForCertificate(waitCtx, c.client, name, uid)
		cancel()
		if err == nil {
			return certPEM, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("CSR %s: %w", name, ctx.Err())
		}
		// The helper's errors are text: the CSR itself says what happened.
		obj, getErr := c.client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(getErr) || getErr == nil && obj.UID != uid:
			return nil, fmt.Errorf("CSR %s: %w", name, errCSRGone)
		case getErr == nil:
			if err := refused(obj); err != nil {
				return nil, err
			}
		}
		if !wait.Interrupted(err) {
			return nil, fmt.Errorf("CSR %s: %w", name, err)
		}
		logger.Info("Still waiting for the serving certificate's CSR to be approved", "csr", name, "approve", "kubectl certificate approve "+name)
	}
}

// refused returns an error naming the CSR if it was denied or failed.
func refused(obj *certificatesv1.CertificateSigningRequest) error {
	for _, cond := range obj.Status.Conditions {
		var kind error
		switch cond.Type {
		case certificatesv1.CertificateDenied:
			kind = errCSRDenied
		case certificatesv1.CertificateFailed:
			kind = errCSRFailed
		default:
			continue
		}
		detail := strings.TrimSpace(strings.Join([]string{cond.Reason, cond.Message}, " "))
		if detail == "" {
			return fmt.Errorf("CSR %s: %w", obj.Name, kind)
		}
		return fmt.Errorf("CSR %s: %w: %s", obj.Name, kind, detail)
	}
	return nil
}
