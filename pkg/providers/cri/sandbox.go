package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/logs"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/nofollow"
)

// criSandbox is one pod's sandbox in the runtime, with the snapshot of its
// containers by name, oldest attempt first.
type criSandbox struct {
	rt      *criRuntime
	uid     types.UID
	id      string
	attempt uint32
	logDir  string
	created time.Time
	// since is the runtime's list sequence number when the object was
	// made: lists begun before it do not judge it.
	since uint64

	updating sync.Mutex // held by update
	// listed is the sequence number of the list update last applied.
	listed uint64

	mu         sync.Mutex
	config     *runtimeapi.PodSandboxConfig // nil for an adopted sandbox until a container needs it
	ready      bool
	ips        []string
	ipsRead    bool
	containers map[string][]*criContainer
}

// criContainer is one container (one attempt) of the sandbox.
type criContainer struct {
	id     string
	state  runtimeapi.ContainerState
	status lifecycle.ContainerStatus
	// final: exited and its status read; it never changes again.
	final bool
}

var _ lifecycle.Sandbox = (*criSandbox)(nil)

func (s *criSandbox) UID() types.UID { return s.uid }

func (s *criSandbox) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

func (s *criSandbox) IPs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ips)
}

func (s *criSandbox) hostsFile() string { return filepath.Join(s.rt.podDir(s.uid), "etc-hosts") }

// fillIPs reads the sandbox's IPs once: they do not change while it runs.
func (s *criSandbox) fillIPs(ctx context.Context, rs internalapi.RuntimeService) {
	s.mu.Lock()
	done := s.ipsRead
	s.mu.Unlock()
	if done {
		return
	}
	resp, err := rs.PodSandboxStatus(ctx, s.id, false)
	if err != nil {
		return
	}
	var ips []string
	if n := resp.GetStatus().GetNetwork(); n != nil {
		if n.Ip != "" {
			ips = append(ips, n.Ip)
		}
		for _, ip := range n.AdditionalIps {
			ips = append(ips, ip.Ip)
		}
	}
	s.mu.Lock()
	s.ips, s.ipsRead = ips, true
	s.mu.Unlock()
}

func (s *criSandbox) latest(name string) *criContainer {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.containers[name]
	if len(list) == 0 {
		return nil
	}
	return list[len(list)-1]
}

func (s *criSandbox) Container(name string) (lifecycle.ContainerStatus, bool) {
	c := s.latest(name)
	if c == nil {
		return lifecycle.ContainerStatus{}, false
	}
	return c.status, true
}

func (s *criSandbox) Previous(name string) (lifecycle.ContainerStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.containers[name]
	if len(list) < 2 {
		return lifecycle.ContainerStatus{}, false
	}
	return list[len(list)-2].status, true
}

// update takes the runtime's list of the sandbox's containers, numbered
// seq by the runtime's listSeq before it was listed, reads the status of
// those that are new or changed state, and returns the names of the
// containers that exited (or that the runtime lost track of) since the
// last update: seen so now and not before, also when this is the first
// sight of them (a container that exits at once can be gone from running
// before any list sees it).
func (s *criSandbox) update(ctx context.Context, rs internalapi.RuntimeService, seq uint64, list []*runtimeapi.Container) []string {
	// One update at a time, and never from a list older than the one
	// applied: a relist that listed before a container was started must
	// not drop what the start's own refresh has put in.
	s.updating.Lock()
	defer s.updating.Unlock()
	if seq < s.listed {
		return nil
	}
	s.listed = seq
	s.mu.Lock()
	known := map[string]*criContainer{}
	for _, cs := range s.containers {
		for _, c := range cs {
			known[c.id] = c
		}
	}
	s.mu.Unlock()
	byName := map[string][]*criContainer{}
	var exited []string
	for _, rc := range list {
		name := rc.GetMetadata().GetName()
		c := known[rc.Id]
		if c == nil || !c.final && c.state != rc.State || c.state == runtimeapi.ContainerState_CONTAINER_EXITED && !c.final {
			st, err := s.readStatus(ctx, rs, rc.Id)
			if err != nil {
				if c == nil {
					continue
				}
			} else {
				// Told once it exits, and once the runtime loses track of it
				// (the lifecycle starts it again).
				changed := c == nil || c.state != st.state
				c = st
				if changed && (c.state == runtimeapi.ContainerState_CONTAINER_EXITED || c.state == runtimeapi.ContainerState_CONTAINER_UNKNOWN) {
					exited = append(exited, name)
				}
			}
		}
		if c.state == runtimeapi.ContainerState_CONTAINER_CREATED {
			continue // created, never started: not an attempt yet
		}
		byName[name] = append(byName[name], c)
	}
	for name := range byName {
		slices.SortFunc(byName[name], func(a, b *criContainer) int { return a.status.Attempt - b.status.Attempt })
	}
	s.mu.Lock()
	s.containers = byName
	s.mu.Unlock()
	return exited
}

