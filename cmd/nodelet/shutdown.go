package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/nodeshutdown"
)

// runShutdown is `nodelet shutdown`: it asks the agent of the root dir to
// shut its node down gracefully (pods stopped by priority within
// shutdownGracePeriod, the node NotReady), prints the progress and returns
// once it is done. Hook it into the host's shutdown (a systemd unit's
// ExecStop before the agent's own stop, say); stopping the agent alone
// leaves the pods running.
func runShutdown(args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("nodelet shutdown", pflag.ContinueOnError)
	rootDir := fs.String("root-dir", config.Default().RootDir, "the agent's --root-dir, where its control socket is")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("shutdown: unexpected arguments %q", fs.Args())
	}
	// Interrupting the command does not stop the shutdown, only the wait.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := nodeshutdown.Request(ctx, filepath.Join(*rootDir, nodeshutdown.SocketName), stdout); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
