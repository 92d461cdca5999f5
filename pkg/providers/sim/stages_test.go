package sim

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/stage"
)

// kwokSet is one of kwok's published stage sets, as pkg/stage keeps them.
func kwokSet(t testing.TB, set string) stage.Lifecycle {
	t.Helper()
	l, err := stage.LoadLifecycle(filepath.Join("..", "..", "stage", "testdata", "kwok", set))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func inlineStages(t testing.TB, y string) stage.Lifecycle {
	t.Helper()
	stages, err := stage.Decode([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	l, err := stage.CompileAll(stages)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// fakeAPI records what stages ask of the API server; with deleteErr, it
// refuses every delete.
type fakeAPI struct {
	mu        sync.Mutex
	calls     []string
	events    []string
	deleted   []string
	deleteErr error
}

func (f *fakeAPI) PatchPod(_ context.Context, pod *corev1.Pod, pt types.PatchType, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, pod.Name+" "+string(pt)+" "+string(data))
	return nil
}

func (f *fakeAPI) DeletePod(_ context.Context, pod *corev1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, pod.Name)
	return f.deleteErr
}

func (f *fakeAPI) Event(_ runtime.Object, eventtype, reason, _ string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, eventtype+" "+reason)
}

func (f *fakeAPI) snapshot() (calls, events, deleted []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...), append([]string(nil), f.events...), append([]string(nil), f.deleted...)
}

func deleting(pod *corev1.Pod, at time.Time, grace int64) *corev1.Pod {
	d := pod.DeepCopy()
	d.DeletionTimestamp = &metav1.Time{Time: at.Add(time.Duration(grace) * time.Second)}
	d.DeletionGracePeriodSeconds = &grace
	return d
}

func TestStagesKwokPodFast(t *testing.T) {
	ctx := context.Background()
	p, _, rec := newTest(t, func(o *Options) { o.Stages = kwokSet(t, "pod/fast") })
	pod := testPod("web", "100m", "")
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	got := mustGet(t, p, "web")
	s := got.Status
	if s.Phase != corev1.PodRunning || s.PodIP != "10.0.0.1" || s.HostIP != "192.168.0.10" {
		t.Fatalf("phase %s podIP %s hostIP %s, want Running 10.0.0.1 192.168.0.10", s.Phase, s.PodIP, s.HostIP)
	}
	if condition(got, corev1.PodReady) != corev1.ConditionTrue || len(s.ContainerStatuses) != 2 || s.ContainerStatuses[0].State.Running == nil {
		t.Errorf("status %+v, want ready with two running containers", s)
	}
	if last := rec.last(); last == nil || last.Status.Phase != corev1.PodRunning {
		t.Errorf("last notification %v, want the Running pod", last)
	}
	if err := p.DeletePod(ctx, deleting(pod, t0, 30)); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	if _, err := p.GetPod(ctx, "ns", "web"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("GetPod after pod-delete: %v, want not found", err)
	}
	if last := rec.last(); last == nil || last.Name != "web" || last.DeletionTimestamp == nil {
		t.Errorf("last notification %v, want the deleted pod", last)
	} else {
		stopped(t, last)
	}
	// Its IP and requests were released: the next pod takes the same IP.
	if err := p.CreatePod(ctx, testPod("next", "", "")); err != nil {
		t.Fatal(err)
	}
	if ip := mustGet(t, p, "next").Status.PodIP; ip != "10.0.0.1" {
		t.Errorf("next pod's IP %s, want the released 10.0.0.1", ip)
	}
}

