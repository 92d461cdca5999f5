package main

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// testInputs are the static binaries for a build: the host's busybox
// (make bin/busybox, which make images-test builds) and a pause
// built here, which also stands in for agnhost (building agnhost takes
// minutes; make images does that).
func testInputs(t *testing.T) inputs {
	t.Helper()
	const busybox = "../../bin/busybox"
	if err := checkStatic(busybox); err != nil {
		t.Skipf("no static busybox (make bin/busybox, or make images-test): %v", err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build pause: %v", err)
	}
	pause := filepath.Join(t.TempDir(), "pause")
	cmd := exec.Command(goBin, "build", "-o", pause, "./pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build pause: %v\n%s", err, out)
	}
	// A dynamic host binary stands in for curl and nc.
	return inputs{busybox: busybox, agnhost: pause, pause: pause, nnp: pause, hostname: "/bin/true", tools: map[string]string{"usr/bin/true": "/bin/true"},
		files: map[string]string{"localhost.crt": "/etc/hostname"}}
}

func TestBuildIsReproducible(t *testing.T) {
	in := testInputs(t)
	dir := filepath.Join(t.TempDir(), "images")
	first, err := build(context.Background(), dir, in)
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, b := range first {
		refs = append(refs, b.ref)
	}
	want := slices.Concat(busyboxRefs, agnhostRefs, pauseRefs, nonrootRefs, nonewprivsRefs, nginxRefs, glibcDNSTestingRefs)
	if !slices.Equal(refs, want) {
		t.Errorf("built %v, want %v", refs, want)
	}
	again, err := build(context.Background(), dir, in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].digest != again[i].digest {
			t.Errorf("%s: digest %s, then %s from the same inputs", first[i].ref, first[i].digest, again[i].digest)
		}
	}
	if _, err := os.Stat(dir + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary layout left behind: %v", err)
	}
}

