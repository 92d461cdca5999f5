package sim

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func (f *fakeAPI) PatchNode(_ context.Context, node *corev1.Node, pt types.PatchType, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, node.Name+" "+string(pt)+" "+string(data))
	return nil
}

func (f *fakeAPI) DeleteNode(_ context.Context, node *corev1.Node) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, node.Name)
	return nil
}

// reported is the node as the agent would write it: the provider's
// description of a Node with the given labels and annotations.
func reported(p *Provider, labels, annotations map[string]string) *corev1.Node {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: p.opts.NodeName, UID: "uid-node",
		Labels: labels, Annotations: annotations}}
	p.ConfigureNode(context.Background(), node)
	return node
}

func readyOf(node *corev1.Node) corev1.NodeCondition {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

// kwok's chaos stage makes a labelled node NotReady, with the reason its
// annotation gives, and its node-initialize makes it Ready again once the
// label is gone: what the provider reports follows.
func TestNodeStagesKwokChaos(t *testing.T) {
	l := append(kwokSet(t, "node/fast"), kwokSet(t, "node/chaos")...)
	p, clk, _ := newTest(t, func(o *Options) { o.Stages = l })
	var notified atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.NotifyNodeStatus(ctx, func() { notified.Add(1) })

	node := reported(p, nil, nil)
	if node.Status.Phase != corev1.NodeRunning || readyOf(node).Status != corev1.ConditionTrue {
		t.Fatalf("phase %q, Ready %+v; want Running and Ready", node.Status.Phase, readyOf(node))
	}
	p.NodeChanged(node)
	p.rearming.Wait()
	if n := clk.Waiters(); n != 0 || notified.Load() != 0 {
		t.Fatalf("a Ready node without the chaos label: %d timers, %d notifications; want none", n, notified.Load())
	}

	labels := map[string]string{"node-not-ready.stage.kwok.x-k8s.io": "true"}
	annotations := map[string]string{"node-not-ready.stage.kwok.x-k8s.io/reason": "Maintenance"}
	p.NodeChanged(reported(p, labels, annotations))
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("labelled: %d timers, want the stage's", n)
	}
	clk.Step(time.Second)
	p.rearming.Wait()
	if notified.Load() == 0 {
		t.Error("the stage played without asking for the status to be reported")
	}
	node = reported(p, labels, annotations)
	if r := readyOf(node); r.Status != corev1.ConditionFalse || r.Reason != "Maintenance" || r.Message != "node failed" {
		t.Fatalf("after node-not-ready: Ready %+v, want False, Maintenance, node failed", r)
	}
	// The agent's write of it comes back; the label is taken off.
	p.NodeChanged(node)
	node.Labels = nil
	p.NodeChanged(node)
	p.rearming.Wait()
	node = reported(p, nil, annotations)
	if r := readyOf(node); r.Status != corev1.ConditionTrue {
		t.Fatalf("after node-initialize: Ready %+v, want True", r)
	}
	if cpu := node.Status.Capacity[corev1.ResourceCPU]; cpu.String() != "4" {
		t.Errorf("capacity cpu %s after node-initialize, want the provider's 4, which it admits pods against", cpu.String())
	}
	if n := clk.Waiters(); n != 0 {
		t.Errorf("%d timers pending on a Ready node", n)
	}
}

// What the node's stages rendered is merged into the provider's own
// description again only when either changes; the status reported is the
// same as merged afresh, and a caller that changes it changes nothing the
// provider keeps.
func TestNodeStagesMergeKept(t *testing.T) {
	var flaky atomic.Bool
	l := append(kwokSet(t, "node/fast"), kwokSet(t, "node/chaos")...)
	p, clk, _ := newTest(t, func(o *Options) {
		o.Stages = l
		o.Pressure = func(node *corev1.Node) {
			if flaky.Load() {
				node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: "example.com/Flaky", Status: corev1.ConditionTrue})
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.NotifyNodeStatus(ctx, func() {})
	labels := map[string]string{"node-not-ready.stage.kwok.x-k8s.io": "true"}
	annotations := map[string]string{"node-not-ready.stage.kwok.x-k8s.io/reason": "Maintenance"}
	p.NodeChanged(reported(p, labels, annotations))
	clk.Step(time.Second)
	p.rearming.Wait()

	first := reported(p, labels, annotations)
	if r := readyOf(first); r.Status != corev1.ConditionFalse || r.Reason != "Maintenance" {
		t.Fatalf("Ready %+v, want False for Maintenance", r)
	}
	for i := range first.Status.Conditions {
		first.Status.Conditions[i].Reason = "changed by the caller"
	}
	second := reported(p, labels, annotations)
	if r := readyOf(second); r.Reason != "Maintenance" {
		t.Fatalf("Ready %+v after the caller changed the first report, want Maintenance still", r)
	}
	p.mu.Lock()
	p.node.merged = nil // merged afresh
	p.mu.Unlock()
	if fresh := reported(p, labels, annotations); !equality.Semantic.DeepEqual(fresh.Status, second.Status) {
		t.Errorf("status kept %+v, merged afresh %+v; want them equal", second.Status, fresh.Status)
	}

	has := func(node *corev1.Node) bool {
		return slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == "example.com/Flaky" })
	}
	flaky.Store(true)
	if node := reported(p, labels, annotations); !has(node) || readyOf(node).Status != corev1.ConditionFalse {
		t.Errorf("conditions %+v once the provider reports another, want it beside Ready False", node.Status.Conditions)
	}
	flaky.Store(false)
	if node := reported(p, labels, annotations); has(node) {
		t.Errorf("conditions %+v once the provider no longer reports it, want it gone", node.Status.Conditions)
	}
}

