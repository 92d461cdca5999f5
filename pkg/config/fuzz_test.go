package config

import (
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzDecode decodes, defaults and validates arbitrary bytes. Nothing may
// panic; every decode error is an ErrDecode; and a config that decodes and
// validates must survive a round trip through YAML (what
// `nodelet config defaults` prints must load again).
func FuzzDecode(f *testing.F) {
	defaults := Default()
	defaults.NodeName = "n"
	out, err := yaml.Marshal(defaults)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		docsExample,
		string(out),
		header + "nodeName: a\n",
		header + "nodeName: a\nprovider: process\nenableServer: true\nport: 10250\nsystemReserved:\n  cpu: 500m\n",
		header + "pingIntervall: 5s\n",
		header + "port: 1\nport: 2\n",
		header + "port: high\n",
		header + "pingInterval: -1s\nconfigTrialDuration: -5m\n",
		header + "sim:\n  nodeConditions:\n  - type: Ready\n    every: 1m\n    for: 2m\n    nodeRatio: 2\n",
		header + "registerWithTaints:\n- key: a\n  effect: [x]\n",
		header + "containerLogMaxSize: 1e400\nkubeAPIQPS: 1e39\n",
		header + "nodeName: &a x\nshard: *a\n",
		header + "evictionHard:\n  memory.available: 1Gi\nevictionSoft:\n  nodefs.available: \"10%\"\nevictionSoftGracePeriod:\n  nodefs.available: 1m\n",
		header + "evictionHard: {}\nevictionMinimumReclaim:\n  pid.available: 5%x\n",
		"apiVersion: nodelet.io/v1\nkind: NodeletConfiguration\n",
		`{"apiVersion":"nodelet.io/v1alpha1","kind":"NodeletConfiguration","nodes":-1}`,
		"a: &a [*a, *a]\n",
		"- - - - - - []\n",
		"~",
		"",
		"\x00\xff\xfe{[",
		"{" + strings.Repeat(`"a":{`, 50) + strings.Repeat("}", 51),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode(data, "fuzz")
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("Decode error %v is not an ErrDecode", err)
			}
			return
		}
		SetDefaults(c)
		if errs := c.Validate(); len(errs) > 0 {
			_ = errs.ToAggregate().Error()
			return
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("a valid config does not marshal: %v", err)
		}
		again, err := Decode(out, "round trip")
		if err != nil {
			t.Fatalf("a valid config does not decode again: %v\n%s", err, out)
		}
		SetDefaults(again)
		if errs := again.Validate(); len(errs) > 0 {
			t.Fatalf("a valid config is invalid after a round trip: %v\n%s", errs, out)
		}
	})
}

// FuzzCompose applies arbitrary bytes as a remote config over a local
// config file. Nothing may panic; an error is a parse or a validation
// error; a config that composes keeps the local config's identity.
func FuzzCompose(f *testing.F) {
	file, err := Decode([]byte(header+"nodeName: a\nrootDir: /var/lib/n\nnodeLabels:\n  x: \"1\"\nsim:\n  startDelay: 1s\n"), "file")
	if err != nil {
		f.Fatal(err)
	}
	localCfg, err := Decode([]byte(header+"nodeName: a\nrootDir: /var/lib/n\nnodeLabels:\n  x: \"1\"\nsim:\n  startDelay: 1s\n"), "file")
	if err != nil {
		f.Fatal(err)
	}
	SetDefaults(localCfg)
	local := Local{Config: localCfg, File: file}
	for _, seed := range []string{
		header + "nodeStatusReportFrequency: 1m\n",
		header + "nodeLabels:\n  z: w\n",
		header + "nodeLabels: null\nsim: null\n",
		header + "sim:\n  startDelay: null\n  deleteDelay: 2s\n",
		header + "nodeName: b\nrootDir: /x\n",
		header + "nodeName: a\n",
		header + "pingInterval: -1s\n",
		header + "registerWithTaints: [{key: a, effect: NoSchedule}]\n",
		"[1, 2]",
		"null",
		header + "sim: 5\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := local.Compose(data, "fuzz")
		if err != nil {
			var pe errParse
			var ve errValidate
			if !errors.As(err, &pe) && !errors.As(err, &ve) {
				t.Fatalf("Compose error %T %v is neither a parse nor a validation error", err, err)
			}
			return
		}
		if cfg.NodeName != "a" || cfg.RootDir != "/var/lib/n" || cfg.Provider != localCfg.Provider {
			t.Fatalf("composed config changed the identity: nodeName %q rootDir %q provider %q", cfg.NodeName, cfg.RootDir, cfg.Provider)
		}
	})
}
