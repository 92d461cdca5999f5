package server

import (
	"crypto/sha256"
	"net/http"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/utils/clock"
)

// maxCachedCerts bounds the certificates remembered; past it the cache
// starts over rather than grow with every client.
const maxCachedCerts = 4096

// certCache remembers who the client certificates that authenticated are,
// so that the requests of one client (metrics-server scraping thousands of
// sim nodes on one listener) do not each verify its chain again. It only
// answers requests that carry a client certificate and no Authorization
// header, keyed by every certificate the client presented; an entry lasts
// ttl or until its certificate expires, and the whole cache is forgotten
// when the CA bundle changes (Enqueue, as a dynamiccertificates listener).
type certCache struct {
	next  authenticator.Request
	ttl   time.Duration
	clock clock.PassiveClock

	mu    sync.Mutex
	users map[[sha256.Size]byte]cachedCert
}

type cachedCert struct {
	resp    *authenticator.Response
	expires time.Time
}

func newCertCache(next authenticator.Request, ttl time.Duration, clk clock.PassiveClock) *certCache {
	return &certCache{next: next, ttl: ttl, clock: clk, users: map[[sha256.Size]byte]cachedCert{}}
}

func (c *certCache) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || r.Header.Get("Authorization") != "" {
		return c.next.AuthenticateRequest(r)
	}
	h := sha256.New()
	for _, cert := range r.TLS.PeerCertificates {
		h.Write(cert.Raw)
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	now := c.clock.Now()
	c.mu.Lock()
	cached, ok := c.users[key]
	c.mu.Unlock()
	if ok && now.Before(cached.expires) {
		return cached.resp, true, nil
	}

	resp, ok, err := c.next.AuthenticateRequest(r)
	if err != nil || !ok {
		return resp, ok, err
	}
	expires := now.Add(c.ttl)
	if notAfter := r.TLS.PeerCertificates[0].NotAfter; notAfter.Before(expires) {
		expires = notAfter
	}
	c.mu.Lock()
	if len(c.users) >= maxCachedCerts {
		clear(c.users)
	}
	c.users[key] = cachedCert{resp: resp, expires: expires}
	c.mu.Unlock()
	return resp, true, nil
}

// Enqueue forgets every certificate: the CA bundle they were verified
// against changed.
func (c *certCache) Enqueue() {
	c.mu.Lock()
	clear(c.users)
	c.mu.Unlock()
}
