package providertest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/provider"
)

const (
	// pollInterval is how often the kit looks again while it waits.
	pollInterval = 200 * time.Millisecond
	// stopTimeout is how long an agent may take to return once its
	// context ends.
	stopTimeout = 30 * time.Second
	// requestTimeout bounds each request of the kit's own.
	requestTimeout = 30 * time.Second
	// logVerbosity is how much of the agent's log the kit keeps.
	logVerbosity = 4
)

// kit is one run of the checks: its node, namespace, agent and what it
// saw.
type kit struct {
	c      Config
	r      Reporter
	ctx    context.Context
	client kubernetes.Interface
	node   string
	ns     string
	// rootDir is the agents' root dir, unless Config.Options gives one.
	rootDir string
	logs    *logBuffer
	logger  klog.Logger

	// agent is the running agent, nil while none runs; prov is the
	// provider it made (the last agent's once it stopped).
	agent *runningAgent
	prov  agent.Provider

	// failed is set once a part failed, halted once no more parts may run.
	failed, halted bool
	// ownsNode is set once the kit found no node of its name: the
	// cleanup deletes it then, and only then.
	ownsNode bool
}

// runningAgent is an agent started by the kit.
type runningAgent struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned
	err    error         // Run's error, once done is closed
}

// exited says whether the agent's Run has returned.
func (a *runningAgent) exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

func newKit(ctx context.Context, r Reporter, c Config) (*kit, error) {
	rc := rest.CopyConfig(c.Client)
	rc.QPS, rc.Burst = 100, 200
	rc.Timeout = requestTimeout
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	suffix := randomSuffix()
	k := &kit{c: c, r: r, ctx: ctx, client: client, node: c.NodeName, ns: "providertest-" + suffix, logs: &logBuffer{}}
	if k.node == "" {
		k.node = "providertest-" + suffix
	}
	k.logger = textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(logVerbosity), textlogger.Output(k.logs)))
	return k, nil
}

// randomSuffix is 5 random lowercase letters and digits.
func randomSuffix() string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// part runs one part of the contract unless the kit halted. A part that
// fails halts the kit when the parts after it need it (essential) or with
// Config.FailFast.
func (k *kit) part(name string, essential bool, check func() error) {
	if k.halted {
		return
	}
	if k.r.Part(name, check) {
		return
	}
	k.failed = true
	if essential || k.c.FailFast {
		k.halted = true
	}
}

// optional runs a part that only some providers offer: offered says
// whether this one does, or why not.
func (k *kit) optional(name string, offered func() (bool, string), check func() error) {
	if k.halted {
		return
	}
	if ok, why := offered(); !ok {
		k.r.Logf("%s: not checked: %s", name, why)
		return
	}
	k.part(name, false, check)
}

// setup makes the namespace and its default service account, checks that
// the node is the kit's own, and starts the first agent.
func (k *kit) setup() error {
	ctx, cancel := context.WithTimeout(k.ctx, requestTimeout)
	defer cancel()
	if _, err := k.client.CoreV1().Nodes().Get(ctx, k.node, metav1.GetOptions{}); err == nil {
		return fmt.Errorf("node %s exists already: the kit needs a node of its own", k.node)
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get node %s: %w", k.node, err)
	}
	k.ownsNode = true
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.ns}}
	if _, err := k.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", k.ns, err)
	}
	// The service account controller makes it too; without one (an API
	// server alone) pods could not be created.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: k.ns}}
	if _, err := k.client.CoreV1().ServiceAccounts(k.ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the default service account of %s: %w", k.ns, err)
	}
	if k.rootDir == "" {
		dir, err := os.MkdirTemp("", "providertest-")
		if err != nil {
			return fmt.Errorf("agent root dir: %w", err)
		}
		k.rootDir = dir
	}
	k.r.Logf("node %s, namespace %s", k.node, k.ns)
	return k.start()
}

