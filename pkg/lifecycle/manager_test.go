package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/lifecycle/env"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

// fakeRuntime is a runtime whose containers run on paper: a start makes a
// running attempt, and the test ends attempts with exit.
type fakeRuntime struct {
	ips []string
	// down makes Sandboxes fail, as a runtime that does not answer.
	down atomic.Bool
	// noResize makes UpdateResources unsupported, as the process runtime.
	noResize bool
	// deadSandboxes makes as many new sandboxes dead from the start: not
	// ready, refusing containers.
	deadSandboxes int
	// unreachable fails as many container starts as the runtime went
	// away during: an error, no record of the attempt, no exit to tell.
	unreachable atomic.Int32
	// crash names containers that exit 1 as soon as they start.
	crash map[string]bool
	// readLogs, when set, is every sandbox's ReadLogs.
	readLogs func(ctx context.Context, opts LogOptions, w io.Writer) error
	// failRemove makes RemoveSandbox remove the sandbox and fail, as an
	// agent killed right after the removal: its caller never learns.
	failRemove atomic.Bool
	// halfRemove makes RemoveSandbox remove the sandbox's container
	// records and fail with the sandbox dead but still listed, as an agent
	// killed while the runtime removed it piece by piece.
	halfRemove atomic.Bool
	// ensured counts the sandboxes set up (EnsureSandbox calls).
	ensured atomic.Int32
	// failSandboxes fails as many sandbox set-ups.
	failSandboxes atomic.Int32
	// recursiveReadOnly: its handler makes mounts read-only recursively.
	recursiveReadOnly bool
	// sandboxesStopped counts StopSandbox calls.
	sandboxesStopped atomic.Int32
	// hooksTogether holds each "hook" exec until that many have begun (or
	// for 2 seconds): hooks run at once get through together, hooks run
	// one after the other each wait out the 2 seconds.
	hooksTogether int32
	hooksBegun    atomic.Int32
	// gates hold each container's "gate" exec (a hook's command) until
	// the test opens the container's gate, or the exec's context ends.
	gates map[string]chan struct{}

	mu        sync.Mutex
	sandboxes map[types.UID]*fakeSandbox
	onExit    func(types.UID, string)
	events    []string                 // "start <name>", "stop <name>"
	graces    map[string]time.Duration // the grace of each container's last stop
}

