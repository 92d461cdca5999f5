package cri

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

func TestParseResolvConf(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    *runtimeapi.DNSConfig
		wantErr string
	}{
		{
			name: "empty",
			in:   "",
			want: &runtimeapi.DNSConfig{Servers: []string{}, Searches: []string{}, Options: []string{}},
		},
		{
			name: "typical",
			in: "# generated\nnameserver 10.0.0.2\nnameserver  fd00::53 \nsearch corp.example. example.com .\n" +
				"options ndots:2 timeout:1\noptions attempts:3 ndots:3\n  # indented comment\n",
			want: &runtimeapi.DNSConfig{
				Servers:  []string{"10.0.0.2", "fd00::53"},
				Searches: []string{"corp.example", "example.com"},
				Options:  []string{"ndots:3", "timeout:1", "attempts:3"},
			},
		},
		{
			name: "last search wins",
			in:   "search a.example b.example\nsearch c.example\n",
			want: &runtimeapi.DNSConfig{Servers: []string{}, Searches: []string{"c.example"}, Options: []string{}},
		},
		{
			name:    "nameserver without address",
			in:      "nameserver 1.1.1.1\nnameserver\n",
			wantErr: "line 2: nameserver without an address",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseResolvConf(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseResolvConfTooLarge(t *testing.T) {
	big := strings.Repeat("#", maxResolvConfBytes+1)
	if _, err := parseResolvConf(strings.NewReader(big)); err == nil {
		t.Fatal("no error for an oversized file")
	}
}

func dnsTestPod(policy corev1.DNSPolicy, hostNetwork bool, dc *corev1.PodDNSConfig) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u1"},
		Spec:       corev1.PodSpec{DNSPolicy: policy, HostNetwork: hostNetwork, DNSConfig: dc},
	}
}

func TestFormPodDNSConfig(t *testing.T) {
	host := &runtimeapi.DNSConfig{
		Servers:  []string{"192.168.1.1", "192.168.1.2"},
		Searches: []string{"corp.example", "cluster.local"},
		Options:  []string{"timeout:1", "ndots:1"},
	}
	cluster := dnsOptions{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", ResolvConf: "/etc/resolv.conf"}
	clusterSearch := []string{"shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}
	hostCfg := &runtimeapi.DNSConfig{Servers: host.Servers, Searches: host.Searches, Options: host.Options}
	tests := []struct {
		name     string
		pod      *corev1.Pod
		opts     dnsOptions
		want     *runtimeapi.DNSConfig
		warnings []string // reasons
	}{
		{
			name: "cluster first",
			pod:  dnsTestPod(corev1.DNSClusterFirst, false, nil),
			opts: cluster,
			want: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: clusterSearch, Options: []string{"ndots:5"}},
		},
		{
			name: "unset policy is cluster first",
			pod:  dnsTestPod("", false, nil),
			opts: cluster,
			want: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: clusterSearch, Options: []string{"ndots:5"}},
		},
		{
			name: "cluster first without a cluster domain keeps the host search",
			pod:  dnsTestPod(corev1.DNSClusterFirst, false, nil),
			opts: dnsOptions{ClusterDNS: []string{"10.96.0.10"}, ResolvConf: "/etc/resolv.conf"},
			want: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: host.Searches, Options: []string{"ndots:5"}},
		},
		{
			name: "cluster first on the host network uses the host",
			pod:  dnsTestPod(corev1.DNSClusterFirst, true, nil),
			opts: cluster,
			want: hostCfg,
		},
		{
			name: "cluster first with host net",
			pod:  dnsTestPod(corev1.DNSClusterFirstWithHostNet, true, nil),
			opts: cluster,
			want: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: clusterSearch, Options: []string{"ndots:5"}},
		},
		{
			name:     "cluster first without cluster DNS falls back to the host",
			pod:      dnsTestPod(corev1.DNSClusterFirst, false, nil),
			opts:     dnsOptions{ClusterDomain: "cluster.local", ResolvConf: "/etc/resolv.conf"},
			want:     hostCfg,
			warnings: []string{"MissingClusterDNS"},
		},
		{
			name:     "cluster first without cluster DNS nor resolv.conf gets loopback",
			pod:      dnsTestPod(corev1.DNSClusterFirst, false, nil),
			opts:     dnsOptions{ClusterDomain: "cluster.local", NodeIPs: []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("fd00::1"), net.ParseIP("10.0.0.2")}},
			want:     &runtimeapi.DNSConfig{Servers: []string{"127.0.0.1", "::1"}, Searches: []string{"."}},
			warnings: []string{"MissingClusterDNS"},
		},
		{
			name: "default",
			pod:  dnsTestPod(corev1.DNSDefault, false, nil),
			opts: cluster,
			want: hostCfg,
		},
		{
			name: "default without resolv.conf and no node IPs",
			pod:  dnsTestPod(corev1.DNSDefault, false, nil),
			opts: dnsOptions{ClusterDNS: []string{"10.96.0.10"}},
			want: &runtimeapi.DNSConfig{Servers: []string{"127.0.0.1"}, Searches: []string{"."}},
		},
		{
			name: "none",
			pod: dnsTestPod(corev1.DNSNone, false, &corev1.PodDNSConfig{
				Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.example"},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}},
			}),
			opts: cluster,
			want: &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []string{"ndots:2", "edns0"}},
		},
		{
			name: "cluster first merged with dnsConfig",
			pod: dnsTestPod(corev1.DNSClusterFirst, false, &corev1.PodDNSConfig{
				Nameservers: []string{"10.96.0.10", "1.1.1.1"}, Searches: []string{"svc.cluster.local", "extra.example"},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}, {Name: "single-request", Value: ptr.To("")}},
			}),
			opts: cluster,
			want: &runtimeapi.DNSConfig{
				Servers:  []string{"10.96.0.10", "1.1.1.1"},
				Searches: append(clusterSearch, "extra.example"),
				Options:  []string{"ndots:1", "single-request"},
			},
		},
		{
			name: "nameservers cut to three",
			pod: dnsTestPod(corev1.DNSDefault, false, &corev1.PodDNSConfig{
				Nameservers: []string{"1.1.1.1", "8.8.8.8"},
			}),
			opts:     cluster,
			want:     &runtimeapi.DNSConfig{Servers: []string{"192.168.1.1", "192.168.1.2", "1.1.1.1"}, Searches: host.Searches, Options: host.Options},
			warnings: []string{"DNSConfigForming"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := host
			if tt.opts.ResolvConf == "" {
				h = &runtimeapi.DNSConfig{} // what hostDNSConfig reads from no file
			}
			got, warnings := formPodDNSConfig(tt.pod, tt.opts, h)
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			var reasons []string
			for _, w := range warnings {
				reasons = append(reasons, w.Reason)
			}
			if diff := cmp.Diff(tt.warnings, reasons); diff != "" {
				t.Errorf("warnings (-want +got):\n%s\n%v", diff, warnings)
			}
		})
	}
	if host.Servers[0] != "192.168.1.1" || len(host.Servers) != 2 {
		t.Errorf("host configuration changed: %v", host)
	}
}

