package simrules

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const objects = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: skipped}
spec: {resourceRef: {kind: Pod}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: skipped-too}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Logs
metadata: {name: web, namespace: shop}
spec:
  logs:
  - containers: [sidecar]
    logsFile: /logs/sidecar.log
  - logsFile: /logs/web.log
    previousLogsFile: /logs/web-previous.log
    follow: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Logs
metadata: {name: db, namespace: shop}
spec:
  logs:
  - containers: [db]
    logsFile: /logs/db.log
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata: {name: shop-only}
spec:
  selector: {matchNamespaces: [shop], matchNames: [api, db]}
  logs:
  - containers: [api]
    logsFile: /logs/api.log
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata: {name: everyone}
spec:
  logs:
  - logsFile: /logs/any.log
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Exec
metadata: {name: web}
spec:
  execs:
  - local:
      workDir: /tmp
      envs: [{name: A, value: b}]
      securityContext: {runAsUser: 1000, runAsGroup: 1000}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterPortForward
metadata: {name: forwards}
spec:
  forwards:
  - ports: [8080]
    target: {address: 127.0.0.1, port: 18080}
  - command: [nc, 127.0.0.1, "9000"]
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Attach
metadata: {name: web, namespace: shop}
spec:
  attaches:
  - containers: [sidecar]
    logsFile: /logs/sidecar-attach.log
  - logsFile: /logs/web-attach.log
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ResourceUsage
metadata: {name: web, namespace: shop}
spec:
  usages:
  - containers: [web]
    usage:
      cpu: {value: 250m}
      memory: {value: 100Mi}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterResourceUsage
metadata: {name: usage}
spec:
  usages:
  - usage:
      cpu: {value: "2"}
