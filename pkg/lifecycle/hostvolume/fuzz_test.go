package hostvolume

import (
	"bytes"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/fuzzcheck"
)

// FuzzContainerMounts resolves a volumeMount whose subPath, subPathExpr
// (with one variable) and mountPath the fuzzer chooses, in a volume a
// container has filled with symbolic links out of it, back into it, to
// files, in loops and to nowhere. A mount that resolves has a source
// inside the volume, with nothing left to follow out of it; nothing is
// ever created outside the volume.
func FuzzContainerMounts(f *testing.F) {
	top := f.TempDir()
	outside := filepath.Join(top, "outside")
	volume := filepath.Join(top, "pods", "uid-1", "volumes", "scratch")
	for _, dir := range []string{outside, filepath.Join(volume, "real", "sub")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(volume, "file"), []byte("x"), 0o644); err != nil {
		f.Fatal(err)
	}
	for name, target := range map[string]string{
		"abs-out":     outside,
		"rel-out":     "../../../../outside",
		"in":          "real",
		"abs-in":      filepath.Join(volume, "real"),
		"real/deeper": outside,
		"real/up":     "..",
		"real/up2":    "../..",
		"loop":        "loop",
		"dangling":    "nothing/here",
		"to-file":     "file",
		"chain":       "in/up2",
	} {
		if err := os.Symlink(target, filepath.Join(volume, name)); err != nil {
			f.Fatal(err)
		}
	}
	before := tree(f, top)

	for _, seed := range [][4]string{
		{"real/sub", "", "", "/data"},
		{"", "$(V)/x", "real", "/data"},
		{"", "$(V)", "../outside", "/data"},
		{"in/sub", "", "", "/d"},
		{"abs-out", "", "", "/d"},
		{"chain/outside", "", "", "/d"},
		{"real/up/real/up2", "", "", "/d"},
		{"new/dirs/made", "", "", "/d"},
		{"to-file/x", "", "", "/d"},
		{"loop", "", "", "/d"},
		{"/etc", "", "", "/d"},
		{"real/./sub/", "", "", "d"},
		{"", "$$(V)", "", "/d"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, subPath, subPathExpr, value, mountPath string) {
		defer restore(t, top, before)
		pod := &corev1.Pod{Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		}}
		c := &corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: mountPath, SubPath: subPath, SubPathExpr: subPathExpr}}}
		mounts, err := ContainerMounts(pod, c, map[string]string{"scratch": volume}, map[string]string{"V": value})
		if err != nil {
			return
		}
		m := mounts[0]
		if !within(volume, m.Source) {
			t.Fatalf("subPath %q, subPathExpr %q (V=%q) resolved to %s, outside the volume", subPath, subPathExpr, value, m.Source)
		}
		if real, err := filepath.EvalSymlinks(m.Source); err != nil || !within(volume, real) {
			t.Fatalf("subPath %q, subPathExpr %q (V=%q) resolved to %s, which leads to %s (%v)", subPath, subPathExpr, value, m.Source, real, err)
		}
		if m.Destination != mountPath || !path.IsAbs(m.Destination) {
			t.Fatalf("mountPath %q became destination %q", mountPath, m.Destination)
		}
		for p := range tree(t, top) {
			if _, ok := before[p]; !ok && !within(volume, filepath.Join(top, p)) {
				t.Fatalf("resolving subPath %q, subPathExpr %q (V=%q) created %s, outside the volume", subPath, subPathExpr, value, p)
			}
		}
	})
}