func TestStagesKwokPodGeneral(t *testing.T) {
	ctx := context.Background()
	api := &fakeAPI{}
	p, clk, rec := newTest(t, func(o *Options) {
		o.Stages = kwokSet(t, "pod/general")
		o.Events = api
		o.Seed = 7
	})
	job := testPod("job", "1", "")
	job.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "j"}}
	if err := p.CreatePod(ctx, job); err != nil {
		t.Fatal(err)
	}
	if s := mustGet(t, p, "job").Status; s.Phase != corev1.PodPending || s.PodIP != "" {
		t.Fatalf("phase %q, pod IP %q before pod-create's delay; want Pending with no IP yet", s.Phase, s.PodIP)
	}
	// pod-create, the init container's running and completed, pod-ready
	// and pod-complete, each after 1 to 5 s: one notification each.
	for range 30 {
		advance(p, clk, time.Second)
	}
	want := []corev1.PodPhase{corev1.PodPending, corev1.PodPending, corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded}
	if phases := rec.phases(); !equalPhases(phases, want) {
		t.Fatalf("notified phases %v, want %v", phases, want)
	}
	got := mustGet(t, p, "job")
	if ics := got.Status.InitContainerStatuses; len(ics) != 1 || ics[0].State.Terminated == nil {
		t.Errorf("init container statuses %+v, want one terminated", ics)
	}
	if _, events, _ := api.snapshot(); len(events) != 1 || events[0] != "Normal Created" {
		t.Errorf("events %v, want pod-create's", events)
	}
	p.mu.Lock()
	finished, used := p.finished, p.used
	p.mu.Unlock()
	if finished != 1 || used != (podrules.Requests{}) {
		t.Errorf("finished %d, used %+v; want the Succeeded pod released", finished, used)
	}

	// Deleted with 30 s of grace: pod-delete waits 1 s up to the deletion
	// time.
	if err := p.DeletePod(ctx, deleting(job, clk.Now(), 30)); err != nil {
		t.Fatal(err)
	}
	advance(p, clk, 500*time.Millisecond)
	mustGet(t, p, "job")
	advance(p, clk, 30*time.Second)
	if _, err := p.GetPod(ctx, "ns", "job"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("GetPod after pod-delete: %v, want not found", err)
	}
	if got := clk.Waiters(); got != 0 {
		t.Errorf("%d timers pending with no pod left", got)
	}
}

func equalPhases(a, b []corev1.PodPhase) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// stopped fails the test unless the pod's last status, as the provider
// reported it when it ended, has no running container and is not Running:
// the pod controller removes a deleted pod from the API only then.
func stopped(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodPending && len(pod.Status.ContainerStatuses) > 0 {
		t.Errorf("the ended pod's last status is %s, want it stopped", pod.Status.Phase)
	}
	for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if cs.State.Running != nil {
			t.Errorf("the ended pod's container %s still runs", cs.Name)
		}
	}
}

// A pod deleted with no grace (or gone from the API) ends at once, stages
// or not.
func TestStagesDeleteAtOnce(t *testing.T) {
	ctx := context.Background()
	p, clk, rec := newTest(t, func(o *Options) { o.Stages = kwokSet(t, "pod/general") })
	pod := testPod("p", "", "")
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := p.DeletePod(ctx, deleting(pod, clk.Now(), 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.GetPod(ctx, "ns", "p"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("GetPod: %v, want not found", err)
	}
	if last := rec.last(); last == nil || last.Name != "p" {
		t.Errorf("last notification %v, want the deleted pod", last)
	} else {
		stopped(t, last)
	}
	p.rearming.Wait()
	if got := clk.Waiters(); got != 0 {
		t.Errorf("%d timers pending", got)
	}
}

const finalizerStages = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: guard}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
    - {key: .metadata.finalizers, operator: DoesNotExist}
  next:
    finalizers: {add: [{value: example.com/guard}]}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: release}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: Exists}
    - {key: .metadata.finalizers, operator: Exists}
  next:
    event: {type: Normal, reason: Released, message: finalizer removed}
    finalizers: {remove: [{value: example.com/guard}]}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: evict}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchLabels: {evict: "yes"}
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
  next: {delete: true}
