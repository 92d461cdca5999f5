//go:build linux

package crienv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// slots is how many environments can run at once on one machine.
const slots = 256

// slot is the index an environment holds while it runs: its bridge, CNI
// network and default subnet are named after it. Holding it is holding an
// abstract unix socket, which the kernel frees when the process dies, so a
// crashed test binary never keeps its slot and leaves no file behind.
type slot struct {
	index int
	l     net.Listener
}

// takeSlot holds the first free slot that accept takes, from one derived
// from the process ID onwards.
func takeSlot(accept func(index int) error) (*slot, error) {
	start := os.Getpid() % slots
	last := errors.New("all are in use")
	for i := 0; i < slots; i++ {
		index := (start + i) % slots
		l, err := net.Listen("unix", slotName(index))
		if err != nil {
			continue
		}
		if err := accept(index); err != nil {
			l.Close()
			last = err
			continue
		}
		return &slot{index: index, l: l}, nil
	}
	return nil, fmt.Errorf("take a slot: %w", last)
}

// othersHeld says whether another environment holds a slot now.
func othersHeld(own *slot) bool {
	for index := 0; index < slots; index++ {
		if index == own.index {
			continue
		}
		l, err := net.Listen("unix", slotName(index))
		if err != nil {
			return true
		}
		l.Close()
	}
	return false
}

func slotName(index int) string { return fmt.Sprintf("@nodelet-crienv-slot-%d", index) }

func (s *slot) release() error {
	if err := s.l.Close(); err != nil {
		return fmt.Errorf("release slot %d: %w", s.index, err)
	}
	return nil
}

// network is the CNI network of a slot.
type network struct {
	name   string
	bridge string
	subnet *net.IPNet
}

// newNetwork names the slot's network and parses its subnet (the slot's
// default one when subnet is empty), which must not overlap an address of
// the host.
// Subnets is the range of every slot's default pod subnet,
// 10.213.<slot>.0/24: the cluster's pod range where several environments
// are one cluster's nodes.
const Subnets = "10.213.0.0/16"

func newNetwork(index int, subnet string) (network, error) {
	if subnet == "" {
		subnet = fmt.Sprintf("10.213.%d.0/24", index)
	}
	_, ipnet, err := net.ParseCIDR(subnet)
	if err != nil {
		return network{}, fmt.Errorf("pod subnet: %w", err)
	}
	if ones, bits := ipnet.Mask.Size(); bits != 32 || ones > 30 {
		return network{}, fmt.Errorf("pod subnet %s: not an IPv4 subnet of /30 or larger", subnet)
	}
	if over, err := overlaps(ipnet); err != nil {
		return network{}, fmt.Errorf("pod subnet: %w", err)
	} else if over {
		return network{}, fmt.Errorf("pod subnet %s overlaps an address of the host; set Options.Subnet", subnet)
	}
	return network{
		name:   fmt.Sprintf("nodelet-crienv-%d", index),
		bridge: fmt.Sprintf("nlbr%d", index),
		subnet: ipnet,
	}, nil
}

// deleteLink deletes the network interface name, if there is one, with a
// netlink RTM_DELLINK request.
func deleteLink(name string) error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("delete link %s: %w", name, err)
	}
	index := 0
	for _, i := range ifaces {
		if i.Name == name {
			index = i.Index
		}
	}
	if index == 0 {
		return nil
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("delete link %s: netlink socket: %w", name, err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("delete link %s: netlink bind: %w", name, err)
	}
	req := make([]byte, unix.NLMSG_HDRLEN+unix.SizeofIfInfomsg)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.RTM_DELLINK)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(req[8:], 1) // sequence number
	// ifinfomsg: family (AF_UNSPEC), pad, type, index, flags, change.
	ne.PutUint32(req[unix.NLMSG_HDRLEN+4:], uint32(index))
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("delete link %s: netlink send: %w", name, err)
	}
	resp := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, resp, 0)
	if err != nil {
		return fmt.Errorf("delete link %s: netlink receive: %w", name, err)
	}
	if n < unix.NLMSG_HDRLEN+4 || ne.Uint16(resp[4:]) != unix.NLMSG_ERROR {
		return fmt.Errorf("delete link %s: unexpected netlink answer", name)
	}
	if errno := int32(ne.Uint32(resp[unix.NLMSG_HDRLEN:])); errno != 0 && unix.Errno(-errno) != unix.ENODEV {
		return fmt.Errorf("delete link %s: %w", name, unix.Errno(-errno))
	}
	return nil
}