func (r *fakeRuntime) Sandboxes(context.Context) ([]Sandbox, error) {
	if r.down.Load() {
		return nil, errors.New("runtime not answering")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Sandbox
	for _, sb := range r.sandboxes {
		out = append(out, sb)
	}
	return out, nil
}

func (r *fakeRuntime) EnsureSandbox(_ context.Context, spec SandboxSpec) (Sandbox, error) {
	r.ensured.Add(1)
	if r.failSandboxes.Add(-1) >= 0 {
		return nil, errors.New("no network for the sandbox")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := &fakeSandbox{rt: r, uid: spec.Pod.UID, attempts: map[string][]ContainerStatus{}}
	if r.deadSandboxes > 0 {
		r.deadSandboxes--
		sb.dead.Store(true)
	}
	r.sandboxes[spec.Pod.UID] = sb
	return sb, nil
}

func (r *fakeRuntime) RemoveSandbox(_ context.Context, uid types.UID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb := r.sandboxes[uid]; sb != nil && r.halfRemove.Load() {
		sb.dead.Store(true)
		sb.mu.Lock()
		clear(sb.attempts)
		sb.mu.Unlock()
		return errors.New("the agent died here")
	}
	delete(r.sandboxes, uid)
	if r.failRemove.Load() {
		return errors.New("the agent died here")
	}
	return nil
}

// StopSandbox stops the pod's sandbox, its records kept: it is no longer
// ready, and has no IPs (as containerd's stopped sandbox).
func (r *fakeRuntime) StopSandbox(_ context.Context, uid types.UID) error {
	r.sandboxesStopped.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb := r.sandboxes[uid]; sb != nil {
		sb.dead.Store(true)
		sb.stopped.Store(true)
	}
	return nil
}

func (r *fakeRuntime) RecursiveReadOnlyHandler(*corev1.Pod) (string, bool) {
	return "fake", r.recursiveReadOnly
}

func (r *fakeRuntime) OnExit(f func(types.UID, string)) { r.onExit = f }

func (r *fakeRuntime) record(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *fakeRuntime) recorded() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// gate is the gate of the container name, made when first asked for.
func (r *fakeRuntime) gate(name string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gates == nil {
		r.gates = map[string]chan struct{}{}
	}
	g, ok := r.gates[name]
	if !ok {
		g = make(chan struct{})
		r.gates[name] = g
	}
	return g
}

// open lets the "gate" execs of the container name through, now and later.
func (r *fakeRuntime) open(name string) { close(r.gate(name)) }

// sandbox is the pod's sandbox, nil when it has none.
func (r *fakeRuntime) sandbox(uid types.UID) *fakeSandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sandboxes[uid]
}

// exit ends the running attempt of a container of the pod with code.
func (r *fakeRuntime) exit(uid types.UID, name string, code int) bool {
	sb := r.sandbox(uid)
	if sb == nil || !sb.end(name, code) {
		return false
	}
	r.onExit(uid, name)
	return true
}

type fakeSandbox struct {
	rt   *fakeRuntime
	uid  types.UID
	dead atomic.Bool
	// stopped: StopSandbox stopped it; it has no IPs.
	stopped atomic.Bool
	// dying: the sandbox died but Ready does not tell yet (a process
	// runtime's sandbox that closed its socket and waits for its
	// containers to die): container starts are refused with
	// ErrSandboxGone, no attempt recorded.
	dying atomic.Bool
	// readyCalls counts the looks at whether it is ready (Ready calls).
	readyCalls atomic.Int32

	mu       sync.Mutex
	attempts map[string][]ContainerStatus
}

func (s *fakeSandbox) UID() types.UID { return s.uid }
func (s *fakeSandbox) Ready() bool    { s.readyCalls.Add(1); return !s.dead.Load() }
func (s *fakeSandbox) IPs() []string {
	if s.stopped.Load() {
		return nil
	}
	return s.rt.ips
}

func (s *fakeSandbox) Container(name string) (ContainerStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.attempts[name]
	if len(list) == 0 {
		return ContainerStatus{}, false
	}
	return list[len(list)-1], true
}

func (s *fakeSandbox) Previous(name string) (ContainerStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.attempts[name]
	if len(list) < 2 {
		return ContainerStatus{}, false
	}
	return list[len(list)-2], true
}

func (s *fakeSandbox) RemoveDeadBefore(_ context.Context, name string, attempt int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[name] = slices.DeleteFunc(s.attempts[name], func(st ContainerStatus) bool {
		return st.Attempt < attempt && st.State == StateExited
	})
}

func (s *fakeSandbox) StartContainer(_ context.Context, spec ContainerSpec) error {
	if s.dead.Load() {
		return fmt.Errorf("container %s: pod sandbox: not running", spec.Container.Name)
	}
	if s.dying.Load() {
		s.rt.record("refused " + spec.Container.Name)
		return fmt.Errorf("start container %s: connection refused: %w", spec.Container.Name, ErrSandboxGone)
	}
	if s.rt.unreachable.Load() > 0 {
		s.rt.unreachable.Add(-1)
		s.rt.record("unreachable " + spec.Container.Name)
		return errors.New("rpc error: code = Unavailable desc = error reading from server: EOF")
	}
	st := ContainerStatus{
		Name: spec.Container.Name, Attempt: spec.Attempt, ID: fmt.Sprintf("fake://%s/%d", spec.Container.Name, spec.Attempt),
		State: StateRunning, StartedAt: time.Now(),
	}
	if s.rt.crash[spec.Container.Name] {
		st.State, st.ExitCode, st.FinishedAt, st.Reason = StateExited, 1, time.Now(), ReasonError
	}
	s.mu.Lock()
	s.attempts[spec.Container.Name] = append(s.attempts[spec.Container.Name], st)
	s.mu.Unlock()
	s.rt.record("start " + spec.Container.Name)
	return nil
}

// lose makes the running attempt of a container one the runtime lost
// track of, as containerd's CONTAINER_UNKNOWN, and tells the lifecycle.
func (r *fakeRuntime) lose(uid types.UID, name string) bool {
	sb := r.sandbox(uid)
	if sb == nil || !sb.end(name, 255) {
		return false
	}
	sb.mu.Lock()
	list := sb.attempts[name]
	list[len(list)-1].Unknown, list[len(list)-1].Reason = true, "Unknown"
	sb.mu.Unlock()
	r.onExit(uid, name)
	return true
}

func (s *fakeSandbox) end(name string, code int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.attempts[name]
	if len(list) == 0 || list[len(list)-1].State != StateRunning {
		return false
	}
	st := &list[len(list)-1]
	st.State, st.ExitCode, st.FinishedAt, st.Reason = StateExited, code, time.Now(), ReasonCompleted
	if code != 0 {
		st.Reason = ReasonError
	}
	return true
}

func (s *fakeSandbox) StopContainer(_ context.Context, name string, grace time.Duration) error {
	s.rt.mu.Lock()
	if s.rt.graces == nil {
		s.rt.graces = map[string]time.Duration{}
	}
	s.rt.graces[name] = grace
	s.rt.mu.Unlock()
	s.mu.Lock()
	if list := s.attempts[name]; len(list) > 0 && list[len(list)-1].Unknown {
		list[len(list)-1].Unknown = false // stopped, it is exited
		s.mu.Unlock()
		s.rt.record("stop " + name)
		return nil
	}
	s.mu.Unlock()
	if s.end(name, 143) {
		s.rt.record("stop " + name)
		s.rt.onExit(s.uid, name)
	}
	return nil
}

func (s *fakeSandbox) UpdateResources(_ context.Context, _ *corev1.Pod, c *corev1.Container) error {
	if s.rt.noResize {
		return ErrResizeUnsupported
	}
	s.rt.record(fmt.Sprintf("resize %s cpu=%s", c.Name, c.Resources.Limits.Cpu()))
	return nil
}

// ExecSync runs nothing: "fail" exits 1, "hook" (a hook's command) is
// recorded, "forever" runs until its context ends, recorded then, and
// "gate" is recorded and runs until the container's gate opens (recorded
// then too) or its context ends.
func (s *fakeSandbox) ExecSync(ctx context.Context, container string, argv []string) ([]byte, int, error) {
	switch argv[0] {
	case "fail":
		return nil, 1, nil
	case "gate":
		s.rt.record("gate " + container)
		select {
		case <-s.rt.gate(container):
			s.rt.record("gate passed " + container)
		case <-ctx.Done():
			s.rt.record("gate ended " + container)
			return nil, 137, ctx.Err()
		}
	case "forever":
		<-ctx.Done()
		s.rt.record("forever ended " + container)
		return nil, 137, ctx.Err()
	case "hook":
		s.rt.record("hook " + container)
		s.rt.hooksBegun.Add(1)
		_ = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
			return s.rt.hooksBegun.Load() >= s.rt.hooksTogether, nil
		})
	}
	return nil, 0, nil
}

func (s *fakeSandbox) Exec(context.Context, string, []string, StreamIO) (int, error) { return 0, nil }
func (s *fakeSandbox) Attach(context.Context, string, StreamIO) error                { return nil }
func (s *fakeSandbox) ReadLogs(ctx context.Context, _ string, attempt int, opts LogOptions, w io.Writer) error {
	if s.rt.readLogs != nil {
		return s.rt.readLogs(ctx, opts, w)
	}
	_, err := fmt.Fprintf(w, "attempt %d\n", attempt)
	return err
}
func (s *fakeSandbox) PortForward(context.Context, int32, io.ReadWriteCloser) error { return nil }

