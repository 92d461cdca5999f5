package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The references of the images build writes. busybox is also what the
// short name "busybox" resolves to, and the private copy is what the pull
// secret tests pull (docker.io/private/busybox, served behind basic auth).
var (
	busyboxRefs = []string{
		"registry.k8s.io/e2e-test-images/busybox:1.37.0-1",
		"docker.io/library/busybox:latest",
		"docker.io/library/busybox:1.37",
		"docker.io/private/busybox:1.37",
	}
	// agnhost:2.55 is the "previous agnhost" of the conformance tests,
	// which only need a second name for an agnhost.
	agnhostRefs = []string{
		"registry.k8s.io/e2e-test-images/agnhost:2.63.0",
		"registry.k8s.io/e2e-test-images/agnhost:2.55",
	}
	pauseRefs = []string{"registry.k8s.io/pause:3.10.2"}
	// The other images of the node conformance tests.
	nonrootRefs    = []string{"registry.k8s.io/e2e-test-images/nonroot:1.5"}
	nonewprivsRefs = []string{"registry.k8s.io/e2e-test-images/nonewprivs:1.4"}
	nginxRefs      = []string{"registry.k8s.io/e2e-test-images/nginx:1.15-4"}
	// glibc-dns-testing: the hostname specs read `hostname -f` through
	// glibc's resolver.
	glibcDNSTestingRefs = []string{"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"}
)

// Annotations of an index entry of the layout: the image's full reference
// (as containerd's import reads it) and its tag (as the OCI spec has it).
const (
	refAnnotation = "io.containerd.image.name"
	tagAnnotation = "org.opencontainers.image.ref.name"
)

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// inputs are the static binaries the images are made of.
type inputs struct {
	busybox string
	agnhost string
	pause   string
	nnp     string // nonewprivs' nnp
	// tools are host binaries (Debian's curl and netcat-openbsd) added
	// to agnhost with the shared libraries they load, as upstream's image
	// has them: image path → host path.
	tools map[string]string
	// files are host files added to agnhost as they are (porter's TLS
	// certificate and key): image path → host path.
	files map[string]string
	// hostname is a host hostname(1) that resolves through glibc
	// (Debian's), the point of glibc-dns-testing.
	hostname string
}

// built is one reference that build wrote.
type built struct {
	ref    string
	digest v1.Hash
	size   int64 // manifest, config and layers, compressed
}

// build writes the images into an OCI image layout at dir, replacing what
// was there once every image is written.
func build(ctx context.Context, dir string, in inputs) ([]built, error) {
	for _, bin := range []string{in.busybox, in.agnhost, in.pause, in.nnp} {
		if err := checkStatic(bin); err != nil {
			return nil, fmt.Errorf("build: %w", err)
		}
	}
	base, version, err := busyboxLayer(ctx, in.busybox)
	if err != nil {
		return nil, fmt.Errorf("build busybox: %w", err)
	}
	busybox, err := newImage(imageSpec{
		layers:  []layerSpec{{base, "busybox " + version + " from Debian's source package"}},
		config:  v1.Config{Cmd: []string{"sh"}, User: "0", Env: []string{defaultPath}},
		version: version,
	})
	if err != nil {
		return nil, fmt.Errorf("build busybox: %w", err)
	}
	pause, err := pauseImage(in.pause)
	if err != nil {
		return nil, fmt.Errorf("build pause: %w", err)
	}
	agnhost, err := agnhostImage(base, version, in.agnhost, in.tools, in.files, pause)
	if err != nil {
		return nil, fmt.Errorf("build agnhost: %w", err)
	}
	baseLayer := layerSpec{base, "busybox " + version + " from Debian's source package"}
	nonroot, err := newImage(imageSpec{
		layers: []layerSpec{baseLayer},
		config: v1.Config{Cmd: []string{"sh"}, User: "1234", Env: []string{defaultPath}},
	})
	if err != nil {
		return nil, fmt.Errorf("build nonroot: %w", err)
	}
	nonewprivs, err := nonewprivsImage(baseLayer, in.nnp)
	if err != nil {
		return nil, fmt.Errorf("build nonewprivs: %w", err)
	}
	nginx, err := nginxImage(agnhost)
	if err != nil {
		return nil, fmt.Errorf("build nginx: %w", err)
	}
	glibcDNSTesting, err := glibcDNSTestingImage(baseLayer, in.hostname)
	if err != nil {
		return nil, fmt.Errorf("build glibc-dns-testing: %w", err)
	}

	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(tmp), 0o755); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("build: write layout: %w", err)
	}
	var out []built
	for _, set := range []struct {
		img  v1.Image
		refs []string
	}{{busybox, busyboxRefs}, {agnhost, agnhostRefs}, {pause, pauseRefs},
		{nonroot, nonrootRefs}, {nonewprivs, nonewprivsRefs}, {nginx, nginxRefs}, {glibcDNSTesting, glibcDNSTestingRefs}} {
		b, err := appendImage(p, set.img, set.refs)
		if err != nil {
			return nil, fmt.Errorf("build: %w", err)
		}
		out = append(out, b...)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("build: replace %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("build: replace %s: %w", dir, err)
	}
	return out, nil
}

