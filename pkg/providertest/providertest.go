// Package providertest checks a provider against nodelet's provider
// contract (package provider) on a real API server. A provider author runs
// it from a test of their own:
//
//	func TestMyProvider(t *testing.T) {
//		providertest.Run(t, providertest.Config{
//			Client:      adminConfig, // *rest.Config of a real API server
//			NewProvider: newMyProvider,
//		})
//	}
//
// Run runs the provider under a real agent (package agent) in the test's
// own process, for a node and a namespace of its own, and checks the parts
// of the contract in turn, each a subtest whose failure says what broke
// and what the kit saw in the API and in the provider:
//
//   - node: the node registers and turns Ready, with pod capacity;
//   - create: pods bound to the node (no scheduler needed) run: the API
//     shows them Running and Ready, every container running and ready, with
//     the pod IP the provider reports, its status pushed (PodNotifier) or
//     polled;
//   - logs and exec: through the API server's pods/log and pods/exec, when
//     the provider is a LogsProvider or an ExecProvider and Config.Server
//     runs the kubelet API;
//   - update: a new label reaches the provider (UpdatePod), and the pod's
//     containers are not restarted for it;
//   - delete: a pod deleted with a grace period leaves the API within it
//     (and Config.Slack) and the provider (GetPod returns ErrNotFound);
//   - force-delete: a pod deleted with grace 0, gone from the API at once,
//     is stopped in the provider;
//   - restart: the agent stops and a new one starts, with a new provider
//     from the same constructor: the pods run on; with Config.KeepsPods
//     their containers were not restarted (same restart counts, start
//     times and pod IP);
//   - dangling: a pod deleted from the API while the agent was down is
//     stopped in the provider;
//   - lost: a pod bound to the node while the agent was down is created; a
//     pod the API says was running that the provider does not know is
//     restored by a PodRestorer, else created again (restartPolicy Always)
//     or failed with reason PodLost (Never), as the agent promises;
//   - cleanup: every pod deleted leaves the API and the provider; then the
//     agent stops, and the namespace, Node and Lease are deleted.
//
// What it needs: an API server (etcd and kube-apiserver suffice: the kit
// binds its pods itself, and makes the namespace's default service account
// when no controller does) and an admin's credentials; for logs and exec, an
// API server that reaches the node's kubelet API at the address and port
// its provider reports. The kit reads the provider through GetPod and
// GetPods while the agent runs it, as the agent's kubelet API and stats do.
// Everything polls with a deadline; nothing sleeps.
//
// The package holds no control loop and never imports a provider; it
// drives the agent only through package agent's public API.
package providertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/agent"
)

// The default pod: one container that writes DefaultLogLine and sleeps
// until it is stopped.
const (
	DefaultImage   = "busybox:1.37"
	DefaultLogLine = "providertest-started"
)

// Config is the provider under test and how the kit runs it.
type Config struct {
	// Client is how the kit and its agent reach the API server, with an
	// admin's rights: the kit makes a namespace, pods and their status,
	// and deletes the node at the end. Required.
	Client *rest.Config
	// NewProvider makes the provider under test. It is called for each
	// agent the kit starts (twice: before and after the restart); each
	// call makes a new provider of the same node, which finds what the
	// previous one left, as a new process would. Required.
	NewProvider agent.NewProviderFunc
	// Options are more options of the agent. The kit's come first, so
	// these win: the client (Client), a root dir of the kit's own (a
	// temporary one, the same for both agents), and WithServer(Server).
	Options []agent.Option
	// Server, when set, runs the kubelet API (agent.WithServer), through
	// which the API server serves logs and exec: its Port must be the one
	// the provider reports in status.daemonEndpoints, served at an address
	// the node reports and the API server reaches.
	Server *agent.ServerOptions
	// NodeName is the node the kit's agent manages (default
	// providertest-<random>). It must not exist; it is deleted at the end.
	NodeName string

	// Pod is the spec of the pods the kit runs; every container must run
	// until it is stopped. The kit sets nodeName, and restartPolicy on
	// some. Default: one container "main", DefaultImage, that writes
	// DefaultLogLine and sleeps, without a service account token.
	Pod *corev1.PodSpec
	// LogLine is a line the pod's first container writes to its log, which
	// the logs part looks for: DefaultLogLine with the default Pod; with
	// another Pod, empty only checks that the log can be read.
	LogLine string
	// Exec is the command the exec part runs in the pod's first container
	// and ExecOutput what it must write to stdout (default: echo ok, and
	// "ok\n").
	Exec       []string
	ExecOutput string

	// KeepsPods says that the provider keeps its pods across an agent
	// restart without restarting their containers: it restores them
	// (provider.PodRestorer) or finds them again on its own. The restart
	// part then checks restart counts, start times and pod IPs.
	KeepsPods bool

	// Grace is the grace period of the pods the kit deletes (default 5s;
	// whole seconds, at least 1).
	Grace time.Duration
	// Timeout bounds how long a pod may take to run and a change to show
	// (default 90s).
	Timeout time.Duration
	// Slack is how long past a grace period a deleted pod may take to
	// leave the API and the provider (default 30s).
	Slack time.Duration
	// FailFast stops at the first part that fails; cleanup still runs.
	FailFast bool
}

