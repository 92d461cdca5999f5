package sim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/simrules"
)

// withRules gives the provider the rules of a kwok YAML file, their
// expressions on the provider's clock.
func withRules(t testing.TB, yaml string) func(*Options) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kwok.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(o *Options) {
		t.Helper()
		env, err := simrules.NewCEL(o.Clock)
		if err != nil {
			t.Fatal(err)
		}
		rules, err := simrules.Load(env, path)
		if err != nil {
			t.Fatal(err)
		}
		o.Rules = simrules.NewSet(rules)
	}
}

func criLine(msg string) string { return "2016-10-06T00:17:09.669794202Z stdout F " + msg + "\n" }

func TestContainerLogs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	current, previous, side := filepath.Join(dir, "app.log"), filepath.Join(dir, "app-previous.log"), filepath.Join(dir, "side.log")
	for f, content := range map[string]string{
		current:  criLine("one") + criLine("two") + criLine("three"),
		previous: criLine("before the restart"),
		side:     criLine("side"),
	} {
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p, _, _ := newTest(t, withRules(t, fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: Logs
metadata: {name: web, namespace: ns}
spec:
  logs:
  - containers: [side]
    logsFile: %s
    follow: false
  - logsFile: %s
    previousLogsFile: %s
`, side, current, previous)))
	if err := p.CreatePod(ctx, testPod("web", "", "")); err != nil {
		t.Fatal(err)
	}
	if err := p.CreatePod(ctx, testPod("other", "", "")); err != nil {
		t.Fatal(err)
	}
	read := func(container string, opts provider.ContainerLogOpts) (string, error) {
		t.Helper()
		rc, err := p.GetContainerLogs(ctx, "ns", "web", container, opts)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		out, err := io.ReadAll(rc)
		return string(out), err
	}
	for _, tc := range []struct {
		container string
		opts      provider.ContainerLogOpts
		want      string
	}{
		{"app", provider.ContainerLogOpts{}, "one\ntwo\nthree\n"},
		{"app", provider.ContainerLogOpts{Tail: 1}, "three\n"},
		{"app", provider.ContainerLogOpts{Previous: true}, "before the restart\n"},
		{"app", provider.ContainerLogOpts{Timestamps: true, Tail: 1}, "2016-10-06T00:17:09.669794202Z three\n"},
		{"side", provider.ContainerLogOpts{}, "side\n"},
		// follow: false in the entry: what is there, then the end.
		{"side", provider.ContainerLogOpts{Follow: true}, "side\n"},
	} {
		got, err := read(tc.container, tc.opts)
		if err != nil || got != tc.want {
			t.Errorf("logs of %s with %+v = %q, %v; want %q", tc.container, tc.opts, got, err, tc.want)
		}
	}
	if _, err := read("side", provider.ContainerLogOpts{Previous: true}); err == nil || !strings.Contains(err.Error(), "previousLogsFile") {
		t.Errorf("previous logs without a previous file: %v", err)
	}
	if _, err := read("nope", provider.ContainerLogOpts{}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("logs of an unknown container: %v, want ErrNotFound", err)
	}
	if _, err := p.GetContainerLogs(ctx, "ns", "other", "app", provider.ContainerLogOpts{}); !errors.Is(err, provider.ErrNotSupported) {
		t.Errorf("logs of a pod no Logs is for: %v, want ErrNotSupported", err)
	}

	// Follow: lines appended come as they are written, and the follow
	// ends once the container stops (the pod deleted).
	rc, err := p.GetContainerLogs(ctx, "ns", "web", "app", provider.ContainerLogOpts{Follow: true, Tail: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	lines := bufio.NewReader(rc)
	next := func() string {
		t.Helper()
		l, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("follow: %v after %q", err, l)
		}
		return l
	}
	if got := next(); got != "three\n" {
		t.Errorf("first line followed %q, want the last one", got)
	}
	f, err := os.OpenFile(current, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(criLine("four")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := next(); got != "four\n" {
		t.Errorf("appended line followed %q, want four", got)
	}
	del := testPod("web", "", "")
	del.DeletionTimestamp = ptr(metav1.Now())
	if err := p.DeletePod(ctx, del); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(lines); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("follow ended with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the follow did not end once the pod was gone")
	}
}

func TestExec(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p, _, _ := newTest(t, withRules(t, fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata: {name: all}
spec:
  selector: {matchNames: [web]}
  execs:
  - local:
      workDir: %s
      envs: [{name: GREETING, value: hello}]
`, dir)))
	for _, name := range []string{"web", "other"} {
		if err := p.CreatePod(ctx, testPod(name, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	io := &attachIO{stdin: strings.NewReader("typed\n"), stdout: nopCloser{&out}, stderr: nopCloser{&errOut}}
	if err := p.RunInContainer(ctx, "ns", "web", "app", []string{"sh", "-c", `echo "$GREETING in $(pwd)"; cat; echo oops >&2; exit 3`}, io); err == nil {
		t.Error("exit 3: no error")
	} else if coded, ok := err.(interface{ ExitCode() int }); !ok || coded.ExitCode() != 3 {
		t.Errorf("exit 3: error %v without its exit code", err)
	}
	if want := "hello in " + dir + "\ntyped\n"; out.String() != want || errOut.String() != "oops\n" {
		t.Errorf("stdout %q, stderr %q; want %q and oops", out.String(), errOut.String(), want)
	}
	if err := p.RunInContainer(ctx, "ns", "other", "app", []string{"true"}, &attachIO{}); !errors.Is(err, provider.ErrNotSupported) {
		t.Errorf("exec in a pod no Exec is for: %v, want ErrNotSupported", err)
	}

	// With a terminal (kubectl exec -t), the command runs on a
	// pseudo-terminal of the session's size, output and errors together.
	var term bytes.Buffer
	resize := make(chan provider.TermSize, 1)
	resize <- provider.TermSize{Width: 91, Height: 37}
	err := p.RunInContainer(ctx, "ns", "web", "app", []string{"sh", "-c", `tty; stty size; test -t 0 && echo "$GREETING on a terminal" >&2; exit 4`},
		&attachIO{stdout: nopCloser{&term}, tty: true, resize: resize})
	if coded, ok := err.(interface{ ExitCode() int }); !ok || coded.ExitCode() != 4 {
		t.Errorf("exec with a terminal, exit 4: %v", err)
	}
	if got := strings.ReplaceAll(term.String(), "\r\n", "\n"); !strings.HasPrefix(got, "/dev/pts/") || !strings.Contains(got, "\n37 91\nhello on a terminal\n") {
		t.Errorf("exec with a terminal printed %q, want its tty, the size 37 91 and the line written to stderr", got)
	}
	if err := p.RunInContainer(ctx, "ns", "gone", "app", []string{"true"}, &attachIO{}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("exec in an unknown pod: %v", err)
	}
}

// kubectl attach follows the Attach's file from its end, standard output
// and error apart, until the container stops.
func TestAttach(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "attach.log")
	if err := os.WriteFile(file, []byte(criLine("before")+criLine("the attach")), 0o600); err != nil {
		t.Fatal(err)
	}
	p, _, _ := newTest(t, withRules(t, fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterAttach
metadata: {name: all}
spec:
  selector: {matchNames: [web]}
  attaches:
  - logsFile: %s
`, file)))
	for _, name := range []string{"web", "other"} {
		if err := p.CreatePod(ctx, testPod(name, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AttachToContainer(ctx, "ns", "other", "app", &attachIO{}); !errors.Is(err, provider.ErrNotSupported) {
		t.Errorf("attach to a pod no Attach is for: %v, want ErrNotSupported", err)
	}
	if err := p.AttachToContainer(ctx, "ns", "web", "nope", &attachIO{}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("attach to an unknown container: %v, want ErrNotFound", err)
	}

	outR, outW := io.Pipe()
	var errOut bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- p.AttachToContainer(ctx, "ns", "web", "app", &attachIO{stdout: outW, stderr: nopCloser{&errOut}})
		outW.Close()
	}()
	lines := make(chan string)
	go func() {
		r := bufio.NewReader(outR)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- l
		}
	}()
	appendLine := func(line string) {
		t.Helper()
		f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(line); err != nil {
			t.Fatal(err)
		}
	}
	// Once the attach follows, a line appended comes; the lines that were
	// there before never do.
	deadline := time.Now().Add(10 * time.Second)
	var first string
	for first == "" && time.Now().Before(deadline) {
		appendLine(criLine("ping"))
		select {
		case first = <-lines:
		case <-time.After(50 * time.Millisecond):
		}
	}
	if first != "ping\n" {
		t.Fatalf("first line attached %q, want a line appended after the attach", first)
	}
	appendLine("2016-10-06T00:17:10.000000000Z stderr F oops\n" + criLine("after"))
	for l := range lines {
		if l == "after\n" {
			break
		}
		if l != "ping\n" {
			t.Fatalf("attached %q, want the lines appended", l)
		}
	}
	del := testPod("web", "", "")
	del.DeletionTimestamp = ptr(metav1.Now())
	if err := p.DeletePod(ctx, del); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("attach ended with %v once the container stopped", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("attach still following 30s after the pod was deleted")
	}
	if errOut.String() != "oops\n" {
		t.Errorf("stderr attached %q, want oops", errOut.String())
	}
}

func TestPortForward(t *testing.T) {
	if _, err := exec.LookPath("cat"); err != nil {
		t.Skip("no cat")
	}
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "echo: %s", line)
			}()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	p, _, _ := newTest(t, withRules(t, fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: PortForward
metadata: {name: web, namespace: ns}
spec:
  forwards:
  - ports: [80]
    target: {address: 127.0.0.1, port: %d}
  - ports: [81]
    command: [cat]
`, port)))
	if err := p.CreatePod(ctx, testPod("web", "", "")); err != nil {
		t.Fatal(err)
	}
	forward := func(port int32, send string) (string, error) {
		client, server := net.Pipe()
		done := make(chan error, 1)
		go func() { done <- p.PortForward(ctx, "ns", "web", port, server); server.Close() }()
		go func() { fmt.Fprint(client, send) }()
		r := bufio.NewReader(client)
		got, readErr := r.ReadString('\n')
		client.Close()
		if err := <-done; err != nil && readErr != nil {
			return got, err
		}
		return got, readErr
	}
	if got, err := forward(80, "hi\n"); err != nil || got != "echo: hi\n" {
		t.Errorf("forward to the target: %q, %v", got, err)
	}
	if got, err := forward(81, "through cat\n"); err != nil || got != "through cat\n" {
		t.Errorf("forward to the command: %q, %v", got, err)
	}
	if _, err := forward(82, "x\n"); err == nil || !strings.Contains(err.Error(), "PortForward ns/web has no entry") {
		t.Errorf("forward to a port the pod's object has no entry for: %v", err)
	}
}