// readStatus reads one container's status and makes it the lifecycle's:
// its attempt from the restart count it was created with, its termination
// message from the file mounted at terminationMessagePath (or its log's
// end, with FallbackToLogsOnError).
func (s *criSandbox) readStatus(ctx context.Context, rs internalapi.RuntimeService, id string) (*criContainer, error) {
	resp, err := rs.ContainerStatus(ctx, id, false)
	if err != nil {
		return nil, err
	}
	st := resp.GetStatus()
	info, _ := containerInfoFromAnnotations(st.Annotations)
	c := &criContainer{id: id, state: st.State}
	c.status = lifecycle.ContainerStatus{
		Name:    st.GetMetadata().GetName(),
		Attempt: int(info.RestartCount),
		ID:      s.rt.containerID(id),
		State:   lifecycle.StateRunning,
		Image:   st.GetImage().GetImage(),
		ImageID: st.ImageRef,
	}
	if info.SpecImage != "" {
		c.status.Image = info.SpecImage
	}
	if st.StartedAt > 0 {
		c.status.StartedAt = time.Unix(0, st.StartedAt)
	}
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED && st.State != runtimeapi.ContainerState_CONTAINER_UNKNOWN {
		return c, nil
	}
	c.final = st.State == runtimeapi.ContainerState_CONTAINER_EXITED
	c.status.State = lifecycle.StateExited
	c.status.Unknown = st.State == runtimeapi.ContainerState_CONTAINER_UNKNOWN
	c.status.ExitCode = int(st.ExitCode)
	c.status.FinishedAt = time.Unix(0, st.FinishedAt)
	if st.StartedAt == 0 {
		c.status.StartedAt = c.status.FinishedAt
	}
	c.status.Reason = st.Reason
	if c.status.Reason == "" {
		c.status.Reason = lifecycle.ReasonCompleted
		if st.ExitCode != 0 {
			c.status.Reason = lifecycle.ReasonError
		}
	}
	c.status.Message = st.Message
	if msg := s.terminationMessage(info, st); msg != "" {
		c.status.Message = msg
	}
	return c, nil
}

// Bounds of a termination message, as the kubelet's.
const (
	maxTerminationMessage = 4096
	maxFallbackLogLines   = 80
	maxFallbackLogBytes   = 2048
)

// terminationMessage is what the container wrote to its termination
// message file or, with FallbackToLogsOnError and a failure that wrote
// none, the end of its log.
func (s *criSandbox) terminationMessage(info containerInfo, st *runtimeapi.ContainerStatus) string {
	if info.TerminationMessageFile != "" {
		if f, err := os.Open(info.TerminationMessageFile); err == nil {
			data, _ := io.ReadAll(io.LimitReader(f, maxTerminationMessage))
			f.Close()
			if len(data) > 0 {
				return string(data)
			}
		}
	}
	if info.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError || st.ExitCode == 0 || st.LogPath == "" {
		return ""
	}
	tail := int64(maxFallbackLogLines)
	limit := int64(maxFallbackLogBytes)
	if checkLogPath(s.logDir, st.LogPath) != nil {
		return ""
	}
	var out strings.Builder
	_ = logs.ReadLogs(context.Background(), st.LogPath, "", &logs.LogOptions{TailLines: &tail, LimitBytes: &limit}, nil, &out, &out)
	return out.String()
}

// checkLogPath refuses a container log that is, or lies in a directory
// that is, a symbolic link below the pod's log directory: a container with
// write access there (a hostPath volume of the pod logs directory) must not
// make kubectl logs, or its termination message, read another file of the
// node. The runtime's log reader opens the path again after this check.
func checkLogPath(dir, path string) error {
	f, err := nofollow.Open(dir, path, os.O_RDONLY, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // the reader says so
	case err != nil:
		return fmt.Errorf("container log: %w", err)
	}
	f.Close()
	return nil
}

