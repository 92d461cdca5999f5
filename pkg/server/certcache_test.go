package server

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	clocktesting "k8s.io/utils/clock/testing"
)

// countingAuthn authenticates every request as alice and counts the calls.
type countingAuthn struct{ calls int }

func (a *countingAuthn) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	a.calls++
	return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}}, true, nil
}

func certRequest(raw string, notAfter time.Time, header http.Header) *http.Request {
	r := &http.Request{Header: http.Header{}}
	if header != nil {
		r.Header = header
	}
	if raw != "" {
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Raw: []byte(raw), NotAfter: notAfter}}}
	}
	return r
}

func TestCertCache(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	later := start.Add(time.Hour)
	tests := []struct {
		name string
		// requests are made in order, the clock moved by step before each.
		requests  []*http.Request
		step      time.Duration
		clearAt   int // Enqueue before this request (0: never)
		wantCalls int
	}{
		{name: "one certificate verified once",
			requests:  []*http.Request{certRequest("a", later, nil), certRequest("a", later, nil), certRequest("a", later, nil)},
			wantCalls: 1},
		{name: "each certificate verified",
			requests:  []*http.Request{certRequest("a", later, nil), certRequest("b", later, nil), certRequest("a", later, nil)},
			wantCalls: 2},
		{name: "no certificate is never cached",
			requests:  []*http.Request{certRequest("", later, nil), certRequest("", later, nil)},
			wantCalls: 2},
		{name: "a bearer token beside the certificate is never cached",
			requests: []*http.Request{certRequest("a", later, http.Header{"Authorization": {"Bearer x"}}),
				certRequest("a", later, http.Header{"Authorization": {"Bearer x"}})},
			wantCalls: 2},
		{name: "entries last the TTL",
			requests:  []*http.Request{certRequest("a", later, nil), certRequest("a", later, nil), certRequest("a", later, nil)},
			step:      90 * time.Second, // the TTL is 2m: the third is past it
			wantCalls: 2},
		{name: "entries end with the certificate",
			requests:  []*http.Request{certRequest("a", start.Add(30*time.Second), nil), certRequest("a", start.Add(30*time.Second), nil)},
			step:      20 * time.Second,
			wantCalls: 2},
		{name: "a new CA bundle forgets them",
			requests:  []*http.Request{certRequest("a", later, nil), certRequest("a", later, nil), certRequest("a", later, nil)},
			clearAt:   2,
			wantCalls: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(start)
			inner := &countingAuthn{}
			c := newCertCache(inner, 2*time.Minute, clk)
			for i, r := range tt.requests {
				clk.SetTime(clk.Now().Add(tt.step))
				if tt.clearAt != 0 && i == tt.clearAt {
					c.Enqueue()
				}
				resp, ok, err := c.AuthenticateRequest(r)
				if err != nil || !ok || resp.User.GetName() != "alice" {
					t.Fatalf("request %d: %+v %v %v, want alice", i, resp, ok, err)
				}
			}
			if inner.calls != tt.wantCalls {
				t.Errorf("verified %d times, want %d", inner.calls, tt.wantCalls)
			}
		})
	}
}
