package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// planNow is the time the plans below are decided at; the pods started an
// hour before.
var planNow = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// planView is the view computePodActions reads of pod, its volumes and
// sandbox set up and running, latest being the runtime's latest attempt
// of each container that ever started. Running containers have started
// (their probes run and said so); lost attempts are those the runtime
// marks Unknown.
func planView(pod *corev1.Pod, latest ...ContainerStatus) *podView {
	byName := map[string]ContainerStatus{}
	for _, st := range latest {
		byName[st.Name] = st
	}
	view := func(c *corev1.Container, init bool) containerView {
		cv := containerView{spec: c, sidecar: init && podrules.IsSidecar(c), image: c.Image}
		if st, ok := byName[c.Name]; ok {
			cv.latest = &st
			cv.probing, cv.started = true, true
			cv.lost = st.Unknown && st.State == StateExited
			cv.applied = c.Resources.DeepCopy()
		}
		return cv
	}
	v := &podView{
		pod: pod, startTime: planNow.Add(-time.Hour),
		sandbox: true, sandboxSetUp: true, volumesReady: true,
	}
	for i := range pod.Spec.Containers {
		v.regular = append(v.regular, view(&pod.Spec.Containers[i], false))
	}
	for i := range pod.Spec.InitContainers {
		v.init = append(v.init, view(&pod.Spec.InitContainers[i], true))
	}
	for _, c := range ephemeralContainers(pod) {
		v.ephemeral = append(v.ephemeral, view(&c, false))
	}
	derive(v)
	return v
}

// derive computes what the worker derives from a view's containers: whether
// the app containers are done or ending, and which exited containers are
// so for good.
func derive(v *podView) {
	v.appsDone = appsDone(v.pod, v.regular)
	v.appsEnding = appsEnding(v.pod, v.regular)
	over := v.failReason != "" || v.terminated
	for _, list := range []struct {
		views []containerView
		init  bool
	}{{v.init, true}, {v.regular, false}} {
		for i := range list.views {
			cv := &list.views[i]
			cv.final = cv.latest != nil && cv.latest.State == StateExited && cv.exitedForGood(v.pod, list.init, over, v.appsEnding)
		}
	}
	for i := range v.ephemeral {
		cv := &v.ephemeral[i]
		cv.final = cv.latest != nil && cv.latest.State == StateExited
	}
}

func running(name string, attempt int) ContainerStatus {
	return ContainerStatus{Name: name, Attempt: attempt, State: StateRunning, StartedAt: planNow.Add(-time.Minute)}
}

// exited is an attempt that ran for a second and exited with code ago.
func exited(name string, attempt, code int, ago time.Duration) ContainerStatus {
	end := planNow.Add(-ago)
	return ContainerStatus{Name: name, Attempt: attempt, State: StateExited, ExitCode: code, StartedAt: end.Add(-time.Second), FinishedAt: end}
}

// lostAttempt is an attempt the runtime lost track of.
func lostAttempt(name string, attempt int) ContainerStatus {
	st := exited(name, attempt, 255, time.Second)
	st.Unknown = true
	return st
}

func planPod(policy corev1.RestartPolicy, init []corev1.Container, names ...string) *corev1.Pod {
	spec := corev1.PodSpec{RestartPolicy: policy, InitContainers: init}
	for _, n := range names {
		spec.Containers = append(spec.Containers, corev1.Container{Name: n, Image: "i"})
	}
	return testPod("p", spec)
}

// describe writes a plan as lines a table can compare.
func describe(a podActions) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	switch {
	case a.terminate:
		add("terminate")
	case a.evict != nil:
		add("evict: %s", a.evict.Reason)
	case a.failed:
		add("failed")
	case a.ended && a.tearDownVolumes:
		add("ended: tear down volumes")
	case a.ended:
		add("ended")
	case a.deadlineExceeded:
		add("deadline exceeded")
	}
	if a.stop != nil {
		add("stop %s", describeStop(a.stop))
	}
	if a.replaceSandbox {
		add("replace sandbox")
	}
	switch a.setUp {
	case setUpNow:
		add("set up")
	case setUpLater:
		add("set up later")
	}
	for _, act := range a.containers {
		add("%s", describeAction(act))
	}
	if a.stopSidecars != nil {
		add("stop sidecars %s", describeStop(a.stopSidecars))
	}
	if a.next > 0 {
		add("next %s", a.next)
	}
	return out
}