func TestMissingClusterDNSMessage(t *testing.T) {
	_, w := formPodDNSConfig(dnsTestPod(corev1.DNSClusterFirst, false, nil), dnsOptions{ResolvConf: "x"}, &runtimeapi.DNSConfig{})
	want := `pod: "web_shop(u1)". nodelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`
	if len(w) != 1 || w[0].Message != want {
		t.Errorf("warnings = %v, want %q", w, want)
	}
}

func TestFitSearches(t *testing.T) {
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprintf("d%d.example", i)
	}
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 63) + ".e"
	wide := make([]string, 32)
	for i := range wide {
		wide[i] = fmt.Sprintf("%02d", i) + strings.Repeat("x", 70)
	}
	tests := []struct {
		name    string
		in      []string
		wantLen int
		cut     bool
	}{
		{"fits", []string{"a", "b"}, 2, false},
		{"too many", many, 32, true},
		{"too long a name", []string{"a", long, "b"}, 2, true},
		// 32 domains of 72 characters: 32*73-1 = 2335 characters; 28 fit (2043).
		{"too many characters", wide, 28, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, cut := fitSearches(tt.in)
			if len(got) != tt.wantLen || cut != tt.cut {
				t.Errorf("got %d domains, cut %v; want %d, %v", len(got), cut, tt.wantLen, tt.cut)
			}
			if n := len(strings.Join(got, " ")); n > maxDNSSearchListChars {
				t.Errorf("search line has %d characters", n)
			}
		})
	}
}

