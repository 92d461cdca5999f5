// The virtual-kubelet adapter is a module of its own: virtual-kubelet's
// nodeutil package, which holds the Provider interface of logs, exec,
// attach, port-forward and stats, imports k8s.io/apiserver, opencensus,
// logrus, gorilla/mux and more, which nodelet's own module must not carry.
//
// virtual-kubelet is pinned at v1.13.0: it requires k8s.io/* v0.35.4, so the
// module graph keeps nodelet's v0.36.3 (Kubernetes 1.36, the control
// plane's minor). v1.14.1, the newest, requires k8s.io/* v0.37.
module github.com/nodelet/nodelet/adapter/virtualkubelet

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	github.com/nodelet/nodelet v0.0.0-00010101000000-000000000000
	github.com/virtual-kubelet/virtual-kubelet v1.13.0
	k8s.io/api v0.36.3
	k8s.io/apimachinery v0.36.3
	k8s.io/klog/v2 v2.140.0
	k8s.io/kubelet v0.36.3
)

replace github.com/nodelet/nodelet => ../..
