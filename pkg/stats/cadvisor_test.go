package stats

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/provider"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// scrapeCadvisor serves the handler once and returns its text.
func scrapeCadvisor(t *testing.T, root, proc string, containers []provider.ContainerCgroup) string {
	t.Helper()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1700000000, 0))
	h := CadvisorHandler(func(context.Context) ([]provider.ContainerCgroup, error) { return containers, nil },
		CadvisorOptions{CgroupRoot: root, ProcRoot: proc, Clock: clk})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics/cadvisor", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return string(body)
}

func expectLines(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("metrics lack %q", w)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}
}

const testLabels = `container="app",id="/kubepods/besteffort/poduid-1/c1",image="busybox:1.37",name="c1",namespace="ns",pod="p1"`

// withLabels is the container's labels and extra ones (name="value"),
// sorted by name as the exposition writes them.
func withLabels(extra ...string) string {
	all := append(strings.Split(testLabels, ","), extra...)
	sort.Strings(all)
	return strings.Join(all, ",")
}

func TestCadvisorMetricsCgroupV1(t *testing.T) {
	root, proc := t.TempDir(), t.TempDir()
	cg := "kubepods/besteffort/poduid-1/c1"
	writeFiles(t, root, map[string]string{
		"cpuacct/" + cg + "/cpuacct.usage":                           "2500000000\n",
		"cpuacct/" + cg + "/cpuacct.stat":                            "user 150\nsystem 50\n",
		"cpu/" + cg + "/cpu.cfs_period_us":                           "100000\n",
		"cpu/" + cg + "/cpu.shares":                                  "2\n",
		"cpu/" + cg + "/cpu.cfs_quota_us":                            "-1\n",
		"memory/" + cg + "/memory.usage_in_bytes":                    "3000000\n",
		"memory/" + cg + "/memory.max_usage_in_bytes":                "4000000\n",
		"memory/" + cg + "/memory.failcnt":                           "0\n",
		"memory/" + cg + "/memory.stat":                              "pgfault 300\npgmajfault 1\ntotal_cache 1000000\ntotal_rss 2000000\ntotal_mapped_file 4096\ntotal_swap 0\ntotal_inactive_file 500000\ntotal_pgfault 310\ntotal_pgmajfault 2\n",
		"memory/" + cg + "/memory.oom_control":                       "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
		"memory/" + cg + "/memory.limit_in_bytes":                    "79998976\n",
		"memory/" + cg + "/memory.soft_limit_in_bytes":               "9223372036854771712\n",
		"memory/" + cg + "/memory.memsw.limit_in_bytes":              "79998976\n",
		"blkio/" + cg + "/blkio.throttle.io_service_bytes_recursive": "8:0 Read 4096\n8:0 Write 8192\n8:0 Total 12288\nTotal 12288\n",
		"blkio/" + cg + "/blkio.throttle.io_serviced_recursive":      "8:0 Read 1\n8:0 Write 2\n8:0 Total 3\nTotal 3\n",
		"pids/" + cg + "/cgroup.procs":                               "42\n",
		"pids/" + cg + "/pids.max":                                   "max\n",
	})
	writeFiles(t, proc, map[string]string{
		"42/limits":    "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\n",
		"42/task/42/x": "",
		"42/task/43/x": "",
		"42/fd/.keep":  "",
	})
	if err := os.Symlink("socket:[1234]", filepath.Join(proc, "42/fd/3")); err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1699999000, 0)
	used := uint64(8192)
	body := scrapeCadvisor(t, root, proc, []provider.ContainerCgroup{{
		Namespace: "ns", Pod: "p1", Container: "app", ID: "c1", Image: "busybox:1.37",
		Cgroup: "/" + cg, StartTime: start, WritableLayerBytes: &used,
	}})
	expectLines(t, body,
		`container_cpu_usage_seconds_total{`+withLabels(`cpu="total"`)+`} 2.5 1700000000000`,
		`container_cpu_user_seconds_total{`+testLabels+`} 1.5`,
		`container_cpu_system_seconds_total{`+testLabels+`} 0.5`,
		`container_spec_cpu_period{`+testLabels+`} 100000`,
		`container_spec_cpu_shares{`+testLabels+`} 2`,
		`container_memory_usage_bytes{`+testLabels+`} 3e+06`,
		`container_memory_working_set_bytes{`+testLabels+`} 2.5e+06`,
		`container_memory_max_usage_bytes{`+testLabels+`} 4e+06`,
		`container_memory_rss{`+testLabels+`} 2e+06`,
		`container_memory_cache{`+testLabels+`} 1e+06`,
		`container_memory_mapped_file{`+testLabels+`} 4096`,
		`container_memory_failcnt{`+testLabels+`} 0`,
		`container_memory_failures_total{`+withLabels(`failure_type="pgfault"`, `scope="container"`)+`} 300`,
		`container_oom_events_total{`+testLabels+`} 0`,
		`container_spec_memory_limit_bytes{`+testLabels+`} 7.9998976e+07`,
		`container_spec_memory_reservation_limit_bytes{`+testLabels+`} 0`,
		`container_spec_memory_swap_limit_bytes{`+testLabels+`} 7.9998976e+07`,
		`container_blkio_device_usage_total{`+withLabels(`device="/dev/block/8:0"`, `major="8"`, `minor="0"`, `operation="Write"`)+`} 8192`,
		`container_fs_reads_bytes_total{`+withLabels(`device="/dev/block/8:0"`)+`} 4096`,
		`container_fs_writes_total{`+withLabels(`device="/dev/block/8:0"`)+`} 2`,
		`container_fs_usage_bytes{`+withLabels(`device=""`)+`} 8192`,
		`container_processes{`+testLabels+`} 1`,
		`container_threads{`+testLabels+`} 2`,
		`container_threads_max{`+testLabels+`} 0`,
		`container_file_descriptors{`+testLabels+`} 2`,
		`container_sockets{`+testLabels+`} 1`,
		`container_ulimits_soft{`+withLabels(`ulimit="max_open_files"`)+`} 1.048576e+06`,
		`container_start_time_seconds{`+testLabels+`} 1.699999e+09`,
		`container_last_seen{`+testLabels+`} 1.7e+09`,
	)
}

