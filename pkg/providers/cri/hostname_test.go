package cri

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPodHostnameAndDomain(t *testing.T) {
	long := strings.Repeat("a", 60) + "-b-c-d" // 66 characters, cut at 63 ends in '-'
	tests := []struct {
		name          string
		podName       string
		spec          corev1.PodSpec
		clusterDomain string
		host, domain  string
		err           string
	}{
		{name: "pod name", podName: "web-0", host: "web-0"},
		{name: "hostname", podName: "web-0", spec: corev1.PodSpec{Hostname: "db"}, host: "db"},
		{
			name: "subdomain", podName: "web-0", spec: corev1.PodSpec{Hostname: "db", Subdomain: "backend"},
			clusterDomain: "cluster.local", host: "db", domain: "backend.shop.svc.cluster.local",
		},
		{name: "subdomain without cluster domain", podName: "web-0", spec: corev1.PodSpec{Subdomain: "backend"}, host: "web-0", domain: "backend.shop.svc"},
		{name: "long pod name is cut", podName: long, host: strings.Repeat("a", 60) + "-b"},
		{
			name: "override wins and drops the domain", podName: "web-0",
			spec:          corev1.PodSpec{Hostname: "db", Subdomain: "backend", HostnameOverride: ptr.To("custom.host")},
			clusterDomain: "cluster.local", host: "custom.host",
		},
		{name: "bad hostname", podName: "web-0", spec: corev1.PodSpec{Hostname: "Bad_Name"}, err: `spec.hostname: Invalid value: "Bad_Name"`},
		{name: "bad subdomain", podName: "web-0", spec: corev1.PodSpec{Subdomain: "a.b"}, err: `spec.subdomain: Invalid value: "a.b"`},
		{name: "bad override", podName: "web-0", spec: corev1.PodSpec{HostnameOverride: ptr.To("-x")}, err: "spec.hostnameOverride: Invalid value"},
		{name: "nothing left", podName: strings.Repeat(".", 70), err: "was invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tt.podName, Namespace: "shop"}, Spec: tt.spec}
			host, domain, err := podHostnameAndDomain(pod, tt.clusterDomain)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if host != tt.host || domain != tt.domain {
				t.Errorf("got %q, %q; want %q, %q", host, domain, tt.host, tt.domain)
			}
		})
	}
}

func TestKernelHostname(t *testing.T) {
	tests := []struct {
		name         string
		asFQDN       *bool
		host, domain string
		want, err    string
	}{
		{name: "short name", host: "db", domain: "b.ns.svc.cluster.local", want: "db"},
		{name: "fqdn", asFQDN: ptr.To(true), host: "db", domain: "b.ns.svc.cluster.local", want: "db.b.ns.svc.cluster.local"},
		{name: "fqdn asked without domain", asFQDN: ptr.To(true), host: "db", want: "db"},
		{name: "fqdn off", asFQDN: ptr.To(false), host: "db", domain: "b.ns.svc", want: "db"},
		{name: "fqdn too long", asFQDN: ptr.To(true), host: strings.Repeat("h", 45), domain: "b.ns.svc.cluster.local", err: "is too long (64 characters is the max, 68 characters requested)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{SetHostnameAsFQDN: tt.asFQDN}}
			got, err := kernelHostname(pod, tt.host, tt.domain)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
