package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// staticBinary builds the pause program here as a stand-in for nodelet:
// the image only cares that it is a static executable.
func staticBinary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "nodelet")
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", bin, "./pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func TestNodeletImage(t *testing.T) {
	bin := staticBinary(t)
	spec := nodeletSpec{bin: bin, version: "v0.1.0", revision: "abc123"}
	const ref = "nodelet.io/nodelet:v0.1.0"
	dir := filepath.Join(t.TempDir(), "nodelet")
	first, err := writeNodelet(dir, ref, spec)
	if err != nil {
		t.Fatal(err)
	}
	again, err := writeNodelet(filepath.Join(t.TempDir(), "again"), ref, spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 1 || first[0].ref != ref || first[0].digest != again[0].digest {
		t.Fatalf("built %+v then %+v: want one image %s, the same digest both times", first, again, ref)
	}

	img, err := nodeletImage(spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Config.Entrypoint; len(got) != 1 || got[0] != "/nodelet" {
		t.Errorf("entrypoint = %q, want [/nodelet]", got)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user = %q, want 65532:65532 (nonroot)", cfg.Config.User)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.title":    "nodelet",
		"org.opencontainers.image.version":  "v0.1.0",
		"org.opencontainers.image.revision": "abc123",
		"org.opencontainers.image.source":   "https://github.com/nodelet/nodelet",
	} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if !cfg.Created.Time.Equal(epoch) {
		t.Errorf("created %s, want %s", cfg.Created.Time, epoch)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d (%v), want one", len(layers), err)
	}
	files := rootFiles(t, img)
	for _, f := range []string{"nodelet", "etc/passwd", "etc/group", "var/lib/nodelet", "tmp"} {
		if _, ok := files[f]; !ok {
			t.Errorf("/%s missing from the image", f)
		}
	}
	if files["etc/passwd"] != "root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/home/nonroot:/bin/false\n" {
		t.Errorf("/etc/passwd = %q", files["etc/passwd"])
	}

	if _, err := writeNodelet(filepath.Join(t.TempDir(), "dynamic"), ref, nodeletSpec{bin: "/bin/true", version: "v0.1.0"}); err == nil {
		t.Error("a dynamically linked nodelet made an image; want an error")
	}
}

// The nodelet image goes to a writable registry with push, and comes back
// with the same digest; the read-only registry refuses it.
func TestPushToWritableRegistry(t *testing.T) {
	bin := staticBinary(t)
	dir := filepath.Join(t.TempDir(), "nodelet")
	built, err := writeNodelet(dir, "nodelet.io/nodelet:e2e", nodeletSpec{bin: bin, version: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	addr := startServe(t, serveConfig{writable: true, listen: "127.0.0.1:0"})
	pushed, err := push(ctx, dir, "", addr+"/nodelet/nodelet:e2e", false)
	if err != nil {
		t.Fatal(err)
	}
	if pushed.digest != built[0].digest {
		t.Errorf("pushed digest %s, built %s", pushed.digest, built[0].digest)
	}
	img, err := remote.Image(ref(t, addr, "nodelet/nodelet:e2e"), remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pull what was pushed: %v", err)
	}
	if got := digest(t, img); got != built[0].digest {
		t.Errorf("pulled digest %s, want %s", got, built[0].digest)
	}
	if _, ok := rootFiles(t, img)["nodelet"]; !ok {
		t.Error("pulled image has no /nodelet")
	}

	if _, err := push(ctx, dir, "nodelet.io/nodelet:other", addr+"/x:y", false); err == nil {
		t.Error("push of an image the layout does not hold succeeded")
	}

	ro := startServe(t, serveConfig{dir: dir, listen: "127.0.0.1:0"})
	if _, err := push(ctx, dir, "", ro+"/nodelet/nodelet:e2e", false); statusCode(err) != http.StatusMethodNotAllowed {
		t.Errorf("push to the read-only registry: %v, want 405", err)
	}
}
