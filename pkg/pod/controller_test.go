package pod

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/provider"
)

// fakeProvider is a minimal in-memory provider: pods run at once and
// terminate at once, and each change is notified.
type fakeProvider struct {
	mu      sync.Mutex
	pods    map[string]*corev1.Pod
	reject  string
	deleted []string
	updates int
	notify  func(*corev1.Pod)
}

func newFakeProvider(pods ...*corev1.Pod) *fakeProvider {
	f := &fakeProvider{pods: map[string]*corev1.Pod{}}
	for _, p := range pods {
		f.pods[p.Namespace+"/"+p.Name] = p
	}
	return f
}

func (f *fakeProvider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	if f.reject != "" {
		return provider.Reject(f.reject, "no room for %s", pod.Name)
	}
	p := pod.DeepCopy()
	runningStatus(p)
	f.mu.Lock()
	f.pods[p.Namespace+"/"+p.Name] = p
	cb := f.notify
	f.mu.Unlock()
	if cb != nil {
		cb(p.DeepCopy())
	}
	return nil
}

func (f *fakeProvider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := pod.Namespace + "/" + pod.Name
	if old, ok := f.pods[key]; ok {
		p := pod.DeepCopy()
		p.Status = old.Status
		f.pods[key] = p
		f.updates++
	}
	return nil
}

func (f *fakeProvider) updateCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.updates
}

func (f *fakeProvider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	key := pod.Namespace + "/" + pod.Name
	f.mu.Lock()
	p, ok := f.pods[key]
	delete(f.pods, key)
	f.deleted = append(f.deleted, key)
	cb := f.notify
	f.mu.Unlock()
	if ok && cb != nil {
		// Its final status: the container ended with SIGTERM.
		p.Status.Phase = corev1.PodFailed
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error"}}
			p.Status.ContainerStatuses[i].Ready = false
		}
		cb(p)
	}
	return nil
}

func (f *fakeProvider) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pods[ns+"/"+name]
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", ns, name, provider.ErrNotFound)
	}
	return p.DeepCopy(), nil
}

func (f *fakeProvider) GetPods(context.Context) ([]*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range f.pods {
		out = append(out, p.DeepCopy())
	}
	return out, nil
}

func (f *fakeProvider) NotifyPods(_ context.Context, cb func(*corev1.Pod)) {
	f.mu.Lock()
	f.notify = cb
	f.mu.Unlock()
}

func (f *fakeProvider) deletedKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deleted...)
}

// startController runs a controller for node "n" over a fake clientset.
func startController(t *testing.T, p *fakeProvider, objs ...*corev1.Pod) *fake.Clientset {
	t.Helper()
	client, _ := runController(t, p, objs...)
	return client
}

func runController(t *testing.T, p *fakeProvider, objs ...*corev1.Pod) (*fake.Clientset, *Controller) {
	t.Helper()
	var runtimeObjs []runtime.Object
	for _, o := range objs {
		runtimeObjs = append(runtimeObjs, o)
	}
	client := fake.NewClientset(runtimeObjs...)
	return client, runWith(t, client, p, Options{Workers: 2})
}

