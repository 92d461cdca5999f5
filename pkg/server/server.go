// Package server owns the kubelet API of the nodes this agent runs: the HTTPS
// endpoint at the nodes' daemon endpoint port that the API server calls for
// `kubectl logs`, `exec`, `attach` and `port-forward`, and that serves /pods,
// /healthz and, for `kubectl top` and metrics-server, /stats/summary and
// /metrics/resource. Every request is authenticated (client certificate or
// bearer token by TokenReview) and authorized (SubjectAccessReview on the
// nodes/* subresources) the way the kubelet does it, then handed to a
// Backend.
// An ExecProvider reports a command's exit code by returning an error with
// an ExitCode() int method (as *os/exec.ExitError has); clients then see
// "command terminated with exit code N".
//
// It asks the API server only for token and access reviews and, with
// TLSBootstrap, for its own serving certificate (a CertificateSigningRequest);
// it never writes pods or nodes, and never starts or stops workloads itself.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// Backend is what the server serves from: one for the whole agent, routing
// by pod to the node that runs it. The streaming and log endpoints use the
// provider's optional interfaces (provider.LogsProvider, ExecProvider,
// AttachProvider, PortForwardProvider), found on the Backend by type
// assertion; an endpoint whose interface is missing answers 501.
type Backend interface {
	// GetPods returns the pods bound to the agent's nodes, served at /pods.
	GetPods(ctx context.Context) ([]*corev1.Pod, error)
}

// PodNodeResolver is an optional Backend interface for agents with several
// nodes: it names the node a pod is bound to, so that a request about the pod
// is authorized against that node. ok false means the pod is not known, and
// requests about it answer 404.
type PodNodeResolver interface {
	NodeForPod(namespace, name string) (node string, ok bool)
}

// SummaryProvider is the usage summary of the agent's nodes, served at
// /stats/summary and as the resource metrics at /metrics/resource.
type SummaryProvider interface {
	Summary(ctx context.Context, node string) (*statsv1alpha1.Summary, error)
}

// NodeAddressResolver names, for agents whose nodes each have their own IP
// on the one listener, the node a request was addressed to (by the
// connection's local IP), so that /stats and /metrics serve, and are
// authorized against, that node. ok false means the server's NodeName.
type NodeAddressResolver interface {
	NodeForAddress(ip netip.Addr) (node string, ok bool)
}

// NodeNameResolver is an optional interface of the NodeAddressResolver,
// for agents whose nodes share an address (the Nodes an agent takes over,
// all at the agent's): it tells whether the agent serves a node, so that a
// /stats or /metrics request the API server proxied for that node (its
// X-Forwarded-Uri is /api/v1/nodes/NAME/proxy/…) is served for, and
// authorized against, it, whatever address it came to.
type NodeNameResolver interface {
	HasNode(node string) bool
}

// Authorization modes, as the kubelet names them.
const (
	AuthorizationModeWebhook     = "Webhook"
	AuthorizationModeAlwaysAllow = "AlwaysAllow"
)

