package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/atomicfile"
	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/mountinfo"
	"github.com/nodelet/nodelet/pkg/podrules"
)

// relistPeriod is how often the runtime's sandboxes and containers are
// listed again, the backstop of the container events.
const relistPeriod = time.Second

// criRuntime is the pod lifecycle's runtime over a CRI runtime service. It
// keeps a snapshot of the node's sandboxes and containers (those labelled
// with the node's name), refreshed on container events, after each call
// that changes them, and every relistPeriod; a runtime that does not
// answer leaves the snapshot as it was, so nothing looks exited because
// the runtime is down.
type criRuntime struct {
	conn     *connection
	node     nodeSettings
	rootDir  string
	recorder record.EventRecorder
	clock    clock.WithTicker
	images   *imageManager
	// containerLogsDir holds the links to the containers' logs.
	containerLogsDir string
	// handler resolves a RuntimeClass name to its runtime handler.
	handler func(name string) (string, error)
	dns     dnsOptions

	mu        sync.Mutex
	sandboxes map[types.UID]*criSandbox
	onExit    func(uid types.UID, container string)
	// runtimeName is the runtime's name from Version, the scheme of
	// container IDs.
	runtimeName string
	// handlers are the runtime's handlers with their features, from its
	// status (setHandlers).
	handlers []corev1.NodeRuntimeHandler

	relistNow chan struct{}
	// devices gives containers the devices they request; nil for none.
	devices Devices
	// listSeq numbers the lists of containers in the order they were
	// asked for, so an older list never replaces a newer one.
	listSeq atomic.Uint64
}

var _ lifecycle.Runtime = (*criRuntime)(nil)

func (r *criRuntime) OnExit(f func(uid types.UID, container string)) {
	r.mu.Lock()
	r.onExit = f
	r.mu.Unlock()
}

// kick asks the relist loop to relist now.
func (r *criRuntime) kick() {
	select {
	case r.relistNow <- struct{}{}:
	default:
	}
}

// run relists every relistPeriod, and at once when kicked, until ctx ends.
func (r *criRuntime) run(ctx context.Context) {
	t := r.clock.NewTicker(relistPeriod)
	defer t.Stop()
	for {
		if err := r.relist(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(4).Info("Relisting the runtime failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-r.relistNow:
		}
	}
}

// watchEvents kicks the relist on every container event the runtime
// sends, and follows the stream again when it breaks.
func (r *criRuntime) watchEvents(ctx context.Context) {
	for ctx.Err() == nil {
		rs, _, err := r.conn.services(ctx)
		if err == nil {
			ch := make(chan *runtimeapi.ContainerEventResponse, 64)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case _, ok := <-ch:
						if !ok {
							return // the stream ended: follow it again
						}
						r.kick()
					case <-ctx.Done():
						return
					}
				}
			}()
			err = rs.GetContainerEvents(ctx, ch, nil)
			close(ch)
			<-done
		}
		if ctx.Err() != nil {
			return
		}
		klog.FromContext(ctx).V(4).Info("Container events stream ended; following it again", "err", err)
		select {
		case <-ctx.Done():
		case <-r.clock.After(5 * time.Second):
		}
	}
}

// relist refreshes the snapshot of every sandbox and container of the node,
// and tells the lifecycle about containers that exited since.
func (r *criRuntime) relist(ctx context.Context) error {
	rs, _, err := r.conn.services(ctx)
	if err != nil {
		return err
	}
	if r.runtimeName == "" {
		if v, err := rs.Version(ctx, ""); err == nil {
			r.mu.Lock()
			r.runtimeName = v.RuntimeName
			r.mu.Unlock()
		}
	}
	listed := r.listSeq.Add(1)
	sandboxes, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: nodeSelector(r.node.NodeName)})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	seq := r.listSeq.Add(1)
	containers, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: nodeSelector(r.node.NodeName)})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	r.apply(ctx, rs, listed, sandboxes, seq, containers)
	return nil
}

