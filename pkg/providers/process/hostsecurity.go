package process

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/provider"
)

// appArmorEnabled tells whether the host enforces AppArmor, as the kubelet
// finds out: its securityfs directory exists and the module says so.
var appArmorEnabled = sync.OnceValue(func() bool {
	if _, err := os.Stat("/sys/kernel/security/apparmor"); err != nil {
		return false
	}
	data, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && bytes.HasPrefix(data, []byte("Y"))
})

// admitAppArmor refuses, as the kubelet's admission does, a pod that asks
// for an AppArmor profile other than Unconfined (on the pod, a container,
// or the deprecated annotations) on a host without AppArmor: the pod fails
// with reason AppArmor.
func admitAppArmor(pod *corev1.Pod, enabled bool) error {
	if enabled || !wantsAppArmor(pod) {
		return nil
	}
	return provider.Reject("AppArmor", "Cannot enforce AppArmor: %v", errAppArmorDisabled)
}

func wantsAppArmor(pod *corev1.Pod) bool {
	confined := func(p *corev1.AppArmorProfile) bool {
		return p != nil && p.Type != corev1.AppArmorProfileTypeUnconfined
	}
	if sc := pod.Spec.SecurityContext; sc != nil && confined(sc.AppArmorProfile) {
		return true
	}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.SecurityContext != nil && confined(c.SecurityContext.AppArmorProfile) {
				return true
			}
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.SecurityContext != nil && confined(c.SecurityContext.AppArmorProfile) {
			return true
		}
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) && v != corev1.DeprecatedAppArmorBetaProfileNameUnconfined {
			return true
		}
	}
	return false
}

// hostUsers reads the account of uid from the host's /etc/passwd and the
// groups that list its name from /etc/group, as a runtime reads the
// image's; false when the host has no such user.
func hostUsers(uid int64) (hostUser, bool) {
	name, gid, ok := passwdEntry("/etc/passwd", uid)
	if !ok {
		return hostUser{}, false
	}
	return hostUser{GID: gid, Groups: memberGroups("/etc/group", name)}, true
}

// passwdEntry finds the name and primary group of uid in a passwd file.
func passwdEntry(path string, uid int64) (string, int64, bool) {
	var name string
	var gid int64
	found := false
	scanColon(path, func(f []string) bool {
		if len(f) < 4 || f[2] != strconv.FormatInt(uid, 10) {
			return true
		}
		g, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return true
		}
		name, gid, found = f[0], g, true
		return false
	})
	return name, gid, found
}

// memberGroups lists the groups of a group file that name user a member.
func memberGroups(path, user string) []int64 {
	var out []int64
	scanColon(path, func(f []string) bool {
		if len(f) < 4 {
			return true
		}
		for _, m := range strings.Split(f[3], ",") {
			if strings.TrimSpace(m) == user {
				if g, err := strconv.ParseInt(f[2], 10, 64); err == nil {
					out = append(out, g)
				}
				break
			}
		}
		return true
	})
	return out
}

// scanColon calls f with the fields of each line of a colon-separated
// file (comments and blank lines skipped) until f returns false. A file
// that cannot be read has no lines.
func scanColon(path string, f func([]string) bool) {
	file, err := os.Open(path)
	if err != nil {
		return
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !f(strings.Split(line, ":")) {
			return
		}
	}
}
