package node

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// leaseController is a controller of one registered node "n" on a fake
// clock, whose tasks the test runs by hand.
func leaseController(t *testing.T) (*Controller, *nodeState, *fake.Clientset, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(start)
	client := newFakeClient(true)
	c, err := NewController(client, []Node{{Template: template("n"), Provider: &fakeProvider{}}}, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	n := c.nodes["n"]
	n.uid = "node-uid"
	return c, n, client, clk
}

func getLease(t *testing.T, client *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), "n", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "n" ||
		l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 40 {
		t.Errorf("lease spec = %+v, want holder n and 40s", l.Spec)
	}
	want := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "n", UID: "node-uid"}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0] != want {
		t.Errorf("lease owners = %+v, want %+v", l.OwnerReferences, want)
	}
	return l
}

func verbs(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		out = append(out, a.GetVerb())
	}
	return out
}

func equalStrings(a, b []string) bool {
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

func TestLeaseRenewal(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c, n, client, clk := leaseController(t)

	next, err := c.renewLease(ctx, n)
	if err != nil || next != 10*time.Second {
		t.Fatalf("first renewal: next %s, err %v; want 10s (a quarter of 40s)", next, err)
	}
	if got := verbs(client); !equalStrings(got, []string{"create"}) {
		t.Errorf("first renewal made %v, want a single create", got)
	}
	if l := getLease(t, client); !l.Spec.RenewTime.Time.Equal(clk.Now()) {
		t.Errorf("renewTime = %v, want %v", l.Spec.RenewTime, clk.Now())
	}

	for range 3 {
		clk.Step(10 * time.Second)
		client.ClearActions()
		if _, err := c.renewLease(ctx, n); err != nil {
			t.Fatal(err)
		}
		if got := verbs(client); !equalStrings(got, []string{"update"}) {
			t.Errorf("renewal made %v, want a single update", got)
		}
		if l := getLease(t, client); !l.Spec.RenewTime.Time.Equal(clk.Now()) {
			t.Errorf("renewTime = %v, want %v", l.Spec.RenewTime, clk.Now())
		}
	}
}

func TestLeaseHolderIsRestored(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c, n, client, _ := leaseController(t)
	if _, err := c.renewLease(ctx, n); err != nil {
		t.Fatal(err)
	}
	// Another writer takes the lease; our next update fails, we read it
	// afresh and write our holder back.
	l := getLease(t, client)
	l.Spec.HolderIdentity = ptr.To("intruder")
	if _, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	client.PrependReactor("update", "leases", failOnce(apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, "n", errors.New("changed"))))
	if _, err := c.renewLease(ctx, n); !apierrors.IsConflict(err) {
		t.Fatalf("renewal against a changed lease: err %v, want a Conflict", err)
	}
	client.ClearActions()
	if _, err := c.renewLease(ctx, n); err != nil {
		t.Fatal(err)
	}
	if got := verbs(client); !equalStrings(got, []string{"create", "get", "update"}) {
		t.Errorf("renewal after a failure made %v, want a refused create, then get and update", got)
	}
	getLease(t, client) // checks the holder
}

