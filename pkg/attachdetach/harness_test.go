package attachdetach_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/attachdetach/simattacher"
)

const testDriver = "simattacher.csi.nodelet.io"

// harness drives a reconciler with the sim plugin and a fake clock, one pass
// at a time.
type harness struct {
	t        *testing.T
	logger   klog.Logger
	ctx      context.Context
	clock    *testingclock.FakeClock
	dsw      *attachdetach.DesiredStateOfWorld
	asw      *attachdetach.ActualStateOfWorld
	sim      *simattacher.Plugin
	exec     attachdetach.OperationExecutor
	executor *attachdetach.Executor
	nodes    *nodeStore
	status   *statusWriter
	recorder *record.FakeRecorder
	reg      *prometheus.Registry
	rc       *attachdetach.Reconciler

	mu       sync.Mutex
	failures map[simattacher.Op]error // the error of every call of op, while set
	onFail   func(op simattacher.Op, v attachdetach.Volume, node types.NodeName)
}

type harnessOptions struct {
	sim        simattacher.Options
	reconciler attachdetach.ReconcilerOptions
	// wrap, when set, wraps the executor the reconciler uses.
	wrap func(*attachdetach.Executor) attachdetach.OperationExecutor
}

func newHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	h := &harness{
		t:        t,
		logger:   logger,
		ctx:      ctx,
		clock:    testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		dsw:      attachdetach.NewDesiredStateOfWorld(),
		nodes:    &nodeStore{nodes: map[string]*corev1.Node{}},
		status:   &statusWriter{written: map[types.NodeName][]corev1.UniqueVolumeName{}},
		recorder: record.NewFakeRecorder(100),
		reg:      prometheus.NewRegistry(),
		failures: map[simattacher.Op]error{},
	}
	h.asw = attachdetach.NewActualStateOfWorld(h.clock)
	so := o.sim
	so.Clock = h.clock
	so.Fail = h.fail
	var err error
	h.sim, err = simattacher.New(so)
	if err != nil {
		t.Fatal(err)
	}
	h.executor = attachdetach.NewExecutor(h.asw, attachdetach.Plugins{h.sim}, h.nodes, h.recorder, attachdetach.ExecutorOptions{Clock: h.clock})
	h.exec = h.executor
	if o.wrap != nil {
		h.exec = o.wrap(h.executor)
	}
	ro := o.reconciler
	ro.Clock = h.clock
	h.rc, err = attachdetach.NewReconciler(h.dsw, h.asw, h.exec, attachdetach.NewStatusUpdater(h.asw, h.status), h.nodes, h.recorder, ro)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rc.Register(h.reg); err != nil {
		t.Fatal(err)
	}
	return h
}

// fail is the sim plugin's failure hook.
func (h *harness) fail(op simattacher.Op, v attachdetach.Volume, node types.NodeName) error {
	h.mu.Lock()
	err, onFail := h.failures[op], h.onFail
	h.mu.Unlock()
	if onFail != nil {
		onFail(op, v, node)
	}
	return err
}

func (h *harness) setFailure(op simattacher.Op, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures[op] = err
}

// reconcile runs one pass and waits for the operations it started.
func (h *harness) reconcile() {
	h.t.Helper()
	h.rc.Reconcile(h.ctx)
	h.executor.Wait()
}

// logs returns what was logged so far.
func (h *harness) logs() string {
	return h.logger.GetSink().(ktesting.Underlier).GetBuffer().String()
}

// step advances the fake clock.
func (h *harness) step(d time.Duration) { h.clock.Step(d) }

func (h *harness) addNode(name string, ready bool, taints ...corev1.Taint) {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}},
	}
	h.nodes.set(node)
	h.dsw.AddNode(types.NodeName(name))
}

// pv returns a CSI PersistentVolume of the sim driver.
func pv(name string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolume {
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes: modes,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "handle-" + name},
			},
		},
	}
}