// Options configure the server. Zero values take the defaults given.
type Options struct {
	// Address is the IP to listen on; empty listens on every interface.
	Address string
	// Port is the port to listen on (default 10250); it must be the port
	// the nodes publish in status.daemonEndpoints.kubeletEndpoint.
	Port int32
	// NodeName is the node that requests not about a pod (and, without a
	// PodNodeResolver, all requests) are authorized against, and whose
	// stats are served, unless a NodeAddressResolver names another node
	// for /stats and /metrics. Required.
	NodeName string

	// TLSCertFile and TLSPrivateKeyFile hold the serving certificate. When
	// empty, a self-signed certificate for Hosts is made at start, kept
	// under CertDir when it is set (and reused while valid) or in memory.
	TLSCertFile, TLSPrivateKeyFile string
	CertDir                        string
	// TLSBootstrap (the kubelet's serverTLSBootstrap) requests the serving
	// certificate through the certificates API instead: a CSR for signer
	// kubernetes.io/kubelet-serving, subject system:node:<NodeName> in
	// system:nodes, for Hosts. Until it is approved and issued, TLS
	// handshakes fail. The certificate is kept under CertDir (and reused
	// while valid) and renewed at 80% of its lifetime without a restart.
	// Excludes TLSCertFile.
	TLSBootstrap bool
	// Hosts are the DNS names and IP addresses of the self-signed or
	// requested certificate (default NodeName and Address).
	Hosts []string

	// ClientCAFile is the CA bundle client certificates are verified
	// against: the user is the certificate's CN, its groups the O fields.
	// The file is watched for changes. Empty disables x509 authentication.
	ClientCAFile string
	// WebhookAuthentication enables bearer tokens checked by TokenReview
	// (nil means true).
	WebhookAuthentication *bool
	// AuthenticationCacheTTL is how long token reviews are cached
	// (default 2m).
	AuthenticationCacheTTL time.Duration
	// Anonymous lets requests without credentials through as
	// system:anonymous; they are still authorized.
	Anonymous bool

	// AuthorizationMode is Webhook (SubjectAccessReview, the default) or
	// AlwaysAllow.
	AuthorizationMode string
	// AuthorizedCacheTTL and UnauthorizedCacheTTL are how long access
	// reviews are cached (defaults 5m and 30s).
	AuthorizedCacheTTL, UnauthorizedCacheTTL time.Duration

	// StreamIdleTimeout ends an exec, attach or port-forward session with no
	// traffic for that long (default 4h).
	StreamIdleTimeout time.Duration
	// StreamCreationTimeout is how long a client has to create the streams
	// of a session (default 30s).
	StreamCreationTimeout time.Duration

	// Metrics serves /metrics (authorized as nodes/metrics, as the
	// kubelet's); nil answers 501.
	Metrics http.Handler
	// ProbeMetrics serves /metrics/probes; nil answers 501.
	ProbeMetrics http.Handler
	// CadvisorMetrics serves /metrics/cadvisor (the containers' metrics in
	// cAdvisor's names); nil answers 501.
	CadvisorMetrics http.Handler
	// Stats serves /stats/summary and /metrics/resource; nil answers 501.
	Stats SummaryProvider
	// Addresses, when set, picks the node of /stats and /metrics requests
	// by the address they were sent to.
	Addresses NodeAddressResolver
	// Profiling serves the Go runtime's profiles at /debug/pprof/,
	// authorized as nodes/proxy.
	Profiling bool
	// Configz is the configuration in use, served at /configz as the
	// kubelet serves its own: {"kubeletconfig": Configz} (authorized as
	// nodes/configz); nil leaves /configz out.
	Configz any
	// ReadOnlyPort, when not 0, serves the read-only routes (health, pods,
	// stats and metrics) on Address:ReadOnlyPort over plain HTTP, without
	// authentication or authorization, as the kubelet's readOnlyPort.
	ReadOnlyPort int32

	// Clock tells the time of cached authentications (default the real
	// clock).
	Clock clock.PassiveClock
}

func (o *Options) setDefaults() {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Port == 0 {
		o.Port = 10250
	}
	if o.WebhookAuthentication == nil {
		enabled := true
		o.WebhookAuthentication = &enabled
	}
	if o.AuthenticationCacheTTL == 0 {
		o.AuthenticationCacheTTL = 2 * time.Minute
	}
	if o.AuthorizationMode == "" {
		o.AuthorizationMode = AuthorizationModeWebhook
	}
	if o.AuthorizedCacheTTL == 0 {
		o.AuthorizedCacheTTL = 5 * time.Minute
	}
	if o.UnauthorizedCacheTTL == 0 {
		o.UnauthorizedCacheTTL = 30 * time.Second
	}
	if o.StreamIdleTimeout == 0 {
		o.StreamIdleTimeout = 4 * time.Hour
	}
	if o.StreamCreationTimeout == 0 {
		o.StreamCreationTimeout = 30 * time.Second
	}
	if len(o.Hosts) == 0 {
		o.Hosts = append(o.Hosts, o.NodeName)
		if o.Address != "" && o.Address != "0.0.0.0" && o.Address != "::" {
			o.Hosts = append(o.Hosts, o.Address)
		}
	}
}

