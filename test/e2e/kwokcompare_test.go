package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kwokBinary is the kwok release the comparison runs (make test builds it
// from the module proxy: bin/kwok-$(KWOK_VERSION)), the version whose
// published stages pkg/stage/testdata/kwok holds.
const kwokBinary = "bin/kwok-v0.8.0"

// stagedPods is a namespace's two pods on node as a kwok user writes them:
// one with an init container, and a Job whose pod runs there.
func stagedPods(ns, node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web, namespace: %[1]s}
spec:
  nodeName: %[2]s
  tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
  initContainers: [{name: setup, image: fake-image}]
  containers: [{name: web, image: fake-image}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: once, namespace: %[1]s}
spec:
  backoffLimit: 0
  template:
    spec:
      nodeName: %[2]s
      restartPolicy: Never
      tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
      containers: [{name: once, image: fake-image}]
`, ns, node)
}

// startKwok runs kwok, managing the Nodes of fleet (kwok's annotation and
// e2e/takeover=fleet) with the stage files given, until the test ends.
func startKwok(t *testing.T, fleet string, stageFiles []string) {
	t.Helper()
	args := []string{"--kubeconfig", kubeconfig,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake,e2e/takeover=" + fleet,
		"--node-lease-duration-seconds=10", "--cidr=10.251.0.0/16", "--node-ip=127.0.0.1"}
	for _, f := range stageFiles {
		args = append(args, "--config", f)
	}
	runUntilCleanup(t, "kwok", exec.Command(filepath.Join(root, kwokBinary), args...))
}

// playedStatus is what of a pod's status stages decide, times, IPs and
// IDs aside: the phase, the conditions, and each container's state.
func playedStatus(pod *corev1.Pod) []string {
	out := []string{"phase " + string(pod.Status.Phase)}
	if pod.Status.PodIP != "" {
		out = append(out, "has a pod IP")
	}
	if pod.Status.HostIP != "" {
		out = append(out, "has a host IP")
	}
	if pod.Status.StartTime != nil {
		out = append(out, "has a start time")
	}
	for _, c := range pod.Status.Conditions {
		out = append(out, fmt.Sprintf("condition %s=%s %s", c.Type, c.Status, c.Reason))
	}
	states := func(kind string, list []corev1.ContainerStatus) {
		for _, c := range list {
			s := fmt.Sprintf("%s %s ready=%v restarts=%d", kind, c.Name, c.Ready, c.RestartCount)
			switch st := c.State; {
			case st.Waiting != nil:
				s += " waiting " + st.Waiting.Reason
			case st.Running != nil:
				s += " running"
			case st.Terminated != nil:
				s += fmt.Sprintf(" terminated %s %d", st.Terminated.Reason, st.Terminated.ExitCode)
			}
			if c.Started != nil {
				s += fmt.Sprintf(" started=%v", *c.Started)
			}
			out = append(out, s)
		}
	}
	states("init container", pod.Status.InitContainerStatuses)
	states("container", pod.Status.ContainerStatuses)
	slices.Sort(out)
	return out
}

// asKubeletSays is what kwok's stages decided of a pod, with the one
// difference nodelet makes on purpose (docs/kwok.md): kwok's pod-complete
// leaves a finished pod Ready, and nodelet's pod controller reports it not
// ready because it completed, as the kubelet does.
func asKubeletSays(played []string) []string {
	if !slices.Contains(played, "phase Succeeded") {
		return played
	}
	out := slices.Clone(played)
	for i, s := range out {
		switch s {
		case "condition ContainersReady=True ", "condition Ready=True ":
			out[i] = strings.Replace(s, "=True ", "=False PodCompleted", 1)
		}
	}
	slices.Sort(out)
	return out
}

// TestKwokAndNodeletPlayTheSameStages is issue 28's "lifecycle as data"
// on the real control plane, with kwok as the judge: kwok and nodelet
// each take over a Node applied with kwok's annotation, both with kwok's
// own general pod stages, its node-initialize and its node-not-ready, and
// run the same pods (one with an init container, a Job's pod). Under
// both, the pod is Ready once its init container completed and the Job
// completes, and what the stages decide of each pod's status (phase,
// conditions, container states; times, IPs and IDs aside) is the same;
// a deleted pod is gone; the chaos label makes the Node NotReady with the
// reason its annotation names, and taking it off makes it Ready again.
// The times each took are logged, not compared.
func TestKwokAndNodeletPlayTheSameStages(t *testing.T) {
	dir, err := filepath.Abs("../../pkg/stage/testdata/kwok")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range []string{"pod-create", "pod-init-container-running", "pod-init-container-completed", "pod-ready", "pod-complete", "pod-delete"} {
		files = append(files, filepath.Join(dir, "pod", "general", f+".yaml"))
	}
	files = append(files, filepath.Join(dir, "node", "fast", "node-initialize.yaml"), filepath.Join(dir, "node", "chaos", "node-not-ready.yaml"))

	fleet := uniqueName(t)
	agents := map[string]string{"kwok": fleet + "-k", "nodelet": fleet + "-n"}
	for _, f := range agents {
		cleanupFleet(t, f, 1)
		kubectl(t, "apply", "-f", writeFile(t, f+".yaml", kwokNodes(f, 0, 1)))
	}
	startKwok(t, agents["kwok"], files)
	startTakeover(t, agents["nodelet"], "--sim-stages", strings.Join(files, ","))
	ctx := context.Background()
	for agent, f := range agents {
		eventually(t, 60*time.Second, agent+"'s Node Ready", func() (bool, string) {
			_, ready := fleetNodes(t, f)
			return ready == 1, fmt.Sprintf("%d Ready", ready)
		})
	}

	namespaces := map[string]string{}
	created := map[string]time.Time{}
	for agent, f := range agents {
		ns := newNamespace(t)
		namespaces[agent] = ns
		created[agent] = time.Now()
		kubectl(t, "apply", "-f", writeFile(t, agent+"-pods.yaml", stagedPods(ns, f+"-0")))
	}
	for agent, ns := range namespaces {
		eventually(t, 90*time.Second, agent+"'s pod Ready after its init container and its Job complete", func() (bool, string) {
			pod, err := client.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			job := kubectl(t, "get", "-n", ns, "job/once", "-o", `jsonpath={.status.conditions[?(@.type=="Complete")].status}`)
			ready := slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			})
			inits := pod.Status.InitContainerStatuses
			initDone := len(inits) == 1 && inits[0].State.Terminated != nil && inits[0].State.Terminated.Reason == "Completed"
			return ready && initDone && pod.Status.PodIP != "" && job == "True",
				fmt.Sprintf("pod %s Ready %v, init containers %+v, IP %q, Job complete %q", pod.Status.Phase, ready, inits, pod.Status.PodIP, job)
		})
		t.Logf("%s: the pod Ready and the Job complete %s after they were applied", agent, time.Since(created[agent]).Round(100*time.Millisecond))
	}

	jobPod := func(ns string) *corev1.Pod {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=once"})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("the Job's pod in %s: %v (%d)", ns, err, len(pods.Items))
		}
		return &pods.Items[0]
	}
	compare := func(what string, kwok, nodelet []string) {
		if !slices.Equal(kwok, nodelet) {
			t.Errorf("%s differs:\nkwok:    %q\nnodelet: %q", what, kwok, nodelet)
		}
	}
	compare("the pod's status",
		playedStatus(getPod(t, namespaces["kwok"], "web")), playedStatus(getPod(t, namespaces["nodelet"], "web")))
	compare("the Job pod's status", asKubeletSays(playedStatus(jobPod(namespaces["kwok"]))), playedStatus(jobPod(namespaces["nodelet"])))
	nodeConditions := func(f string) []string {
		node, err := client.CoreV1().Nodes().Get(ctx, f+"-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := []string{"phase " + string(node.Status.Phase)}
		for _, c := range node.Status.Conditions {
			out = append(out, fmt.Sprintf("%s=%s", c.Type, c.Status))
		}
		slices.Sort(out)
		return out
	}
	compare("the Node's conditions", nodeConditions(agents["kwok"]), nodeConditions(agents["nodelet"]))

	for agent, ns := range namespaces {
		start := time.Now()
		kubectl(t, "delete", "-n", ns, "pod", "web", "--wait=false")
		eventually(t, 60*time.Second, agent+"'s deleted pod gone", func() (bool, string) {
			pod, err := client.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			return false, fmt.Sprintf("phase %s, deletion at %v", pod.Status.Phase, pod.DeletionTimestamp)
		})
		t.Logf("%s: the deleted pod gone %s after the delete", agent, time.Since(start).Round(100*time.Millisecond))
	}

	// kwok's chaos stage for Nodes, as its users trigger it.
	for _, f := range agents {
		kubectl(t, "annotate", "node", f+"-0", "node-not-ready.stage.kwok.x-k8s.io/reason=Maintenance")
		kubectl(t, "label", "node", f+"-0", "node-not-ready.stage.kwok.x-k8s.io=true")
	}
	readyReason := func(f string) string {
		return kubectl(t, "get", "node", f+"-0", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}`)
	}
	for agent, f := range agents {
		kubectl(t, "wait", "node/"+f+"-0", "--for=condition=Ready=false", "--timeout=60s")
		if got := readyReason(f); got != "False Maintenance" {
			t.Errorf("%s's labelled Node: Ready %q, want False for the annotation's reason Maintenance", agent, got)
		}
	}
	for _, f := range agents {
		kubectl(t, "label", "node", f+"-0", "node-not-ready.stage.kwok.x-k8s.io-")
	}
	for _, f := range agents {
		kubectl(t, "wait", "node/"+f+"-0", "--for=condition=Ready=true", "--timeout=60s")
	}
}
