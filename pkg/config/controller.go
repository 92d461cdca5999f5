package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/config/checkpoint"
)

const (
	// SourceAnnotation, on the agent's Node, names the ConfigMap holding
	// its config: "<namespace>/<name>". Without it the agent runs its local
	// config.
	SourceAnnotation = "config.nodelet.io/source"
	// ConfigMapKey is the key of the config in that ConfigMap.
	ConfigMapKey = "nodelet"
	// MaxFailedStarts is how many starts in a row of a config on trial may
	// fail to become healthy; at the next start it is rolled back.
	MaxFailedStarts = 3
	// lockFile, in the root directory, is held by the agent that uses the
	// checkpoint store: one store, one agent.
	lockFile = "config.lock"
)

// ErrRestart is returned by Run when a new config was assigned: the agent
// must restart to use it (Bootstrap picks it).
var ErrRestart = errors.New("a new configuration was assigned: restart to use it")

// ControllerOptions configures a Controller; zero fields take defaults.
type ControllerOptions struct {
	// Clock is the time source (default the real clock).
	Clock clock.WithTicker
	// HealthInterval is how often Run checks whether the agent became
	// healthy (default 1s).
	HealthInterval time.Duration
}

func (o *ControllerOptions) validate() error {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.HealthInterval == 0 {
		o.HealthInterval = time.Second
	}
	if o.HealthInterval < 0 {
		return errors.New("config controller: HealthInterval must not be negative")
	}
	return nil
}

// Controller is the configuration's control loop. At start-up Bootstrap
// picks the config to run: the local one, the assigned remote one, or,
// when the assigned one fails to load, parse or validate or crashed the
// agent at start too often during its trial, the last-known-good. At run
// time it follows the Node's SourceAnnotation: it downloads the ConfigMap
// named there, checkpoints it, marks it assigned and returns ErrRestart;
// once the config in use has passed its trial healthy, it becomes the
// last-known-good. It reports all of this as the ConfigOK node condition,
// Events on the Node and metrics.
type Controller struct {
	local Local
	opts  ControllerOptions

	// Decided by Bootstrap, then read only.
	bootstrapped bool
	store        *checkpoint.Store // nil when remote config is disabled
	lock         *os.File
	assigned     checkpoint.Record // as Bootstrap read it
	assignedOK   bool              // the assigned record could be read
	inUse        inUse
	checksum     string    // of the config in use
	onTrial      bool      // the config in use is the assigned one, on trial; its start was counted
	trialEnd     time.Time // when its trial ends

	w *watcher // set by Watch

	stateMu sync.Mutex
	state   state

	mu          sync.Mutex
	status      configOK // as Bootstrap decided
	syncFailure string   // reason of the last failed sync; "" when it worked
	onChange    func()
	metrics     *metrics
}