// appendImage writes img to the layout once (its blobs are shared) and
// names it by every reference.
func appendImage(p layout.Path, img v1.Image, refs []string) ([]built, error) {
	desc, err := partial.Descriptor(img)
	if err != nil {
		return nil, err
	}
	size, err := imageSize(img)
	if err != nil {
		return nil, err
	}
	if err := p.WriteImage(img); err != nil {
		return nil, fmt.Errorf("write %s: %w", refs[0], err)
	}
	desc.Platform = &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	desc.ArtifactType = "" // an image, not an artifact
	var out []built
	for _, ref := range refs {
		d := *desc
		d.Annotations = map[string]string{refAnnotation: ref, tagAnnotation: ref[strings.LastIndex(ref, ":")+1:]}
		if err := p.AppendDescriptor(d); err != nil {
			return nil, fmt.Errorf("write %s: %w", ref, err)
		}
		out = append(out, built{ref: ref, digest: desc.Digest, size: size})
	}
	return out, nil
}

// imageSize is what a pull transfers: manifest, config and layers.
func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	n, err := img.Size()
	if err != nil {
		return 0, err
	}
	n += m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// layerSpec is a layer and the history line that says what it holds.
type layerSpec struct {
	layer   v1.Layer
	comment string
}

type imageSpec struct {
	layers  []layerSpec
	config  v1.Config
	version string // org.opencontainers.image.version label, if any
}

// newImage is an OCI image for this machine's architecture with the
// layers and config, created at epoch.
func newImage(spec imageSpec) (v1.Image, error) {
	cfg := spec.config
	cfg.WorkingDir = "/"
	if spec.version != "" {
		cfg.Labels = map[string]string{"org.opencontainers.image.version": spec.version}
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Config:       cfg,
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	for _, l := range spec.layers {
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     l.layer,
			History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "nodelet hack/images", Comment: l.comment},
			MediaType: types.OCILayer,
		})
		if err != nil {
			return nil, fmt.Errorf("append layer: %w", err)
		}
	}
	img, err = mutate.CreatedAt(img, v1.Time{Time: epoch})
	if err != nil {
		return nil, fmt.Errorf("created: %w", err)
	}
	return img, nil
}

// busyboxLayer is a root filesystem of busybox, each of its applets a
// symlink to it where it says it belongs, root and nobody as accounts, and
// the usual empty directories. It returns busybox's version too.
func busyboxLayer(ctx context.Context, bin string) (v1.Layer, string, error) {
	applets, err := exec.CommandContext(ctx, bin, "--list-full").Output()
	if err != nil {
		return nil, "", fmt.Errorf("%s --list-full: %w", bin, err)
	}
	banner, _ := exec.CommandContext(ctx, bin).Output() // busybox with no applet exits 1 after its banner
	version := busyboxVersion(banner)
	if version == "" {
		return nil, "", fmt.Errorf("%s: no BusyBox banner; not busybox?", bin)
	}
	fs := rootfs{}
	if err := fs.copy("bin/busybox", 0o755, bin); err != nil {
		return nil, "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(applets))
	for sc.Scan() {
		if name := clean(sc.Text()); name != "" && name != "bin/busybox" {
			fs.symlink(name, "/bin/busybox")
			// Upstream's image has every applet in /bin too
			// (/bin/sysctl, which the tests run by that path).
			if alias := "bin/" + path.Base(name); alias != "bin/busybox" {
				fs.symlink(alias, "/bin/busybox")
			}
		}
	}
	if len(fs) < 10 {
		return nil, "", fmt.Errorf("%s --list-full listed no applets", bin)
	}
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "home", "var", "dev", "proc", "sys"} {
		fs.dir(d, 0o755)
	}
	fs.dir("root", 0o700)
	fs.dir("tmp", 0o1777)
	fs.dir("var/tmp", 0o1777)
	fs.addAccounts(
		[]account{{name: "root", id: 0, home: "/root"}, {name: "nobody", id: 65534, home: "/home"}},
		[]account{{name: "root", id: 0}, {name: "nobody", id: 65534}})
	l, err := fs.layer()
	return l, version, err
}

// busyboxVersion reads "1.35.0" from "BusyBox v1.35.0 (Debian …) multi-call binary."
func busyboxVersion(banner []byte) string {
	f := strings.Fields(string(banner))
	if len(f) < 2 || f[0] != "BusyBox" {
		return ""
	}
	return strings.TrimPrefix(f[1], "v")
}

