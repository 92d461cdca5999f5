package csidriver

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
)

// TestSanity runs the csi-sanity suite against the driver. The specs for
// capabilities the driver does not advertise (snapshots, expansion, volume
// stats and health, group controller, SINGLE_NODE_MULTI_WRITER) skip
// themselves; everything else must pass.
func TestSanity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("csi-sanity stages and publishes volumes with bind mounts, which needs root")
	}
	dir := t.TempDir()
	// Registered after TempDir, so it runs before TempDir's removal, which
	// must not reach into a volume through a mount left behind.
	t.Cleanup(func() { unmountUnder(t, dir) })

	d, err := New(Options{
		Name:              "csi.nodelet.test",
		NodeID:            "sanity-node",
		DataDir:           filepath.Join(dir, "volumes"),
		MaxVolumesPerNode: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "csi", "csi.sock")
	serve(t, d, socket)

	cfg := sanity.NewTestConfig()
	cfg.Address = socket
	// csi-sanity makes and removes these two itself, once per spec.
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestNodeVolumeAttachLimit = true
	cfg.IdempotentCount = 3
	sanity.Test(t, cfg)

	if leaked := mountsUnder(t, dir); len(leaked) > 0 {
		t.Errorf("mounts left after csi-sanity: %v", leaked)
	}
	if ids := volumeDirs(t, d); len(ids) > 0 {
		t.Errorf("volumes left after csi-sanity: %v", ids)
	}
}

func volumeDirs(t *testing.T, d *Driver) []string {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	ids, err := d.volumeIDs()
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
