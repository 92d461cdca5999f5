// Package nodecert keeps a node's certificates that the cluster issues
// through the certificates API current, as the kubelet does: the serving
// certificate of its kubelet API (serverTLSBootstrap) and the client
// certificate it talks to the API server with (TLS bootstrap). Each is
// requested by a CertificateSigningRequest for a new key, kept on disk with
// its key, handed out from memory and replaced before it expires. It never
// approves a request: the cluster (or its administrator) does.
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

// Kind is which certificate of the node is kept: whom it is requested from,
// what for, and the file that holds it and its key (in one file, so that they
// are replaced together).
type Kind struct {
	Name   string // "serving" or "client", for messages
	Signer string
	Usage  certificatesv1.KeyUsage
	File   string
}

var (
	// Serving is the kubelet API's certificate, for the node's hosts.
	Serving = Kind{Name: "serving", Signer: certificatesv1.KubeletServingSignerName,
		Usage: certificatesv1.UsageServerAuth, File: "nodelet-server-current.pem"}
	// Client is the certificate the node authenticates to the API server
	// with, as system:node:<name> in system:nodes.
	Client = Kind{Name: "client", Signer: certificatesv1.KubeAPIServerClientKubeletSignerName,
		Usage: certificatesv1.UsageClientAuth, File: "nodelet-client-current.pem"}
)

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

// ClientFunc returns the client to request a certificate with; it is asked
// before each request (a node renews its client certificate with itself).
type ClientFunc func() (kubernetes.Interface, error)

// Options are a Certificates' optional settings.
type Options struct {
	// Hosts are the DNS names and IP addresses a serving certificate must
	// cover.
	Hosts []string
	// Dir is where the certificate is kept; empty keeps it in memory only.
	Dir string
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Rotated, when set, is called after each new certificate is in use.
	Rotated func()
}

// Certificates keeps one certificate of a node issued through a
// CertificateSigningRequest current. Build it with New, load the kept
// certificate with LoadStored, and keep it current with Run.
type Certificates struct {
	kind     Kind
	clients  ClientFunc
	nodeName string
	opts     Options
	reminder time.Duration

	mu      sync.Mutex
	current *tls.Certificate // with Leaf set; nil until the first is issued
	pending string           // the CSR awaiting approval, if any
}

// New returns the certificate of kind for node nodeName, requested with the
// clients that clients returns. It does no I/O.
func New(kind Kind, nodeName string, clients ClientFunc, opts Options) *Certificates {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Certificates{kind: kind, clients: clients, nodeName: nodeName, opts: opts, reminder: pendingReminder}
}

// GetCertificate is a serving tls.Config's GetCertificate. Until a
// certificate is issued (or when the last one expired) handshakes fail, as
// the kubelet's do.
func (c *Certificates) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := c.Valid(); cert != nil {
		return cert, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending != "" {
		return nil, fmt.Errorf("no %s certificate yet: CSR %s awaits approval", c.kind.Name, c.pending)
	}
	return nil, fmt.Errorf("no %s certificate yet", c.kind.Name)
}

// GetClientCertificate is a client tls.Config's GetClientCertificate:
// without a valid certificate it presents none, and the server answers
// Unauthorized.
func (c *Certificates) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if cert := c.Valid(); cert != nil {
		return cert, nil
	}
	return &tls.Certificate{}, nil
}

// Valid returns the current certificate if it has not expired, else nil.
func (c *Certificates) Valid() *tls.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != nil && c.opts.Clock.Now().Before(c.current.Leaf.NotAfter) {
		return c.current
	}
	return nil
}

// Path is the file that keeps the certificate and its key, or "".
func (c *Certificates) Path() string {
	if c.opts.Dir == "" {
		return ""
	}
	return filepath.Join(c.opts.Dir, c.kind.File)
}

func (c *Certificates) cert() *tls.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

func (c *Certificates) setPending(name string) {
	c.mu.Lock()
	c.pending = name
	c.mu.Unlock()
}

// LoadStored uses the certificate kept in the directory, if it is still
// valid and was issued for this node and its hosts, and tells whether it
// did. One past its rotation deadline is used until Run has a new one.
func (c *Certificates) LoadStored(ctx context.Context) bool {
	path := c.Path()
	if path == "" {
		return false
	}
	logger := klog.FromContext(ctx)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		logger.Info("Not using the kept certificate", "kind", c.kind.Name, "path", path, "err", err)
		return false
	}
	cert, err := tls.X509KeyPair(data, data)
	if err != nil {
		logger.Info("Not using the kept certificate", "kind", c.kind.Name, "path", path, "err", err)
		return false
	}
	if reason := c.unfit(cert.Leaf); reason != "" {
		logger.Info("Not using the kept certificate", "kind", c.kind.Name, "path", path, "reason", reason)
		return false
	}
	c.mu.Lock()
	c.current = &cert
	c.mu.Unlock()
	logger.Info("Using the kept certificate", "kind", c.kind.Name, "path", path, "notAfter", cert.Leaf.NotAfter, "rotation", rotationDeadline(cert.Leaf))
	return true
}

