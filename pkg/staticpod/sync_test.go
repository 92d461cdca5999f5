package staticpod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

// pod is a static pod of hash h (UID h), or with mirror set its mirror
// pod, owned by the Node of UID owner.
func pod(h string, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-n", UID: types.UID(h),
		Annotations: map[string]string{podrules.ConfigSourceAnnotation: SourceFile, podrules.ConfigHashAnnotation: h}}}
	for _, m := range mods {
		m(p)
	}
	return p
}

func asMirror(owner types.UID) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Annotations[podrules.ConfigMirrorAnnotation] = p.Annotations[podrules.ConfigHashAnnotation]
		p.UID = "api-uid"
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n", UID: owner, Controller: ptr.To(true)}}
	}
}

func beingDeleted(p *corev1.Pod) {
	now := metav1.Now()
	p.DeletionTimestamp = &now
}

func apiPod(p *corev1.Pod) { p.Annotations = nil; p.UID = "api-uid" }

func TestDecideStatic(t *testing.T) {
	tests := []struct {
		name          string
		want, running *corev1.Pod
		stopping      bool
		expected      staticAction
	}{
		{"nothing", nil, nil, false, staticNone},
		{"new manifest", pod("h1"), nil, false, staticCreate},
		{"running as wanted (an agent restart)", pod("h1"), pod("h1"), false, staticNone},
		{"manifest edited", pod("h2"), pod("h1"), false, staticStop},
		{"manifest removed", nil, pod("h1"), false, staticStop},
		{"manifest back while the pod stops", pod("h1"), pod("h1"), true, staticStop},
		{"manifest back once the pod stopped", pod("h1"), nil, true, staticCreate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideStatic(tt.want, tt.running, tt.stopping); got != tt.expected {
				t.Errorf("decideStatic() = %v, want %v", got, tt.expected)
			}
		})
	}
}

func TestDecideMirror(t *testing.T) {
	tests := []struct {
		name         string
		want, mirror *corev1.Pod
		node         types.UID
		expected     mirrorAction
	}{
		{"nothing", nil, nil, "node", mirrorNone},
		{"no mirror pod yet", pod("h1"), nil, "node", mirrorCreate},
		{"mirror pod in place", pod("h1"), pod("h1", asMirror("node")), "node", mirrorNone},
		{"node UID not known yet", pod("h1"), pod("h1", asMirror("old")), "", mirrorNone},
		{"mirror pod deleted by someone", pod("h1"), pod("h1", asMirror("node"), beingDeleted), "node", mirrorReplace},
		{"manifest edited", pod("h2"), pod("h1", asMirror("node")), "node", mirrorReplace},
		{"Node registered again", pod("h1"), pod("h1", asMirror("old")), "node", mirrorReplace},
		{"manifest removed", nil, pod("h1", asMirror("node")), "node", mirrorDelete},
		{"an API pod holds the name", pod("h1"), pod("h1", apiPod), "node", mirrorBlocked},
		{"an API pod, no static pod", nil, pod("h1", apiPod), "node", mirrorNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideMirror(tt.want, tt.mirror, tt.node); got != tt.expected {
				t.Errorf("decideMirror() = %v, want %v", got, tt.expected)
			}
		})
	}
}

func TestMirrorPod(t *testing.T) {
	static := mustPrepare(t, podYAML, SourceFile, "/m/web.yaml", "n")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "node-uid"}}
	m := mirrorPod(static, node)
	if m.UID != "" || m.Name != static.Name || m.Namespace != static.Namespace || m.Spec.NodeName != "n" {
		t.Errorf("mirror %s/%s uid %q on %q, want the static pod's name without its UID", m.Namespace, m.Name, m.UID, m.Spec.NodeName)
	}
	if !podrules.IsMirrorPod(m) || !podrules.IsMirrorOf(m, static) {
		t.Errorf("annotations %v: want the mirror annotation with the hash", m.Annotations)
	}
	ref := metav1.GetControllerOf(m)
	if ref == nil || ref.Kind != "Node" || ref.Name != "n" || ref.UID != "node-uid" || ref.APIVersion != "v1" {
		t.Errorf("controller %+v, want the Node", ref)
	}
	if podrules.IsMirrorPod(static) {
		t.Errorf("the static pod was changed")
	}
}

