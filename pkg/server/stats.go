package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/stats"
)

// statsRoutes adds /stats/summary and /metrics/resource when the server
// has a summary source, /metrics/probes and /metrics/cadvisor when it has
// those metrics; without, they fall to the 501 of /stats/ and /metrics/.
func (s *Server) statsRoutes(t *routeTable) {
	if s.opts.ProbeMetrics != nil {
		t.handleReadOnly(http.MethodGet, "/metrics/probes", s.opts.ProbeMetrics, "metrics")
	}
	if s.opts.CadvisorMetrics != nil {
		t.handleReadOnly(http.MethodGet, "/metrics/cadvisor", s.opts.CadvisorMetrics, "metrics")
	}
	sp := s.opts.Stats
	if sp == nil {
		return
	}
	// The kubelet takes the query in a POST's form as well.
	t.handleReadOnly(http.MethodGet, "/stats/summary", s.getSummary(sp), "stats")
	t.handleReadOnly(http.MethodPost, "/stats/summary", s.getSummary(sp), "stats")
	t.handleReadOnly(http.MethodGet, "/metrics/resource", stats.ResourceMetricsHandler(func(r *http.Request) (*statsv1alpha1.Summary, error) {
		return summaryOf(r, sp, s.requestNode(r))
	}), "metrics")
	resource := stats.ResourceMetricsHandler(func(r *http.Request) (*statsv1alpha1.Summary, error) {
		return summaryOf(r, sp, r.PathValue("node"))
	})
	t.handleReadOnly(http.MethodGet, "/metrics/nodes/{node}/metrics/resource", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if node := r.PathValue("node"); !s.servesNode(node) {
			http.Error(w, fmt.Sprintf("node %q is not served here", node), http.StatusNotFound)
			return
		}
		resource.ServeHTTP(w, r)
	}), "metrics")
}

// ResourceMetricsPathAnnotation is the annotation of a Node that tells
// metrics-server (v0.7 and later) the path of its resource metrics, in
// place of /metrics/resource. Nodes that share one address (the Nodes
// an agent takes over) carry ResourceMetricsPath, which names the node.
const ResourceMetricsPathAnnotation = "metrics.k8s.io/resource-metrics-path"

// ResourceMetricsPath is the path of node's resource metrics that names
// the node, as kwok serves it: /metrics/nodes/NODE/metrics/resource.
func ResourceMetricsPath(node string) string {
	return "/metrics/nodes/" + url.PathEscape(node) + "/metrics/resource"
}

// metricsPathNode is the node a path of ResourceMetricsPath's form names.
func metricsPathNode(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/metrics/nodes/")
	if !ok {
		return "", false
	}
	name, rest, _ := strings.Cut(rest, "/")
	if name == "" || !strings.HasPrefix(rest, "metrics/") {
		return "", false
	}
	name, err := url.PathUnescape(name)
	return name, err == nil
}

// servesNode tells whether the server serves node's stats: the server's
// node, or one its NodeNameResolver has.
func (s *Server) servesNode(node string) bool {
	if node == s.opts.NodeName {
		return true
	}
	names, ok := s.opts.Addresses.(NodeNameResolver)
	return ok && names.HasNode(node)
}

// getSummary answers the summary of the request's node as JSON; with
// only_cpu_and_memory=true, only its CPU and memory part.
func (s *Server) getSummary(sp SummaryProvider) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, fmt.Sprintf("parse the query: %v", err), http.StatusBadRequest)
			return
		}
		onlyCPUAndMemory := r.Form["only_cpu_and_memory"]
		node := s.requestNode(r)
		summary, err := summaryOf(r, sp, node)
		if err != nil {
			klog.FromContext(r.Context()).Error(err, "Unable to get the stats summary", "node", node)
			http.Error(w, fmt.Sprintf("Internal Error: %v", err), http.StatusInternalServerError)
			return
		}
		if len(onlyCPUAndMemory) == 1 && onlyCPUAndMemory[0] == "true" {
			summary = stats.CPUAndMemory(summary)
		}
		// Indented, as the kubelet answers it: people read it with kubectl get --raw.
		data, err := json.MarshalIndent(summary, "", "  ")
		if err != nil {
			http.Error(w, fmt.Sprintf("encode the summary: %v", err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if _, err := w.Write(data); err != nil {
			klog.FromContext(r.Context()).V(4).Info("Unable to write the stats summary", "err", err)
		}
	}
}

// summaryOf asks the summary source for the summary of node.
func summaryOf(r *http.Request, sp SummaryProvider, node string) (*statsv1alpha1.Summary, error) {
	summary, err := sp.Summary(r.Context(), node)
	if err != nil {
		return nil, fmt.Errorf("stats summary of node %s: %w", node, err)
	}
	if summary == nil {
		return nil, fmt.Errorf("stats summary of node %s: %w", node, errNoSummary)
	}
	return summary, nil
}

var errNoSummary = errors.New("the summary source returned none")

// requestNode is the node a /stats or /metrics request is served for.
func (s *Server) requestNode(r *http.Request) string {
	return addressedNode(r, s.opts.Addresses, s.opts.NodeName)
}

// servesAddressedNode tells the paths that serve, and are authorized
// against, the node a request was addressed to.
func servesAddressedNode(path string) bool {
	return underPath(path, "/stats") || underPath(path, "/metrics")
}

// addressedNode returns the node a path of ResourceMetricsPath's form
// names; else the node the API server proxied the request for, when the
// resolver is a NodeNameResolver that has it; else the node whose
// IP the request's connection was accepted on, as resolver names it; else
// fallback.
func addressedNode(r *http.Request, resolver NodeAddressResolver, fallback string) string {
	if node, ok := metricsPathNode(r.URL.Path); ok {
		return node
	}
	if resolver == nil {
		return fallback
	}
	if names, ok := resolver.(NodeNameResolver); ok {
		if node, ok := proxiedNode(r); ok && names.HasNode(node) {
			return node
		}
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return fallback
	}
	ip, ok := ipOf(local)
	if !ok {
		return fallback
	}
	if node, ok := resolver.NodeForAddress(ip); ok {
		return node
	}
	return fallback
}

// ipOf returns the IP of a TCP address; IPv4 addresses accepted on an IPv6
// socket come as plain IPv4, as the nodes publish them.
func ipOf(addr net.Addr) (netip.Addr, bool) {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(tcp.IP)
		return ip.Unmap(), ok
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// proxiedNode is the node named by the X-Forwarded-Uri the API server's
// node proxy sets (/api/v1/nodes/[scheme:]NAME[:port]/proxy/…). Anyone
// may send the header: the request is then served for, and authorized
// against, the node it names, as one sent to that node's address would be.
func proxiedNode(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.Header.Get("X-Forwarded-Uri"), "/api/v1/nodes/")
	if !ok {
		return "", false
	}
	segment, rest, _ := strings.Cut(rest, "/")
	if rest != "proxy" && !strings.HasPrefix(rest, "proxy/") {
		return "", false
	}
	name, err := url.PathUnescape(segment)
	if err != nil {
		return "", false
	}
	switch parts := strings.Split(name, ":"); len(parts) {
	case 1, 2: // name, name:port
		name = parts[0]
	case 3: // scheme:name:port
		name = parts[1]
	default:
		return "", false
	}
	return name, name != ""
}
