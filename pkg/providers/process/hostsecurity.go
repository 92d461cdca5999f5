package process

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

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
