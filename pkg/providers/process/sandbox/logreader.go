package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nodelet/nodelet/pkg/nofollow"
)

// LogOptions select what ReadLogs writes.
type LogOptions struct {
	Follow, Timestamps bool
	// TailLines is how many lines to show from the end; <0 shows all.
	TailLines int
	// Since drops lines logged before it.
	Since time.Time
	// LimitBytes stops the output after that many bytes; 0 is no limit.
	LimitBytes int64
	// Opened, when not nil, is called once the files are open.
	Opened func()
}

// followInterval is how often a followed log is checked for new lines.
const followInterval = 100 * time.Millisecond

var errLimitReached = errors.New("log limit reached")

// ReadLogs writes the log of one attempt (the CRI-format file at path and
// the files rotated out of it, oldest first) to w as plain text, each line
// optionally prefixed with its RFC3339Nano timestamp. With Follow it keeps
// writing new lines, across rotations, until stillRunning (nil: never)
// reports false and the file is drained, or ctx ends.
//
// path lies below dir, the pod's logs directory, and no symbolic link
// below dir is followed: a container that can write there and swaps its
// log, or its log's directory, for a link to another file gets an error
// wrapping nofollow.ErrSymlink, never the other file.
func ReadLogs(ctx context.Context, dir, path string, opts LogOptions, stillRunning func() bool, w io.Writer) error {
	lr := &logReader{opts: opts, w: w, left: opts.LimitBytes}
	if opts.TailLines >= 0 {
		lr.tail = make([]logLine, 0, min(opts.TailLines, 4096))
		lr.tailing = true
	}
	err := lr.run(ctx, dir, path, stillRunning)
	if errors.Is(err, errLimitReached) {
		return nil
	}
	return err
}

type logLine struct {
	ts      time.Time
	content []byte
}

type logReader struct {
	opts    LogOptions
	w       io.Writer
	left    int64
	tailing bool
	tail    []logLine // ring of the last TailLines lines while tailing
	head    int

	partial []byte    // content of P records not yet completed
	partTS  time.Time // timestamp of the first of them
}

