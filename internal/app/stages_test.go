package app

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/provider"
)

// With sim.stages, the sim providers play kwok's stages: a pod of
// kwok's pod/fast set runs, and its deletion's stage ends it.
func TestSimProviderStages(t *testing.T) {
	cfg := config.Default()
	cfg.NodeName = "sim"
	cfg.Sim.Stages = []string{filepath.Join("..", "..", "pkg", "stage", "testdata", "kwok", "pod", "fast")}
	if errs := cfg.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	layout, err := newNodeLayout(cfg)
	if err != nil {
		t.Fatal(err)
	}
	newProvider := simProvider(cfg, layout, newSimStages(cfg), newSimRules(cfg))
	client := fake.NewClientset()
	p, err := newProvider(&agent.Env{Node: agent.NodeInfo{Name: "sim"}, Client: client,
		Admit: func(*corev1.Pod) error { return nil }, NodeConditions: func(*corev1.Node) {}, NotReady: func() string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"},
		Spec:       corev1.PodSpec{NodeName: "sim", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	got, err := p.GetPod(ctx, "ns", "p")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" {
		t.Errorf("phase %s, pod IP %q; want Running with an IP from pod-ready", got.Status.Phase, got.Status.PodIP)
	}
	var grace int64 = 30
	del := pod.DeepCopy()
	del.DeletionTimestamp, del.DeletionGracePeriodSeconds = &metav1.Time{Time: metav1.Now().Add(30e9)}, &grace
	if err := p.DeletePod(ctx, del); err != nil {
		t.Fatal(err)
	}
	if _, err := p.GetPod(ctx, "ns", "p"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("GetPod after pod-delete: %v, want not found", err)
	}
}

// With sim.enableCRDs [Stage], the providers play a live set, holding
// the files' stages from the start, and the agent gets the loop that
// keeps it to the cluster's.
func TestSimStagesLive(t *testing.T) {
	cfg := config.Default()
	cfg.NodeName = "sim"
	cfg.Sim.Stages = []string{filepath.Join("..", "..", "pkg", "stage", "testdata", "kwok", "pod", "fast")}
	cfg.Sim.EnableCRDs = []string{config.CRDStage}
	if errs := cfg.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	s := newSimStages(cfg)
	if s.loop() == nil {
		t.Fatal("no loop to watch the cluster's Stages")
	}
	src, err := s.source()
	if err != nil {
		t.Fatal(err)
	}
	if src != s.live || len(src.Stages()) != 3 {
		t.Errorf("source %T with %d stages, want the live set with pod/fast's 3", src, len(src.Stages()))
	}
	cfg.Sim.EnableCRDs = nil
	if s := newSimStages(cfg); s.loop() != nil || s.live != nil {
		t.Error("a live set and a loop without enableCRDs")
	}
}

// kwok's Logs and other rules in the stage files reach the sim
// providers; with sim.enableCRDs naming their kinds, the agent gets the
// loop that watches the cluster's.
func TestSimRules(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "app.log")
	if err := os.WriteFile(logs, []byte("2016-10-06T00:17:09.669794202Z stdout F hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "kwok.yaml")
	if err := os.WriteFile(rules, []byte("apiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterLogs\nmetadata: {name: all}\nspec:\n  logs: [{logsFile: "+logs+"}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.NodeName = "sim"
	cfg.Sim.Stages = []string{rules}
	if errs := cfg.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	layout, err := newNodeLayout(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := newSimRules(cfg)
	if r.loop() != nil {
		t.Error("a loop without enableCRDs")
	}
	p, err := simProvider(cfg, layout, newSimStages(cfg), r)(&agent.Env{Node: agent.NodeInfo{Name: "sim"}, Client: fake.NewClientset(),
		Admit: func(*corev1.Pod) error { return nil }, NodeConditions: func(*corev1.Node) {}, NotReady: func() string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"},
		Spec:       corev1.PodSpec{NodeName: "sim", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
	}
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	rc, err := p.(provider.LogsProvider).GetContainerLogs(ctx, "ns", "p", "c", provider.ContainerLogOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if out, err := io.ReadAll(rc); err != nil || string(out) != "hello\n" {
		t.Errorf("logs %q, %v; want the ClusterLogs' file", out, err)
	}

	cfg.Sim.EnableCRDs = []string{"Stage", "Logs", "ClusterExec"}
	if r := newSimRules(cfg); r.loop() == nil || len(r.kinds) != 2 {
		t.Errorf("kinds %v, want a loop watching Logs and ClusterExec", r.kinds)
	}
}
