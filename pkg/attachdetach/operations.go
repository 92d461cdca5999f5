package attachdetach

import (
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Backoff of a failed operation: the first retry waits backoffInitial, each
// failure after that doubles the wait, up to backoffMax.
const (
	backoffInitial = 500 * time.Millisecond
	backoffMax     = 2*time.Minute + 2*time.Second
)

// Operation names.
const (
	OperationAttach = "volume_attach"
	OperationDetach = "volume_detach"
	OperationVerify = "verify_volumes_are_attached"
)

// ErrOperationPending is returned when an operation was not started because
// another one on the same key is running.
var ErrOperationPending = errors.New("an operation on the volume is already running")

// BackoffError is returned when an operation was not started because the
// last one of the same name on the same key failed too recently.
type BackoffError struct {
	Volume    corev1.UniqueVolumeName
	Node      types.NodeName
	Operation string
	LastError error
	RetryAt   time.Time
}

func (e *BackoffError) Error() string {
	return fmt.Sprintf("%s of volume %q (node %q) in backoff until %s after: %v",
		e.Operation, e.Volume, e.Node, e.RetryAt.Format(time.RFC3339Nano), e.LastError)
}

// IsBackoff reports whether err says an operation is in backoff; such errors
// are expected and not worth logging.
func IsBackoff(err error) bool {
	var b *BackoffError
	return errors.As(err, &b)
}

// operationKey identifies an operation. An empty node matches every node:
// an operation on a volume that must not attach to several nodes is keyed
// by the volume alone, so it excludes operations on that volume anywhere.
type operationKey struct {
	volume corev1.UniqueVolumeName
	node   types.NodeName
}

func (k operationKey) matches(o operationKey) bool {
	return k.volume == o.volume && (k.node == "" || o.node == "" || k.node == o.node)
}

// operation is a running operation or the record of a failed one.
type operation struct {
	key     operationKey
	name    string
	pending bool
	// backoff state, set when the last run failed
	lastErr     error
	lastErrTime time.Time
	wait        time.Duration
}

func (o *operation) inBackoff(now time.Time) bool {
	return o.lastErr != nil && !now.After(o.lastErrTime.Add(o.wait))
}

// pendingOperations runs at most one operation per key at a time and keeps
// failed ones in exponential backoff. A successful run forgets the key.
type pendingOperations struct {
	clock clock.PassiveClock

	mu      sync.Mutex
	cond    *sync.Cond
	running int
	ops     map[corev1.UniqueVolumeName][]*operation
}

func newPendingOperations(clk clock.PassiveClock) *pendingOperations {
	p := &pendingOperations{clock: clk, ops: make(map[corev1.UniqueVolumeName][]*operation)}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// find returns the pending operation matching key if there is one, else a
// recorded (failed) one matching it, else nil.
func (p *pendingOperations) find(key operationKey) *operation {
	var found *operation
	for _, op := range p.ops[key.volume] {
		if !op.key.matches(key) {
			continue
		}
		if op.pending {
			return op
		}
		found = op
	}
	return found
}

// isPending reports whether an operation matching key is running.
func (p *pendingOperations) isPending(key operationKey) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	op := p.find(key)
	return op != nil && op.pending
}

// isSafeToRetry reports whether an operation called name could start on key
// now: nothing matching runs, and the last one of that name is not in
// backoff.
func (p *pendingOperations) isSafeToRetry(key operationKey, name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	op := p.find(key)
	if op == nil {
		return true
	}
	if op.pending {
		return false
	}
	return !(op.name == name && op.inBackoff(p.clock.Now()))
}

// run starts fn on a goroutine unless an operation matching key runs
// (ErrOperationPending) or the last one of that name failed too recently
// (*BackoffError). An operation of another name resets the backoff.
func (p *pendingOperations) run(key operationKey, name string, fn func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	op := p.find(key)
	switch {
	case op == nil:
		op = &operation{key: key, name: name}
		p.ops[key.volume] = append(p.ops[key.volume], op)
	case op.pending:
		return ErrOperationPending
	case op.name == name && op.inBackoff(p.clock.Now()):
		return &BackoffError{Volume: key.volume, Node: key.node, Operation: name,
			LastError: op.lastErr, RetryAt: op.lastErrTime.Add(op.wait)}
	case op.name != name:
		op.name, op.lastErr, op.wait = name, nil, 0
	}
	op.key = key
	op.pending = true
	p.running++
	go func() {
		var err error
		defer func() { p.complete(op, err) }()
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%s of volume %q panicked: %v", name, key.volume, r)
			}
		}()
		err = fn()
	}()
	return nil
}

func (p *pendingOperations) complete(op *operation, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.cond.Broadcast()
	p.running--
	op.pending = false
	if err == nil {
		ops := p.ops[op.key.volume]
		for i, o := range ops {
			if o == op {
				ops = append(ops[:i], ops[i+1:]...)
				break
			}
		}
		if len(ops) == 0 {
			delete(p.ops, op.key.volume)
		} else {
			p.ops[op.key.volume] = ops
		}
		return
	}
	switch {
	case op.wait == 0:
		op.wait = backoffInitial
	default:
		op.wait = min(2*op.wait, backoffMax)
	}
	op.lastErr = err
	op.lastErrTime = p.clock.Now()
}

// wait blocks until no operation is running.
func (p *pendingOperations) wait() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.running > 0 {
		p.cond.Wait()
	}
}