// runWith runs a controller for node "n" with provider p over client until
// the test ends.
func runWith(t *testing.T, client *fake.Clientset, p provider.PodLifecycleHandler, opts Options) *Controller {
	t.Helper()
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := NewController(client, factory.Core().V1().Pods(), map[string]provider.PodLifecycleHandler{"n": p}, record.NewFakeRecorder(100), opts)
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
	return c
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func getPod(client *fake.Clientset, name string) (*corev1.Pod, error) {
	return client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
}

func TestCreateReportsRunning(t *testing.T) {
	p := newFakeProvider()
	client := startController(t, p, testPod("a", "n"))
	eventually(t, "pod Running in the API", func() bool {
		pod, err := getPod(client, "p")
		return err == nil && pod.Status.Phase == corev1.PodRunning
	})
}

func TestRejectedPodFails(t *testing.T) {
	p := newFakeProvider()
	p.reject = "OutOfcpu"
	client := startController(t, p, testPod("a", "n"))
	eventually(t, "pod Failed with the rejection's reason", func() bool {
		pod, err := getPod(client, "p")
		return err == nil && pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == "OutOfcpu"
	})
}

func TestGracefulDeletionIsFinished(t *testing.T) {
	running := testPod("a", "n", runningStatus)
	p := newFakeProvider(running.DeepCopy())
	deleting := running.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	client := startController(t, p, deleting)
	eventually(t, "pod deleted from the API", func() bool {
		_, err := getPod(client, "p")
		return apierrors.IsNotFound(err)
	})
	if got := p.deletedKeys(); len(got) == 0 || got[0] != "ns/p" {
		t.Errorf("provider deletions = %v, want ns/p stopped first", got)
	}
}

func TestStartupStopsOnlyDanglingPods(t *testing.T) {
	live := testPod("a", "n", runningStatus)
	dangling := testPod("x", "n", runningStatus)
	dangling.Name = "gone"
	p := newFakeProvider(live.DeepCopy(), dangling)
	client := startController(t, p, live)
	eventually(t, "dangling pod stopped", func() bool { return len(p.deletedKeys()) > 0 })
	if got := p.deletedKeys(); len(got) != 1 || got[0] != "ns/gone" {
		t.Errorf("provider deletions = %v, want only ns/gone", got)
	}
	if _, err := getPod(client, "p"); err != nil {
		t.Errorf("live pod: %v", err)
	}
}

// The provider hears of a change of labels or annotations, not only of
// the spec: downward API volumes and env follow them.
func TestMetadataChangeReachesTheProvider(t *testing.T) {
	p := newFakeProvider()
	client := startController(t, p, testPod("a", "n"))
	eventually(t, "pod Running in the API", func() bool {
		pod, err := getPod(client, "p")
		return err == nil && pod.Status.Phase == corev1.PodRunning
	})
	for i, change := range []func(*corev1.Pod){
		func(pod *corev1.Pod) { pod.Annotations = map[string]string{"mysubpath": "mypath"} },
		func(pod *corev1.Pod) { pod.Labels = map[string]string{"key": "value"} },
	} {
		pod, err := getPod(client, "p")
		if err != nil {
			t.Fatal(err)
		}
		change(pod)
		if _, err := client.CoreV1().Pods("ns").Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, fmt.Sprintf("update %d in the provider", i+1), func() bool {
			got, err := p.GetPod(context.Background(), "ns", "p")
			return err == nil && p.updateCount() == i+1 &&
				equality.Semantic.DeepEqual(got.Labels, pod.Labels) && equality.Semantic.DeepEqual(got.Annotations, pod.Annotations)
		})
	}
}

// The final status a provider reports once a deleted pod's containers have
// stopped is written before the pod is deleted from the API, as the
// kubelet does: a pod a finalizer keeps shows how its containers ended.
func TestFinalStatusIsWrittenBeforeTheDelete(t *testing.T) {
	running := testPod("a", "n", runningStatus)
	p := newFakeProvider(running.DeepCopy())
	deleting := running.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	client := startController(t, p, deleting)
	eventually(t, "pod deleted from the API", func() bool {
		_, err := getPod(client, "p")
		return apierrors.IsNotFound(err)
	})
	var order []string
	for _, a := range client.Actions() {
		switch {
		case a.GetVerb() == "patch" && a.GetSubresource() == "status":
			patch := string(a.(k8stesting.PatchAction).GetPatch())
			if strings.Contains(patch, `"terminated"`) {
				order = append(order, "final status")
			}
		case a.GetVerb() == "delete":
			order = append(order, "delete")
		}
	}
	if len(order) < 2 || order[0] != "final status" || order[1] != "delete" {
		t.Errorf("API writes %v, want the final status, then the delete", order)
	}
}