// lifecycleFixture is a manager over a fakeRuntime, with the last status
// it published of each pod.
type lifecycleFixture struct {
	m        *Manager
	rt       *fakeRuntime
	recorder *record.FakeRecorder
	probes   *ProbeMetrics
	ops      *RuntimeMetrics
	stop     func() // ends its Run, as the agent's exit

	mu       sync.Mutex
	statuses map[string]corev1.PodStatus
	phases   map[string][]corev1.PodPhase // each pod's phases as published, in order
}

func newLifecycleFixture(t *testing.T, podIPs []string) *lifecycleFixture {
	t.Helper()
	return startLifecycleFixture(t, &fakeRuntime{ips: podIPs, sandboxes: map[types.UID]*fakeSandbox{}}, t.TempDir())
}

// startLifecycleFixture runs a manager over rt with root as its root
// directory: a second one over the same is the agent restarted.
func startLifecycleFixture(t *testing.T, rt *fakeRuntime, root string) *lifecycleFixture {
	t.Helper()
	client := fake.NewClientset()
	probes, ops, recorder := NewProbeMetrics(), NewRuntimeMetrics(), record.NewFakeRecorder(1000)
	m, err := New(Parts{
		Probes:         probes,
		RuntimeMetrics: ops,
		Runtime:        rt,
		Volumes:        hostvolume.NewManager(client, hostvolume.Options{RootDir: root}),
		Env:            env.NewGetter(client),
		Recorder:       recorder,
	}, Options{
		NodeName: "node", Address: "192.0.2.1", RootDir: root,
		Allocatable: func() corev1.ResourceList { return corev1.ResourceList{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &lifecycleFixture{m: m, rt: rt, recorder: recorder, probes: probes, ops: ops, statuses: map[string]corev1.PodStatus{}, phases: map[string][]corev1.PodPhase{}}
	ctx, cancel := context.WithCancel(context.Background())
	m.NotifyPods(ctx, func(p *corev1.Pod) {
		f.mu.Lock()
		f.statuses[p.Name] = p.Status
		if ph := f.phases[p.Name]; len(ph) == 0 || ph[len(ph)-1] != p.Status.Phase {
			f.phases[p.Name] = append(ph, p.Status.Phase)
		}
		f.mu.Unlock()
	})
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	f.stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(f.stop)
	return f
}

func (f *lifecycleFixture) status(name string) corev1.PodStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statuses[name]
}

// eventually polls cond until it holds or 10 seconds have passed.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	eventuallyWithin(t, 10*time.Second, what, cond)
}

// eventuallyWithin is eventually with another deadline.
func eventuallyWithin(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s; last seen: %s", what, timeout, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testPod(name string, spec corev1.PodSpec) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}, Spec: spec}
}

// runningPod creates pod p, one container "app", and waits until it runs.
func (f *lifecycleFixture) runningPod(t *testing.T, policy corev1.RestartPolicy) *corev1.Pod {
	t.Helper()
	pod := testPod("p", corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{{Name: "app", Image: "img"}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod runs", func() (bool, string) {
		s := f.status("p")
		return s.Phase == corev1.PodRunning, string(s.Phase)
	})
	return pod
}

// A pod with an IP of its own is probed at that IP, not the node's; the
// probe is started under the worker's lock, which it must not take again.
func TestProbesReachThePodIP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	f := newLifecycleFixture(t, []string{host})
	pod := testPod("web", corev1.PodSpec{Containers: []corev1.Container{{
		Name: "web", Image: "web",
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(p))}}},
	}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod ready", func() (bool, string) {
		s := f.status("web")
		for _, c := range s.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return s.PodIP == host, fmt.Sprintf("podIP %s", s.PodIP)
			}
		}
		return false, fmt.Sprintf("%+v", s.Conditions)
	})
	if n := testutil.ToFloat64(f.probes.total.WithLabelValues("Readiness", "successful", "web", "web", "ns", "uid-web")); n < 1 {
		t.Errorf("prober_probe_total of the successful readiness probe is %v, want at least 1", n)
	}
	for _, op := range []string{"run_podsandbox", "start_container"} {
		if n := testutil.ToFloat64(f.ops.total.WithLabelValues(op)); n < 1 {
			t.Errorf("kubelet_runtime_operations_total{operation_type=%q} is %v, want at least 1", op, n)
		}
	}
}

// A native sidecar starts first and must be running before the next init
// container starts; it runs beside the app and is stopped after the app
// is done for good, so the pod succeeds.
func TestSidecarRunsBesideTheApp(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	always := corev1.ContainerRestartPolicyAlways
	pod := testPod("side", corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		InitContainers: []corev1.Container{
			{Name: "side", Image: "i", RestartPolicy: &always},
			{Name: "init", Image: "i"},
		},
		Containers: []corev1.Container{{Name: "app", Image: "i"}},
	})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "init started after the sidecar", func() (bool, string) {
		ev := f.rt.recorded()
		return slices.Equal(ev, []string{"start side", "start init"}), fmt.Sprint(ev)
	})
	if !f.rt.exit(pod.UID, "init", 0) {
		t.Fatal("init not running")
	}
	eventually(t, "app started, sidecar still running", func() (bool, string) {
		ev := f.rt.recorded()
		s := f.status("side")
		init := false
		for _, c := range s.Conditions {
			init = init || c.Type == corev1.PodInitialized && c.Status == corev1.ConditionTrue
		}
		return slices.Equal(ev, []string{"start side", "start init", "start app"}) && init && s.Phase == corev1.PodRunning,
			fmt.Sprint(ev, s.Phase, s.Conditions)
	})
	if !f.rt.exit(pod.UID, "app", 0) {
		t.Fatal("app not running")
	}
	eventually(t, "sidecar stopped after the app, pod succeeded", func() (bool, string) {
		ev := f.rt.recorded()
		s := f.status("side")
		return slices.Equal(ev, []string{"start side", "start init", "start app", "stop side"}) && s.Phase == corev1.PodSucceeded,
			fmt.Sprint(ev, s.Phase)
	})
}

