package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/config/checkpoint"
)

// Remote configuration: a ConfigMap named by the Node's annotation,
// checkpointed, tried, rolled back, and reported as the ConfigOK condition.

const (
	configHeader     = "apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\n"
	sourceAnnotation = "config.nodelet.io/source"
)

// putConfig creates or updates the ConfigMap ns/name holding a nodelet
// config under the key "nodelet", and returns its uid and resourceVersion.
func putConfig(t *testing.T, ns, name, content string) (uid, resourceVersion string) {
	t.Helper()
	ctx := context.Background()
	cms := client.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"nodelet": content}}
		if cm, err = cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	} else {
		cm.Data = map[string]string{"nodelet": content}
		if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return string(cm.UID), cm.ResourceVersion
}

// assignConfig points the node's config source annotation at ns/name, or
// removes it when name is empty.
func assignConfig(t *testing.T, node, ns, name string) {
	t.Helper()
	if name == "" {
		kubectl(t, "annotate", "node", node, sourceAnnotation+"-")
		return
	}
	// Nodes that run with their own identity read remote configs through
	// a Role bound to them in the config's namespace, as docs/operations.md says
	// (the Node authorizer knows no pod that uses the ConfigMap); its own
	// name, so that deploy/rbac.yaml's nodelet-config is left as it is.
	apply(t, ns, `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: e2e-node-config-reader
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: e2e-node-config-reader
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: e2e-node-config-reader
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:nodes
`)
	kubectl(t, "annotate", "node", node, "--overwrite", sourceAnnotation+"="+ns+"/"+name)
}

// waitConfigOK waits until the node's ConfigOK condition has status, a
// reason starting with reason and a message holding every one of message.
func waitConfigOK(t *testing.T, node string, timeout time.Duration, status corev1.ConditionStatus, reason string, message ...string) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("ConfigOK %s %q", status, reason), func() (bool, string) {
		c, err := nodeCondition(node, "ConfigOK")
		switch {
		case err != nil:
			return false, err.Error()
		case c == nil:
			return false, "no ConfigOK condition"
		}
		seen := fmt.Sprintf("%s reason %q message %q", c.Status, c.Reason, c.Message)
		if c.Status != status || !strings.HasPrefix(c.Reason, reason) {
			return false, seen
		}
		for _, m := range message {
			if !strings.Contains(c.Message, m) {
				return false, seen
			}
		}
		return true, seen
	})
}

// configMapName is how ConfigOK names a config source.
func configMapName(ns, name, uid, rv string) string {
	return fmt.Sprintf("ConfigMap %s/%s (uid %s, resourceVersion %s)", ns, name, uid, rv)
}

// nodeEvents lists the reasons and messages of the Events about node.
func nodeEvents(node string) string {
	out, _ := kubectlErr("get", "events", "-n", "default", "--field-selector", "involvedObject.kind=Node,involvedObject.name="+node,
		"-o", `jsonpath={range .items[*]}{.type} {.reason}: {.message}{"\n"}{end}`)
	return out
}

// deleteNodeEvents removes the Events about node when the test ends.
func deleteNodeEvents(t *testing.T, node string) {
	t.Cleanup(func() {
		_, _ = kubectlErr("delete", "events", "-n", "default", "--field-selector", "involvedObject.kind=Node,involvedObject.name="+node)
	})
}

// startConfigNodelet runs a sim node with its own root directory, so that
// its checkpoints are its own.
func startConfigNodelet(t *testing.T, node string, extra ...string) (*agent, string) {
	t.Helper()
	rootDir := t.TempDir()
	a := startNodelet(t, node, append([]string{"--root-dir", rootDir}, extra...)...)
	deleteNodeEvents(t, node)
	waitReady(t, node, 30*time.Second)
	waitConfigOK(t, node, 30*time.Second, corev1.ConditionTrue, "when the config source is nil", "using current: local")
	return a, rootDir
}

