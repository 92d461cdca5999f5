package staticpod

import (
	"context"
	"sync"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// dirWatch tells when a file of the manifest directory is created,
// written, renamed or removed (inotify), so that a manifest removed and
// written again at once is seen gone in between, as the kubelet sees it:
// the periodic read alone may never see it gone. A directory that cannot
// be watched (not there yet) is watched from the next read on that finds
// it; the periodic read covers the time between.
type dirWatch struct {
	dir     string
	changed chan<- struct{}
	// removed is told of each file of the directory removed or renamed
	// away, before changed.
	removed func(path string)

	mu      sync.Mutex
	watcher *fsnotify.Watcher
	done    chan struct{}
}

// ensure starts watching the directory unless it is watched already. The
// watch ends with ctx or close, or when the directory goes (ensure starts
// it again once it is back).
func (w *dirWatch) ensure(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watcher != nil {
		select {
		case <-w.done:
			w.watcher = nil // it ended: the directory went, or the watch failed
		default:
			return
		}
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Unable to watch the static pod manifests; reading them periodically", "dir", w.dir, "err", err)
		return
	}
	if err := watcher.Add(w.dir); err != nil {
		_ = watcher.Close()
		klog.FromContext(ctx).V(2).Info("Unable to watch the static pod manifests; reading them periodically", "dir", w.dir, "err", err)
		return
	}
	w.watcher, w.done = watcher, make(chan struct{})
	go w.forward(ctx, watcher, w.done)
}

// forward signals changed for each event of the directory until the watch
// ends. The signal is coalesced: one read sees every change before it.
func (w *dirWatch) forward(ctx context.Context, watcher *fsnotify.Watcher, done chan struct{}) {
	defer close(done)
	defer func() { _ = watcher.Close() }()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-watcher.Events:
			if !ok {
				return
			}
			if ev.Name != w.dir && ev.Has(fsnotify.Remove|fsnotify.Rename) && w.removed != nil {
				w.removed(ev.Name)
			}
			select {
			case w.changed <- struct{}{}:
			default:
			}
			if ev.Name == w.dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				return // the directory itself went: watched again once it is back
			}
		case err, ok := <-watcher.Errors:
			if !ok {
				return
			}
			// An overflowed queue lost events: read everything again.
			klog.FromContext(ctx).V(2).Info("Watching the static pod manifests failed; reading them again", "dir", w.dir, "err", err)
			select {
			case w.changed <- struct{}{}:
			default:
			}
		}
	}
}

// close ends the watch.
func (w *dirWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watcher != nil {
		_ = w.watcher.Close()
		<-w.done
		w.watcher = nil
	}
}
