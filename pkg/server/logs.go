package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/provider"
)

// getContainerLogs streams a container's log, flushing as it goes so that
// follow shows lines as they come.
func (s *Server) getContainerLogs(w http.ResponseWriter, r *http.Request) {
	logs, ok := s.backend.(provider.LogsProvider)
	if !ok {
		notImplemented(w, "container logs")
		return
	}
	opts, err := logOptions(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !s.knownPod(w, r) {
		return
	}
	namespace, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	ctx := r.Context()
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(namespace, pod), "container", container)

	if opts.zeroTail && !opts.Follow {
		// tailLines=0: no lines; the provider's Tail cannot say it.
		w.Header().Set("Content-Type", "text/plain")
		return
	}
	rc, err := logs.GetContainerLogs(ctx, namespace, pod, container, opts.ContainerLogOpts)
	if err != nil {
		providerError(w, fmt.Errorf("get logs of container %s of pod %s/%s: %w", container, namespace, pod, err), http.StatusBadRequest)
		return
	}
	// Closing the reader is what ends a follow when the client goes away.
	stop := context.AfterFunc(ctx, func() { rc.Close() })
	defer func() {
		if stop() {
			rc.Close()
		}
	}()

	var src io.Reader = rc
	if opts.LimitBytes > 0 {
		src = io.LimitReader(rc, int64(opts.LimitBytes))
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	// Send the headers now: a follow may wait long for its first line.
	fw := &flushWriter{w: w, rc: http.NewResponseController(w)}
	if err := fw.rc.Flush(); err != nil {
		logger.V(2).Info("Unable to flush the container log response", "err", err)
		return
	}
	if _, err := io.Copy(fw, src); err != nil && ctx.Err() == nil {
		logger.V(2).Info("Container log stream ended with an error", "err", err)
	}
}

// logRequest is a parsed container log request.
type logRequest struct {
	provider.ContainerLogOpts
	// zeroTail is tailLines=0, which Tail 0 (meaning all) cannot express.
	zeroTail bool
}

// maxSinceSeconds is the longest sinceSeconds a time.Duration holds.
const maxSinceSeconds = int64(math.MaxInt64 / time.Second)

// logOptions parses the query of a container log request: the fields of
// v1 PodLogOptions, with the kubelet's older "tail" parameter.
func logOptions(query url.Values) (logRequest, error) {
	var req logRequest
	var errs []error
	boolParam := func(name string) bool {
		v := query.Get(name)
		if v == "" {
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a boolean", name, v))
		}
		return b
	}
	intParam := func(name string, min int64) (int64, bool) {
		v := query.Get(name)
		if v == "" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not an integer", name, v))
			return 0, false
		}
		if n < min {
			errs = append(errs, fmt.Errorf("%s: must be greater than or equal to %d", name, min))
			return 0, false
		}
		return n, true
	}

	req.Follow = boolParam("follow")
	req.Previous = boolParam("previous")
	req.Timestamps = boolParam("timestamps")
	tailName := "tailLines"
	if query.Get(tailName) == "" && query.Get("tail") != "" {
		tailName = "tail"
	}
	if query.Get(tailName) != "all" {
		if n, ok := intParam(tailName, 0); ok {
			req.Tail, req.zeroTail = int(n), n == 0
		}
	}
	if n, ok := intParam("limitBytes", 1); ok {
		req.LimitBytes = int(n)
	}
	n, sinceSeconds := intParam("sinceSeconds", 1)
	// Providers go back that many seconds as a time.Duration; longer
	// reaches before any log all the same.
	req.SinceSecs = int(min(n, maxSinceSeconds))
	if v := query.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("sinceTime: %q is not an RFC 3339 time", v))
		}
		if sinceSeconds {
			errs = append(errs, errors.New("sinceSeconds and sinceTime: at most one may be set"))
		}
		req.SinceTime = t
	}
	if v := query.Get("stream"); v != "" && v != string(corev1.LogStreamAll) {
		errs = append(errs, fmt.Errorf("stream %q: only %q is supported", v, corev1.LogStreamAll))
	}
	if err := errors.Join(errs...); err != nil {
		return logRequest{}, fmt.Errorf("invalid log request: %w", err)
	}
	return req, nil
}

// flushWriter flushes the response after every write.
type flushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (f *flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err != nil {
		return n, err
	}
	if err := f.rc.Flush(); err != nil {
		return n, fmt.Errorf("flush: %w", err)
	}
	return n, nil
}
