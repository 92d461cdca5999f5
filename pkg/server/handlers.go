package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/provider"
)

// routes serves the kubelet API paths; anything else is 404.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("GET /pods", s.getPods)
	mux.HandleFunc("GET /pods/", s.getPods)
	mux.HandleFunc("GET /runningpods/", s.getPods)

	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.getContainerLogs)

	for _, p := range []string{"/exec/{namespace}/{pod}/{container}", "/exec/{namespace}/{pod}/{uid}/{container}"} {
		mux.HandleFunc("GET "+p, s.exec)
		mux.HandleFunc("POST "+p, s.exec)
	}
	for _, p := range []string{"/attach/{namespace}/{pod}/{container}", "/attach/{namespace}/{pod}/{uid}/{container}"} {
		mux.HandleFunc("GET "+p, s.attach)
		mux.HandleFunc("POST "+p, s.attach)
	}
	for _, p := range []string{"/portForward/{namespace}/{pod}", "/portForward/{namespace}/{pod}/{uid}"} {
		mux.HandleFunc("GET "+p, s.portForward)
		mux.HandleFunc("POST "+p, s.portForward)
	}
	mux.HandleFunc("POST /run/{namespace}/{pod}/{container}", s.run)
	mux.HandleFunc("POST /run/{namespace}/{pod}/{uid}/{container}", s.run)
	if s.opts.Metrics == nil {
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "/metrics is not implemented by nodelet", http.StatusNotImplemented)
		})
	}

	if s.opts.Metrics != nil {
		mux.Handle("GET /metrics", s.opts.Metrics)
	}
	s.statsRoutes(mux)
	if s.opts.Profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	// Anything else under these (/metrics/probes, /metrics/cadvisor, /stats/…)
	// is not served yet.
	for _, p := range []string{"/metrics/", "/stats/", "/logs/"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, fmt.Sprintf("%s is not implemented by nodelet", r.URL.Path), http.StatusNotImplemented)
		})
	}
	return mux
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
// else status.
func providerError(w http.ResponseWriter, err error, status int) {
	if errors.Is(err, provider.ErrNotFound) {
		status = http.StatusNotFound
	}
	http.Error(w, err.Error(), status)
}
