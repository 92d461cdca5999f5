package cri

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/lifecycle"
)

// logRotationPeriod is how often running containers' logs are checked
// against the size limit, as the kubelet's container log manager does.
const logRotationPeriod = 10 * time.Second

// rotatedSuffix is the time format appended to a rotated log file.
const rotatedSuffix = "20060102-150405.000000"

// rotateLogs rotates the log of every running container of the node that
// grew past maxSize: the file is renamed with the time and the runtime
// reopens it; at most maxFiles files (the current one included) are kept
// per container attempt.
func (r *criRuntime) rotateLogs(ctx context.Context, maxSize int64, maxFiles int) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(logRotationPeriod):
		}
		r.mu.Lock()
		sandboxes := make([]*criSandbox, 0, len(r.sandboxes))
		for _, sb := range r.sandboxes {
			sandboxes = append(sandboxes, sb)
		}
		r.mu.Unlock()
		for _, sb := range sandboxes {
			sb.rotateLogs(ctx, maxSize, maxFiles)
		}
	}
}

func (s *criSandbox) rotateLogs(ctx context.Context, maxSize int64, maxFiles int) {
	s.mu.Lock()
	var running []*criContainer
	for _, list := range s.containers {
		if len(list) > 0 && list[len(list)-1].status.State == lifecycle.StateRunning {
			running = append(running, list[len(list)-1])
		}
	}
	s.mu.Unlock()
	rs, _, err := s.rt.conn.services(ctx)
	if err != nil {
		return
	}
	logger := klog.FromContext(ctx)
	for _, c := range running {
		path := filepath.Join(s.logDir, containerLogPath(c.status.Name, uint32(c.status.Attempt)))
		fi, err := os.Stat(path)
		if err != nil || fi.Size() < maxSize {
			continue
		}
		rotated := path + "." + s.rt.clock.Now().Format(rotatedSuffix)
		if err := os.Rename(path, rotated); err != nil {
			logger.Error(err, "Rotating a container log failed", "path", path)
			continue
		}
		if err := rs.ReopenContainerLog(ctx, c.id); err != nil {
			// The runtime still writes the renamed file: name it back.
			_ = os.Rename(rotated, path)
			logger.Error(err, "Reopening a container log failed", "path", path)
			continue
		}
		removeOldLogs(path, maxFiles-1)
	}
}

// removeOldLogs keeps the newest keep rotated files of the log at path.
func removeOldLogs(path string, keep int) {
	old, _ := filepath.Glob(path + ".*")
	sort.Strings(old) // the time suffix sorts by age
	for len(old) > keep {
		_ = os.Remove(old[0])
		old = old[1:]
	}
}
