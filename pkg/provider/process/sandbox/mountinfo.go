package sandbox

import (
	"path/filepath"
	"strings"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

// mountsUnder lists the mount points of the agent's mount namespace strictly
// below dir. A pod's directory holds its volumes; removing it while one is
// still mounted would delete the volume's data.
func mountsUnder(dir string) ([]string, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	prefix := filepath.Clean(dir) + string(filepath.Separator)
	var out []string
	for _, m := range mounts {
		if strings.HasPrefix(m.Point, prefix) {
			out = append(out, m.Point)
		}
	}
	return out, nil
}
