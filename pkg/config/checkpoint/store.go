// Package checkpoint owns nodelet's on-disk record of remote configuration
// under ROOT/config: the checkpoint of each downloaded config, verified by
// checksum, and the two records that say which checkpoint is assigned and
// which is the last-known-good. It stores and verifies bytes; it never
// parses a config, never talks to the API server and never touches
// anything in ROOT outside config/.
//
// Layout:
//
//	ROOT/config/assigned                the assigned record
//	ROOT/config/last-known-good         the last-known-good record
//	ROOT/config/checkpoints/<uid>/<resourceVersion>/
//	    nodelet.yaml                    the ConfigMap's config, byte for byte
//	    checkpoint.json                 its source, size and sha256
//
// Every file is written atomically (temporary file, fsync, rename, fsync of
// the directory) and a checkpoint directory appears at once, complete, by
// one rename. Records and checkpoint metadata carry a checksum of their own
// content; a file that is missing, truncated or altered is reported with an
// error naming it and is never used.
//
// A Store is safe for use by several goroutines; only one process may use a
// ROOT at a time.
package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

const (
	// DirName is the store's directory under ROOT.
	DirName = "config"
	// AssignedFile and LastKnownGoodFile are the records' file names.
	AssignedFile      = "assigned"
	LastKnownGoodFile = "last-known-good"
	// CheckpointsDir holds one directory per checkpointed UID.
	CheckpointsDir = "checkpoints"
	// DataFile is a checkpoint's config, byte for byte; MetaFile its
	// source and checksum.
	DataFile = "nodelet.yaml"
	MetaFile = "checkpoint.json"

	// MaxSize is the largest config a checkpoint holds: a ConfigMap holds
	// at most 1 MiB.
	MaxSize = 1 << 20
)

// Source identifies one version of a remote config: the ConfigMap it came
// from and the resourceVersion it had.
type Source struct {
	Namespace       string    `json:"namespace"`
	Name            string    `json:"name"`
	UID             types.UID `json:"uid"`
	ResourceVersion string    `json:"resourceVersion"`
}

// SourceOf is the source of a ConfigMap as it is now.
func SourceOf(cm *corev1.ConfigMap) Source {
	return Source{Namespace: cm.Namespace, Name: cm.Name, UID: cm.UID, ResourceVersion: cm.ResourceVersion}
}

func (s Source) String() string {
	return fmt.Sprintf("ConfigMap %s/%s (uid %s, resourceVersion %s)", s.Namespace, s.Name, s.UID, s.ResourceVersion)
}

// Validate checks that s names a ConfigMap and that its UID and
// resourceVersion are safe as directory names.
func (s Source) Validate() error {
	var problems []string
	if s.Namespace == "" {
		problems = append(problems, "namespace is empty")
	}
	if s.Name == "" {
		problems = append(problems, "name is empty")
	}
	if msg := pathElementProblem(string(s.UID)); msg != "" {
		problems = append(problems, "uid "+msg)
	}
	if msg := pathElementProblem(s.ResourceVersion); msg != "" {
		problems = append(problems, "resourceVersion "+msg)
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid config source %s: %s", s, strings.Join(problems, ", "))
	}
	return nil
}

// pathElementProblem says why s cannot be a directory name of the store, or
// "". Letters, digits, '-', '_' and '.' are allowed, not first '.', so
// that no name can leave its directory or look like a temporary file.
func pathElementProblem(s string) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > 253:
		return "is longer than 253 characters"
	case s[0] == '.':
		return "starts with '.'"
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Sprintf("has %q: only letters, digits, '-', '_' and '.' are allowed", r)
		}
	}
	return ""
}

// Record is what the assigned or the last-known-good record says.
type Record struct {
	// Source is the checkpoint the record points to; nil means the local
	// config (defaults, file and flags).
	Source *Source `json:"source"`
	// Time is when the record last changed: for the assigned record, when
	// the config was assigned, the start of its trial.
	Time time.Time `json:"time"`
}

// meta is a checkpoint's checkpoint.json.
type meta struct {
	Source   Source `json:"source"`
	Size     int64  `json:"size"`
	Checksum string `json:"checksum"`
}

