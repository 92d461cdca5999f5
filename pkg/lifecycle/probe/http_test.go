package probe

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestHTTPProbe(t *testing.T) {
	var srvPort int
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "fine") })
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	})
	mux.HandleFunc("/notfound", http.NotFound)
	mux.HandleFunc("/redirect-here", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ok", http.StatusFound)
	})
	mux.HandleFunc("/redirect-fail", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/fail", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/redirect-away", func(w http.ResponseWriter, r *http.Request) {
		// localhost is another host name than 127.0.0.1, though the same server.
		http.Redirect(w, r, fmt.Sprintf("http://localhost:%d/fail", srvPort), http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%s ua=%s accept=%s x=%s", r.Host, r.UserAgent(), r.Header.Get("Accept"), r.Header.Get("X-Probe"))
	})
	mux.HandleFunc("/query", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "path=%s q=%s", r.URL.Path, r.URL.Query().Get("x"))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("a", 3*maxOutput))
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	host, port := hostPort(t, srv)
	srvPort = port

	container := &corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}
	target := Target{Container: container, PodIP: host}
	uaRE := regexp.MustCompile(`ua=kube-probe/1\.\d+ `)

	tests := []struct {
		name    string
		action  corev1.HTTPGetAction
		timeout time.Duration
		want    Result
		msg     string         // substring of the message
		msgRE   *regexp.Regexp // or a pattern it matches
	}{
		{name: "200", action: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port))}, want: Success, msg: "fine"},
		{name: "500", action: corev1.HTTPGetAction{Path: "/fail", Port: intstr.FromInt32(int32(port))}, want: Failure, msg: "HTTP probe failed with statuscode: 500"},
		{name: "404", action: corev1.HTTPGetAction{Path: "/notfound", Port: intstr.FromInt32(int32(port))}, want: Failure, msg: "statuscode: 404"},
		{name: "named port", action: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("http")}, want: Success, msg: "fine"},
		{name: "numeric string port", action: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString(fmt.Sprint(port))}, want: Success},
		{name: "unknown named port", action: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("metrics")}, want: Unknown, msg: `no container port named "metrics"`},
		{name: "port out of range", action: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(70000)}, want: Unknown, msg: "invalid port"},
		{name: "explicit host", action: corev1.HTTPGetAction{Host: "127.0.0.1", Path: "/ok", Port: intstr.FromInt32(int32(port))}, want: Success},
		{name: "path without slash", action: corev1.HTTPGetAction{Path: "ok", Port: intstr.FromInt32(int32(port))}, want: Success, msg: "fine"},
		{name: "query kept", action: corev1.HTTPGetAction{Path: "/query?x=1", Port: intstr.FromInt32(int32(port))}, want: Success, msg: "path=/query q=1"},
		{name: "default headers", action: corev1.HTTPGetAction{Path: "/headers", Port: intstr.FromInt32(int32(port))}, want: Success, msgRE: uaRE},
		{name: "accept default", action: corev1.HTTPGetAction{Path: "/headers", Port: intstr.FromInt32(int32(port))}, want: Success, msg: "accept=*/*"},
		{
			name: "custom headers and Host",
			action: corev1.HTTPGetAction{Path: "/headers", Port: intstr.FromInt32(int32(port)), HTTPHeaders: []corev1.HTTPHeader{
				{Name: "Host", Value: "example.com"}, {Name: "x-probe", Value: "yes"}, {Name: "User-Agent", Value: "mine"}, {Name: "Accept", Value: "text/plain"},
			}},
			want: Success, msg: "host=example.com ua=mine accept=text/plain x=yes",
		},
		{name: "redirect to same host followed", action: corev1.HTTPGetAction{Path: "/redirect-here", Port: intstr.FromInt32(int32(port))}, want: Success, msg: "fine"},
		{name: "redirect to same host failing", action: corev1.HTTPGetAction{Path: "/redirect-fail", Port: intstr.FromInt32(int32(port))}, want: Failure, msg: "statuscode: 500"},
		{name: "redirect elsewhere is a warning", action: corev1.HTTPGetAction{Path: "/redirect-away", Port: intstr.FromInt32(int32(port))}, want: Warning, msg: "Probe terminated redirects, Response body: <a href=\"http://localhost:"},
		{name: "redirect loop", action: corev1.HTTPGetAction{Path: "/loop", Port: intstr.FromInt32(int32(port))}, want: Failure, msg: "stopped after 10 redirects"},
		{name: "timeout", action: corev1.HTTPGetAction{Path: "/slow", Port: intstr.FromInt32(int32(port))}, timeout: 100 * time.Millisecond, want: Failure, msg: "deadline exceeded"},
		{name: "refused", action: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(closedPort(t)))}, want: Failure, msg: "connection refused"},
		{name: "bad scheme", action: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port)), Scheme: "FTP"}, want: Unknown, msg: "unsupported scheme"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := Once(context.Background(), &corev1.ProbeHandler{HTTPGet: &tc.action}, tc.timeout, target)
			if got != tc.want {
				t.Errorf("result = %v, want %v (message %q)", got, tc.want, msg)
			}
			if !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q does not contain %q", msg, tc.msg)
			}
			if tc.msgRE != nil && !tc.msgRE.MatchString(msg) {
				t.Errorf("message %q does not match %v", msg, tc.msgRE)
			}
		})
	}

	t.Run("body truncated", func(t *testing.T) {
		got, msg := Once(context.Background(), &corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/big", Port: intstr.FromInt32(int32(port))}}, 0, target)
		if got != Success || len(msg) != maxOutput {
			t.Errorf("got %v with %d bytes, want Success with %d", got, len(msg), maxOutput)
		}
	})
	t.Run("no host", func(t *testing.T) {
		got, msg := Once(context.Background(), &corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port))}}, 0, Target{})
		if got != Unknown || !strings.Contains(msg, "no host") {
			t.Errorf("got %v %q, want Unknown about no host", got, msg)
		}
	})
}

func TestHTTPSProbeSkipsVerification(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "secure")
	}))
	defer srv.Close()
	host, port := hostPort(t, srv)
	for _, scheme := range []corev1.URIScheme{corev1.URISchemeHTTPS, "https"} {
		h := &corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Scheme: scheme, Path: "/", Port: intstr.FromInt32(int32(port))}}
		got, msg := Once(context.Background(), h, 0, Target{PodIP: host})
		if got != Success || msg != "secure" {
			t.Errorf("scheme %s: got %v %q, want Success \"secure\"", scheme, got, msg)
		}
	}
}
