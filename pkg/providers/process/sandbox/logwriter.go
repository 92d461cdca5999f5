package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nodelet/nodelet/pkg/nofollow"
)

// maxLogLine is the longest content of one CRI log record; longer lines are
// split into partial (P) records.
const maxLogLine = 16 * 1024

// logWriter appends CRI-format records
//
//	<RFC3339Nano> <stream> <F|P> <content>
//
// to a file and rotates it: when a record would take the file over maxSize,
// path becomes path.1, path.1 path.2 and so on, keeping maxFiles files in all.
type logWriter struct {
	mu       sync.Mutex
	path     string
	maxSize  int64
	maxFiles int
	f        *os.File
	size     int64
	now      func() time.Time
}

func openLogWriter(path string, maxSize int64, maxFiles int) (*logWriter, error) {
	w := &logWriter{path: path, maxSize: maxSize, maxFiles: maxFiles, now: time.Now}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

// open opens the log, refusing a symbolic link at it or at its directory
// (logs/<container>/): a container that can write there must not make the
// shim append to another file.
func (w *logWriter) open() error {
	f, err := nofollow.Open(filepath.Dir(filepath.Dir(w.path)), w.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open log: %w", err)
	}
	w.f, w.size = f, st.Size()
	return nil
}

func (w *logWriter) rotate() error {
	w.f.Close()
	if w.maxFiles <= 1 {
		os.Remove(w.path)
	} else {
		os.Remove(fmt.Sprintf("%s.%d", w.path, w.maxFiles-1))
		for i := w.maxFiles - 2; i >= 1; i-- {
			os.Rename(fmt.Sprintf("%s.%d", w.path, i), fmt.Sprintf("%s.%d", w.path, i+1))
		}
		if err := os.Rename(w.path, w.path+".1"); err != nil {
			return fmt.Errorf("rotate log: %w", err)
		}
	}
	return w.open()
}

// record writes one record. content holds no newline.
func (w *logWriter) record(stream string, partial bool, content []byte) error {
	tag := "F"
	if partial {
		tag = "P"
	}
	var b bytes.Buffer
	b.WriteString(w.now().UTC().Format(time.RFC3339Nano))
	b.WriteByte(' ')
	b.WriteString(stream)
	b.WriteByte(' ')
	b.WriteString(tag)
	b.WriteByte(' ')
	b.Write(content)
	b.WriteByte('\n')

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return os.ErrClosed
	}
	if w.maxSize > 0 && w.size > 0 && w.size+int64(b.Len()) > w.maxSize {
		if err := w.rotate(); err != nil {
			return err
		}
	}
	n, err := w.f.Write(b.Bytes())
	w.size += int64(n)
	return err
}

func (w *logWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// pumpLog copies r into w as records of stream, line by line, until r ends.
// Every chunk read is also given to tee (which must not keep it).
func pumpLog(r io.Reader, stream string, w *logWriter, tee func(stream string, b []byte)) {
	buf := make([]byte, 32*1024)
	var line []byte
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if tee != nil {
				tee(stream, chunk)
			}
			for len(chunk) > 0 {
				i := bytes.IndexByte(chunk, '\n')
				if i < 0 {
					line = append(line, chunk...)
					chunk = nil
					for len(line) >= maxLogLine {
						w.record(stream, true, line[:maxLogLine])
						line = append(line[:0], line[maxLogLine:]...)
					}
					continue
				}
				line = append(line, chunk[:i]...)
				chunk = chunk[i+1:]
				for len(line) > maxLogLine {
					w.record(stream, true, line[:maxLogLine])
					line = append(line[:0], line[maxLogLine:]...)
				}
				w.record(stream, false, line)
				line = line[:0]
			}
		}
		if err != nil {
			if len(line) > 0 {
				w.record(stream, false, line)
			}
			return
		}
	}
}
