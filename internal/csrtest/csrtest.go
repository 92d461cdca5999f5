// Package csrtest helps unit tests of certificates requested through the
// certificates API: a test CA that signs requests and client certificates,
// and a fake clientset whose CertificateSigningRequests behave as the API
// server's do where the requesters rely on it, with the administrator's
// and the signer's side (approve, refuse). It is for tests only.
package csrtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
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
)

var serials atomic.Int64

// CA is a certificate authority of one test.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA valid from an hour ago for two hours.
func NewCA(t *testing.T) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serials.Add(1)), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Sign issues the certificate req asks for, valid from notBefore for life,
// for usage (server or client auth), PEM encoded.
func (ca *CA) Sign(t *testing.T, req *x509.CertificateRequest, notBefore time.Time, life time.Duration, usage x509.ExtKeyUsage) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(100 + serials.Add(1)),
		Subject:      req.Subject,
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPAddresses,
		NotBefore:    notBefore,
		NotAfter:     notBefore.Add(life),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, req.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// ClientCert is a client certificate and key for user cn in groups orgs,
// valid for the CA's lifetime.
func (ca *CA) ClientCert(t *testing.T, cn string, orgs ...string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	req := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}, PublicKey: &key.PublicKey}
	block, _ := pem.Decode(ca.Sign(t, req, time.Now().Add(-time.Hour), 2*time.Hour, x509.ExtKeyUsageClientAuth))
	return &tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: key}
}

// Client is a fake clientset that names and numbers CSRs and selects them
// by metadata.name as the API server does (the fake tracker does neither).
// Its watches start from now, not from the listed resource version: a test
// changes a CSR only once it is watched (WhenWatched), or the change is lost.
type Client struct {
	*fake.Clientset
	mu      sync.Mutex
	watched map[string]bool // CSR names
}

// NewClient returns an empty fake clientset with CSR behaviour.
func NewClient() *Client {
	client := &Client{Clientset: fake.NewClientset(), watched: map[string]bool{}}
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

// WhenWatched waits until someone watches the CSR named name.
func (c *Client) WhenWatched(t *testing.T, name string) {
	t.Helper()
	Poll(t, "CSR "+name+" watched", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.watched[name]
	})
}

// List returns the CSRs.
func (c *Client) List(t *testing.T) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	list, err := c.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// WaitCSRs waits for n CSRs and returns the newest.
func (c *Client) WaitCSRs(t *testing.T, n int) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var list *certificatesv1.CertificateSigningRequestList
	Poll(t, fmt.Sprintf("%d CSRs", n), func() bool {
		var err error
		list, err = c.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
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

// Approve approves the CSR, then issues its certificate, as an
// administrator and the signer controller do.
func (c *Client) Approve(t *testing.T, ca *CA, obj *certificatesv1.CertificateSigningRequest, notBefore time.Time, life time.Duration) *x509.Certificate {
	t.Helper()
	c.WhenWatched(t, obj.Name)
	ctx := context.Background()
	obj = obj.DeepCopy()
	obj.Status.Conditions = append(obj.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "TestApproved",
	})
	obj, err := c.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, obj.Name, obj, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	usage := x509.ExtKeyUsageServerAuth
	if slices.Contains(obj.Spec.Usages, certificatesv1.UsageClientAuth) {
		usage = x509.ExtKeyUsageClientAuth
	}
	obj.Status.Certificate = ca.Sign(t, ParseRequest(t, obj), notBefore, life, usage)
	if _, err := c.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(obj.Status.Certificate)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// Refuse sets a Denied or Failed condition on the CSR.
func (c *Client) Refuse(t *testing.T, obj *certificatesv1.CertificateSigningRequest, ct certificatesv1.RequestConditionType) {
	t.Helper()
	c.WhenWatched(t, obj.Name)
	obj = obj.DeepCopy()
	obj.Status.Conditions = append(obj.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: ct, Status: corev1.ConditionTrue, Reason: "TestReason", Message: "test message",
	})
	var err error
	if ct == certificatesv1.CertificateDenied {
		_, err = c.CertificatesV1().CertificateSigningRequests().UpdateApproval(context.Background(), obj.Name, obj, metav1.UpdateOptions{})
	} else {
		_, err = c.CertificatesV1().CertificateSigningRequests().UpdateStatus(context.Background(), obj, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// ParseRequest decodes the CSR's certificate request.
func ParseRequest(t *testing.T, obj *certificatesv1.CertificateSigningRequest) *x509.CertificateRequest {
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

// Poll checks cond every 10ms until it holds, failing the test after 10s.
func Poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