// sandboxConfig is the config the sandbox was run with, rebuilt from the
// pod for a sandbox an earlier agent ran.
func (s *criSandbox) sandboxConfig(pod *corev1.Pod) (*runtimeapi.PodSandboxConfig, error) {
	s.mu.Lock()
	cfg := s.config
	s.mu.Unlock()
	if cfg != nil {
		return cfg, nil
	}
	dns, _, err := podDNSConfig(pod, s.rt.dns)
	if err != nil {
		return nil, err
	}
	cfg, err = sandboxConfig(pod, s.rt.node, sandboxParams{Attempt: s.attempt, DNS: dns, CgroupParent: cgroupParent(pod)})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.config = cfg
	s.mu.Unlock()
	return cfg, nil
}

// StartContainer pulls the images of the image volumes the container
// mounts, then its own image, as their pull policies say, creates the
// container from the pod's spec and starts it. Problems a change can cure
// (the image, the configuration) are WaitErrors; a container that was
// created but did not start is an exited attempt.
func (s *criSandbox) StartContainer(ctx context.Context, spec lifecycle.ContainerSpec) error {
	pod, c := spec.Pod, spec.Container
	rs, _, err := s.rt.conn.services(ctx)
	if err != nil {
		return &lifecycle.WaitError{Reason: "CreateContainerError", Message: err.Error(), Retry: 5 * time.Second}
	}
	sbCfg, err := s.sandboxConfig(pod)
	if err != nil {
		return &lifecycle.WaitError{Reason: "CreateContainerConfigError", Message: err.Error(), Retry: 10 * time.Second, Warn: true}
	}
	volumeRefs, err := s.rt.images.ensureVolumes(ctx, pod, spec.Mounts, sbCfg)
	if err != nil {
		return err
	}
	img, err := s.rt.images.ensure(ctx, pod, c.Image, pullPolicy(c.Image, c.ImagePullPolicy), sbCfg)
	if err != nil {
		return err
	}
	params := containerParams{
		Attempt:  uint32(spec.Attempt),
		Command:  spec.Command,
		Args:     spec.Args,
		Env:      envKeyValues(spec.Env),
		ImageRef: img.ref, ImageUID: img.uid, ImageUsername: img.username,
	}
	if spec.TargetContainer != "" {
		if t := s.latest(spec.TargetContainer); t != nil {
			params.TargetID = t.id
		}
	}
	for _, m := range spec.Mounts {
		h := s.rt.handlerOf(pod)
		rro, err := lifecycle.RecursiveReadOnly(m, h.name, h.recursiveReadOnlyMounts)
		if err != nil {
			return &lifecycle.WaitError{Reason: "CreateContainerConfigError", Message: err.Error(), Retry: 10 * time.Second, Warn: true}
		}
		params.Mounts = append(params.Mounts, criMount(m, volumeRefs, rro))
	}
	if needsHostsFile(pod, s.IPs()) {
		if _, err := os.Stat(s.hostsFile()); err == nil {
			params.HostsFile = s.hostsFile()
		}
	}
	if c.TerminationMessagePath != "" {
		f, err := s.terminationMessageFile(c.Name, spec.Attempt)
		if err != nil {
			return &lifecycle.WaitError{Reason: "CreateContainerError", Message: err.Error(), Retry: 10 * time.Second, Warn: true}
		}
		params.TerminationMessageFile = f
	}
	cfg, err := containerConfig(pod, c, s.rt.node, params)
	if err != nil {
		return &lifecycle.WaitError{Reason: "CreateContainerConfigError", Message: err.Error(), Retry: 10 * time.Second, Warn: true}
	}
	if s.rt.devices != nil {
		devices, err := s.rt.devices.Allocate(ctx, pod, c)
		if err != nil {
			return &lifecycle.WaitError{Reason: "UnexpectedAdmissionError", Message: err.Error(), Retry: 10 * time.Second, Warn: true}
		}
		withDevices(cfg, devices)
	}
	s.removeUnstarted(ctx, rs, c.Name, spec.Attempt)
	id, err := rs.CreateContainer(ctx, s.id, cfg, sbCfg)
	if err != nil {
		return &lifecycle.WaitError{Reason: "CreateContainerError", Message: err.Error(), Retry: 10 * time.Second, Warn: true}
	}
	s.rt.recorder.Eventf(pod, corev1.EventTypeNormal, "Created", "Created container: %s", c.Name)
	if err := s.rt.linkLog(pod, c.Name, id, filepath.Join(s.logDir, cfg.LogPath)); err != nil {
		klog.FromContext(ctx).V(2).Info("Linking the container's log failed", "container", c.Name, "err", err)
	}
	startErr := rs.StartContainer(ctx, id)
	// The attempt before this one stays for `kubectl logs --previous`.
	s.removeDeadBefore(ctx, rs, c.Name, spec.Attempt-1)
	s.refresh(ctx, rs)
	if startErr != nil {
		return fmt.Errorf("start container: %w", startErr)
	}
	return nil
}