`

func TestStagesFinalizersAndDeleteThroughAPI(t *testing.T) {
	ctx := context.Background()
	api := &fakeAPI{}
	p, _, _ := newTest(t, func(o *Options) {
		o.Stages = inlineStages(t, finalizerStages+"---\n"+kwokPodDelete)
		o.API, o.Events = api, api
	})
	pod := testPod("p", "", "")
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	calls, _, _ := api.snapshot()
	if len(calls) != 1 || !strings.Contains(calls[0], `"path":"/metadata/finalizers","value":["example.com/guard"]`) {
		t.Fatalf("API calls %v, want one JSON patch adding the finalizer", calls)
	}
	if f := mustGet(t, p, "p").Finalizers; len(f) != 1 {
		t.Fatalf("finalizers %v, want the provider's copy to have the one added", f)
	}
	// Deleted: the finalizer is removed, then pod-delete ends the pod.
	withF := pod.DeepCopy()
	withF.Finalizers = []string{"example.com/guard"}
	if err := p.DeletePod(ctx, deleting(withF, t0, 30)); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	calls, events, _ := api.snapshot()
	if len(calls) != 2 || !strings.Contains(calls[1], `"op":"remove","path":"/metadata/finalizers"`) {
		t.Errorf("API calls %v, want the finalizer removed", calls)
	}
	if len(events) != 1 || events[0] != "Normal Released" {
		t.Errorf("events %v", events)
	}
	if _, err := p.GetPod(ctx, "ns", "p"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("GetPod: %v, want the pod ended", err)
	}
	if _, _, deleted := api.snapshot(); len(deleted) != 1 || deleted[0] != "p" {
		t.Errorf("deleted %v, want p through the API", deleted)
	}

	// A stage's delete of a pod not being deleted goes to the API.
	ev := testPod("ev", "", "")
	ev.Finalizers = []string{"keep"}
	ev.Labels = map[string]string{"evict": "yes"}
	if err := p.CreatePod(ctx, ev); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	if _, _, deleted := api.snapshot(); len(deleted) != 2 || deleted[1] != "ev" {
		t.Errorf("deleted %v, want ev through the API", deleted)
	}
	mustGet(t, p, "ev") // until the API's delete comes back
}

// With an API client, kwok's pod-delete deletes a pod being deleted in
// the API, as kwok does, and the provider lets it go with the status the
// stages made: no final status is reported, so none is written before the
// delete. If the API refuses the delete, the pod ends with its final
// status, and the pod controller deletes it.
func TestStagesDeleteBeingDeletedThroughAPI(t *testing.T) {
	ctx := context.Background()
	api := &fakeAPI{}
	p, _, rec := newTest(t, func(o *Options) {
		o.Stages = kwokSet(t, "pod/fast")
		o.API = api
	})
	for _, name := range []string{"a", "b"} {
		if err := p.CreatePod(ctx, testPod(name, "100m", "")); err != nil {
			t.Fatal(err)
		}
	}
	p.rearming.Wait()
	notified := len(rec.phases())

	if err := p.DeletePod(ctx, deleting(testPod("a", "100m", ""), t0, 30)); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	if _, err := p.GetPod(ctx, "ns", "a"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("GetPod after pod-delete: %v, want not found", err)
	}
	if _, _, deleted := api.snapshot(); len(deleted) != 1 || deleted[0] != "a" {
		t.Fatalf("deleted %v, want a through the API", deleted)
	}
	if phases := rec.phases(); len(phases) != notified {
		t.Errorf("notified %v after the delete, want nothing more (no final status before kwok's delete)", phases[notified:])
	}

	api.mu.Lock()
	api.deleteErr = errors.New("the API server is away")
	api.mu.Unlock()
	if err := p.DeletePod(ctx, deleting(testPod("b", "100m", ""), t0, 30)); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	if _, err := p.GetPod(ctx, "ns", "b"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("GetPod after pod-delete: %v, want not found", err)
	}
	if last := rec.last(); last == nil || last.Name != "b" || last.DeletionTimestamp == nil {
		t.Errorf("last notification %v, want b's final status after the refused delete", last)
	} else {
		stopped(t, last)
	}
	// What both held was released: the next two pods take their IPs.
	for _, name := range []string{"c", "d"} {
		if err := p.CreatePod(ctx, testPod(name, "100m", "")); err != nil {
			t.Fatal(err)
		}
	}
	if ip := mustGet(t, p, "d").Status.PodIP; ip != "10.0.0.2" && ip != "10.0.0.1" {
		t.Errorf("d's IP %s, want one of the released 10.0.0.1 and 10.0.0.2", ip)
	}
}

// A pod keeps its view (the pod decoded as stages see it) only while a
// stage waits to play on it: a Running pod that nothing matches holds
// none.
func TestStagesViewNotKeptWhileNothingWaits(t *testing.T) {
	ctx := context.Background()
	p, clk, _ := newTest(t, func(o *Options) { o.Stages = kwokSet(t, "pod/general") })
	if err := p.CreatePod(ctx, testPod("web", "100m", "")); err != nil {
		t.Fatal(err)
	}
	view := func() (*stage.Object, step) {
		p.mu.Lock()
		defer p.mu.Unlock()
		st := p.pods["ns/web"]
		return st.view, st.step
	}
	if v, s := view(); v == nil || s != stepStage {
		t.Fatalf("view %v, step %v before pod-create plays; want the view kept while the stage waits", v, s)
	}
	for range 30 {
		advance(p, clk, time.Second)
	}
	if phase := mustGet(t, p, "web").Status.Phase; phase != corev1.PodRunning {
		t.Fatalf("phase %s, want Running", phase)
	}
	if v, s := view(); v != nil || s != stepNone {
		t.Errorf("view %v, step %v once Running; want no view kept and no step", v, s)
	}
	// Deleted, it is matched again from the pod itself.
	if err := p.DeletePod(ctx, deleting(testPod("web", "100m", ""), clk.Now(), 30)); err != nil {
		t.Fatal(err)
	}
	advance(p, clk, 31*time.Second)
	if _, err := p.GetPod(ctx, "ns", "web"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("GetPod after pod-delete: %v, want not found", err)
	}
}

const kwokPodDelete = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-delete}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: Exists}
    - {key: .metadata.finalizers, operator: DoesNotExist}
  next: {delete: true}
`

