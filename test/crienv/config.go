//go:build linux

package crienv

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxShimSocketDir is containerd's limit on the length of the shim socket
// directory (its sockets are named by a hash inside it).
const maxShimSocketDir = 42

// layout is where everything of one environment lives, all under base.
type layout struct {
	base        string
	root        string // containerd's root: images, snapshots, metadata
	state       string // containerd's state: tasks, network namespaces
	temp        string
	socket      string // CRI and containerd gRPC
	ttrpc       string
	shimSockets string
	runcRoot    string
	opt         string
	verifiers   string
	certsDir    string // registry hosts configuration (config_path)
	cniConfDir  string
	ipamDir     string // host-local's allocations
	config      string
	log         string
	snapshotter string
}

func newLayout(base string) layout {
	return layout{
		base:        base,
		root:        filepath.Join(base, "root"),
		state:       filepath.Join(base, "state"),
		temp:        filepath.Join(base, "tmp"),
		socket:      filepath.Join(base, "c.sock"),
		ttrpc:       filepath.Join(base, "c.sock.ttrpc"),
		shimSockets: filepath.Join(base, "s"),
		runcRoot:    filepath.Join(base, "runc"),
		opt:         filepath.Join(base, "opt"),
		verifiers:   filepath.Join(base, "image-verifiers"),
		certsDir:    filepath.Join(base, "certs.d"),
		cniConfDir:  filepath.Join(base, "cni", "net.d"),
		ipamDir:     filepath.Join(base, "cni", "networks"),
		config:      filepath.Join(base, "config.toml"),
		log:         filepath.Join(base, "containerd.log"),
	}
}

// makeBaseDir creates the environment's directory in dir, or in /tmp when
// dir is too long for the shim sockets inside.
func makeBaseDir(dir string) (string, error) {
	if len(filepath.Join(dir, "nlcri-0123456789", "s")) > maxShimSocketDir {
		dir = "/tmp"
	}
	base, err := os.MkdirTemp(dir, "nlcri-")
	if err != nil {
		return "", fmt.Errorf("create directory: %w", err)
	}
	if err := os.Chmod(base, 0o711); err != nil {
		return "", fmt.Errorf("create directory: %w", err)
	}
	return base, nil
}

// writeConfig writes containerd's configuration, the CNI network and the
// registry hosts into the layout, choosing the snapshotter on the way.
func (e *Env) writeConfig() error {
	l := &e.layout
	for _, d := range []string{l.root, l.state, l.temp, l.shimSockets, l.runcRoot, l.opt, l.verifiers, l.certsDir, l.cniConfDir, l.ipamDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return fmt.Errorf("write configuration: %w", err)
		}
	}
	l.snapshotter = "native"
	if overlayWorks(l.root) {
		l.snapshotter = "overlayfs"
	}
	if err := writeHosts(l.certsDir, e.opts.Mirror, e.opts.MirrorOf); err != nil {
		return err
	}
	conflist, err := e.network.conflist(l.ipamDir)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(l.cniConfDir, "10-"+e.network.name+".conflist"), conflist, 0o644); err != nil {
		return fmt.Errorf("write CNI configuration: %w", err)
	}
	if err := os.WriteFile(l.config, []byte(containerdConfig(*l, e.opts)), 0o644); err != nil {
		return fmt.Errorf("write containerd configuration: %w", err)
	}
	return nil
}

