package stats

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// userHZ is the unit of the CPU times in /proc/stat: the kernel reports
// them in USER_HZ ticks, which is 100 per second on every Linux ABI.
const userHZ = 100

// readProcStat returns the CPU time the host spent busy, in core-nanoseconds,
// and the boot time, from /proc/stat. Busy is everything but idle and iowait;
// guest time is already counted in user time.
func readProcStat(path string) (busy uint64, boot time.Time, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, time.Time{}, err
	}
	var cpuSeen, bootSeen bool
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "cpu":
			// user nice system idle iowait irq softirq steal …
			if len(fields) < 8 {
				return 0, time.Time{}, fmt.Errorf("%s: short cpu line %q", path, strings.TrimSpace(line))
			}
			var ticks uint64
			for _, i := range []int{1, 2, 3, 6, 7, 8} {
				if i >= len(fields) {
					break
				}
				v, err := strconv.ParseUint(fields[i], 10, 64)
				if err != nil {
					return 0, time.Time{}, fmt.Errorf("%s: cpu line: %w", path, err)
				}
				ticks += v
			}
			busy, cpuSeen = ticks*uint64(time.Second/userHZ), true
		case "btime":
			if len(fields) < 2 {
				continue
			}
			secs, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, time.Time{}, fmt.Errorf("%s: btime: %w", path, err)
			}
			boot, bootSeen = time.Unix(secs, 0), true
		}
	}
	if !cpuSeen || !bootSeen {
		return 0, time.Time{}, fmt.Errorf("%s: no cpu or btime line", path)
	}
	return busy, boot, nil
}

// readKeyValues reads a file of "key value" lines: cgroup v2's memory.stat
// and cpu.stat, /proc/vmstat, and /proc/meminfo ("Key:  value kB", returned
// in bytes). Lines that do not parse are skipped.
func readKeyValues(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	values := map[string]uint64{}
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) == 3 && fields[2] == "kB" {
			v *= 1024
		}
		values[strings.TrimSuffix(fields[0], ":")] = v
	}
	return values, nil
}

// readUint reads a file that holds one number.
func readUint(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// readTaskCount returns the number of tasks (processes and threads) from
// /proc/loadavg's "running/total" field, which unlike sysinfo(2) does not
// wrap at 65536.
func readTaskCount(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(data))
	if len(fields) < 4 {
		return 0, fmt.Errorf("%s: want at least 4 fields, got %q", path, data)
	}
	_, total, ok := strings.Cut(fields[3], "/")
	if !ok {
		return 0, fmt.Errorf("%s: no task count in %q", path, fields[3])
	}
	n, err := strconv.ParseInt(total, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: task count: %w", path, err)
	}
	return n, nil
}

// netCounters are one interface's counters in /proc/net/dev.
type netCounters struct {
	name                                  string
	rxBytes, rxPackets, rxErrors, rxDrops uint64
	txBytes, txPackets, txErrors, txDrops uint64
}

// readNetCounters returns the counters of every interface in a
// /proc/<pid>/net/dev.
func readNetCounters(path string) ([]netCounters, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []netCounters
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, counters, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue // the two header lines
		}
		// receive: bytes packets errs drop fifo frame compressed multicast,
		// then transmit: bytes packets errs drop fifo colls carrier compressed
		fields := strings.Fields(counters)
		if len(fields) < 16 {
			return nil, fmt.Errorf("%s: short line for %s", path, strings.TrimSpace(name))
		}
		c := netCounters{name: strings.TrimSpace(name)}
		for i, dst := range []*uint64{&c.rxBytes, &c.rxPackets, &c.rxErrors, &c.rxDrops} {
			if *dst, err = strconv.ParseUint(fields[i], 10, 64); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, c.name, err)
			}
		}
		for i, dst := range []*uint64{&c.txBytes, &c.txPackets, &c.txErrors, &c.txDrops} {
			if *dst, err = strconv.ParseUint(fields[8+i], 10, 64); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, c.name, err)
			}
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// readNetDev returns the byte and error counters of every interface in
// /proc/net/dev, as the summary reports them.
func readNetDev(path string) ([]statsv1alpha1.InterfaceStats, error) {
	counters, err := readNetCounters(path)
	if err != nil {
		return nil, err
	}
	ifaces := make([]statsv1alpha1.InterfaceStats, 0, len(counters))
	for _, c := range counters {
		ifaces = append(ifaces, statsv1alpha1.InterfaceStats{
			Name:    c.name,
			RxBytes: &c.rxBytes, RxErrors: &c.rxErrors, TxBytes: &c.txBytes, TxErrors: &c.txErrors,
		})
	}
	return ifaces, nil
}

// readDefaultRouteInterface returns the interface of the IPv4 default
// route in /proc/net/route, or "" when there is none.
func readDefaultRouteInterface(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(data)) {
		// Iface Destination Gateway Flags RefCnt Use Metric Mask …
		fields := strings.Fields(line)
		if len(fields) >= 8 && fields[1] == "00000000" && fields[7] == "00000000" {
			return fields[0], nil
		}
	}
	return "", nil
}

// ignoredInterface tells the interfaces whose traffic is not the node's
// own: the loopback, and the host ends of veth pairs and container bridges.
func ignoredInterface(name string) bool {
	if name == "lo" {
		return true
	}
	for _, prefix := range []string{"veth", "docker", "nerdctl"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}
