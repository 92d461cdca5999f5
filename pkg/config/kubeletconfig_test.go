package config

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// TestKubeletConfiguration checks what /configz reports of a config: the
// kubelet's group, version and kind, the settings nodelet shares with the
// kubelet as they are in use, and what a cri node does where nodelet has
// no setting; it survives a JSON round trip as /configz serves it.
func TestKubeletConfiguration(t *testing.T) {
	c := Default()
	c.Provider = ProviderCRI
	c.NodeName = "n1"
	c.Address = "10.0.0.5"
	c.ReadOnlyPort = 10255
	c.StaticPodPath = "/etc/kubernetes/manifests"
	c.FileCheckFrequency = metav1.Duration{Duration: 30 * time.Second}
	c.ClusterDNS = []string{"10.96.0.10"}
	c.PodLogsDir = "/var/log/pods"
	c.SystemCgroups = "/system"
	c.KubeReserved = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	c.EvictionHard = map[string]string{"memory.available": "100Mi"}
	c.ShutdownGracePeriodByPodPriority = []ShutdownGracePeriodByPodPriority{{Priority: 10, ShutdownGracePeriodSeconds: 30}}

	data, err := json.Marshal(c.KubeletConfiguration())
	if err != nil {
		t.Fatal(err)
	}
	var k kubeletv1beta1.KubeletConfiguration
	if err := json.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	if k.APIVersion != "kubelet.config.k8s.io/v1beta1" || k.Kind != "KubeletConfiguration" {
		t.Errorf("apiVersion %q kind %q", k.APIVersion, k.Kind)
	}
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"address (the bind address)", k.Address, "0.0.0.0"},
		{"port", k.Port, int32(10250)},
		{"readOnlyPort", k.ReadOnlyPort, int32(10255)},
		{"staticPodPath", k.StaticPodPath, "/etc/kubernetes/manifests"},
		{"fileCheckFrequency", k.FileCheckFrequency, metav1.Duration{Duration: 30 * time.Second}},
		{"clusterDNS", k.ClusterDNS, []string{"10.96.0.10"}},
		{"clusterDomain", k.ClusterDomain, "cluster.local"},
		{"podLogsDir", k.PodLogsDir, "/var/log/pods"},
		{"systemCgroups", k.SystemCgroups, "/system"},
		{"kubeReserved", k.KubeReserved, map[string]string{"cpu": "100m"}},
		{"evictionHard", k.EvictionHard, map[string]string{"memory.available": "100Mi"}},
		{"imageGCHighThresholdPercent", k.ImageGCHighThresholdPercent, ptr.To[int32](85)},
		{"containerLogMaxSize", k.ContainerLogMaxSize, "10Mi"},
		{"maxPods", k.MaxPods, int32(110)},
		{"kubeAPIQPS", k.KubeAPIQPS, ptr.To[int32](5000)},
		{"authentication.webhook.enabled", k.Authentication.Webhook.Enabled, ptr.To(true)},
		{"authentication.anonymous.enabled", k.Authentication.Anonymous.Enabled, ptr.To(false)},
		{"authorization.mode", k.Authorization.Mode, kubeletv1beta1.KubeletAuthorizationModeWebhook},
		{"enableServer", k.EnableServer, ptr.To(true)},
		{"enableControllerAttachDetach", k.EnableControllerAttachDetach, ptr.To(false)},
		{"cgroupsPerQOS", k.CgroupsPerQOS, ptr.To(true)},
		{"cgroupDriver", k.CgroupDriver, "cgroupfs"},
		{"shutdownGracePeriodByPodPriority", k.ShutdownGracePeriodByPodPriority,
			[]kubeletv1beta1.ShutdownGracePeriodByPodPriority{{Priority: 10, ShutdownGracePeriodSeconds: 30}}},
	} {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}

	sim := Default()
	k = *sim.KubeletConfiguration()
	if k.CgroupsPerQOS != nil || k.CgroupDriver != "" || *k.EnableServer {
		t.Errorf("sim node: cgroupsPerQOS %v, cgroupDriver %q, enableServer %v; want none, none, false", k.CgroupsPerQOS, k.CgroupDriver, *k.EnableServer)
	}
}
