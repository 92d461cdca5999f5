package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// securePod is one pod of process containers that each ask the sandbox
// for something of the security context: a user, groups and fsGroup on a
// volume; containerd's default capabilities; no capabilities, no new
// privileges and the default seccomp filter; and two it cannot give
// (runAsNonRoot without a user, a read-only root filesystem).
func securePod(node, image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: secure
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  securityContext:
    fsGroup: 4000
    supplementalGroups: [3000]
  volumes:
  - name: data
    emptyDir: {}
  containers:
  - name: user
    image: %[2]s
    command: ["sh", "-c", "echo uid=$(id -u); echo groups=$(id -G); touch /mnt/f; echo file=$(stat -c '%%u:%%g' /mnt/f); sleep 3600"]
    securityContext: {runAsUser: 4242, runAsGroup: 2000}
    volumeMounts: [{name: data, mountPath: /mnt}]
  - name: root
    image: %[2]s
    command: ["sh", "-c", "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\\t'; sleep 3600"]
  - name: confined
    image: %[2]s
    command: ["sh", "-c", "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\\t'; sleep 3600"]
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
      seccompProfile: {type: RuntimeDefault}
  - name: nonroot
    image: %[2]s
    command: ["sleep", "3600"]
    securityContext: {runAsNonRoot: true}
  - name: readonly
    image: %[2]s
    command: ["sleep", "3600"]
    securityContext: {readOnlyRootFilesystem: true}
`, node, image)
}

// TestProcessSecurityContext: a process container runs as the user and
// groups its pod asks (fsGroup owning the volume), with containerd's
// default capabilities or none, no_new_privs and a seccomp filter, and so
// do exec sessions into it; one that asks what the sandbox cannot give
// waits in CreateContainerConfigError saying why.
func TestProcessSecurityContext(t *testing.T) {
	ns := onProcessNode(t, securePod)
	states := func() string {
		out, _ := kubectlErr("get", "pod", "-n", ns, "secure", "-o",
			`jsonpath={range .status.containerStatuses[*]}{.name}:{.state.waiting.reason}{.state.running.startedAt}{"\n"}{end}`)
		return out
	}
	eventually(t, 2*time.Minute, "three containers running and two refused", func() (bool, string) {
		out := states()
		for _, c := range []string{"user", "root", "confined"} {
			if !strings.Contains(out, c+":2") { // a start time
				return false, out
			}
		}
		return strings.Contains(out, "nonroot:CreateContainerConfigError") && strings.Contains(out, "readonly:CreateContainerConfigError"), out
	})
	message := func(c string) string {
		return kubectl(t, "get", "pod", "-n", ns, "secure", "-o", `jsonpath={.status.containerStatuses[?(@.name=="`+c+`")].state.waiting.message}`)
	}
	if msg := message("nonroot"); !strings.Contains(msg, "runAsUser") || !strings.Contains(msg, "no image") {
		t.Errorf("nonroot waits with %q, want why runAsNonRoot cannot be checked", msg)
	}
	if msg := message("readonly"); !strings.Contains(msg, "readOnlyRootFilesystem") {
		t.Errorf("readonly waits with %q, want the field named", msg)
	}
	if events := podEvents(t, ns, "secure"); !strings.Contains(events, "Failed: Error: ") || !strings.Contains(events, "runAsNonRoot") {
		t.Errorf("no Warning Event for the refused container; events:\n%s", events)
	}

	logs := func(c string, n int) []string {
		t.Helper()
		var out string
		eventually(t, 30*time.Second, c+"'s output", func() (bool, string) {
			out, _ = kubectlErr("logs", "-n", ns, "secure", "-c", c)
			return strings.Count(out, "\n") >= n, out
		})
		return strings.Split(strings.TrimSpace(out), "\n")
	}
	lines := logs("user", 3)
	if len(lines) == 3 { // id -G's order is the tool's
		f := strings.Fields(strings.TrimPrefix(lines[1], "groups="))
		slices.Sort(f)
		lines[1] = "groups=" + strings.Join(f, " ")
	}
	if want := []string{"uid=4242", "groups=2000 3000 4000", "file=4242:4000"}; !slices.Equal(lines, want) {
		t.Errorf("user says %q, want %q (its file in the volume group-owned by fsGroup)", lines, want)
	}
	// containerd's default set: chown, dac_override, fowner, fsetid, kill,
	// setgid, setuid, setpcap, net_bind_service, net_raw, sys_chroot,
	// mknod, audit_write, setfcap.
	for c, want := range map[string][]string{
		"root":     {"CapEff:00000000a80425fb", "NoNewPrivs:0", "Seccomp:0"},
		"confined": {"CapEff:0000000000000000", "NoNewPrivs:1", "Seccomp:2"},
	} {
		if got := logs(c, len(want)); !slices.Equal(got, want) {
			t.Errorf("%s says %q, want %q", c, got, want)
		}
	}

	// An exec session is the container's user, with its groups.
	if got := strings.TrimSpace(kubectl(t, "exec", "-n", ns, "secure", "-c", "user", "--", "id", "-u")); got != "4242" {
		t.Errorf("exec in user runs as %q, want 4242", got)
	}
	if got := kubectl(t, "exec", "-n", ns, "secure", "-c", "confined", "--", "grep", "NoNewPrivs", "/proc/self/status"); !strings.Contains(got, "1") {
		t.Errorf("exec in confined: %q, want NoNewPrivs 1", got)
	}
}
