package providertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/provider"
)

// The kit's pods. The first five run from the start; the lost ones are
// made while the agent is down.
const (
	podKeep       = "keep"     // runs throughout: logs, exec, restart
	podUpdate     = "update"   // gets a new label
	podGrace      = "grace"    // deleted with Config.Grace
	podForce      = "force"    // deleted with grace 0
	podDangling   = "dangling" // deleted with grace 0 while the agent is down
	podLostNew    = "lost-new"
	podLostNever  = "lost-never"
	podLostAlways = "lost-always"
)

// updatedLabel is the label the update part adds.
const updatedLabel = "providertest.nodelet.io/updated"

// newPod is one of the kit's pods, bound to its node.
func (k *kit) newPod(name string, policy corev1.RestartPolicy) *corev1.Pod {
	spec := k.c.Pod.DeepCopy()
	spec.NodeName = k.node
	if policy != "" {
		spec.RestartPolicy = policy
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: map[string]string{"providertest.nodelet.io/pod": name}},
		Spec:       *spec,
	}
}

// createPods creates pods in the API.
func (k *kit) createPods(pods ...*corev1.Pod) ([]*corev1.Pod, error) {
	var created []*corev1.Pod
	for _, p := range pods {
		ctx, cancel := context.WithTimeout(k.ctx, requestTimeout)
		c, err := k.client.CoreV1().Pods(k.ns).Create(ctx, p, metav1.CreateOptions{})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("create pod %s: %w", p.Name, err)
		}
		created = append(created, c)
	}
	return created, nil
}

// deletePod deletes a pod from the API with a grace period.
func (k *kit) deletePod(name string, grace int64) error {
	ctx, cancel := context.WithTimeout(k.ctx, requestTimeout)
	defer cancel()
	err := k.client.CoreV1().Pods(k.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", name, err)
	}
	return nil
}

// waitRunning waits until the API shows every named pod running as the
// provider reports it.
func (k *kit) waitRunning(names ...string) (string, bool) {
	return k.until(k.c.Timeout, func(ctx context.Context) (bool, string) {
		var pending []string
		for _, name := range names {
			o := k.observe(ctx, name)
			if !o.runningAsReported() {
				msg := o.String()
				if h := o.hint(); h != "" {
					msg += " (" + h + ")"
				}
				pending = append(pending, msg)
			}
		}
		return len(pending) == 0, strings.Join(pending, "\n  ")
	})
}

// checkNode: the node registers and turns Ready, with pod capacity.
func (k *kit) checkNode() error {
	seen, ok := k.until(k.c.Timeout, func(ctx context.Context) (bool, string) {
		n, err := k.client.CoreV1().Nodes().Get(ctx, k.node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "not registered"
		}
		if err != nil {
			return false, "error: " + err.Error()
		}
		ready := "no Ready condition"
		isReady := false
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
				isReady = c.Status == corev1.ConditionTrue
			}
		}
		capacity, allocatable := n.Status.Capacity.Pods(), n.Status.Allocatable.Pods()
		seen := fmt.Sprintf("%s; pods: capacity %s, allocatable %s", ready, capacity, allocatable)
		return isReady && capacity.Value() > 0 && allocatable.Value() > 0, seen
	})
	if !ok {
		return fmt.Errorf("node %s: not Ready with room for pods after %s: %s. Ping must succeed, and ConfigureNode fill in "+
			"the node's status: conditions, capacity and allocatable (pods among them), addresses, nodeInfo and daemonEndpoints",
			k.node, k.c.Timeout, seen)
	}
	return nil
}