// scrubIptables deletes the nat rules that the CNI plugins added for the
// network and did not remove (a pod they never saw deleted), and the
// per-pod chains those rules jump to. The shared CNI-HOSTPORT-* chains stay.
func scrubIptables(networkName string) error {
	ipt, err := exec.LookPath("iptables")
	if err != nil {
		if ipt, err = exec.LookPath("/usr/sbin/iptables"); err != nil {
			return nil // no iptables, no rules
		}
	}
	out, err := exec.Command(ipt, "-w", "-t", "nat", "-S").Output()
	if err != nil {
		return fmt.Errorf("list nat rules: %w", err)
	}
	rules, chains := ownRules(string(out), networkName)
	var errs []error
	for _, r := range rules {
		if b, err := exec.Command(ipt, append([]string{"-w", "-t", "nat", "-D"}, r...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete nat rule %q: %w: %s", r, err, b))
		}
	}
	for _, c := range chains {
		for _, op := range []string{"-F", "-X"} {
			if b, err := exec.Command(ipt, "-w", "-t", "nat", op, c).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("iptables %s %s: %w: %s", op, c, err, b))
			}
		}
	}
	return errors.Join(errs...)
}

// portmapChains are the chains the portmap plugin shares among all its
// networks; it makes them again (with the jumps to them) when it needs them.
var portmapChains = []string{"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"}

// scrubPortmapChains deletes the portmap plugin's shared chains and the
// jumps to them when no pod's host port uses them (CNI-HOSTPORT-DNAT has
// no rule) and no other environment runs.
func scrubPortmapChains(own *slot) error {
	ipt, err := exec.LookPath("iptables")
	if err != nil {
		if ipt, err = exec.LookPath("/usr/sbin/iptables"); err != nil {
			return nil
		}
	}
	if othersHeld(own) {
		return nil
	}
	out, err := exec.Command(ipt, "-w", "-t", "nat", "-S").Output()
	if err != nil {
		return fmt.Errorf("list nat rules: %w", err)
	}
	rules, inUse := portmapJumps(string(out))
	if inUse {
		return nil
	}
	var errs []error
	for _, r := range rules {
		if b, err := exec.Command(ipt, append([]string{"-w", "-t", "nat", "-D"}, r...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete nat rule %q: %w: %s", r, err, b))
		}
	}
	for _, c := range portmapChains {
		if !strings.Contains(string(out), "-N "+c+"\n") {
			continue
		}
		for _, op := range []string{"-F", "-X"} {
			if b, err := exec.Command(ipt, "-w", "-t", "nat", op, c).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("iptables %s %s: %w: %s", op, c, err, b))
			}
		}
	}
	return errors.Join(errs...)
}

// portmapJumps picks out of "iptables -S" output the rules of other chains
// that jump to the portmap plugin's shared chains, as arguments for -D, and
// says whether CNI-HOSTPORT-DNAT has a rule (a host port in use).
func portmapJumps(listing string) (rules [][]string, inUse bool) {
	shared := map[string]bool{}
	for _, c := range portmapChains {
		shared[c] = true
	}
	for _, line := range strings.Split(listing, "\n") {
		args := splitRule(line)
		if len(args) < 2 || args[0] != "-A" {
			continue
		}
		if args[1] == "CNI-HOSTPORT-DNAT" {
			inUse = true
		}
		if shared[args[1]] {
			continue
		}
		for i, a := range args[:len(args)-1] {
			if a == "-j" && shared[args[i+1]] {
				rules = append(rules, args[1:])
			}
		}
	}
	return rules, inUse
}

// ownRules picks out of "iptables -S" output the rules whose comment names
// the network (the CNI plugins' `name: "<network>" id: "<container>"`), as
// arguments for -D (chain first), and the per-pod chains they jump to.
func ownRules(listing, networkName string) (rules [][]string, chains []string) {
	marker := `name: "` + networkName + `"`
	for _, line := range strings.Split(listing, "\n") {
		args := splitRule(line)
		if len(args) < 2 || args[0] != "-A" {
			continue
		}
		own := false
		for _, a := range args {
			if strings.Contains(a, marker) {
				own = true
			}
		}
		if !own {
			continue
		}
		rules = append(rules, args[1:])
		for i, a := range args[:len(args)-1] {
			if t := args[i+1]; a == "-j" && strings.HasPrefix(t, "CNI-") && !strings.HasPrefix(t, "CNI-HOSTPORT-") {
				chains = append(chains, t)
			}
		}
	}
	return rules, chains
}

// splitRule splits one line of "iptables -S" into arguments: words, or
// double-quoted strings with backslash escapes.
func splitRule(line string) []string {
	var (
		args   []string
		cur    strings.Builder
		quoted bool
		word   bool
	)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			quoted, word = !quoted, true
		case !quoted && (c == ' ' || c == '\t'):
			if word {
				args = append(args, cur.String())
				cur.Reset()
				word = false
			}
		default:
			cur.WriteByte(c)
			word = true
		}
	}
	if word {
		args = append(args, cur.String())
	}
	return args
}

// cniCacheDir is where libcni, inside containerd, caches the result of each
// attachment.
const cniCacheDir = "/var/lib/cni/results"

// removeCNICache removes the network's cached CNI results, which a pod the
// plugins never saw deleted leaves behind.
func removeCNICache(networkName string) error {
	files, err := filepath.Glob(filepath.Join(cniCacheDir, networkName+"-*"))
	if err != nil {
		return fmt.Errorf("CNI cache: %w", err)
	}
	var errs []error
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("CNI cache: %w", err))
		}
	}
	return errors.Join(errs...)
}
