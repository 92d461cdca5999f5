package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// nonrootID is the user and group the nodelet image runs as (the usual
// "nonroot" of distroless images). The sim provider needs no privilege; a
// process or cri node runs nodelet on the host, not from this image.
const nonrootID = 65532

// nodeletSpec is what the nodelet image is made of.
type nodeletSpec struct {
	bin      string // static nodelet binary
	shim     string // static nodelet-shim binary; empty: none
	version  string // org.opencontainers.image.version
	revision string // org.opencontainers.image.revision (the commit); empty: none
}

// nodeletImage is nodelet's own image, one layer: /nodelet (and
// /nodelet-shim), an /etc/passwd and /etc/group naming root and nonroot,
// /var/lib/nodelet (the default root dir) and /tmp writable by nonroot;
// entrypoint /nodelet, user nonroot, the OCI labels, every time at epoch.
func nodeletImage(spec nodeletSpec) (v1.Image, error) {
	bins := []string{spec.bin}
	if spec.shim != "" {
		bins = append(bins, spec.shim)
	}
	for _, bin := range bins {
		if err := checkStatic(bin); err != nil {
			return nil, err
		}
	}
	fs := rootfs{}
	if err := fs.copy("nodelet", 0o755, spec.bin); err != nil {
		return nil, err
	}
	if spec.shim != "" {
		if err := fs.copy("nodelet-shim", 0o755, spec.shim); err != nil {
			return nil, err
		}
	}
	fs.addAccounts(
		[]account{{name: "root", id: 0, home: "/root"}, {name: "nonroot", id: nonrootID, home: "/home/nonroot"}},
		[]account{{name: "root", id: 0}, {name: "nonroot", id: nonrootID}})
	fs.dir("tmp", 0o1777)
	for _, d := range []string{"home/nonroot", "var/lib/nodelet"} {
		fs.dir(d, 0o700)
		e := fs[d]
		e.hdr.Uid, e.hdr.Gid = nonrootID, nonrootID
		fs[d] = e
	}
	l, err := fs.layer()
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "nodelet",
		"org.opencontainers.image.description": "nodelet, a Kubernetes node agent: one Node or thousands of simulated ones",
		"org.opencontainers.image.source":      "https://github.com/nodelet/nodelet",
		"org.opencontainers.image.version":     spec.version,
	}
	if spec.revision != "" {
		labels["org.opencontainers.image.revision"] = spec.revision
	}
	return newImage(imageSpec{
		layers: []layerSpec{{l, "nodelet " + spec.version}},
		config: v1.Config{
			Entrypoint: []string{"/nodelet"},
			User:       fmt.Sprintf("%d:%d", nonrootID, nonrootID),
			Env:        []string{defaultPath},
			Labels:     labels,
		},
	})
}

// writeNodelet writes the nodelet image, named ref, as the only image of
// a new OCI layout at dir (replaced as a whole).
func writeNodelet(dir, ref string, spec nodeletSpec) ([]built, error) {
	if _, err := name.NewTag(ref, name.StrictValidation); err != nil {
		return nil, fmt.Errorf("nodelet: --ref: %w", err)
	}
	img, err := nodeletImage(spec)
	if err != nil {
		return nil, fmt.Errorf("nodelet: %w", err)
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("nodelet: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(tmp), 0o755); err != nil {
		return nil, fmt.Errorf("nodelet: %w", err)
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("nodelet: write layout: %w", err)
	}
	out, err := appendImage(p, img, []string{ref})
	if err != nil {
		return nil, fmt.Errorf("nodelet: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("nodelet: replace %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("nodelet: replace %s: %w", dir, err)
	}
	return out, nil
}

// push copies the image of the layout at dir named ref (or its only image
// when ref is empty) to the registry reference to, with the credentials of
// the Docker config (~/.docker/config.json, as docker login writes them).
// A registry on loopback is spoken to over plain HTTP, as insecure is for
// others.
func push(ctx context.Context, dir, ref, to string, insecure bool) (built, error) {
	opts := []name.Option{name.StrictValidation}
	if insecure {
		opts = append(opts, name.Insecure)
	}
	dst, err := name.ParseReference(to, opts...)
	if err != nil {
		return built{}, fmt.Errorf("push: --to: %w", err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return built{}, fmt.Errorf("push: read image layout: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return built{}, fmt.Errorf("push: read image layout: %w", err)
	}
	var found []v1.Descriptor
	for _, d := range im.Manifests {
		if full := d.Annotations[refAnnotation]; full != "" && (ref == "" || full == ref) {
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 0 && ref != "":
		return built{}, fmt.Errorf("push: no image %s in %s", ref, dir)
	case len(found) == 0:
		return built{}, fmt.Errorf("push: no image in %s", dir)
	case len(found) > 1 && ref == "":
		var names []string
		for _, d := range found {
			names = append(names, d.Annotations[refAnnotation])
		}
		return built{}, fmt.Errorf("push: %s holds %d images (%s): name one with --ref", dir, len(found), strings.Join(names, ", "))
	}
	img, err := idx.Image(found[0].Digest)
	if err != nil {
		return built{}, fmt.Errorf("push: %w", err)
	}
	if err := remote.Write(dst, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return built{}, fmt.Errorf("push %s: %w", dst, err)
	}
	size, err := imageSize(img)
	if err != nil {
		return built{}, fmt.Errorf("push: %w", err)
	}
	return built{ref: dst.String(), digest: found[0].Digest, size: size}, nil
}
