package lifecycle

import (
	"errors"
	"testing"

	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
)

// A FailedMount event names each volume as the kubelet's does ("MountVolume.SetUp
// failed for volume …"), which the node e2e suite's pod conditions specs
// wait for.
func TestMountFailureNamesTheVolume(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.Join(&hostvolume.SetUpError{Volume: "cm", Err: errors.New("configmap ns/cm not found")}),
			`MountVolume.SetUp failed for volume "cm" : configmap ns/cm not found`},
		{errors.Join(&hostvolume.SetUpError{Volume: "a", Err: errors.New("x")}, &hostvolume.SetUpError{Volume: "b", Err: errors.New("y")}),
			`MountVolume.SetUp failed for volume "a" : x; MountVolume.SetUp failed for volume "b" : y`},
		{errors.New("volume manager has no root directory"), "MountVolume.SetUp failed: volume manager has no root directory"},
	} {
		if got := mountFailure(tc.err); got != tc.want {
			t.Errorf("mountFailure(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