// checkCreate: the pods bound to the node run, and the API shows them as
// the provider reports them.
func (k *kit) checkCreate() error {
	names := []string{podKeep, podUpdate, podGrace, podForce, podDangling}
	var pods []*corev1.Pod
	for _, name := range names {
		pods = append(pods, k.newPod(name, ""))
	}
	if _, err := k.createPods(pods...); err != nil {
		return err
	}
	how := "polled through GetPod"
	if _, ok := k.prov.(provider.PodNotifier); ok {
		how = "pushed (PodNotifier)"
	}
	start := time.Now()
	if seen, ok := k.waitRunning(names...); !ok {
		return fmt.Errorf("pods bound to node %s did not run within %s: the API must show each Running and Ready, every container "+
			"running and ready, with the pod IP the provider reports (status %s):\n  %s", k.node, k.c.Timeout, how, seen)
	}
	k.r.Logf("create: %d pods Running in the API %s after they were created; status %s",
		len(names), time.Since(start).Round(100*time.Millisecond), how)
	return nil
}

// logsOffered: logs are checked when the provider serves them and the
// agent runs the kubelet API.
func (k *kit) logsOffered() (bool, string) {
	if _, ok := k.prov.(provider.LogsProvider); !ok {
		return false, "the provider is not a provider.LogsProvider"
	}
	if k.c.Server == nil {
		return false, "no kubelet API (Config.Server)"
	}
	return true, ""
}

// checkLogs: the first container's log, through the API server's
// pods/log.
func (k *kit) checkLogs() error {
	container := k.c.Pod.Containers[0].Name
	seen, ok := k.until(k.c.Timeout, func(ctx context.Context) (bool, string) {
		raw, err := k.client.CoreV1().Pods(k.ns).GetLogs(podKeep, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		if err != nil {
			return false, "error: " + err.Error()
		}
		if len(raw) > 500 {
			raw = raw[len(raw)-500:]
		}
		return bytes.Contains(raw, []byte(k.c.LogLine)), fmt.Sprintf("log %q", raw)
	})
	if !ok {
		return fmt.Errorf("log of pod %s container %s through the API server (pods/log, as kubectl logs): want it to hold %q within %s; "+
			"last: %s. The API server reaches the kubelet API at the node's address and daemonEndpoints port, which serves "+
			"the provider's GetContainerLogs", podKeep, container, k.c.LogLine, k.c.Timeout, seen)
	}
	return nil
}

// execOffered: exec is checked when the provider runs commands in
// containers and the agent runs the kubelet API.
func (k *kit) execOffered() (bool, string) {
	if _, ok := k.prov.(provider.ExecProvider); !ok {
		return false, "the provider is not a provider.ExecProvider"
	}
	if k.c.Server == nil {
		return false, "no kubelet API (Config.Server)"
	}
	return true, ""
}

// checkExec: a command in the first container, through the API server's
// pods/exec, over WebSocket or else SPDY as kubectl does.
func (k *kit) checkExec() error {
	container := k.c.Pod.Containers[0].Name
	u := k.client.CoreV1().RESTClient().Post().Namespace(k.ns).Resource("pods").Name(podKeep).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: k.c.Exec, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	seen, ok := k.until(k.c.Timeout, func(ctx context.Context) (bool, string) {
		ws, err := remotecommand.NewWebSocketExecutor(k.c.Client, http.MethodGet, u.String())
		if err != nil {
			return false, "error: " + err.Error()
		}
		spdy, err := remotecommand.NewSPDYExecutor(k.c.Client, http.MethodPost, u)
		if err != nil {
			return false, "error: " + err.Error()
		}
		ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
		if err != nil {
			return false, "error: " + err.Error()
		}
		var stdout, stderr bytes.Buffer
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
		seen := fmt.Sprintf("stdout %q, stderr %q, error %v", stdout.String(), stderr.String(), err)
		return err == nil && stdout.String() == k.c.ExecOutput, seen
	})
	if !ok {
		return fmt.Errorf("exec %q in pod %s container %s through the API server (pods/exec, as kubectl exec): want stdout %q within %s; "+
			"last: %s. The kubelet API serves it with the provider's RunInContainer", k.c.Exec, podKeep, container, k.c.ExecOutput, k.c.Timeout, seen)
	}
	return nil
}

// starts are a pod's containers' restart counts and start times.
func starts(p *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, c := range p.Spec.Containers {
		s := containerStatus(p, c.Name)
		if s == nil {
			out[c.Name] = "no status"
			continue
		}
		started := "not running"
		if s.State.Running != nil {
			// Whole seconds: the API keeps no more.
			started = s.State.Running.StartedAt.UTC().Truncate(time.Second).Format(time.RFC3339)
		}
		out[c.Name] = fmt.Sprintf("restarts %d, started %s", s.RestartCount, started)
	}
	return out
}

// checkUpdate: a new label reaches the provider through UpdatePod, and
// does not restart the pod's containers.
func (k *kit) checkUpdate() error {
	ctx, cancel := context.WithTimeout(k.ctx, requestTimeout)
	defer cancel()
	before, err := k.prov.GetPod(ctx, k.ns, podUpdate)
	if err != nil {
		return fmt.Errorf("pod %s: the provider's GetPod: %w", podUpdate, err)
	}
	beforeStarts := starts(before)
	value := randomSuffix()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, updatedLabel, value)
	if _, err := k.client.CoreV1().Pods(k.ns).Patch(ctx, podUpdate, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("add label %s to pod %s: %w", updatedLabel, podUpdate, err)
	}
	var after *corev1.Pod
	seen, ok := k.until(k.c.Timeout, func(ctx context.Context) (bool, string) {
		o := k.observe(ctx, podUpdate)
		if !o.inProvider() {
			return false, o.String()
		}
		after = o.prov
		return o.prov.Labels[updatedLabel] == value, fmt.Sprintf("labels %v", o.prov.Labels)
	})
	if !ok {
		return fmt.Errorf("label %s=%s added to pod %s in the API: the provider's GetPod shows %s after %s. UpdatePod must apply "+
			"the pod's mutable fields (labels and annotations among them), and GetPod return them; else the agent calls UpdatePod on every sync",
			updatedLabel, value, podUpdate, seen, k.c.Timeout)
	}
	if afterStarts := starts(after); !mapsEqual(beforeStarts, afterStarts) {
		return fmt.Errorf("pod %s: a new label restarted its containers: before %v, after %v; UpdatePod must not restart containers for a change of labels",
			podUpdate, beforeStarts, afterStarts)
	}
	if seen, ok := k.waitRunning(podUpdate); !ok {
		return fmt.Errorf("pod %s no longer runs after a new label: %s", podUpdate, seen)
	}
	return nil
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for key, v := range a {
		if w, ok := b[key]; !ok || w != v {
			return false
		}
	}
	return true
}