// fakeRunner is a pod lifecycle in memory: pods run at once and stop at
// once.
type fakeRunner struct {
	mu      sync.Mutex
	pods    map[string]*corev1.Pod
	created int
	// deletes counts the requests to stop a pod.
	deletes int
	// slowStop keeps a deleted pod, as one still stopping, until finish.
	slowStop bool
	stopping map[string]bool
}

// finish ends the stop of the pod of key.
func (f *fakeRunner) finish(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping[key] {
		delete(f.pods, key)
		delete(f.stopping, key)
	}
}

func (f *fakeRunner) CreatePod(_ context.Context, p *corev1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[p.Namespace+"/"+p.Name] = p.DeepCopy()
	f.created++
	return nil
}

func (f *fakeRunner) DeletePod(_ context.Context, p *corev1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes++
	key := p.Namespace + "/" + p.Name
	if f.slowStop {
		if f.stopping == nil {
			f.stopping = map[string]bool{}
		}
		f.stopping[key] = true
		return nil
	}
	delete(f.pods, key)
	return nil
}

func (f *fakeRunner) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pods[ns+"/"+name]
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", ns, name, provider.ErrNotFound)
	}
	return p.DeepCopy(), nil
}

func (f *fakeRunner) GetPods(context.Context) ([]*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range f.pods {
		out = append(out, p.DeepCopy())
	}
	return out, nil
}

func (f *fakeRunner) get(key string) (*corev1.Pod, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods[key], f.created
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		ok, msg := cond()
		last = msg
		return ok, nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s; last seen: %s", what, last)
	}
}

// newClient is a fake clientset that gives created objects a UID, as the
// API server does.
func newClient(objs ...runtime.Object) *fake.Clientset {
	client := fake.NewClientset(objs...)
	var n int
	var mu sync.Mutex
	client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject()
		if m, err := meta.Accessor(obj); err == nil && m.GetUID() == "" {
			mu.Lock()
			n++
			m.SetUID(types.UID(fmt.Sprintf("api-%d", n)))
			mu.Unlock()
		}
		return false, nil, nil
	})
	return client
}

type harness struct {
	dir      string
	client   *fake.Clientset
	runner   *fakeRunner
	clock    *testingclock.FakeClock
	recorder *record.FakeRecorder
}

// run starts a controller for node "n" over a manifest directory, a fake
// clientset holding objs and a fake runner, read every second of a fake
// clock.
func run(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{
		dir: t.TempDir(), client: newClient(objs...), runner: &fakeRunner{pods: map[string]*corev1.Pod{}},
		clock: testingclock.NewFakeClock(time.Now()), recorder: record.NewFakeRecorder(100),
	}
	factory := informers.NewSharedInformerFactory(h.client, 0)
	c, err := New(h.client, h.runner, factory.Core().V1().Pods(), factory.Core().V1().Nodes(), h.recorder,
		Options{NodeName: "n", ManifestDir: h.dir, FileCheckFrequency: time.Second, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	factory.Start(ctx.Done())
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		factory.Shutdown()
	})
	return h
}

// writeAtomic writes a manifest as a whole, never seen half written.
func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path))
	writeFile(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// reread has the directory read again.
func (h *harness) reread() { h.clock.Step(time.Second) }

func (h *harness) mirror() (*corev1.Pod, error) {
	return h.client.CoreV1().Pods("default").Get(context.Background(), "web-n", metav1.GetOptions{})
}

func node() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "node-uid"}}
}

