package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodelet/nodelet/test/conformance"
)

func TestSummary(t *testing.T) {
	r := report{Provider: "cri", Commit: "abc", Summary: conformance.Summary{Results: []conformance.Result{
		{Name: "[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]", Status: "passed"},
		{Name: "[It] [sig-apps] Deployment should roll [Conformance]", Status: "failed"},
		{Name: "[It] [sig-apps] Deployment should scale [Serial] [Conformance]", Status: "skipped"},
		{Name: "[It] [sig-node] Probing container should probe [NodeConformance]", Status: "passed"},
		{Name: "[It] [sig-storage] CSI mock volume does things", Status: "skipped"},
	}}, Agents: []usage{{Node: "n1", PeakRSS: 150 << 20, CPU: 90 * time.Second}}}
	got := summary([]report{r})
	for _, want := range []string{
		"cri agents over the suite: n1 peak RSS 150 MiB, CPU 1m30s.",
		"| cri | 1 / 1 / 1 of 3 | 2 / 1 / 1 of 4 |",
		"| [sig-apps] Deployment | 0 / 1 / 1 of 2 |",
		"| [sig-node] Pods | 1 / 0 / 0 of 1 |",
		"- [It] [sig-apps] Deployment should roll [Conformance]",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "CSI mock") {
		t.Errorf("summary counts a spec outside the selection:\n%s", got)
	}
}

// TestSummaryOfTheNodeSuite checks that a node suite's selection is its
// [NodeConformance] specs, the skipped ones counted.
func TestSummaryOfTheNodeSuite(t *testing.T) {
	r := report{Suite: suiteNode, Provider: "cri", Summary: conformance.Summary{Results: []conformance.Result{
		{Name: "[It] [sig-node] Summary API [NodeConformance] should report resource usage", Status: "passed"},
		{Name: "[It] [sig-node] Kubelet Endpoints [NodeConformance] [Serial] should return /configz", Status: "skipped"},
		{Name: "[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]", Status: "failed"},
		{Name: "[It] [sig-node] Swap should use swap", Status: "skipped"},
	}}}
	got := summary([]report{r})
	for _, want := range []string{
		"e2e_node.test --conformance",
		"| cri | 0 / 1 / 0 of 1 | 1 / 1 / 1 of 3 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}

// TestListLeftCountsWhatItCannotList checks that the leak check never
// passes when it could not look: what it could not list is left behind.
func TestListLeftCountsWhatItCannotList(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}})
	client.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	c := &cluster{client: client, nodes: []*node{{name: nodeName, rootDir: t.TempDir()}}}
	left := c.listLeft(context.Background())
	if len(left) != 2 || !strings.HasPrefix(left[0], "namespaces unknown") || !strings.HasPrefix(left[1], "pods unknown") {
		t.Errorf("left %q, want the namespaces and pods unknown", left)
	}
}
