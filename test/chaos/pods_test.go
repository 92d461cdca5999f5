package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/test/fault"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// bound is a pod of one container bound to node, as the scheduler would.
func bound(ns, name, node string, c corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"chaos": "true"}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			Containers:                    []corev1.Container{c},
			TerminationGracePeriodSeconds: ptr.To[int64](2),
		},
	}
}

// simPod is a pod for a sim node.
func simPod(ns, name, node string) *corev1.Pod {
	return bound(ns, name, node, corev1.Container{Name: "main", Image: "registry.k8s.io/pause:3.10.2"})
}

// token tells a process pod's processes apart on the host (pgrep -f, whose
// pattern is a regular expression): the final "_" keeps p-3's from matching
// p-30's.
func token(ns, name string) string { return "chaos-token-" + ns + "-" + name + "_" }

// processPod is a process-provider pod whose shell appends a line to
// out/<name> each time it starts and then runs until stopped, with its
// token on its command line.
func processPod(ns, name, node, out string) *corev1.Pod {
	p := bound(ns, name, node, corev1.Container{
		Name:         "main",
		Image:        "nodelet.io/none",
		Command:      []string{"sh", "-c", `echo start >> /out/"$1"; while true; do sleep 1; done`, token(ns, name), name},
		VolumeMounts: []corev1.VolumeMount{{Name: "out", MountPath: "/out"}},
	})
	p.Spec.Volumes = []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: out}}}}
	return p
}

// criPod runs busybox's sleep in a container.
func criPod(ns, name, node string) *corev1.Pod {
	return bound(ns, name, node, corev1.Container{Name: "main", Image: "busybox", Command: []string{"sleep", "86400"}})
}

func create(t *testing.T, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}
}

// running lists the pods of ns by name, and says how many are Running
// with every container ready.
func running(ns string) (map[string]*corev1.Pod, int, error) {
	list, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, 0, err
	}
	byName := map[string]*corev1.Pod{}
	n := 0
	for i := range list.Items {
		p := &list.Items[i]
		byName[p.Name] = p
		if isRunning(p) {
			n++
		}
	}
	return byName, n, nil
}

func isRunning(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) > 0
}

// waitRunning waits until every pod named runs.
func waitRunning(t *testing.T, ns string, timeout time.Duration, names ...string) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%d pods Running", len(names)), func() (bool, string) {
		pods, _, err := running(ns)
		if err != nil {
			return false, err.Error()
		}
		var waiting []string
		for _, n := range names {
			switch p := pods[n]; {
			case p == nil:
				waiting = append(waiting, n+" (not in the API)")
			case !isRunning(p):
				waiting = append(waiting, fmt.Sprintf("%s (%s: %s)", n, p.Status.Phase, fault.StateSummary(p)))
			}
		}
		return len(waiting) == 0, fmt.Sprintf("not running: %v", head(waiting, 5))
	})
}

// waitGone waits until none of the pods named is in the API.
func waitGone(t *testing.T, ns string, timeout time.Duration, names ...string) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%d pods gone", len(names)), func() (bool, string) {
		pods, _, err := running(ns)
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, n := range names {
			if pods[n] != nil {
				left = append(left, n)
			}
		}
		return len(left) == 0, fmt.Sprintf("still there: %v", head(left, 5))
	})
}

// remove deletes pods as a user would, telling the observer first.
func remove(t *testing.T, o interface{ Deleting(ns, name string) }, ns string, names ...string) {
	t.Helper()
	for _, n := range names {
		o.Deleting(ns, n)
		if err := client.CoreV1().Pods(ns).Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete pod %s: %v", n, err)
		}
	}
}

// containerIDs maps each pod to its first container's ID.
func containerIDs(pods map[string]*corev1.Pod, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		if p := pods[n]; p != nil && len(p.Status.ContainerStatuses) > 0 {
			out[n] = p.Status.ContainerStatuses[0].ContainerID
		}
	}
	return out
}

// startTimes maps each pod to when its first container started running
// ("" if it does not run): a sim container's ID is its pod's, and its start
// time is what tells a container set up anew.
func startTimes(pods map[string]*corev1.Pod, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		out[n] = ""
		if p := pods[n]; p != nil && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil {
			out[n] = p.Status.ContainerStatuses[0].State.Running.StartedAt.UTC().Format(time.RFC3339)
		}
	}
	return out
}

// countIn counts the elements of s that are in of.
func countIn(s, of []string) int {
	n := 0
	for _, x := range s {
		if slices.Contains(of, x) {
			n++
		}
	}
	return n
}

// hostPIDs are the host PIDs of the processes whose command line has tok.
func hostPIDs(tok string) []string {
	out, _ := exec.Command("pgrep", "-f", "--", tok).Output()
	return strings.Fields(string(out))
}

// starts counts the lines a process pod wrote to out/<name>: its starts.
// A pod is Running once its process started, which may be before the
// process has written its line: starts waits up to startWriteGrace for
// the first line.
func starts(t *testing.T, out, name string) int {
	t.Helper()
	deadline := time.Now().Add(startWriteGrace)
	for {
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if n := strings.Count(string(data), "start\n"); n > 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startWriteGrace bounds how long a started pod's process may take to
// write its line.
const startWriteGrace = 30 * time.Second

// podNames is prefix-0 … prefix-(n-1).
func podNames(prefix string, from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, from+i)
	}
	return out
}