// A deleted pod whose containers have stopped gets one final status patch
// and one delete, however often it is synced before the cache sees it
// gone: the delete's own update (deletionGracePeriodSeconds set to 0) and
// the final status patch both come back through the informer while the
// cache still holds the pod, and each used to send the delete again, to be
// answered 404.
func TestFinalDeleteIsSentOnce(t *testing.T) {
	running := testPod("a", "n", runningStatus)
	deleting := running.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	// The provider has stopped the pod and forgotten it; its final status
	// came with the notification. The cache keeps the pod as it was before
	// any write, as a cache that has not caught up does.
	client, c := newIdleController(t, newFakeProvider(), deleting)
	final := deleting.DeepCopy()
	final.Status.Phase = corev1.PodSucceeded
	final.Status.ContainerStatuses[0].Ready = false
	final.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}
	c.reports.put("ns/p", final)

	for range 3 {
		if err := c.sync(context.Background(), "ns/p"); err != nil {
			t.Fatal(err)
		}
	}
	var patches, deletes int
	for _, a := range client.Actions() {
		switch {
		case a.GetVerb() == "patch" && a.GetSubresource() == "status":
			patches++
		case a.GetVerb() == "delete":
			deletes++
		}
	}
	if patches != 1 || deletes != 1 {
		t.Errorf("%d status patches and %d deletes, want 1 and 1", patches, deletes)
	}
}

// A pod deleted with no grace already (a kwok stage's delete, a forced
// delete) that the provider no longer runs is not deleted again: the API
// removes it by itself. In a 5,000-node run the stage's delete came back
// as an update (deletionGracePeriodSeconds 0) and 73% of pods got a
// second delete, answered 404.
func TestNoDeleteAfterADeleteWithNoGrace(t *testing.T) {
	pod := testPod("a", "n", runningStatus)
	now := metav1.Now()
	var zero int64
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &now, &zero
	client, c := newIdleController(t, newFakeProvider(), pod)
	if err := c.sync(context.Background(), "ns/p"); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "delete" || a.GetVerb() == "patch" {
			t.Errorf("request %s %s/%s, want none", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
	}
}

// A delete cut short between the API server's two steps (the grace period
// set to 0, then the removal), its client killed, leaves the pod in the API
// with no grace for good: the controller, which does not delete such a pod
// at once (the API removes it by itself), deletes it once it is still
// there a while later.
func TestPodLeftWithNoGraceIsDeletedAgain(t *testing.T) {
	pod := testPod("a", "n", runningStatus)
	now := metav1.Now()
	var zero int64
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &now, &zero
	client, c := newIdleController(t, newFakeProvider(), pod)
	clk := clocktesting.NewFakeClock(now.Time)
	c.opts.Clock = clk
	deletes := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "delete" {
				n++
			}
		}
		return n
	}
	ctx := context.Background()
	if err := c.sync(ctx, "ns/p"); err != nil {
		t.Fatal(err)
	}
	if n := deletes(); n != 0 {
		t.Fatalf("%d deletes at once, want none: the API removes a pod deleted with no grace by itself", n)
	}
	clk.Step(zeroGraceWait / 2)
	if err := c.sync(ctx, "ns/p"); err != nil {
		t.Fatal(err)
	}
	if n := deletes(); n != 0 {
		t.Fatalf("%d deletes %s later, want none yet", n, zeroGraceWait/2)
	}
	clk.Step(zeroGraceWait)
	if err := c.sync(ctx, "ns/p"); err != nil {
		t.Fatal(err)
	}
	if n := deletes(); n != 1 {
		t.Fatalf("%d deletes of a pod still there with no grace %s later, want 1", n, 3*zeroGraceWait/2)
	}
	if err := c.sync(ctx, "ns/p"); err != nil {
		t.Fatal(err)
	}
	if n := deletes(); n != 1 {
		t.Errorf("%d deletes after the next sync, want still 1", n)
	}
}

