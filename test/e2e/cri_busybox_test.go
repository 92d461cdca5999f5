package e2e

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestCRIBusyboxApplets runs the busybox image's network applets with the
// options users and the Kubernetes tests give them, in a pod beside an
// agnhost web server: wget (-T, -q, -O, -S, --spider, a name from
// /etc/hosts), nslookup (the server of the pod's resolv.conf, and one
// given: a DNS responder of the test's on the host), nc and ping. Built as
// Debian's busybox-static, the image crashed on wget -T (exit 139) and had
// no nc -z.
func TestCRIBusyboxApplets(t *testing.T) {
	node := uniqueName(t)
	host := hostIP(t)
	startCRINodelet(t, node, "--cluster-dns", host, "--cluster-domain", "cluster.local")
	ns := criNamespace(t)
	dns := startDNSResponder(t, host, map[string][4]byte{"web." + ns + ".svc.cluster.local.": {10, 1, 2, 3}})
	_, port, err := net.SplitHostPort(dns)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: tools
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  hostAliases:
  - ip: "127.0.0.1"
    hostnames: ["web.test"]
  containers:
  - name: web
    image: %s
    args: ["netexec", "--http-port=8080"]
    readinessProbe:
      httpGet: {path: /healthz, port: 8080}
      periodSeconds: 1
  - name: busybox
    image: %s
    command: ["sleep", "3600"]
`, node, agnhostImage, busyboxImage))
	kubectl(t, "wait", "-n", ns, "--for=condition=Ready", "pod/tools", "--timeout=180s")

	for _, tc := range []struct {
		script string
		want   []string
	}{
		{"wget -T 5 -q -O- http://web.test:8080/hostname", []string{"tools"}},
		{"wget -qO- http://127.0.0.1:8080/hostname", []string{"tools"}},
		{"wget -T 5 -q -O /tmp/page http://127.0.0.1:8080/hostname && cat /tmp/page", []string{"tools"}},
		{"wget -S --spider -T 5 http://127.0.0.1:8080/healthz 2>&1", []string{"200 OK", "remote file exists"}},
		// The server of the pod's resolv.conf (a name without a dot
		// would go through its search path; upstream's nslookup exits 1
		// there if any of the names is not found).
		{"nslookup -port=" + port + " web." + ns + ".svc.cluster.local", []string{"Server:\t\t" + host, "Name:\tweb." + ns + ".svc.cluster.local", "Address: 10.1.2.3"}},
		{"nslookup web." + ns + ".svc.cluster.local " + dns, []string{"Address: 10.1.2.3"}},
		{"nc -z -w 5 127.0.0.1 8080 && echo open", []string{"open"}},
		{`printf 'GET /hostname HTTP/1.0\r\n\r\n' | nc -w 5 127.0.0.1 8080`, []string{"200 OK", "tools"}},
		{"ping -c 1 -W 5 127.0.0.1", []string{"1 packets received"}},
	} {
		out, err := kubectlErr("exec", "-n", ns, "tools", "-c", "busybox", "--", "sh", "-c", tc.script)
		if err != nil {
			t.Errorf("%s: %v\n%s", tc.script, err, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.script, w, out)
			}
		}
	}
}

// startDNSResponder answers DNS queries over UDP on ip, on a port of its
// choosing, until the test ends, and returns its address: the A record of
// each of names, no other record for them, and NXDOMAIN for other names.
func startDNSResponder(t *testing.T, ip string, names map[string][4]byte) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if reply, ok := dnsReply(buf[:n], names); ok {
				_, _ = pc.WriteTo(reply, from)
			}
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	return pc.LocalAddr().String()
}

// dnsReply is the answer to one query (RFC 1035: a header, one question, and
// an A record pointing back at the question's name); false if it is not a
// query.
func dnsReply(query []byte, names map[string][4]byte) ([]byte, bool) {
	const headerLen = 12
	if len(query) < headerLen || query[2]&0x80 != 0 || binary.BigEndian.Uint16(query[4:]) != 1 {
		return nil, false
	}
	var labels []string
	end := headerLen
	for {
		if end >= len(query) {
			return nil, false
		}
		n := int(query[end])
		if n == 0 {
			break
		}
		if n > 63 || end+1+n > len(query) {
			return nil, false
		}
		labels = append(labels, strings.ToLower(string(query[end+1:end+1+n])))
		end += 1 + n
	}
	end += 1 + 4 // the root label, type and class
	if end > len(query) {
		return nil, false
	}
	qtype := binary.BigEndian.Uint16(query[end-4:])
	ip, known := names[strings.Join(labels, ".")+"."]
	reply := append([]byte{}, query[:end]...)
	// Response, authoritative, recursion desired as asked; no more counts.
	reply[2] = 0x84 | query[2]&0x01
	reply[3] = 0
	clear(reply[6:headerLen])
	switch {
	case !known:
		reply[3] = 3 // NXDOMAIN
	case qtype == 1: // A
		reply[7] = 1
		reply = append(reply, 0xc0, headerLen) // the question's name
		reply = binary.BigEndian.AppendUint16(reply, 1)
		reply = binary.BigEndian.AppendUint16(reply, 1) // IN
		reply = binary.BigEndian.AppendUint32(reply, 30)
		reply = binary.BigEndian.AppendUint16(reply, 4)
		reply = append(reply, ip[:]...)
	}
	return reply, true
}