func (o *Options) validate(client kubernetes.Interface) error {
	var errs []error
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d: must be between 0 and 65535", o.Port))
	}
	if o.ReadOnlyPort < 0 || o.ReadOnlyPort > 65535 {
		errs = append(errs, fmt.Errorf("read-only port %d: must be between 0 (off) and 65535", o.ReadOnlyPort))
	}
	if o.NodeName == "" {
		errs = append(errs, errors.New("node name: required"))
	}
	if (o.TLSCertFile == "") != (o.TLSPrivateKeyFile == "") {
		errs = append(errs, errors.New("tlsCertFile and tlsPrivateKeyFile: set both or neither"))
	}
	if o.TLSBootstrap && o.TLSCertFile != "" {
		errs = append(errs, errors.New("tlsBootstrap: the certificate is either requested or given by tlsCertFile, not both"))
	}
	if o.TLSBootstrap && client == nil {
		errs = append(errs, errors.New("tlsBootstrap: needs an API client"))
	}
	if o.Address != "" && net.ParseIP(o.Address) == nil {
		errs = append(errs, fmt.Errorf("address %q: not an IP address", o.Address))
	}
	switch o.AuthorizationMode {
	case AuthorizationModeAlwaysAllow:
	case AuthorizationModeWebhook:
		if client == nil {
			errs = append(errs, errors.New("authorization mode Webhook: needs an API client"))
		}
	default:
		errs = append(errs, fmt.Errorf("authorization mode %q: must be %s or %s", o.AuthorizationMode, AuthorizationModeWebhook, AuthorizationModeAlwaysAllow))
	}
	if *o.WebhookAuthentication && client == nil {
		errs = append(errs, errors.New("webhook authentication: needs an API client"))
	}
	if !*o.WebhookAuthentication && o.ClientCAFile == "" && !o.Anonymous {
		errs = append(errs, errors.New("authentication: no method enabled (client CA file, webhook or anonymous)"))
	}
	if o.StreamIdleTimeout < 0 || o.StreamCreationTimeout < 0 {
		errs = append(errs, errors.New("stream timeouts: must not be negative"))
	}
	return errors.Join(errs...)
}

// Server is the kubelet API server. Build it with New and start it with Run.
type Server struct {
	client  kubernetes.Interface
	backend Backend
	opts    Options

	// loop serves SPDY to the handlers that translate WebSocket; set by
	// Run (which is called once) before serving.
	loop *loopback

	serving chan struct{} // closed once the server serves
}

// New checks the options and returns a server that is not yet listening.
func New(client kubernetes.Interface, backend Backend, opts Options) (*Server, error) {
	if backend == nil {
		return nil, errors.New("kubelet API server: backend is required")
	}
	opts.setDefaults()
	if err := opts.validate(client); err != nil {
		return nil, fmt.Errorf("kubelet API server: %w", err)
	}
	return &Server{client: client, backend: backend, opts: opts, serving: make(chan struct{})}, nil
}

// Serving is closed once the server listens with its certificate and
// authentication ready.
func (s *Server) Serving() <-chan struct{} { return s.serving }

// Run listens on the configured address (and read-only port) and serves
// until ctx ends, then shuts down: new connections are refused, requests
// in flight and open streaming sessions are ended.
func (s *Server) Run(ctx context.Context) error {
	addr := net.JoinHostPort(s.opts.Address, strconv.Itoa(int(s.opts.Port)))
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("kubelet API server: listen on %s: %w", addr, err)
	}
	var readOnly net.Listener
	if s.opts.ReadOnlyPort != 0 {
		roAddr := net.JoinHostPort(s.opts.Address, strconv.Itoa(int(s.opts.ReadOnlyPort)))
		if readOnly, err = lc.Listen(ctx, "tcp", roAddr); err != nil {
			ln.Close()
			return fmt.Errorf("kubelet API server: listen on %s (read-only port): %w", roAddr, err)
		}
	}
	return s.serve(ctx, ln, readOnly)
}

