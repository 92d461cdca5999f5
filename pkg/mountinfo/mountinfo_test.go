package mountinfo

import (
	"runtime"
	"slices"
	"testing"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:             "/plain",
		`/with\040space`:     "/with space",
		`/back\134slash`:     `/back\slash`,
		`/short\04`:          `/short\04`,
		`/not\999octal\011x`: "/not\\999octal\tx",
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadFindsTheRoot(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the mount table is Linux's")
	}
	mounts, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(mounts, func(m Mount) bool { return m.Point == "/" && m.Options != "" }) {
		t.Errorf("no mount at / with options among %d mounts", len(mounts))
	}
}
