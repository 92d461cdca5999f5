package stats

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// diskStats is one block device's line of /proc/diskstats: what the
// kernel has counted of its I/O since boot.
type diskStats struct {
	name                                              string
	reads, readsMerged, sectorsRead, readMillis       uint64
	writes, writesMerged, sectorsWritten, writeMillis uint64
	inProgress, ioMillis, weightedIOMillis            uint64
}

// readDiskstats reads /proc/diskstats by device ("major:minor").
func readDiskstats(path string) (map[string]diskStats, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]diskStats{}
	for line := range strings.Lines(string(data)) {
		// major minor name, then 11 counters (more on newer kernels:
		// discards and flushes, which cAdvisor does not report).
		f := strings.Fields(line)
		if len(f) < 14 {
			continue
		}
		d := diskStats{name: f[2]}
		for i, dst := range []*uint64{&d.reads, &d.readsMerged, &d.sectorsRead, &d.readMillis,
			&d.writes, &d.writesMerged, &d.sectorsWritten, &d.writeMillis,
			&d.inProgress, &d.ioMillis, &d.weightedIOMillis} {
			if *dst, err = strconv.ParseUint(f[3+i], 10, 64); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, f[2], err)
			}
		}
		out[f[0]+":"+f[1]] = d
	}
	return out, nil
}

// blockFilesystem is a filesystem on a block device: where it is mounted
// (its first mount), its device node and its "major:minor".
type blockFilesystem struct {
	device, majorMinor, mountpoint string
}

// blockFilesystems lists the filesystems a mount table (a
// /proc/<pid>/mountinfo) has on block devices, each device once.
func blockFilesystems(path string) ([]blockFilesystem, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts, err := mountinfo.GetMountsFromReader(f, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seen := map[string]bool{}
	var out []blockFilesystem
	for _, m := range mounts {
		if !strings.HasPrefix(m.Source, "/dev/") {
			continue
		}
		mm := fmt.Sprintf("%d:%d", m.Major, m.Minor)
		if seen[mm] {
			continue
		}
		seen[mm] = true
		out = append(out, blockFilesystem{device: m.Source, majorMinor: mm, mountpoint: m.Mountpoint})
	}
	return out, nil
}