// checkDelete: a pod deleted with a grace period leaves the API within it
// and Config.Slack, and the provider.
func (k *kit) checkDelete() error {
	grace := int64(k.c.Grace / time.Second)
	start := time.Now()
	if err := k.deletePod(podGrace, grace); err != nil {
		return err
	}
	limit := k.c.Grace + k.c.Slack
	var last observation
	_, ok := k.until(limit, func(ctx context.Context) (bool, string) {
		last = k.observe(ctx, podGrace)
		return last.goneFromAPI(), last.String()
	})
	if !ok {
		why := "the provider's GetPod still returns it (" + last.provView() + "): a deleted pod must stop within its grace period, " +
			"and the provider must then report it gone (GetPod returns provider.ErrNotFound; a PodNotifier notifies the final pod)"
		if last.goneFromProvider() {
			why = "the provider reports it gone, yet the agent did not finish its deletion (" + last.apiView() + ")"
		}
		return fmt.Errorf("pod %s deleted with grace %s: still in the API after %s; %s", podGrace, k.c.Grace, limit, why)
	}
	took := time.Since(start)
	if seen, ok := k.until(k.c.Slack, func(ctx context.Context) (bool, string) {
		o := k.observe(ctx, podGrace)
		return o.goneFromProvider(), o.String()
	}); !ok {
		return fmt.Errorf("pod %s deleted with grace %s left the API, yet the provider still knows it after %s more: %s. "+
			"GetPod must return provider.ErrNotFound once the pod has terminated", podGrace, k.c.Grace, k.c.Slack, seen)
	}
	k.r.Logf("delete: pod %s with grace %s left the API %s after its delete", podGrace, k.c.Grace, took.Round(100*time.Millisecond))
	return nil
}

