package agent

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/nodelet/nodelet/"

// The import graph reads one way: cmd → the agent API → the loops → the
// contract, and providers → lifecycle → the contract. This test holds
// every non-test import of the module to that picture.
func TestImportsReadOneWay(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module) {
				imports[pkg] = append(imports[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	if len(imports["pkg/agent"]) == 0 {
		t.Fatal("go list found no import of pkg/agent: the test reads nothing")
	}
	loops := []string{"pkg/node", "pkg/pod", "pkg/staticpod", "pkg/eviction", "pkg/nodeshutdown", "pkg/server",
		"pkg/stats", "pkg/attachdetach", "pkg/config", "pkg/nodecert", "pkg/shard"}
	providers := []string{"pkg/providers/cri", "pkg/providers/process", "pkg/providers/sim"}
	for pkg, deps := range imports {
		for _, dep := range deps {
			if why := forbidden(pkg, dep, loops, providers); why != "" {
				t.Errorf("%s imports %s: %s", pkg, dep, why)
			}
		}
	}
}

// forbidden says why pkg must not import dep, or "".
func forbidden(pkg, dep string, loops, providers []string) string {
	under := func(p string, roots ...string) bool {
		for _, r := range roots {
			if p == r || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		return false
	}
	switch {
	case pkg == "pkg/provider":
		return "the contract is a leaf: it imports no nodelet package"
	case pkg == "pkg/stage":
		return "the stage engine is a leaf: it decides, and imports no nodelet package"
	case (dep == "pkg/agent" || dep == "internal/app") && !under(pkg, "cmd", "internal/app", "pkg/providertest", "test", "bench"):
		return "only commands, tests and the config translation build agents"
	case under(pkg, "pkg/agent") && under(dep, append(providers, "internal")...):
		return "the agent never knows a provider"
	case under(pkg, loops...) && under(dep, append(providers, "pkg/lifecycle", "pkg/agent")...):
		return "a loop talks to providers through the contract only"
	case under(pkg, providers...) && under(dep, "pkg/node", "pkg/pod", "pkg/staticpod", "pkg/server", "pkg/config", "pkg/agent", "internal/app"):
		return "a provider runs pods; it does not run the agent's loops"
	case pkg == "cmd/nodelet" && !under(dep, "internal/app", "pkg/agent", "pkg/config", "pkg/nodeshutdown", "pkg/providers/process/sandbox"):
		return "the command turns flags and config into an agent; it wires nothing itself"
	}
	return ""
}