func TestCadvisorMetricsCgroupV2(t *testing.T) {
	root, proc := t.TempDir(), t.TempDir()
	cg := "kubepods/besteffort/poduid-1/c1"
	writeFiles(t, root, map[string]string{
		"cgroup.controllers":   "cpu memory io pids\n",
		cg + "/cpu.stat":       "usage_usec 2500000\nuser_usec 1500000\nsystem_usec 1000000\n",
		cg + "/cpu.max":        "max 100000\n",
		cg + "/cpu.weight":     "1\n",
		cg + "/memory.current": "3000000\n",
		cg + "/memory.stat":    "anon 2000000\nfile 1000000\nfile_mapped 4096\ninactive_file 500000\npgfault 300\npgmajfault 1\n",
		cg + "/memory.events":  "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
		cg + "/memory.max":     "max\n",
		cg + "/memory.low":     "0\n",
		cg + "/io.stat":        "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n",
		cg + "/cgroup.procs":   "",
		cg + "/pids.max":       "max\n",
	})
	body := scrapeCadvisor(t, root, proc, []provider.ContainerCgroup{{
		Namespace: "ns", Pod: "p1", Container: "app", ID: "c1", Image: "busybox:1.37", Cgroup: "/" + cg,
	}})
	expectLines(t, body,
		`container_cpu_usage_seconds_total{`+withLabels(`cpu="total"`)+`} 2.5`,
		`container_spec_cpu_period{`+testLabels+`} 100000`,
		`container_spec_cpu_shares{`+testLabels+`} 2`,
		`container_memory_working_set_bytes{`+testLabels+`} 2.5e+06`,
		`container_memory_rss{`+testLabels+`} 2e+06`,
		`container_spec_memory_limit_bytes{`+testLabels+`} 0`,
		`container_fs_writes_bytes_total{`+withLabels(`device="/dev/block/8:0"`)+`} 8192`,
		`container_processes{`+testLabels+`} 0`,
	)
}

