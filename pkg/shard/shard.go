// Package shard splits the Nodes that several replicas of an agent take
// over among the replicas alive now. Each replica holds a Lease of its own
// (coordination.k8s.io/v1, labelled with its group) and renews it; a name
// belongs to the live replica with the highest rendezvous hash of the two
// (Owner), so a replica that joins takes about its share from each of the
// others, and one that dies (its Lease not renewed for its duration)
// leaves its names to the others, each moving to its next-highest replica.
//
// No name is run by two replicas at once: a replica lets a name go as soon
// as it sees a new member that outranks it, while the new member takes
// names only once its own Lease has been held for a quarter of the
// duration (settle), long enough for the others to see it. A replica that
// cannot renew its own Lease for a duration gives up every name, as the
// others take them over.
//
// The package writes and deletes only its own replica's Lease.
package shard

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// GroupLabel on a member's Lease names its group: the replicas that share
// one set of names.
const GroupLabel = "nodelet.io/shard-group"

// Owner is the member of members that name belongs to: the one for which
// the hash of the pair is highest (rendezvous hashing), or "" when there
// are none. Removing a member moves only its own names.
func Owner(name string, members []string) string {
	var best string
	var bestHash uint64
	for _, m := range members {
		h := fnv.New64a()
		h.Write([]byte(m))
		h.Write([]byte{0})
		h.Write([]byte(name))
		if v := mix(h.Sum64()); best == "" || v > bestHash || (v == bestHash && m < best) {
			best, bestHash = m, v
		}
	}
	return best
}

// mix spreads the bits of an FNV hash, whose high bits barely change
// between names that differ at the end (murmur3's finalizer).
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Options are a replica's membership.
type Options struct {
	// Namespace holds the members' Leases.
	Namespace string
	// Group is the replicas that split one set of names; a label value.
	Group string
	// Identity is this replica's, unique in its group; its Lease is named
	// <group>-<identity>.
	Identity string
	// LeaseDuration is how long a member lives without renewing (default
	// 40s); it renews every quarter of it.
	LeaseDuration time.Duration
	// Clock is the time source (default the real clock).
	Clock clock.WithTicker
}

func (o *Options) validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("namespace: empty"))
	}
	for _, msg := range validation.IsValidLabelValue(o.Group) {
		errs = append(errs, fmt.Errorf("group %q: %s", o.Group, msg))
	}
	if o.Group == "" {
		errs = append(errs, errors.New("group: empty"))
	}
	if o.Identity == "" {
		errs = append(errs, errors.New("identity: empty"))
	} else if msgs := validation.IsDNS1123Subdomain(o.Group + "-" + o.Identity); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("identity %q: lease name %s-%s: %v", o.Identity, o.Group, o.Identity, msgs))
	}
	if o.LeaseDuration < 0 || o.LeaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("lease duration %s: want whole seconds", o.LeaseDuration))
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 40 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return errors.Join(errs...)
}

// Members is one replica's view of its group: it renews the replica's own
// Lease and tells which names the replica owns now.
type Members struct {
	client kubernetes.Interface
	lister coordinationlisters.LeaseLister
	synced cache.InformerSynced
	opts   Options

	mu       sync.Mutex
	live     []string  // the live members' identities, sorted
	active   bool      // this replica may own names (settled, and its Lease fresh)
	joined   time.Time // this replica's Lease first written
	renewed  time.Time // this replica's Lease last written
	onChange []func()
}

// New returns the membership of a replica, over an informer of the Leases
// in opts.Namespace (which may hold other Leases too: only its group's
// count). Call it before the informer starts. It does no I/O.
func New(client kubernetes.Interface, leases coordinationinformers.LeaseInformer, opts Options) (*Members, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	m := &Members{client: client, lister: leases.Lister(), synced: leases.Informer().HasSynced, opts: opts}
	_, err := leases.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.recompute() },
		UpdateFunc: func(_, obj any) { m.recompute() },
		DeleteFunc: func(any) { m.recompute() },
	})
	if err != nil {
		return nil, fmt.Errorf("shard: watch leases: %w", err)
	}
	return m, nil
}

// OnChange calls f whenever the names this replica owns may have changed:
// a member joined or left, or this replica became active or stopped being.
// Call it before Run.
func (m *Members) OnChange(f func()) { m.onChange = append(m.onChange, f) }

// Owns tells whether name is this replica's now.
func (m *Members) Owns(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active && Owner(name, m.live) == m.opts.Identity
}

// Live are the identities of the live members, sorted.
func (m *Members) Live() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.live)
}

