package config

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

func TestDefaultsAreValid(t *testing.T) {
	c := Default()
	c.NodeName = "n"
	if errs := c.Validate(); len(errs) != 0 {
		t.Errorf("defaults with a node name: %v", errs)
	}
	if c.NodeLeaseDurationSeconds != 40 || c.NodeStatusReportFrequency.Duration != 5*time.Minute || c.PingInterval.Duration != 10*time.Second {
		t.Errorf("timing defaults = %d s, %s, %s; want 40 s, 5m, 10s", c.NodeLeaseDurationSeconds, c.NodeStatusReportFrequency.Duration, c.PingInterval.Duration)
	}
	if c.Sim.Capacity.Cpu().String() != "32" || c.Sim.Capacity.Memory().String() != "256Gi" || c.Sim.Capacity.Pods().String() != "110" {
		t.Errorf("sim capacity defaults = %v", c.Sim.Capacity)
	}
}

func TestValidateNamesEveryField(t *testing.T) {
	c := Default()
	c.NodeName = "Bad_Name"
	c.NodeLeaseDurationSeconds = -1
	c.PingInterval.Duration = -time.Second
	c.Port = 70000
	c.Shard = "2/2"
	c.Provider = "docker"
	c.Sim.PodCIDR = "nope"
	c.EvictionHard = map[string]string{"memory.available": "lots"}
	c.EvictionMaxPodGracePeriod = -1
	c.ContentType = "application/yaml"
	c.RuntimeCgroups, c.SystemCgroups = "runtime", "/"
	errs := c.Validate()
	msg := errs.ToAggregate().Error()
	for _, field := range []string{"nodeName", "nodeLeaseDurationSeconds", "pingInterval", "port", "shard", "provider", "sim.podCIDR",
		"evictionHard[memory.available]", "evictionMaxPodGracePeriod", "contentType", "runtimeCgroups", "systemCgroups"} {
		if !strings.Contains(msg, field) {
			t.Errorf("validation errors do not name %s: %s", field, msg)
		}
	}
}

func TestParseShard(t *testing.T) {
	for _, tt := range []struct {
		in      string
		i, n    int
		wantErr bool
	}{
		{"0/1", 0, 1, false},
		{"1/2", 1, 2, false},
		{"2/2", 0, 0, true},
		{"-1/2", 0, 0, true},
		{"1/0", 0, 0, true},
		{"1/2x", 0, 0, true},
		{"a/b", 0, 0, true},
	} {
		i, n, err := ParseShard(tt.in)
		if (err != nil) != tt.wantErr || i != tt.i || n != tt.n {
			t.Errorf("ParseShard(%q) = %d, %d, %v", tt.in, i, n, err)
		}
	}
}

