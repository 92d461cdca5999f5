//go:build linux

// Command teardown ends what `make run` started and removes its directory
// (.local), whatever state it was left in: control plane, agent or
// containerd up or down, pod sandboxes still running, volumes still
// mounted. make clean runs it.
//
// In order:
//  1. The processes of the pid files (--stop, in that order: nodelet,
//     addonsup, criup, controlplane) get SIGTERM, so that each cleans up
//     after itself (addonsup removes kube-proxy's iptables rules, criup
//     containerd's pods and network), then SIGKILL after --grace.
//  2. The process provider's pod sandboxes under --process-root are removed
//     through its sandbox manager: their processes killed, their cgroups
//     removed (the cri provider's pod cgroups go once step 3 has ended
//     their containers).
//  3. Every process left that belongs to the directory, with all of its
//     descendants, gets SIGTERM, then SIGKILL. A process belongs to it when
//     its executable, or a path on its command line (resolved against its
//     working directory), lies under --dir or under the containerd
//     directory criup recorded in --cri-dir-file. Never a process picked
//     by its name, and never teardown itself or the processes it runs
//     under.
//  4. kube-proxy's iptables rules, if a killed addonsup left them
//     (clusteraddons.Cleanup on --addons-dir), once kube-proxy has ended.
//  5. Every mount below those directories is unmounted, deepest first.
//  6. The directories are removed without ever descending into a mount
//     point: a mount that could not be unmounted is an error, and its
//     contents are left alone.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "teardown:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "", "the directory make run works in (required)")
	stop := flag.String("stop", "nodelet,addonsup,criup,controlplane", "the pid files <dir>/<name>.pid whose processes are stopped first, in this order")
	processRoot := flag.String("process-root", "", "the process provider's root directory, whose pod sandboxes are removed")
	criDirFile := flag.String("cri-dir-file", "", "a file naming the directory of criup's containerd, which may lie outside --dir")
	addonsDir := flag.String("addons-dir", "", "the directory of addonsup, whose kube-proxy's rules are removed if it left them")
	grace := flag.Duration("grace", 60*time.Second, "how long a process has to exit after SIGTERM")
	flag.Parse()
	if *dir == "" {
		return errors.New("--dir is required")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()

	t, err := newTeardown(*dir, *criDirFile)
	if err != nil {
		return err
	}
	t.grace = *grace
	t.addonsDir = *addonsDir
	t.log = func(format string, args ...any) { fmt.Printf("teardown: "+format+"\n", args...) }
	var names []string
	for _, n := range strings.Split(*stop, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, filepath.Join(t.dir, n+".pid"))
		}
	}
	return t.run(ctx, names, *processRoot)
}