// checkForceDelete: a pod deleted with grace 0 is gone from the API at
// once; the agent stops it in the provider.
func (k *kit) checkForceDelete() error {
	if err := k.deletePod(podForce, 0); err != nil {
		return err
	}
	if seen, ok := k.until(k.c.Slack, func(ctx context.Context) (bool, string) {
		o := k.observe(ctx, podForce)
		return o.goneFromAPI(), o.String()
	}); !ok {
		return fmt.Errorf("pod %s deleted with grace 0 is still in the API after %s: %s", podForce, k.c.Slack, seen)
	}
	if seen, ok := k.until(k.c.Slack, func(ctx context.Context) (bool, string) {
		o := k.observe(ctx, podForce)
		return o.goneFromProvider(), o.String()
	}); !ok {
		return fmt.Errorf("pod %s deleted with grace 0 (gone from the API at once): the provider's GetPod still returns it after %s: %s. "+
			"The agent stops a pod gone from the API with DeletePod (grace 0), and the provider must then report it gone (provider.ErrNotFound)",
			podForce, k.c.Slack, seen)
	}
	return nil
}

// checkRestart stops the agent; while it is down, deletes pod dangling
// and binds the lost pods; starts a new agent with a new provider; then
// checks that pod keep runs on (not restarted, with KeepsPods).
func (k *kit) checkRestart() error {
	ctx, cancel := context.WithTimeout(k.ctx, requestTimeout)
	defer cancel()
	before, err := k.prov.GetPod(ctx, k.ns, podKeep)
	if err != nil {
		return fmt.Errorf("pod %s before the restart: the provider's GetPod: %w", podKeep, err)
	}
	beforeStarts, beforeIP := starts(before), before.Status.PodIP
	if err := k.stop(); err != nil {
		k.halted = true
		return fmt.Errorf("stop the agent: %w", err)
	}
	if err := k.whileDown(); err != nil {
		k.halted = true
		return fmt.Errorf("while the agent was down: %w", err)
	}
	if err := k.start(); err != nil {
		k.halted = true
		return fmt.Errorf("start a new agent with a new provider: %w", err)
	}
	start := time.Now()
	var after *corev1.Pod
	seen, ok := k.until(k.c.Timeout, func(ctx context.Context) (bool, string) {
		o := k.observe(ctx, podKeep)
		if o.runningAsReported() {
			after = o.prov
			return true, ""
		}
		msg := o.String()
		if h := o.hint(); h != "" {
			msg += " (" + h + ")"
		}
		return false, msg
	})
	if !ok {
		return fmt.Errorf("pod %s does not run after the agent restarted with a new provider, within %s: %s. A provider keeps its pods "+
			"(PodRestorer, or finding them again itself), or the agent creates them again", podKeep, k.c.Timeout, seen)
	}
	afterStarts := starts(after)
	if !k.c.KeepsPods {
		k.r.Logf("restart: pod %s runs again %s after the new agent started: %v (before: %v)",
			podKeep, time.Since(start).Round(100*time.Millisecond), afterStarts, beforeStarts)
		return nil
	}
	if !mapsEqual(beforeStarts, afterStarts) || after.Status.PodIP != beforeIP {
		return fmt.Errorf("pod %s was restarted by the agent's restart: before %v, pod IP %q; after %v, pod IP %q. With KeepsPods the provider "+
			"keeps its pods across an agent restart without restarting their containers", podKeep, beforeStarts, beforeIP, afterStarts, after.Status.PodIP)
	}
	k.r.Logf("restart: pod %s kept (%v) and reported %s after the new agent started",
		podKeep, afterStarts, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// whileDown deletes pod dangling from the API at once, and binds to the
// node a pod never started (lost-new) and two that the API says were
// running (lost-never, lost-always), which no provider ran.
func (k *kit) whileDown() error {
	if err := k.deletePod(podDangling, 0); err != nil {
		return err
	}
	created, err := k.createPods(k.newPod(podLostNew, corev1.RestartPolicyAlways),
		k.newPod(podLostNever, corev1.RestartPolicyNever), k.newPod(podLostAlways, corev1.RestartPolicyAlways))
	if err != nil {
		return err
	}
	started := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	for _, p := range created[1:] {
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &started
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, Ready: true, Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			})
		}
		ctx, cancel := context.WithTimeout(k.ctx, requestTimeout)
		_, err := k.client.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		cancel()
		if err != nil {
			return fmt.Errorf("report pod %s running: %w", p.Name, err)
		}
	}
	return nil
}

