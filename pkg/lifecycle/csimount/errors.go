package csimount

import (
	"fmt"
	"strings"
)

// Event reasons of volumes that cannot be set up, as the kubelet's.
const (
	// ReasonFailedMount: the volume cannot be resolved, staged or published.
	ReasonFailedMount = "FailedMount"
	// ReasonFailedAttachVolume: the volume was not attached to the node
	// within the attach timeout.
	ReasonFailedAttachVolume = "FailedAttachVolume"
)

// VolumeError is why one volume of a pod is not set up (or torn down) yet.
// Every VolumeError is retryable.
type VolumeError struct {
	// Volume is the pod's name for the volume.
	Volume string
	// Reason is the Warning Event's reason the error deserves, or empty
	// while the volume is only waiting (to be attached, reported in use, or
	// for the API caches) within the attach timeout.
	Reason string
	// Waiting says the volume waits for the API to change (its claim to be
	// bound, the volume to be attached): it is worth retrying as soon as
	// the API objects change, not only after a back-off.
	Waiting bool
	Err     error
}

func (e *VolumeError) Error() string { return fmt.Sprintf("volume %q: %v", e.Volume, e.Err) }

func (e *VolumeError) Unwrap() error { return e.Err }

// SetUpError is the error of a pod's SetUp: one VolumeError per volume not
// set up.
type SetUpError struct {
	Volumes []*VolumeError
}

func (e *SetUpError) Error() string {
	msgs := make([]string, 0, len(e.Volumes))
	for _, v := range e.Volumes {
		msgs = append(msgs, v.Error())
	}
	return strings.Join(msgs, "; ")
}

// Unwrap gives the volumes' errors to errors.Is and errors.As.
func (e *SetUpError) Unwrap() []error {
	out := make([]error, 0, len(e.Volumes))
	for _, v := range e.Volumes {
		out = append(out, v)
	}
	return out
}

// Reason is the Warning Event's reason of the pod's set-up: FailedMount if
// any volume failed to mount, else FailedAttachVolume if any was not
// attached in time, else empty (the pod only waits).
func (e *SetUpError) Reason() string {
	reason := ""
	for _, v := range e.Volumes {
		switch v.Reason {
		case ReasonFailedMount:
			return ReasonFailedMount
		case ReasonFailedAttachVolume:
			reason = ReasonFailedAttachVolume
		}
	}
	return reason
}

// Waiting says every volume not set up waits for the API to change.
func (e *SetUpError) Waiting() bool {
	for _, v := range e.Volumes {
		if !v.Waiting {
			return false
		}
	}
	return true
}
