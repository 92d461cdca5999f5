//go:build linux

package clusteraddons

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

// recordFile, in Options.Dir, says how to remove kube-proxy's rules while
// they may be there: from just before kube-proxy starts until Stop has
// removed them. Cleanup reads it after a set that was killed.
const recordFile = "kube-proxy-cleanup.json"

// needIptables fails, saying how to get it, where kube-proxy's iptables
// mode cannot run.
func needIptables() error {
	for _, b := range []string{"iptables", "iptables-restore", "iptables-save"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("kube-proxy's iptables mode needs %s: %w (Debian's iptables package; make cri-deps installs it)", b, err)
		}
	}
	return nil
}

// startProxy runs kube-proxy in iptables mode for the node and waits until
// it has written the kube-dns Service's rules.
func (a *Addons) startProxy(ctx context.Context) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	healthz, metrics := ports[0], ports[1]
	kp := filepath.Join(a.opts.BinDir, "kube-proxy")
	// kube-proxy adds a KUBE-FIREWALL chain to the filter table that its
	// --cleanup keeps; it goes too unless the host had it before.
	rec := &record{path: filepath.Join(a.opts.Dir, recordFile), KubeProxy: kp,
		HadFirewall: exec.Command("iptables", "-w", "-S", "KUBE-FIREWALL").Run() == nil}
	if err := rec.write(); err != nil {
		return err
	}
	a.cleanup = rec
	args := []string{"--kubeconfig", a.opts.Kubeconfig, "--hostname-override", a.opts.NodeName,
		"--proxy-mode", "iptables", "--iptables-localhost-nodeports=false",
		// Leave the host's conntrack table size and timeouts as they are.
		"--conntrack-max-per-core", "0",
		"--conntrack-tcp-timeout-established", "0", "--conntrack-tcp-timeout-close-wait", "0",
		"--healthz-bind-address", fmt.Sprintf("127.0.0.1:%d", healthz),
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metrics)}
	if a.opts.ClusterCIDR != "" {
		args = append(args, "--cluster-cidr", a.opts.ClusterCIDR)
	}
	d, err := StartDaemon(a.opts.Dir, "kube-proxy", kp, args...)
	if err != nil {
		return err
	}
	a.proxy = d
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, a.opts.ReadyTimeout, true, func(context.Context) (bool, error) {
		if exited, err := d.exited(); exited {
			return false, fmt.Errorf("exited: %v (log %s)", err, d.logPath)
		}
		out, err := exec.Command("iptables", "-w", "-t", "nat", "-S", "KUBE-SERVICES").Output()
		return err == nil && strings.Contains(string(out), DNSServiceIP), nil
	})
	if err != nil {
		return fmt.Errorf("no rules for %s (log %s): %w", DNSServiceIP, d.logPath, err)
	}
	return nil
}

// record is what removes kube-proxy's rules: its binary, for --cleanup,
// and whether the host had a KUBE-FIREWALL chain before it.
type record struct {
	path        string
	KubeProxy   string `json:"kubeProxy"`
	HadFirewall bool   `json:"hadFirewall"`
}

func (r *record) write() error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(r.path, append(data, '\n'), atomicfile.Options{Perm: 0o644})
}

// run removes kube-proxy's rules (kube-proxy must have ended) and then the
// record.
func (r *record) run() error {
	out, err := exec.Command(r.KubeProxy, "--cleanup").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kube-proxy --cleanup: %w: %s", err, lastLine(out))
	}
	if !r.HadFirewall {
		removeFirewallChain()
	}
	if err := os.Remove(r.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Cleanup removes the rules of a kube-proxy that the add-ons in dir
// started and did not stop (their process was killed), once it has ended;
// found says there was one. Without a record in dir there is nothing to
// do. make clean runs it.
func Cleanup(dir string) (found bool, err error) {
	path := filepath.Join(dir, recordFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r := &record{path: path}
	if err := json.Unmarshal(data, r); err != nil {
		return true, fmt.Errorf("%s: %w", path, err)
	}
	if r.KubeProxy == "" {
		return true, fmt.Errorf("%s: no kubeProxy", path)
	}
	return true, r.run()
}

// removeFirewallChain deletes kube-proxy's KUBE-FIREWALL chain and the
// jumps to it; a step that finds nothing to delete is not an error.
func removeFirewallChain() {
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		for exec.Command("iptables", "-w", "-D", chain, "-j", "KUBE-FIREWALL").Run() == nil {
		}
	}
	_ = exec.Command("iptables", "-w", "-F", "KUBE-FIREWALL").Run()
	_ = exec.Command("iptables", "-w", "-X", "KUBE-FIREWALL").Run()
}

// freePorts returns n distinct TCP ports of 127.0.0.1 nothing listens on:
// each listener stays open until all are picked, so that the kernel cannot
// hand one out twice.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}
