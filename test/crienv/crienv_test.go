//go:build linux

package crienv_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/mountinfo"
	"github.com/nodelet/nodelet/test/crienv"
)

// start starts an environment for the test, skipping where it cannot run,
// and stops it at the end of the test if the test has not, checking that
// nothing of it is left.
func start(t *testing.T, opts crienv.Options) *crienv.Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := crienv.Start(ctx, opts)
	if errors.Is(err, crienv.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	left := leftoversOf(env)
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
		left.check(t)
	})
	return env
}

func TestStartReportsReadyAndStopLeavesNothing(t *testing.T) {
	env := start(t, crienv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if !strings.HasPrefix(env.Endpoint(), "unix:///") || len(strings.TrimPrefix(env.Endpoint(), "unix://")) >= 108 {
		t.Errorf("endpoint %q: not a unix socket path that fits in sockaddr_un", env.Endpoint())
	}
	v, err := env.RuntimeClient().Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatalf("version: %v", err)
	}
	if v.GetRuntimeName() != "containerd" || v.GetRuntimeApiVersion() != "v1" {
		t.Errorf("version: runtime %q API %q, want containerd and v1", v.GetRuntimeName(), v.GetRuntimeApiVersion())
	}
	t.Logf("runtime %s %s, snapshotter %s, bridge %s, subnet %s, dir %s",
		v.GetRuntimeName(), v.GetRuntimeVersion(), env.Snapshotter(), env.Bridge(), env.Subnet(), env.Dir())

	st, err := env.RuntimeClient().Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	for _, want := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		if !condition(st.GetStatus(), want) {
			t.Errorf("status: %s is not true: %v", want, st.GetStatus().GetConditions())
		}
	}

	left := leftoversOf(env)
	if err := env.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	left.check(t)
	if err := env.Stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

// A pod sandbox pulls its pause image through the mirror, gets an address
// of the subnet on the bridge, survives a crash of containerd and its
// restart, and Stop after another crash removes it and everything of it.
func TestPodSandboxSurvivesRestartAndStopRemovesIt(t *testing.T) {
	if err := crienv.Available(crienv.Options{}); err != nil {
		t.Skip(err) // before building the image
	}
	reg := newRegistry(t, "pause", "3.10.2")
	env := start(t, crienv.Options{Mirror: reg.url})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := env.RuntimeClient()

	run, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "crienv", Uid: "crienv-uid", Namespace: "default"},
		Hostname:     "crienv",
		PortMappings: []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: freePort(t)}},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}})
	if err != nil {
		t.Fatalf("run pod sandbox: %v\ncontainerd log:\n%s", err, readFile(env.LogPath()))
	}
	id := run.GetPodSandboxId()
	if got := reg.served(); !strings.Contains(got, "manifest pause ns=registry.k8s.io") {
		t.Errorf("the mirror did not serve registry.k8s.io/pause; it served: %s", got)
	}
	st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatalf("pod sandbox status: %v", err)
	}
	_, subnet, _ := net.ParseCIDR(env.Subnet())
	if ip := net.ParseIP(st.GetStatus().GetNetwork().GetIp()); ip == nil || !subnet.Contains(ip) {
		t.Errorf("pod IP %q is not in the subnet %s", st.GetStatus().GetNetwork().GetIp(), env.Subnet())
	}
	if _, err := net.InterfaceByName(env.Bridge()); err != nil {
		t.Errorf("bridge %s: %v", env.Bridge(), err)
	}
	if out, err := exec.Command("iptables", "-w", "-t", "nat", "-S").CombinedOutput(); err != nil {
		t.Errorf("iptables: %v: %s", err, out)
	} else if !bytes.Contains(out, []byte(`\"`+env.Network()+`\"`)) {
		t.Errorf("no nat rule of the host port of %s:\n%s", env.Network(), out)
	}

	if err := env.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	_, err = rt.Version(short, &runtimeapi.VersionRequest{})
	cancelShort()
	if err == nil {
		t.Errorf("the CRI answers after Kill")
	}
	if err := env.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatalf("list pod sandboxes: %v", err)
	}
	if len(list.GetItems()) != 1 || list.GetItems()[0].GetId() != id || list.GetItems()[0].GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("after restart, pod sandboxes are %v, want %s ready", list.GetItems(), id)
	}

	if err := env.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	left := leftoversOf(env)
	if err := env.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	left.check(t)
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io/" + id)
	if _, err := os.Stat("/sys/fs/cgroup/k8s.io/" + id); err == nil {
		cgroups = append(cgroups, "/sys/fs/cgroup/k8s.io/"+id)
	}
	if len(cgroups) > 0 {
		t.Errorf("cgroups of the pod sandbox are left: %v", cgroups)
	}
}

