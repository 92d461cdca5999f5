package agent

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/provider"
)

// statsProvider is a provider with stats of its own and, optionally, an
// image filesystem.
type statsProvider struct {
	provider.PodLifecycleHandler
	imageFs *statsv1alpha1.FsStats
	err     error
}

func (statsProvider) PodStats(context.Context) ([]statsv1alpha1.PodStats, error) { return nil, nil }
func (statsProvider) NodeStats(context.Context) (statsv1alpha1.NodeStats, error) {
	return statsv1alpha1.NodeStats{}, nil
}

type imageFsProvider struct{ statsProvider }

func (p imageFsProvider) ImageFsStats(context.Context) (*statsv1alpha1.FsStats, *statsv1alpha1.FsStats, error) {
	return p.imageFs, p.imageFs, p.err
}

// The node's runtime filesystems come from a provider that reports them;
// a provider that cannot fails the summary, as the kubelet's does.
func TestSummaryRuntimeFilesystems(t *testing.T) {
	used := uint64(42)
	fs := &statsv1alpha1.FsStats{UsedBytes: &used}
	for _, tc := range []struct {
		name        string
		p           provider.PodLifecycleHandler
		wantRuntime bool
		wantErr     bool
	}{
		{name: "no image filesystem", p: statsProvider{}},
		{name: "image filesystem", p: imageFsProvider{statsProvider{imageFs: fs}}, wantRuntime: true},
		{name: "unreadable", p: imageFsProvider{statsProvider{err: errors.New("no runtime")}}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &statsSource{nodes: &nodeProviders{nodes: map[string]provider.PodLifecycleHandler{"n1": tc.p}}}
			got, err := s.Summary(context.Background(), "n1")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if (got.Node.Runtime != nil) != tc.wantRuntime {
				t.Fatalf("runtime %+v, want one %v", got.Node.Runtime, tc.wantRuntime)
			}
			if tc.wantRuntime && (got.Node.Runtime.ImageFs != fs || got.Node.Runtime.ContainerFs != fs) {
				t.Errorf("runtime %+v, want the provider's filesystems", got.Node.Runtime)
			}
		})
	}
}

// The host node's system containers: the agent's own, and the cgroups
// WithSystemCgroups names; a relative or root cgroup is refused.
func TestSystemContainers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cgroups SystemCgroups
		want    []string
		wantErr bool
	}{
		{name: "the agent's only", want: []string{"kubelet"}},
		{name: "all", cgroups: SystemCgroups{Runtime: "/rt", System: "/system", Pods: "/kubepods"},
			want: []string{"kubelet", "runtime:/rt", "misc:/system", "pods:/kubepods"}},
		{name: "relative", cgroups: SystemCgroups{Runtime: "rt"}, wantErr: true},
		{name: "root", cgroups: SystemCgroups{System: "/"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s settings
			err := WithSystemCgroups(tc.cgroups)(&s)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			started := time.Unix(100, 0)
			var got []string
			for _, c := range (&Agent{s: s}).systemContainers(started) {
				if c.Cgroup == "" {
					if c.PID != os.Getpid() || !c.StartTime.Equal(started) {
						t.Errorf("%s: pid %d started %v, want the agent's", c.Name, c.PID, c.StartTime)
					}
					got = append(got, c.Name)
					continue
				}
				got = append(got, c.Name+":"+c.Cgroup)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("system containers %v, want %v", got, tc.want)
			}
		})
	}
}
