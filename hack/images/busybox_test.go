package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The busybox of the images runs the applets users and the Kubernetes tests
// run, with their usual options, on this host against servers on loopback:
// Debian's busybox-static configuration crashed on wget -T and had no nc -z.

// testBusybox is the built busybox (make bin/busybox), and a directory
// whose entries are its applets, to put alone on PATH: the shell looks
// commands up in PATH before its applets, so the host's would run instead.
func testBusybox(t *testing.T) (bin, appletDir string) {
	t.Helper()
	bin, err := filepath.Abs("../../bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkStatic(bin); err != nil {
		t.Skipf("no static busybox (make bin/busybox, or make images-test): %v", err)
	}
	out, err := exec.Command(bin, "--list").Output()
	if err != nil {
		t.Fatalf("%s --list: %v", bin, err)
	}
	appletDir = t.TempDir()
	for _, name := range strings.Fields(string(out)) {
		if err := os.Symlink(bin, filepath.Join(appletDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return bin, appletDir
}

// runApplet runs busybox's sh -c script with only the applets on PATH and
// returns its combined output; a run killed by a signal (a crash) or that
// outlives a minute is an error that says so.
func runApplet(t *testing.T, appletDir, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(appletDir, "sh"), "-c", script)
	cmd.Env = []string{"PATH=" + appletDir, "HOME=" + t.TempDir()}
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("still running after a minute: %w", ctx.Err())
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return string(out), fmt.Errorf("killed by %v", ws.Signal())
		}
		// The shell reports a command a signal ended as 128+N.
		if code := exit.ExitCode(); code > 128 && code < 128+65 {
			return string(out), fmt.Errorf("exit %d: a command was killed by %v", code, syscall.Signal(code-128))
		}
	}
	return string(out), err
}

func TestBusyboxNetworkApplets(t *testing.T) {
	_, applets := testBusybox(t)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hello" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "hello from the host\n")
	}))
	defer web.Close()
	silent := silentServer(t)
	echo := lineServer(t)
	dns := dnsServer(t, map[string][4]byte{"web.example.": {10, 1, 2, 3}})

	for _, tc := range []struct {
		name, script string
		want         []string
		fails        bool // exits non-zero, without a crash
	}{
		{name: "wget -T -q -O-", script: "wget -T 5 -q -O- " + web.URL + "/hello", want: []string{"hello from the host"}},
		{name: "wget -qO-", script: "wget -qO- " + web.URL + "/hello", want: []string{"hello from the host"}},
		{name: "wget -O file", script: "wget -q -O page " + web.URL + "/hello && cat page", want: []string{"hello from the host"}},
		{name: "wget -S --spider", script: "wget -S --spider -T 5 " + web.URL + "/hello", want: []string{"200 OK", "remote file exists"}},
		{name: "wget of a missing page", script: "wget -q -T 5 -O- " + web.URL + "/nothing", want: []string{"404"}, fails: true},
		{name: "wget -T on a server that never answers", script: "wget -T 1 -q -O- http://" + silent + "/", want: []string{"timed out"}, fails: true},
		{name: "nslookup", script: "nslookup web.example " + dns, want: []string{"Name:\tweb.example", "Address: 10.1.2.3"}},
		{name: "nslookup -type=a", script: "nslookup -type=a web.example " + dns, want: []string{"Address: 10.1.2.3"}},
		{name: "nslookup of a missing name", script: "nslookup nothing.example " + dns, want: []string{"NXDOMAIN"}, fails: true},
		{name: "nc", script: "echo ping | nc -w 5 " + strings.Replace(echo, ":", " ", 1), want: []string{"got ping"}},
		{name: "nc -z", script: "nc -z -w 5 " + strings.Replace(echo, ":", " ", 1) + " && echo open", want: []string{"open"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runApplet(t, applets, tc.script)
			var exit *exec.ExitError
			switch {
			case err != nil && !errors.As(err, &exit):
				t.Fatalf("%s: %v\n%s", tc.script, err, out)
			case err != nil && !tc.fails:
				t.Fatalf("%s: %v\n%s", tc.script, err, out)
			case err == nil && tc.fails:
				t.Fatalf("%s succeeded, want a failure:\n%s", tc.script, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("%s: output lacks %q:\n%s", tc.script, w, out)
				}
			}
		})
	}

	t.Run("ping", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("busybox's ping opens a raw socket: it needs root")
		}
		out, err := runApplet(t, applets, "ping -c 1 -W 5 127.0.0.1")
		if err != nil || !strings.Contains(out, "1 packets received") {
			t.Errorf("ping -c 1 127.0.0.1: %v\n%s", err, out)
		}
	})
}