// Two stages with no delay that undo each other stop after
// maxPlaysAtOnce plays at one instant, instead of spinning.
func TestStagesLoopBounded(t *testing.T) {
	ctx := context.Background()
	y := `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: switch-on}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.status.conditions.[] | select(.type == "X") | .status', operator: NotIn, values: ["True"]}
  next: {statusTemplate: 'conditions: [{type: X, status: "True"}]'}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: switch-off}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.status.conditions.[] | select(.type == "X") | .status', operator: In, values: ["True"]}
  next: {statusTemplate: 'conditions: [{type: X, status: "False"}]'}
`
	p, clk, rec := newTest(t, func(o *Options) { o.Stages = inlineStages(t, y) })
	if err := p.CreatePod(ctx, testPod("p", "", "")); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	if n := len(rec.phases()); n != maxPlaysAtOnce {
		t.Errorf("%d notifications, want %d (one per play, then it stops)", n, maxPlaysAtOnce)
	}
	if got := clk.Waiters(); got != 0 {
		t.Errorf("%d timers pending", got)
	}
}

func TestStagesBadTemplateAtPlay(t *testing.T) {
	ctx := context.Background()
	y := `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: broken}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector: {}
  next: {statusTemplate: '{{ index .spec.containers 9 }}'}
`
	p, _, rec := newTest(t, func(o *Options) { o.Stages = inlineStages(t, y) })
	if err := p.CreatePod(ctx, testPod("p", "", "")); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	if n := len(rec.phases()); n != 0 {
		t.Errorf("%d notifications, want none: the stage failed and was not played", n)
	}
	mustGet(t, p, "p")
}

func TestStagesOptionsConflict(t *testing.T) {
	_, err := New(Options{NodeName: "n", PodCIDR: "10.0.0.0/24", Stages: kwokSet(t, "pod/fast"), StartDelay: time.Second, CompleteRatio: 0.5})
	if err == nil || !strings.Contains(err.Error(), "start delay: cannot be combined with stages") || !strings.Contains(err.Error(), "complete ratio") {
		t.Errorf("error %v, want the start delay and complete ratio refused with stages", err)
	}
	// Node stages alone leave the built-in pod lifecycle.
	if _, err := New(Options{NodeName: "n", PodCIDR: "10.0.0.0/24", Stages: kwokSet(t, "node/fast"), StartDelay: time.Second}); err != nil {
		t.Errorf("node stages only: %v", err)
	}
}

// Restored after an agent restart, a Running pod stays as it was under
// pod/general's stages, and a deleted Job pod goes on to its end.
func TestStagesRestore(t *testing.T) {
	ctx := context.Background()
	p, clk, _ := newTest(t, func(o *Options) { o.Stages = kwokSet(t, "pod/fast") })
	pod := testPod("r", "", "")
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "10.0.0.9", StartTime: &metav1.Time{Time: t0},
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: t0}}}}},
	}
	if err := p.RestorePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	got := mustGet(t, p, "r")
	if got.Status.Phase != corev1.PodRunning || got.Status.PodIP != "10.0.0.9" {
		t.Errorf("restored %s %s, want Running 10.0.0.9 kept", got.Status.Phase, got.Status.PodIP)
	}
	if err := p.DeletePod(ctx, deleting(pod, clk.Now(), 30)); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	if _, err := p.GetPod(ctx, "ns", "r"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("GetPod: %v, want the pod ended", err)
	}
}