// containerdConfig is containerd's config.toml (version 3, which
// containerd 2.x migrates on load): every path private to the layout, no
// debug or metrics listener, no NRI, no imported host configuration; runc
// also as the handler "test-handler", the RuntimeClass handler the
// Kubernetes e2e tests expect preconfigured, as upstream's node e2e
// configures containerd. Where
// the process may not lower OOM scores (no CAP_SYS_RESOURCE, as in a
// container), containers get none lower than containerd's own: runc would
// fail to start them otherwise.
func containerdConfig(l layout, o Options) string {
	q := tomlString
	return fmt.Sprintf(`version = 3
root = %s
state = %s
temp = %s
imports = []

[grpc]
  address = %s

[ttrpc]
  address = %s

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.cri.v1.images"]
  snapshotter = %s

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %s

[plugins."io.containerd.cri.v1.images".registry]
  config_path = %s

[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = %t
  cdi_spec_dirs = []

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = %s
  Root = %s
  SystemdCgroup = false

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.test-handler]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.test-handler.options]
  BinaryName = %s
  Root = %s
  SystemdCgroup = false

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = [%s]
  conf_dir = %s
  max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.internal.v1.opt"]
  path = %s

[plugins."io.containerd.image-verifier.v1.bindir"]
  bin_dir = %s

[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.shim.v1.manager"]
  socket_dir = %s

[plugins."io.containerd.transfer.v1.local"]
  config_path = %s
`,
		q(l.root), q(l.state), q(l.temp),
		q(l.socket), q(l.ttrpc),
		q(l.snapshotter), q(o.SandboxImage), q(l.certsDir),
		!canLowerOOMScore(),
		q(o.Runc), q(l.runcRoot),
		q(o.Runc), q(l.runcRoot),
		q(o.CNIBinDir), q(l.cniConfDir),
		q(l.opt), q(l.verifiers), q(l.shimSockets), q(l.certsDir))
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// writeHosts writes the registry hosts configuration: the mirror serves
// each registry of mirrorOf, and itself, for pull and resolve, over plain
// http (or https without verification). Without a mirror the directory
// stays empty, so that no host configuration is read.
func writeHosts(certsDir, mirror string, mirrorOf []string) error {
	if mirror == "" {
		return nil
	}
	u, err := url.Parse(mirror)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("registry mirror %q: not an http(s) URL", mirror)
	}
	servers := map[string]string{u.Host: u.Scheme + "://" + u.Host}
	for _, r := range mirrorOf {
		servers[r] = "https://" + r
	}
	// Docker Hub's registry is not at its name.
	if _, ok := servers["docker.io"]; ok {
		servers["docker.io"] = "https://registry-1.docker.io"
	}
	for host, server := range servers {
		hosts := fmt.Sprintf("server = %s\n\n[host.%s]\n  capabilities = [\"pull\", \"resolve\"]\n",
			tomlString(server), tomlString(u.Scheme+"://"+u.Host))
		if u.Scheme == "https" {
			// A mirror on loopback has no certificate anyone signed.
			hosts += "  skip_verify = true\n"
		}
		dir := filepath.Join(certsDir, host)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("write registry hosts: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
			return fmt.Errorf("write registry hosts: %w", err)
		}
	}
	return nil
}

// conflist is the CNI network: a bridge with host-local addresses from the
// subnet (allocations kept in ipamDir) and portmap for host ports.
func (n network) conflist(ipamDir string) ([]byte, error) {
	type obj = map[string]any
	b, err := json.MarshalIndent(obj{
		"cniVersion": "1.0.0",
		"name":       n.name,
		"plugins": []obj{
			{
				"type":        "bridge",
				"bridge":      n.bridge,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": obj{
					"type":    "host-local",
					"dataDir": ipamDir,
					"ranges":  [][]obj{{{"subnet": n.subnet.String()}}},
					"routes":  []obj{{"dst": "0.0.0.0/0"}},
				},
			},
			{
				"type":         "portmap",
				"capabilities": obj{"portMappings": true},
			},
		},
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("write CNI configuration: %w", err)
	}
	return b, nil
}

// canLowerOOMScore says whether this process has CAP_SYS_RESOURCE, which
// setting an OOM score below the current one needs.
func canLowerOOMScore() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	return false
}

// overlayWorks tries an overlay mount in dir, where the overlayfs
// snapshotter would keep its layers.
func overlayWorks(dir string) bool {
	probe, err := os.MkdirTemp(dir, "overlay-probe-")
	if err != nil {
		return false
	}
	defer os.RemoveAll(probe)
	var paths [4]string
	for i, name := range []string{"lower", "upper", "work", "merged"} {
		paths[i] = filepath.Join(probe, name)
		if err := os.Mkdir(paths[i], 0o755); err != nil {
			return false
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", paths[0], paths[1], paths[2])
	if err := unix.Mount("overlay", paths[3], "overlay", 0, opts); err != nil {
		return false
	}
	return unix.Unmount(paths[3], unix.MNT_DETACH) == nil
}
