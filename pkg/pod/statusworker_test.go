package pod

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/provider"
)

// newIdleController returns a controller for node "n" whose workers do not
// run (the test calls sync and syncStatus itself) and whose cache holds
// objs and is never started, as a cache that has not caught up.
func newIdleController(t *testing.T, p provider.PodLifecycleHandler, objs ...*corev1.Pod) (*fake.Clientset, *Controller) {
	t.Helper()
	var runtimeObjs []runtime.Object
	for _, o := range objs {
		runtimeObjs = append(runtimeObjs, o.DeepCopy())
	}
	client := fake.NewClientset(runtimeObjs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := NewController(client, factory.Core().V1().Pods(), map[string]provider.PodLifecycleHandler{"n": p}, record.NewFakeRecorder(100), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := c.informer.GetIndexer().Add(o.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c.queue.ShutDown()
		c.statusQueue.ShutDown()
	})
	return client, c
}

// apiWrites lists the status patches ("status") and deletes ("delete")
// sent to the API, in order.
func apiWrites(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		switch {
		case a.GetVerb() == "patch" && a.GetSubresource() == "status":
			out = append(out, "status")
		case a.GetVerb() == "delete":
			out = append(out, "delete")
		}
	}
	return out
}

// conflictOnce makes the next n status patches answer 409 Conflict.
func conflictOnce(client *fake.Clientset, n int) {
	var mu sync.Mutex
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if a.GetSubresource() != "status" || n == 0 {
			return false, nil, nil
		}
		n--
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("try again"))
	})
}

// A report of another pod of the same name (an older UID) is dropped, not
// written; a pod gone from the API takes its report with it.
func TestReportOfAnotherPodIsDropped(t *testing.T) {
	ctx := context.Background()
	api := testPod("new", "n")
	client, c := newIdleController(t, newFakeProvider(), api)
	c.records.get("ns/p", "n", api.UID)
	c.reports.put("ns/p", testPod("old", "n", runningStatus))
	if err := c.syncStatus(ctx, "ns/p"); err != nil {
		t.Fatal(err)
	}
	if got := apiWrites(client); len(got) != 0 {
		t.Errorf("API writes %v for a report of the replaced pod, want none", got)
	}
	if _, ok := c.reports.newest("ns/p"); ok {
		t.Error("the report of the replaced pod was kept")
	}

	c.reports.put("ns/gone", testPod("x", "n", runningStatus))
	if err := c.syncStatus(ctx, "ns/gone"); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.reports.newest("ns/gone"); ok {
		t.Error("the report of a pod gone from the API was kept")
	}
}

// A status the provider pushes while the spec worker creates the pod is
// written once, however often the workers see the pod again before the
// cache catches up.
func TestPushDuringCreateIsWrittenOnce(t *testing.T) {
	ctx := context.Background()
	p := newFakeProvider()
	client, c := newIdleController(t, p, testPod("a", "n"))
	p.NotifyPods(ctx, func(pod *corev1.Pod) { c.pushed(ctx, pod) })
	// CreatePod pushes Running before it returns.
	if err := c.sync(ctx, "ns/p"); err != nil {
		t.Fatal(err)
	}
	syncBothAtOnce(ctx, t, c, "ns/p", 3)
	if got := apiWrites(client); !slices.Equal(got, []string{"status"}) {
		t.Errorf("API writes %v, want one status patch", got)
	}
	pod, err := getPod(client, "p")
	if err != nil || pod.Status.Phase != corev1.PodRunning {
		t.Errorf("pod %v (%v), want Running", pod.Status.Phase, err)
	}
}

// The final status a provider pushes while the spec worker stops the pod
// is written once and before the one delete, whichever worker writes it.
func TestFinalPushDuringStopIsWrittenOnce(t *testing.T) {
	ctx := context.Background()
	running := testPod("a", "n", runningStatus)
	deleting := running.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	p := newFakeProvider(running.DeepCopy())
	client, c := newIdleController(t, p, deleting)
	p.NotifyPods(ctx, func(pod *corev1.Pod) { c.pushed(ctx, pod) })
	// DeletePod stops the pod at once and pushes its final status.
	if err := c.sync(ctx, "ns/p"); err != nil {
		t.Fatal(err)
	}
	syncBothAtOnce(ctx, t, c, "ns/p", 3)
	if got := apiWrites(client); !slices.Equal(got, []string{"status", "delete"}) {
		t.Errorf("API writes %v, want the final status, then the delete", got)
	}
}

// syncBothAtOnce runs the spec worker's and the status worker's sync of
// key n times each, all at once, as the two pools may.
func syncBothAtOnce(ctx context.Context, t *testing.T, c *Controller, key string, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := c.sync(ctx, key); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if err := c.syncStatus(ctx, key); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// A status write that conflicts is retried from the status queue, reading
// the pod from the API rather than from the cache, until it lands.
func TestStatusQueueRetriesOnConflict(t *testing.T) {
	client := fake.NewClientset(testPod("a", "n"))
	conflictOnce(client, 2)
	runWith(t, client, newFakeProvider(), Options{Workers: 2})
	eventually(t, "pod Running in the API", func() bool {
		// Read from the tracker: the controller's reads are counted below.
		obj, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "ns", "p")
		return err == nil && obj.(*corev1.Pod).Status.Phase == corev1.PodRunning
	})
	gets := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
			gets++
		}
	}
	if gets < 2 {
		t.Errorf("the pod was read from the API %d times after 2 conflicts, want each retry to read it", gets)
	}
}