// checkDangling: the pod deleted from the API while the agent was down is
// stopped in the provider.
func (k *kit) checkDangling() error {
	if k.agent == nil {
		return errors.New("not checked: no agent runs")
	}
	if seen, ok := k.until(k.c.Grace+k.c.Slack, func(ctx context.Context) (bool, string) {
		o := k.observe(ctx, podDangling)
		return o.goneFromProvider(), o.String()
	}); !ok {
		return fmt.Errorf("pod %s, deleted from the API while the agent was down: the new provider still runs it %s after the agent started: %s. "+
			"At start-up the agent stops (DeletePod, grace 0) every pod the provider runs that the API does not know, "+
			"and the provider must then report it gone (provider.ErrNotFound)", podDangling, k.c.Grace+k.c.Slack, seen)
	}
	return nil
}

// checkLost: the pods bound while the agent was down are created, restored
// or failed as the agent promises.
func (k *kit) checkLost() error {
	if k.agent == nil {
		return errors.New("not checked: no agent runs")
	}
	var errs []error
	if seen, ok := k.waitRunning(podLostNew); !ok {
		errs = append(errs, fmt.Errorf("pod %s, bound to the node while the agent was down and never started, does not run within %s: %s. "+
			"The agent creates it once it starts", podLostNew, k.c.Timeout, seen))
	}
	if _, ok := k.prov.(provider.PodRestorer); ok {
		for _, name := range []string{podLostNever, podLostAlways} {
			if seen, ok := k.until(k.c.Timeout, func(ctx context.Context) (bool, string) {
				o := k.observe(ctx, name)
				return o.inProvider() && o.inAPI() && o.api.Status.Phase == corev1.PodRunning && o.prov.Status.Phase == corev1.PodRunning, o.String()
			}); !ok {
				errs = append(errs, fmt.Errorf("pod %s, running by the API's account, unknown to the provider: the provider is a PodRestorer, so "+
					"the agent calls RestorePod and the pod must run on, in the provider and the API, within %s: %s", name, k.c.Timeout, seen))
			}
		}
		if len(errs) == 0 {
			k.r.Logf("lost: pod %s created; %s and %s restored (PodRestorer)", podLostNew, podLostNever, podLostAlways)
		}
		return errors.Join(errs...)
	}
	if seen, ok := k.until(k.c.Timeout, func(ctx context.Context) (bool, string) {
		o := k.observe(ctx, podLostNever)
		return o.inAPI() && o.api.Status.Phase == corev1.PodFailed && o.api.Status.Reason == "PodLost", o.String()
	}); !ok {
		errs = append(errs, fmt.Errorf("pod %s (restartPolicy Never), running by the API's account, unknown to the provider, which is no "+
			"PodRestorer: the agent must fail it with reason PodLost within %s: %s", podLostNever, k.c.Timeout, seen))
	}
	if seen, ok := k.waitRunning(podLostAlways); !ok {
		errs = append(errs, fmt.Errorf("pod %s (restartPolicy Always), running by the API's account, unknown to the provider, which is no "+
			"PodRestorer: the agent must create it again, and it must run within %s: %s", podLostAlways, k.c.Timeout, seen))
	}
	if len(errs) == 0 {
		k.r.Logf("lost: pod %s created; %s failed (PodLost); %s created again", podLostNew, podLostNever, podLostAlways)
	}
	return errors.Join(errs...)
}