func TestServePull(t *testing.T) {
	in := testInputs(t)
	dir := filepath.Join(t.TempDir(), "images")
	if _, err := build(context.Background(), dir, in); err != nil {
		t.Fatal(err)
	}
	addr := startServe(t, serveConfig{dir: dir, listen: "127.0.0.1:0", user: "nodelet", password: "s3cret"})

	// Public images: anonymous, with their configs.
	for _, tc := range []struct {
		repo             string
		entrypoint, cmd  []string
		user             string
		files, notInRoot []string
	}{
		{repo: "library/busybox:latest", cmd: []string{"sh"}, user: "0",
			files: []string{"bin/busybox", "bin/sh", "usr/bin/wget", "bin/wget", "bin/sysctl", "etc/passwd", "etc/group", "tmp"}},
		{repo: "library/busybox:1.37", cmd: []string{"sh"}, user: "0"},
		{repo: "e2e-test-images/busybox:1.37.0-1", cmd: []string{"sh"}, user: "0"},
		{repo: "e2e-test-images/agnhost:2.63.0", entrypoint: []string{"/agnhost"}, cmd: []string{"pause"}, user: "0",
			files: []string{"agnhost", "agnhost-2", "uploads", "bin/sh", "usr/bin/true", "lib64/ld-linux-x86-64.so.2",
				"var/registry/pause/manifests/testing", "localhost.crt"}},
		{repo: "pause:3.10.2", entrypoint: []string{"/pause"}, user: "65535:65535",
			files: []string{"pause"}, notInRoot: []string{"bin/sh"}},
		{repo: "e2e-test-images/agnhost:2.55", entrypoint: []string{"/agnhost"}, cmd: []string{"pause"}, user: "0"},
		{repo: "e2e-test-images/nonroot:1.5", cmd: []string{"sh"}, user: "1234", files: []string{"usr/bin/id"}},
		{repo: "e2e-test-images/nonewprivs:1.4", cmd: []string{"nnp"}, user: "0", files: []string{"usr/local/bin/nnp"}},
		{repo: "e2e-test-images/nginx:1.15-4", entrypoint: []string{"/agnhost", "netexec", "--http-port=80", "--udp-port=-1"}, user: "0"},
		{repo: "e2e-test-images/glibc-dns-testing:2.0.0", cmd: []string{"sh"}, user: "0",
			files: []string{"bin/sh", "usr/bin/hostname", "etc/nsswitch.conf", "lib64/ld-linux-x86-64.so.2"}},
	} {
		img, err := remote.Image(ref(t, addr, tc.repo))
		if err != nil {
			t.Errorf("pull %s: %v", tc.repo, err)
			continue
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatalf("%s: config: %v", tc.repo, err)
		}
		c := cfg.Config
		if !slices.Equal(c.Entrypoint, tc.entrypoint) || !slices.Equal(c.Cmd, tc.cmd) || c.User != tc.user {
			t.Errorf("%s: entrypoint %q cmd %q user %q, want %q %q %q", tc.repo, c.Entrypoint, c.Cmd, c.User, tc.entrypoint, tc.cmd, tc.user)
		}
		if cfg.OS != "linux" || !slices.Contains(c.Env, defaultPath) {
			t.Errorf("%s: os %q env %q", tc.repo, cfg.OS, c.Env)
		}
		if len(tc.files) == 0 && len(tc.notInRoot) == 0 {
			continue
		}
		files := rootFiles(t, img)
		for _, f := range tc.files {
			if _, ok := files[f]; !ok {
				t.Errorf("%s: no /%s", tc.repo, f)
			}
		}
		for _, f := range tc.notInRoot {
			if _, ok := files[f]; ok {
				t.Errorf("%s: has /%s", tc.repo, f)
			}
		}
		if tc.repo == "library/busybox:latest" {
			if !strings.Contains(files["etc/passwd"], "nobody:x:65534:65534:") || !strings.HasPrefix(files["etc/passwd"], "root:x:0:0:") {
				t.Errorf("busybox /etc/passwd:\n%s", files["etc/passwd"])
			}
		}
	}

	// A tag that is not there.
	if _, err := remote.Image(ref(t, addr, "library/busybox:no-such-tag")); statusCode(err) != http.StatusNotFound {
		t.Errorf("pull of a missing tag: %v, want 404", err)
	}

	// The private image: 401 with a Basic challenge without the right
	// credentials, the busybox image with them.
	private := ref(t, addr, "private/busybox:1.37")
	if _, err := remote.Image(private); statusCode(err) != http.StatusUnauthorized {
		t.Errorf("anonymous pull of %s: %v, want 401", private, err)
	}
	if _, err := remote.Image(private, remote.WithAuth(&authn.Basic{Username: "nodelet", Password: "wrong"})); statusCode(err) != http.StatusUnauthorized {
		t.Errorf("pull of %s with a wrong password: %v, want 401", private, err)
	}
	resp, err := http.Get("http://" + addr + "/v2/private/busybox/manifests/1.37")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(got, "Basic realm=") {
		t.Errorf("GET private manifest: %s, WWW-Authenticate %q; want 401 with a Basic challenge", resp.Status, got)
	}
	img, err := remote.Image(private, remote.WithAuth(&authn.Basic{Username: "nodelet", Password: "s3cret"}))
	if err != nil {
		t.Fatalf("pull %s with credentials: %v", private, err)
	}
	public, err := remote.Image(ref(t, addr, "library/busybox:1.37"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := digest(t, img), digest(t, public); got != want {
		t.Errorf("private busybox is %s, busybox is %s", got, want)
	}

	// Read-only: a push is refused.
	if err := remote.Write(ref(t, addr, "library/busybox:pushed"), public); statusCode(err) != http.StatusMethodNotAllowed {
		t.Errorf("push: %v, want 405", err)
	}
}

func TestServeNeedsImages(t *testing.T) {
	err := serve(context.Background(), serveConfig{dir: t.TempDir(), listen: "127.0.0.1:0"}, io.Discard)
	if err == nil {
		t.Fatal("serve of an empty directory succeeded")
	}
}

// startServe runs serve until the test ends and returns its address, read
// from the ready file.
func startServe(t *testing.T, cfg serveConfig) string {
	t.Helper()
	cfg.readyFile = filepath.Join(t.TempDir(), "addr")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, testLog{t}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if _, err := os.Stat(cfg.readyFile); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("ready file left after serve ended: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if data, err := os.ReadFile(cfg.readyFile); err == nil {
			return strings.TrimSpace(string(data))
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended before it was ready: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("serve not ready after 30s")
		}
	}
}

func ref(t *testing.T, addr, repo string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(addr+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func digest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// statusCode is the HTTP status of a registry error, 0 if there is none.
func statusCode(err error) int {
	var terr *transport.Error
	if errors.As(err, &terr) {
		return terr.StatusCode
	}
	return 0
}

// rootFiles are the paths of the image's flattened root filesystem, with
// the content of its small files.
func rootFiles(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("read root filesystem: %v", err)
		}
		content := ""
		if hdr.Typeflag == tar.TypeReg && hdr.Size < 4096 {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			content = string(b)
		}
		files[hdr.Name] = content
	}
}

// testLog writes the registry's log to the test's.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
