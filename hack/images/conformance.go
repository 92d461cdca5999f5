package main

import (
	"fmt"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The images of Kubernetes' conformance specs beyond the node's (e2e.test
// of k8s.io/kubernetes v1.36.3 names them in test/utils/image/manifest.go).
// What each holds is what those specs run in it.
var (
	// glibc-dns-testing: the DNS specs' second prober (test/e2e/network
	// dns.go: sh, seq, dig +search over UDP and TCP, getent hosts) and the
	// hostnameOverride specs (hostname, hostname -f).
	glibcDNSTestingRefs = []string{"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"}
	// kitten and nautilus: kubectl's Update Demo reads data.json through
	// the pod proxy on port 80; the ImageVolume spec reads kitten's
	// data.json and etc/os-release from the volume.
	kittenRefs   = []string{"registry.k8s.io/e2e-test-images/kitten:1.8"}
	nautilusRefs = []string{"registry.k8s.io/e2e-test-images/nautilus:1.8"}
	// sample-apiserver and etcd: the Aggregator spec's deployment runs the
	// sample-apiserver by its entrypoint (with --etcd-servers and TLS
	// flags) beside /usr/local/bin/etcd on loopback.
	sampleAPIServerRefs = []string{"registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2"}
	etcdRefs            = []string{"registry.k8s.io/etcd:3.6.8-0"}
)

// dnsCommands are what the DNS specs run in agnhost and glibc-dns-testing
// that busybox does not give, and glibcCommands what the hostnameOverride
// specs run in glibc-dns-testing, by the paths they have in the images.
var (
	dnsCommands   = []string{"usr/bin/dig", "usr/bin/getent"}
	glibcCommands = []string{"bin/hostname"}
)

// conformanceImages are the images above, over the busybox layer;
// glibc-dns-testing also over the DNS tools layer, kitten and nautilus
// over agnhost's layers (as upstream builds them).
func conformanceImages(base, dns, agnhost layerSpec, in inputs) ([]imageSet, error) {
	glibc, err := glibcDNSTestingImage(base, dns, in.glibcTools)
	if err != nil {
		return nil, fmt.Errorf("build glibc-dns-testing: %w", err)
	}
	kitten, err := updateDemoImage([]layerSpec{base, dns, agnhost}, "kitten", in.kitten)
	if err != nil {
		return nil, fmt.Errorf("build kitten: %w", err)
	}
	nautilus, err := updateDemoImage([]layerSpec{base, dns, agnhost}, "nautilus", in.nautilus)
	if err != nil {
		return nil, fmt.Errorf("build nautilus: %w", err)
	}
	sampleAPIServer, err := binaryImage(base, "sample-apiserver", 0o755, in.sampleAPIServer,
		"k8s.io/sample-apiserver", v1.Config{Entrypoint: []string{"/sample-apiserver"}})
	if err != nil {
		return nil, fmt.Errorf("build sample-apiserver: %w", err)
	}
	etcd, err := binaryImage(base, "usr/local/bin/etcd", 0o755, in.etcd,
		"etcd from go.etcd.io/etcd/server/v3", v1.Config{Cmd: []string{"/usr/local/bin/etcd"}})
	if err != nil {
		return nil, fmt.Errorf("build etcd: %w", err)
	}
	return []imageSet{{glibc, glibcDNSTestingRefs}, {kitten, kittenRefs}, {nautilus, nautilusRefs},
		{sampleAPIServer, sampleAPIServerRefs}, {etcd, etcdRefs}}, nil
}

// dnsToolsLayer is Debian's DNS tools (the specs run dig and getent),
// each with the shared libraries it loads, and an nsswitch.conf that has
// glibc look names up in /etc/hosts before DNS, as Debian's does (glibc's
// default without one is DNS first). agnhost and glibc-dns-testing share
// it: its libraries are most of either image.
func dnsToolsLayer(tools map[string]string) (layerSpec, error) {
	fs, err := toolsRoot(tools, dnsCommands)
	if err != nil {
		return layerSpec{}, err
	}
	fs.file("etc/nsswitch.conf", 0o644, []byte(nsswitchConf))
	l, err := fs.layer()
	if err != nil {
		return layerSpec{}, err
	}
	return layerSpec{l, "Debian's DNS tools with their shared libraries"}, nil
}

const nsswitchConf = `passwd: files
group: files
hosts: files dns
`

// glibcDNSTestingImage is busybox (the shell and seq of the probes) with
// the DNS tools layer and Debian's hostname over it, in place of
// busybox's: hostname -f, which the hostnameOverride specs check, resolves
// through glibc.
func glibcDNSTestingImage(base, dns layerSpec, tools map[string]string) (v1.Image, error) {
	fs, err := toolsRoot(tools, glibcCommands)
	if err != nil {
		return nil, err
	}
	l, err := fs.layer()
	if err != nil {
		return nil, err
	}
	return newImage(imageSpec{
		layers: []layerSpec{base, dns, {l, "Debian's hostname with its shared libraries"}},
		config: v1.Config{Cmd: []string{"sh"}, User: "0", Env: []string{defaultPath}},
	})
}

// toolsRoot is a root filesystem of the host tools (image path → host
// path), each with the shared libraries it loads; it fails unless every
// one of the commands the specs run is there.
func toolsRoot(tools map[string]string, need []string) (rootfs, error) {
	for _, name := range need {
		if tools[name] == "" {
			return nil, fmt.Errorf("no /%s (a tool %s=HOST-PATH): the conformance specs run it", name, name)
		}
	}
	fs := rootfs{}
	for name, src := range tools {
		if err := fs.dynamic(name, src); err != nil {
			return nil, err
		}
	}
	return fs, nil
}

// updateDemoImage is kitten or nautilus as upstream makes them: agnhost's
// test-webserver serving the root on port 80 (over agnhost's layers),
// where /NAME.jpg is the picture and /data.json names it.
func updateDemoImage(agnhost []layerSpec, name, picture string) (v1.Image, error) {
	fs := rootfs{}
	if err := fs.copy(name+".jpg", 0o644, picture); err != nil {
		return nil, err
	}
	fs.file("data.json", 0o644, fmt.Appendf(nil, "{\n  \"image\": %q\n}\n", name+".jpg"))
	l, err := fs.layer()
	if err != nil {
		return nil, err
	}
	cfg := agnhostConfig()
	cfg.Cmd = []string{"test-webserver"}
	return newImage(imageSpec{
		layers: append(slices.Clip(agnhost), layerSpec{l, name + ".jpg and data.json"}),
		config: cfg,
	})
}