// apply makes the snapshot what the lists show: the sandboxes listed after
// the sequence number listed was taken, the containers after seq. A
// sandbox set up after the list began (numbered after it) may be missing
// from it, or newer than what it shows: it is kept as it is, never dropped
// or replaced by an object of its own that its pod's worker would not see.
func (r *criRuntime) apply(ctx context.Context, rs internalapi.RuntimeService, listed uint64, sandboxes []*runtimeapi.PodSandbox, seq uint64, containers []*runtimeapi.Container) {
	byPod := map[types.UID][]*runtimeapi.PodSandbox{}
	for _, s := range sandboxes {
		ref, err := podRefFromLabels(s.Labels)
		if err != nil {
			continue
		}
		byPod[ref.UID] = append(byPod[ref.UID], s)
	}
	bySandbox := map[string][]*runtimeapi.Container{}
	for _, c := range containers {
		bySandbox[c.PodSandboxId] = append(bySandbox[c.PodSandboxId], c)
	}
	var exited []*criSandbox
	var names [][]string
	r.mu.Lock()
	for uid, list := range byPod {
		// The newest sandbox is the pod's; older ones are left from a
		// sandbox that died and are removed with the pod.
		sort.Slice(list, func(i, j int) bool { return list[i].CreatedAt > list[j].CreatedAt })
		s := list[0]
		sb := r.sandboxes[uid]
		if sb != nil && sb.id != s.Id && sb.since > listed {
			continue
		}
		if sb == nil || sb.id != s.Id {
			sb = &criSandbox{rt: r, uid: uid, id: s.Id, since: seq, created: time.Unix(0, s.CreatedAt), containers: map[string][]*criContainer{}}
			sb.logDir = podLogDir(r.node.PodLogsDir, s.GetMetadata().GetNamespace(), s.GetMetadata().GetName(), uid)
			r.sandboxes[uid] = sb
		}
		sb.mu.Lock()
		sb.ready = s.State == runtimeapi.PodSandboxState_SANDBOX_READY
		sb.mu.Unlock()
	}
	for uid, sb := range r.sandboxes {
		if _, ok := byPod[uid]; !ok && sb.since < listed {
			delete(r.sandboxes, uid)
		}
	}
	current := make([]*criSandbox, 0, len(r.sandboxes))
	for _, sb := range r.sandboxes {
		current = append(current, sb)
	}
	r.mu.Unlock()
	for _, sb := range current {
		if gone := sb.update(ctx, rs, seq, bySandbox[sb.id]); len(gone) > 0 {
			exited = append(exited, sb)
			names = append(names, gone)
		}
		sb.fillIPs(ctx, rs)
	}
	for i, sb := range exited {
		r.notifyExits(sb.uid, names[i])
	}
}

// notifyExits tells the lifecycle that containers of a pod exited.
func (r *criRuntime) notifyExits(uid types.UID, names []string) {
	r.mu.Lock()
	notify := r.onExit
	r.mu.Unlock()
	if notify == nil {
		return
	}
	for _, name := range names {
		notify(uid, name)
	}
}

func (r *criRuntime) Sandboxes(ctx context.Context) ([]lifecycle.Sandbox, error) {
	if err := r.relist(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]lifecycle.Sandbox, 0, len(r.sandboxes))
	for _, sb := range r.sandboxes {
		out = append(out, sb)
	}
	return out, nil
}

// podDir holds what the agent keeps for a pod beside the runtime: its
// /etc/hosts and its containers' termination message files.
func (r *criRuntime) podDir(uid types.UID) string {
	return filepath.Join(r.rootDir, "pods", string(uid))
}