// renewInterval is how often the replica's Lease is renewed, and how long
// a new member waits before it takes names.
func (m *Members) renewInterval() time.Duration { return m.opts.LeaseDuration / 4 }

// Run renews the replica's Lease and follows the group until ctx is done,
// then deletes the Lease, so that the others take its names at once.
func (m *Members) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx).WithValues("group", m.opts.Group, "identity", m.opts.Identity)
	ctx = klog.NewContext(ctx, logger)
	if !cache.WaitForCacheSync(ctx.Done(), m.synced) {
		return nil
	}
	logger.Info("Joining the shard group")
	tick := m.opts.Clock.NewTicker(min(time.Second, m.renewInterval()/2))
	defer tick.Stop()
	var nextRenew time.Time
	for {
		if now := m.opts.Clock.Now(); !now.Before(nextRenew) {
			if err := m.renew(ctx); err != nil {
				if ctx.Err() != nil {
					break
				}
				logger.Error(err, "Renewing the shard Lease failed; retrying")
				nextRenew = now.Add(time.Second)
			} else {
				nextRenew = now.Add(m.renewInterval())
			}
		}
		m.recompute()
		select {
		case <-ctx.Done():
		case <-tick.C():
			continue
		}
		break
	}
	m.leave(logger)
	return nil
}

// leaseName is the name of this replica's Lease.
func (m *Members) leaseName() string { return m.opts.Group + "-" + m.opts.Identity }

// renew writes this replica's Lease with renewTime now, creating it the
// first time.
func (m *Members) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.renewInterval())
	defer cancel()
	leases := m.client.CoordinationV1().Leases(m.opts.Namespace)
	now := m.opts.Clock.Now()
	want := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: m.leaseName(), Namespace: m.opts.Namespace, Labels: map[string]string{GroupLabel: m.opts.Group}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(m.opts.Identity),
			LeaseDurationSeconds: ptr.To(int32(m.opts.LeaseDuration / time.Second)),
			RenewTime:            ptr.To(metav1.NewMicroTime(now)),
		},
	}
	m.mu.Lock()
	first := m.joined.IsZero()
	m.mu.Unlock()
	if first {
		want.Spec.AcquireTime = want.Spec.RenewTime
	}
	current, err := leases.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		acquired := current.Spec.AcquireTime
		current.Labels, current.Spec = want.Labels, *want.Spec.DeepCopy()
		if !first && acquired != nil {
			current.Spec.AcquireTime = acquired
		}
		_, err = leases.Update(ctx, current, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write lease %s/%s: %w", m.opts.Namespace, want.Name, err)
	}
	m.mu.Lock()
	if m.joined.IsZero() {
		m.joined = now
	}
	m.renewed = now
	m.mu.Unlock()
	return nil
}

// leave deletes this replica's Lease.
func (m *Members) leave(logger klog.Logger) {
	m.mu.Lock()
	m.active = false
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.client.CoordinationV1().Leases(m.opts.Namespace).Delete(ctx, m.leaseName(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "Deleting the shard Lease failed; the others take this replica's nodes when it expires")
		return
	}
	logger.Info("Left the shard group")
}

// recompute reads the group's live members and whether this replica is
// active, and tells OnChange's functions when either changed.
func (m *Members) recompute() {
	now := m.opts.Clock.Now()
	leases, err := m.lister.Leases(m.opts.Namespace).List(labels.SelectorFromSet(labels.Set{GroupLabel: m.opts.Group}))
	if err != nil {
		return
	}
	m.mu.Lock()
	active := !m.joined.IsZero() && now.Sub(m.joined) >= m.renewInterval() && now.Sub(m.renewed) < m.opts.LeaseDuration
	live := liveMembers(leases, now)
	if active && !slices.Contains(live, m.opts.Identity) {
		live = append(live, m.opts.Identity)
		slices.Sort(live)
	}
	changed := active != m.active || !slices.Equal(live, m.live)
	m.live, m.active = live, active
	m.mu.Unlock()
	if changed {
		for _, f := range m.onChange {
			f()
		}
	}
}

// liveMembers are the holders of the leases renewed within their duration
// at now, sorted.
func liveMembers(leases []*coordinationv1.Lease, now time.Time) []string {
	var live []string
	for _, l := range leases {
		s := l.Spec
		if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
			continue
		}
		if now.Before(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second)) {
			live = append(live, *s.HolderIdentity)
		}
	}
	slices.Sort(live)
	return slices.Compact(live)
}