func TestConfigRemoteAppliedWithoutRestartingPods(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	a := startProcessNodelet(t, node)
	deleteNodeEvents(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	pidOf, started := runSurvivor(t, ns, node)
	pid := pidOf()
	waitConfigOK(t, node, 30*time.Second, corev1.ConditionTrue, "when the config source is nil", "using current: local")

	content := configHeader + "nodeStatusReportFrequency: 1m\nnodeLabels:\n  e2e.nodelet.io/config: v1\n"
	uid, rv := putConfig(t, ns, "nodelet", content)
	assignConfig(t, node, ns, "nodelet")
	eventually(t, 30*time.Second, "the ConfigMap's label on the Node", func() (bool, string) {
		out, err := kubectlErr("get", "node", node, "-o", `jsonpath={.metadata.labels.e2e\.nodelet\.io/config}`)
		return err == nil && out == "v1", out
	})
	using := configMapName(ns, "nodelet", uid, rv)
	waitConfigOK(t, node, 30*time.Second, corev1.ConditionTrue, "passing all checks", "using current: "+using)

	if done, err := a.exited(); done {
		t.Fatalf("the agent exited instead of restarting in place: %v", err)
	}
	if !strings.Contains(a.logText(), "Restarting nodelet in place") {
		t.Errorf("the agent's log does not tell of a restart in place:\n%s", lastLines(a.logText(), 20))
	}
	if after := pidOf(); after != pid {
		t.Errorf("container process %s before the new config, %s after", pid, after)
	}
	out := kubectl(t, "get", "pod", "-n", ns, "survivor", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].state.running.startedAt}")
	if out != "Running 0 "+started {
		t.Errorf("after the new config: %q, want Running, restartCount 0, startedAt %s", out, started)
	}

	// The metric names the config in use, through the kubelet API.
	want := fmt.Sprintf(`nodelet_config_active_info{checksum="%s",resource_version="%s",source="%s/nodelet",uid="%s"} 1`,
		checkpoint.Checksum([]byte(content)), rv, ns, uid)
	eventually(t, 30*time.Second, "nodelet_config_active_info of the ConfigMap", func() (bool, string) {
		out, err := kubectlErr("get", "--raw", "/api/v1/nodes/"+node+"/proxy/metrics")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(out, want) && strings.Contains(out, "nodelet_config_ok 1"), grepLines(out, "nodelet_config")
	})
	eventually(t, 30*time.Second, "an Event for the change of config", func() (bool, string) {
		events := nodeEvents(node)
		return strings.Contains(events, "Normal ConfigChanged: using current: "+using), events
	})

	// Without the annotation, the local config again.
	assignConfig(t, node, ns, "")
	waitConfigOK(t, node, 30*time.Second, corev1.ConditionTrue, "when the config source is nil", "using current: local")
	if after := pidOf(); after != pid {
		t.Errorf("container process %s before the return to the local config, %s after", pid, after)
	}
	if done, err := a.exited(); done {
		t.Fatalf("the agent exited: %v", err)
	}

	// The sandbox, started before the restarts, is still reaped when it
	// ends: no zombie is left under the agent.
	deletePods(t, ns)
	eventually(t, 30*time.Second, "no zombie child of the agent", func() (bool, string) {
		z := zombieChildren(a.cmd.Process.Pid)
		return len(z) == 0, fmt.Sprintf("zombies %v", z)
	})
}

// zombieChildren lists the children of pid that exited and were not
// waited for.
func zombieChildren(pid int) []string {
	entries, _ := os.ReadDir("/proc")
	var zombies []string
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(pid) {
			zombies = append(zombies, e.Name())
		}
	}
	return zombies
}

// grepLines keeps the lines of s that hold sub.
func grepLines(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func TestConfigInvalidRollsBackAndRecovers(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	a, _ := startConfigNodelet(t, node)
	ns := newNamespace(t)

	uid, rv := putConfig(t, ns, "nodelet", configHeader+"nodeStatusReportFrequency: -1m\n")
	assignConfig(t, node, ns, "nodelet")
	bad := configMapName(ns, "nodelet", uid, rv)
	waitConfigOK(t, node, 30*time.Second, corev1.ConditionFalse, "failed to validate current: "+bad,
		"using last-known-good: local", "nodeStatusReportFrequency: Invalid value")
	eventually(t, 30*time.Second, "a Warning Event for the rollback", func() (bool, string) {
		events := nodeEvents(node)
		return strings.Contains(events, "Warning ConfigRolledBack: failed to validate current: "+bad), events
	})
	if done, err := a.exited(); done {
		t.Fatalf("the agent exited on an invalid remote config: %v", err)
	}
	waitReady(t, node, 10*time.Second)

	_, rv = putConfig(t, ns, "nodelet", configHeader+"nodeStatusReportFrequency: 1m\nnodeLabels:\n  e2e.nodelet.io/fixed: \"yes\"\n")
	waitConfigOK(t, node, 30*time.Second, corev1.ConditionTrue, "passing all checks", "using current: "+configMapName(ns, "nodelet", uid, rv))
	eventually(t, 30*time.Second, "the fixed config's label on the Node", func() (bool, string) {
		out, err := kubectlErr("get", "node", node, "-o", `jsonpath={.metadata.labels.e2e\.nodelet\.io/fixed}`)
		return err == nil && out == "yes", out
	})
}

func TestConfigCrashLoopRollsBack(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	a, _ := startConfigNodelet(t, node)
	ns := newNamespace(t)

	// The kubelet API port of the new config is taken: the agent fails at
	// every start with it.
	taken, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	uid, rv := putConfig(t, ns, "nodelet", configHeader+"enableServer: true\nport: "+strconv.Itoa(port)+"\n")
	assignConfig(t, node, ns, "nodelet")

	// Restart the agent whenever it exits, as systemd's Restart=always
	// would, until it stays up.
	failures := 0
	var logs []string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if done, err := a.exited(); done {
			if err == nil {
				t.Fatalf("the agent exited with status 0:\n%s", lastLines(a.logText(), 20))
			}
			failures++
			logs = append(logs, a.logText())
			if failures > 3 {
				t.Fatalf("the agent failed %d starts and was not rolled back:\n%s", failures, lastLines(a.logText(), 20))
			}
			a.start()
		}
		c, _ := nodeCondition(node, "ConfigOK")
		if failures == 3 && c != nil && strings.HasPrefix(c.Reason, "current failed trial period due to crash loop") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not rolled back within 2 minutes: %d failed starts, ConfigOK %+v", failures, c)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i, log := range logs {
		if !strings.Contains(log, "listen on") || !strings.Contains(log, strconv.Itoa(port)) {
			t.Errorf("failed start %d does not say the port was taken:\n%s", i+1, lastLines(log, 10))
		}
	}
	waitConfigOK(t, node, 30*time.Second, corev1.ConditionFalse,
		"current failed trial period due to crash loop: "+configMapName(ns, "nodelet", uid, rv),
		"using last-known-good: local", "3 starts in a row did not become healthy")
	waitReady(t, node, 30*time.Second)
	if done, err := a.exited(); done {
		t.Fatalf("the agent exited on the last-known-good config: %v\n%s", err, lastLines(a.logText(), 20))
	}
}