// TestBusyboxCommonApplets runs the other applets the Kubernetes tests and
// users commonly run, once each.
func TestBusyboxCommonApplets(t *testing.T) {
	bin, applets := testBusybox(t)
	for _, tc := range []struct{ script, want string }{
		{`echo hello`, "hello\n"},
		{`printf '%s-%d\n' a 1`, "a-1\n"},
		{`sleep 0 && true && ! false && echo ok`, "ok\n"},
		{`test -d / && [ 1 -lt 2 ] && echo ok`, "ok\n"},
		{`echo hello | cat`, "hello\n"},
		{`seq 3 | wc -l`, "3\n"},
		{`seq 5 | head -n 2 | tail -n 1`, "2\n"},
		{`echo hello | md5sum`, "b1946ac92492d2347c6235b4d2611184  -\n"},
		{`dd if=/dev/zero bs=512 count=2 2>/dev/null | wc -c`, "1024\n"},
		{`echo a:b:c | cut -d: -f2`, "b\n"},
		{`echo abc | tr a-c A-C`, "ABC\n"},
		{`echo hello | sed s/hello/bye/`, "bye\n"},
		{`echo 2 3 | awk '{print $1 * $2}'`, "6\n"},
		{`printf 'a\nb\n' | grep -c b`, "1\n"},
		{`mkdir -p d/e && touch d/e/f && chmod 600 d/e/f && stat -c %a d/e/f && find d -type f && rm -r d && ls`, "600\nd/e/f\n"},
		{`printf '1\n2\n' | xargs echo`, "1 2\n"},
		{`timeout 1 sleep 60; echo $?`, "Terminated\n143\n"}, // its watcher ends with it
		{`env -i A=1 env`, "A=1\n"},
		{`which sh | grep -c /sh`, "1\n"},
		{`id -u >/dev/null && whoami >/dev/null && hostname >/dev/null && uname -s`, "Linux\n"},
		{`date -u -d @0 +%Y`, "1970\n"},
		{`ps -o pid,comm | head -n 1 | grep -q COMMAND && echo ok`, "ok\n"},
		{`top -b -n 1 | head -n 1 | grep -q ^Mem: && echo ok`, "ok\n"},
		{`df / | tail -n 1 | grep -q '/$' && echo ok`, "ok\n"},
		{`du -s . | grep -q '\.$' && echo ok`, "ok\n"},
		{`mount | grep -q ' on / ' && echo ok`, "ok\n"},
	} {
		out, err := runApplet(t, applets, tc.script)
		if err != nil || out != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.script, out, err, tc.want)
		}
	}
	// Present, as in upstream's image, though not run here.
	list, err := exec.Command(bin, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, a := range strings.Fields(string(list)) {
		have[a] = true
	}
	for _, a := range []string{"bash", "nsenter", "ip", "ifconfig", "route", "telnet", "httpd", "nohup", "pgrep", "pkill", "netstat", "traceroute", "sysctl", "nslookup", "dnsd"} {
		if !have[a] {
			t.Errorf("busybox has no %s applet", a)
		}
	}
}

// TestBusyboxShellKeepsEnvironment checks the shell passes on environment
// variables whose names are not shell identifiers, as upstream's does and
// Debian's patched one does not.
func TestBusyboxShellKeepsEnvironment(t *testing.T) {
	bin, _ := testBusybox(t)
	out, err := exec.Command("env", "-i", "A-B=1", "c.d=2", bin, "sh", "-c", "env").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"A-B=1", "c.d=2"} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("sh dropped %s from its environment:\n%s", want, out)
		}
	}
}

// silentServer accepts TCP connections on loopback and never answers; it
// holds each one open until the test ends.
func silentServer(t *testing.T) string {
	return tcpServer(t, func(c net.Conn, closed <-chan struct{}) { <-closed })
}

// lineServer answers each line a TCP client sends on loopback with "got"
// and the line.
func lineServer(t *testing.T) string {
	return tcpServer(t, func(c net.Conn, _ <-chan struct{}) {
		c.SetDeadline(time.Now().Add(time.Minute))
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			fmt.Fprintf(c, "got %s\n", sc.Text())
		}
	})
}

// tcpServer accepts TCP connections on loopback until the test ends and
// serves each with serve in a goroutine of its own; closed is closed when
// the test ends, and every connection is closed after serve returns.
func tcpServer(t *testing.T, serve func(c net.Conn, closed <-chan struct{})) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveTCP(t, l, serve)
}

// serveTCP is tcpServer on a listener of the caller's.
func serveTCP(t *testing.T, l net.Listener, serve func(c net.Conn, closed <-chan struct{})) string {
	t.Helper()
	closed := make(chan struct{})
	var served sync.WaitGroup
	served.Add(1)
	go func() {
		defer served.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			served.Go(func() {
				defer c.Close()
				serve(c, closed)
			})
		}
	}()
	t.Cleanup(func() {
		l.Close()
		close(closed)
		served.Wait()
	})
	return l.Addr().String()
}

// dnsServer answers DNS queries over UDP and TCP on one loopback port: the
// A record of each name it knows, no other record for them, and NXDOMAIN
// for other names.
func dnsServer(t *testing.T, names map[string][4]byte) string {
	t.Helper()
	pc, l := dnsListen(t)
	serveTCP(t, l, func(c net.Conn, _ <-chan struct{}) {
		// Each message prefixed by its length (RFC 1035 4.2.2).
		c.SetDeadline(time.Now().Add(time.Minute))
		r := bufio.NewReader(c)
		for {
			var n uint16
			if binary.Read(r, binary.BigEndian, &n) != nil {
				return
			}
			query := make([]byte, n)
			if _, err := io.ReadFull(r, query); err != nil {
				return
			}
			if reply, ok := dnsReply(query, names); ok {
				c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(reply))))
				c.Write(reply)
			}
		}
	})
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
				pc.WriteTo(reply, from)
			}
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	return pc.LocalAddr().String()
}

// dnsListen listens on loopback for UDP and TCP on the same port.
func dnsListen(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 10 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l
		}
		pc.Close() // the port is taken for TCP: another
	}
	t.Fatal("no loopback port free for both UDP and TCP in 10 tries")
	return nil, nil
}

// dnsReply is the answer to one query (RFC 1035: a header, one question,
// and an A record pointing back at the question's name); false if it is
// not a query.
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