// tree maps every path under root (not following links) to its type and,
// for links, target.
func tree(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = d.Type().String()
		if d.Type()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			out[rel] += " " + target
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzImageVolumeMount resolves a volumeMount of an image volume whose
// subPath, subPathExpr (with one variable) and mountPath the fuzzer
// chooses. A mount that resolves is read-only, has no host path, and its
// image sub-path stays relative with no ".." element: the runtime resolves
// it in the image, and nothing the pod writes may point it elsewhere.
func FuzzImageVolumeMount(f *testing.F) {
	for _, seed := range [][4]string{
		{"etc", "", "", "/vol"},
		{"", "usr/$(V)", "bin", "/vol"},
		{"", "$(V)", "../..", "/vol"},
		{"a/../../b", "", "", "/vol"},
		{"/etc", "", "", "/vol"},
		{"./etc/", "", "", "vol"},
		{"", "$$(V)", "", "/vol"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, subPath, subPathExpr, value, mountPath string) {
		pod := &corev1.Pod{Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "busybox"}}}},
		}}
		c := &corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "tools", MountPath: mountPath, SubPath: subPath, SubPathExpr: subPathExpr}}}
		mounts, err := ContainerMounts(pod, c, map[string]string{}, map[string]string{"V": value})
		if err != nil {
			return
		}
		m := mounts[0]
		if m.Source != "" || !m.ReadOnly || m.Image == nil || m.Destination != mountPath || !path.IsAbs(m.Destination) {
			t.Fatalf("mount %+v of an image volume at %q", m, mountPath)
		}
		if filepath.IsAbs(m.ImageSubPath) || slices.Contains(strings.Split(filepath.ToSlash(m.ImageSubPath), "/"), "..") {
			t.Fatalf("subPath %q, subPathExpr %q (V=%q) became image sub-path %q", subPath, subPathExpr, value, m.ImageSubPath)
		}
	})
}