func TestConfigTrialPassedBecomesLastKnownGood(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	_, rootDir := startConfigNodelet(t, node)
	ns := newNamespace(t)

	uid, rv := putConfig(t, ns, "nodelet", configHeader+"configTrialDuration: 5s\n")
	assignConfig(t, node, ns, "nodelet")
	waitConfigOK(t, node, 30*time.Second, corev1.ConditionTrue, "passing all checks", "using current: "+configMapName(ns, "nodelet", uid, rv))

	store, err := checkpoint.Open(rootDir)
	if err != nil {
		t.Fatal(err)
	}
	want := checkpoint.Source{Namespace: ns, Name: "nodelet", UID: types.UID(uid), ResourceVersion: rv}
	eventually(t, 30*time.Second, "the assigned config is the last-known-good on disk", func() (bool, string) {
		rec, err := store.LastKnownGood()
		if err != nil {
			return false, err.Error()
		}
		return rec.Source != nil && *rec.Source == want, fmt.Sprintf("last-known-good %v", rec.Source)
	})
	if data, err := store.Load(want); err != nil || !strings.Contains(string(data), "configTrialDuration: 5s") {
		t.Errorf("checkpoint of the last-known-good = %q, %v", data, err)
	}
}

func TestConfigCorruptCheckpointNotUsed(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	a, rootDir := startConfigNodelet(t, node)
	ns := newNamespace(t)

	uid, rv := putConfig(t, ns, "nodelet", configHeader+"nodeStatusReportFrequency: 1m\n")
	assignConfig(t, node, ns, "nodelet")
	source := configMapName(ns, "nodelet", uid, rv)
	waitConfigOK(t, node, 30*time.Second, corev1.ConditionTrue, "passing all checks", "using current: "+source)

	// Altered on disk while the agent is down: the checksum no longer
	// matches.
	a.stop()
	path := filepath.Join(rootDir, "config", "checkpoints", uid, rv, checkpoint.DataFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), "1m", "2m", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	a.start()
	waitConfigOK(t, node, 30*time.Second, corev1.ConditionFalse, "failed to load current: "+source,
		"using last-known-good: local", path, "checksum")
	if log := a.logText(); !strings.Contains(log, "does not match the recorded") {
		t.Errorf("the agent's log does not tell of the checksum mismatch:\n%s", lastLines(log, 20))
	}
	waitReady(t, node, 30*time.Second)
}

func TestBadConfigNothingWritten(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		fields string
		want   string
	}{
		{"unknown field", "nodeStatusReportFrequencyy: 1m\n", `unknown field "nodeStatusReportFrequencyy"`},
		{"invalid value", "nodeStatusReportFrequency: -1m\n", "nodeStatusReportFrequency: Invalid value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rootDir := t.TempDir()
			path := writeFile(t, "bad.yaml", configHeader+"nodeName: node-1\nrootDir: "+rootDir+"\n"+tt.fields)
			stderr, err := runNodelet(t, "--kubeconfig", kubeconfig, "--config", path)
			if err == nil {
				t.Fatalf("nodelet --config %s exited 0", path)
			}
			for _, w := range []string{tt.want, path} {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not name %q", stderr, w)
				}
			}
			if entries, err := os.ReadDir(rootDir); err != nil || len(entries) != 0 {
				t.Errorf("the agent wrote %v under its root dir (%v) before refusing its config", entries, err)
			}
		})
	}
}