// The block devices' figures go to the root container, named by their
// device nodes; a container's I/O to its filesystem's device is reported
// as zero before it has done any; a pod's network is its sandbox's.
func TestCadvisorDevicesAndNetwork(t *testing.T) {
	root, proc, mnt := t.TempDir(), t.TempDir(), t.TempDir()
	cg := "kubepods/besteffort/poduid-1/c1"
	sandbox := "kubepods/besteffort/poduid-1/sb1"
	writeFiles(t, root, map[string]string{
		"blkio/" + cg + "/blkio.throttle.io_service_bytes_recursive":      "8:0 Read 4096\n8:0 Write 0\n8:0 Total 4096\nTotal 4096\n",
		"blkio/" + cg + "/blkio.throttle.io_serviced_recursive":           "8:0 Read 1\n8:0 Write 0\n8:0 Total 1\nTotal 1\n",
		"blkio/" + sandbox + "/blkio.throttle.io_service_bytes_recursive": "Total 0\n",
		"pids/" + sandbox + "/cgroup.procs":                               "77\n",
	})
	writeFiles(t, proc, map[string]string{
		"diskstats": "   8       0 sda 10 1 80 5 20 2 160 7 0 9 12\n" +
			" 254       0 vda 3557377 293356 201451426 2618572 2496328 1415033 206223496 1770039 3 501752 4548014 895847 83 209744816 94373 347763 65028\n",
		"self/mountinfo": "25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw\n" +
			"27 1 254:0 / " + mnt + " rw,relatime - ext4 /dev/vda rw\n" +
			"28 1 254:0 /etc " + mnt + "/etc rw,relatime - ext4 /dev/vda rw\n",
		"77/net/dev": `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  5000      50    0    0    0     0          0         0     5000      50    0    0    0     0       0          0
  eth0:  1234      10    1    2    0     0          0         0      567      7    3    4    0     0       0          0
`,
	})
	body := scrapeCadvisor(t, root, proc, []provider.ContainerCgroup{
		{Namespace: "ns", Pod: "p1", Container: "POD", ID: "sb1", Cgroup: "/" + sandbox},
		{Namespace: "ns", Pod: "p1", Container: "app", ID: "c1", Image: "busybox:1.37", Cgroup: "/" + cg, FsDevice: "254:0"},
	})
	rootLabels := `container="",device="/dev/vda",id="/",image="",name="",namespace="",pod=""`
	podLabels := `container="POD",id="/` + sandbox + `",image="",interface="eth0",name="sb1",namespace="ns",pod="p1"`
	expectLines(t, body,
		`container_fs_sector_reads_total{`+rootLabels+`} 2.01451426e+08`,
		`container_fs_io_current{`+rootLabels+`} 3`,
		`container_fs_read_seconds_total{`+rootLabels+`} 2618.572`,
		`container_fs_io_time_weighted_seconds_total{`+rootLabels+`} 4548.014`,
		`container_fs_inodes_total{`+rootLabels+`} `,
		`container_fs_inodes_free{`+rootLabels+`} `,
		`container_fs_limit_bytes{`+rootLabels+`} `,
		`container_fs_reads_bytes_total{`+withLabels(`device="/dev/sda"`)+`} 4096`,
		`container_blkio_device_usage_total{`+withLabels(`device="/dev/vda"`, `major="254"`, `minor="0"`, `operation="Read"`)+`} 0`,
		`container_fs_writes_total{`+withLabels(`device="/dev/vda"`)+`} 0`,
		`container_network_receive_bytes_total{`+podLabels+`} 1234`,
		`container_network_receive_packets_dropped_total{`+podLabels+`} 2`,
		`container_network_transmit_packets_total{`+podLabels+`} 7`,
		`container_network_transmit_errors_total{`+podLabels+`} 3`,
	)
	for _, unwanted := range []string{`interface="lo"`, `device="tmpfs"`, `sda",id="/"`} {
		if strings.Contains(body, unwanted) {
			t.Errorf("metrics have %s", unwanted)
		}
	}
	// The sandbox did no I/O and has no filesystem device of its own: no
	// block device lines at all.
	if strings.Contains(body, `container_fs_reads_total{container="POD"`) {
		t.Errorf("the sandbox reports block I/O it did not do")
	}
}