// A start that fails with the runtime gone (no attempt recorded, no exit
// told) is tried again: the worker once waited for an event that never
// came, leaving the pod ContainerCreating for good.
func TestStartLostWithTheRuntimeIsRetried(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	f.rt.unreachable.Store(1)
	pod := testPod("p", corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "img"}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod runs", func() (bool, string) {
		s := f.status("p")
		return s.Phase == corev1.PodRunning, fmt.Sprint(s.Phase, f.rt.recorded())
	})
}

// While a pod's set-up fails, its containers wait in their default reason
// with the failure as message, as the kubelet's (PodInitializing until the
// init containers are done): the node suite's 'should not start app
// containers and fail the pod if init containers fail' failed on the app
// container's ContainerCreating after one failed volume set-up. Once set
// up, the message goes.
func TestSetUpFailureKeepsTheDefaultWaitingReason(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	f.rt.failSandboxes.Store(1)
	pod := testPod("p", corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Image: "img"}},
		Containers:     []corev1.Container{{Name: "app", Image: "img"}},
	})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waiting := func(l []corev1.ContainerStatus) (reason, msg string) {
		if len(l) == 1 && l[0].State.Waiting != nil {
			return l[0].State.Waiting.Reason, l[0].State.Waiting.Message
		}
		return fmt.Sprint(l), ""
	}
	eventually(t, "the failure said with the default reasons", func() (bool, string) {
		s := f.status("p")
		ir, im := waiting(s.InitContainerStatuses)
		ar, am := waiting(s.ContainerStatuses)
		return ir == "PodInitializing" && ar == "PodInitializing" && strings.Contains(im, "no network for the sandbox") && im == am,
			fmt.Sprintf("init %s %q, app %s %q", ir, im, ar, am)
	})
	eventuallyWithin(t, 2*retryAfter+10*time.Second, "set up, the init container runs and the app waits without a message", func() (bool, string) {
		s := f.status("p")
		ar, am := waiting(s.ContainerStatuses)
		running := len(s.InitContainerStatuses) == 1 && s.InitContainerStatuses[0].State.Running != nil
		return running && ar == "PodInitializing" && am == "", fmt.Sprintf("init %v, app %s %q", s.InitContainerStatuses, ar, am)
	})
}

// A container's status lists its volume mounts, a read-only one saying it
// is read-only recursively where it asked to be and the runtime's handler
// can, from the first status on, as the kubelet's.
func TestStatusListsTheVolumeMounts(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	f.rt.recursiveReadOnly = true
	pod := testPod("p", corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		Containers: []corev1.Container{{Name: "app", Image: "img", VolumeMounts: []corev1.VolumeMount{
			{Name: "v", MountPath: "/rw"},
			{Name: "v", MountPath: "/ro", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyIfPossible)},
		}}},
	})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the mounts in the running container's status", func() (bool, string) {
		s := f.status("p")
		if len(s.ContainerStatuses) != 1 || s.ContainerStatuses[0].State.Running == nil {
			return false, fmt.Sprint(s.ContainerStatuses)
		}
		want := []corev1.VolumeMountStatus{{Name: "v", MountPath: "/rw"},
			{Name: "v", MountPath: "/ro", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyEnabled)}}
		got := s.ContainerStatuses[0].VolumeMounts
		return equality.Semantic.DeepEqual(got, want), fmt.Sprint(got)
	})
}

// A sandbox found dead when a container is to start in it is set up anew:
// the worker once tried the dead one for good ("pod sandbox: not running").
func TestDeadSandboxIsSetUpAgain(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	f.rt.mu.Lock()
	f.rt.deadSandboxes = 1
	f.rt.mu.Unlock()
	pod := testPod("p", corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "img"}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod runs in a new sandbox", func() (bool, string) {
		s := f.status("p")
		return s.Phase == corev1.PodRunning, fmt.Sprint(s.Phase, f.rt.recorded())
	})
}

// A container the runtime lost track of is stopped (it may still run) and
// started again at once, whatever the restart policy, as the kubelet does:
// the pod of a container that never restarts goes on to end as its
// container does, rather than failing with the lost attempt.
func TestLostContainerIsStartedAgain(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	pod := f.runningPod(t, corev1.RestartPolicyNever)
	if !f.rt.lose(pod.UID, "app") {
		t.Fatal("the container was not running")
	}
	eventually(t, "the container running again", func() (bool, string) {
		s := f.status("p")
		cs := s.ContainerStatuses[0]
		return cs.State.Running != nil && cs.RestartCount == 1, fmt.Sprintf("%s %+v", s.Phase, cs)
	})
	if got, want := f.rt.recorded(), []string{"start app", "stop app", "start app"}; !slices.Equal(got, want) {
		t.Errorf("runtime calls %v, want %v", got, want)
	}
	if !f.rt.exit(pod.UID, "app", 3) {
		t.Fatal("the new attempt was not running")
	}
	eventually(t, "the pod failed with its container's exit", func() (bool, string) {
		s := f.status("p")
		term := s.ContainerStatuses[0].State.Terminated
		return s.Phase == corev1.PodFailed && term != nil && term.ExitCode == 3, fmt.Sprintf("%s %+v", s.Phase, s.ContainerStatuses[0].State)
	})
}