// scribbler is a provider that changes every pod it is handed, as the
// contract lets it: labels, annotations, spec and status.
type scribbler struct{ *fakeProvider }

func scribble(pod *corev1.Pod) {
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels["scribbled"] = "yes"
	pod.Spec.Containers[0].Image = "scribbled"
	pod.Status.Phase = corev1.PodUnknown
}

func (s scribbler) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	scribble(pod)
	return s.fakeProvider.CreatePod(ctx, pod)
}

func (s scribbler) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	scribble(pod)
	return s.fakeProvider.UpdatePod(ctx, pod)
}

func (s scribbler) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	scribble(pod)
	return s.fakeProvider.DeletePod(ctx, pod)
}

// The sync reads the informer cache's pods without copying them, and
// hands a provider a copy of its own: what the provider changes never
// reaches the cache, whether it creates, updates or deletes the pod.
func TestProviderChangesNeverReachTheCache(t *testing.T) {
	pod := testPod("a", "n")
	_, c := newIdleController(t, scribbler{newFakeProvider()}, pod)
	cached := func() *corev1.Pod {
		p, err := c.lister.Pods("ns").Get("p")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	check := func(step string, want *corev1.Pod) {
		t.Helper()
		if got := cached(); !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("after the %s, the cache's pod is %+v, want %+v", step, got, want)
		}
	}
	sync := func() {
		t.Helper()
		if err := c.sync(context.Background(), "ns/p"); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	check("create", pod)

	updated := cached().DeepCopy()
	updated.Annotations = map[string]string{"new": "annotation"}
	if err := c.informer.GetIndexer().Update(updated); err != nil {
		t.Fatal(err)
	}
	sync()
	check("update", updated)

	deleting := updated.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	if err := c.informer.GetIndexer().Update(deleting); err != nil {
		t.Fatal(err)
	}
	sync()
	check("delete", deleting)
}

// sharer is a provider that shares the cache's pods (provider.PodSharer)
// and keeps the very objects it is handed.
type sharer struct {
	*fakeProvider
	mu     sync.Mutex
	handed []*corev1.Pod
}

func (s *sharer) SharesPods() {}

func (s *sharer) hand(pod *corev1.Pod) {
	s.mu.Lock()
	s.handed = append(s.handed, pod)
	s.mu.Unlock()
}

func (s *sharer) last() *corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.handed) == 0 {
		return nil
	}
	return s.handed[len(s.handed)-1]
}

func (s *sharer) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	s.hand(pod)
	return s.fakeProvider.CreatePod(ctx, pod)
}

func (s *sharer) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	s.hand(pod)
	return s.fakeProvider.UpdatePod(ctx, pod)
}

// A provider that shares the cache's pods is handed the cache's own object,
// and the newer one each time the cache replaces it (its status written),
// so that it never keeps a replaced object alive beside the cache's.
func TestSharingProviderKeepsTheCachesObject(t *testing.T) {
	p := &sharer{fakeProvider: newFakeProvider()}
	_, c := newIdleController(t, p, testPod("a", "n"))
	cached := func() *corev1.Pod {
		pod, err := c.lister.Pods("ns").Get("p")
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}
	sync := func() {
		t.Helper()
		if err := c.sync(context.Background(), "ns/p"); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	if p.last() != cached() {
		t.Fatal("created with a copy, want the cache's own pod")
	}
	written := cached().DeepCopy()
	written.ResourceVersion = "2"
	runningStatus(written)
	if err := c.informer.GetIndexer().Update(written); err != nil {
		t.Fatal(err)
	}
	sync()
	if p.last() != cached() {
		t.Fatal("the provider keeps the replaced object, want the cache's newer one")
	}
	n := len(p.handed)
	sync()
	if len(p.handed) != n {
		t.Error("handed the same object again")
	}
}
