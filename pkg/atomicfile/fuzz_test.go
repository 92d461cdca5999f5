package atomicfile

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzWrite replaces a file whose name, contents, mode and kind of
// temporary file the fuzzer chooses, twice. Each write leaves the new
// contents with the mode asked for and nothing else in the directory; and
// the temporary file of any such write, which a crash may leave behind, is
// one IsTemp recognizes.
func FuzzWrite(f *testing.F) {
	f.Add("record", []byte("first"), []byte("second, longer"), uint16(0), false)
	f.Add("state.json", []byte{}, []byte("x"), uint16(0o644), true)
	f.Add(".hidden.tmp1", []byte("a\x00b"), []byte{}, uint16(0o400), false)
	f.Add("x.tmp", []byte("1"), []byte("2"), uint16(0o7777), true)
	f.Add("..", []byte("1"), []byte("2"), uint16(0), false)
	f.Fuzz(func(t *testing.T, name string, first, second []byte, perm uint16, fixed bool) {
		if name == "" || name == "." || name == ".." || len(name) > 200 || strings.ContainsAny(name, "/\x00") {
			return // not a file name, or one too long for its temporary file
		}
		suffix := "x"
		if tmp := "." + name + TempSuffix + suffix; !IsTemp(tmp) {
			t.Errorf("IsTemp(%q), the temporary file of a write to %q, is false", tmp, name)
		}
		dir := t.TempDir()
		target := filepath.Join(dir, name)
		opts := Options{Perm: os.FileMode(perm) & os.ModePerm, FixedTemp: fixed}
		want := opts.Perm
		if want == 0 {
			want = 0o600
		}
		for _, data := range [][]byte{first, second} {
			if err := Write(target, data, opts); err != nil {
				t.Fatalf("write %q: %v", name, err)
			}
			got, err := os.ReadFile(target)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("after writing %q, %q holds %q, %v", data, name, got, err)
			}
			if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != want {
				t.Fatalf("%q has mode %v, %v; want %v", name, fi.Mode().Perm(), err, want)
			}
			entries, err := os.ReadDir(dir)
			if err != nil || len(entries) != 1 || entries[0].Name() != name {
				t.Fatalf("after a write to %q the directory holds %v, %v", name, entries, err)
			}
		}
	})
}
