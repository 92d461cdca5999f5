package main

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/embed"
)

// newEtcdCommand runs a single-member etcd server embedded in this binary.
func newEtcdCommand() *cobra.Command {
	var dataDir, clientURL, peerURL string
	cmd := &cobra.Command{
		Use:          "etcd",
		Short:        "Run a single-member embedded etcd",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cu, err := url.Parse(clientURL)
			if err != nil {
				return fmt.Errorf("--listen-client-url: %w", err)
			}
			pu, err := url.Parse(peerURL)
			if err != nil {
				return fmt.Errorf("--listen-peer-url: %w", err)
			}
			cfg := embed.NewConfig()
			cfg.Name = "controlplane"
			cfg.Dir = dataDir
			cfg.ListenClientUrls = []url.URL{*cu}
			cfg.AdvertiseClientUrls = []url.URL{*cu}
			cfg.ListenPeerUrls = []url.URL{*pu}
			cfg.AdvertisePeerUrls = []url.URL{*pu}
			cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
			cfg.LogLevel = "warn"
			// A local development store: keep it small and quick.
			cfg.QuotaBackendBytes = 8 << 30
			cfg.AutoCompactionMode = "periodic"
			cfg.AutoCompactionRetention = "5m"
			cfg.UnsafeNoFsync = os.Getenv("CONTROLPLANE_ETCD_FSYNC") == ""

			e, err := embed.StartEtcd(cfg)
			if err != nil {
				return fmt.Errorf("start etcd: %w", err)
			}
			defer e.Close()
			<-e.Server.ReadyNotify()
			fmt.Fprintf(cmd.ErrOrStderr(), "etcd ready on %s\n", cu)

			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			select {
			case <-sig:
				return nil
			case err := <-e.Err():
				return fmt.Errorf("etcd: %w", err)
			}
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "etcd", "directory for etcd data")
	cmd.Flags().StringVar(&clientURL, "listen-client-url", "http://127.0.0.1:2379", "client URL to listen on")
	cmd.Flags().StringVar(&peerURL, "listen-peer-url", "http://127.0.0.1:2380", "peer URL to listen on")
	return cmd
}