// NewController returns the controller of the agent with the given local
// configuration. It does no I/O.
func NewController(local Local, opts ControllerOptions) (*Controller, error) {
	if local.Config == nil {
		return nil, errors.New("config controller: no local config")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Controller{local: local, opts: opts, metrics: newMetrics()}, nil
}

// Bootstrap picks the configuration to run and returns it. It reads the
// checkpoint store under <rootDir>/config, creating it if needed:
//
//   - no remote config assigned: the local config;
//   - a remote config assigned that loads (checksum), parses and validates,
//     and, while on trial, has not failed to become healthy MaxFailedStarts
//     starts in a row: that config (this start is counted);
//   - otherwise: the last-known-good (the local config, or a remote config
//     that passed its trial), and ConfigOK says why.
//
// If the store cannot be used (another agent holds it, no permission) the
// agent runs its local config and ConfigOK says so. Bootstrap is called
// once, before Run.
func (c *Controller) Bootstrap(logger klog.Logger) (*Config, error) {
	if c.bootstrapped {
		return nil, errors.New("config controller: Bootstrap called twice")
	}
	c.bootstrapped = true
	logger = logger.WithName("config")
	local := c.local.Config
	c.checksum = localChecksum(local)

	if err := c.open(); err != nil {
		logger.Error(err, "Remote config is disabled; using the local config")
		c.setStatus(configOK{corev1.ConditionTrue, fmt.Sprintf(reasonNotDynamic, err), msgLocalNotDynamic})
		return local, nil
	}
	st, err := readState(c.store.Dir())
	if err != nil {
		logger.Error(err, "Ignoring the config controller's state; counting failed starts from zero")
	}
	c.state = st

	cfg, reason, err := c.loadAssigned(logger)
	if err == nil {
		c.inUse = inUse{Source: c.assigned.Source}
		c.setStatus(configOK{corev1.ConditionTrue, reason, usingMessage(c.assigned.Source, false)})
		logger.Info("Using the assigned config", "source", sourceName(c.assigned.Source), "onTrial", c.onTrial, "failedStarts", c.state.Trial.FailedStarts)
		return cfg, nil
	}
	logger.Error(err, "The assigned config cannot be used; using the last-known-good", "reason", reason)

	lkg, lkgErr := c.store.LastKnownGood()
	var lkgSrc *checkpoint.Source
	if lkgErr == nil {
		lkgSrc = lkg.Source
	}
	if lkgErr == nil && lkgSrc != nil {
		var lkgReason string
		cfg, lkgReason, lkgErr = c.loadRemote(*lkgSrc, reasonLKGFailLoad, reasonLKGFailParse, reasonLKGFailValidate)
		if lkgErr != nil {
			lkgErr = fmt.Errorf("%s: %w", lkgReason, lkgErr)
		}
	}
	if lkgErr != nil {
		// Nothing remote can be trusted: the local config is valid.
		logger.Error(lkgErr, "The last-known-good config cannot be used either; using the local config")
		c.inUse, c.checksum = inUse{LastKnownGood: true}, localChecksum(local)
		c.setStatus(configOK{corev1.ConditionFalse, reason, withDetail(withDetail(msgLocalNotDynamic, err), lkgErr)})
		return local, nil
	}
	c.inUse = inUse{Source: lkgSrc, LastKnownGood: true}
	if lkgSrc == nil {
		cfg, c.checksum = local, localChecksum(local)
	}
	c.setStatus(configOK{corev1.ConditionFalse, reason, withDetail(usingMessage(lkgSrc, true), err)})
	logger.Info("Using the last-known-good config", "source", sourceName(lkgSrc))
	return cfg, nil
}

// open takes the store's lock and opens the store.
func (c *Controller) open() error {
	root := c.local.Config.RootDir
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("create root directory: %w", err)
	}
	path := filepath.Join(root, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("%s is held by another nodelet with the same rootDir %s", path, root)
		}
		return fmt.Errorf("lock %s: %w", path, err)
	}
	store, err := checkpoint.Open(root, checkpoint.WithClock(c.opts.Clock))
	if err != nil {
		f.Close()
		return err
	}
	c.lock, c.store = f, store
	return nil
}