func (lr *logReader) run(ctx context.Context, dir, path string, stillRunning func() bool) error {
	files, err := openLogFiles(dir, path)
	if err != nil {
		return err
	}
	if lr.opts.Opened != nil {
		lr.opts.Opened()
	}
	var cur *os.File
	if len(files) > 0 {
		cur = files[len(files)-1]
		files = files[:len(files)-1]
	}
	defer func() {
		if cur != nil {
			cur.Close()
		}
	}()
	for _, f := range files {
		err := lr.readAll(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	var br *bufio.Reader
	var pending []byte
	if cur != nil {
		br = bufio.NewReaderSize(cur, 64*1024)
		if pending, err = lr.drain(br, nil); err != nil {
			return err
		}
	}
	if err := lr.flushTail(); err != nil {
		return err
	}
	if !lr.opts.Follow {
		return nil
	}
	ticker := time.NewTicker(followInterval)
	defer ticker.Stop()
	for {
		running := stillRunning != nil && stillRunning()
		// Read what is there, switching to the newer files after rotation:
		// a file gets no more writes once it is renamed.
		for {
			if cur != nil {
				if pending, err = lr.drain(br, pending); err != nil {
					return err
				}
			}
			if !replaced(cur, path) {
				break
			}
			if cur != nil {
				// What was written to cur before it was renamed.
				if pending, err = lr.drain(br, pending); err != nil {
					return err
				}
			}
			files, err := openLogFiles(dir, path)
			if err != nil {
				return err
			}
			newer := newerFiles(files, cur)
			if len(newer) == 0 {
				break
			}
			for _, f := range newer[:len(newer)-1] {
				err := lr.readAll(f)
				f.Close()
				if err != nil {
					newer[len(newer)-1].Close()
					return err
				}
			}
			if cur != nil {
				cur.Close()
			}
			cur, pending = newer[len(newer)-1], nil
			br = bufio.NewReaderSize(cur, 64*1024)
		}
		if !running {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// openLogFiles opens the rotated files and the current one, oldest first,
// as one consistent view: it tries again if a rotation renamed files while
// it opened them. A symbolic link on the way to one of them is an error.
func openLogFiles(dir, path string) ([]*os.File, error) {
	var files []*os.File
	for try := 0; try < 20; try++ {
		closeAll(files)
		files = nil
		consistent := true
		for _, name := range append(rotatedLogs(path), path) {
			f, err := nofollow.Open(dir, name, os.O_RDONLY, 0)
			if errors.Is(err, nofollow.ErrSymlink) {
				closeAll(files)
				return nil, fmt.Errorf("container log: %w", err)
			}
			if err != nil {
				consistent = consistent && isNotExist(err) && name != path
				continue
			}
			files = append(files, f)
			fst, err1 := f.Stat()
			st, err2 := os.Lstat(name)
			if err1 != nil || err2 != nil || !os.SameFile(fst, st) {
				consistent = false
			}
		}
		if consistent && len(files) > 0 {
			// Names may all have shifted between listing and opening.
			if again := rotatedLogs(path); len(again) == len(files)-1 {
				return files, nil
			}
		}
	}
	return files, nil
}

// newerFiles keeps the files after cur (all of them if cur is not among
// them, as it was then the oldest and removed) and closes the others.
func newerFiles(files []*os.File, cur *os.File) []*os.File {
	if cur == nil {
		return files
	}
	cst, err := cur.Stat()
	if err != nil {
		return files
	}
	for i, f := range files {
		if st, err := f.Stat(); err == nil && os.SameFile(st, cst) {
			closeAll(files[:i+1])
			return files[i+1:]
		}
	}
	return files
}

// replaced tells whether path now names another file than cur (or a
// symbolic link, which openLogFiles then refuses).
func replaced(cur *os.File, path string) bool {
	st, err := os.Lstat(path)
	if err != nil {
		return false
	}
	if cur == nil {
		return true
	}
	cst, err := cur.Stat()
	return err != nil || !os.SameFile(st, cst)
}

// rotatedLogs lists path.N files, oldest (highest N) first.
func rotatedLogs(path string) []string {
	matches, _ := filepath.Glob(path + ".*")
	type rotated struct {
		n    int
		path string
	}
	var rs []rotated
	for _, m := range matches {
		if n, err := strconv.Atoi(strings.TrimPrefix(m, path+".")); err == nil {
			rs = append(rs, rotated{n, m})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].n > rs[j].n })
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.path
	}
	return out
}

func (lr *logReader) readAll(f *os.File) error {
	pending, err := lr.drain(bufio.NewReaderSize(f, 64*1024), nil)
	if err == nil && len(pending) > 0 {
		err = lr.record(pending)
	}
	return err
}

// drain handles every complete record up to the end of br and returns the
// bytes of an incomplete last record, to be completed by a later read.
func (lr *logReader) drain(br *bufio.Reader, pending []byte) ([]byte, error) {
	for {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			pending = append(pending, b...)
			continue
		}
		if err != nil {
			return append(pending, b...), nil
		}
		var rec []byte
		if len(pending) > 0 {
			rec = append(pending, b...)
			pending = nil
		} else {
			rec = b
		}
		if err := lr.record(rec[:len(rec)-1]); err != nil {
			return nil, err
		}
	}
}

// record parses one CRI record and emits the line it completes, if any.
func (lr *logReader) record(rec []byte) error {
	rec = bytes.TrimSuffix(rec, []byte("\n"))
	fields := bytes.SplitN(rec, []byte(" "), 4)
	if len(fields) < 3 {
		return nil
	}
	ts, err := time.Parse(time.RFC3339Nano, string(fields[0]))
	if err != nil {
		return nil
	}
	var content []byte
	if len(fields) == 4 {
		content = fields[3]
	}
	if string(fields[2]) == "P" {
		if len(lr.partial) == 0 {
			lr.partTS = ts
		}
		lr.partial = append(lr.partial, content...)
		return nil
	}
	line := logLine{ts: ts, content: content}
	if len(lr.partial) > 0 {
		line = logLine{ts: lr.partTS, content: append(lr.partial, content...)}
		lr.partial = nil
	}
	return lr.emit(line)
}

func (lr *logReader) emit(l logLine) error {
	if !lr.opts.Since.IsZero() && l.ts.Before(lr.opts.Since) {
		return nil
	}
	if lr.tailing {
		n := lr.opts.TailLines
		if n == 0 {
			return nil
		}
		l.content = bytes.Clone(l.content)
		if len(lr.tail) < n {
			lr.tail = append(lr.tail, l)
		} else {
			lr.tail[lr.head] = l
			lr.head = (lr.head + 1) % n
		}
		return nil
	}
	return lr.write(l)
}

func (lr *logReader) flushTail() error {
	if !lr.tailing {
		return nil
	}
	lr.tailing = false
	for i := range lr.tail {
		if err := lr.write(lr.tail[(lr.head+i)%len(lr.tail)]); err != nil {
			return err
		}
	}
	lr.tail = nil
	return nil
}

func (lr *logReader) write(l logLine) error {
	var b []byte
	if lr.opts.Timestamps {
		b = append(b, l.ts.Format(time.RFC3339Nano)...)
		b = append(b, ' ')
	}
	b = append(b, l.content...)
	b = append(b, '\n')
	limited := false
	if lr.opts.LimitBytes > 0 {
		if int64(len(b)) >= lr.left {
			b, limited = b[:lr.left], true
		}
		lr.left -= int64(len(b))
	}
	if _, err := lr.w.Write(b); err != nil {
		return fmt.Errorf("write log: %w", err)
	}
	if limited {
		return errLimitReached
	}
	return nil
}
