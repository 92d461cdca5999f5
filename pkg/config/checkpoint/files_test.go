package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnvelope(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "env")
	in := Record{Source: &srcA, Time: t0}
	data, err := encodeEnvelope(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var out Record
	if err := readEnvelope(path, &out); err != nil || *out.Source != srcA || !out.Time.Equal(t0) {
		t.Fatalf("round trip = %+v, %v", out, err)
	}

	for name, tamper := range map[string]func(string) string{
		// Still valid JSON, still the same meaning, other bytes.
		"whitespace in the payload": func(s string) string { return strings.Replace(s, `"payload":{`, `"payload":{ `, 1) },
		"changed value":             func(s string) string { return strings.Replace(s, `"100"`, `"999"`, 1) },
		"no checksum":               func(s string) string { return strings.Replace(s, `"checksum"`, `"x"`, 1) },
		"no payload":                func(s string) string { return `{"checksum":"sha256:00"}` },
		"not JSON":                  func(string) string { return "\x00\x01garbage" },
		"null":                      func(string) string { return "null" },
		"whitespace only":           func(string) string { return " \n\t" },
	} {
		if err := os.WriteFile(path, []byte(tamper(string(data))), 0o600); err != nil {
			t.Fatal(err)
		}
		var r Record
		if err := readEnvelope(path, &r); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want ErrCorrupt naming the file", name, err)
		}
	}

	// A payload with a field the store does not know is not trusted.
	odd, _ := encodeEnvelope(map[string]any{"source": nil, "time": t0, "unknown": 1})
	if err := os.WriteFile(path, odd, 0o600); err != nil {
		t.Fatal(err)
	}
	var r Record
	if err := readEnvelope(path, &r); !errors.Is(err, ErrCorrupt) {
		t.Errorf("unknown payload field: %v, want ErrCorrupt", err)
	}

	// Too large to be ours.
	if err := os.WriteFile(path, make([]byte, maxEnvelope+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := readEnvelope(path, &r); !errors.Is(err, ErrCorrupt) {
		t.Errorf("oversized file: %v, want ErrCorrupt", err)
	}
}

func TestChecksum(t *testing.T) {
	// sha256 of the empty string.
	if got := Checksum(nil); got != "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("Checksum(nil) = %s", got)
	}
}
