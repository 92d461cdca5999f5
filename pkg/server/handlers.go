package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/provider"
)

// Route is one endpoint of the kubelet API: where the server's ServeMux
// serves it and the nodes subresources that authorize it.
type Route struct {
	// Method is the request's HTTP method, or "" for any.
	Method string
	// Path is the ServeMux pattern's path: literal segments and
	// {wildcards}; a trailing slash matches every path below it.
	Path string
	// Subresources are the nodes/<subresource> that grant the route, each
	// enough on its own, the fine-grained one first (see auth.attributes).
	Subresources []string
	// ReadOnly routes are served on the read-only port as well, without
	// authentication, as the kubelet's: health, pods, stats and metrics.
	ReadOnly bool
}

// Routes lists every endpoint the server registers when all of its optional
// ones (metrics, probe metrics, stats, profiling) are enabled: what a test
// of the authorization matrix walks, so that no endpoint is forgotten.
func Routes() []Route {
	s := &Server{opts: Options{Metrics: http.NotFoundHandler(), ProbeMetrics: http.NotFoundHandler(), CadvisorMetrics: http.NotFoundHandler(),
		Stats: noSummary{}, Profiling: true, Configz: struct{}{}}}
	return s.routeTable().routes
}

// noSummary stands for a summary source in Routes.
type noSummary struct{}

func (noSummary) Summary(context.Context, string) (*statsv1alpha1.Summary, error) {
	return nil, errNoSummary
}

// routeTable is the server's ServeMux, the read-only port's, and the
// Routes registered on them.
type routeTable struct {
	mux      *http.ServeMux
	readOnly *http.ServeMux
	routes   []Route
}

func newRouteTable() *routeTable {
	return &routeTable{mux: http.NewServeMux(), readOnly: http.NewServeMux()}
}

// handle registers h for method (every method when empty) and path,
// authorized by subresources.
func (t *routeTable) handle(method, path string, h http.Handler, subresources ...string) {
	t.add(Route{Method: method, Path: path, Subresources: subresources}, h)
}

func (t *routeTable) handleFunc(method, path string, h http.HandlerFunc, subresources ...string) {
	t.handle(method, path, h, subresources...)
}

// handleReadOnly registers h as handle does, and on the read-only port.
func (t *routeTable) handleReadOnly(method, path string, h http.Handler, subresources ...string) {
	t.add(Route{Method: method, Path: path, Subresources: subresources, ReadOnly: true}, h)
}

func (t *routeTable) add(r Route, h http.Handler) {
	pattern := r.Path
	if r.Method != "" {
		pattern = r.Method + " " + r.Path
	}
	t.mux.Handle(pattern, h)
	if r.ReadOnly {
		t.readOnly.Handle(pattern, h)
	}
	t.routes = append(t.routes, r)
}

// routes serves the kubelet API paths; anything else is 404.
func (s *Server) routes() http.Handler { return s.routeTable().mux }

// readOnlyRoutes serves the read-only port's paths; anything else is 404.
func (s *Server) readOnlyRoutes() http.Handler { return s.routeTable().readOnly }