// A write that conflicts because the pod was replaced is not sent again:
// the retry finds another pod in the API.
func TestConflictOnReplacedPodIsNotRetried(t *testing.T) {
	ctx := context.Background()
	old := testPod("old", "n")
	client, c := newIdleController(t, newFakeProvider(), old)
	c.records.get("ns/p", "n", old.UID)
	c.reports.put("ns/p", testPod("old", "n", runningStatus))
	conflictOnce(client, 1)
	if err := c.syncStatus(ctx, "ns/p"); !apierrors.IsConflict(err) {
		t.Fatalf("first write: %v, want the conflict returned for the queue to retry", err)
	}
	// The API replaced the pod; the cache has not seen it.
	if err := client.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, testPod("new", "n"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.syncStatus(ctx, "ns/p"); err != nil {
		t.Fatal(err)
	}
	if got := apiWrites(client); !slices.Equal(got, []string{"status", "delete"}) {
		t.Errorf("API writes %v, want the status patch that conflicted and the test's delete", got)
	}
}

// The kept report is written again when the API's pod changes what the
// status should be, without a push: a readiness gate turning True makes
// the pod Ready.
func TestReadinessGateMakesThePodReady(t *testing.T) {
	gated := testPod("a", "n", func(p *corev1.Pod) {
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}}
	})
	client := startController(t, newFakeProvider(), gated)
	ready := func(want corev1.ConditionStatus) func() bool {
		return func() bool {
			pod, err := getPod(client, "p")
			if err != nil || pod.Status.Phase != corev1.PodRunning {
				return false
			}
			c := condition(&pod.Status, corev1.PodReady)
			return c != nil && c.Status == want
		}
	}
	eventually(t, "pod Running and not Ready", ready(corev1.ConditionFalse))
	pod, err := getPod(client, "p")
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: "example.com/gate", Status: corev1.ConditionTrue})
	if _, err := client.CoreV1().Pods("ns").UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod Ready once its gate is True", ready(corev1.ConditionTrue))
}

// polledProvider is a provider that cannot push: the fake provider
// without its NotifyPods.
type polledProvider struct{ provider.PodLifecycleHandler }

// The status of a provider that cannot push is read after the create and
// then at each poll.
func TestPolledProviderStatusIsRead(t *testing.T) {
	f := newFakeProvider()
	clk := testingclock.NewFakeClock(time.Now())
	client := fake.NewClientset(testPod("a", "n"))
	runWith(t, client, polledProvider{f}, Options{Workers: 2, Clock: clk, StatusPollInterval: time.Second})
	eventually(t, "pod Running in the API", func() bool {
		pod, err := getPod(client, "p")
		return err == nil && pod.Status.Phase == corev1.PodRunning
	})
	f.mu.Lock()
	f.pods["ns/p"].Status.Phase = corev1.PodSucceeded
	f.mu.Unlock()
	eventually(t, "pod Succeeded in the API", func() bool {
		clk.Step(time.Second)
		pod, err := getPod(client, "p")
		return err == nil && pod.Status.Phase == corev1.PodSucceeded
	})
}

// The informer's echo of a status write (the pod at the resourceVersion
// the write gave it) is not compared again: at thousands of pods, each
// write's echo redoing the merge and the comparison was most of the
// status worker's garbage. Any other version of the pod is compared.
func TestEchoOfAWriteIsNotComparedAgain(t *testing.T) {
	ctx := context.Background()
	api := testPod("a", "n")
	api.ResourceVersion = "5"
	client, c := newIdleController(t, newFakeProvider(), api)
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		echo := testPod("a", "n", runningStatus)
		echo.ResourceVersion = "6"
		return true, echo, nil
	})
	c.records.get("ns/p", "n", api.UID)
	c.reports.put("ns/p", testPod("a", "n", runningStatus))
	if err := c.syncStatus(ctx, "ns/p"); err != nil {
		t.Fatal(err)
	}
	if got := apiWrites(client); !slices.Equal(got, []string{"status"}) {
		t.Fatalf("API writes %v, want one status patch", got)
	}
	echo := testPod("a", "n", runningStatus)
	echo.ResourceVersion = "6"
	if err := c.informer.GetIndexer().Update(echo); err != nil {
		t.Fatal(err)
	}
	compare := testing.AllocsPerRun(20, func() {
		rec, _ := c.records.matching("ns/p", "n", api.UID)
		rep, _ := c.reports.newest("ns/p")
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if err := c.updateStatus(ctx, rec, echo, &rep.status); err != nil {
			t.Fatal(err)
		}
	})
	skipped := testing.AllocsPerRun(20, func() {
		if err := c.syncStatus(ctx, "ns/p"); err != nil {
			t.Fatal(err)
		}
	})
	if skipped*4 > compare {
		t.Errorf("syncStatus of the echo made %v allocations, the comparison it should skip %v", skipped, compare)
	}
	if got := apiWrites(client); len(got) != 1 {
		t.Errorf("API writes %v after the echo, want the one status patch", got)
	}
}
