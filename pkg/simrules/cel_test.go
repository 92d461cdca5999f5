package simrules

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// figures is the cpu and memory the rules give a container, failing the
// test on an error; -1 for a resource not named.
func figures(t *testing.T, rs *Rules, namespace, pod, container string, data UsageData) (cpu, mem float64) {
	t.Helper()
	u := rs.Usage(namespace, pod, container)
	if u == nil {
		t.Fatalf("no usage for %s/%s %s", namespace, pod, container)
	}
	out := [2]float64{}
	for i, name := range []string{"cpu", "memory"} {
		v, ok, err := u.Resource(context.Background(), name, data)
		if err != nil {
			t.Fatalf("%s of %s/%s %s: %v", name, namespace, pod, container, err)
		}
		out[i] = v
		if !ok {
			out[i] = -1
		}
	}
	return out[0], out[1]
}

// usageFromAnnotation is kwok's own usage config, as kwok v0.8.0 ships it
// (kustomize/metrics/usage/usage-from-annotation.yaml).
const usageFromAnnotation = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterResourceUsage
metadata:
  name: usage-from-annotation
spec:
  usages:
  - usage:
      cpu:
        expression: |
          "kwok.x-k8s.io/usage-cpu" in pod.metadata.annotations
          ? Quantity(pod.metadata.annotations["kwok.x-k8s.io/usage-cpu"])
          : Quantity("1m")
      memory:
        expression: |
          "kwok.x-k8s.io/usage-memory" in pod.metadata.annotations
          ? Quantity(pod.metadata.annotations["kwok.x-k8s.io/usage-memory"])
          : Quantity("1Mi")
`

func loadIn(t *testing.T, env *CEL, content string) *Rules {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kwok.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	rules, err := Load(env, path)
	if err != nil {
		t.Fatal(err)
	}
	return NewRules(rules)
}

func annotated(annotations map[string]string) UsageData {
	return UsageData{
		Node:      &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}},
		Pod:       &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Annotations: annotations}},
		Container: &corev1.Container{Name: "c"},
	}
}

func TestKwokUsageFromAnnotation(t *testing.T) {
	rs := loadIn(t, nil, usageFromAnnotation)
	for _, tc := range []struct {
		annotations map[string]string
		cpu, mem    float64
	}{
		{map[string]string{"kwok.x-k8s.io/usage-cpu": "250m", "kwok.x-k8s.io/usage-memory": "300Mi"}, 0.25, 300 << 20},
		{map[string]string{"kwok.x-k8s.io/usage-cpu": "2"}, 2, 1 << 20},
		{nil, 0.001, 1 << 20}, // kwok's defaults
	} {
		if cpu, mem := figures(t, rs, "ns", "p", "c", annotated(tc.annotations)); cpu != tc.cpu || mem != tc.mem {
			t.Errorf("annotations %v: cpu %v memory %v, want %v %v", tc.annotations, cpu, mem, tc.cpu, tc.mem)
		}
	}
}

func TestUsageExpressions(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	env, err := NewCEL(clk)
	if err != nil {
		t.Fatal(err)
	}
	rs := loadIn(t, env, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: ResourceUsage
metadata: {name: p, namespace: ns}
spec:
  usages:
  - containers: [clock]
    usage:
      cpu: {expression: 'UnixSecond(Now()) / 1000.0'}
      memory: {value: 1Ki}
  - containers: [missing]
    usage:
      cpu: {expression: 'Quantity(pod.metadata.annotations["absent"])'}
  - containers: [negative]
    usage:
      cpu: {expression: '-1.0'}
`)
	if cpu, mem := figures(t, rs, "ns", "p", "clock", annotated(nil)); cpu != 1 || mem != 1024 {
		t.Errorf("clock: cpu %v memory %v, want Now from the clock given (1) and the value", cpu, mem)
	}
	clk.SetTime(time.Unix(2000, 0))
	if cpu, _ := figures(t, rs, "ns", "p", "clock", annotated(nil)); cpu != 2 {
		t.Errorf("clock: cpu %v after the clock moved, want 2", cpu)
	}
	// An expression that fails gives kwok's 0 and an error naming the
	// object and the field.
	for _, c := range []string{"missing", "negative"} {
		v, ok, err := rs.Usage("ns", "p", c).Resource(context.Background(), "cpu", annotated(nil))
		if v != 0 || !ok || err == nil || !strings.Contains(err.Error(), "ResourceUsage ns/p: spec.usages[") || !strings.Contains(err.Error(), "usage[cpu].expression") {
			t.Errorf("%s: %v, %v, %v; want 0 and an error naming the field", c, v, ok, err)
		}
	}
	if _, ok, err := rs.Usage("ns", "p", "missing").Resource(context.Background(), "memory", annotated(nil)); ok || err != nil {
		t.Errorf("memory not named: %v, %v", ok, err)
	}
}

// Usage and CumulativeUsage are not provided: an expression calling them
// is refused when its object is loaded.
func TestUsageExpressionsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kwok.yaml")
	if err := os.WriteFile(path, []byte(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterResourceUsage
metadata: {name: recursive}
spec:
  usages:
  - usage:
      cpu: {expression: 'pod.Usage("cpu") * 2.0'}
      memory: {expression: '"a" +'}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	rules, err := Load(nil, path)
	if len(rules) != 0 || err == nil {
		t.Fatalf("rules %v, error %v; want the object refused", rules, err)
	}
	for _, want := range []string{"ClusterResourceUsage recursive", "spec.usages[0].usage[cpu].expression", "spec.usages[0].usage[memory].expression"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// BenchmarkUsageFromAnnotation is the cost of one container's figures by
// kwok's usage-from-annotation: two expressions.
func BenchmarkUsageFromAnnotation(b *testing.B) {
	path := filepath.Join(b.TempDir(), "kwok.yaml")
	if err := os.WriteFile(path, []byte(usageFromAnnotation), 0o600); err != nil {
		b.Fatal(err)
	}
	rules, err := Load(nil, path)
	if err != nil {
		b.Fatal(err)
	}
	rs := NewRules(rules)
	data := annotated(map[string]string{"kwok.x-k8s.io/usage-cpu": "250m", "app": "web", "team": "shop"})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		u := rs.Usage("ns", "p", "c")
		for _, name := range []string{"cpu", "memory"} {
			if _, _, err := u.Resource(ctx, name, data); err != nil {
				b.Fatal(err)
			}
		}
	}
}
