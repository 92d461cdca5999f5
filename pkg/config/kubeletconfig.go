package config

import (
	"maps"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// KubeletConfiguration is the config as the kubelet would report it at
// /configz: every field whose meaning nodelet shares with the kubelet's
// KubeletConfiguration (kubelet.config.k8s.io/v1beta1), with the value in
// use, and for the settings nodelet has no knob for, what the node does
// (its cgroup driver, its bind address, no CPU or memory manager). Tools
// that read a node's configuration through /configz (Kubernetes' node e2e
// suite among them) see the node as it runs. Fields of a kubelet that
// nodelet has no counterpart for are left unset.
func (c *Config) KubeletConfiguration() *kubeletv1beta1.KubeletConfiguration {
	k := &kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: "KubeletConfiguration"},

		EnableServer:       ptr.To(c.ServerEnabled()),
		StaticPodPath:      c.StaticPodPath,
		PodLogsDir:         c.PodLogsDir,
		SystemCgroups:      c.SystemCgroups,
		FileCheckFrequency: c.FileCheckFrequency,
		HTTPCheckFrequency: c.HTTPCheckFrequency,
		StaticPodURL:       c.StaticPodURL,
		// The kubelet API listens on every interface, as the kubelet's
		// default address; c.Address is the node's InternalIP.
		Address:            "0.0.0.0",
		Port:               c.Port,
		ReadOnlyPort:       c.ReadOnlyPort,
		TLSCertFile:        c.TLSCertFile,
		TLSPrivateKeyFile:  c.TLSPrivateKeyFile,
		ServerTLSBootstrap: c.ServerTLSBootstrap,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: c.Authentication.X509.ClientCAFile},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(ptr.Deref(c.Authentication.Webhook.Enabled, true))},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:          kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		EnableProfilingHandler: ptr.To(ptr.Deref(c.EnableProfilingHandler, true)),
		HealthzPort:            ptr.To(c.HealthzPort),
		HealthzBindAddress:     c.HealthzBindAddress,
		ClusterDomain:          c.ClusterDomain,
		ClusterDNS:             slices.Clone(c.ClusterDNS),

		NodeStatusReportFrequency: c.NodeStatusReportFrequency,
		NodeLeaseDurationSeconds:  c.NodeLeaseDurationSeconds,
		RegisterNode:              ptr.To(true),
		RegisterWithTaints:        slices.Clone(c.RegisterWithTaints),

		ImageMinimumGCAge:           c.ImageMinimumGCAge,
		ImageGCHighThresholdPercent: ptr.To(c.ImageGCHighThresholdPercent),
		ImageGCLowThresholdPercent:  ptr.To(c.ImageGCLowThresholdPercent),

		RuntimeRequestTimeout:    c.RuntimeRequestTimeout,
		ContainerRuntimeEndpoint: c.ContainerRuntimeEndpoint,
		MaxPods:                  c.MaxPods,
		ResolverConfig:           ptr.To(c.ResolvConf),
		ContentType:              c.ContentType,
		KubeAPIQPS:               ptr.To(int32(math.Round(float64(c.KubeAPIQPS)))),
		KubeAPIBurst:             c.KubeAPIBurst,

		EvictionHard:                     maps.Clone(c.EvictionHard),
		EvictionSoft:                     maps.Clone(c.EvictionSoft),
		EvictionSoftGracePeriod:          maps.Clone(c.EvictionSoftGracePeriod),
		EvictionMinimumReclaim:           maps.Clone(c.EvictionMinimumReclaim),
		EvictionPressureTransitionPeriod: c.EvictionPressureTransitionPeriod,
		EvictionMaxPodGracePeriod:        c.EvictionMaxPodGracePeriod,
		// nodelet's attach/detach serves its own nodes; the cluster's
		// controller is told to leave them alone.
		EnableControllerAttachDetach: ptr.To(!c.AttachDetachEnabled()),

		ContainerLogMaxSize:  c.ContainerLogMaxSize.String(),
		ContainerLogMaxFiles: ptr.To(c.ContainerLogMaxFiles),
		SystemReserved:       resourceMap(c.SystemReserved),
		KubeReserved:         resourceMap(c.KubeReserved),
		AllowedUnsafeSysctls: slices.Clone(c.AllowedUnsafeSysctls),

		ShutdownGracePeriod:             c.ShutdownGracePeriod,
		ShutdownGracePeriodCriticalPods: c.ShutdownGracePeriodCriticalPods,
	}
	for _, g := range c.ShutdownGracePeriodByPodPriority {
		k.ShutdownGracePeriodByPodPriority = append(k.ShutdownGracePeriodByPodPriority,
			kubeletv1beta1.ShutdownGracePeriodByPodPriority{Priority: g.Priority, ShutdownGracePeriodSeconds: g.ShutdownGracePeriodSeconds})
	}
	if c.RunsHostPods() {
		// The pods' cgroups: one per QoS class below nodelet's own (the
		// kubelet's kubepods), in the cgroupfs driver's form.
		k.CgroupsPerQOS = ptr.To(true)
		k.CgroupDriver = "cgroupfs"
		k.CgroupRoot = "/"
		k.CPUManagerPolicy = "none"
		k.MemoryManagerPolicy = kubeletv1beta1.NoneMemoryManagerPolicy
		k.TopologyManagerPolicy = kubeletv1beta1.NoneTopologyManagerPolicy
	}
	return k
}

// resourceMap is a resource list as the kubelet's reserved maps spell it.
func resourceMap(l corev1.ResourceList) map[string]string {
	if len(l) == 0 {
		return nil
	}
	m := make(map[string]string, len(l))
	for name, q := range l {
		m[string(name)] = q.String()
	}
	return m
}