func TestLoadFileIsStrict(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nnodeName: a\nnodes: 3\nsim:\n  startDelay: 2s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeName != "a" || c.Nodes != 3 || c.Sim.StartDelay.Duration != 2*time.Second {
		t.Errorf("loaded %+v", c)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("nodeName: a\nnodeLables: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(bad); err == nil || !strings.Contains(err.Error(), "nodeLables") || !strings.Contains(err.Error(), bad) {
		t.Errorf("unknown field: %v, want an error naming the field and the file", err)
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestSimLifecycleDefaults(t *testing.T) {
	c := Default()
	if c.Sim.RunDuration.Duration != 0 || c.Sim.CompleteRatio != 0 || c.Sim.FailRatio != 0 || c.Sim.StartJitter.Duration != 0 || len(c.Sim.NodeConditions) != 0 {
		t.Errorf("sim lifecycle defaults are not today's behaviour: %+v", c.Sim)
	}

	c = &Config{Sim: SimConfig{
		FailRatio: 0.1,
		NodeConditions: []SimNodeCondition{
			{Type: corev1.NodeReady},
			{Type: corev1.NodeDiskPressure, Reason: "Full", NodeRatio: ptr.To(0.0)},
		},
	}}
	SetDefaults(c)
	if c.Sim.RunDuration.Duration != 10*time.Second {
		t.Errorf("runDuration with failRatio set = %v, want 10s", c.Sim.RunDuration.Duration)
	}
	ready, disk := c.Sim.NodeConditions[0], c.Sim.NodeConditions[1]
	if ready.Status != corev1.ConditionFalse || ready.Reason != "Simulated" || ready.NodeRatio == nil || *ready.NodeRatio != 1 {
		t.Errorf("Ready entry defaulted to %s %s %v", ready.Status, ready.Reason, ready.NodeRatio)
	}
	if disk.Status != corev1.ConditionTrue || disk.Reason != "Full" || *disk.NodeRatio != 0 {
		t.Errorf("DiskPressure entry defaulted to %s %s %v", disk.Status, disk.Reason, *disk.NodeRatio)
	}
}

func TestValidateSim(t *testing.T) {
	tests := []struct {
		name    string
		sim     func(*SimConfig)
		wantErr []string // field paths
	}{
		{name: "valid", sim: func(s *SimConfig) {
			s.StartJitter.Duration, s.DeleteJitter.Duration, s.RunJitter.Duration = time.Second, time.Second, time.Second
			s.CompleteRatio, s.FailRatio = 0.7, 0.3
			s.NodeConditions = []SimNodeCondition{{Type: "example.com/Degraded", Every: metav1.Duration{Duration: time.Minute}, For: metav1.Duration{Duration: time.Minute}}}
		}},
		{name: "negative jitters", sim: func(s *SimConfig) {
			s.StartJitter.Duration, s.DeleteJitter.Duration, s.RunJitter.Duration, s.RunDuration.Duration = -1, -1, -1, -1
		}, wantErr: []string{"sim.startJitter", "sim.deleteJitter", "sim.runDuration", "sim.runJitter"}},
		{name: "ratios out of range", sim: func(s *SimConfig) { s.CompleteRatio, s.FailRatio = -0.1, 1.1 },
			wantErr: []string{"sim.completeRatio", "sim.failRatio"}},
		{name: "ratios add up above 1", sim: func(s *SimConfig) { s.CompleteRatio, s.FailRatio = 0.6, 0.5 },
			wantErr: []string{"sim.failRatio"}},
		{name: "bad usage and node addresses", sim: func(s *SimConfig) {
			s.NodeAddresses = "127.0.0.300/24"
			s.Usage = SimUsage{CPURequestRatio: ptr.To(-1.0), MemoryRequestRatio: ptr.To(math.NaN()), Noise: 1.5}
		}, wantErr: []string{"sim.nodeAddresses", "sim.usage.cpuRequestRatio", "sim.usage.memoryRequestRatio", "sim.usage.noise"}},
		{name: "bad node conditions", sim: func(s *SimConfig) {
			s.NodeConditions = []SimNodeCondition{
				{Type: corev1.NodeReady, Every: metav1.Duration{Duration: time.Minute}, For: metav1.Duration{Duration: time.Second}},
				{Type: "bad type!", Status: "Maybe", For: metav1.Duration{Duration: -time.Second}, NodeRatio: ptr.To(2.0)},
				{Type: corev1.NodeReady, Every: metav1.Duration{Duration: time.Minute}, For: metav1.Duration{Duration: time.Hour}},
			}
		}, wantErr: []string{
			"sim.nodeConditions[1].type", "sim.nodeConditions[1].status", "sim.nodeConditions[1].every",
			"sim.nodeConditions[1].for", "sim.nodeConditions[1].nodeRatio", "sim.nodeConditions[2].for",
		}},
		{name: "topology", sim: func(s *SimConfig) {
			s.Zones, s.Region, s.InstanceType = []string{"zone-a", "zone-b"}, "region-1", "m5.large"
		}},
		{name: "empty, duplicate and bad zones", sim: func(s *SimConfig) {
			s.Zones = []string{"zone-a", "", "zone-a", "zone c"}
		}, wantErr: []string{"sim.zones[1]", "sim.zones[2]", "sim.zones[3]"}},
		{name: "bad region and instance type", sim: func(s *SimConfig) {
			s.Region, s.InstanceType = "-west", strings.Repeat("x", 64)
		}, wantErr: []string{"sim.region", "sim.instanceType"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Config{NodeName: "n"}
			tt.sim(&c.Sim)
			SetDefaults(c)
			errs := c.Validate()
			var got []string
			for _, e := range errs {
				got = append(got, e.Field)
			}
			if strings.Join(got, ",") != strings.Join(tt.wantErr, ",") {
				t.Errorf("errors on %v, want %v: %v", got, tt.wantErr, errs)
			}
		})
	}
}

func TestValidateSimStages(t *testing.T) {
	kwokFast := filepath.Join("..", "stage", "testdata", "kwok", "pod", "fast")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: broken}\nspec:\n  resourceRef: {apiGroup: v1, kind: Pod}\n  selector: {matchExpressions: [{key: '.status.[', operator: In, values: [x]}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badRule := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(badRule, []byte("apiVersion: kwok.x-k8s.io/v1alpha1\nkind: ResourceUsage\nmetadata: {name: web}\nspec:\n  usages: [{usage: {cpu: {expression: '1 +'}}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		sim     func(*SimConfig)
		wantErr []string // field paths
		wantMsg []string
	}{
		{name: "kwok's pod/fast", sim: func(s *SimConfig) { s.Stages = []string{kwokFast} }},
		{name: "bad stage file", sim: func(s *SimConfig) { s.Stages = []string{kwokFast, bad} },
			wantErr: []string{"sim.stages[1]"}, wantMsg: []string{bad, `stage "broken"`, "spec.selector.matchExpressions[0]"}},
		{name: "missing and empty", sim: func(s *SimConfig) { s.Stages = []string{"/no/such/stages", ""} },
			wantErr: []string{"sim.stages[0]", "sim.stages[1]"}},
		{name: "enableCRDs", sim: func(s *SimConfig) { s.EnableCRDs = []string{"Stage", "Logs", "Metric", "ClusterResourceUsage"} },
			wantErr: []string{"sim.enableCRDs[2]"}},
		{name: "bad kwok object beside the stages", sim: func(s *SimConfig) { s.Stages = []string{kwokFast, badRule} },
			wantErr: []string{"sim.stages[1]"}, wantMsg: []string{badRule, "ResourceUsage default/web", "spec.usages[0].usage[cpu].expression", "failed to compile metric expression"}},
		{name: "cluster stages beside the pod lifecycle settings", sim: func(s *SimConfig) {
			s.EnableCRDs, s.StartDelay.Duration = []string{"Stage"}, time.Second
		}},
		{name: "beside the pod lifecycle settings", sim: func(s *SimConfig) {
			s.Stages = []string{kwokFast}
			s.StartDelay.Duration, s.CompleteRatio = time.Second, 0.5
		}, wantErr: []string{"sim.startDelay", "sim.completeRatio"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Config{NodeName: "n"}
			tt.sim(&c.Sim)
			SetDefaults(c)
			errs := c.Validate()
			var got []string
			for _, e := range errs {
				got = append(got, e.Field)
			}
			if strings.Join(got, ",") != strings.Join(tt.wantErr, ",") {
				t.Errorf("errors on %v, want %v: %v", got, tt.wantErr, errs)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(errs.ToAggregate().Error(), m) {
					t.Errorf("errors %v do not say %q", errs, m)
				}
			}
		})
	}
}

func TestSimTopologyDefaults(t *testing.T) {
	c := Default()
	if len(c.Sim.Zones) != 0 || c.Sim.Region != "" || c.Sim.InstanceType != "nodelet-sim" {
		t.Errorf("sim topology defaults: zones %v, region %q, instanceType %q; want none, none, nodelet-sim", c.Sim.Zones, c.Sim.Region, c.Sim.InstanceType)
	}
	c = &Config{Sim: SimConfig{InstanceType: "m5.large"}}
	SetDefaults(c)
	if c.Sim.InstanceType != "m5.large" {
		t.Errorf("instanceType set to m5.large defaulted to %q", c.Sim.InstanceType)
	}
}

func TestLoadSimLifecycle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chaos.yaml")
	data := `apiVersion: nodelet.io/v1alpha1
kind: NodeletConfiguration
nodeName: sim
sim:
  startDelay: 1s
  startJitter: 4s
  deleteDelay: 2s
  deleteJitter: 3s
  completeRatio: 0.2
  failRatio: 0.05
  runDuration: 1m
  runJitter: 30s
  nodeConditions:
  - type: Ready
    status: "False"
    reason: ChaosMonkey
    every: 10m
    for: 1m
    nodeRatio: 0.1
  - type: MemoryPressure
    every: 1h
    for: 5m
  zones: [zone-a, zone-b, zone-c]
  region: region-1
  instanceType: m5.large
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	SetDefaults(c)
	if errs := c.Validate(); len(errs) != 0 {
		t.Fatalf("invalid: %v", errs)
	}
	s := c.Sim
	if s.StartJitter.Duration != 4*time.Second || s.DeleteJitter.Duration != 3*time.Second || s.CompleteRatio != 0.2 || s.FailRatio != 0.05 ||
		s.RunDuration.Duration != time.Minute || s.RunJitter.Duration != 30*time.Second {
		t.Errorf("loaded %+v", s)
	}
	want := []SimNodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "ChaosMonkey", Every: metav1.Duration{Duration: 10 * time.Minute}, For: metav1.Duration{Duration: time.Minute}, NodeRatio: ptr.To(0.1)},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue, Reason: "Simulated", Every: metav1.Duration{Duration: time.Hour}, For: metav1.Duration{Duration: 5 * time.Minute}, NodeRatio: ptr.To(1.0)},
	}
	if !reflect.DeepEqual(s.NodeConditions, want) {
		t.Errorf("node conditions\n got %+v\nwant %+v", s.NodeConditions, want)
	}
	if !reflect.DeepEqual(s.Zones, []string{"zone-a", "zone-b", "zone-c"}) || s.Region != "region-1" || s.InstanceType != "m5.large" {
		t.Errorf("loaded topology: zones %v, region %q, instanceType %q", s.Zones, s.Region, s.InstanceType)
	}
}

func TestServerTLSBootstrap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nnodeName: a\nserverTLSBootstrap: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	SetDefaults(c)
	if !c.ServerTLSBootstrap {
		t.Fatal("serverTLSBootstrap: true not loaded")
	}
	if errs := c.Validate(); len(errs) != 0 {
		t.Errorf("serverTLSBootstrap alone: %v", errs)
	}
	c.TLSCertFile, c.TLSPrivateKeyFile = "/etc/nodelet/tls.crt", "/etc/nodelet/tls.key"
	if msg := c.Validate().ToAggregate(); msg == nil || !strings.Contains(msg.Error(), "serverTLSBootstrap") {
		t.Errorf("serverTLSBootstrap with tlsCertFile: %v, want an error naming serverTLSBootstrap", msg)
	}
}

func TestConfigTrialDuration(t *testing.T) {
	if d := Default().ConfigTrialDuration.Duration; d != 10*time.Minute {
		t.Errorf("configTrialDuration default = %s, want 10m", d)
	}
	c := &Config{ConfigTrialDuration: metav1.Duration{Duration: time.Minute}}
	SetDefaults(c)
	if c.ConfigTrialDuration.Duration != time.Minute {
		t.Errorf("a set configTrialDuration was defaulted to %s", c.ConfigTrialDuration.Duration)
	}
	c.NodeName = "n"
	c.ConfigTrialDuration.Duration = -time.Second
	if msg := c.Validate().ToAggregate(); msg == nil || !strings.Contains(msg.Error(), "configTrialDuration") {
		t.Errorf("negative configTrialDuration: %v, want an error naming it", msg)
	}
}

func TestAttachDetach(t *testing.T) {
	c := Default()
	a := c.AttachDetach
	if !c.AttachDetachEnabled() || a.Attacher != AttacherCSI || a.ReconcilerLoopPeriod.Duration != 100*time.Millisecond ||
		a.ReconcilerSyncPeriod.Duration != time.Minute || a.MaxWaitForUnmount.Duration != 6*time.Minute {
		t.Errorf("attachDetach defaults = %+v", a)
	}
	c.NodeName = "n"
	c.AttachDetach = AttachDetachConfig{
		Enabled:              c.AttachDetach.Enabled,
		Attacher:             "nfs",
		ReconcilerLoopPeriod: metav1.Duration{Duration: -time.Second},
		ReconcilerSyncPeriod: metav1.Duration{Duration: -time.Second},
		MaxWaitForUnmount:    metav1.Duration{Duration: -time.Second},
		SimLatency:           metav1.Duration{Duration: -time.Second},
		SimFailureRate:       2,
	}
	msg := c.Validate().ToAggregate().Error()
	for _, f := range []string{"attachDetach.attacher", "attachDetach.reconcilerLoopPeriod", "attachDetach.reconcilerSyncPeriod",
		"attachDetach.maxWaitForUnmount", "attachDetach.simLatency", "attachDetach.simFailureRate"} {
		if !strings.Contains(msg, f) {
			t.Errorf("validation errors do not name %s: %s", f, msg)
		}
	}
	off := false
	c = &Config{AttachDetach: AttachDetachConfig{Enabled: &off}}
	SetDefaults(c)
	if c.AttachDetachEnabled() {
		t.Error("attachDetach.enabled false was defaulted to true")
	}
}

func TestEvictionDefaults(t *testing.T) {
	c := Default()
	want := map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%", "imagefs.inodesFree": "5%"}
	if !reflect.DeepEqual(c.EvictionHard, want) || c.EvictionPressureTransitionPeriod.Duration != 5*time.Minute ||
		c.EvictionMaxPodGracePeriod != 0 || c.EvictionSoft != nil || c.EvictionSoftGracePeriod != nil || c.EvictionMinimumReclaim != nil {
		t.Errorf("eviction defaults: hard %v, transition %s, max grace %d, soft %v %v, min reclaim %v", c.EvictionHard,
			c.EvictionPressureTransitionPeriod.Duration, c.EvictionMaxPodGracePeriod, c.EvictionSoft, c.EvictionSoftGracePeriod, c.EvictionMinimumReclaim)
	}
	// Defaults are never merged into the user's thresholds, as with the
	// kubelet: setting one drops the others.
	c = &Config{EvictionHard: map[string]string{"memory.available": "1Gi"}, EvictionPressureTransitionPeriod: metav1.Duration{Duration: time.Minute}}
	SetDefaults(c)
	if !reflect.DeepEqual(c.EvictionHard, map[string]string{"memory.available": "1Gi"}) || c.EvictionPressureTransitionPeriod.Duration != time.Minute {
		t.Errorf("set eviction fields were defaulted: %v, %s", c.EvictionHard, c.EvictionPressureTransitionPeriod.Duration)
	}
	// Each Default gets its own map.
	Default().EvictionHard["memory.available"] = "1Ki"
	if Default().EvictionHard["memory.available"] != "100Mi" {
		t.Error("the default evictionHard map is shared")
	}
}

func TestLoadEviction(t *testing.T) {
	c, err := Decode([]byte(header+`nodeName: a
evictionHard:
  memory.available: 500Mi
  nodefs.available: "5%"
evictionSoft:
  memory.available: 1Gi
evictionSoftGracePeriod:
  memory.available: 1m30s
evictionMinimumReclaim:
  memory.available: 200Mi
evictionPressureTransitionPeriod: 30s
evictionMaxPodGracePeriod: 60
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	SetDefaults(c)
	if errs := c.Validate(); len(errs) != 0 {
		t.Fatalf("invalid: %v", errs)
	}
	if len(c.EvictionHard) != 2 || c.EvictionSoft["memory.available"] != "1Gi" || c.EvictionSoftGracePeriod["memory.available"] != "1m30s" ||
		c.EvictionMinimumReclaim["memory.available"] != "200Mi" || c.EvictionPressureTransitionPeriod.Duration != 30*time.Second || c.EvictionMaxPodGracePeriod != 60 {
		t.Errorf("loaded %v %v %v %v %s %d", c.EvictionHard, c.EvictionSoft, c.EvictionSoftGracePeriod, c.EvictionMinimumReclaim,
			c.EvictionPressureTransitionPeriod.Duration, c.EvictionMaxPodGracePeriod)
	}
}

func TestValidateEviction(t *testing.T) {
	tests := []struct {
		name    string
		set     func(*Config)
		wantErr []string // each in the errors
	}{
		{name: "valid", set: func(c *Config) {
			c.EvictionHard = map[string]string{"memory.available": "100Mi", "pid.available": "0%"}
			c.EvictionSoft = map[string]string{"nodefs.available": "15%"}
			c.EvictionSoftGracePeriod = map[string]string{"nodefs.available": "2m"}
			c.EvictionMinimumReclaim = map[string]string{"nodefs.available": "1Gi"}
		}},
		{name: "bad values name the field and key", set: func(c *Config) {
			c.EvictionHard = map[string]string{"memory.available": "lots", "disk.available": "1Gi"}
			c.EvictionSoft = map[string]string{"memory.available": "200%"}
			c.EvictionSoftGracePeriod = map[string]string{"memory.available": "soon"}
			c.EvictionMinimumReclaim = map[string]string{"nodefs.available": "-1Gi"}
		}, wantErr: []string{
			`evictionHard[memory.available]: Invalid value: "lots": must be a quantity such as 100Mi or a percentage such as 10%`,
			`evictionHard[disk.available]: Unsupported value: "disk.available"`,
			`evictionSoft[memory.available]: Invalid value: "200%"`,
			`evictionSoftGracePeriod[memory.available]: Invalid value: "soon"`,
			`evictionMinimumReclaim[nodefs.available]: Invalid value: "-1Gi"`,
		}},
		{name: "a soft threshold needs a grace period", set: func(c *Config) {
			c.EvictionSoft = map[string]string{"memory.available": "1Gi"}
		}, wantErr: []string{`evictionSoftGracePeriod[memory.available]: Required value`}},
		{name: "negative periods", set: func(c *Config) {
			c.EvictionPressureTransitionPeriod.Duration = -time.Second
			c.EvictionMaxPodGracePeriod = -1
		}, wantErr: []string{`evictionPressureTransitionPeriod: Invalid value: "-1s"`, `evictionMaxPodGracePeriod: Invalid value: -1`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Config{NodeName: "n"}
			tt.set(c)
			SetDefaults(c)
			errs := c.Validate()
			wantErrors(t, errs, tt.wantErr)
		})
	}
}

func TestValidateShutdown(t *testing.T) {
	tests := []struct {
		name    string
		set     func(*Config)
		wantErr []string // each in the errors
	}{
		{name: "ordinary and critical", set: func(c *Config) {
			c.ShutdownGracePeriod.Duration, c.ShutdownGracePeriodCriticalPods.Duration = 30*time.Second, 10*time.Second
		}},
		{name: "by priority", set: func(c *Config) {
			c.ShutdownGracePeriodByPodPriority = []ShutdownGracePeriodByPodPriority{{Priority: 0, ShutdownGracePeriodSeconds: 10}, {Priority: 1000, ShutdownGracePeriodSeconds: 5}}
		}},
		{name: "critical beyond the whole", set: func(c *Config) {
			c.ShutdownGracePeriod.Duration, c.ShutdownGracePeriodCriticalPods.Duration = 10*time.Second, 20*time.Second
		}, wantErr: []string{`shutdownGracePeriodCriticalPods: Invalid value: "20s": must be between 0 and shutdownGracePeriod`}},
		{name: "negative", set: func(c *Config) {
			c.ShutdownGracePeriod.Duration = -time.Second
		}, wantErr: []string{`shutdownGracePeriod: Invalid value: "-1s"`}},
		{name: "both ways, a repeated priority, a negative time", set: func(c *Config) {
			c.ShutdownGracePeriod.Duration = 30 * time.Second
			c.ShutdownGracePeriodByPodPriority = []ShutdownGracePeriodByPodPriority{{Priority: 5, ShutdownGracePeriodSeconds: 10}, {Priority: 5, ShutdownGracePeriodSeconds: -1}}
		}, wantErr: []string{
			`shutdownGracePeriodByPodPriority: Forbidden: cannot be set with shutdownGracePeriod`,
			`shutdownGracePeriodByPodPriority[1].priority: Duplicate value: 5`,
			`shutdownGracePeriodByPodPriority[1].shutdownGracePeriodSeconds: Invalid value: -1`,
		}},
		{name: "sim runs no host pods", set: func(c *Config) {
			c.Provider = ProviderSim
			c.ShutdownGracePeriod.Duration = 30 * time.Second
		}, wantErr: []string{`shutdownGracePeriod: Invalid value: "30s": graceful node shutdown needs a provider of this host's pods`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Config{NodeName: "n", Provider: ProviderProcess}
			tt.set(c)
			SetDefaults(c)
			errs := c.validateShutdown()
			wantErrors(t, errs, tt.wantErr)
		})
	}
}

// wantErrors checks that errs are as many as want and say each of them.
func wantErrors(t *testing.T, errs field.ErrorList, want []string) {
	t.Helper()
	if len(errs) != len(want) {
		t.Errorf("%d errors, want %d: %v", len(errs), len(want), errs)
	}
	msg := errs.ToAggregate()
	for _, w := range want {
		if msg == nil || !strings.Contains(msg.Error(), w) {
			t.Errorf("errors %v do not say %q", msg, w)
		}
	}
}

func TestValidateGoRuntime(t *testing.T) {
	tests := []struct {
		name    string
		set     func(*Config)
		wantErr []string
	}{
		{name: "unset", set: func(*Config) {}},
		{name: "limit and percent", set: func(c *Config) {
			c.GoMemoryLimit = ptr.To(resource.MustParse("460Mi"))
			c.GoGCPercent = ptr.To[int32](50)
		}},
		{name: "collector off under a limit", set: func(c *Config) {
			c.GoMemoryLimit = ptr.To(resource.MustParse("1Gi"))
			c.GoGCPercent = ptr.To[int32](-1)
		}},
		{name: "collector off without a limit", set: func(c *Config) {
			c.GoGCPercent = ptr.To[int32](-1)
		}, wantErr: []string{`goGCPercent: Invalid value: -1: -1 turns the garbage collector off: set goMemoryLimit too`}},
		{name: "zero limit, negative percent", set: func(c *Config) {
			c.GoMemoryLimit = ptr.To(resource.MustParse("0"))
			c.GoGCPercent = ptr.To[int32](-2)
		}, wantErr: []string{
			`goMemoryLimit: Invalid value: "0": must be greater than 0`,
			`goGCPercent: Invalid value: -2: must be -1 (off) or at least 0`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.NodeName = "n"
			tt.set(c)
			wantErrors(t, c.Validate(), tt.wantErr)
		})
	}
}

func TestLoadGoRuntime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	data := "apiVersion: " + APIVersion + "\nkind: " + Kind + "\nnodeName: node\ngoMemoryLimit: 460Mi\ngoGCPercent: 50\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.GoMemoryLimit == nil || c.GoMemoryLimit.Value() != 460<<20 || c.GoGCPercent == nil || *c.GoGCPercent != 50 {
		t.Errorf("goMemoryLimit %v, goGCPercent %v; want 460Mi and 50", c.GoMemoryLimit, c.GoGCPercent)
	}
	if d := Default(); d.GoMemoryLimit != nil || d.GoGCPercent != nil {
		t.Errorf("defaults goMemoryLimit %v, goGCPercent %v; want both unset (Go's own)", d.GoMemoryLimit, d.GoGCPercent)
	}
}
