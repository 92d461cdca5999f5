package cri

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/fuzzcheck"
)

// FuzzHostsFile builds the /etc/hosts of a pod whose name, hostname,
// subdomain, host network and host aliases the fuzzer chooses. A file that
// is built reads back, as a resolver reads it (whitespace-separated fields,
// '#' to the end of the line a comment), as exactly the entries it is made
// of: the node's or the localhost entries, one per pod IP, and one per host
// alias with its names; no alias can add or change another entry. And it
// costs memory in proportion to the spec.
func FuzzHostsFile(f *testing.F) {
	nodeHosts := filepath.Join(f.TempDir(), "hosts")
	const nodeContent = "# the node's\n127.0.0.1 localhost\n192.168.1.10 node-a node-a.example\n"
	if err := os.WriteFile(nodeHosts, []byte(nodeContent), 0o644); err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{})
	f.Add([]byte("\x03web\x00\x00\x00\x01\x01\x02\x01\x02\x03foo\x03bar"))
	f.Add([]byte("\x02db\x02db\x04back\x00\x02\x02\x01\x05\x00\x07foo bar\x00\x01\x01\x00\x02a#"))
	f.Add([]byte("\x01a\x00\x00\x01\x02\x03\x00\x01\x01\x0710.0.0.1\x01\x08x\n1.2.3.4"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := fuzzcheck.NewChoices(data)
		const dns = "abc-.0"
		pod := &corev1.Pod{}
		pod.Name = "p" + c.Word(dns, 70) // the API and static pods validate it
		pod.Namespace = "ns"
		pod.Spec.Hostname = c.Word(dns, 70)
		pod.Spec.Subdomain = c.Word(dns, 10)
		pod.Spec.HostNetwork = c.Bool()
		ips := [][]string{nil, {"10.244.0.5"}, {"10.244.0.5", "fd00::5"}}[c.Intn(3)]
		for n := c.Intn(4); n > 0; n-- {
			a := corev1.HostAlias{IP: c.Pick("10.1.2.3", "fd00::1", "")}
			if c.Bool() {
				a.IP = c.String(16)
			}
			for m := c.Intn(4); m > 0; m-- {
				name := c.Word(dns, 12)
				if c.Bool() {
					name = c.String(16)
				}
				a.Hostnames = append(a.Hostnames, name)
			}
			pod.Spec.HostAliases = append(pod.Spec.HostAliases, a)
		}

		var (
			content []byte
			err     error
		)
		n := fuzzcheck.Allocated(func() { content, err = podHostsFile(pod, ips, "cluster.local", nodeHosts) })
		if n > fuzzcheck.Slack+64*uint64(len(data)) {
			t.Errorf("a hosts file of %d bytes allocated %d bytes", len(content), n)
		}
		if err != nil {
			return
		}
		var want [][]string
		if pod.Spec.HostNetwork {
			want = hostsEntries(nodeContent)
		} else {
			want = hostsEntries(localhostEntries)
			hostname, domain, err := podHostnameAndDomain(pod, "cluster.local")
			if err != nil {
				t.Fatalf("the file was built, but the host name is refused: %v", err)
			}
			for _, ip := range ips {
				if domain != "" {
					want = append(want, []string{ip, hostname + "." + domain, hostname})
				} else {
					want = append(want, []string{ip, hostname})
				}
			}
		}
		for _, a := range pod.Spec.HostAliases {
			want = append(want, append([]string{a.IP}, a.Hostnames...))
		}
		if got := hostsEntries(string(content)); !reflect.DeepEqual(got, want) {
			t.Fatalf("hosts file\n%s\nreads as %q, want %q", content, got, want)
		}
	})
}

// hostsEntries reads a hosts file as glibc does: the fields of each line,
// separated by spaces and tabs, up to a '#'; lines without fields are none.
func hostsEntries(content string) [][]string {
	var out [][]string
	for _, line := range strings.Split(content, "\n") {
		line, _, _ = strings.Cut(line, "#")
		if fields := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' }); len(fields) > 0 {
			out = append(out, fields)
		}
	}
	return out
}
