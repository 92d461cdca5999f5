package sim

import (
	"context"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func nodeCondition(p *Provider, typ corev1.NodeConditionType) corev1.NodeCondition {
	node := &corev1.Node{}
	p.ConfigureNode(context.Background(), node)
	for _, c := range node.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return corev1.NodeCondition{}
}

// eventually polls cond, yielding to other goroutines, until it holds or a
// deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// nextOn is the first start of the condition's window after t, computed from
// the definition: windows start where the Unix time plus the node's offset
// is a multiple of the period.
func nextOn(c *nodeCond, t time.Time) time.Time {
	ns := t.UnixNano() + int64(c.offset)
	return t.Add(time.Duration(int64(c.Every) - ns%int64(c.Every)))
}

func TestNodeConditionFlips(t *testing.T) {
	const every, window = 10 * time.Minute, time.Minute
	p, clk, _ := newTest(t, func(o *Options) {
		o.NodeConditions = []NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "ChaosNotReady", Every: every, For: window, NodeRatio: 1},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue, Every: time.Minute, For: time.Second, NodeRatio: 0},
		}
	})
	if len(p.conds) != 1 {
		t.Fatalf("node shows %d conditions, want the one with nodeRatio 1", len(p.conds))
	}
	c := &p.conds[0]
	var notified atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.NotifyNodeStatus(ctx, func() { notified.Add(1) })

	// Start the test just after a window closed, so that the first flip
	// is the next window's start.
	on := nextOn(c, t0)
	if c.active(t0) {
		advance(p, clk, on.Add(window).Sub(t0))
		on = on.Add(every)
		notified.Store(0)
	}
	for cycle := range 3 {
		if got := clk.Waiters(); got != 1 {
			t.Fatalf("cycle %d: %d timers pending, want 1", cycle, got)
		}
		advance(p, clk, on.Sub(clk.Now())-time.Nanosecond)
		if got := nodeCondition(p, corev1.NodeReady); got.Status != corev1.ConditionTrue || got.Reason != "KubeletReady" || notified.Load() != 0 {
			t.Fatalf("cycle %d: before the window: Ready %s %s, %d notifications", cycle, got.Status, got.Reason, notified.Load())
		}
		advance(p, clk, time.Nanosecond)
		if notified.Load() != 1 {
			t.Fatalf("cycle %d: %d notifications at the window's start, want 1", cycle, notified.Load())
		}
		got := nodeCondition(p, corev1.NodeReady)
		if got.Status != corev1.ConditionFalse || got.Reason != "ChaosNotReady" || got.Message != "simulated by nodelet: False for 1m0s every 10m0s" {
			t.Errorf("cycle %d: in the window: Ready %s %s %q", cycle, got.Status, got.Reason, got.Message)
		}
		if dp := nodeCondition(p, corev1.NodeDiskPressure); dp.Status != corev1.ConditionFalse {
			t.Errorf("DiskPressure %s on a node its nodeRatio 0 leaves out", dp.Status)
		}
		advance(p, clk, window-time.Nanosecond)
		if got := nodeCondition(p, corev1.NodeReady); got.Status != corev1.ConditionFalse || notified.Load() != 1 {
			t.Fatalf("cycle %d: end of the window: Ready %s, %d notifications", cycle, got.Status, notified.Load())
		}
		advance(p, clk, time.Nanosecond)
		if got := nodeCondition(p, corev1.NodeReady); got.Status != corev1.ConditionTrue || got.Reason != "KubeletReady" || notified.Load() != 2 {
			t.Fatalf("cycle %d: after the window: Ready %s %s, %d notifications", cycle, got.Status, got.Reason, notified.Load())
		}
		notified.Store(0)
		on = on.Add(every)
	}

	// Flips missed by a long step are caught up with one notification.
	advance(p, clk, 3*every+window/2)
	if notified.Load() == 0 || clk.Waiters() != 1 {
		t.Errorf("after a long step: %d notifications, %d timers pending", notified.Load(), clk.Waiters())
	}

	cancel()
	eventually(t, "the flip timer to stop once ctx is done", func() bool { return clk.Waiters() == 0 })
	notified.Store(0)
	advance(p, clk, 2*every)
	if notified.Load() != 0 {
		t.Errorf("%d notifications after ctx was done", notified.Load())
	}
}

func TestNodeConditionsWithoutFlips(t *testing.T) {
	for name, conds := range map[string][]NodeCondition{
		"none":      nil,
		"always on": {{Type: "example.com/Degraded", Status: corev1.ConditionTrue, Every: time.Minute, For: time.Minute, NodeRatio: 1}},
		"no node":   {{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Every: time.Minute, For: time.Second, NodeRatio: 0}},
	} {
		t.Run(name, func(t *testing.T) {
			p, clk, _ := newTest(t, func(o *Options) { o.NodeConditions = conds })
			p.NotifyNodeStatus(context.Background(), func() { t.Error("notified") })
			if got := clk.Waiters(); got != 0 {
				t.Errorf("%d timers pending, want none", got)
			}
			advance(p, clk, time.Hour)
		})
	}
}

