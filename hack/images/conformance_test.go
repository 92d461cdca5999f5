package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// The DNS specs' probe (test/e2e/network/dns_common.go) runs in agnhost and
// in glibc-dns-testing: sh, seq, dig +search over UDP and over TCP, getent
// hosts. It runs here, in each image's root filesystem (chroot, so only the
// image's files), against a DNS server on loopback, with Debian's tools as
// make images adds them.
func TestDNSProbeInImages(t *testing.T) {
	root := needRoot(t)
	imgs := dnsImages(t)
	dns := dnsServer(t, map[string][4]byte{"web.example.": {10, 1, 2, 3}})
	host, port, _ := net.SplitHostPort(dns)
	at := "@" + host + " -p " + port
	script := strings.Join([]string{
		`for i in $(seq 1 1); do`,
		`check="$(dig +notcp +noall +answer +search ` + at + ` web A)" && test -n "$check" && echo "udp $check";`,
		`check="$(dig +tcp +noall +answer +search ` + at + ` web A)" && test -n "$check" && echo "tcp $check";`,
		`check="$(dig +notcp +noall +answer +search ` + at + ` nothing A)"; test -z "$check" && echo "nothing: none";`,
		`test -n "$(getent hosts dns-querier-1)" && echo "hosts $(getent hosts dns-querier-1)";`,
		`done`,
	}, "\n")
	for _, ref := range []string{agnhostRefs[0], glibcDNSTestingRefs[0]} {
		t.Run(ref, func(t *testing.T) {
			dir := root(t, imgs[ref])
			writeFile(t, dir, "etc/resolv.conf", "nameserver "+host+"\nsearch example\n")
			writeFile(t, dir, "etc/hosts", "127.0.0.1\tlocalhost\n10.9.8.7\tdns-querier-1.dns-test-service.ns.svc.cluster.local\tdns-querier-1\n")
			out, err := chrootShell(dir, 0, script)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, want := range []string{"udp web.example.", "tcp web.example.", "10.1.2.3", "nothing: none",
				"hosts 10.9.8.7 ", "dns-querier-1.dns-test-service.ns.svc.cluster.local"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// The hostnameOverride specs run sh -c "echo $(hostname)';'$(hostname -f)';'"
// in glibc-dns-testing, whose pod's /etc/hosts names the overriding
// hostname; here in a UTS namespace of its own, with the hostname set.
func TestHostnameInGlibcDNSTesting(t *testing.T) {
	root := needRoot(t)
	dir := root(t, dnsImages(t)[glibcDNSTestingRefs[0]])
	for _, name := range []string{"override-host", "override.example.host"} {
		writeFile(t, dir, "etc/hosts", "127.0.0.1\tlocalhost\n10.9.8.7\t"+name+"\n")
		out, err := chrootShell(dir, syscall.CLONE_NEWUTS, "hostname "+name+" && echo $(hostname)';'$(hostname -f)';'")
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("no UTS namespace here: %v", err)
		}
		if want := name + ";" + name + ";\n"; err != nil || out != want {
			t.Errorf("hostname %s: %q, %v; want %q", name, out, err, want)
		}
	}
}

// The Aggregator spec runs etcd by /usr/local/bin/etcd with its client URL
// flags, and the sample-apiserver by its entrypoint with the etcd, TLS and
// audit flags below: the binaries make images builds take them.
func TestAggregatorBinaries(t *testing.T) {
	etcd, err := filepath.Abs("../../bin/etcd")
	if err != nil {
		t.Fatal(err)
	}
	sample := filepath.Join(filepath.Dir(etcd), "sample-apiserver")
	for _, bin := range []string{etcd, sample} {
		if err := checkStatic(bin); err != nil {
			t.Skipf("no %s (make images builds it): %v", bin, err)
		}
	}
	out, err := exec.Command(sample, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("sample-apiserver --help: %v\n%s", err, out)
	}
	for _, flag := range []string{"--etcd-servers", "--tls-cert-file", "--tls-private-key-file",
		"--audit-log-path", "--audit-log-maxage", "--audit-log-maxbackup"} {
		if !strings.Contains(string(out), flag) {
			t.Errorf("sample-apiserver has no %s", flag)
		}
	}

	out, err = exec.Command(etcd, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "etcd Version: 3.6.8\n") {
		t.Errorf("etcd --version: %v\n%s", err, out)
	}
	client, peer := "http://"+freePort(t), "http://"+freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, etcd, "--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "default="+peer)
	cmd.Dir = t.TempDir() // where it keeps default.etcd, as the spec's keeps it in /
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	hc := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := hc.Get(client + "/health")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), `"health":"true"`) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("etcd not healthy at %s after a minute: %v\n%s", client, err, log.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dnsImages are agnhost and glibc-dns-testing as make images builds them,
// with this host's Debian tools (skipping without them), by reference.
func dnsImages(t *testing.T) map[string]v1.Image {
	t.Helper()
	in := testInputs(t)
	in.dnsTools = map[string]string{"usr/bin/dig": "/usr/bin/dig", "usr/bin/host": "/usr/bin/host",
		"usr/bin/nslookup": "/usr/bin/nslookup", "usr/bin/getent": "/usr/bin/getent"}
	in.glibcTools = map[string]string{"bin/hostname": "/bin/hostname"}
	for _, src := range []string{"/usr/bin/dig", "/usr/bin/host", "/usr/bin/nslookup", "/usr/bin/getent", "/bin/hostname"} {
		if _, err := os.Stat(src); err != nil {
			t.Skipf("no Debian DNS tools (make images installs bind9-dnsutils): %v", err)
		}
	}
	sets, err := images(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	imgs := map[string]v1.Image{}
	for _, s := range sets {
		for _, ref := range s.refs {
			imgs[ref] = s.img
		}
	}
	return imgs
}

// needRoot skips unless the test runs as root (chroot needs it); it
// returns a function that lays an image's root filesystem out in a
// temporary directory.
func needRoot(t *testing.T) func(*testing.T, v1.Image) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("runs the image's files in a chroot: needs root")
	}
	return func(t *testing.T, img v1.Image) string {
		t.Helper()
		dir := t.TempDir()
		if err := extractRoot(img, dir); err != nil {
			t.Fatal(err)
		}
		return dir
	}
}

// extractRoot writes the image's flattened root filesystem under dir:
// directories, regular files and symlinks.
func extractRoot(img v1.Image, dir string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, clean(hdr.Name))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, os.FileMode(hdr.Mode)&os.ModePerm)
		case tar.TypeSymlink:
			err = os.Symlink(hdr.Linkname, name)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(hdr.Mode)&os.ModePerm); err == nil {
				_, err = io.Copy(f, tr)
				err = errors.Join(err, f.Close())
			}
		default:
			err = fmt.Errorf("/%s: tar type %c", hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

// chrootShell runs the image's sh -c script with dir as its root, in new
// namespaces of the kinds of cloneflags, and returns its combined output.
func chrootShell(dir string, cloneflags uintptr, script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Env = []string{defaultPath}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: dir, Cloneflags: cloneflags}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// freePort is a loopback address whose port was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
