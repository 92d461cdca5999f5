package stats

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// ReadPSI reads a pressure stall file (/proc/pressure/cpu, a cgroup's
// memory.pressure, …): its "some" and "full" lines. The kernel counts the
// total stall in microseconds; the summary API in nanoseconds. A file
// without a "full" line (the CPU's before Linux 5.13) reports full as
// zero, which is what it is: no task set can be fully stalled on CPU
// where the kernel does not track it.
func ReadPSI(path string) (*statsv1alpha1.PSIStats, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	psi := &statsv1alpha1.PSIStats{}
	var someSeen bool
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		var d *statsv1alpha1.PSIData
		switch fields[0] {
		case "some":
			d, someSeen = &psi.Some, true
		case "full":
			d = &psi.Full
		default:
			continue
		}
		for _, f := range fields[1:] {
			key, value, ok := strings.Cut(f, "=")
			if !ok {
				return nil, fmt.Errorf("%s: malformed field %q", path, f)
			}
			switch key {
			case "total":
				usec, err := strconv.ParseUint(value, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%s: total: %w", path, err)
				}
				d.Total = usec * uint64(time.Microsecond)
			case "avg10", "avg60", "avg300":
				avg, err := strconv.ParseFloat(value, 64)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %w", path, key, err)
				}
				switch key {
				case "avg10":
					d.Avg10 = avg
				case "avg60":
					d.Avg60 = avg
				default:
					d.Avg300 = avg
				}
			}
		}
	}
	if !someSeen {
		return nil, fmt.Errorf("%s: no \"some\" line", path)
	}
	return psi, nil
}