// A pod whose sandbox dies (its containers with it) gets a new one at
// once, and its status spans both: the pod stays Running, the container's
// exit in the dead sandbox is its last state, and its restarts go on
// counting in the new one, whose own records start empty (as a CRI
// runtime's do).
func TestSandboxDeathKeepsThePodStatus(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	pod := f.runningPod(t, "")
	sb := f.rt.sandbox(pod.UID)
	sb.dead.Store(true)
	if !f.rt.exit(pod.UID, "app", 137) {
		t.Fatal("the container was not running")
	}
	// After the restart back-off (10s).
	eventuallyWithin(t, time.Minute, "the container running again", func() (bool, string) {
		s := f.status("p")
		if len(s.ContainerStatuses) != 1 {
			return false, fmt.Sprint(s.ContainerStatuses)
		}
		cs := s.ContainerStatuses[0]
		return cs.State.Running != nil && cs.RestartCount == 1, fmt.Sprintf("%+v", cs)
	})
	cs := f.status("p").ContainerStatuses[0]
	if last := cs.LastTerminationState.Terminated; last == nil || last.ExitCode != 137 {
		t.Errorf("last state %+v, want the exit in the dead sandbox (137)", cs.LastTerminationState)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ph := f.phases["p"]; ph[len(ph)-1] != corev1.PodRunning || slices.Index(ph, corev1.PodRunning) != len(ph)-1 {
		t.Errorf("phases published %v: the pod left Running", ph)
	}
}

// A sandbox that dies with its containers, its death not yet seen when
// they exit, refuses the restart that follows (ErrSandboxGone): the
// restart goes to a new sandbox at once, as the kubelet never starts a
// container in a dead sandbox, and counts once; the last state stays the
// exit the sandbox's death caused. The worker once took the refusal for
// a failed attempt and tried the dead sandbox again and again.
func TestRestartInDyingSandboxGoesToANewOne(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	pod := testPod("p", corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "img"}, {Name: "side", Image: "img"}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod runs", func() (bool, string) {
		s := f.status("p")
		return s.Phase == corev1.PodRunning && len(s.ContainerStatuses) == 2, string(s.Phase)
	})
	old := f.rt.sandbox(pod.UID)
	old.dying.Store(true)
	for _, name := range []string{"app", "side"} {
		if !f.rt.exit(pod.UID, name, 137) {
			t.Fatalf("container %s was not running", name)
		}
	}
	eventually(t, "both containers running again in a new sandbox", func() (bool, string) {
		s := f.status("p")
		running := 0
		for _, cs := range s.ContainerStatuses {
			if cs.State.Running != nil && cs.RestartCount == 1 {
				running++
			}
		}
		return running == 2 && f.rt.sandbox(pod.UID) != old, fmt.Sprintf("%+v %v", s.ContainerStatuses, f.rt.recorded())
	})
	for _, cs := range f.status("p").ContainerStatuses {
		if last := cs.LastTerminationState.Terminated; last == nil || last.ExitCode != 137 {
			t.Errorf("container %s: last state %+v, want the exit the sandbox's death caused (137)", cs.Name, cs.LastTerminationState)
		}
	}
	refused := 0
	for _, e := range f.rt.recorded() {
		if strings.HasPrefix(e, "refused ") {
			refused++
		}
	}
	if refused > 1 {
		t.Errorf("runtime calls %v: the dead sandbox was tried %d times, want once at most", f.rt.recorded(), refused)
	}
	if n := f.rt.ensured.Load(); n != 2 {
		t.Errorf("%d sandboxes set up, want 2", n)
	}
}

// startFailure tells a sandbox found gone from a failed attempt, and asks
// whether the sandbox runs only when that decides.
func TestStartFailure(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		stopping bool
		ready    bool
		want     startOutcome
	}{
		{"waits", &WaitError{Reason: "ErrImagePull"}, false, true, startWaits},
		{"waits in a dead sandbox", fmt.Errorf("x: %w", &WaitError{Reason: "ErrImagePull"}), false, false, startWaits},
		{"agent stopping", errors.New("canceled"), true, false, startInterrupted},
		{"sandbox gone, not yet seen", fmt.Errorf("start: %w", ErrSandboxGone), false, true, startSandboxGone},
		{"sandbox gone", fmt.Errorf("start: %w", ErrSandboxGone), false, false, startSandboxGone},
		{"failed", errors.New("exec: no such file"), false, true, startFailed},
		{"failed, sandbox dead", errors.New("exec: no such file"), false, false, startFailedSandboxDead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := startFailure(tc.err, tc.stopping, func() bool { return tc.ready }); got != tc.want {
				t.Errorf("startFailure = %d, want %d", got, tc.want)
			}
		})
	}
}

// replaceSandbox replaces a sandbox that does not run, or that a start
// found gone, unless the pod is done.
func TestReplaceSandbox(t *testing.T) {
	for _, tc := range []struct {
		ready, refused, done, want bool
	}{
		{true, false, false, false},
		{false, false, false, true},
		{true, true, false, true},
		{false, true, true, false},
		{false, false, true, false},
	} {
		if got := replaceSandbox(tc.ready, tc.refused, tc.done); got != tc.want {
			t.Errorf("replaceSandbox(ready %v, refused %v, done %v) = %v, want %v", tc.ready, tc.refused, tc.done, got, tc.want)
		}
	}
}