// withDefaults returns c with its defaults filled in, or an error naming
// each field that is wrong.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("Client: nil: the kit needs the rest.Config of an API server, with an admin's rights"))
	}
	if c.NewProvider == nil {
		errs = append(errs, errors.New("NewProvider: nil"))
	}
	if c.Pod == nil {
		c.Pod = defaultPod(c.Grace)
		if c.LogLine == "" {
			c.LogLine = DefaultLogLine
		}
	} else {
		c.Pod = c.Pod.DeepCopy()
		if len(c.Pod.Containers) == 0 {
			errs = append(errs, errors.New("Pod: no containers"))
		}
	}
	if len(c.Exec) == 0 {
		c.Exec, c.ExecOutput = []string{"echo", "ok"}, "ok\n"
	}
	if c.Grace == 0 {
		c.Grace = 5 * time.Second
	}
	if c.Grace < time.Second || c.Grace%time.Second != 0 {
		errs = append(errs, fmt.Errorf("Grace %s: want whole seconds, at least 1s (a pod's grace period is whole seconds)", c.Grace))
	}
	if c.Timeout == 0 {
		c.Timeout = 90 * time.Second
	}
	if c.Slack == 0 {
		c.Slack = 30 * time.Second
	}
	if c.Timeout < 0 || c.Slack < 0 {
		errs = append(errs, fmt.Errorf("Timeout %s and Slack %s: must not be negative", c.Timeout, c.Slack))
	}
	return c, errors.Join(errs...)
}

// defaultPod is the pod the kit runs when Config.Pod is not set.
func defaultPod(grace time.Duration) *corev1.PodSpec {
	if grace <= 0 {
		grace = 5 * time.Second
	}
	return &corev1.PodSpec{
		Containers: []corev1.Container{{
			Name:    "main",
			Image:   DefaultImage,
			Command: []string{"sh", "-c", "echo " + DefaultLogLine + "; exec sleep 3600"},
		}},
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(int64(grace / time.Second)),
	}
}

// Reporter receives what the kit finds. Run's reports to a *testing.T,
// each part a subtest; a Record keeps it, for a test that expects a
// provider to fail.
type Reporter interface {
	// Part runs check, the part of the contract called name, and reports
	// its error (nil: the part holds). It returns whether the part held.
	Part(name string, check func() error) bool
	// Logf tells what the kit did and, when a part failed, what the agent
	// logged.
	Logf(format string, args ...any)
}

// Run checks the provider c describes, each part of the contract a subtest
// of t, and returns once everything it made is gone.
func Run(t *testing.T, c Config) {
	t.Helper()
	Check(t.Context(), testReporter{t}, c)
}

// testReporter reports to a test's subtests.
type testReporter struct{ t *testing.T }

func (r testReporter) Part(name string, check func() error) bool {
	return r.t.Run(name, func(t *testing.T) {
		if err := check(); err != nil {
			t.Error(err)
		}
	})
}

func (r testReporter) Logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf(format, args...)
}

// Record is a Reporter that keeps what each part found.
type Record struct {
	// Log, when set, receives the kit's log.
	Log func(format string, args ...any)

	mu      sync.Mutex
	results []Result
}

// Result is what one part of the contract found.
type Result struct {
	Part string
	// Err says what broke; nil when the part held.
	Err  error
	Took time.Duration
}

func (r *Record) Part(name string, check func() error) bool {
	start := time.Now()
	err := check()
	r.mu.Lock()
	r.results = append(r.results, Result{Part: name, Err: err, Took: time.Since(start)})
	r.mu.Unlock()
	return err == nil
}

func (r *Record) Logf(format string, args ...any) {
	if r.Log != nil {
		r.Log(format, args...)
	}
}

// Results are the parts that ran, in order.
func (r *Record) Results() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Result(nil), r.results...)
}

// Result returns what the named part found, and false if it did not run.
func (r *Record) Result(part string) (Result, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, res := range r.results {
		if res.Part == part {
			return res, true
		}
	}
	return Result{}, false
}

// Check checks the provider c describes, reporting each part of the
// contract to r, and returns once everything it made is gone (or ctx
// ended).
func Check(ctx context.Context, r Reporter, c Config) {
	c, err := c.withDefaults()
	if err != nil {
		r.Part("config", func() error { return fmt.Errorf("providertest config: %w", err) })
		return
	}
	k, err := newKit(ctx, r, c)
	if err != nil {
		r.Part("setup", func() error { return err })
		return
	}
	start := time.Now()
	defer func() {
		if !r.Part("cleanup", k.cleanup) {
			k.failed = true
		}
		if k.failed {
			r.Logf("the agent's last log lines (node %s):\n%s", k.node, k.logs.last(150))
		}
		r.Logf("provider kit on node %s took %s", k.node, time.Since(start).Round(100*time.Millisecond))
	}()
	k.part("setup", true, k.setup)
	k.part("node", true, k.checkNode)
	k.part("create", true, k.checkCreate)
	k.optional("logs", k.logsOffered, k.checkLogs)
	k.optional("exec", k.execOffered, k.checkExec)
	k.part("update", false, k.checkUpdate)
	k.part("delete", false, k.checkDelete)
	k.part("force-delete", false, k.checkForceDelete)
	k.part("restart", false, k.checkRestart)
	k.part("dangling", false, k.checkDangling)
	k.part("lost", false, k.checkLost)
}