// restore removes what was added under root since before was taken.
func restore(t *testing.T, root string, before map[string]string) {
	added := tree(t, root)
	paths := make([]string, 0, len(added))
	for p := range added {
		if _, ok := before[p]; !ok {
			paths = append(paths, p)
		}
	}
	// Deepest first.
	slices.SortFunc(paths, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, p := range paths {
		if err := os.Remove(filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzVolumeFiles writes the files of a configMap volume whose keys or
// items' paths, contents and modes the fuzzer chooses, and then a second
// and third version of them. After every write that succeeds, each file
// reads back with its content through the volume, from inside the volume,
// and the volume shows exactly the files given; nothing is ever written
// outside the volume.
func FuzzVolumeFiles(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01\x02\x03a/b\x01x\x01\x01a\x01y"))
	f.Add([]byte("\x03\x01\x01\x05./a/b\x02xy\x02\x03a/c\x01z"))
	f.Add([]byte("\x02\x00\x02\x04a//b\x01x\x03..a\x01y\x01\x01\x02./\x01z"))
	f.Add([]byte("\x01\x01\x02\x06a/./..\x01x\x03/ab\x01y"))
	top := f.TempDir()
	dir := filepath.Join(top, "volume")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		c := fuzzcheck.NewChoices(data)
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for version := c.Intn(3) + 1; version > 0; version-- {
			now = now.Add(time.Second)
			objData := map[string][]byte{}
			var items []corev1.KeyToPath
			withItems := c.Bool()
			for n := c.Intn(5) + 1; n > 0; n-- {
				p := c.Word("ab./", 8)
				if c.Bool() {
					p = c.String(12)
				}
				content := []byte(c.Word("xyz", 4))
				if withItems {
					key := strconv.Itoa(len(items))
					objData[key] = content
					modes := []int32{0o644, 0o400, 0o777, 0o1777}
					items = append(items, corev1.KeyToPath{Key: key, Path: p, Mode: ptr(modes[c.Intn(len(modes))])})
				} else {
					objData[p] = content
				}
			}
			files := map[string]file{}
			if err := keyFiles("configmap", "ns", "cfg", objData, items, false, defaultFileMode, files); err != nil {
				continue
			}
			if _, err := writeAtomic(dir, files, now); err != nil {
				continue
			}
			checkVolume(t, dir, files)
			if entries, err := os.ReadDir(top); err != nil || len(entries) != 1 {
				t.Fatalf("beside the volume: %v, %v", entries, err)
			}
		}
	})
}

// checkVolume fails t unless dir shows exactly files, each with its
// content, and every visible file resolves inside dir.
func checkVolume(t *testing.T, dir string, files map[string]file) {
	t.Helper()
	clean := map[string][]string{} // clean path → the paths given for it
	for p := range files {
		clean[path.Clean(p)] = append(clean[path.Clean(p)], p)
	}
	for p, f := range files {
		if len(clean[path.Clean(p)]) > 1 {
			continue // which one wins is not said
		}
		full := filepath.Join(dir, p)
		got, err := os.ReadFile(full)
		if err != nil || !bytes.Equal(got, f.data) {
			t.Fatalf("file %q of %q reads %q, %v; want %q", p, keys(files), got, err, f.data)
		}
		if real, err := filepath.EvalSymlinks(full); err != nil || !within(dir, real) {
			t.Fatalf("file %q resolves to %s, %v: outside the volume", p, real, err)
		}
	}
	// What a container sees: the names not starting with "..".
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		real, err := filepath.EvalSymlinks(filepath.Join(dir, e.Name()))
		if err != nil || !within(dir, real) {
			t.Fatalf("the volume shows %s, which resolves to %s, %v", e.Name(), real, err)
		}
		err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(real, p)
			shown := path.Join(e.Name(), filepath.ToSlash(rel))
			if _, ok := clean[shown]; !ok {
				t.Errorf("the volume shows %s, not one of %q", shown, keys(files))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", e.Name(), err)
		}
	}
}

func keys(files map[string]file) []string {
	out := make([]string, 0, len(files))
	for p := range files {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// FuzzTmpfsOptions builds the tmpfs options of a memory emptyDir whose
// sizeLimit the fuzzer writes. The options are the mode and, for a
// positive limit, a positive size never smaller than the limit (larger
// than any tmpfs when the limit is), and nothing else; building them takes
// no time, whatever the exponent.
//
// Limits with an exponent of more than four digits are left out:
// apimachinery's ParseQuantity itself can take unbounded time on some
// (an exponent past an int32, a value below 1n with a large negative
// exponent), before any of nodelet's code runs.
func FuzzTmpfsOptions(f *testing.F) {
	for _, seed := range []string{"", "0", "1", "64Mi", "1.5Gi", "500m", "1e3", "8Ei", "-1Gi", "9223372036854775807", "1E9999"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, limit string) {
		if _, exp, ok := strings.Cut(strings.ToLower(limit), "e"); ok && len(strings.TrimLeft(exp, "+-")) > 4 {
			return
		}
		src := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}
		if limit != "" {
			q, err := resource.ParseQuantity(limit)
			if err != nil {
				return
			}
			src.SizeLimit = &q
		}
		start := time.Now()
		opts := tmpfsOptions(src)
		if d := time.Since(start); d > time.Second {
			t.Errorf("limit %q took %v", limit, d)
		}
		rest, ok := strings.CutPrefix(opts, "mode=1777")
		if !ok {
			t.Fatalf("options %q do not start with the mode", opts)
		}
		if src.SizeLimit == nil || src.SizeLimit.Sign() <= 0 {
			if rest != "" {
				t.Fatalf("limit %q gives options %q, want none but the mode", limit, opts)
			}
			return
		}
		size, err := strconv.ParseInt(strings.TrimPrefix(rest, ",size="), 10, 64)
		if !strings.HasPrefix(rest, ",size=") || err != nil || size <= 0 {
			t.Fatalf("limit %q gives options %q, want a positive size", limit, opts)
		}
		if src.SizeLimit.Cmp(*resource.NewQuantity(size, resource.BinarySI)) > 0 && size != math.MaxInt64 {
			t.Fatalf("limit %q gives a tmpfs of %d bytes, less than the limit", limit, size)
		}
	})
}

// TestTmpfsOptionsHugeLimit: limits with exponents FuzzTmpfsOptions leaves
// out, which ParseQuantity reads at once, give the largest size at once
// (comparing one exactly with an int64 computed 10^28028080 for minutes).
func TestTmpfsOptionsHugeLimit(t *testing.T) {
	for _, limit := range []string{"1E28028080", "1E2147483647", "9.5E99999"} {
		q := resource.MustParse(limit)
		start := time.Now()
		opts := tmpfsOptions(&corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &q})
		if want := "mode=1777,size=" + strconv.FormatInt(math.MaxInt64, 10); opts != want || time.Since(start) > time.Second {
			t.Errorf("limit %s: options %q after %v, want %q at once", limit, opts, time.Since(start), want)
		}
	}
}
