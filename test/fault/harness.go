package fault

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The helpers below serve the end-to-end tests of the repository's nested
// modules (the virtual-kubelet adapter, the example provider), which run a
// control plane of this package and drive it with the real kubectl.

// Kubectl runs the control plane's kubectl (Bin kubectl) with Kubeconfig.
type Kubectl struct {
	Bin, Kubeconfig string
}

// Run runs kubectl with stdin and returns its standard output; the error
// carries its standard error.
func (k Kubectl) Run(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.Bin, append([]string{"kubectl", "--kubeconfig", k.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Eventually polls cond until it holds, failing the test after timeout with
// what cond saw last.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so after %s; last seen: %s", what, timeout, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// RepoRoot walks up from the working directory to nodelet's go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module github.com/nodelet/nodelet\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal(errors.New("no go.mod of github.com/nodelet/nodelet above the working directory"))
		}
		dir = parent
	}
}

// handedOut holds the ports FreePort has returned in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort is a TCP port nothing listens on right now, on any address, and
// that FreePort has not returned before in this process: two agents
// started together never get the same port, although neither listens
// before both have asked (the kernel may give a port closed a moment ago
// again).
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
	t.Fatal("no port that was not handed out already in 100 tries")
	return 0
}

// RandSuffix is 5 random lowercase letters and digits.
func RandSuffix(t testing.TB) string {
	t.Helper()
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