func TestScheduledConditionStatus(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	p, err := New(Options{NodeName: "n", PodCIDR: "10.0.0.0/24", Clock: clk, NodeConditions: []NodeCondition{
		{Type: "example.com/Degraded", Status: corev1.ConditionTrue, Reason: "Chaos", Message: "injected", Every: time.Hour, For: time.Minute, NodeRatio: 1},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue, Reason: "Chaos", Every: time.Hour, For: time.Hour, NodeRatio: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := &p.conds[0]
	on := nextOn(c, t0)
	for _, tt := range []struct {
		at                   time.Time
		status, reason, text string
	}{
		{on.Add(-time.Nanosecond), "False", "", ""},
		{on, "True", "Chaos", "injected"},
		{on.Add(time.Minute), "False", "", ""},
	} {
		clk.SetTime(tt.at)
		got := nodeCondition(p, "example.com/Degraded")
		if string(got.Status) != tt.status || got.Reason != tt.reason || got.Message != tt.text {
			t.Errorf("at %v: %s %q %q, want %s %q %q", tt.at.Sub(on), got.Status, got.Reason, got.Message, tt.status, tt.reason, tt.text)
		}
		if mp := nodeCondition(p, corev1.NodeMemoryPressure); mp.Status != corev1.ConditionTrue || mp.Reason != "Chaos" {
			t.Errorf("MemoryPressure with for = every: %s %s, want always True Chaos", mp.Status, mp.Reason)
		}
	}
}

func TestNodeConditionSelection(t *testing.T) {
	const n = 2000
	c := NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Every: 10 * time.Minute, For: time.Minute, NodeRatio: 0.1}
	chosen := 0
	offsets := map[time.Duration]bool{}
	for i := range n {
		name := fmt.Sprintf("sim-%d", i)
		offset, ok := selected(name, 0, &c)
		if again, ok2 := selected(name, 0, &c); ok != ok2 || offset != again {
			t.Fatalf("node %s: selection is not deterministic", name)
		}
		if ok {
			chosen++
			offsets[offset] = true
			if offset < 0 || offset >= c.Every {
				t.Errorf("offset %v outside the period", offset)
			}
		}
	}
	if share := float64(chosen) / n; math.Abs(share-c.NodeRatio) > 0.03 {
		t.Errorf("%d of %d nodes chosen, want about %v", chosen, n, c.NodeRatio)
	}
	if len(offsets) < chosen*9/10 {
		t.Errorf("only %d distinct offsets among %d nodes", len(offsets), chosen)
	}
	// Another entry picks other nodes.
	same := 0
	for i := range n {
		name := fmt.Sprintf("sim-%d", i)
		_, a := selected(name, 0, &c)
		_, b := selected(name, 1, &c)
		if a && b {
			same++
		}
	}
	if same > chosen/4 {
		t.Errorf("entries 0 and 1 share %d of %d nodes", same, chosen)
	}
}

// ConfigureNode gives the node its pod range and provider ID, and the
// topology labels of the options where the node has none of its own.
func TestConfigureNodeTopology(t *testing.T) {
	tests := []struct {
		name       string
		opts       func(*Options)
		labels     map[string]string // the node's own
		wantLabels map[string]string // "" for absent
		wantCIDR   string
	}{
		{name: "zone, region and instance type", opts: func(o *Options) {
			o.Zone, o.Region, o.InstanceType = "zone-b", "region-1", "nodelet-sim"
		}, wantLabels: map[string]string{
			corev1.LabelTopologyZone: "zone-b", corev1.LabelTopologyRegion: "region-1", corev1.LabelInstanceTypeStable: "nodelet-sim",
			corev1.LabelHostname: "sim-0",
		}, wantCIDR: "10.0.0.0/24"},
		{name: "none given, none set", wantLabels: map[string]string{
			corev1.LabelTopologyZone: "", corev1.LabelTopologyRegion: "", corev1.LabelInstanceTypeStable: "",
		}, wantCIDR: "10.0.0.0/24"},
		{name: "the node's own labels win", opts: func(o *Options) {
			o.Zone, o.Region, o.InstanceType = "zone-b", "region-1", "nodelet-sim"
		}, labels: map[string]string{corev1.LabelTopologyZone: "mine", corev1.LabelInstanceTypeStable: "big", corev1.LabelHostname: "host"},
			wantLabels: map[string]string{
				corev1.LabelTopologyZone: "mine", corev1.LabelTopologyRegion: "region-1", corev1.LabelInstanceTypeStable: "big",
				corev1.LabelHostname: "host",
			}, wantCIDR: "10.0.0.0/24"},
		{name: "pod range in canonical form", opts: func(o *Options) { o.PodCIDR = "10.1.2.3/16" }, wantCIDR: "10.1.0.0/16"},
		{name: "IPv6 pod range", opts: func(o *Options) { o.PodCIDR = "fd00:0:0:1::/64" }, wantCIDR: "fd00:0:0:1::/64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _, _ := newTest(t, tt.opts)
			node := &corev1.Node{}
			if tt.labels != nil {
				node.Labels = maps.Clone(tt.labels)
			}
			p.ConfigureNode(context.Background(), node)
			for k, want := range tt.wantLabels {
				if got, ok := node.Labels[k]; got != want || ok != (want != "") {
					t.Errorf("label %s = %q (set: %v), want %q", k, got, ok, want)
				}
			}
			if node.Spec.PodCIDR != tt.wantCIDR || !slices.Equal(node.Spec.PodCIDRs, []string{tt.wantCIDR}) {
				t.Errorf("pod ranges %q %v, want %s", node.Spec.PodCIDR, node.Spec.PodCIDRs, tt.wantCIDR)
			}
			if node.Spec.ProviderID != "nodelet://sim-0" {
				t.Errorf("providerID %q, want nodelet://sim-0", node.Spec.ProviderID)
			}
		})
	}
}