// loadAssigned loads the assigned config. On success reason is the one to
// report; on failure it is the reference's reason for the failing step.
func (c *Controller) loadAssigned(logger klog.Logger) (*Config, string, error) {
	rec, err := c.store.Assigned()
	if err != nil {
		return nil, fmt.Sprintf(reasonFailLoad, "unknown"), err
	}
	c.assigned, c.assignedOK = rec, true
	if rec.Source == nil {
		c.checksum = localChecksum(c.local.Config)
		return c.local.Config, reasonCurrentLocalOK, nil
	}
	src := *rec.Source
	cfg, reason, err := c.loadRemote(src, reasonFailLoad, reasonFailParse, reasonFailValidate)
	if err != nil {
		return nil, reason, err
	}
	c.trialEnd = rec.Time.Add(cfg.ConfigTrialDuration.Duration)
	if !c.opts.Clock.Now().Before(c.trialEnd) {
		return cfg, reasonCurrentRemoteOK, nil // past its trial
	}
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.state.Trial.Source == nil || *c.state.Trial.Source != src {
		c.state.Trial = trialState{Source: &src}
	}
	if n := c.state.Trial.FailedStarts; n >= MaxFailedStarts {
		return nil, fmt.Sprintf(reasonFailCrashLoop, src),
			fmt.Errorf("%d starts in a row did not become healthy within the trial period (until %s)", n, c.trialEnd.UTC().Format(time.RFC3339))
	}
	// Counted as failed until it becomes healthy.
	c.state.Trial.FailedStarts++
	if err := writeState(c.store.Dir(), c.state); err != nil {
		logger.Error(err, "Cannot record the start of the config on trial; a crash loop may go unnoticed")
	}
	c.onTrial = true
	return cfg, reasonCurrentRemoteOK, nil
}

// loadRemote loads, parses and validates the checkpoint of src, giving the
// reason of the step that failed.
func (c *Controller) loadRemote(src checkpoint.Source, load, parse, validate string) (*Config, string, error) {
	data, err := c.store.Load(src)
	if err != nil {
		return nil, fmt.Sprintf(load, src), err
	}
	cfg, err := c.local.Compose(data, src.String())
	var pe errParse
	if errors.As(err, &pe) {
		return nil, fmt.Sprintf(parse, src), err
	}
	if err != nil {
		return nil, fmt.Sprintf(validate, src), err
	}
	c.checksum = checkpoint.Checksum(data)
	return cfg, "", nil
}

// localChecksum identifies the local config: the checksum of its settings
// as JSON.
func localChecksum(cfg *Config) string {
	data, err := json.Marshal(cfg)
	if err != nil {
		return ""
	}
	return checkpoint.Checksum(data)
}

// setStatus records the ConfigOK condition Bootstrap decided.
func (c *Controller) setStatus(s configOK) {
	c.mu.Lock()
	c.status = s
	c.mu.Unlock()
	c.metrics.setActive(c.inUse.Source, c.checksum)
	c.statusChanged()
}

// setSyncFailure records why the last sync failed, or that it worked
// (""): while it fails, ConfigOK is False with that reason.
func (c *Controller) setSyncFailure(reason string) {
	c.mu.Lock()
	changed := c.syncFailure != reason
	c.syncFailure = reason
	c.mu.Unlock()
	if changed {
		c.statusChanged()
	}
}

func (c *Controller) statusChanged() {
	cond := c.condition()
	c.metrics.setOK(cond.Status == corev1.ConditionTrue)
	c.mu.Lock()
	f := c.onChange
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

// condition is the ConfigOK condition now, without times.
func (c *Controller) condition() corev1.NodeCondition {
	c.mu.Lock()
	defer c.mu.Unlock()
	cond := corev1.NodeCondition{
		Type:    ConditionConfigOK,
		Status:  c.status.status,
		Reason:  c.status.reason,
		Message: c.status.message,
	}
	if c.syncFailure != "" {
		cond.Status, cond.Reason = corev1.ConditionFalse, c.syncFailure
	}
	return cond
}

// Conditions gives the node status its ConfigOK condition: every node of
// the agent runs the same config. It is empty before Bootstrap.
func (c *Controller) Conditions(string) []corev1.NodeCondition {
	if cond := c.condition(); cond.Status != "" {
		return []corev1.NodeCondition{cond}
	}
	return nil
}

// OnChange sets the function called whenever the ConfigOK condition may
// have changed.
func (c *Controller) OnChange(f func()) {
	c.mu.Lock()
	c.onChange = f
	c.mu.Unlock()
}

// Close releases the checkpoint store's lock. The agent's exit does too.
func (c *Controller) Close() error {
	if c.lock == nil {
		return nil
	}
	err := c.lock.Close()
	c.lock = nil
	return err
}