// A node stage's events, finalizers and other patches go to the API; its
// status stays what the provider reports, under the conditions of its
// own. A stage already waiting keeps its time when the Node changes in
// ways that do not change the match.
func TestNodeStagesPatchesAndEvents(t *testing.T) {
	y := `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: drain}
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchLabels: {drain: "yes"}
    matchExpressions:
    - {key: '.status.conditions.[] | select(.type == "Drained") | .status', operator: DoesNotExist}
  delay: {durationMilliseconds: 5000}
  next:
    event: {type: Normal, reason: Drained, message: drained}
    finalizers: {add: [{value: example.com/drain}]}
    patches:
    - subresource: status
      root: status
      template: 'conditions: [{type: Drained, status: "True", reason: ByStage}]'
    - type: merge
      root: spec
      template: 'unschedulable: true'
`
	api := &fakeAPI{}
	p, clk, _ := newTest(t, func(o *Options) {
		o.Stages, o.Events, o.NodeAPI = inlineStages(t, y), api, api
	})
	ctx, cancel := context.WithCancel(context.Background())
	labels := map[string]string{"drain": "yes"}
	p.NodeChanged(reported(p, labels, nil))
	if n := clk.Waiters(); n != 0 {
		t.Fatalf("%d timers before nodelet asked for the node's status, want none", n)
	}
	p.NotifyNodeStatus(ctx, func() {})
	clk.Step(3 * time.Second)
	p.NodeChanged(reported(p, labels, map[string]string{"other": "change"}))
	clk.Step(2 * time.Second)
	p.rearming.Wait()
	calls, events, _ := api.snapshot()
	if !slices.Equal(events, []string{"Normal Drained"}) {
		t.Errorf("events %v, want the stage's (played 5 s after the first match)", events)
	}
	if len(calls) != 2 || !strings.Contains(calls[0], `"example.com/drain"`) || !strings.Contains(calls[1], `{"spec":{"unschedulable":true}}`) {
		t.Errorf("API calls %q, want the finalizer, then the spec patch", calls)
	}
	node := reported(p, labels, nil)
	var drained *corev1.NodeCondition
	for i, c := range node.Status.Conditions {
		if c.Type == "Drained" {
			drained = &node.Status.Conditions[i]
		}
	}
	if drained == nil || drained.Status != corev1.ConditionTrue || drained.Reason != "ByStage" || readyOf(node).Status != corev1.ConditionTrue {
		t.Errorf("conditions %+v, want Drained True by the stage beside the provider's Ready", node.Status.Conditions)
	}
	if n := clk.Waiters(); n != 0 {
		t.Errorf("%d timers pending after the stage stopped matching", n)
	}

	// Once nodelet no longer reports the node (it let it go), a stage
	// waiting is dropped and no other is matched.
	undrained := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sim-0", Labels: labels}}
	p.NodeChanged(undrained)
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("%d timers for a node the stage matches, want 1", n)
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Waiters() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the context's AfterFunc runs in a goroutine of its own
	}
	p.NodeChanged(undrained.DeepCopy())
	if n := clk.Waiters(); n != 0 {
		t.Errorf("%d timers pending for a node no longer reported", n)
	}
}

// Without stages for Nodes, the node is described as ever.
func TestNodeStagesNone(t *testing.T) {
	p, clk, _ := newTest(t, func(o *Options) { o.Stages = kwokSet(t, "pod/fast") })
	node := reported(p, nil, nil)
	p.NodeChanged(node)
	if node.Status.Phase != "" || clk.Waiters() != 0 {
		t.Errorf("phase %q and %d timers without stages for Nodes, want none", node.Status.Phase, clk.Waiters())
	}
}
