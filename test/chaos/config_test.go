package chaos

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestConfigRollbackUnderFaults: a remote config that crashes the agent at
// every start (its kubelet API port is taken), with the API server killed
// after the first crash and started again in the middle of the trial. The
// agent, restarted after each exit as systemd would, must roll back to its
// last-known-good config and say why in ConfigOK; the pods it ran before
// run on, as they were: none lost, restarted or set up anew.
func TestConfigRollbackUnderFaults(t *testing.T) {
	r := begin(t, "crashing remote config, API server killed mid-trial")
	prefix := name("config")
	a := startAgent(t, prefix, agentOptions{provider: "sim"})
	waitReady(t, time.Minute, a)
	ns := newNamespace(t, "config")
	r.observe(ns, prefix, nil)
	pods := podNames("sim", 0, 10)
	for _, n := range pods {
		create(t, simPod(ns, n, prefix))
	}
	waitRunning(t, ns, time.Minute, pods...)
	before, _, err := running(ns)
	if err != nil {
		t.Fatal(err)
	}

	taken, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	cm, err := client.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "nodelet", Namespace: ns},
		Data: map[string]string{"nodelet": "apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nenableServer: true\nport: " +
			strconv.Itoa(port) + "\n"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, "", "annotate", "node", prefix, "--overwrite", "config.nodelet.io/source="+ns+"/nodelet")

	failures := 0
	apiDown := false
	deadline := time.Now().Add(3 * time.Minute)
	var why string
	for {
		if exited, err := a.Exited(); exited {
			if err == nil {
				t.Fatalf("the agent exited with status 0:\n%s", lastLines(a.LogText(), 20))
			}
			failures++
			if failures == 1 {
				// The trial's first crash: the API server goes away too.
				if err := cp.Stop("apiserver", true); err != nil {
					t.Fatal(err)
				}
				apiDown = true
			}
			if failures > 6 {
				t.Fatalf("the agent failed %d starts and was not rolled back:\n%s", failures, lastLines(a.LogText(), 20))
			}
			if err := a.Start(); err != nil {
				t.Fatal(err)
			}
		}
		if apiDown && failures >= 2 {
			if err := cp.Start("apiserver"); err != nil {
				t.Fatal(err)
			}
			apiDown = false
		}
		if !apiDown {
			n, err := client.CoreV1().Nodes().Get(context.Background(), prefix, metav1.GetOptions{})
			if err == nil {
				for _, c := range n.Status.Conditions {
					if c.Type == "ConfigOK" && strings.HasPrefix(c.Reason, "current failed trial period due to crash loop") {
						why = c.Reason + "; " + c.Message
					}
				}
			}
			if why != "" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not rolled back within 3 minutes: %d failed starts", failures)
		}
		time.Sleep(200 * time.Millisecond)
	}
	wantIn := []string{fmt.Sprintf("ConfigMap %s/nodelet (uid %s", ns, cm.UID), "using last-known-good: local"}
	for _, w := range wantIn {
		if !strings.Contains(why, w) {
			t.Errorf("ConfigOK %q does not say %q", why, w)
		}
	}
	waitReady(t, time.Minute, a)
	if exited, err := a.Exited(); exited {
		t.Fatalf("the agent exited on the last-known-good config: %v\n%s", err, lastLines(a.LogText(), 20))
	}
	// The pods are the ones it ran before, their containers started when
	// they were.
	waitRunning(t, ns, time.Minute, pods...)
	after, _, err := running(ns)
	if err != nil {
		t.Fatal(err)
	}
	if was, now := startTimes(before, pods...), startTimes(after, pods...); !maps.Equal(now, was) {
		t.Errorf("start times of the pods' containers changed:\nbefore %v\nafter  %v", was, now)
	}
	// The API server's outage may let the node controller mark the node
	// NotReady (its grace period is 20s), once.
	r.finish(limits{notReady: atMost(1)},
		fmt.Sprintf("%d sim pods; rolled back after %d failed starts: %q", len(pods), failures, why))
}