// agnhostImage is agnhost over the busybox layer, as upstream's image has
// it: /agnhost (and /agnhost-2, for the entrypoint tests), /uploads for
// netexec, and the user and group that the supplemental groups tests expect
// in the image.
func agnhostImage(base v1.Layer, busyboxVersion, bin string, tools, files map[string]string, pause v1.Image) (v1.Image, error) {
	fs := rootfs{}
	for name, src := range files {
		if err := fs.copy(name, 0o644, src); err != nil {
			return nil, err
		}
	}
	if err := fakeRegistry(fs, pause, "pause", "testing"); err != nil {
		return nil, err
	}
	for name, src := range tools {
		if err := fs.dynamic(name, src); err != nil {
			return nil, err
		}
	}
	if err := fs.copy("agnhost", 0o755, bin); err != nil {
		return nil, err
	}
	fs.symlink("agnhost-2", "agnhost")
	fs.dir("uploads", 0o755)
	fs.dir("home/user-defined-in-image", 0o755)
	fs.addAccounts(
		[]account{{name: "root", id: 0, home: "/root"},
			{name: "user-defined-in-image", id: 1000, home: "/home/user-defined-in-image"},
			{name: "nobody", id: 65534, home: "/home"}},
		[]account{{name: "root", id: 0}, {name: "user-defined-in-image", id: 1000},
			{name: "group-defined-in-image", id: 50000, members: []string{"user-defined-in-image"}},
			{name: "nobody", id: 65534}})
	l, err := fs.layer()
	if err != nil {
		return nil, err
	}
	return newImage(imageSpec{
		layers: []layerSpec{
			{base, "busybox " + busyboxVersion + " from Debian's source package"},
			{l, "agnhost from k8s.io/kubernetes test/images/agnhost"},
		},
		config: v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, User: "0", Env: []string{defaultPath}},
	})
}

// pauseImage is the sandbox image: /pause alone, run as 65535.
func pauseImage(bin string) (v1.Image, error) {
	fs := rootfs{}
	if err := fs.copy("pause", 0o755, bin); err != nil {
		return nil, err
	}
	l, err := fs.layer()
	if err != nil {
		return nil, err
	}
	return newImage(imageSpec{
		layers: []layerSpec{{l, "pause"}},
		config: v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535", Env: []string{defaultPath}},
	})
}

// fakeRegistry lays img out under var/registry as agnhost's
// fake-registry-server serves it (name:tag), as upstream's image holds the
// pause image for the image pull tests.
func fakeRegistry(fs rootfs, img v1.Image, name, tag string) error {
	dir := "var/registry/" + name
	path := func(kind string, h v1.Hash) string {
		return fmt.Sprintf("%s/%s/%s/%s/%s/data", dir, kind, h.Algorithm, h.Hex[:2], h.Hex)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fs.file(path("manifests", digest), 0o644, raw)
	fs.file(dir+"/manifests/"+tag, 0o644, []byte(digest.String()+"\n"))
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	fs.file(path("blobs", cfgName), 0o644, cfg)
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		h, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		fs.file(path("blobs", h), 0o644, data)
	}
	return nil
}

// nonewprivsImage is upstream's nonewprivs over busybox: nnp, set-user-ID
// root, printing the effective user ID.
func nonewprivsImage(base layerSpec, nnp string) (v1.Image, error) {
	fs := rootfs{}
	if err := fs.copy("usr/local/bin/nnp", 0o4755, nnp); err != nil {
		return nil, err
	}
	l, err := fs.layer()
	if err != nil {
		return nil, err
	}
	return newImage(imageSpec{
		layers: []layerSpec{base, {l, "nnp from k8s.io/kubernetes test/images/nonewprivs"}},
		config: v1.Config{Cmd: []string{"nnp"}, User: "0", Env: []string{defaultPath}},
	})
}

// nginxImage stands in for the nginx image, which the conformance tests
// only run as a server that keeps running: agnhost serving HTTP on port 80.
func nginxImage(agnhost v1.Image) (v1.Image, error) {
	cfg, err := agnhost.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Config.Entrypoint = []string{"/agnhost", "netexec", "--http-port=80", "--udp-port=-1"}
	cfg.Config.Cmd = nil
	cfg.Config.Labels = map[string]string{"org.opencontainers.image.description": "stand-in for nginx: agnhost netexec on port 80"}
	return mutate.ConfigFile(agnhost, cfg)
}

// glibcDNSTestingImage stands in for glibc-dns-testing, whose specs run
// `hostname` and `hostname -f` in a shell: busybox, and Debian's
// hostname with glibc (found first on the PATH), which resolves the
// pod's FQDN from its /etc/hosts as nsswitch.conf says.
func glibcDNSTestingImage(base layerSpec, hostname string) (v1.Image, error) {
	fs := rootfs{}
	if err := fs.dynamic("usr/bin/hostname", hostname); err != nil {
		return nil, err
	}
	fs.file("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n"))
	l, err := fs.layer()
	if err != nil {
		return nil, err
	}
	return newImage(imageSpec{
		layers: []layerSpec{base, {l, "hostname and glibc from Debian"}},
		config: v1.Config{Cmd: []string{"sh"}, User: "0", Env: []string{defaultPath}},
	})
}