// EnsureSandbox runs the pod's sandbox: its DNS, host name, ports,
// namespaces, sysctls, cgroup and RuntimeClass handler as the kubelet sets
// them, then writes its /etc/hosts from the IPs CNI gave it. A sandbox that
// no longer runs is replaced by a new one.
func (r *criRuntime) EnsureSandbox(ctx context.Context, spec lifecycle.SandboxSpec) (lifecycle.Sandbox, error) {
	pod := spec.Pod
	rs, _, err := r.conn.services(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	old := r.sandboxes[pod.UID]
	r.mu.Unlock()
	var attempt uint32
	if old != nil {
		if old.Ready() {
			return old, nil
		}
		attempt = old.attempt + 1
		if err := r.removeSandboxes(ctx, pod.UID); err != nil {
			return nil, err
		}
	}
	handler := ""
	if name := pod.Spec.RuntimeClassName; name != nil && *name != "" {
		if handler, err = r.handler(*name); err != nil {
			return nil, fmt.Errorf("RuntimeClass %q: %w", *name, err)
		}
	}
	dns, warnings, err := podDNSConfig(pod, r.dns)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		r.recorder.Event(pod, corev1.EventTypeWarning, w.Reason, w.Message)
	}
	cfg, err := sandboxConfig(pod, r.node, sandboxParams{Attempt: attempt, DNS: dns, CgroupParent: cgroupParent(pod)})
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return nil, fmt.Errorf("pod log directory: %w", err)
	}
	if err := ensurePodCgroup(pod, r.node, cgroupFS); err != nil {
		// The runtime still makes the cgroup, without the pod's limits.
		klog.FromContext(ctx).Error(err, "Unable to set the pod's cgroup limits", "pod", klog.KObj(pod))
	}
	id, err := rs.RunPodSandbox(ctx, cfg, handler)
	if err != nil {
		return nil, err
	}
	sb := &criSandbox{rt: r, uid: pod.UID, id: id, attempt: attempt, config: cfg, logDir: cfg.LogDirectory,
		since: r.listSeq.Add(1), created: r.clock.Now(), ready: true, containers: map[string][]*criContainer{}}
	sb.fillIPs(ctx, rs)
	if needsHostsFile(pod, sb.IPs()) {
		content, err := podHostsFile(pod, sb.IPs(), r.dns.ClusterDomain, etcHostsPath)
		if err == nil {
			err = os.MkdirAll(r.podDir(pod.UID), 0o755)
		}
		if err == nil {
			// Replaced, never written in place: containers that bind-mount
			// the old file keep it. It is written before the first
			// container starts and rewritten only with a new sandbox.
			err = atomicfile.Write(sb.hostsFile(), content, atomicfile.Options{Perm: 0o644})
		}
		if err != nil {
			return nil, fmt.Errorf("pod /etc/hosts: %w", err)
		}
	}
	r.mu.Lock()
	r.sandboxes[pod.UID] = sb
	r.mu.Unlock()
	return sb, nil
}

// cgroupParent is the pod's cgroup below the pods' (podsCgroup), by QoS
// class, in the cgroupfs driver's form. The runtime creates it with the
// pod's first sandbox; RemoveSandbox removes it.
func cgroupParent(pod *corev1.Pod) string {
	return podCgroup(podrules.QOSClass(pod), pod.UID)
}

func podCgroup(qos corev1.PodQOSClass, uid types.UID) string {
	return qosCgroup(qos) + "/pod" + string(uid)
}

