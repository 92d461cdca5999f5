package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is the time of every file and image, so that the same inputs always
// give the same digests.
var epoch = time.Unix(0, 0).UTC()

// rootfs is the content of one layer by path (relative, no leading slash):
// directories, regular files and symlinks, all owned by root.
type rootfs map[string]entry

type entry struct {
	hdr  tar.Header
	data []byte // a regular file's content, unless src is set
	src  string // the file to copy a regular file's content from
}

// dir adds a directory, and its parents.
func (fs rootfs) dir(name string, mode int64) {
	name = clean(name)
	fs.parents(name)
	fs[name] = entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode}}
}

// file adds a regular file with the given content.
func (fs rootfs) file(name string, mode int64, data []byte) {
	name = clean(name)
	fs.parents(name)
	fs[name] = entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data: data}
}

// copy adds a regular file whose content is the file src.
func (fs rootfs) copy(name string, mode int64, src string) error {
	info, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("add /%s: %w", name, err)
	}
	name = clean(name)
	fs.parents(name)
	fs[name] = entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: info.Size()}, src: src}
	return nil
}

// symlink adds a symbolic link to target.
func (fs rootfs) symlink(name, target string) {
	name = clean(name)
	fs.parents(name)
	fs[name] = entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

// parents adds the missing directories above name.
func (fs rootfs) parents(name string) {
	for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
		if _, ok := fs[d]; !ok {
			fs[d] = entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}}
		}
	}
}

func clean(name string) string { return strings.TrimPrefix(path.Clean("/"+name), "/") }

// layer is the rootfs as an OCI layer: a tar archive in path order (a
// directory before what it holds), gzipped once.
func (fs rootfs) layer() (v1.Layer, error) {
	names := make([]string, 0, len(fs))
	for name := range fs {
		names = append(names, name)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range names {
		e := fs[name]
		hdr := e.hdr
		hdr.ModTime, hdr.Format = epoch, tar.FormatPAX
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, fmt.Errorf("layer: /%s: %w", name, err)
		}
		if err := e.writeContent(tw); err != nil {
			return nil, fmt.Errorf("layer: /%s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

func (e entry) writeContent(w io.Writer) error {
	if e.hdr.Typeflag != tar.TypeReg {
		return nil
	}
	if e.src == "" {
		_, err := w.Write(e.data)
		return err
	}
	f, err := os.Open(e.src)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, e.hdr.Size))
	if err != nil {
		return err
	}
	if n != e.hdr.Size {
		return fmt.Errorf("%s changed while being read", e.src)
	}
	return nil
}

// account is a user or group of /etc/passwd and /etc/group.
type account struct {
	name    string
	id      int
	home    string   // users only
	members []string // groups only: users whose supplementary group it is
}

// addAccounts writes /etc/passwd and /etc/group: each user with the group of
// the same id, and each group.
func (fs rootfs) addAccounts(users, groups []account) {
	var passwd, group strings.Builder
	for _, u := range users {
		shell := "/bin/sh"
		if u.id != 0 {
			shell = "/bin/false"
		}
		fmt.Fprintf(&passwd, "%s:x:%d:%d:%s:%s:%s\n", u.name, u.id, u.id, u.name, u.home, shell)
	}
	for _, g := range groups {
		fmt.Fprintf(&group, "%s:x:%d:%s\n", g.name, g.id, strings.Join(g.members, ","))
	}
	fs.file("etc/passwd", 0o644, []byte(passwd.String()))
	fs.file("etc/group", 0o644, []byte(group.String()))
}

// checkStatic fails unless the file is a statically linked executable for
// the architecture the images are for: a container has no libc to load.
// dynamic adds a dynamically linked host executable at name, and every
// shared library it loads (as ldd resolves them on this host) at its host
// path, so it runs in the image as on the host.
func (fs rootfs) dynamic(name, src string) error {
	out, err := exec.Command("ldd", src).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w", src, err)
	}
	if err := fs.copy(name, 0o755, src); err != nil {
		return err
	}
	for _, line := range strings.Split(string(out), "\n") {
		// "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x…)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x…)"; the vDSO has no path.
		f := strings.Fields(line)
		var lib string
		switch {
		case len(f) >= 3 && f[1] == "=>":
			lib = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			lib = f[0]
		}
		if !strings.HasPrefix(lib, "/") {
			continue
		}
		if err := fs.copy(strings.TrimPrefix(lib, "/"), 0o755, lib); err != nil {
			return err
		}
	}
	return nil
}

func checkStatic(file string) error {
	f, err := elf.Open(file)
	if err != nil {
		return fmt.Errorf("%s: not an ELF executable: %w", file, err)
	}
	defer f.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386,
		"arm": elf.EM_ARM, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV}[runtime.GOARCH]
	if f.Machine != want {
		return fmt.Errorf("%s: built for %v, not %s", file, f.Machine, runtime.GOARCH)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s: dynamically linked, the image needs a static binary", file)
		}
	}
	return nil
}
