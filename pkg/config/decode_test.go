package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const header = "apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\n"

// docsExample is the example config file of docs/configuration.md, with configTrialDuration.
const docsExample = header + `nodeName: sim-a
nodeLabels:
  topology.kubernetes.io/zone: zone-a
registerWithTaints:
- key: nodelet.io/simulated
  value: "true"
  effect: NoSchedule
nodeStatusReportFrequency: 1m
configTrialDuration: 5m
sim:
  startDelay: 2s
  startJitter: 1s
  deleteDelay: 1s
  failRatio: 0.05
  runDuration: 30s
  nodeConditions:
  - type: MemoryPressure
    every: 10m
    for: 1m
    nodeRatio: 0.1
  capacity:
    cpu: "64"
    memory: 512Gi
    pods: "250"
`

func TestDecodeValid(t *testing.T) {
	c, err := Decode([]byte(docsExample), "test")
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeName != "sim-a" || c.NodeLabels["topology.kubernetes.io/zone"] != "zone-a" ||
		len(c.RegisterWithTaints) != 1 || c.RegisterWithTaints[0].Effect != corev1.TaintEffectNoSchedule ||
		c.NodeStatusReportFrequency.Duration != time.Minute || c.ConfigTrialDuration.Duration != 5*time.Minute ||
		c.Sim.FailRatio != 0.05 || len(c.Sim.NodeConditions) != 1 || c.Sim.Capacity.Memory().String() != "512Gi" {
		t.Errorf("decoded %+v", c)
	}
	SetDefaults(c)
	if errs := c.Validate(); len(errs) != 0 {
		t.Errorf("the example of docs/configuration.md is invalid: %v", errs)
	}

	// JSON is YAML.
	c, err = Decode([]byte(`{"apiVersion":"nodelet.io/v1alpha1","kind":"NodeletConfiguration","port":10251}`), "test")
	if err != nil || c.Port != 10251 {
		t.Errorf("JSON: %+v, %v", c, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // each in the error
		not  []string // none in the error
	}{
		{"unknown fields, every one", header + "pingIntervall: 5s\nsim:\n  startDelay: 1s\n  foo: 1\n",
			[]string{`unknown field "pingIntervall"`, `unknown field "sim.foo"`}, nil},
		{"keys are case-sensitive", header + "NodeName: a\n", []string{`unknown field "NodeName"`}, nil},
		{"duplicate field", header + "port: 1\nport: 2\n", []string{`"port" already set`, "line 4"}, nil},
		{"other apiVersion", "apiVersion: nodelet.io/v1\nkind: NodeletConfiguration\nsomething: 1\n",
			[]string{"apiVersion: Unsupported value", `"nodelet.io/v1"`}, []string{"something"}},
		{"other kind", "apiVersion: nodelet.io/v1alpha1\nkind: KubeletConfiguration\n",
			[]string{"kind: Unsupported value", "KubeletConfiguration"}, nil},
		{"no apiVersion or kind", "nodeName: a\nnodeLables: {}\n",
			[]string{"apiVersion: Required value", "kind: Required value", `unknown field "nodeLables"`}, nil},
		{"string for a number", header + "port: high\n", []string{`port: Invalid value: "high"`, "int32"}, nil},
		{"bad duration", header + "sim:\n  startDelay: soon\n", []string{`sim.startDelay: Invalid value: "soon"`, "invalid duration"}, nil},
		{"bad quantity", header + "containerLogMaxSize: 10Zi\n", []string{`containerLogMaxSize: Invalid value: "10Zi"`}, nil},
		{"bad value in a list", header + "registerWithTaints:\n- key: a\n  effect: NoSchedule\n- key: b\n  effect: [x]\n",
			[]string{"registerWithTaints[1].effect: Invalid value", "TaintEffect"}, nil},
		{"number for apiVersion", "apiVersion: 1\nkind: NodeletConfiguration\n", []string{"apiVersion: Invalid value: 1"}, nil},
		{"not YAML", header + "sim: [\n", []string{"yaml:"}, nil},
		{"empty", "", []string{"empty"}, nil},
		{"whitespace", " \n\t\n", []string{"empty"}, nil},
		{"null", "~\n", []string{"not a YAML mapping"}, nil},
		{"list", "- a\n", []string{"not a YAML mapping"}, nil},
		{"scalar", "hello\n", []string{"not a YAML mapping"}, nil},
		{"too large", header + "nodeName: " + strings.Repeat("a", MaxSize) + "\n", []string{"more than the limit"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const source = "ConfigMap kube-system/nodelet"
			c, err := Decode([]byte(tt.in), source)
			if err == nil {
				t.Fatalf("decoded %+v, want an error", c)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, source+": ") || !errors.Is(err, ErrDecode) {
				t.Errorf("error %q does not start with the source or is not ErrDecode", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(msg, n) {
					t.Errorf("error %q says %q", msg, n)
				}
			}
			var de *DecodeError
			if !errors.As(err, &de) || de.Source != source || len(de.Problems) == 0 {
				t.Errorf("error %#v is not a DecodeError with problems", err)
			}
		})
	}
}

func TestDecodeListsEveryProblem(t *testing.T) {
	_, err := Decode([]byte("nodeName: a\nb: 1\nc: 2\n"), "f")
	var de *DecodeError
	if !errors.As(err, &de) || len(de.Problems) != 4 { // apiVersion, kind, b, c
		t.Errorf("problems = %q, want 4", de.Problems)
	}
}

func TestDecodeReportsEveryMistypedValue(t *testing.T) {
	in := header + `nodeName: n
port: high
pingIntervall: 5s
registerWithTaints:
- key: a
  effect: [x]
- key: b
  effect: NoSchedule
- key: c
  effect: {y: 1}
sim:
  failRatio: most
  startDelay: soon
  foo: 1
`
	_, err := Decode([]byte(in), "f")
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("Decode = %v, want a DecodeError", err)
	}
	want := []string{
		`nodeName: Invalid value: false: cannot unmarshal bool into string (quote it`,
		`port: Invalid value: "high"`,
		`registerWithTaints[0].effect: Invalid value`,
		`registerWithTaints[2].effect: Invalid value`,
		`sim.failRatio: Invalid value: "most"`,
		`sim.startDelay: Invalid value: "soon"`,
		`unknown field "pingIntervall"`,
		`unknown field "sim.foo"`,
	}
	if len(de.Problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(de.Problems), len(want), strings.Join(de.Problems, "\n"))
	}
	for _, w := range want {
		found := false
		for _, p := range de.Problems {
			found = found || strings.Contains(p, w)
		}
		if !found {
			t.Errorf("no problem says %q:\n%s", w, strings.Join(de.Problems, "\n"))
		}
	}
}

func TestDecodeHintsAtQuoting(t *testing.T) {
	for in, want := range map[string]string{
		header + "nodeName: yes\n": "nodeName: Invalid value: true: cannot unmarshal bool into string (quote it: YAML reads",
		header + "sim:\n  nodeConditions:\n  - type: Ready\n    status: False\n": "sim.nodeConditions[0].status: Invalid value: false: cannot unmarshal bool into v1.ConditionStatus (quote it",
		header + "nodeLabels:\n  version: 1.0\n":                                 "nodeLabels.version: Invalid value: 1: cannot unmarshal number into string (quote it)",
	} {
		_, err := Decode([]byte(in), "f")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%q) = %v, want it to say %q", in, err, want)
		}
	}
}
