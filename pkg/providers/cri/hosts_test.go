package cri

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const localhostEntries = "127.0.0.1\tlocalhost\n" +
	"::1\tlocalhost ip6-localhost ip6-loopback\n" +
	"fe00::0\tip6-localnet\n" +
	"fe00::0\tip6-mcastprefix\n" +
	"fe00::1\tip6-allnodes\n" +
	"fe00::2\tip6-allrouters\n"

func TestManagedHostsFile(t *testing.T) {
	aliases := []corev1.HostAlias{
		{IP: "10.1.2.3", Hostnames: []string{"foo.local", "bar.local"}},
		{IP: "10.1.2.4", Hostnames: []string{"baz.local"}},
	}
	tests := []struct {
		name         string
		ips          []string
		host, domain string
		aliases      []corev1.HostAlias
		want         string
	}{
		{
			name: "one ip", ips: []string{"10.244.0.5"}, host: "web-0",
			want: "# Kubernetes-managed hosts file.\n" + localhostEntries + "10.244.0.5\tweb-0\n",
		},
		{
			name: "dual stack with domain", ips: []string{"10.244.0.5", "fd00::5"}, host: "db", domain: "backend.shop.svc.cluster.local",
			want: "# Kubernetes-managed hosts file.\n" + localhostEntries +
				"10.244.0.5\tdb.backend.shop.svc.cluster.local\tdb\n" +
				"fd00::5\tdb.backend.shop.svc.cluster.local\tdb\n",
		},
		{
			name: "host aliases", ips: []string{"10.244.0.5"}, host: "web-0", aliases: aliases,
			want: "# Kubernetes-managed hosts file.\n" + localhostEntries + "10.244.0.5\tweb-0\n" +
				"\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n10.1.2.4\tbaz.local\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(managedHostsFile(tt.ips, tt.host, tt.domain, tt.aliases))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodHostsFile(t *testing.T) {
	dir := t.TempDir()
	nodeHosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(nodeHosts, []byte("127.0.0.1 localhost\n192.168.1.10 node-a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	aliases := []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo.local"}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop"},
		Spec:       corev1.PodSpec{Hostname: "web", Subdomain: "www", HostAliases: aliases},
	}

	got, err := podHostsFile(pod, []string{"10.244.0.5"}, "cluster.local", nodeHosts)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Kubernetes-managed hosts file.\n" + localhostEntries + "10.244.0.5\tweb.www.shop.svc.cluster.local\tweb\n" +
		"\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("pod network (-want +got):\n%s", diff)
	}

	pod.Spec.HostNetwork = true
	got, err = podHostsFile(pod, nil, "cluster.local", nodeHosts)
	if err != nil {
		t.Fatal(err)
	}
	want = "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n192.168.1.10 node-a\n" +
		"\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("host network (-want +got):\n%s", diff)
	}

	if _, err := podHostsFile(pod, nil, "cluster.local", filepath.Join(dir, "missing")); err == nil {
		t.Error("no error for a missing node hosts file")
	}
	pod.Spec.HostNetwork = false
	pod.Spec.Hostname = "Bad_Name"
	if _, err := podHostsFile(pod, nil, "cluster.local", nodeHosts); err == nil || !strings.Contains(err.Error(), "spec.hostname") {
		t.Errorf("err = %v, want a spec.hostname error", err)
	}
}

func TestNeedsHostsFile(t *testing.T) {
	tests := []struct {
		hostNetwork bool
		ips         []string
		want        bool
	}{
		{false, nil, false},
		{false, []string{"10.0.0.1"}, true},
		{true, nil, true},
	}
	for _, tt := range tests {
		pod := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: tt.hostNetwork}}
		if got := needsHostsFile(pod, tt.ips); got != tt.want {
			t.Errorf("needsHostsFile(hostNetwork=%v, %v) = %v", tt.hostNetwork, tt.ips, got)
		}
	}
}
