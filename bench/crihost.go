package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/mountinfo"
	"github.com/nodelet/nodelet/test/crienv"
)

// What the cri benchmark needs around its agents: their command lines, the
// registry, the runtime's CPU and its cleaning, and the host state the
// kubelet changes, put back after each agent.

// kubeletArgs is the real kubelet (bin/controlplane kubelet) on the node:
// everything it writes under dir, the runtime's containerd, the admin
// kubeconfig, what it needs on this host (cgroup v1 with cgroupfs, swap
// tolerated), and its API client limited as client's values say
// (criAgentSetting: kubeAPIQPS and kubeAPIBurst). It changes a few kernel settings at start-up (nothing stops
// that but refusing to start); hostState puts them back.
func kubeletArgs(o options, cp *controlPlane, env *crienv.Env, dir, node string, client agentSetting) ([]string, error) {
	ip, err := hostIP()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	config := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		"address":    ip,
		"port":       port,
		// No read-only or healthz listener: nothing here reads them.
		"readOnlyPort": 0,
		"healthzPort":  0,
		// As the API server authenticates: client certificates of the
		// cluster's CA and bearer tokens (TokenReview), SubjectAccessReview
		// for authorization, no anonymous requests; what nodelet does.
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": filepath.Join(cp.dir, "pki", "ca.crt")},
		},
		"authorization":            map[string]any{"mode": "Webhook"},
		"containerRuntimeEndpoint": env.Endpoint(),
		"podLogsDir":               filepath.Join(dir, "pod-logs"),
		// The host: cgroup v1 (which the kubelet refuses by default since
		// 1.35), containerd's runc with cgroupfs, maybe swap.
		"cgroupDriver": "cgroupfs",
		"failCgroupV1": false,
		"failSwapOn":   false,
		// No KUBE-FIREWALL or hint chains in the host's iptables: they
		// serve kube-proxy, which does not run here.
		"makeIPTablesUtilChains": false,
		// Its API client: the default (50 / 100) or matched to nodelet's.
		"kubeAPIQPS":   client.Values["kubeAPIQPS"],
		"kubeAPIBurst": client.Values["kubeAPIBurst"],
	}
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "kubelet-config.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return nil, err
	}
	return []string{filepath.Join(o.bin, "controlplane"), "kubelet",
		"--config", path,
		"--kubeconfig", cp.kubeconfig,
		"--hostname-override", node,
		"--node-ip", ip,
		"--root-dir", filepath.Join(dir, "root"),
		"--cert-dir", filepath.Join(dir, "pki"),
		"--volume-plugin-dir", filepath.Join(dir, "volume-plugins"),
		fmt.Sprintf("--v=%d", o.agentV),
	}, nil
}

// nodeletCRIArgs is nodelet's cri provider on the node, with its state and
// logs under dir.
func nodeletCRIArgs(o options, cp *controlPlane, env *crienv.Env, dir, node string) ([]string, error) {
	ip, err := hostIP()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return []string{filepath.Join(o.bin, "nodelet"), "--provider", "cri",
		"--container-runtime-endpoint", env.Endpoint(),
		"--root-dir", filepath.Join(dir, "root"),
		"--pod-logs-dir", filepath.Join(dir, "pod-logs"),
		"--address", ip, "--port", strconv.Itoa(port),
		"--client-ca-file", filepath.Join(cp.dir, "pki", "ca.crt"),
		"--kubeconfig", cp.kubeconfig,
		"--node-name", node,
		fmt.Sprintf("-v=%d", o.agentV),
	}, nil
}

// hostIP is the first IPv4 address of the host's interfaces, leaving out
// loopback and the pod bridges (crienv's nlbr*): the node's InternalIP,
// where its kubelet API listens.
func hostIP() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagLoopback != 0 || iface.Flags&net.FlagUp == 0 || strings.HasPrefix(iface.Name, "nlbr") {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String(), nil
			}
		}
	}
	return "", errors.New("no IPv4 address on a host interface for the node")
}

// freePort is a TCP port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// registry is bin/images serve over the OCI layout that make images built.
type registry struct {
	proc *process
	addr string
}

func startRegistry(bin, imagesDir, dir string) (*registry, error) {
	for _, p := range []string{bin, filepath.Join(imagesDir, "index.json")} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("registry: %w (run make images)", err)
		}
	}
	ready := filepath.Join(dir, "registry.addr")
	proc, err := startAgent(dir, "registry", []string{bin, "serve", "--dir", imagesDir, "--listen", "127.0.0.1:0", "--ready-file", ready})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if data, err := os.ReadFile(ready); err == nil && len(data) > 0 {
			return &registry{proc: proc, addr: strings.TrimSpace(string(data))}, nil
		}
		if !proc.alive() {
			return nil, fmt.Errorf("registry exited (log %s)", proc.logPath)
		}
		if time.Now().After(deadline) {
			proc.stop()
			return nil, fmt.Errorf("registry not serving after 2 minutes (log %s)", proc.logPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *registry) stop() { r.proc.stop() }

// alive says whether the process has not exited yet.
func (p *process) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// runtimeUse is the CPU seconds (own and waited-for children's, such as
// runc's) of each process of the runtime: containerd and its shims, whose
// command lines name the environment's directory.
type runtimeUse map[int]float64

func runtimeCPU(envDir string) runtimeUse {
	out := runtimeUse{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), envDir) {
			continue
		}
		if comm, self, children := procStat(pid); strings.HasPrefix(comm, "containerd") {
			out[pid] = self + children
		}
	}
	return out
}