func pod(namespace, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(namespace + "/" + name)},
		Spec:       corev1.PodSpec{NodeName: node},
	}
}

// volumeOf returns the attachable volume of pv as the populator would.
func (h *harness) volumeOf(p *corev1.PersistentVolume) attachdetach.Volume {
	h.t.Helper()
	spec := attachdetach.SpecFromPersistentVolume(p, false)
	name, err := h.sim.VolumeName(spec)
	if err != nil {
		h.t.Fatal(err)
	}
	return attachdetach.Volume{Name: name, Spec: spec}
}

// addPod records that pod needs v on its node.
func (h *harness) addPod(p *corev1.Pod, v attachdetach.Volume) {
	h.t.Helper()
	if err := h.dsw.AddPod(p, v, types.NodeName(p.Spec.NodeName)); err != nil {
		h.t.Fatal(err)
	}
}

// events drains the recorded events.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// attachedVolume returns the actual state of the pair, failing if absent.
func (h *harness) attachedVolume(v corev1.UniqueVolumeName, node string) attachdetach.AttachedVolume {
	h.t.Helper()
	for _, av := range h.asw.GetAttachedVolumes() {
		if av.VolumeName == v && av.NodeName == types.NodeName(node) {
			return av
		}
	}
	h.t.Fatalf("volume %q is not in the actual state of world of node %q", v, node)
	return attachdetach.AttachedVolume{}
}

// forcedDetaches returns the forced-detach counter of reason.
func (h *harness) forcedDetaches(reason string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "nodelet_volume_forced_detaches_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	h.t.Fatalf("no forced-detach series for reason %q", reason)
	return 0
}

// expectDetached fails unless v is detached from node in the sim plugin and
// in the actual state of world.
func (h *harness) expectDetached(v corev1.UniqueVolumeName, node string) {
	h.t.Helper()
	if h.sim.IsAttached(v, types.NodeName(node)) {
		h.t.Errorf("volume %q is still attached to node %q", v, node)
	}
	if s := h.asw.GetAttachState(v, types.NodeName(node)); s != attachdetach.AttachStateDetached {
		h.t.Errorf("actual state of volume %q on node %q = %v, want Detached", v, node, s)
	}
}

func (h *harness) expectAttached(v corev1.UniqueVolumeName, node string) {
	h.t.Helper()
	if !h.sim.IsAttached(v, types.NodeName(node)) {
		h.t.Errorf("volume %q is not attached to node %q", v, node)
	}
	if s := h.asw.GetAttachState(v, types.NodeName(node)); s != attachdetach.AttachStateAttached {
		h.t.Errorf("actual state of volume %q on node %q = %v, want Attached", v, node, s)
	}
}

// nodeStore is a NodeGetter over a map.
type nodeStore struct {
	mu    sync.Mutex
	nodes map[string]*corev1.Node
}

func (s *nodeStore) set(n *corev1.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[n.Name] = n
}

func (s *nodeStore) update(name string, f func(*corev1.Node)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[name].DeepCopy()
	f(n)
	s.nodes[name] = n
}

func (s *nodeStore) Get(name string) (*corev1.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
	}
	return n, nil
}

// statusWriter records the attached volumes written per node, and fails
// while fail is set.
type statusWriter struct {
	mu      sync.Mutex
	fail    error
	writes  int
	written map[types.NodeName][]corev1.UniqueVolumeName
}

func (w *statusWriter) SetVolumesAttached(_ context.Context, node types.NodeName, vs []corev1.AttachedVolume) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	if w.fail != nil {
		return w.fail
	}
	names := []corev1.UniqueVolumeName{}
	for _, v := range vs {
		names = append(names, v.Name)
	}
	w.written[node] = names
	return nil
}

func (w *statusWriter) setFail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail = err
}

// lists reports whether the last status written for node lists v.
func (w *statusWriter) lists(node string, v corev1.UniqueVolumeName) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.written[types.NodeName(node)], v)
}

func (w *statusWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

var errBoom = errors.New("boom")
