// Command images builds the container images that nodelet's cri tests run
// and serves them as an OCI distribution registry on loopback, since no
// registry outside is reachable from where the tests run.
//
//	images build --dir DIR [--busybox PATH] [--agnhost PATH] [--pause PATH] [--nnp PATH] [--hostname PATH] [--tool IMAGE-PATH=HOST-PATH]... [--file IMAGE-PATH=HOST-PATH]...
//	images serve [--dir DIR] [--writable] [--listen 127.0.0.1:PORT] [--auth USER:PASSWORD] [--ready-file FILE]
//	images nodelet --dir DIR --nodelet PATH [--shim PATH] --ref REF [--revision COMMIT]
//	images push --dir DIR [--ref REF] --to REGISTRY/REPOSITORY:TAG [--insecure]
//
// build writes an OCI image layout at DIR, each image named by its full
// reference in the io.containerd.image.name annotation of its index entry
// (and its tag in org.opencontainers.image.ref.name). serve serves every image
// of DIR under its repository path without the registry host, so a runtime
// that mirrors registry.k8s.io and docker.io to it finds them; repositories
// under private/ need basic auth; with --writable it also takes pushes,
// kept in memory (the layout on disk is never written), and needs no DIR.
// nodelet writes nodelet's own image (a static nodelet binary) as the only
// image of the layout DIR; push copies an image of a layout to a registry
// with go-containerregistry, no Docker daemon. This module owns hack/images
// and nothing else: it never writes outside DIR and the ready file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "images: %v\n", err)
		os.Exit(1)
	}
}

const usage = `usage:
  images build --dir DIR [--busybox PATH] [--agnhost PATH] [--pause PATH] [--nnp PATH] [--hostname PATH] [--tool IMAGE-PATH=HOST-PATH]... [--file IMAGE-PATH=HOST-PATH]...
  images serve [--dir DIR] [--writable] [--listen ADDR] [--auth USER:PASSWORD] [--ready-file FILE]
  images nodelet --dir DIR --nodelet PATH [--shim PATH] --ref REF [--revision COMMIT]
  images push --dir DIR [--ref REF] --to REGISTRY/REPOSITORY:TAG [--insecure]`

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "build":
		return runBuild(ctx, args[1:])
	case "serve":
		return runServe(ctx, args[1:])
	case "nodelet":
		return runNodelet(args[1:])
	case "push":
		return runPush(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Println(usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

func runBuild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	var in inputs
	dir := fs.String("dir", "", "directory of the OCI image layout to write (replaced as a whole)")
	fs.StringVar(&in.busybox, "busybox", besideSelf("busybox"), "static busybox binary (make bin/busybox)")
	fs.StringVar(&in.agnhost, "agnhost", besideSelf("agnhost"), "static agnhost binary")
	fs.StringVar(&in.pause, "pause", besideSelf("pause"), "static pause binary")
	fs.StringVar(&in.nnp, "nnp", besideSelf("nnp"), "static nnp binary (k8s.io/kubernetes test/images/nonewprivs)")
	fs.StringVar(&in.hostname, "hostname", "/bin/hostname", "a hostname(1) resolving through glibc, with its shared libraries, for glibc-dns-testing")
	in.tools, in.files = map[string]string{}, map[string]string{}
	fs.Func("file", "IMAGE-PATH=HOST-PATH: a host file added to agnhost (repeatable)", pathPair(in.files))
	fs.Func("tool", "IMAGE-PATH=HOST-PATH: a host executable added to agnhost with its shared libraries (repeatable)", pathPair(in.tools))
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() > 0 {
		return errors.New("build: --dir is required and takes no arguments")
	}
	built, err := build(ctx, *dir, in)
	if err != nil {
		return err
	}
	for _, b := range built {
		fmt.Printf("%s %s %d bytes\n", b.ref, b.digest, b.size)
	}
	return nil
}

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cfg serveConfig
	fs.StringVar(&cfg.dir, "dir", "", "OCI image layout written by build (optional with --writable)")
	fs.BoolVar(&cfg.writable, "writable", false, "accept pushes too, kept in memory until the registry stops")
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:5000", "address to listen on (port 0: any free port)")
	auth := fs.String("auth", "", "USER:PASSWORD that the repositories under private/ require")
	fs.StringVar(&cfg.readyFile, "ready-file", "", "file to write the listen address to once serving")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (cfg.dir == "" && !cfg.writable) || fs.NArg() > 0 {
		return errors.New("serve: --dir is required (unless --writable) and takes no arguments")
	}
	if *auth != "" {
		var err error
		if cfg.user, cfg.password, err = splitAuth(*auth); err != nil {
			return err
		}
	}
	return serve(ctx, cfg, os.Stderr)
}

func runNodelet(args []string) error {
	fs := flag.NewFlagSet("nodelet", flag.ContinueOnError)
	var spec nodeletSpec
	dir := fs.String("dir", "", "directory of the OCI image layout to write (replaced as a whole)")
	ref := fs.String("ref", "", "the image's name, nodelet.io/nodelet:<version>; the tag is its version label")
	fs.StringVar(&spec.bin, "nodelet", "", "static nodelet binary (CGO_ENABLED=0)")
	fs.StringVar(&spec.shim, "shim", "", "static nodelet-shim binary to add (optional)")
	fs.StringVar(&spec.revision, "revision", "", "the commit it was built from (org.opencontainers.image.revision)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *ref == "" || spec.bin == "" || fs.NArg() > 0 {
		return errors.New("nodelet: --dir, --ref and --nodelet are required, and it takes no arguments")
	}
	spec.version = (*ref)[strings.LastIndex(*ref, ":")+1:]
	built, err := writeNodelet(*dir, *ref, spec)
	if err != nil {
		return err
	}
	for _, b := range built {
		fmt.Printf("%s %s %d bytes\n", b.ref, b.digest, b.size)
	}
	return nil
}

func runPush(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	dir := fs.String("dir", "", "OCI image layout holding the image")
	ref := fs.String("ref", "", "the image of the layout to push (default: its only image)")
	to := fs.String("to", "", "where to push it: REGISTRY/REPOSITORY:TAG")
	insecure := fs.Bool("insecure", false, "speak plain HTTP to the registry (always so on loopback)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *to == "" || fs.NArg() > 0 {
		return errors.New("push: --dir and --to are required, and it takes no arguments")
	}
	b, err := push(ctx, *dir, *ref, *to, *insecure)
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %d bytes\n", b.ref, b.digest, b.size)
	return nil
}

// besideSelf is the path of name in the directory of this executable, where
// make puts the binaries that the images are made of.
func besideSelf(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return name
	}
	return filepath.Join(filepath.Dir(exe), name)
}

// pathPair parses a flag's IMAGE-PATH=HOST-PATH into m.
func pathPair(m map[string]string) func(string) error {
	return func(v string) error {
		name, src, ok := strings.Cut(v, "=")
		if !ok || name == "" || src == "" {
			return fmt.Errorf("want IMAGE-PATH=HOST-PATH, got %q", v)
		}
		m[name] = src
		return nil
	}
}