// The whole life of a static pod and its mirror pod: started, mirrored,
// the mirror pod recreated when deleted without the static pod being
// touched, replaced when the manifest changes, a bad manifest reported
// beside it, and both gone with the manifest.
func TestControllerLifecycle(t *testing.T) {
	h := run(t, node())
	writeAtomic(t, filepath.Join(h.dir, "web.yaml"), podYAML)
	h.reread()

	var uid types.UID
	eventually(t, "static pod running and mirrored", func() (bool, string) {
		p, _ := h.runner.get("default/web-n")
		m, err := h.mirror()
		if p == nil || err != nil {
			return false, fmt.Sprintf("pod %v, mirror %v", p != nil, err)
		}
		uid = p.UID
		return podrules.IsMirrorOf(m, p) && metav1.IsControlledBy(m, node()), fmt.Sprint(m.Annotations, m.OwnerReferences)
	})
	if p, _ := h.runner.get("default/web-n"); p.Annotations[podrules.ConfigSeenAnnotation] == "" {
		t.Errorf("static pod without %s", podrules.ConfigSeenAnnotation)
	}

	// Deleting the mirror pod brings it back; the static pod is left alone.
	m, _ := h.mirror()
	if err := h.client.CoreV1().Pods("default").Delete(context.Background(), "web-n", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mirror pod recreated", func() (bool, string) {
		again, err := h.mirror()
		return err == nil && again.UID != m.UID, fmt.Sprint(err)
	})
	if p, created := h.runner.get("default/web-n"); p == nil || p.UID != uid || created != 1 {
		t.Errorf("static pod %v after the mirror pod's deletion, created %d times: want the same, once", p, created)
	}

	// A bad manifest beside it is reported with its file.
	writeAtomic(t, filepath.Join(h.dir, "bad.yaml"), "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c, imagee: x}]}\n")
	h.reread()
	select {
	case ev := <-h.recorder.Events:
		if !strings.Contains(ev, "Warning FailedStaticPodManifest") || !strings.Contains(ev, filepath.Join(h.dir, "bad.yaml")) || !strings.Contains(ev, "imagee") {
			t.Errorf("event %q, want a warning naming the file and the field", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event for the bad manifest")
	}
	h.reread()
	select {
	case ev := <-h.recorder.Events:
		t.Errorf("event %q: the same problem reported twice", ev)
	default:
	}

	// An edited manifest replaces the static pod and its mirror pod.
	writeAtomic(t, filepath.Join(h.dir, "web.yaml"), strings.Replace(podYAML, "3600", "3601", 1))
	h.reread()
	eventually(t, "new version running and mirrored", func() (bool, string) {
		p, _ := h.runner.get("default/web-n")
		m, err := h.mirror()
		if p == nil || err != nil {
			return false, fmt.Sprintf("pod %v, mirror %v", p != nil, err)
		}
		return p.UID != uid && podrules.IsMirrorOf(m, p), fmt.Sprint(p.UID, m.Annotations)
	})

	// A removed manifest stops the pod and deletes the mirror pod.
	if err := os.Remove(filepath.Join(h.dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	h.reread()
	eventually(t, "static and mirror pod gone", func() (bool, string) {
		p, _ := h.runner.get("default/web-n")
		_, err := h.mirror()
		return p == nil && apierrors.IsNotFound(err), fmt.Sprint(p != nil, err)
	})
}

// Static pods run while the API server cannot be reached: their mirror
// pods follow once it can.
func TestStaticPodsRunWithoutTheAPI(t *testing.T) {
	client := newClient(node())
	var down sync.Mutex
	apiDown := true
	client.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		down.Lock()
		defer down.Unlock()
		if apiDown {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	h := &harness{dir: t.TempDir(), client: client, runner: &fakeRunner{pods: map[string]*corev1.Pod{}},
		clock: testingclock.NewFakeClock(time.Now()), recorder: record.NewFakeRecorder(100)}
	writeFile(t, filepath.Join(h.dir, "web.yaml"), podYAML)
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(client, h.runner, factory.Core().V1().Pods(), factory.Core().V1().Nodes(), h.recorder,
		Options{NodeName: "n", ManifestDir: h.dir, FileCheckFrequency: time.Second, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		factory.Shutdown()
	}()

	eventually(t, "static pod running", func() (bool, string) {
		p, _ := h.runner.get("default/web-n")
		return p != nil, "not running"
	})
	if _, err := h.mirror(); !apierrors.IsNotFound(err) {
		t.Errorf("mirror pod: %v, want none while the API is away", err)
	}
	down.Lock()
	apiDown = false
	down.Unlock()
	eventually(t, "mirror pod created", func() (bool, string) {
		_, err := h.mirror()
		return err == nil, fmt.Sprint(err)
	})
}

// A static pod the node already runs (an agent restarted) is not stopped
// before the sources have been read once: it may still be wanted. The
// regression: the mirror pod's informer event came before the first read
// of the directory, and the running pod was stopped and started again.
func TestNothingStoppedBeforeTheSourcesAreRead(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := newClient(node())
	runner := &fakeRunner{pods: map[string]*corev1.Pod{"default/web-n": pod("h1")}}
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(client, runner, factory.Core().V1().Pods(), factory.Core().V1().Nodes(), record.NewFakeRecorder(10),
		Options{NodeName: "n", ManifestDir: t.TempDir(), FileCheckFrequency: time.Second, Clock: testingclock.NewFakeClock(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, "default/web-n"); err != nil {
		t.Fatalf("sync before the first read: %v", err)
	}
	if p, _ := runner.get("default/web-n"); p == nil {
		t.Fatal("the running static pod was stopped before its manifest directory was read")
	}
	c.readFiles(ctx) // an empty directory: the pod is not wanted
	if err := c.sync(ctx, "default/web-n"); !errors.Is(err, errStopping) {
		t.Fatalf("sync after the read: %v, want the wait for the pod to stop", err)
	}
	if p, _ := runner.get("default/web-n"); p != nil {
		t.Error("the static pod no source names still runs after the directory was read")
	}
}

// A static pod replaced by a new version keeps its mirror pod while the
// old version stops (its grace period), as the kubelet does; the mirror
// pod of the new version follows once it has (the node e2e suite's
// "mirror pod termination should satisfy grace period when static pod is
// updated"). The mirror pod was replaced at once.
func TestMirrorPodStaysWhileThePreviousVersionStops(t *testing.T) {
	mirrorKeptWhileStopping(t, func(h *harness) {
		writeAtomic(t, filepath.Join(h.dir, "web.yaml"), strings.Replace(podYAML, "3600", "3601", 1))
	}, "the new version mirrored", func(h *harness, first *corev1.Pod) (bool, string) {
		p, _ := h.runner.get("default/web-n")
		m, err := h.mirror()
		return p != nil && err == nil && m.UID != first.UID && podrules.IsMirrorOf(m, p), fmt.Sprint(p != nil, err)
	})
}

// A static pod whose manifest is removed keeps its mirror pod while it
// stops within its grace period, as the kubelet keeps it; the mirror pod
// goes once the pod has stopped (the node e2e suite's "mirror pod
// termination should satisfy grace period when static pod is deleted").
func TestMirrorPodStaysWhileTheStaticPodStops(t *testing.T) {
	mirrorKeptWhileStopping(t, func(h *harness) {
		if err := os.Remove(filepath.Join(h.dir, "web.yaml")); err != nil {
			t.Fatal(err)
		}
	}, "the mirror pod gone", func(h *harness, _ *corev1.Pod) (bool, string) {
		_, err := h.mirror()
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// mirrorKeptWhileStopping mirrors the static pod of web.yaml, slows its
// stop, makes change to the manifest and checks that the mirror pod stays
// as it was while the pod stops; once the pod has stopped, after says
// when what follows is there.
func mirrorKeptWhileStopping(t *testing.T, change func(h *harness), what string, after func(h *harness, first *corev1.Pod) (bool, string)) {
	t.Helper()
	h := run(t, node())
	writeAtomic(t, filepath.Join(h.dir, "web.yaml"), podYAML)
	h.reread()
	var first *corev1.Pod
	eventually(t, "mirrored", func() (bool, string) {
		m, err := h.mirror()
		first = m
		return err == nil, fmt.Sprint(err)
	})
	h.runner.mu.Lock()
	h.runner.slowStop = true
	h.runner.mu.Unlock()
	change(h)
	h.reread()
	eventually(t, "the pod stopping", func() (bool, string) {
		h.runner.mu.Lock()
		defer h.runner.mu.Unlock()
		return h.runner.stopping["default/web-n"], fmt.Sprint(h.runner.stopping)
	})
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		h.reread()
		if m, err := h.mirror(); err != nil || m.UID != first.UID {
			t.Fatalf("the mirror pod changed while the pod stops: %v, %v", m, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.runner.finish("default/web-n")
	h.reread()
	eventually(t, what, func() (bool, string) { return after(h, first) })
}

// A manifest removed and written back at once is seen gone in between,
// without waiting for the periodic read (the fake clock never fires it
// here), and its pod, the same pod by its UID, stops and then starts
// again, as the kubelet restarts it (the node e2e suite's "MirrorPod …
// should successfully recreate when file is removed and recreated"). Its
// mirror pod stays meanwhile. Read only every period, the removal went
// unseen and the pod ran on untouched.
func TestManifestRemovedAndWrittenBackRestartsThePod(t *testing.T) {
	h := run(t, node())
	path := filepath.Join(h.dir, "web.yaml")
	writeAtomic(t, path, podYAML)
	var first *corev1.Pod
	eventually(t, "running and mirrored, seen without a periodic read", func() (bool, string) {
		p, _ := h.runner.get("default/web-n")
		m, err := h.mirror()
		first = m
		return p != nil && err == nil, fmt.Sprint(p != nil, err)
	})
	h.runner.mu.Lock()
	h.runner.slowStop = true
	h.runner.mu.Unlock()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod stopping", func() (bool, string) {
		h.runner.mu.Lock()
		defer h.runner.mu.Unlock()
		return h.runner.stopping["default/web-n"], fmt.Sprint(h.runner.stopping)
	})
	writeAtomic(t, path, podYAML)
	eventually(t, "the manifest read again", func() (bool, string) {
		h.runner.mu.Lock()
		defer h.runner.mu.Unlock()
		return h.runner.deletes > 1, fmt.Sprintf("%d stop requests", h.runner.deletes)
	})
	if _, created := h.runner.get("default/web-n"); created != 1 {
		t.Fatalf("the pod was started again before it stopped (%d starts)", created)
	}
	h.runner.finish("default/web-n")
	eventually(t, "started again", func() (bool, string) {
		p, created := h.runner.get("default/web-n")
		return p != nil && created == 2, fmt.Sprintf("running %v, %d starts", p != nil, created)
	})
	if m, err := h.mirror(); err != nil || m.UID != first.UID {
		t.Errorf("the mirror pod was replaced: %v, %v", m, err)
	}
}

// A manifest removed and written back before the controller reads the
// directory again still restarts its pod: the watch's removal event
// counts, not only what a read finds (the node e2e suite writes the file
// back at once, and under load the read came after it). The file is
// written back at once here, and the pod must stop and start again.
func TestManifestRemovedAndWrittenBackAtOnceRestartsThePod(t *testing.T) {
	h := run(t, node())
	path := filepath.Join(h.dir, "web.yaml")
	writeAtomic(t, path, podYAML)
	eventually(t, "running", func() (bool, string) {
		p, _ := h.runner.get("default/web-n")
		return p != nil, "not yet"
	})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, path, podYAML)
	eventually(t, "stopped and started again", func() (bool, string) {
		p, created := h.runner.get("default/web-n")
		return p != nil && created == 2, fmt.Sprintf("running %v, %d starts", p != nil, created)
	})
}