`

func load(t *testing.T, content string) *Rules {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kwok.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	rules, err := Load(nil, path)
	if err != nil {
		t.Fatal(err)
	}
	return NewRules(rules)
}

func TestLookup(t *testing.T) {
	rs := load(t, objects)
	logs := []struct {
		namespace, pod, container string
		want                      string // the logs file, or the error
	}{
		{"shop", "web", "sidecar", "/logs/sidecar.log"},             // the entry naming the container
		{"shop", "web", "web", "/logs/web.log"},                     // else the first naming none
		{"shop", "db", "db", "/logs/db.log"},                        // the pod's own object wins over the cluster's
		{"shop", "db", "other", "error: Logs shop/db has no entry"}, // and decides alone, as in kwok
		{"shop", "api", "api", "/logs/api.log"},                     // selected by namespace and name
		{"shop", "api", "other", "/logs/any.log"},                   // the next cluster object with an entry
		{"other", "api", "api", "/logs/any.log"},                    // not in the namespaces selected
	}
	for _, tc := range logs {
		l, err := rs.Log(tc.namespace, tc.pod, tc.container)
		got, ok := "", false
		if wantErr, isErr := strings.CutPrefix(tc.want, "error: "); isErr {
			ok = err != nil && strings.Contains(err.Error(), wantErr) && !errors.Is(err, ErrNoRule)
		} else {
			ok = err == nil && *l.LogsFile == tc.want
		}
		if err != nil {
			got = "error: " + err.Error()
		} else {
			got = *l.LogsFile
		}
		if !ok {
			t.Errorf("Log(%s/%s, %s) = %q, want %q", tc.namespace, tc.pod, tc.container, got, tc.want)
		}
	}
	if l, _ := rs.Log("shop", "web", "web"); l.PreviousLogsFile == nil || *l.PreviousLogsFile != "/logs/web-previous.log" || l.Follow == nil || !*l.Follow {
		t.Errorf("log entry %+v, want its previous file and follow", l)
	}

	e, err := rs.Exec("default", "web", "any")
	if err != nil || e.Local.WorkDir != "/tmp" || *e.Local.SecurityContext.RunAsUser != 1000 {
		t.Errorf("Exec of default/web (namespace defaulted) = %+v, %v", e, err)
	}
	if _, err := rs.Exec("shop", "web", "any"); !errors.Is(err, ErrNoRule) {
		t.Errorf("Exec of shop/web: %v, want ErrNoRule", err)
	}

	f, err := rs.Forward("any", "pod", 8080)
	if err != nil || f.Target == nil || f.Target.Port != 18080 {
		t.Errorf("Forward 8080 = %+v, %v, want the target", f, err)
	}
	f, err = rs.Forward("any", "pod", 9999)
	if err != nil || len(f.Command) != 3 {
		t.Errorf("Forward 9999 = %+v, %v, want the command of the entry without ports", f, err)
	}

	for container, want := range map[string]string{"sidecar": "/logs/sidecar-attach.log", "web": "/logs/web-attach.log"} {
		if a, err := rs.Attach("shop", "web", container); err != nil || *a.LogsFile != want {
			t.Errorf("Attach of shop/web %s = %+v, %v, want %s", container, a, err, want)
		}
	}
	if _, err := rs.Attach("shop", "db", "db"); !errors.Is(err, ErrNoRule) {
		t.Errorf("Attach of shop/db: %v, want ErrNoRule", err)
	}

	if cpu, mem := figures(t, rs, "shop", "web", "web", UsageData{}); cpu != 0.25 || mem != 100*1024*1024 {
		t.Errorf("usage of shop/web web = %v, %v", cpu, mem)
	}
	// The pod's ResourceUsage has no entry for the container: it says
	// nothing of it, and the cluster's are not looked at (as in kwok).
	if u := rs.Usage("shop", "web", "sidecar"); u != nil {
		t.Errorf("usage of shop/web sidecar = %v, want none", u)
	}
	if cpu, _ := figures(t, rs, "shop", "other", "x", UsageData{}); cpu != 2 {
		t.Errorf("usage of shop/other = %v, want the cluster's 2 cores", cpu)
	}
	var none *Rules
	if _, err := none.Log("a", "b", "c"); !errors.Is(err, ErrNoRule) {
		t.Errorf("nil rules: %v", err)
	}
}

func TestLoadRefusesBadObjects(t *testing.T) {
	const bad = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: ResourceUsage
metadata: {name: cel, namespace: ns}
spec:
  usages:
  - usage:
      cpu: {expression: 'pod.spec.containers.size() * '}
      memory: {value: -1Mi}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Logs
metadata: {name: nofile}
spec:
  logs:
  - containers: [a]
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterPortForward
metadata: {name: nowhere}
spec:
  forwards:
  - ports: [0]
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Exec
metadata: {name: remote}
spec:
  execs:
  - containers: [a]
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterAttach
metadata: {name: nofile}
spec:
  attaches:
  - containers: [a]
---
apiVersion: kwok.x-k8s.io/v1
kind: Exec
metadata: {name: version}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata: {name: typo}
spec:
  exec: []
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata: {name: good}
spec:
  logs:
  - logsFile: /x.log
`
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	rules, err := Load(nil, path)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		path,
		`ResourceUsage ns/cel: [spec.usages[0].usage[cpu].expression: Invalid value: "pod.spec.containers.size() * ": failed to compile metric expression`,
		"Syntax error",
		`spec.usages[0].usage[memory].value: Invalid value: "-1Mi": must not be negative`,
		"Logs default/nofile: spec.logs[0].logsFile: Required value",
		"ClusterPortForward nowhere: [spec.forwards[0].ports[0]: Invalid value: 0",
		"spec.forwards[0].target: Required value",
		"Exec default/remote: spec.execs[0].local: Required value",
		"ClusterAttach nofile: spec.attaches[0].logsFile: Required value",
		`Exec "version": apiVersion "kwok.x-k8s.io/v1" is not kwok.x-k8s.io/v1alpha1`,
		`ClusterExec "typo": error unmarshaling JSON: while decoding JSON: json: unknown field "exec"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nlacks %q", err, want)
		}
	}
	if len(rules) != 1 || rules[0].String() != "ClusterLogs good" {
		t.Errorf("rules %v, want the good one only", rules)
	}
	if _, err := Load(nil, filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "rules: stat") {
		t.Errorf("missing file: %v", err)
	}
}

func TestSet(t *testing.T) {
	files, err := CompileAll(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSet(files)
	if _, err := s.Rules().Log("ns", "p", "c"); !errors.Is(err, ErrNoRule) {
		t.Fatalf("empty set: %v", err)
	}
	rs := load(t, objects)
	all := append(rs.cluster[whatLogs], rs.own[whatLogs]["shop/web"])
	s.StoreCluster("Logs", []*Rule{rs.own[whatLogs]["shop/web"]})
	s.StoreCluster("ClusterLogs", all[:2])
	if l, err := s.Rules().Log("shop", "web", "web"); err != nil || *l.LogsFile != "/logs/web.log" {
		t.Errorf("Log = %v, %v", l, err)
	}
	s.StoreCluster("Logs", nil)
	if l, err := s.Rules().Log("shop", "web", "web"); err != nil || *l.LogsFile != "/logs/any.log" {
		t.Errorf("Log after the Logs went = %v, %v, want the cluster's", l, err)
	}
}