// start runs a new agent, with a new provider, and waits until it has
// made the provider.
func (k *kit) start() error {
	made := make(chan agent.Provider, 1)
	newProvider := func(env *agent.Env) (agent.Provider, error) {
		p, err := k.c.NewProvider(env)
		if err == nil && p != nil {
			select {
			case made <- p:
			default:
			}
		}
		return p, err
	}
	opts := []agent.Option{agent.WithClientConfig(k.c.Client), agent.WithRootDir(k.rootDir)}
	if k.c.Server != nil {
		opts = append(opts, agent.WithServer(*k.c.Server))
	}
	opts = append(opts, k.c.Options...)
	a, err := agent.New(agent.One(k.node), newProvider, opts...)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(k.ctx, k.logger))
	run := &runningAgent{cancel: cancel, done: make(chan struct{})}
	go func() {
		run.err = a.Run(ctx)
		close(run.done)
	}()
	timeout := time.NewTimer(k.c.Timeout)
	defer timeout.Stop()
	select {
	case p := <-made:
		k.agent, k.prov = run, p
		return nil
	case <-run.done:
		cancel()
		return fmt.Errorf("the agent stopped before its provider was made: %v", run.err)
	case <-timeout.C:
		k.agent = run // stopped by the cleanup
		return fmt.Errorf("the agent made no provider within %s", k.c.Timeout)
	}
}

// stop ends the running agent and waits for its Run to return.
func (k *kit) stop() error {
	a := k.agent
	if a == nil {
		return nil
	}
	a.cancel()
	timeout := time.NewTimer(stopTimeout)
	defer timeout.Stop()
	select {
	case <-a.done:
		k.agent = nil
		if a.err != nil {
			return fmt.Errorf("the agent ended with an error: %w", a.err)
		}
		return nil
	case <-timeout.C:
		return fmt.Errorf("the agent's Run did not return within %s of its context ending: every loop, "+
			"the provider's own Run (provider.Runner) among them, must return when its context ends", stopTimeout)
	}
}

// until polls cond until it holds, for at most timeout. It returns what
// cond saw last, and whether it held; a stopped agent ends the wait. Each
// look has requestTimeout of its own, so that the last one, close to the
// deadline, still sees something.
func (k *kit) until(timeout time.Duration, cond func(ctx context.Context) (bool, string)) (string, bool) {
	var seen string
	err := wait.PollUntilContextTimeout(k.ctx, pollInterval, timeout, true, func(context.Context) (bool, error) {
		if a := k.agent; a != nil && a.exited() {
			return false, fmt.Errorf("the agent stopped: %v", a.err)
		}
		ctx, cancel := context.WithTimeout(k.ctx, requestTimeout)
		defer cancel()
		ok, s := cond(ctx)
		seen = s
		return ok, nil
	})
	if err != nil && !wait.Interrupted(err) {
		return fmt.Sprintf("%v; last seen: %s", err, seen), false
	}
	return seen, err == nil
}

// observation is one pod as the API and the provider show it.
type observation struct {
	name    string
	api     *corev1.Pod
	apiErr  error
	prov    *corev1.Pod
	provErr error
}

// observe reads the pod from the API and from the provider.
func (k *kit) observe(ctx context.Context, name string) observation {
	o := observation{name: name}
	o.api, o.apiErr = k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
	if k.prov != nil {
		o.prov, o.provErr = k.prov.GetPod(ctx, k.ns, name)
	} else {
		o.provErr = errors.New("no provider")
	}
	return o
}

// inAPI and inProvider say whether the pod is there.
func (o observation) inAPI() bool      { return o.apiErr == nil }
func (o observation) inProvider() bool { return o.provErr == nil && o.prov != nil }

// goneFromAPI and goneFromProvider say whether the pod is known to be
// gone: not found, or (in the provider) another pod of the name.
func (o observation) goneFromAPI() bool { return apierrors.IsNotFound(o.apiErr) }
func (o observation) goneFromProvider() bool {
	return errors.Is(o.provErr, provider.ErrNotFound)
}

func (o observation) String() string {
	return fmt.Sprintf("pod %s: the API: %s; the provider's GetPod: %s", o.name, o.apiView(), o.provView())
}