// An update that changes what stages select on matches the pod again.
func TestStagesUpdateRematches(t *testing.T) {
	ctx := context.Background()
	api := &fakeAPI{}
	p, _, _ := newTest(t, func(o *Options) {
		o.Stages = inlineStages(t, finalizerStages)
		o.API = api
	})
	pod := testPod("u", "", "")
	pod.Finalizers = []string{"other"}
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	if _, _, deleted := api.snapshot(); len(deleted) != 0 {
		t.Fatalf("deleted %v before the label", deleted)
	}
	up := pod.DeepCopy()
	up.Labels = map[string]string{"evict": "yes"}
	if err := p.UpdatePod(ctx, up); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	if _, _, deleted := api.snapshot(); len(deleted) != 1 {
		t.Errorf("deleted %v, want the pod deleted once labelled", deleted)
	}
}

// Stages that change at run time (the cluster's): a pod keeps the
// lifecycle it started with, new pods take the stages in force, and a
// staged pod deleted once no stage is left ends at once.
func TestStagesChangeAtRunTime(t *testing.T) {
	ctx := context.Background()
	set := stage.NewSet(nil)
	p, _, _ := newTest(t, func(o *Options) { o.Stages = set })
	if err := p.CreatePod(ctx, testPod("builtin", "", "")); err != nil {
		t.Fatal(err)
	}
	checkRunning(t, mustGet(t, p, "builtin"), t0) // the built-in status, Running at once

	set.Store(kwokSet(t, "pod/fast"))
	staged := testPod("staged", "", "")
	staged.Status.Phase = corev1.PodPending
	staged.Spec.InitContainers = nil
	if err := p.CreatePod(ctx, staged); err != nil {
		t.Fatal(err)
	}
	p.rearming.Wait()
	got := mustGet(t, p, "staged")
	if got.Status.Phase != corev1.PodRunning || condition(got, corev1.PodReadyToStartContainers) != "" {
		t.Fatalf("phase %s, conditions %v; want Running by kwok's pod-ready (which sets no PodReadyToStartContainers)", got.Status.Phase, got.Status.Conditions)
	}
	// The built-in pod is deleted the built-in way (no delete delay: at once).
	if err := p.DeletePod(ctx, deleting(testPod("builtin", "", ""), t0, 30)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.GetPod(ctx, "ns", "builtin"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("built-in pod after delete: %v, want not found", err)
	}

	set.Store(nil)
	if err := p.DeletePod(ctx, deleting(staged, t0, 30)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.GetPod(ctx, "ns", "staged"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("staged pod deleted with no stage left: %v, want ended at once", err)
	}
}

// blockingRecorder holds each Event until released, then reads the pod
// it was given.
type blockingRecorder struct {
	release chan struct{}
	seen    chan *metav1.Time
}

func (r *blockingRecorder) Event(obj runtime.Object, _, _, _ string) {
	<-r.release
	r.seen <- obj.(*corev1.Pod).DeletionTimestamp
}

// The effects of a stage (its events, its API calls) run without the
// lock, on the pod as it was when the stage played: a delete meanwhile
// does not change what they read (go test -race finds the race if it
// did).
func TestStagesEffectsSeeTheirOwnPod(t *testing.T) {
	ctx := context.Background()
	rec := &blockingRecorder{release: make(chan struct{}), seen: make(chan *metav1.Time, 1)}
	p, _, _ := newTest(t, func(o *Options) {
		o.Stages = inlineStages(t, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: hello}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .status.podIP, operator: DoesNotExist}
  next:
    event: {type: Normal, reason: Hello, message: hi}
    statusTemplate: 'podIP: {{ PodIP }}'
`)
		o.Events = rec
	})
	pod := testPod("p", "", "")
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := p.DeletePod(ctx, deleting(pod, t0, 30)); err != nil {
		t.Fatal(err)
	}
	close(rec.release)
	if got := <-rec.seen; got != nil {
		t.Errorf("the event's pod has deletionTimestamp %v, set after the stage played", got)
	}
	p.rearming.Wait()
}

// The provider shares the pods it is handed (SharesPods): the pod
// controller hands it the informer cache's own objects. Neither the
// simulation nor any stage set changes them, through create, update,
// restore and delete.
func TestPodsHandedOverAreNeverChanged(t *testing.T) {
	for _, set := range []string{"", "pod/fast", "pod/general"} {
		t.Run(set, func(t *testing.T) {
			ctx := context.Background()
			p, clk, _ := newTest(t, func(o *Options) {
				if set != "" {
					o.Stages = kwokSet(t, set)
					o.Events = &fakeAPI{}
				}
			})
			var handed, before []*corev1.Pod
			hand := func(pod *corev1.Pod) *corev1.Pod {
				handed, before = append(handed, pod), append(before, pod.DeepCopy())
				return pod
			}
			web := testPod("web", "100m", "")
			web.Labels = map[string]string{"app": "web"}
			web.Annotations = map[string]string{"a": "1"}
			if err := p.CreatePod(ctx, hand(web)); err != nil {
				t.Fatal(err)
			}
			for range 10 {
				advance(p, clk, time.Second)
			}
			updated := web.DeepCopy()
			updated.Labels["app"], updated.ResourceVersion = "web2", "2"
			if err := p.UpdatePod(ctx, hand(updated)); err != nil {
				t.Fatal(err)
			}
			running := mustGet(t, p, "web").DeepCopy()
			running.Name, running.UID = "restored", "uid-restored"
			if err := p.RestorePod(ctx, hand(running)); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"web", "restored"} {
				pod := updated
				if name == "restored" {
					pod = running
				}
				if err := p.DeletePod(ctx, hand(deleting(pod, clk.Now(), 1))); err != nil {
					t.Fatal(err)
				}
			}
			for range 40 {
				advance(p, clk, time.Second)
			}
			for i := range handed {
				if diff := cmp.Diff(before[i], handed[i]); diff != "" {
					t.Errorf("pod %d handed over (%s) was changed (-before +after):\n%s", i, handed[i].Name, diff)
				}
			}
		})
	}
}

// TestNotifiedPodsNeverChange: the provider shares a notified pod's status
// with the status it keeps (queueNotify), so every later change must leave
// what was notified as it was, through every step of a pod's life: start,
// exit, back-off, restart, finish, eviction, deletion, and the stages.
func TestNotifiedPodsNeverChange(t *testing.T) {
	for _, set := range []string{"", "pod/fast", "pod/general"} {
		t.Run(set, func(t *testing.T) {
			ctx := context.Background()
			p, clk, _ := newTest(t, func(o *Options) {
				if set != "" {
					o.Stages = kwokSet(t, set)
					o.Events = &fakeAPI{}
					return
				}
				o.StartDelay, o.RunDuration = time.Second, 2*time.Second
				o.CompleteRatio, o.FailRatio = 0.4, 0.4
			})
			var mu sync.Mutex
			var notified, before []*corev1.Pod
			p.NotifyPods(ctx, func(pod *corev1.Pod) {
				mu.Lock()
				defer mu.Unlock()
				notified, before = append(notified, pod), append(before, pod.DeepCopy())
			})
			var pods []*corev1.Pod
			for i := range 8 {
				pod := policyPod(fmt.Sprintf("p-%d", i), []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}[i%3])
				pods = append(pods, pod)
				if err := p.CreatePod(ctx, pod); err != nil {
					t.Fatal(err)
				}
			}
			for range 30 {
				advance(p, clk, time.Second)
			}
			if err := p.Evict(pods[0], provider.Eviction{Reason: "Evicted", Message: "test"}); err != nil {
				t.Fatal(err)
			}
			for _, pod := range pods {
				if err := p.DeletePod(ctx, deleting(pod, clk.Now(), 1)); err != nil {
					t.Fatal(err)
				}
				advance(p, clk, time.Second)
			}
			for range 40 {
				advance(p, clk, time.Second)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(notified) < 2*len(pods) {
				t.Fatalf("%d notifications for %d pods; the test did not drive their lives", len(notified), len(pods))
			}
			for i := range notified {
				if diff := cmp.Diff(before[i], notified[i]); diff != "" {
					t.Errorf("pod %s, notification %d, was changed after it was notified (-notified +now):\n%s", notified[i].Name, i, diff)
				}
			}
		})
	}
}