// unfit says why cert cannot serve as this node's certificate now, or "".
func (c *Certificates) unfit(cert *x509.Certificate) string {
	if want := "system:node:" + c.nodeName; cert.Subject.CommonName != want {
		return fmt.Sprintf("issued to %q, not %q", cert.Subject.CommonName, want)
	}
	if !c.opts.Clock.Now().Before(cert.NotAfter) {
		return "expired at " + cert.NotAfter.String()
	}
	return Uncovered(cert, c.opts.Hosts)
}

// Run requests a certificate when there is none or the current one is past
// its rotation deadline, and retries failures with back-off, until ctx ends.
func (c *Certificates) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	retry := retryInitial
	for {
		if cur := c.cert(); cur != nil {
			if wait := rotationDeadline(cur.Leaf).Sub(c.opts.Clock.Now()); wait > 0 {
				if !c.sleep(ctx, wait) {
					return nil
				}
				continue
			}
			logger.Info("Renewing the certificate", "kind", c.kind.Name, "notAfter", cur.Leaf.NotAfter)
		}
		err := c.Request(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			logger.Error(err, "No certificate from the certificates API; retrying", "kind", c.kind.Name, "retryIn", retry)
			if !c.sleep(ctx, retry) {
				return nil
			}
			retry = min(2*retry, retryMax)
			continue
		}
		retry = retryInitial
	}
}

// Request asks for a new certificate now and waits until it is issued and
// in use (or refused, or ctx ends).
func (c *Certificates) Request(ctx context.Context) error {
	cert, name, err := c.request(ctx)
	c.setPending("")
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.current = cert
	c.mu.Unlock()
	klog.FromContext(ctx).Info("Using the certificate issued for CSR", "kind", c.kind.Name, "csr", name,
		"notAfter", cert.Leaf.NotAfter, "rotation", rotationDeadline(cert.Leaf))
	if c.opts.Rotated != nil {
		c.opts.Rotated()
	}
	return nil
}

// sleep waits for d on the clock; false means ctx ended first.
func (c *Certificates) sleep(ctx context.Context, d time.Duration) bool {
	t := c.opts.Clock.NewTimer(d)
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
func (c *Certificates) request(ctx context.Context) (*tls.Certificate, string, error) {
	logger := klog.FromContext(ctx)
	client, err := c.clients()
	if err != nil {
		return nil, "", fmt.Errorf("client to request the %s certificate: %w", c.kind.Name, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", fmt.Errorf("generate key: %w", err)
	}
	dnsNames, ips := SplitHosts(c.opts.Hosts)
	subject := &pkix.Name{CommonName: "system:node:" + c.nodeName, Organization: []string{"system:nodes"}}
	csrPEM, err := certutil.MakeCSR(key, subject, dnsNames, ips)
	if err != nil {
		return nil, "", fmt.Errorf("make certificate request: %w", err)
	}
	// Key encipherment is for RSA keys only: an ECDSA key signs.
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, c.kind.Usage}
	name, uid, err := csr.RequestCertificateWithContext(ctx, client, csrPEM, "", c.kind.Signer, nil, usages, key)
	if err != nil {
		return nil, "", fmt.Errorf("create CSR: %w", err)
	}
	c.setPending(name)
	logger.Info("Waiting for the certificate's CSR to be approved", "kind", c.kind.Name, "csr", name, "approve", "kubectl certificate approve "+name)

	certPEM, err := c.waitIssued(ctx, client, name, uid)
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
	if path := c.Path(); path != "" {
		err := os.MkdirAll(c.opts.Dir, 0o755)
		if err == nil {
			err = atomicfile.Write(path, append(append([]byte{}, certPEM...), keyPEM...), atomicfile.Options{Perm: 0o600})
		}
		if err != nil {
			// Used all the same; a restart requests another one.
			logger.Error(err, "Could not keep the certificate", "kind", c.kind.Name, "path", path)
		}
	}
	return &cert, name, nil
}

// waitIssued watches the CSR until its certificate is issued, it is denied
// or failed, or it is deleted. A pending CSR is waited for as long as it
// exists (the cluster deletes unapproved ones after a day), reminding the
// administrator now and then.
func (c *Certificates) waitIssued(ctx context.Context, client kubernetes.Interface, name string, uid types.UID) ([]byte, error) {
	logger := klog.FromContext(ctx)
	for {
		waitCtx, cancel := context.WithTimeout(ctx, c.reminder)
		certPEM, err := csr.WaitForCertificate(waitCtx, client, name, uid)
		cancel()
		if err == nil {
			return certPEM, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("CSR %s: %w", name, ctx.Err())
		}
		// The helper's errors are text: the CSR itself says what happened.
		obj, getErr := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
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
		logger.Info("Still waiting for the certificate's CSR to be approved", "kind", c.kind.Name, "csr", name, "approve", "kubectl certificate approve "+name)
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