// A pod whose containers are done for good keeps its sandbox's records
// when the sandbox dies: it is not set up again, as the kubelet does not.
func TestFinishedPodIsNotSetUpAgain(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	pod := f.runningPod(t, corev1.RestartPolicyNever)
	if !f.rt.exit(pod.UID, "app", 0) {
		t.Fatal("the container was not running")
	}
	eventually(t, "the pod succeeded", func() (bool, string) {
		s := f.status("p")
		return s.Phase == corev1.PodSucceeded, string(s.Phase)
	})
	sb := f.rt.sandbox(pod.UID)
	sb.dead.Store(true)
	looks, ensured := sb.readyCalls.Load(), f.rt.ensured.Load()
	if err := f.m.UpdatePod(context.Background(), pod); err != nil { // a sync
		t.Fatal(err)
	}
	// The sync looks at the sandbox twice: whether it died (set-up) and,
	// at its end, for the status it reports. A sync that set the pod up
	// again would report the new sandbox's instead.
	eventually(t, "the sync after the sandbox died over", func() (bool, string) {
		n := sb.readyCalls.Load() - looks
		return n >= 2, fmt.Sprintf("the dead sandbox looked at %d times; %d sandboxes set up since", n, f.rt.ensured.Load()-ensured)
	})
	if f.rt.sandbox(pod.UID) != sb {
		t.Error("a finished pod got a new sandbox")
	}
	if n := f.rt.ensured.Load() - ensured; n != 0 {
		t.Errorf("a finished pod got %d new sandboxes after its own died", n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ph := f.phases["p"]; ph[len(ph)-1] != corev1.PodSucceeded {
		t.Errorf("phases published %v, want Succeeded last", ph)
	}
}

// A restarted agent reports an adopted pod as it runs from the first
// answer: never the Pending placeholder of a new pod, which would take the
// pod back from Running to Pending in the API.
func TestAdoptedPodNeverReportsPending(t *testing.T) {
	rt, root := &fakeRuntime{sandboxes: map[types.UID]*fakeSandbox{}}, t.TempDir()
	first := startLifecycleFixture(t, rt, root)
	first.runningPod(t, "")
	first.stop()

	second := startLifecycleFixture(t, rt, root)
	pods, err := second.m.GetPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].Status.Phase != corev1.PodRunning || len(pods[0].Status.ContainerStatuses) != 1 ||
		pods[0].Status.ContainerStatuses[0].State.Running == nil || !pods[0].Status.ContainerStatuses[0].Ready {
		t.Fatalf("the restarted agent's first answer: %+v", pods)
	}
}

// An agent killed while a deleted pod's sandbox is removed, before the
// pod's state is, leaves the state of a pod without a sandbox. The
// restarted agent reports the status the pod ended with (not a pending pod
// with no containers), finishes the termination, and never sets the pod up
// again.
func TestDeletionGoesOnAfterRestart(t *testing.T) {
	rt, root := &fakeRuntime{sandboxes: map[types.UID]*fakeSandbox{}}, t.TempDir()
	first := startLifecycleFixture(t, rt, root)
	pod := first.runningPod(t, "")
	rt.failRemove.Store(true)
	if err := first.m.DeletePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sandbox removed", func() (bool, string) {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return len(rt.sandboxes) == 0, fmt.Sprintf("%d sandboxes", len(rt.sandboxes))
	})
	first.stop()
	events := rt.recorded()
	restartedAgentFinishesTheDeletion(t, rt, root, &rt.failRemove)
	if now := rt.recorded(); !slices.Equal(now, events) {
		t.Errorf("the restarted agent ran the deleted pod's containers: %v after %v", now[len(events):], events)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.sandboxes) != 0 {
		t.Errorf("the restarted agent set the deleted pod up again")
	}
}

// restartedAgentFinishesTheDeletion starts an agent again over rt and root,
// where an agent was killed while it removed the deleted pod "p" (the
// removal fails while failing is set): the restarted agent reports the
// phase the pod ended with, and once the removal succeeds it finishes the
// termination with that status.
func restartedAgentFinishesTheDeletion(t *testing.T, rt *fakeRuntime, root string, failing *atomic.Bool) {
	t.Helper()
	second := startLifecycleFixture(t, rt, root)
	pods, err := second.m.GetPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 {
		t.Fatalf("the restarted agent has %d pods, want the deleted one still terminating", len(pods))
	}
	if ph := pods[0].Status.Phase; ph != corev1.PodSucceeded && ph != corev1.PodFailed {
		t.Fatalf("the restarted agent reports the deleted pod %s, want the phase it ended with", ph)
	}
	failing.Store(false)
	eventually(t, "the termination finished", func() (bool, string) {
		pods, err := second.m.GetPods(context.Background())
		return err == nil && len(pods) == 0, fmt.Sprintf("%d pods, %v", len(pods), err)
	})
	if s := second.status("p"); s.Phase != corev1.PodSucceeded && s.Phase != corev1.PodFailed {
		t.Errorf("reported %s, want the phase the pod ended with", s.Phase)
	}
}

// An agent killed while the runtime removed a deleted pod's sandbox leaves
// the sandbox listed without its containers' records: the restarted agent
// reports the final status kept before the removal, not a pod set up anew
// (Pending, ContainerCreating), and finishes the removal (the agent-kill
// scenario's status regression).
func TestHalfRemovedSandboxKeepsTheFinalStatus(t *testing.T) {
	rt, root := &fakeRuntime{sandboxes: map[types.UID]*fakeSandbox{}}, t.TempDir()
	first := startLifecycleFixture(t, rt, root)
	pod := first.runningPod(t, "")
	rt.halfRemove.Store(true)
	if err := first.m.DeletePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sandbox half removed", func() (bool, string) {
		sb := rt.sandbox(pod.UID)
		if sb == nil {
			return false, "removed whole"
		}
		_, ok := sb.Container("app")
		return !ok, "its records are still there"
	})
	first.stop()
	restartedAgentFinishesTheDeletion(t, rt, root, &rt.halfRemove)
	if rt.sandbox(pod.UID) != nil {
		t.Error("the restarted agent left the sandbox")
	}
}