func describeAction(act containerAction) string {
	name := act.container.Name
	switch act.kind {
	case actStart:
		if act.newImage {
			return fmt.Sprintf("start %s#%d (new image)", name, act.attempt)
		}
		return fmt.Sprintf("start %s#%d", name, act.attempt)
	case actRestartLost:
		return "restart lost " + name
	case actWaitBackOff:
		return fmt.Sprintf("back-off %s %s, %s left", name, act.backOff, act.wait)
	case actSyncProbes:
		return "probe " + name
	case actResize:
		return "resize " + name
	case actRestartToResize:
		return "restart " + name + " to resize"
	case actRestartForImage:
		return "restart " + name + " for its image"
	case actGoOnIfStarted:
		return "go on if " + name + " started"
	}
	return fmt.Sprintf("action %d on %s", act.kind, name)
}

// describeStop writes the groups in order, "[a b] [c]", within grace.
func describeStop(s *stopActions) string {
	var groups []string
	for _, g := range s.groups {
		var names []string
		for _, c := range g {
			names = append(names, c.Name)
		}
		groups = append(groups, "["+strings.Join(names, " ")+"]")
	}
	list := strings.Join(groups, " ")
	if len(groups) == 0 {
		list = "(none)"
	}
	hooks := ""
	if s.hooks {
		hooks = " with hooks"
	}
	return fmt.Sprintf("%s within %s%s", list, s.grace, hooks)
}