// Store is the checkpoint store under one ROOT.
type Store struct {
	dir   string
	clock clock.PassiveClock
	mu    sync.Mutex
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock that stamps records; the real one by default.
func WithClock(c clock.PassiveClock) Option {
	return func(s *Store) { s.clock = c }
}

// Open opens the store under root/config, creating it, with both records
// pointing to the local config, if it does not exist yet. The creation is
// atomic, so a store that exists always had its records: a record found
// missing later is an error, not the local config.
func Open(root string, opts ...Option) (*Store, error) {
	if root == "" {
		return nil, errors.New("checkpoint store: empty root directory")
	}
	s := &Store{dir: filepath.Join(root, DirName), clock: clock.RealClock{}}
	for _, o := range opts {
		o(s)
	}
	if _, err := os.Stat(s.dir); errors.Is(err, fs.ErrNotExist) {
		if err := s.create(root); err != nil {
			return nil, fmt.Errorf("create checkpoint store %s: %w", s.dir, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("open checkpoint store: %w", err)
	}
	if err := os.MkdirAll(s.checkpointsDir(), 0o700); err != nil {
		return nil, fmt.Errorf("open checkpoint store: %w", err)
	}
	return s, nil
}

// create builds the store in a temporary directory beside it and renames it
// into place.
func (s *Store) create(root string) error {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	// What an earlier, interrupted create left.
	if entries, err := os.ReadDir(root); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "."+DirName+tmpMarker) {
				_ = os.RemoveAll(filepath.Join(root, e.Name()))
			}
		}
	}
	tmp, err := os.MkdirTemp(root, "."+DirName+tmpMarker+"*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := os.Mkdir(filepath.Join(tmp, CheckpointsDir), 0o700); err != nil {
		return err
	}
	local, err := encodeEnvelope(Record{Time: s.clock.Now().UTC()})
	if err != nil {
		return err
	}
	for _, name := range []string{AssignedFile, LastKnownGoodFile} {
		if err := writeNewFile(filepath.Join(tmp, name), local, 0o600); err != nil {
			return err
		}
	}
	if err := atomicfile.SyncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.dir); err != nil {
		return err
	}
	return atomicfile.SyncDir(root)
}

// Dir is the store's directory, ROOT/config.
func (s *Store) Dir() string { return s.dir }

func (s *Store) checkpointsDir() string { return filepath.Join(s.dir, CheckpointsDir) }

func (s *Store) checkpointDir(src Source) string {
	return filepath.Join(s.checkpointsDir(), string(src.UID), src.ResourceVersion)
}

// Save checkpoints data, the config of src. Saving the same bytes again is
// a no-op; a checkpoint of src that is corrupt or holds other bytes is
// replaced. A checkpoint is used only once a record points to it.
func (s *Store) Save(src Source, data []byte) error {
	if err := src.Validate(); err != nil {
		return err
	}
	if len(data) > MaxSize {
		return fmt.Errorf("checkpoint %s: config is %d bytes, more than %d", src, len(data), MaxSize)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, err := s.load(src); err == nil && bytes.Equal(old, data) {
		return nil
	}
	dir := s.checkpointDir(src)
	if err := s.save(src, data, dir); err != nil {
		return fmt.Errorf("checkpoint %s: %w", src, err)
	}
	return nil
}

func (s *Store) save(src Source, data []byte, dir string) error {
	uidDir := filepath.Dir(dir)
	if err := os.Mkdir(uidDir, 0o700); err == nil {
		if err := atomicfile.SyncDir(s.checkpointsDir()); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return err
	}
	tmp, err := os.MkdirTemp(uidDir, "."+src.ResourceVersion+tmpMarker+"*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	m, err := encodeEnvelope(meta{Source: src, Size: int64(len(data)), Checksum: Checksum(data)})
	if err != nil {
		return err
	}
	if err := writeNewFile(filepath.Join(tmp, DataFile), data, 0o600); err != nil {
		return err
	}
	if err := writeNewFile(filepath.Join(tmp, MetaFile), m, 0o600); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(tmp); err != nil {
		return err
	}
	// What is there is corrupt or holds other bytes: replace it.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	return atomicfile.SyncDir(uidDir)
}

// Load returns the checkpointed config of src after checking it against
// its recorded size and checksum. A missing checkpoint is an error that
// wraps fs.ErrNotExist, one that fails a check wraps ErrCorrupt; both name
// the file.
func (s *Store) Load(src Source) ([]byte, error) {
	if err := src.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := s.load(src)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", src, err)
	}
	return data, nil
}

func (s *Store) load(src Source) ([]byte, error) {
	dir := s.checkpointDir(src)
	var m meta
	if err := readEnvelope(filepath.Join(dir, MetaFile), &m); err != nil {
		return nil, err
	}
	if m.Source != src {
		return nil, fmt.Errorf("%s: records %s: %w", filepath.Join(dir, MetaFile), m.Source, ErrCorrupt)
	}
	path := filepath.Join(dir, DataFile)
	data, err := readFileLimited(path, MaxSize)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != m.Size {
		return nil, fmt.Errorf("%s: %d bytes, recorded %d: %w", path, len(data), m.Size, ErrCorrupt)
	}
	if got := Checksum(data); got != m.Checksum {
		return nil, fmt.Errorf("%s: checksum %s does not match the recorded %s: %w", path, got, m.Checksum, ErrCorrupt)
	}
	return data, nil
}

// Assigned returns the assigned record: the config the agent should run.
func (s *Store) Assigned() (Record, error) { return s.readRecord(AssignedFile) }

// LastKnownGood returns the last-known-good record: the config to roll back
// to.
func (s *Store) LastKnownGood() (Record, error) { return s.readRecord(LastKnownGoodFile) }

// SetAssigned points the assigned record to src's checkpoint, which must
// load, or to the local config if src is nil. Setting the source it
// already has changes nothing, so the trial's start stays.
func (s *Store) SetAssigned(src *Source) error { return s.setRecord(AssignedFile, src) }

// SetLastKnownGood points the last-known-good record to src's checkpoint,
// which must load, or to the local config if src is nil.
func (s *Store) SetLastKnownGood(src *Source) error { return s.setRecord(LastKnownGoodFile, src) }

func (s *Store) readRecord(name string) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readRecordLocked(name)
}