// A runtime that does not answer when the agent starts delays the adoption
// of the pods an earlier agent left; it does not break the manager for good.
func TestRuntimeDownAtStartIsRetried(t *testing.T) {
	client := fake.NewClientset()
	root := t.TempDir()
	rt := &fakeRuntime{sandboxes: map[types.UID]*fakeSandbox{}}
	rt.down.Store(true)
	ops := NewRuntimeMetrics()
	m, err := New(Parts{
		Runtime: rt, Volumes: hostvolume.NewManager(client, hostvolume.Options{RootDir: root}),
		Env: env.NewGetter(client), Recorder: record.NewFakeRecorder(100), RuntimeMetrics: ops,
	}, Options{NodeName: "node", Address: "192.0.2.1", RootDir: root,
		Allocatable: func() corev1.ResourceList { return corev1.ResourceList{} }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetPods(context.Background()); err == nil {
		t.Fatal("GetPods succeeded while the runtime is down")
	}
	rt.down.Store(false)
	if _, err := m.GetPods(context.Background()); err != nil {
		t.Fatalf("GetPods once the runtime answers: %v", err)
	}
	if n := testutil.ToFloat64(ops.errors.WithLabelValues("list_podsandbox")); n != 1 {
		t.Errorf("kubelet_runtime_operations_errors_total{operation_type=\"list_podsandbox\"} = %v, want 1", n)
	}
}

// An in-place resize reaches the running container: through the runtime
// when its policy allows, by a restart when it asks for one or the runtime
// cannot resize; the status reports the resources in effect.
func TestResizeInPlace(t *testing.T) {
	for _, tt := range []struct {
		name        string
		policy      corev1.ResourceResizeRestartPolicy
		noResize    bool
		wantRestart bool
	}{
		{"through the runtime", corev1.NotRequired, false, false},
		{"restart asked for", corev1.RestartContainer, false, true},
		{"runtime cannot", corev1.NotRequired, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newLifecycleFixture(t, nil)
			f.rt.noResize = tt.noResize
			pod := testPod("r", corev1.PodSpec{Containers: []corev1.Container{{
				Name: "app", Image: "i",
				Resources:    corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				ResizePolicy: []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: tt.policy}},
			}}})
			if err := f.m.CreatePod(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			eventually(t, "running", func() (bool, string) {
				s := f.status("r")
				return s.Phase == corev1.PodRunning, string(s.Phase)
			})
			resized := pod.DeepCopy()
			resized.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("200m")
			if err := f.m.UpdatePod(context.Background(), resized); err != nil {
				t.Fatal(err)
			}
			eventually(t, "resized", func() (bool, string) {
				s := f.status("r")
				if len(s.ContainerStatuses) != 1 || s.ContainerStatuses[0].Resources == nil {
					return false, fmt.Sprintf("%+v", s.ContainerStatuses)
				}
				cs := s.ContainerStatuses[0]
				got := cs.Resources.Limits[corev1.ResourceCPU]
				return got.String() == "200m" && cs.State.Running != nil, fmt.Sprintf("limit %s, restarts %d", got.String(), cs.RestartCount)
			})
			restarts := f.status("r").ContainerStatuses[0].RestartCount
			events := f.rt.recorded()
			if tt.wantRestart != (restarts == 1) || tt.wantRestart == slices.Contains(events, "resize app cpu=200m") {
				t.Errorf("restarts %d, runtime saw %v; want restart %v", restarts, events, tt.wantRestart)
			}
		})
	}
}

// A sidecar that exits before the pod got further holds the next init
// container back until it runs again, as the kubelet's.
func TestCrashedSidecarHoldsInitialization(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	f.rt.crash = map[string]bool{"side": true}
	always := corev1.ContainerRestartPolicyAlways
	pod := testPod("hold", corev1.PodSpec{
		InitContainers: []corev1.Container{
			{Name: "side", Image: "i", RestartPolicy: &always},
			{Name: "init", Image: "i"},
		},
		Containers: []corev1.Container{{Name: "app", Image: "i"}},
	})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "sidecar backing off", func() (bool, string) {
		s := f.status("hold")
		if len(s.InitContainerStatuses) == 0 {
			return false, "no status"
		}
		w := s.InitContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "CrashLoopBackOff", fmt.Sprintf("%+v", s.InitContainerStatuses[0].State)
	})
	if events := f.rt.recorded(); slices.Contains(events, "start init") || slices.Contains(events, "start app") {
		t.Errorf("runtime saw %v: nothing may start after a sidecar that exited during initialization", events)
	}
}

// A new image in the spec restarts the running container with it.
func TestImageUpdateRestartsTheContainer(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	pod := testPod("img", corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "v1"}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "running", func() (bool, string) {
		s := f.status("img")
		return s.Phase == corev1.PodRunning, string(s.Phase)
	})
	updated := pod.DeepCopy()
	updated.Spec.Containers[0].Image = "v2"
	if err := f.m.UpdatePod(context.Background(), updated); err != nil {
		t.Fatal(err)
	}
	eventually(t, "restarted with v2", func() (bool, string) {
		s := f.status("img")
		if len(s.ContainerStatuses) != 1 {
			return false, "no status"
		}
		cs := s.ContainerStatuses[0]
		return cs.RestartCount == 1 && cs.State.Running != nil && cs.Image == "v2", fmt.Sprintf("%+v", cs)
	})
	if got := f.rt.recorded(); !slices.Equal(got, []string{"start app", "stop app", "start app"}) {
		t.Errorf("runtime saw %v", got)
	}
}

// A terminating pod's containers are reported not ready while they still
// run (here in their preStop hook), as the kubelet's.
func TestTerminatingPodIsNotReady(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	pod := testPod("term", corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app", Image: "i",
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}},
	}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ready", func() (bool, string) {
		s := f.status("term")
		return len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].Ready, fmt.Sprintf("%+v", s.ContainerStatuses)
	})
	deleting := pod.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	if err := f.m.DeletePod(context.Background(), deleting); err != nil {
		t.Fatal(err)
	}
	eventually(t, "not ready while still running", func() (bool, string) {
		s := f.status("term")
		cs := s.ContainerStatuses[0]
		return !cs.Ready && cs.State.Running != nil, fmt.Sprintf("%+v", cs)
	})
}

// A container that fails its liveness probe is killed as the kubelet
// kills it: its preStop hook runs first (the node e2e suite's "should call
// the container's preStop hook and terminate it if its liveness probe
// fails"), and it restarts.
func TestLivenessFailureRunsThePreStopHook(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	pod := testPod("sick", corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{
		Name: "app", Image: "i",
		LivenessProbe: &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1,
			ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"fail"}}}},
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"hook"}}}},
	}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "killed and started again", func() (bool, string) {
		got := f.rt.recorded()
		return len(got) >= 4, fmt.Sprint(got)
	})
	if got := f.rt.recorded()[:4]; !slices.Equal(got, []string{"start app", "hook app", "stop app", "start app"}) {
		t.Errorf("runtime saw %v, want the preStop hook before the stop", got)
	}
}