func TestComputePodActions(t *testing.T) {
	always, onFailure, never := corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever
	inits := func(names ...string) []corev1.Container {
		var out []corev1.Container
		for _, n := range names {
			if strings.HasPrefix(n, "side") {
				out = append(out, sidecarSpec(n))
			} else {
				out = append(out, corev1.Container{Name: n, Image: "i"})
			}
		}
		return out
	}
	const sidecarsNone = "stop sidecars (none) within 30s with hooks"
	tests := []struct {
		name   string
		pod    *corev1.Pod
		latest []ContainerStatus
		edit   func(v *podView)
		want   []string
	}{
		// The restart policy.
		{name: "a new container starts", pod: planPod(always, nil, "app"),
			want: []string{"start app#0"}},
		{name: "a running container is probed", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{running("app", 0)},
			want:   []string{"probe app"}},
		{name: "Always: the first exit restarts at once", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{exited("app", 0, 0, time.Second)},
			want:   []string{"probe app", "start app#1"}},
		{name: "OnFailure: a failure restarts", pod: planPod(onFailure, nil, "app"),
			latest: []ContainerStatus{exited("app", 0, 1, time.Second)},
			want:   []string{"probe app", "start app#1"}},
		{name: "OnFailure: a success is final: the pod ended", pod: planPod(onFailure, nil, "app"),
			latest: []ContainerStatus{exited("app", 0, 0, time.Second)},
			want:   []string{"ended: tear down volumes"}},
		{name: "OnFailure: killed for a failed probe, it restarts whatever its exit code", pod: planPod(onFailure, nil, "app"),
			latest: []ContainerStatus{exited("app", 0, 0, time.Second)},
			edit:   func(v *podView) { v.regular[0].probeKilled = true },
			want:   []string{"probe app", "start app#1"}},
		{name: "Never: killed for a failed probe, it is final", pod: planPod(never, nil, "app"),
			latest: []ContainerStatus{exited("app", 0, 0, time.Second)},
			edit:   func(v *podView) { v.regular[0].probeKilled = true },
			want:   []string{"ended: tear down volumes"}},
		{name: "Never: a failure is final", pod: planPod(never, nil, "app"),
			latest: []ContainerStatus{exited("app", 0, 1, time.Second)},
			want:   []string{"ended: tear down volumes"}},
		{name: "one app container done, the other runs on", pod: planPod(never, nil, "app", "web"),
			latest: []ContainerStatus{exited("app", 0, 0, time.Second), running("web", 0)},
			want:   []string{"probe app", "probe web"}},

		// The crash-loop back-off.
		{name: "back-off: the second exit waits 10s", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{exited("app", 1, 1, 4*time.Second)},
			want:   []string{"probe app", "back-off app 10s, 6s left", "next 6s"}},
		{name: "back-off doubles", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{exited("app", 3, 1, 4*time.Second)},
			want:   []string{"probe app", "back-off app 40s, 36s left", "next 36s"}},
		{name: "back-off over: restart", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{exited("app", 3, 1, 41*time.Second)},
			want:   []string{"probe app", "start app#4"}},
		{name: "back-off counts from the image's first attempt", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{exited("app", 3, 1, 4*time.Second)},
			edit:   func(v *podView) { v.regular[0].backOffFrom = 3 },
			want:   []string{"probe app", "start app#4"}},
		{name: "a new image restarts an exited container at once", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{exited("app", 3, 1, 4*time.Second)},
			edit:   func(v *podView) { v.regular[0].image = "old" },
			want:   []string{"probe app", "start app#4 (new image)"}},
		{name: "a new image restarts a running container", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{running("app", 0)},
			edit:   func(v *podView) { v.regular[0].image = "old" },
			want:   []string{"probe app", "restart app for its image"}},
		{name: "the active deadline comes sooner than the back-off", pod: withDeadline(planPod(always, nil, "app"), 3605),
			latest: []ContainerStatus{exited("app", 1, 1, time.Second)},
			want:   []string{"probe app", "back-off app 10s, 9s left", "next 5s"}},

		// Init containers, in order.
		{name: "the first init container starts alone", pod: planPod(always, inits("init1", "init2"), "app"),
			want: []string{"start init1#0"}},
		{name: "the next waits for the one that runs", pod: planPod(always, inits("init1", "init2"), "app"),
			latest: []ContainerStatus{running("init1", 0)},
			want:   []string{"probe init1"}},
		{name: "one that completed lets the next start", pod: planPod(always, inits("init1", "init2"), "app"),
			latest: []ContainerStatus{exited("init1", 0, 0, time.Second)},
			want:   []string{"probe init1", "start init2#0"}},
		{name: "all completed: the app starts", pod: planPod(always, inits("init1", "init2"), "app"),
			latest: []ContainerStatus{exited("init1", 0, 0, time.Second), exited("init2", 0, 0, time.Second)},
			want:   []string{"probe init1", "probe init2", "start app#0"}},
		{name: "Never: a failed init container fails the pod, which ended", pod: planPod(never, inits("init1", "init2"), "app"),
			latest: []ContainerStatus{exited("init1", 0, 1, time.Second)},
			want:   []string{"ended: tear down volumes"}},
		{name: "Never: a failed init container stops the sidecar before it (the node e2e suite's \"should be running restartable init container and a failed Init container in parallel\")",
			pod:    planPod(never, inits("side", "init"), "app"),
			latest: []ContainerStatus{running("side", 0), exited("init", 0, 1, time.Second)},
			want:   []string{"stop [init app] [side] within 30s with hooks", "probe side"}},
		{name: "OnFailure: a failed init container restarts after its back-off", pod: planPod(onFailure, inits("init1", "init2"), "app"),
			latest: []ContainerStatus{exited("init1", 1, 1, time.Second)},
			want:   []string{"back-off init1 10s, 9s left", "next 9s"}},

		// Sidecars: started before the app containers, stopped after.
		{name: "a sidecar starts first", pod: planPod(never, inits("side", "init"), "app"),
			want: []string{"start side#0"}},
		{name: "a sidecar not started holds the next back", pod: planPod(never, inits("side", "init"), "app"),
			latest: []ContainerStatus{running("side", 0)},
			edit:   func(v *podView) { v.init[0].started = false },
			want:   []string{"probe side"}},
		{name: "a sidecar with a startup probe yet to run holds the next back", pod: withStartupProbe(planPod(never, inits("side", "init"), "app")),
			latest: []ContainerStatus{running("side", 0)},
			edit:   func(v *podView) { v.init[0].probing, v.init[0].started = false, false },
			want:   []string{"probe side"}},
		{name: "a sidecar without a startup probe has started once probed", pod: planPod(never, inits("side", "init"), "app"),
			latest: []ContainerStatus{running("side", 0)},
			edit:   func(v *podView) { v.init[0].probing, v.init[0].started = false, false },
			want:   []string{"probe side", "start init#0"}},
		{name: "sidecars and init containers done: the app starts", pod: planPod(never, inits("side", "init"), "app"),
			latest: []ContainerStatus{running("side", 0), exited("init", 0, 0, time.Second)},
			want:   []string{"probe side", "probe init", "start app#0"}},
		{name: "a sidecar that exited early restarts whatever the policy, holding the next back", pod: planPod(never, inits("side", "init"), "app"),
			latest: []ContainerStatus{exited("side", 0, 0, time.Second)},
			want:   []string{"probe side", "start side#1"}},
		{name: "a sidecar that exits beside the app restarts beside it", pod: planPod(never, inits("side", "init"), "app"),
			latest: []ContainerStatus{exited("side", 0, 1, time.Second), exited("init", 0, 0, time.Second), running("app", 0)},
			want:   []string{"probe side", "start side#1", "probe init", "probe app"}},
		{name: "app done: the sidecars stop, the last started first", pod: planPod(never, inits("side1", "side2"), "app"),
			latest: []ContainerStatus{running("side1", 0), running("side2", 0), exited("app", 0, 0, time.Second)},
			want:   []string{"probe side1", "probe side2", "probe app", "stop sidecars [side2] [side1] within 30s with hooks"}},
		{name: "app done: a sidecar that exited is not restarted, the pod ended", pod: planPod(never, inits("side"), "app"),
			latest: []ContainerStatus{exited("side", 0, 143, time.Second), exited("app", 0, 0, time.Second)},
			want:   []string{"ended: tear down volumes"}},
		{name: "app done: a sidecar still running is stopped, not yet ended", pod: planPod(never, inits("side"), "app"),
			latest: []ContainerStatus{running("side", 0), exited("app", 0, 0, time.Second)},
			want:   []string{"probe side", "probe app", "stop sidecars [side] within 30s with hooks"}},
		{name: "Never: the app being killed for a failed probe, a sidecar that exited is not restarted (the node e2e suite's \"should not continue running liveness probes for restartable init containers and restart them while in preStop\")",
			pod:    planPod(never, inits("side"), "app"),
			latest: []ContainerStatus{exited("side", 2, 137, time.Minute), running("app", 0)},
			edit:   func(v *podView) { v.regular[0].killing = true },
			want:   []string{"probe side", "probe app"}},
		{name: "OnFailure: the app being killed for a failed probe restarts, so does a sidecar", pod: planPod(onFailure, inits("side"), "app"),
			latest: []ContainerStatus{exited("side", 2, 137, time.Minute), running("app", 0)},
			edit:   func(v *podView) { v.regular[0].killing = true },
			want:   []string{"probe side", "start side#3", "probe app"}},
		{name: "Never: one app container killed, another running on: a sidecar restarts", pod: planPod(never, inits("side"), "app", "web"),
			latest: []ContainerStatus{exited("side", 2, 137, time.Minute), running("app", 0), running("web", 0)},
			edit:   func(v *podView) { v.regular[0].killing = true },
			want:   []string{"probe side", "start side#3", "probe app", "probe web"}},
		{name: "a sidecar's new image restarts it at once, what followed it going on", pod: planPod(never, inits("side", "init"), "app"),
			latest: []ContainerStatus{running("side", 0), running("init", 0)},
			edit:   func(v *podView) { v.init[0].image = "old" },
			want:   []string{"probe side", "restart side for its image", "probe init"}},
		{name: "a sidecar's new image before anything followed: the rest waits", pod: planPod(never, inits("side", "init"), "app"),
			latest: []ContainerStatus{running("side", 0)},
			edit:   func(v *podView) { v.init[0].image = "old" },
			want:   []string{"probe side", "restart side for its image"}},
		{name: "a sidecar resized in place: the rest waits if it had to restart", pod: withResize(planPod(never, inits("side"), "app"), corev1.NotRequired),
			latest: []ContainerStatus{running("side", 0)},
			edit:   func(v *podView) { runsWith100m(&v.init[0]) },
			want:   []string{"probe side", "resize side", "go on if side started", "start app#0"}},

		// In-place resize of an app container.
		{name: "resize in place", pod: withResize(planPod(always, nil, "app"), corev1.NotRequired),
			latest: []ContainerStatus{running("app", 0)},
			edit:   func(v *podView) { runsWith100m(&v.regular[0]) },
			want:   []string{"probe app", "resize app"}},
		{name: "resize by a restart, as its policy asks", pod: withResize(planPod(always, nil, "app"), corev1.RestartContainer),
			latest: []ContainerStatus{running("app", 0)},
			edit:   func(v *podView) { runsWith100m(&v.regular[0]) },
			want:   []string{"probe app", "restart app to resize"}},
		{name: "resources as applied: no resize", pod: withResize(planPod(always, nil, "app"), corev1.RestartContainer),
			latest: []ContainerStatus{running("app", 0)},
			want:   []string{"probe app"}},
		{name: "resources not known (an attempt the agent did not start): no resize", pod: withResize(planPod(always, nil, "app"), corev1.RestartContainer),
			latest: []ContainerStatus{running("app", 0)},
			edit:   func(v *podView) { v.regular[0].applied = nil },
			want:   []string{"probe app"}},

		// A container the runtime lost track of.
		{name: "a lost container is started again whatever the policy", pod: planPod(never, nil, "app"),
			latest: []ContainerStatus{lostAttempt("app", 0)},
			want:   []string{"probe app", "restart lost app"}},
		{name: "a lost init container is started again before anything follows", pod: planPod(never, inits("init"), "app"),
			latest: []ContainerStatus{lostAttempt("init", 0)},
			want:   []string{"restart lost init"}},
		{name: "a lost sidecar is started again", pod: planPod(never, inits("side"), "app"),
			latest: []ContainerStatus{lostAttempt("side", 0), running("app", 0)},
			want:   []string{"restart lost side"}},

		// Ephemeral containers run once.
		{name: "an ephemeral container starts", pod: withEphemeral(planPod(always, nil, "app")),
			latest: []ContainerStatus{running("app", 0)},
			want:   []string{"probe app", "start debug#0"}},
		{name: "an ephemeral container that exited stays so", pod: withEphemeral(planPod(always, nil, "app")),
			latest: []ContainerStatus{running("app", 0), exited("debug", 0, 1, time.Second)},
			want:   []string{"probe app"}},

		// The sandbox.
		{name: "no sandbox yet: set up first", pod: planPod(always, nil, "app"),
			edit: func(v *podView) { v.sandboxSetUp, v.sandbox = false, false },
			want: []string{"set up"}},
		{name: "volumes to set up again", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{running("app", 0)},
			edit:   func(v *podView) { v.volumesReady = false },
			want:   []string{"set up"}},
		{name: "a sandbox that died is replaced", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{exited("app", 0, 137, time.Second)},
			edit:   func(v *podView) { v.sandbox = false },
			want:   []string{"replace sandbox", "set up"}},
		{name: "a sandbox a start found gone is replaced", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{exited("app", 0, 137, time.Second)},
			edit:   func(v *podView) { v.sandboxRefused = true },
			want:   []string{"replace sandbox", "set up"}},
		{name: "a finished pod's dead sandbox is kept", pod: planPod(never, nil, "app"),
			latest: []ContainerStatus{exited("app", 0, 0, time.Second)},
			edit:   func(v *podView) { v.sandbox = false },
			want:   []string{"ended: tear down volumes"}},
		{name: "a set-up that failed is tried again when due", pod: planPod(always, nil, "app"),
			edit: func(v *podView) { v.sandboxSetUp, v.sandbox, v.setUpRetryAt = false, false, planNow.Add(7*time.Second) },
			want: []string{"set up later", "next 7s"}},

		// A pod that ends.
		{name: "deleted: stops within its grace, sidecars last", pod: withEphemeral(planPod(always, inits("side1", "init", "side2"), "app", "web")),
			latest: []ContainerStatus{running("side1", 0), running("side2", 0), running("app", 0)},
			edit:   func(v *podView) { v.deleting, v.grace = true, 5*time.Second },
			want:   []string{"terminate", "stop [init app web debug] [side2] [side1] within 5s with hooks"}},
		{name: "deleted at once", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{running("app", 0)},
			edit:   func(v *podView) { v.deleting, v.grace = true, 0 },
			want:   []string{"terminate", "stop [app] within 0s with hooks"}},
		{name: "an app container with restartPolicy Always is no sidecar", pod: withAppRestartPolicy(planPod(always, inits("side"), "app")),
			latest: []ContainerStatus{running("side", 0), running("app", 0)},
			edit:   func(v *podView) { v.deleting, v.grace = true, 30*time.Second },
			want:   []string{"terminate", "stop [app] [side] within 30s with hooks"}},
		{name: "evicted: stops within the eviction's grace and fails", pod: planPod(always, inits("side"), "app"),
			latest: []ContainerStatus{running("side", 0), running("app", 0)},
			edit:   func(v *podView) { v.evict = &Eviction{Reason: "Evicted", Grace: 2 * time.Second} },
			want:   []string{"evict: Evicted", "stop [app] [side] within 2s with hooks"}},
		{name: "failed: nothing more, once stopped its volumes torn down", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{exited("app", 0, 1, time.Second)},
			edit:   func(v *podView) { v.failReason = "DeadlineExceeded" },
			want:   []string{"ended: tear down volumes"}},
		{name: "failed with a container that would not stop: nothing more", pod: planPod(always, nil, "app"),
			latest: []ContainerStatus{running("app", 0)},
			edit:   func(v *podView) { v.failReason = "DeadlineExceeded" },
			want:   []string{"failed"}},
		{name: "an eviction of a failed pod is none", pod: planPod(always, nil, "app"),
			edit: func(v *podView) { v.failReason, v.evict = "Evicted", &Eviction{Reason: "Evicted"} },
			want: []string{"ended: tear down volumes"}},

		// A pod that ended: its volumes go, and nothing of it comes back.
		{name: "ended, its volumes torn down: nothing more", pod: planPod(never, nil, "app"),
			latest: []ContainerStatus{exited("app", 0, 0, time.Second)},
			edit:   func(v *podView) { v.volumesTornDown, v.volumesReady = true, false },
			want:   []string{"ended"}},
		{name: "ended: an ephemeral container added is not started", pod: withEphemeral(planPod(never, nil, "app")),
			latest: []ContainerStatus{exited("app", 0, 0, time.Second)},
			want:   []string{"ended: tear down volumes"}},
		{name: "volumes torn down, the sandbox's records lost (an agent restarted): nothing is set up again", pod: planPod(never, nil, "app"),
			edit: func(v *podView) {
				v.regular[0].latest, v.sandboxSetUp, v.sandbox, v.volumesReady, v.volumesTornDown = nil, false, false, false, true
			},
			want: []string{"ended"}},
		{name: "an ephemeral container that runs holds the end back", pod: withEphemeral(planPod(never, nil, "app")),
			latest: []ContainerStatus{exited("app", 0, 0, time.Second), running("debug", 0)},
			want:   []string{"probe app", sidecarsNone}},
		{name: "past its deadline: stops without hooks and fails", pod: withDeadline(planPod(always, nil, "app"), 3600),
			latest: []ContainerStatus{running("app", 0)},
			want:   []string{"deadline exceeded", "stop [app] within 30s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := planView(tt.pod, tt.latest...)
			if tt.edit != nil {
				tt.edit(v)
				derive(v)
			}
			if got := describe(computePodActions(v, planNow)); !slices.Equal(got, tt.want) {
				t.Errorf("plan:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func withDeadline(pod *corev1.Pod, seconds int64) *corev1.Pod {
	pod.Spec.ActiveDeadlineSeconds = &seconds
	return pod
}

func withAppRestartPolicy(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.Containers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	return pod
}

func withStartupProbe(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.InitContainers[0].StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	return pod
}

func withEphemeral(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "i"}}}
	return pod
}

// withResize gives the pod's first container (its first init container
// if it has one) a CPU limit of 200m and the resize policy for it.
func withResize(pod *corev1.Pod, policy corev1.ResourceResizeRestartPolicy) *corev1.Pod {
	c := &pod.Spec.Containers[0]
	if len(pod.Spec.InitContainers) > 0 {
		c = &pod.Spec.InitContainers[0]
	}
	c.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}
	c.ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: policy}}
	return pod
}

// runsWith100m has a container run with a CPU limit of 100m.
func runsWith100m(cv *containerView) {
	cv.applied = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}
}
