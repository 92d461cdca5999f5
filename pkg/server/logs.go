package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
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
	if _, err := io.Copy(&flushWriter{w: w, rc: http.NewResponseController(w)}, src); err != nil && ctx.Err() == nil {
		logger.V(2).Info("Container log stream ended with an error", "err", err)
	}
}

// logRequest is a parsed container log request.
type logRequest struct {
	provider.ContainerLogOpts
	// zeroTail is tailLines=0, which Tail 0 (meaning all) cannot express.
	zeroTail bool
}

// logOptions parses the query of a container log request, as v1
// PodLogOptions, with the kubelet's older "tail" parameter.
func logOptions(query url.Values) (logRequest, error) {
	query = cloneValues(query)
	if tail := query.Get("tail"); tail != "" {
		query.Del("tail")
		if tail != "all" {
			query.Set("tailLines", tail)
		}
	}
	var plo corev1.PodLogOptions
	if err := scheme.ParameterCodec.DecodeParameters(query, corev1.SchemeGroupVersion, &plo); err != nil {
		return logRequest{}, fmt.Errorf("unable to decode query: %w", err)
	}
	var errs []error
	if plo.TailLines != nil && *plo.TailLines < 0 {
		errs = append(errs, errors.New("tailLines: must be greater than or equal to 0"))
	}
	if plo.LimitBytes != nil && *plo.LimitBytes < 1 {
		errs = append(errs, errors.New("limitBytes: must be greater than 0"))
	}
	if plo.SinceSeconds != nil && *plo.SinceSeconds < 1 {
		errs = append(errs, errors.New("sinceSeconds: must be greater than 0"))
	}
	if plo.SinceSeconds != nil && plo.SinceTime != nil {
		errs = append(errs, errors.New("sinceSeconds and sinceTime: at most one may be set"))
	}
	if plo.Stream != nil && *plo.Stream != corev1.LogStreamAll {
		errs = append(errs, fmt.Errorf("stream %q: only %q is supported", *plo.Stream, corev1.LogStreamAll))
	}
	if err := errors.Join(errs...); err != nil {
		return logRequest{}, fmt.Errorf("invalid log request: %w", err)
	}

	req := logRequest{ContainerLogOpts: provider.ContainerLogOpts{
		Timestamps: plo.Timestamps,
		Follow:     plo.Follow,
		Previous:   plo.Previous,
	}}
	if plo.TailLines != nil {
		req.Tail = int(*plo.TailLines)
		req.zeroTail = *plo.TailLines == 0
	}
	if plo.LimitBytes != nil {
		req.LimitBytes = int(*plo.LimitBytes)
	}
	if plo.SinceSeconds != nil {
		req.SinceSecs = int(*plo.SinceSeconds)
	}
	if plo.SinceTime != nil {
		req.SinceTime = plo.SinceTime.Time
	}
	return req, nil
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
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