func TestDeletedLeaseIsRecreated(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c, n, client, _ := leaseController(t)
	if _, err := c.renewLease(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, "n", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	if next, err := c.renewLease(ctx, n); err != nil || next != 10*time.Second {
		t.Fatalf("renewal of a deleted lease: next %s, err %v; want it recreated", next, err)
	}
	if got := verbs(client); !equalStrings(got, []string{"update", "create"}) {
		t.Errorf("renewal made %v, want update then create", got)
	}
	getLease(t, client)
	// A vanished Lease may mean a deleted Node: a status write is forced.
	if !n.forceReport || c.queue.Len() != 1 {
		t.Errorf("forceReport %v, queue length %d; want a forced status report queued", n.forceReport, c.queue.Len())
	}
}

func TestFailedPingStopsRenewal(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c, n, client, _ := leaseController(t)
	n.pingErr = errors.New("provider down")
	next, err := c.renewLease(ctx, n)
	if err != nil || next != 10*time.Second {
		t.Fatalf("next %s, err %v; want to check again in 10s", next, err)
	}
	if acts := client.Actions(); len(acts) != 0 {
		t.Errorf("renewal while the ping fails made %v, want nothing", acts)
	}
	n.pingErr = nil
	if _, err := c.renewLease(ctx, n); err != nil {
		t.Fatal(err)
	}
	getLease(t, client)
}

func TestNoRenewalBeforeRegistration(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c, n, client, _ := leaseController(t)
	n.uid = ""
	if next, err := c.renewLease(ctx, n); err != nil || next != 0 {
		t.Errorf("next %s, err %v; want no renewal and no reschedule", next, err)
	}
	if acts := client.Actions(); len(acts) != 0 {
		t.Errorf("renewal before registration made %v, want nothing", acts)
	}
}

func TestRetryBackoff(t *testing.T) {
	rl := retryBackoff()
	key := taskKey{node: "n", task: taskLease}
	other := taskKey{node: "n", task: taskStatus}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond,
		3200 * time.Millisecond, 6400 * time.Millisecond, 7 * time.Second, 7 * time.Second}
	for i, w := range want {
		if got := rl.When(key); got != w {
			t.Errorf("failure %d: backoff %s, want %s", i+1, got, w)
		}
	}
	if got := rl.When(other); got != 200*time.Millisecond {
		t.Errorf("another task's first backoff = %s, want 200ms (backoff is per task)", got)
	}
	rl.Forget(key)
	if got := rl.When(key); got != 200*time.Millisecond {
		t.Errorf("after a success: backoff %s, want 200ms again", got)
	}
}

// TestFailedTaskBacksOffOnTheQueue drives a failing lease task through the
// controller's queue on a fake clock: it comes back after 200ms, 400ms,
// 800ms … and not earlier.
func TestFailedTaskBacksOffOnTheQueue(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c, _, client, clk := leaseController(t)
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("api server unavailable")
	})
	key := c.node("n").key(taskLease)
	c.queue.Add(key)
	// The sum stays below the delaying queue's 10s heartbeat, which would
	// otherwise wake it while the clock is stepped.
	for _, backoff := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond} {
		if !c.processNext(ctx) {
			t.Fatal("queue shut down")
		}
		// The queue's heartbeat ticker and the retry timer.
		poll(t, "retry timer set", func() bool { return clk.Waiters() == 2 })
		clk.Step(backoff - time.Millisecond)
		if c.queue.Len() != 0 {
			t.Fatalf("task back %s after a failure, want %s", backoff-time.Millisecond, backoff)
		}
		clk.Step(time.Millisecond)
		poll(t, "task back after "+backoff.String(), func() bool { return c.queue.Len() == 1 })
	}
}

// failOnce is a reactor that fails the first matching call with err.
func failOnce(err error) k8stesting.ReactionFunc {
	failed := false
	return func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed {
			return false, nil, nil
		}
		failed = true
		return true, nil, err
	}
}

// The Lease kept for the next renewal has no managedFields: thousands of
// nodes would keep them for nothing.
func TestKeptLeaseHasNoManagedFields(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c, n, client, _ := leaseController(t)
	existing := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: corev1.NamespaceNodeLease,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "nodelet", Operation: metav1.ManagedFieldsOperationUpdate}}}}
	if err := client.Tracker().Add(existing); err != nil {
		t.Fatal(err)
	}
	for range 2 { // adopted, then renewed
		if _, err := c.renewLease(ctx, n); err != nil {
			t.Fatal(err)
		}
		if n.lease == nil || n.lease.ManagedFields != nil {
			t.Fatalf("kept lease %+v, want one without managedFields", n.lease)
		}
	}
}