func (o observation) apiView() string {
	switch {
	case o.goneFromAPI():
		return "gone"
	case o.apiErr != nil:
		return "error: " + o.apiErr.Error()
	}
	return describe(o.api)
}

func (o observation) provView() string {
	switch {
	case o.goneFromProvider():
		return "not found"
	case o.provErr != nil:
		return "error: " + o.provErr.Error()
	case o.prov == nil:
		return "nil pod, no error"
	}
	return describe(o.prov)
}

// runningAsReported says whether the API shows the pod running as the
// provider reports it: Running and Ready, every container running and
// ready, and the provider's pod IP.
func (o observation) runningAsReported() bool {
	if !o.inAPI() || !o.inProvider() || (o.prov.UID != "" && o.prov.UID != o.api.UID) {
		return false
	}
	return running(o.api) && running(o.prov) && o.api.Status.PodIP == o.prov.Status.PodIP
}

// hint says what an observation of a pod that should run suggests.
func (o observation) hint() string {
	switch {
	case o.goneFromProvider():
		return "the provider does not know the pod: CreatePod was not called, failed (see the pod's Events) or did not keep it"
	case o.inProvider() && o.inAPI() && running(o.prov) && !running(o.api):
		return "the provider runs it but the API does not show it: a PodNotifier must notify every status change, " +
			"and GetPod must return the pod's current status (the agent polls it)"
	case o.inProvider() && !running(o.prov):
		return "the provider does not report it Running and Ready with every container running and ready"
	}
	return ""
}

// running says whether a pod's status is Running and Ready, with every
// container of its spec running and ready.
func running(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	ready := false
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return false
	}
	for _, c := range p.Spec.Containers {
		s := containerStatus(p, c.Name)
		if s == nil || s.State.Running == nil || !s.Ready {
			return false
		}
	}
	return true
}

// containerStatus is the status of a pod's container, or nil.
func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// describe tells a pod's status in one line.
func describe(p *corev1.Pod) string {
	var b strings.Builder
	phase := string(p.Status.Phase)
	if phase == "" {
		phase = "none"
	}
	fmt.Fprintf(&b, "phase %s", phase)
	if p.Status.Reason != "" {
		fmt.Fprintf(&b, " (%s: %s)", p.Status.Reason, p.Status.Message)
	}
	if p.DeletionTimestamp != nil {
		b.WriteString(", being deleted")
	}
	if p.Status.PodIP != "" {
		fmt.Fprintf(&b, ", pod IP %s", p.Status.PodIP)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			fmt.Fprintf(&b, ", Ready=%s", c.Status)
		}
	}
	for _, c := range p.Spec.Containers {
		s := containerStatus(p, c.Name)
		if s == nil {
			fmt.Fprintf(&b, "; %s: no status", c.Name)
			continue
		}
		fmt.Fprintf(&b, "; %s: %s, ready %t, restarts %d", c.Name, state(s.State), s.Ready, s.RestartCount)
	}
	return b.String()
}

// state tells a container's state.
func state(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running since " + s.Running.StartedAt.UTC().Format(time.RFC3339)
	case s.Waiting != nil:
		return "waiting (" + s.Waiting.Reason + ")"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated (%s, exit code %d)", s.Terminated.Reason, s.Terminated.ExitCode)
	}
	return "no state"
}

// logBuffer keeps the last lines the agent logged.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
	part  string // a line not yet ended
}

// maxLogLines is how many lines a logBuffer keeps.
const maxLogLines = 2000

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	text := b.part + string(p)
	lines := strings.Split(text, "\n")
	b.part = lines[len(lines)-1]
	b.lines = append(b.lines, lines[:len(lines)-1]...)
	if over := len(b.lines) - maxLogLines; over > 0 {
		b.lines = append(b.lines[:0:0], b.lines[over:]...)
	}
	return len(p), nil
}

// last returns the last n lines.
func (b *logBuffer) last(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := b.lines
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