// RemovePodCgroups removes the pod's cgroup (of whichever QoS class) from
// every hierarchy: the runtime removes only the containers' and the
// sandbox's below it. Once its containers are gone it is empty — unless the
// runtime lost one (killed while it started it): what still runs below the
// pod's cgroup is then killed and its cgroups removed, deepest first, as
// the kubelet does when it destroys a pod's cgroup. The provider removes it
// with the pod; make clean (hack/teardown) removes those of the pods an
// agent no longer running left.
func RemovePodCgroups(uid types.UID) error {
	hierarchies, err := mountinfo.CgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hierarchies {
		for _, qos := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
			if err := removeCgroupTree(filepath.Join(h, podCgroup(qos, uid))); err != nil {
				errs = append(errs, fmt.Errorf("remove pod cgroup: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// RemoveQoSCgroups removes, from every hierarchy, the parents of the
// pods' cgroups (podsCgroup and its burstable and besteffort, which
// EnsureQOSCgroups made) where nothing is left in them: what a test run or
// a teardown leaves once every pod is removed. The provider makes them
// again at its next start. One still in use (another agent's pods) stays,
// and none existing is no error; it never kills anything.
func RemoveQoSCgroups() error {
	hierarchies, err := mountinfo.CgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hierarchies {
		for _, dir := range []string{qosCgroup(corev1.PodQOSBurstable), qosCgroup(corev1.PodQOSBestEffort), podsCgroup} {
			err := syscall.Rmdir(filepath.Join(h, dir))
			if err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.ENOTEMPTY) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", filepath.Join(h, dir), err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroupTree removes a cgroup and those below it, killing what runs
// in them first. A cgroup that is gone is not an error.
func removeCgroupTree(dir string) error {
	if err := os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for _, d := range dirs {
		data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	// Killed processes leave their cgroups a moment later.
	var err error
	for range 50 {
		err = nil
		for i := len(dirs) - 1; i >= 0; i-- {
			if e := os.Remove(dirs[i]); e != nil && !errors.Is(e, fs.ErrNotExist) {
				err = e
			}
		}
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// RemoveSandbox stops and removes every sandbox of the pod with its
// containers, their log links and the pod's directory.
func (r *criRuntime) RemoveSandbox(ctx context.Context, uid types.UID) error {
	if err := r.removeSandboxes(ctx, uid); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.sandboxes, uid)
	r.mu.Unlock()
	if r.devices != nil {
		r.devices.Release(uid)
	}
	if err := RemovePodCgroups(uid); err != nil {
		return err
	}
	logDirs, _ := filepath.Glob(filepath.Join(r.node.PodLogsDir, "*_"+string(uid)))
	for _, d := range logDirs {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("remove pod log directory: %w", err)
		}
	}
	dir := r.podDir(uid)
	mounted, err := mountinfo.Under(dir)
	if err != nil {
		return err
	}
	if len(mounted) > 0 {
		return fmt.Errorf("pod directory %s still has mounts: %v", dir, mounted)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove pod directory: %w", err)
	}
	return nil
}

// StopSandbox stops the pod's sandboxes (lifecycle's SandboxStopper), as
// the kubelet stops a terminal pod's: the runtime tears down their network
// and ends their pause process, and keeps their containers, whose records
// and logs the pod's status and kubectl logs still read.
func (r *criRuntime) StopSandbox(ctx context.Context, uid types.UID) error {
	rs, list, err := r.podSandboxes(ctx, uid)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range list {
		if s.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if err := rs.StopPodSandbox(ctx, s.Id); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox %s: %w", s.Id, err))
		}
	}
	r.mu.Lock()
	sb := r.sandboxes[uid]
	r.mu.Unlock()
	if sb != nil && len(errs) == 0 {
		sb.mu.Lock()
		sb.ready = false
		sb.mu.Unlock()
	}
	return errors.Join(errs...)
}

// podSandboxes lists the pod's sandboxes in the runtime, with the
// runtime service that listed them.
func (r *criRuntime) podSandboxes(ctx context.Context, uid types.UID) (internalapi.RuntimeService, []*runtimeapi.PodSandbox, error) {
	rs, _, err := r.conn.services(ctx)
	if err != nil {
		return nil, nil, err
	}
	list, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: podSelector(r.node.NodeName, uid)})
	if err != nil {
		return nil, nil, fmt.Errorf("list the pod's sandboxes: %w", err)
	}
	return rs, list, nil
}

func (r *criRuntime) removeSandboxes(ctx context.Context, uid types.UID) error {
	rs, list, err := r.podSandboxes(ctx, uid)
	if err != nil {
		return err
	}
	containers, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: podSelector(r.node.NodeName, uid)})
	if err != nil {
		return fmt.Errorf("list the pod's containers: %w", err)
	}
	var errs []error
	for _, c := range containers {
		r.removeLogLink(c.Id)
	}
	for _, s := range list {
		if err := rs.StopPodSandbox(ctx, s.Id); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox %s: %w", s.Id, err))
			continue
		}
		if err := rs.RemovePodSandbox(ctx, s.Id); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox %s: %w", s.Id, err))
		}
	}
	return errors.Join(errs...)
}

// containerID is an ID as the API shows it: <runtime>://<id>.
func (r *criRuntime) containerID(id string) string {
	r.mu.Lock()
	name := r.runtimeName
	r.mu.Unlock()
	if name == "" {
		name = "cri"
	}
	return name + "://" + id
}