// terminationMessageFile creates the empty host file of one attempt's
// termination message, writable by any user the container runs as.
func (s *criSandbox) terminationMessageFile(name string, attempt int) (string, error) {
	dir := filepath.Join(s.rt.podDir(s.uid), "containers", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("termination message file: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%d.termination-log", attempt))
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		return "", fmt.Errorf("termination message file: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		return "", fmt.Errorf("termination message file: %w", err)
	}
	return path, nil
}

// RemoveDeadBefore removes the exited attempts of a container older than
// attempt from the runtime.
func (s *criSandbox) RemoveDeadBefore(ctx context.Context, name string, attempt int) {
	rs, _, err := s.rt.conn.services(ctx)
	if err != nil {
		return
	}
	s.removeDeadBefore(ctx, rs, name, attempt)
}

// removeDeadBefore removes the exited attempts of a container older than
// keep.
func (s *criSandbox) removeDeadBefore(ctx context.Context, rs internalapi.RuntimeService, name string, keep int) {
	s.mu.Lock()
	var old []*criContainer
	for _, c := range s.containers[name] {
		if c.status.Attempt < keep && c.status.State == lifecycle.StateExited {
			old = append(old, c)
		}
	}
	s.mu.Unlock()
	for _, c := range old {
		if err := rs.RemoveContainer(ctx, c.id); err != nil {
			klog.FromContext(ctx).V(2).Info("Removing a dead container failed; retrying later", "container", name, "id", c.id, "err", err)
			continue
		}
		s.rt.removeLogLink(c.id)
		_ = os.Remove(filepath.Join(s.rt.podDir(s.uid), "containers", name, fmt.Sprintf("%d.termination-log", c.status.Attempt)))
	}
}

// removeUnstarted removes a container of this name and attempt that was
// created and never started (an agent stopped between the two): its name
// is taken in the runtime.
func (s *criSandbox) removeUnstarted(ctx context.Context, rs internalapi.RuntimeService, name string, attempt int) {
	list, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: s.id,
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_CREATED}})
	if err != nil {
		return
	}
	for _, c := range list {
		if c.GetMetadata().GetName() == name && c.GetMetadata().GetAttempt() == uint32(attempt) {
			_ = rs.RemoveContainer(ctx, c.Id)
		}
	}
}

// refresh updates the snapshot of this sandbox's containers now.
func (s *criSandbox) refresh(ctx context.Context, rs internalapi.RuntimeService) {
	seq := s.rt.listSeq.Add(1)
	list, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: s.id})
	if err != nil {
		s.rt.kick()
		return
	}
	// An exit seen here is not seen again by the relist: tell it now.
	s.rt.notifyExits(s.uid, s.update(ctx, rs, seq, list))
}

func (s *criSandbox) StopContainer(ctx context.Context, name string, grace time.Duration) error {
	c := s.latest(name)
	if c == nil || c.status.State != lifecycle.StateRunning && !c.status.Unknown {
		return nil // a container the runtime lost track of may still run
	}
	rs, _, err := s.rt.conn.services(ctx)
	if err != nil {
		return err
	}
	if err := rs.StopContainer(ctx, c.id, int64(grace.Round(time.Second)/time.Second)); err != nil {
		return err
	}
	s.refresh(ctx, rs)
	return nil
}

// UpdateResources applies the container's resources, as the pod now has
// them, to its running attempt.
func (s *criSandbox) UpdateResources(ctx context.Context, pod *corev1.Pod, c *corev1.Container) error {
	running, err := s.running(c.Name)
	if err != nil {
		return err
	}
	r, err := containerResources(pod, c, s.rt.node)
	if err != nil {
		return err
	}
	rs, _, err := s.rt.conn.services(ctx)
	if err != nil {
		return err
	}
	// The pod's cgroup bounds its containers': it grows before the
	// container does (a shrink fails then, the kernel refusing a pod quota
	// under a container's) and shrinks after.
	_ = ensurePodCgroup(pod, s.rt.node, cgroupFS)
	if err := rs.UpdateContainerResources(ctx, running.id, &runtimeapi.ContainerResources{Linux: r}); err != nil {
		return err
	}
	if err := ensurePodCgroup(pod, s.rt.node, cgroupFS); err != nil {
		klog.FromContext(ctx).Error(err, "Unable to resize the pod's cgroup", "pod", klog.KObj(pod))
	}
	return nil
}

