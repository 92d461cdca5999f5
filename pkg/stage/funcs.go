package stage

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/Masterminds/sprig/v3"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Env is what a template's functions tell of the world: the time, the
// node and the pod's addresses. kwok's functions that take a node name
// (NodeIPWith, PodIPWith …) answer for the node of Env, the only one its
// player knows.
type Env struct {
	// Now is the time the stage is played, Now's answer; StartTime is
	// when the player started.
	Now, StartTime time.Time
	NodeName       string
	NodeIPs        []string
	NodePort       int32
	// PodIPs are the IPs of the pod being played (PodIP, PodIPWith);
	// host-network pods get NodeIPs.
	PodIPs []string
	// Version is Version's answer, the simulator's version.
	Version string
}

// The functions of kwok's templates, besides text/template's own: its
// own (Quote, YAML, Now, StartTime, Version, NodeConditions and those
// of the node and pod), over sprig's (github.com/Masterminds/sprig, as
// kwok takes them) less those that read the agent's environment or
// resolve names (env, expandenv, getHostByName): Stages from the cluster
// are anyone's. Those of Env are bound at each render; the stubs here
// let templates parse.
var (
	staticFuncs = func() template.FuncMap {
		m := sprig.TxtFuncMap()
		for _, name := range []string{"env", "expandenv", "getHostByName"} {
			delete(m, name)
		}
		m["Quote"] = quote
		m["YAML"] = toYAML
		m["NodeConditions"] = func() any { return nodeConditions }
		return m
	}()
	envFuncNames = []string{
		"Now", "StartTime", "Version", "NodeName", "NodePort", "NodeIP",
		"NodeIPWith", "NodeIPsWith", "PodIP", "PodIPWith", "PodIPsWith",
	}
	parseFuncs = func() template.FuncMap {
		m := template.FuncMap{}
		for k, v := range staticFuncs {
			m[k] = v
		}
		for _, k := range envFuncNames {
			m[k] = func(...any) any { return nil }
		}
		return m
	}()
)

func (e *Env) funcs() template.FuncMap {
	first := func(s []string) string {
		if len(s) == 0 {
			return ""
		}
		return s[0]
	}
	podIPs := func(hostNetwork any) []string {
		if b, _ := hostNetwork.(bool); b {
			return e.NodeIPs
		}
		return e.PodIPs
	}
	return template.FuncMap{
		"Now":         func() string { return e.Now.Format(time.RFC3339Nano) },
		"StartTime":   func() string { return e.StartTime.Format(time.RFC3339Nano) },
		"Version":     func() string { return e.Version },
		"NodeName":    func() string { return e.NodeName },
		"NodePort":    func() int32 { return e.NodePort },
		"NodeIP":      func() string { return first(e.NodeIPs) },
		"NodeIPWith":  func(any) string { return first(e.NodeIPs) },
		"NodeIPsWith": func(any) []string { return e.NodeIPs },
		"PodIP":       func() string { return first(e.PodIPs) },
		"PodIPWith": func(_, hostNetwork any, _ ...any) string {
			return first(podIPs(hostNetwork))
		},
		"PodIPsWith": func(_, hostNetwork any, _ ...any) []string {
			return podIPs(hostNetwork)
		},
	}
}

// quote is s as a quoted YAML (JSON) string.
func quote(s any) string {
	data, err := json.Marshal(s)
	if err != nil || len(data) == 0 {
		return strconv.Quote(fmt.Sprint(s))
	}
	if data[0] == '"' {
		return string(data)
	}
	return strconv.Quote(string(data))
}

// toYAML is v in YAML, every line after the first indented by indent
// levels of two spaces (and the first put on a new line).
func toYAML(v any, indent ...int) (string, error) {
	d, err := yaml.Marshal(v)
	if err != nil {
		return "", err
	}
	s := string(d)
	if len(indent) == 1 && indent[0] > 0 {
		pad := strings.Repeat(" ", indent[0]*2)
		s = strings.ReplaceAll("\n"+s, "\n", "\n"+pad)
	}
	return s, nil
}

// nodeConditions are the conditions of a healthy node, as kwok's
// NodeConditions gives them (JSON form).
var nodeConditions = func() []any {
	conds := []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "RouteCreated", Message: "RouteController created a route"},
	}
	out := make([]any, 0, len(conds))
	for _, c := range conds {
		out = append(out, map[string]any{"type": string(c.Type), "status": string(c.Status), "reason": c.Reason, "message": c.Message})
	}
	return out
}()