// cleanup deletes every pod of the kit (through the agent, when it runs,
// so that the provider stops them), stops the agent, and deletes the
// namespace, the Node and its Lease.
func (k *kit) cleanup() error {
	var errs []error
	ran := k.agent != nil
	if ran {
		if err := k.deleteAll(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := k.stop(); err != nil {
		errs = append(errs, fmt.Errorf("stop the agent: %w", err))
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.ctx), requestTimeout)
	defer cancel()
	if !ran {
		// No agent could stop them: they leave the API at least.
		zero := int64(0)
		err := k.client.CoreV1().Pods(k.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete the pods of namespace %s: %w", k.ns, err))
		}
	}
	type deletion struct {
		what string
		del  func() error
	}
	deletions := []deletion{
		{"namespace " + k.ns, func() error { return k.client.CoreV1().Namespaces().Delete(ctx, k.ns, metav1.DeleteOptions{}) }},
	}
	if k.ownsNode {
		deletions = append(deletions,
			deletion{"node " + k.node, func() error { return k.client.CoreV1().Nodes().Delete(ctx, k.node, metav1.DeleteOptions{}) }},
			deletion{"lease " + k.node, func() error {
				return k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, k.node, metav1.DeleteOptions{})
			}})
	}
	for _, d := range deletions {
		if err := d.del(); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s: %w", d.what, err))
		}
	}
	if k.rootDir != "" && k.agent == nil {
		if err := os.RemoveAll(k.rootDir); err != nil {
			errs = append(errs, fmt.Errorf("remove the agent's root dir: %w", err))
		}
	}
	return errors.Join(errs...)
}

// deleteAll deletes the kit's pods with Config.Grace while the agent runs,
// waits until they have left the API and the provider, and deletes those
// left with grace 0.
func (k *kit) deleteAll() error {
	ctx, cancel := context.WithTimeout(k.ctx, requestTimeout)
	list, err := k.client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	cancel()
	if err != nil {
		return fmt.Errorf("list the pods of namespace %s: %w", k.ns, err)
	}
	var errs []error
	for _, p := range list.Items {
		if err := k.deletePod(p.Name, int64(k.c.Grace/time.Second)); err != nil {
			errs = append(errs, err)
		}
	}
	limit := k.c.Grace + k.c.Slack
	if seen, ok := k.until(limit, func(ctx context.Context) (bool, string) {
		list, err := k.client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "error: " + err.Error()
		}
		var left []string
		for _, p := range list.Items {
			left = append(left, k.observe(ctx, p.Name).String())
		}
		return len(left) == 0, strings.Join(left, "\n  ")
	}); !ok {
		errs = append(errs, fmt.Errorf("pods deleted with grace %s still in the API after %s (deleted now with grace 0):\n  %s", k.c.Grace, limit, seen))
		for _, p := range list.Items {
			if err := k.deletePod(p.Name, 0); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if k.prov == nil {
		return errors.Join(errs...)
	}
	if seen, ok := k.until(k.c.Slack, func(ctx context.Context) (bool, string) {
		pods, err := k.prov.GetPods(ctx)
		if err != nil {
			return false, "GetPods: " + err.Error()
		}
		var left []string
		for _, p := range pods {
			if p.Namespace == k.ns {
				left = append(left, p.Name+": "+describe(p))
			}
		}
		slices.Sort(left)
		return len(left) == 0, strings.Join(left, "\n  ")
	}); !ok {
		errs = append(errs, fmt.Errorf("the provider still runs pods gone from the API, %s later (its GetPods):\n  %s", k.c.Slack, seen))
	}
	return errors.Join(errs...)
}
