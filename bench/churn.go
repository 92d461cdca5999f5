package main

// The soak's churn: pods created at a steady rate, and as many of the
// oldest deleted, so that the number of pods stays where it started.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// churnWorkers is how many clients create and delete the churn's pods;
	// more than the rate needs, so that a slow API call does not hold the
	// churn back.
	churnWorkers = 32
	// churnCallTimeout bounds each of the churn's API calls.
	churnCallTimeout = 30 * time.Second
)

// churner creates pods and deletes as many, oldest first, so that the
// number of pods stays where it started.
type churner struct {
	cl    *cluster
	nodes []string

	mu    sync.Mutex
	live  []string // the pods, oldest first
	next  int      // the index of the next pod's name
	fresh []string // created, not yet seen Running

	created, deleted, failed, skipped atomic.Int64
	errorsLogged                      atomic.Int64
}

// newChurner takes over the pods createPods made: pod-0 … pod-(pods-1).
func newChurner(cl *cluster, nodes []string, pods int) *churner {
	ch := &churner{cl: cl, nodes: nodes, next: pods}
	for i := range pods {
		ch.live = append(ch.live, benchPodName(i))
	}
	return ch
}

// run turns rate times a second until ctx ends, then waits for the turns
// under way. A turn that finds every client busy is skipped.
func (ch *churner) run(ctx context.Context, rate float64) {
	turns := make(chan struct{}, churnWorkers)
	var wg sync.WaitGroup
	for range churnWorkers {
		wg.Go(func() {
			for range turns {
				ch.turn(context.WithoutCancel(ctx))
			}
		})
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			close(turns)
			wg.Wait()
			return
		case <-tick.C:
			select {
			case turns <- struct{}{}:
			default:
				ch.skipped.Add(1)
			}
		}
	}
}

// turn creates the next pod, on the node of the pod it replaces, and
// deletes the oldest.
func (ch *churner) turn(ctx context.Context) {
	ch.mu.Lock()
	i := ch.next
	ch.next++
	oldest := ch.live[0]
	ch.live = ch.live[1:]
	ch.mu.Unlock()

	name := benchPodName(i)
	callCtx, cancel := context.WithTimeout(ctx, churnCallTimeout)
	_, err := ch.cl.createPod(callCtx, name, ch.nodes[i%len(ch.nodes)])
	cancel()
	if err != nil {
		ch.fail(err)
	} else {
		ch.created.Add(1)
		ch.mu.Lock()
		ch.live = append(ch.live, name)
		ch.fresh = append(ch.fresh, name)
		ch.mu.Unlock()
	}
	callCtx, cancel = context.WithTimeout(ctx, churnCallTimeout)
	err = ch.cl.deletePod(callCtx, oldest)
	cancel()
	if err != nil {
		ch.fail(err)
	} else {
		ch.deleted.Add(1)
	}
}

// fail counts a failed call and logs the first few.
func (ch *churner) fail(err error) {
	ch.failed.Add(1)
	if ch.errorsLogged.Add(1) <= 10 {
		logf("soak: churn: %v", err)
	}
}

// ranSince gives the create→Running latency, in seconds, of the pods seen
// Running since it was last called, and how many are not Running yet.
func (ch *churner) ranSince() (latencies []float64, waiting int) {
	ch.mu.Lock()
	fresh := ch.fresh
	ch.fresh = nil
	ch.mu.Unlock()
	var still []string
	for _, name := range fresh {
		if d, ok := ch.cl.runningAfter(name); ok {
			latencies = append(latencies, d.Seconds())
		} else {
			still = append(still, name)
		}
	}
	ch.mu.Lock()
	ch.fresh = append(still, ch.fresh...)
	ch.mu.Unlock()
	return latencies, len(still)
}

// churnCounts are the churn's counters at one moment.
type churnCounts struct{ created, deleted, failed, skipped int64 }

func (ch *churner) counts() churnCounts {
	return churnCounts{ch.created.Load(), ch.deleted.Load(), ch.failed.Load(), ch.skipped.Load()}
}

func (c churnCounts) minus(earlier churnCounts) churnCounts {
	return churnCounts{c.created - earlier.created, c.deleted - earlier.deleted, c.failed - earlier.failed, c.skipped - earlier.skipped}
}
