package shard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i)
	}
	return out
}

// Rendezvous hashing spreads names evenly, and a member that leaves moves
// only its own names.
func TestOwnerMovesOnlyTheLeaversNames(t *testing.T) {
	all := names(3000)
	before := map[string]string{}
	count := map[string]int{}
	for _, n := range all {
		before[n] = Owner(n, []string{"a", "b", "c"})
		count[before[n]]++
	}
	for _, m := range []string{"a", "b", "c"} {
		if count[m] < 800 || count[m] > 1200 {
			t.Errorf("member %s owns %d of 3000 names, want about a third", m, count[m])
		}
	}
	for _, n := range all {
		after := Owner(n, []string{"a", "c"})
		if before[n] != "b" && after != before[n] {
			t.Fatalf("%s moved from %s to %s when b left", n, before[n], after)
		}
	}
	if Owner("x", nil) != "" {
		t.Error("a name has an owner among no members")
	}
}

type replica struct {
	*Members
	stop context.CancelFunc
}

func newReplica(t *testing.T, client *fake.Clientset, clk *testingclock.FakeClock, id string) replica {
	t.Helper()
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("ns"))
	m, err := New(client, f.Coordination().V1().Leases(), Options{Namespace: "ns", Group: "sim", Identity: id, LeaseDuration: 8 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	t.Cleanup(func() { cancel(); f.Shutdown() })
	return replica{m, cancel}
}

// sees waits until r's informer shows want live members.
func (r replica) sees(t *testing.T, want ...string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		r.recompute()
		live := r.Live()
		return fmt.Sprint(live) == fmt.Sprint(want), nil
	})
	if err != nil {
		t.Fatalf("%s sees %v, want %v", r.opts.Identity, r.Live(), want)
	}
}

func owned(r replica, all []string) map[string]bool {
	out := map[string]bool{}
	for _, n := range all {
		if r.Owns(n) {
			out[n] = true
		}
	}
	return out
}

// A replica takes names once settled; one that joins takes its share
// only after the others let it go; one that stops renewing leaves its
// names to the others after its Lease's duration.
func TestMembersJoinSettleAndExpire(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Now())
	client := fake.NewClientset()
	all := names(200)
	a, b := newReplica(t, client, clk, "a"), newReplica(t, client, clk, "b")

	if err := a.renew(ctx); err != nil {
		t.Fatal(err)
	}
	a.sees(t, "a")
	if len(owned(a, all)) != 0 {
		t.Error("a owns names before it settled")
	}
	clk.Step(2 * time.Second) // a quarter of the duration
	a.recompute()
	if got := len(owned(a, all)); got != len(all) {
		t.Fatalf("a alone owns %d of %d names", got, len(all))
	}

	// b joins: a lets b's share go at once, b takes it once settled.
	if err := b.renew(ctx); err != nil {
		t.Fatal(err)
	}
	a.sees(t, "a", "b")
	b.sees(t, "a", "b")
	ownedA, ownedB := owned(a, all), owned(b, all)
	if len(ownedB) != 0 || len(ownedA) == len(all) || len(ownedA) == 0 {
		t.Fatalf("b joining: a owns %d, b owns %d; want a its share, b none yet", len(ownedA), len(ownedB))
	}
	clk.Step(2 * time.Second)
	if err := a.renew(ctx); err != nil {
		t.Fatal(err)
	}
	b.recompute()
	a.recompute()
	ownedA, ownedB = owned(a, all), owned(b, all)
	for _, n := range all {
		if ownedA[n] == ownedB[n] {
			t.Fatalf("%s owned by a: %v, by b: %v; want exactly one", n, ownedA[n], ownedB[n])
		}
	}

	// a stops renewing: after its Lease's duration b owns every name, and
	// a, which could not renew, none.
	clk.Step(8 * time.Second)
	if err := b.renew(ctx); err != nil {
		t.Fatal(err)
	}
	b.sees(t, "b")
	a.recompute()
	if got, gotA := len(owned(b, all)), len(owned(a, all)); got != len(all) || gotA != 0 {
		t.Errorf("after a's Lease expired: b owns %d, a %d; want %d and 0", got, gotA, len(all))
	}
}

// A replica that leaves deletes its Lease, and the others see it gone.
func TestLeaveDeletesTheLease(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	client := fake.NewClientset()
	a, b := newReplica(t, client, clk, "a"), newReplica(t, client, clk, "b")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	b.sees(t, "a")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.sees(t)
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{Group: "g", Identity: "i"},
		{Namespace: "ns", Identity: "i"},
		{Namespace: "ns", Group: "g"},
		{Namespace: "ns", Group: "g", Identity: "Not_Valid"},
		{Namespace: "ns", Group: "g", Identity: "i", LeaseDuration: 1500 * time.Millisecond},
	} {
		if err := o.validate(); err == nil {
			t.Errorf("%+v: valid, want an error", o)
		}
	}
}