type attachIO struct {
	stdin          io.Reader
	stdout, stderr io.WriteCloser
	tty            bool
	resize         chan provider.TermSize
}

func (a *attachIO) Stdin() io.Reader                 { return a.stdin }
func (a *attachIO) Stdout() io.WriteCloser           { return a.stdout }
func (a *attachIO) Stderr() io.WriteCloser           { return a.stderr }
func (a *attachIO) TTY() bool                        { return a.tty }
func (a *attachIO) Resize() <-chan provider.TermSize { return a.resize }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// kwok's usage comes before the model's, container by container: a
// container it names uses what it says, the others their share.
func TestKwokResourceUsage(t *testing.T) {
	ctx := context.Background()
	p, _, _ := newTest(t, func(o *Options) {
		halfOfRequests(o)
		withRules(t, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: ResourceUsage
metadata: {name: web, namespace: ns}
spec:
  usages:
  - containers: [app]
    usage:
      cpu: {value: 1500m}
      memory: {value: 1Gi}
`)(o)
	})
	if err := p.CreatePod(ctx, testPod("web", "200m", "100Mi")); err != nil {
		t.Fatal(err)
	}
	if err := p.CreatePod(ctx, testPod("other", "200m", "100Mi")); err != nil {
		t.Fatal(err)
	}
	stats, err := p.PodStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		byName := map[string][2]uint64{}
		for _, c := range s.Containers {
			byName[c.Name] = [2]uint64{*c.CPU.UsageNanoCores, *c.Memory.WorkingSetBytes}
		}
		// side has no request: assumed 100m and 128Mi, half of which it uses.
		side := [2]uint64{5e7, 64 << 20}
		want := map[string][2]uint64{"app": {1e8, 50 << 20}, "side": side}
		if s.PodRef.Name == "web" {
			want["app"] = [2]uint64{15e8, 1 << 30}
		}
		if fmt.Sprint(byName) != fmt.Sprint(want) {
			t.Errorf("pod %s containers %v, want %v", s.PodRef.Name, byName, want)
		}
		if got, want := [2]uint64{*s.CPU.UsageNanoCores, *s.Memory.WorkingSetBytes}, [2]uint64{want["app"][0] + side[0], want["app"][1] + side[1]}; got != want {
			t.Errorf("pod %s uses %v, want its containers' sum %v", s.PodRef.Name, got, want)
		}
	}
}

// kwokUsageFromAnnotation is kwok's own usage config, as kwok v0.8.0
// ships it (kustomize/metrics/usage/usage-from-annotation.yaml).
const kwokUsageFromAnnotation = `apiVersion: kwok.x-k8s.io/v1alpha1
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

// containerFigures is each container's cpu (nanocores) and memory, and
// the pod's, by pod name.
func containerFigures(t *testing.T, p *Provider) map[string]map[string][2]uint64 {
	t.Helper()
	stats, err := p.PodStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][2]uint64{}
	for _, s := range stats {
		m := map[string][2]uint64{"pod": {*s.CPU.UsageNanoCores, *s.Memory.WorkingSetBytes}}
		for _, c := range s.Containers {
			m[c.Name] = [2]uint64{*c.CPU.UsageNanoCores, *c.Memory.WorkingSetBytes}
		}
		out[s.PodRef.Name] = m
	}
	return out
}

// kwok's usage-from-annotation, applied as it is: each container uses
// the pod's annotations' figures, else 1m and 1Mi; the pod their sum.
func TestKwokUsageExpressions(t *testing.T) {
	ctx := context.Background()
	p, _, _ := newTest(t, func(o *Options) {
		halfOfRequests(o)
		withRules(t, kwokUsageFromAnnotation)(o)
	})
	busy := testPod("busy", "200m", "100Mi")
	busy.Annotations = map[string]string{"kwok.x-k8s.io/usage-cpu": "250m", "kwok.x-k8s.io/usage-memory": "300Mi"}
	for _, pod := range []*corev1.Pod{busy, testPod("idle", "200m", "100Mi")} {
		if err := p.CreatePod(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	got := containerFigures(t, p)
	want := map[string]map[string][2]uint64{
		"busy": {"app": {25e7, 300 << 20}, "side": {25e7, 300 << 20}, "pod": {5e8, 600 << 20}},
		"idle": {"app": {1e6, 1 << 20}, "side": {1e6, 1 << 20}, "pod": {2e6, 2 << 20}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("figures %v\nwant %v", got, want)
	}
}

// An expression that fails for a pod gives kwok's 0 for it, logged once,
// and the other pods' figures as ever; the variable node is the node.
func TestKwokUsageExpressionFails(t *testing.T) {
	ctx := context.Background()
	p, _, _ := newTest(t, func(o *Options) {
		halfOfRequests(o)
		withRules(t, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: ResourceUsage
metadata: {name: bad, namespace: ns}
spec:
  usages:
  - usage:
      cpu: {expression: 'Quantity(pod.metadata.annotations["absent"])'}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterResourceUsage
metadata: {name: by-node}
spec:
  usages:
  - containers: [app]
    usage:
      cpu: {expression: 'node.metadata.name == "sim-0" && node.status.capacity["cpu"] == Quantity("4") ? 0.5 : 0.0'}
`)(o)
	})
	for _, name := range []string{"bad", "good"} {
		if err := p.CreatePod(ctx, testPod(name, "200m", "100Mi")); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		got := containerFigures(t, p)
		// bad's app and side use 0 cpu (kwok's fallback) and their share
		// of memory, which no entry names.
		want := map[string]map[string][2]uint64{
			"bad":  {"app": {0, 50 << 20}, "side": {0, 64 << 20}, "pod": {0, 114 << 20}},
			"good": {"app": {5e8, 50 << 20}, "side": {5e7, 64 << 20}, "pod": {55e7, 114 << 20}},
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("figures %v\nwant %v", got, want)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.pods[key("ns", "bad")].usageFailed; r == nil || r.String() != "ResourceUsage ns/bad" {
		t.Errorf("the failure recorded (logged once) is of %v", r)
	}
}