// An evicted pod's containers are stopped and the pod fails with the
// eviction's reason, message and conditions; the pod is not restarted.
func TestEvictFailsThePod(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	pod := testPod("hog", corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{Name: "app", Image: "i"}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "running", func() (bool, string) {
		s := f.status("hog")
		return s.Phase == corev1.PodRunning, string(s.Phase)
	})
	disruption := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet", Message: "low on memory"}
	if err := f.m.Evict(pod, Eviction{Reason: "Evicted", Message: "The node was low on resource: memory.", Conditions: []corev1.PodCondition{disruption}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "failed as evicted", func() (bool, string) {
		s := f.status("hog")
		hasDisruption := false
		for _, c := range s.Conditions {
			hasDisruption = hasDisruption || c.Type == corev1.DisruptionTarget && c.Reason == "TerminationByKubelet"
		}
		return s.Phase == corev1.PodFailed && s.Reason == "Evicted" && hasDisruption &&
			len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Terminated != nil, fmt.Sprintf("%+v", s)
	})
	if got := f.rt.recorded(); !slices.Equal(got, []string{"start app", "stop app"}) {
		t.Errorf("runtime saw %v, want the container started once and stopped", got)
	}
	if err := f.m.Evict(testPod("other", corev1.PodSpec{}), Eviction{Reason: "Evicted"}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("evicting an unknown pod: %v, want ErrNotFound", err)
	}
}

// A container waiting to restart keeps one dead attempt, its latest, which
// both its logs and its --previous logs read, as the kubelet's (--previous
// read the attempt before, which stayed beside it).
func TestCrashLoopKeepsOneDeadAttempt(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	f.rt.crash = map[string]bool{"app": true}
	pod := testPod("loop", corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "i"}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "waiting in back-off after a restart", func() (bool, string) {
		s := f.status("loop")
		if len(s.ContainerStatuses) == 0 {
			return false, "no status"
		}
		cs := s.ContainerStatuses[0]
		return cs.RestartCount >= 1 && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff", fmt.Sprintf("%+v", cs)
	})
	latest := int(f.status("loop").ContainerStatuses[0].RestartCount)
	sb := f.rt.sandbox(pod.UID)
	eventually(t, "one dead attempt", func() (bool, string) {
		sb.mu.Lock()
		defer sb.mu.Unlock()
		list := sb.attempts["app"]
		return len(list) == 1 && list[0].Attempt == latest, fmt.Sprintf("%+v", list)
	})
	logs := func(previous bool) string {
		r, err := f.m.GetContainerLogs(context.Background(), "ns", "loop", "app", provider.ContainerLogOpts{Previous: previous})
		if err != nil {
			t.Fatalf("logs (previous %v): %v", previous, err)
		}
		defer r.Close()
		out, _ := io.ReadAll(r)
		return string(out)
	}
	want := fmt.Sprintf("attempt %d\n", latest)
	if got := logs(false); got != want {
		t.Errorf("logs while waiting: %q, want %q", got, want)
	}
	if got := logs(true); got != want {
		t.Errorf("logs --previous while waiting: %q, want %q (the last state's run)", got, want)
	}
}

// A pod whose host port another running pod binds is refused at
// admission, as the kubelet refuses it (NodePorts); once that pod is gone
// the same port is admitted.
func TestHostPortConflictIsRefused(t *testing.T) {
	ctx := context.Background()
	f := newLifecycleFixture(t, nil)
	withPort := func(name string) *corev1.Pod {
		return testPod(name, corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: "web", Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 21017}},
		}}})
	}
	if err := f.m.CreatePod(ctx, withPort("first")); err != nil {
		t.Fatal(err)
	}
	err := f.m.CreatePod(ctx, withPort("second"))
	var rej *provider.Rejection
	if !errors.As(err, &rej) || rej.Reason != "NodePorts" {
		t.Fatalf("CreatePod of a pod on a taken host port = %v, want a NodePorts rejection", err)
	}
	first := withPort("first")
	if err := f.m.DeletePod(ctx, first); err != nil {
		t.Fatal(err)
	}
	eventually(t, "first pod finished", func() (bool, string) {
		_, err := f.m.GetPod(ctx, "ns", "first")
		return errors.Is(err, provider.ErrNotFound), fmt.Sprint(err)
	})
	if err := f.m.CreatePod(ctx, withPort("second")); err != nil {
		t.Errorf("CreatePod once the port is free: %v", err)
	}
}

// A static pod whose manifest is removed and written back is the same pod
// (its UID comes from the manifest) created again once it has terminated:
// its containers go on counting their restarts, as the kubelet's do (the
// node e2e suite's "MirrorPod … should successfully recreate when file is
// removed and recreated" waits for restart count 1). An API pod's UID is
// never reused, and a static pod of another UID starts from 0.
func TestStaticPodCreatedAgainGoesOnCountingRestarts(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	static := func(uid types.UID) *corev1.Pod {
		p := testPod("web", corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{Name: "app", Image: "img"}}})
		p.UID = uid
		p.Annotations = map[string]string{podrules.ConfigSourceAnnotation: "file"}
		return p
	}
	restarts := func(want int32) {
		t.Helper()
		eventually(t, fmt.Sprintf("running with restart count %d", want), func() (bool, string) {
			s := f.status("web")
			return s.Phase == corev1.PodRunning && len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Running != nil &&
				s.ContainerStatuses[0].RestartCount == want, fmt.Sprintf("%s %+v", s.Phase, s.ContainerStatuses)
		})
	}
	recreate := func(old, pod *corev1.Pod) {
		t.Helper()
		if err := f.m.DeletePod(context.Background(), old); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the pod terminated", func() (bool, string) {
			_, err := f.m.GetPod(context.Background(), "ns", "web")
			return errors.Is(err, provider.ErrNotFound), fmt.Sprint(err)
		})
		if err := f.m.CreatePod(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
	}
	pod := static("static-1")
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	restarts(0)
	recreate(pod, pod)
	restarts(1)
	recreate(pod, pod)
	restarts(2)
	recreate(pod, static("static-2"))
	restarts(0)
}