// routeTable registers every endpoint with the subresources that authorize
// it, as auth.attributes derives them from the path (TestRoutes checks
// that the two agree).
func (s *Server) routeTable() *routeTable {
	t := newRouteTable()
	t.handleReadOnly(http.MethodGet, "/healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok")
	}), "healthz", "proxy")
	t.handleReadOnly(http.MethodGet, "/pods", http.HandlerFunc(s.getPods), "pods", "proxy")
	t.handleReadOnly(http.MethodGet, "/pods/", http.HandlerFunc(s.getPods), "pods", "proxy")
	t.handleFunc(http.MethodGet, "/runningpods/", s.getPods, "pods", "proxy")

	t.handleFunc(http.MethodGet, "/containerLogs/{namespace}/{pod}/{container}", s.getContainerLogs, "proxy")

	for _, p := range []string{"/exec/{namespace}/{pod}/{container}", "/exec/{namespace}/{pod}/{uid}/{container}"} {
		t.handleFunc(http.MethodGet, p, s.exec, "proxy")
		t.handleFunc(http.MethodPost, p, s.exec, "proxy")
	}
	for _, p := range []string{"/attach/{namespace}/{pod}/{container}", "/attach/{namespace}/{pod}/{uid}/{container}"} {
		t.handleFunc(http.MethodGet, p, s.attach, "proxy")
		t.handleFunc(http.MethodPost, p, s.attach, "proxy")
	}
	for _, p := range []string{"/portForward/{namespace}/{pod}", "/portForward/{namespace}/{pod}/{uid}"} {
		t.handleFunc(http.MethodGet, p, s.portForward, "proxy")
		t.handleFunc(http.MethodPost, p, s.portForward, "proxy")
	}
	t.handleFunc(http.MethodPost, "/run/{namespace}/{pod}/{container}", s.run, "proxy")
	t.handleFunc(http.MethodPost, "/run/{namespace}/{pod}/{uid}/{container}", s.run, "proxy")

	if s.opts.Configz != nil {
		t.handleFunc(http.MethodGet, "/configz", s.getConfigz, "configz", "proxy")
	}
	if s.opts.Metrics != nil {
		t.handleReadOnly(http.MethodGet, "/metrics", s.opts.Metrics, "metrics")
	} else {
		t.handleFunc("", "/metrics", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "/metrics is not implemented by nodelet", http.StatusNotImplemented)
		}, "metrics")
	}
	s.statsRoutes(t)
	if s.opts.Profiling {
		t.handleFunc(http.MethodGet, "/debug/pprof/", pprof.Index, "proxy")
		t.handleFunc(http.MethodGet, "/debug/pprof/cmdline", pprof.Cmdline, "proxy")
		t.handleFunc(http.MethodGet, "/debug/pprof/profile", pprof.Profile, "proxy")
		t.handleFunc(http.MethodGet, "/debug/pprof/symbol", pprof.Symbol, "proxy")
		t.handleFunc(http.MethodGet, "/debug/pprof/trace", pprof.Trace, "proxy")
	}
	// Anything else under these (/stats/…, /logs/…) is not served yet.
	for _, p := range []struct{ path, subresource string }{{"/metrics/", "metrics"}, {"/stats/", "stats"}, {"/logs/", "log"}} {
		t.handleFunc("", p.path, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, fmt.Sprintf("%s is not implemented by nodelet", r.URL.Path), http.StatusNotImplemented)
		}, p.subresource)
	}
	return t
}

// getPods answers the pods bound to the agent's nodes as a v1 PodList.
func (s *Server) getPods(w http.ResponseWriter, r *http.Request) {
	pods, err := s.backend.GetPods(r.Context())
	if err != nil {
		http.Error(w, fmt.Sprintf("list pods: %v", err), http.StatusInternalServerError)
		return
	}
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, Items: make([]corev1.Pod, 0, len(pods))}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	data, err := json.Marshal(&list)
	if err != nil {
		http.Error(w, fmt.Sprintf("encode pods: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(data); err != nil {
		klog.FromContext(r.Context()).V(4).Info("Unable to write the pod list", "err", err)
	}
}

// getConfigz answers the configuration in use as the kubelet's /configz
// does: {"kubeletconfig": {…}}.
func (s *Server) getConfigz(w http.ResponseWriter, r *http.Request) {
	data, err := json.Marshal(map[string]any{"kubeletconfig": s.opts.Configz})
	if err != nil {
		http.Error(w, fmt.Sprintf("encode the configuration: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(data); err != nil {
		klog.FromContext(r.Context()).V(4).Info("Unable to write the configuration", "err", err)
	}
}

// knownPod answers 404 and false when the backend can tell that it does not
// run the pod of the request.
func (s *Server) knownPod(w http.ResponseWriter, r *http.Request) bool {
	resolver, ok := s.backend.(PodNodeResolver)
	if !ok {
		return true
	}
	namespace, pod := r.PathValue("namespace"), r.PathValue("pod")
	if _, ok := resolver.NodeForPod(namespace, pod); !ok {
		http.Error(w, fmt.Sprintf("pod %s/%s does not exist", namespace, pod), http.StatusNotFound)
		return false
	}
	return true
}

// notImplemented answers 501 for a capability the backend lacks.
func notImplemented(w http.ResponseWriter, what string) {
	http.Error(w, fmt.Sprintf("the nodelet provider does not support %s", what), http.StatusNotImplemented)
}

// providerError answers an error of the backend: 404 for an unknown pod,
// 501 for what the provider does not support for it, else status.
func providerError(w http.ResponseWriter, err error, status int) {
	switch {
	case errors.Is(err, provider.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, provider.ErrNotSupported):
		status = http.StatusNotImplemented
	}
	http.Error(w, err.Error(), status)
}