// running is the latest attempt of a running container, or an error that
// says it does not run.
func (s *criSandbox) running(name string) (*criContainer, error) {
	c := s.latest(name)
	if c == nil || c.status.State != lifecycle.StateRunning {
		return nil, fmt.Errorf("container %q is not running", name)
	}
	return c, nil
}

func (s *criSandbox) ExecSync(ctx context.Context, container string, argv []string) ([]byte, int, error) {
	c, err := s.running(container)
	if err != nil {
		return nil, 0, err
	}
	rs, _, err := s.rt.conn.services(ctx)
	if err != nil {
		return nil, 0, err
	}
	var timeout time.Duration
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Second)
	}
	stdout, stderr, err := rs.ExecSync(ctx, c.id, argv, timeout)
	out := append(stdout, stderr...)
	if code, ok := exitCode(err); ok {
		return out, code, nil
	}
	return out, 0, err
}

func (s *criSandbox) Exec(ctx context.Context, container string, argv []string, streams lifecycle.StreamIO) (int, error) {
	c, err := s.running(container)
	if err != nil {
		return 0, err
	}
	rs, _, err := s.rt.conn.services(ctx)
	if err != nil {
		return 0, err
	}
	resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{
		ContainerId: c.id, Cmd: argv, Tty: streams.TTY,
		Stdin: streams.Stdin != nil, Stdout: streams.Stdout != nil, Stderr: streams.Stderr != nil && !streams.TTY,
	})
	if err != nil {
		return 0, err
	}
	err = streamTo(ctx, resp.Url, streams)
	if code, ok := exitCode(err); ok {
		return code, nil
	}
	return 0, err
}

func (s *criSandbox) Attach(ctx context.Context, container string, streams lifecycle.StreamIO) error {
	c, err := s.running(container)
	if err != nil {
		return err
	}
	rs, _, err := s.rt.conn.services(ctx)
	if err != nil {
		return err
	}
	resp, err := rs.Attach(ctx, &runtimeapi.AttachRequest{
		ContainerId: c.id, Tty: streams.TTY,
		Stdin: streams.Stdin != nil, Stdout: streams.Stdout != nil, Stderr: streams.Stderr != nil && !streams.TTY,
	})
	if err != nil {
		return err
	}
	return streamTo(ctx, resp.Url, streams)
}

func (s *criSandbox) PortForward(ctx context.Context, port int32, stream io.ReadWriteCloser) error {
	rs, _, err := s.rt.conn.services(ctx)
	if err != nil {
		return err
	}
	resp, err := rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: s.id, Port: []int32{port}})
	if err != nil {
		return err
	}
	return forwardTo(ctx, resp.Url, port, stream)
}

// ReadLogs reads one attempt's log with the CRI log reader; a followed log
// ends when the container stops.
func (s *criSandbox) ReadLogs(ctx context.Context, container string, attempt int, opts lifecycle.LogOptions, w io.Writer) error {
	s.mu.Lock()
	var c *criContainer
	for _, cc := range s.containers[container] {
		if cc.status.Attempt == attempt {
			c = cc
		}
	}
	s.mu.Unlock()
	if c == nil {
		return fmt.Errorf("container %q attempt %d: %w", container, attempt, os.ErrNotExist)
	}
	rs, _, err := s.rt.conn.services(ctx)
	if err != nil {
		return err
	}
	lo := &logs.LogOptions{Follow: opts.Follow, Timestamp: opts.Timestamps, Since: opts.Since}
	if opts.TailLines >= 0 {
		tail := int64(opts.TailLines)
		lo.TailLines = &tail
	}
	if opts.LimitBytes > 0 {
		lo.LimitBytes = &opts.LimitBytes
	}
	path := filepath.Join(s.logDir, containerLogPath(container, uint32(attempt)))
	if err := checkLogPath(s.logDir, path); err != nil {
		return err
	}
	if opts.Opened != nil {
		opts.Opened()
	}
	err = logs.ReadLogs(ctx, path, c.id, lo, rs, w, w)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
