package probe

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// maxRedirects is how many same-host redirects an httpGet handler follows.
const maxRedirects = 10

// httpClient serves every httpGet probe and hook. Certificates are not
// verified (workloads serve self-signed ones), no proxy is used (the target is
// on this host), connections are not reused and responses are not
// decompressed, as the kubelet does.
var httpClient = &http.Client{
	Transport: &http.Transport{
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes never verify, like the kubelet's
		DisableKeepAlives:  true,
		DisableCompression: true,
		DialContext:        dialContext,
	},
	CheckRedirect: sameHostRedirects,
}

// sameHostRedirects follows redirects to the host of the first request only;
// a redirect elsewhere ends the chain with the redirect response itself.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	return nil
}

// newHTTPRequest builds the GET request of an httpGet handler. component is
// the User-Agent's product ("kube-probe", "kube-lifecycle").
func newHTTPRequest(ctx context.Context, a *corev1.HTTPGetAction, t Target, component string) (*http.Request, error) {
	scheme := strings.ToLower(string(a.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	if scheme != "http" && scheme != "https" {
		return nil, fmt.Errorf("unsupported scheme %q", a.Scheme)
	}
	port, err := resolvePort(a.Port, t.Container)
	if err != nil {
		return nil, err
	}
	hostPort, err := address(a.Host, port, t)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(a.Path)
	if err != nil {
		u = &url.URL{Path: a.Path}
	}
	u.Scheme, u.Host = scheme, hostPort

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	for _, h := range a.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header.Set("User-Agent", userAgent(component))
	}
	if _, ok := req.Header["Accept"]; !ok {
		req.Header.Set("Accept", "*/*")
	}
	if host := req.Header.Get("Host"); host != "" {
		req.Host = host
	}
	return req, nil
}

// httpProbe succeeds on a response status from 200 to 399.
func httpProbe(ctx context.Context, a *corev1.HTTPGetAction, t Target) (Result, string) {
	req, err := newHTTPRequest(ctx, a, t, "kube-probe")
	if err != nil {
		return Unknown, fmt.Sprintf("http probe: %v", err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return Failure, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxOutput))
	if err != nil {
		return Failure, fmt.Sprintf("read response body: %v", err)
	}
	switch code := resp.StatusCode; {
	case code >= 300 && code < 400:
		// Redirects to the same host were followed, so this one leads
		// elsewhere (or nowhere): a warning, not a failure. The message
		// is the kubelet's, which users and tests match.
		return Warning, fmt.Sprintf("Probe terminated redirects, Response body: %s", body)
	case code >= 200 && code < 300:
		return Success, string(body)
	default:
		return Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", code)
	}
}

// runHTTPHook sends the hook's request. Like the kubelet, only failing to
// get a response is an error: the response status is not looked at. An
// HTTPS hook answered in plain HTTP is retried once over HTTP.
func runHTTPHook(ctx context.Context, a *corev1.HTTPGetAction, t Target) error {
	req, err := newHTTPRequest(ctx, a, t, "kube-lifecycle")
	if err != nil {
		return fmt.Errorf("http lifecycle hook: %w", err)
	}
	resp, err := httpClient.Do(req)
	drain(resp)
	if err != nil && req.URL.Scheme == "https" && isPlainHTTPAnswer(err) {
		plain := req.Clone(ctx)
		plain.URL.Scheme = "http"
		plain.Header.Del("Authorization")
		resp, plainErr := httpClient.Do(plain)
		drain(resp)
		if plainErr == nil {
			klog.FromContext(ctx).V(1).Info("HTTPS lifecycle hook answered in plain HTTP; retried over HTTP", "host", req.URL.Host)
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("http lifecycle hook: %w", err)
	}
	return nil
}

// isPlainHTTPAnswer tells whether a TLS request failed because the server
// spoke plain HTTP.
func isPlainHTTPAnswer(err error) bool {
	return strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

// drain reads what is left of a response body (up to a limit) and closes it.
func drain(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxOutput))
	_ = resp.Body.Close()
}
