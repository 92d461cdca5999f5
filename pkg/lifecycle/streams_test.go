package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/provider"
)

// A log reader's error before the log is open (a log behind a symbolic
// link) is GetContainerLogs' error, which the kubelet API answers; after
// that it ends the stream. A followed log with no line yet is answered
// once it is open.
func TestContainerLogsErrors(t *testing.T) {
	errLink := errors.New("container log: is or goes through a symbolic link")
	tests := []struct {
		name    string
		read    func(ctx context.Context, opts LogOptions, w io.Writer) error
		wantErr error  // of GetContainerLogs
		want    string // read from the stream
		wantEnd error  // the stream's end
	}{
		{name: "refused before open", read: func(context.Context, LogOptions, io.Writer) error { return errLink }, wantErr: errLink},
		{name: "lines", read: func(_ context.Context, _ LogOptions, w io.Writer) error {
			_, err := io.WriteString(w, "a\nb\n")
			return err
		}, want: "a\nb\n"},
		{name: "empty", read: func(context.Context, LogOptions, io.Writer) error { return nil }},
		{name: "failed after open", read: func(_ context.Context, opts LogOptions, w io.Writer) error {
			opts.Opened()
			io.WriteString(w, "a\n")
			return errLink
		}, want: "a\n", wantEnd: errLink},
		{name: "followed with no line yet", read: func(ctx context.Context, opts LogOptions, _ io.Writer) error {
			opts.Opened()
			<-ctx.Done()
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newLifecycleFixture(t, nil)
			f.rt.readLogs = tt.read
			pod := testPod("logs", corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "i"}}})
			if err := f.m.CreatePod(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			eventually(t, "container started", func() (bool, string) {
				ev := f.rt.recorded()
				return len(ev) > 0, fmt.Sprint(ev)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rc, err := f.m.GetContainerLogs(ctx, "ns", "logs", "main", provider.ContainerLogOpts{Follow: true})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("GetContainerLogs = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			defer rc.Close()
			if tt.name == "followed with no line yet" {
				cancel()
			}
			got, err := io.ReadAll(rc)
			if string(got) != tt.want || !errors.Is(err, tt.wantEnd) {
				t.Errorf("stream = %q, %v; want %q, %v", got, err, tt.want, tt.wantEnd)
			}
		})
	}
}