// serve prepares certificates and authentication, then serves on ln (and
// the read-only routes on readOnly, when not nil) until ctx ends. It
// closes both.
func (s *Server) serve(ctx context.Context, ln, readOnly net.Listener) error {
	logger := klog.FromContext(ctx).WithName("kubelet-api")
	ctx = klog.NewContext(ctx, logger)

	closeAll := func() {
		ln.Close()
		if readOnly != nil {
			readOnly.Close()
		}
	}
	tlsConfig, rotate, err := s.tlsConfig(ctx)
	if err != nil {
		closeAll()
		return fmt.Errorf("kubelet API server: %w", err)
	}
	auth, err := s.newAuth(ctx, tlsConfig)
	if err != nil {
		closeAll()
		return fmt.Errorf("kubelet API server: %w", err)
	}
	if rotate != nil {
		rotateCtx, stopRotation := context.WithCancel(ctx)
		rotated := make(chan struct{})
		go func() {
			defer close(rotated)
			_ = rotate(rotateCtx) // it retries until stopped
		}()
		defer func() { stopRotation(); <-rotated }()
	}

	s.loop = newLoopback(ctx, s.routes())
	defer s.loop.close()

	// Shutdown does not close hijacked connections (exec, attach,
	// port-forward): every connection is tracked to close them ourselves.
	conns := &trackingListener{Listener: ln, conns: map[*trackedConn]struct{}{}}
	srv := &http.Server{
		Handler:           auth.filter(s.routes()),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    1 << 20,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}

	// Room for both servers' errors: neither send blocks.
	errCh := make(chan error, 2)
	go func() {
		if err := srv.ServeTLS(conns, "", ""); !errors.Is(err, http.ErrServerClosed) {
			errCh <- fmt.Errorf("serve on %s: %w", ln.Addr(), err)
			return
		}
		errCh <- nil
	}()
	logger.Info("Serving the kubelet API", "address", ln.Addr().String())
	stopReadOnly := func() error { return nil }
	if readOnly != nil {
		stopReadOnly = s.serveReadOnly(ctx, readOnly, errCh)
	}
	close(s.serving)

	select {
	case err := <-errCh:
		srv.Close()
		stopReadOnly()
		return fmt.Errorf("kubelet API server: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	shutdownErr := errors.Join(srv.Shutdown(shutdownCtx), stopReadOnly())
	conns.closeAll()
	if err := <-errCh; err != nil {
		return fmt.Errorf("kubelet API server: %w", err)
	}
	if shutdownErr != nil {
		srv.Close()
		logger.Info("Kubelet API server did not shut down in time, closed its connections", "err", shutdownErr)
	}
	logger.Info("Stopped the kubelet API server")
	return nil
}

// serveReadOnly serves the read-only routes on ln, over plain HTTP and
// without authentication, until the returned function shuts it down. An
// error serving goes to errCh.
func (s *Server) serveReadOnly(ctx context.Context, ln net.Listener, errCh chan<- error) (shutdown func() error) {
	routes := s.readOnlyRoutes()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := checkPath(r.URL); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			routes.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    1 << 20,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			select {
			case errCh <- fmt.Errorf("serve on %s (read-only port): %w", ln.Addr(), err):
			default:
			}
		}
	}()
	klog.FromContext(ctx).Info("Serving the kubelet API's read-only port", "address", ln.Addr().String())
	return func() error {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err := srv.Shutdown(shutdownCtx)
		if err != nil {
			srv.Close()
		}
		<-done
		return err
	}
}

// trackingListener keeps the connections it accepted until they close.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, owner: l}
	l.mu.Lock()
	l.conns[tc] = struct{}{}
	l.mu.Unlock()
	return tc, nil
}

func (l *trackingListener) closeAll() {
	l.mu.Lock()
	open := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		open = append(open, c)
	}
	l.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

type trackedConn struct {
	net.Conn
	owner *trackingListener
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.owner.mu.Lock()
		delete(c.owner.conns, c)
		c.owner.mu.Unlock()
	})
	return c.Conn.Close()
}
