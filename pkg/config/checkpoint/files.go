package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

// ErrCorrupt marks a file whose content does not match its checksum, is
// truncated, cannot be parsed, or disagrees with what points to it. Such a
// file is never used.
var ErrCorrupt = errors.New("corrupt or truncated")

// Checksum is the checksum recorded for data: "sha256:" and the hex digest.
func Checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// tmpMarker is in the name of every temporary directory the store creates
// (.<name>.tmp-<random>); GC removes those an interrupted write left behind,
// and the temporary files of interrupted atomicfile writes.
const tmpMarker = ".tmp-"

// isTemporary reports whether name, an entry of one of the store's
// directories, is what an interrupted write left behind.
func isTemporary(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tmpMarker) || atomicfile.IsTemp(name)
}

// writeNewFile creates path, which must not exist, with data, synced: a
// file in a temporary directory that is renamed into place once complete.
func writeNewFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readFileLimited reads path, refusing more than limit bytes.
func readFileLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes: %w", path, limit, ErrCorrupt)
	}
	return data, nil
}

// An envelope is how the store's own files (checkpoint metadata and
// records) are kept: a JSON payload and the checksum of its exact bytes, so
// that any change to the payload, even one that still parses, is detected.
type envelope struct {
	Checksum string          `json:"checksum"`
	Payload  json.RawMessage `json:"payload"`
}

// maxEnvelope bounds the size of a metadata or record file.
const maxEnvelope = 64 << 10

func encodeEnvelope(v any) ([]byte, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	// json.Marshal compacts a RawMessage; payload is compact already, so
	// its bytes, and so its checksum, stay the same.
	out, err := json.Marshal(envelope{Checksum: Checksum(payload), Payload: payload})
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// readEnvelope reads path and decodes its verified payload into v. Every
// error names the file; a file that is not a valid envelope wraps
// ErrCorrupt, a missing one fs.ErrNotExist.
func readEnvelope(path string, v any) error {
	data, err := readFileLimited(path, maxEnvelope)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return fmt.Errorf("%s: empty: %w", path, ErrCorrupt)
	}
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	}
	if len(env.Payload) == 0 {
		return fmt.Errorf("%s: no payload: %w", path, ErrCorrupt)
	}
	if got := Checksum(env.Payload); got != env.Checksum {
		return fmt.Errorf("%s: checksum %s does not match the recorded %q: %w", path, got, env.Checksum, ErrCorrupt)
	}
	dec := json.NewDecoder(strings.NewReader(string(env.Payload)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	}
	return nil
}