func TestTwoEnvironmentsDoNotCollide(t *testing.T) {
	a := start(t, crienv.Options{})
	b := start(t, crienv.Options{})
	if a.Endpoint() == b.Endpoint() || a.Bridge() == b.Bridge() || a.Subnet() == b.Subnet() || a.Network() == b.Network() || a.Dir() == b.Dir() {
		t.Errorf("two environments share a name: %s %s %s %s %s / %s %s %s %s %s",
			a.Endpoint(), a.Bridge(), a.Subnet(), a.Network(), a.Dir(), b.Endpoint(), b.Bridge(), b.Subnet(), b.Network(), b.Dir())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, env := range []*crienv.Env{a, b} {
		if _, err := env.RuntimeClient().Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			t.Errorf("%s: version: %v", env.Endpoint(), err)
		}
	}
}

// freePort is a TCP port free on the host now.
func freePort(t *testing.T) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

func TestUnavailableWithoutBinaries(t *testing.T) {
	err := crienv.Available(crienv.Options{BinDir: t.TempDir()})
	if !errors.Is(err, crienv.ErrUnavailable) {
		t.Errorf("without binaries: got %v, want ErrUnavailable", err)
	}
	if _, err := crienv.Start(context.Background(), crienv.Options{BinDir: t.TempDir()}); !errors.Is(err, crienv.ErrUnavailable) {
		t.Errorf("start without binaries: got %v, want ErrUnavailable", err)
	}
}

func condition(st *runtimeapi.RuntimeStatus, typ string) bool {
	for _, c := range st.GetConditions() {
		if c.GetType() == typ {
			return c.GetStatus()
		}
	}
	return false
}

// leftovers are the names of what an environment owns, taken before Stop.
type leftovers struct {
	dir, socket, bridge, network string
}

func leftoversOf(env *crienv.Env) leftovers {
	return leftovers{
		dir:     env.Dir(),
		socket:  strings.TrimPrefix(env.Endpoint(), "unix://"),
		bridge:  env.Bridge(),
		network: env.Network(),
	}
}

// check fails the test for anything of the environment still there.
func (l leftovers) check(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(l.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s is left (%v)", l.dir, err)
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if strings.HasPrefix(m.Point, l.dir+"/") || m.Point == l.dir {
			t.Errorf("mount %s is left", m.Point)
		}
	}
	if _, err := net.InterfaceByName(l.bridge); err == nil {
		t.Errorf("bridge %s is left", l.bridge)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(l.dir)) {
			t.Errorf("process %s is left: %s", filepath.Base(filepath.Dir(p)), bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
	if files, _ := filepath.Glob("/var/lib/cni/results/" + l.network + "-*"); len(files) > 0 {
		t.Errorf("CNI results are left: %v", files)
	}
	if out, err := exec.Command("iptables", "-w", "-t", "nat", "-S").Output(); err == nil && bytes.Contains(out, []byte(`\"`+l.network+`\"`)) {
		t.Errorf("nat rules of %s are left:\n%s", l.network, out)
	}
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// registry is a read-only OCI registry on loopback that serves one image:
// a static pause binary built from source for the test.
type registry struct {
	url string

	mu  sync.Mutex
	log []string
}

func (r *registry) served() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.log, ", ")
}

func newRegistry(t *testing.T, name, tag string) *registry {
	t.Helper()
	layer, diffID := pauseLayer(t)
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	blobs := map[string][]byte{digest(layer): layer, digest(config): config}
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest(layer), "size": len(layer)}},
	})
	r := &registry{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		path := strings.TrimPrefix(req.URL.Path, "/v2/")
		var (
			body  []byte
			ctype = "application/octet-stream"
		)
		switch {
		case req.URL.Path == "/v2/":
			body = []byte("{}")
		case path == name+"/manifests/"+tag || path == name+"/manifests/"+digest(manifest):
			body, ctype = manifest, "application/vnd.oci.image.manifest.v1+json"
			r.mu.Lock()
			r.log = append(r.log, fmt.Sprintf("manifest %s ns=%s", name, req.URL.Query().Get("ns")))
			r.mu.Unlock()
		case strings.HasPrefix(path, name+"/blobs/"):
			body = blobs[strings.TrimPrefix(path, name+"/blobs/")]
		}
		if body == nil {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Docker-Content-Digest", digest(body))
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		if req.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// pauseLayer builds a static binary that waits for SIGTERM and returns it
// as a gzipped layer, with the digest of the uncompressed tar.
func pauseLayer(t *testing.T) (layer []byte, diffID string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build the pause binary: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "pause.go")
	if err := os.WriteFile(src, []byte(`package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gobin, "build", "-o", filepath.Join(dir, "pause"), src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build pause: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "pause"))
	if err != nil {
		t.Fatal(err)
	}
	var tarball bytes.Buffer
	tw := tar.NewWriter(&tarball)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(bin); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(tarball.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return gz.Bytes(), digest(tarball.Bytes())
}

func digest(b []byte) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256(b))
}