func (s *Store) readRecordLocked(name string) (Record, error) {
	var r Record
	path := filepath.Join(s.dir, name)
	if err := readEnvelope(path, &r); err != nil {
		return Record{}, fmt.Errorf("%s record: %w", name, err)
	}
	if r.Source != nil {
		if err := r.Source.Validate(); err != nil {
			return Record{}, fmt.Errorf("%s record: %s: %w: %v", name, path, ErrCorrupt, err)
		}
	}
	return r, nil
}

func (s *Store) setRecord(name string, src *Source) error {
	if src != nil {
		if err := src.Validate(); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, err := s.readRecordLocked(name); err == nil && sameSource(old.Source, src) {
		return nil
	}
	if src != nil {
		if _, err := s.load(*src); err != nil {
			return fmt.Errorf("set %s record to %s: %w", name, src, err)
		}
	}
	data, err := encodeEnvelope(Record{Source: src, Time: s.clock.Now().UTC()})
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(s.dir, name), data, atomicfile.Options{Perm: 0o600, Sync: true}); err != nil {
		return fmt.Errorf("set %s record: %w", name, err)
	}
	return nil
}

func sameSource(a, b *Source) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// GC removes the checkpoints that neither record points to and what
// interrupted writes left behind. If a record cannot be read it removes
// nothing: the checkpoint it pointed to may be the one to keep. Call it
// after the records point where they should, never between Save and
// SetAssigned.
func (s *Store) GC() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := map[Source]bool{}
	for _, name := range []string{AssignedFile, LastKnownGoodFile} {
		r, err := s.readRecordLocked(name)
		if err != nil {
			return fmt.Errorf("checkpoint GC: %w", err)
		}
		if r.Source != nil {
			keep[Source{UID: r.Source.UID, ResourceVersion: r.Source.ResourceVersion}] = true
		}
	}
	var errs []error
	// Temporary record files.
	errs = append(errs, removeTemporaries(s.dir)...)
	uids, err := os.ReadDir(s.checkpointsDir())
	if err != nil {
		return fmt.Errorf("checkpoint GC: %w", err)
	}
	for _, u := range uids {
		uidDir := filepath.Join(s.checkpointsDir(), u.Name())
		if !u.IsDir() || pathElementProblem(u.Name()) != "" {
			continue // not ours
		}
		errs = append(errs, removeTemporaries(uidDir)...)
		versions, err := os.ReadDir(uidDir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		left := 0
		for _, v := range versions {
			if !v.IsDir() || pathElementProblem(v.Name()) != "" {
				left++ // not ours
				continue
			}
			if keep[Source{UID: types.UID(u.Name()), ResourceVersion: v.Name()}] {
				left++
				continue
			}
			if err := os.RemoveAll(filepath.Join(uidDir, v.Name())); err != nil {
				errs = append(errs, err)
				left++
			}
		}
		if left == 0 {
			if err := os.Remove(uidDir); err != nil {
				errs = append(errs, err)
			}
		} else if err := atomicfile.SyncDir(uidDir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := atomicfile.SyncDir(s.checkpointsDir()); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checkpoint GC: %w", err)
	}
	return nil
}

// removeTemporaries removes dir's entries that an interrupted write left.
func removeTemporaries(dir string) []error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, e := range entries {
		if isTemporary(e.Name()) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}