// since is the CPU the runtime used after the earlier reading: processes
// started since count whole, processes gone since are missed.
func (u runtimeUse) since(earlier runtimeUse) float64 {
	total := 0.0
	for pid, cpu := range u {
		total += cpu - earlier[pid]
	}
	return total
}

// sandboxCount is the number of pod sandboxes the runtime has, ready or not.
func sandboxCount(ctx context.Context, env *crienv.Env) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sbs, err := env.RuntimeClient().ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("list pod sandboxes: %w", err)
	}
	return len(sbs.GetItems()), nil
}

// cleanRuntime stops and removes every container and sandbox the runtime
// still has, and says how many there were. The agent must have stopped.
func cleanRuntime(env *crienv.Env) (sandboxes, containers int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := env.RuntimeClient()
	ctrs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return 0, 0, fmt.Errorf("clean runtime: list containers: %w", err)
	}
	var errs []error
	for _, c := range ctrs.GetContainers() {
		if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stop container %s: %w", c.GetId(), err))
		}
		if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.GetId(), err))
		}
	}
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, len(ctrs.GetContainers()), fmt.Errorf("clean runtime: list pod sandboxes: %w", err)
	}
	for _, s := range sbs.GetItems() {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stop pod sandbox %s: %w", s.GetId(), err))
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("remove pod sandbox %s: %w", s.GetId(), err))
		}
	}
	if n, err := sandboxCount(ctx, env); err != nil || n > 0 {
		errs = append(errs, fmt.Errorf("%d sandboxes left after cleaning (%v)", n, err))
	}
	if err := errors.Join(errs...); err != nil {
		return len(sbs.GetItems()), len(ctrs.GetContainers()), fmt.Errorf("clean runtime: %w", err)
	}
	return len(sbs.GetItems()), len(ctrs.GetContainers()), nil
}

// The kernel settings the kubelet sets at start-up unless told to refuse
// to start instead (protectKernelDefaults).
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// The parents of the agents' pod cgroups (cgroupfs), in every hierarchy:
// the kubelet's QoS tree and nodelet's.
var podCgroupRoots = []string{"kubepods", "nodelet"}

// legacyLogLinks is where the kubelet links every container's log, whatever
// its pod logs directory.
const legacyLogLinks = "/var/log/containers"

// hostState is what an agent may change on the host, read before it starts.
type hostState struct {
	sysctls       map[string]string
	cgroupRoots   map[string]bool // cgroup directory → existed before
	logLinksExist bool
}

func newHostState() (*hostState, error) {
	h := &hostState{sysctls: map[string]string{}, cgroupRoots: map[string]bool{}}
	for _, s := range kubeletSysctls {
		data, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			return nil, fmt.Errorf("read sysctl: %w", err)
		}
		h.sysctls[s] = strings.TrimSpace(string(data))
	}
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, hier := range hierarchies {
		for _, root := range podCgroupRoots {
			d := filepath.Join(hier, root)
			_, err := os.Stat(d)
			h.cgroupRoots[d] = err == nil
		}
	}
	_, err := os.Stat(legacyLogLinks)
	h.logLinksExist = err == nil
	return h, nil
}

// restore puts back what the agent changed, once it has stopped and the
// runtime is empty: the mounts under dir (the kubelet bind-mounts its root
// directory on itself, shared); kernel settings; the cgroups of the pods with
// these UIDs, counting the pods that had some left, and the parents that were
// not there before; the kubelet's log links into dir.
func (h *hostState) restore(agent, dir string, uids map[string]bool) (podCgroups int, err error) {
	var errs []error
	mounts, err := mountinfo.Under(dir)
	if err != nil {
		errs = append(errs, err)
	}
	slices.Reverse(mounts) // the last mounted first
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	for s, was := range h.sysctls {
		data, _ := os.ReadFile(filepath.Join("/proc/sys", s))
		if now := strings.TrimSpace(string(data)); now != was {
			logf("%s: sysctl %s was %s, set to %s; putting it back", agent, strings.ReplaceAll(s, "/", "."), was, now)
			if err := os.WriteFile(filepath.Join("/proc/sys", s), []byte(was), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restore sysctl %s: %w", s, err))
			}
		}
	}
	left, hierarchies, example := map[string]bool{}, map[string]bool{}, ""
	for root, existed := range h.cgroupRoots {
		dirs := cgroupDirs(root)
		slices.Reverse(dirs) // deepest first
		for _, d := range dirs {
			rel, _ := filepath.Rel(root, d)
			var uid string
			for _, part := range strings.Split(rel, string(filepath.Separator)) {
				if u, ok := strings.CutPrefix(part, "pod"); ok {
					uid = u
				}
			}
			if (uid != "" && !uids[uid]) || (uid == "" && existed) {
				continue // another run's pod, or there before the agent
			}
			if uid != "" {
				left[uid] = true
				hierarchies[filepath.Base(filepath.Dir(root))] = true
				if example == "" {
					example = d
				}
			}
			err := syscall.Rmdir(d)
			if uid == "" && errors.Is(err, syscall.EBUSY) {
				continue // a parent that another run's pod still uses
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	if len(left) > 0 {
		logf("%s: cgroups of %d pods left in %v, such as %s", agent, len(left), slices.Sorted(maps.Keys(hierarchies)), example)
	}
	links, _ := os.ReadDir(legacyLogLinks)
	for _, l := range links {
		p := filepath.Join(legacyLogLinks, l.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			errs = append(errs, os.Remove(p))
		}
	}
	if !h.logLinksExist {
		if err := os.Remove(legacyLogLinks); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return len(left), fmt.Errorf("restore host: %w", err)
	}
	return len(left), nil
}

// cgroupDirs lists root and the directories below it, parents first.
func cgroupDirs(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}