func TestValidatePodDNS(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []string // substrings of the error; none means valid
	}{
		{"cluster first", dnsTestPod(corev1.DNSClusterFirst, false, nil), nil},
		{"bad policy", dnsTestPod("Cluster", false, nil), []string{`spec.dnsPolicy: Unsupported value: "Cluster"`}},
		{"none without config", dnsTestPod(corev1.DNSNone, false, nil), []string{"spec.dnsConfig: Required value"}},
		{"none without nameservers", dnsTestPod(corev1.DNSNone, false, &corev1.PodDNSConfig{}), []string{"spec.dnsConfig.nameservers: Required value"}},
		{
			"bad entries",
			dnsTestPod(corev1.DNSDefault, false, &corev1.PodDNSConfig{
				Nameservers: []string{"1.1.1.1", "dns.example"},
				Searches:    []string{"ok.example.", ".", "Bad_Domain"},
				Options:     []corev1.PodDNSConfigOption{{Name: "ndots"}, {Value: ptr.To("1")}},
			}),
			[]string{
				`spec.dnsConfig.nameservers[1]: Invalid value: "dns.example"`,
				`spec.dnsConfig.searches[2]: Invalid value: "Bad_Domain"`,
				"spec.dnsConfig.options[1].name: Required value",
			},
		},
		{
			"too many",
			dnsTestPod(corev1.DNSDefault, false, &corev1.PodDNSConfig{
				Nameservers: []string{"1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4"},
				Searches:    strings.Fields(strings.Repeat("a ", 33)),
			}),
			[]string{"spec.dnsConfig.nameservers: Too many", "spec.dnsConfig.searches: Too many"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validatePodDNS(tt.pod)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %v", tt.want)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestPodDNSConfig(t *testing.T) {
	dir := t.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 192.168.1.1\nsearch corp.example\noptions edns0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := dnsOptions{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", ResolvConf: resolv}

	got, warnings, err := podDNSConfig(dnsTestPod(corev1.DNSClusterFirst, false, nil), opts)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("err = %v, warnings = %v", err, warnings)
	}
	want := &runtimeapi.DNSConfig{
		Servers:  []string{"10.96.0.10"},
		Searches: []string{"shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"},
		Options:  []string{"ndots:5"},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	opts.ResolvConf = filepath.Join(dir, "missing")
	if _, _, err := podDNSConfig(dnsTestPod(corev1.DNSDefault, false, nil), opts); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("err = %v, want one naming the missing file", err)
	}
	if _, _, err := podDNSConfig(dnsTestPod(corev1.DNSNone, false, nil), opts); err == nil || !strings.Contains(err.Error(), "spec.dnsConfig") {
		t.Errorf("err = %v, want a spec.dnsConfig error", err)
	}
}

func TestMergeOptions(t *testing.T) {
	got := mergeOptions([]string{"ndots:5", "edns0"}, []string{"timeout:2", "ndots:1", "edns0"})
	if diff := cmp.Diff([]string{"ndots:1", "edns0", "timeout:2"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
