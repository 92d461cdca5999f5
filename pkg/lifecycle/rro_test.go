package lifecycle

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// A mount is read-only recursively as its recursiveReadOnly asks and the
// runtime handler can; what cannot be is an error naming the mount.
func TestRecursiveReadOnly(t *testing.T) {
	type handler struct {
		name      string
		supported bool
	}
	supports := handler{"", true}
	lacks := handler{"old", false}
	ro := func(mode corev1.RecursiveReadOnlyMode) Mount {
		return Mount{Destination: "/mnt", ReadOnly: true, RecursiveReadOnly: mode}
	}
	tests := []struct {
		name    string
		mount   Mount
		handler handler
		want    bool
		wantErr string
	}{
		{"unset", ro(""), supports, false, ""},
		{"disabled", ro(corev1.RecursiveReadOnlyDisabled), supports, false, ""},
		{"if possible, supported", ro(corev1.RecursiveReadOnlyIfPossible), supports, true, ""},
		{"if possible, not supported", ro(corev1.RecursiveReadOnlyIfPossible), lacks, false, ""},
		{"enabled, supported", ro(corev1.RecursiveReadOnlyEnabled), supports, true, ""},
		{"enabled, explicitly no propagation", Mount{Destination: "/mnt", ReadOnly: true, RecursiveReadOnly: corev1.RecursiveReadOnlyEnabled,
			Propagation: corev1.MountPropagationNone}, supports, true, ""},
		{"enabled, not supported", ro(corev1.RecursiveReadOnlyEnabled), lacks, false, `runtime handler "old" does not support`},
		{"enabled, not read-only", Mount{Destination: "/mnt", RecursiveReadOnly: corev1.RecursiveReadOnlyEnabled}, supports, false, "needs readOnly"},
		{"enabled, propagating", Mount{Destination: "/mnt", ReadOnly: true, RecursiveReadOnly: corev1.RecursiveReadOnlyEnabled,
			Propagation: corev1.MountPropagationHostToContainer}, supports, false, "needs mountPropagation None"},
		{"unknown", ro("Sometimes"), supports, false, `unknown recursiveReadOnly "Sometimes"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RecursiveReadOnly(tt.mount, tt.handler.name, tt.handler.supported)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "/mnt") {
					t.Fatalf("err = %v, want one naming the mount and saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("RecursiveReadOnly = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// Each container's status lists its volume mounts as the kubelet's does,
// the read-only ones saying whether they are read-only recursively: the
// node suite's 'Mount recursive read-only' spec reads them.
func TestVolumeMountStatuses(t *testing.T) {
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "rw", MountPath: "/rw"},
		{Name: "ro", MountPath: "/ro", ReadOnly: true},
		{Name: "possible", MountPath: "/possible", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyIfPossible)},
		{Name: "enabled", MountPath: "/enabled", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyEnabled)},
		{Name: "propagating", MountPath: "/propagating", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyIfPossible),
			MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)},
	}}
	show := func(l []corev1.VolumeMountStatus) []string {
		var out []string
		for _, s := range l {
			mode := "-"
			if s.RecursiveReadOnly != nil {
				mode = string(*s.RecursiveReadOnly)
			}
			out = append(out, s.Name+" "+s.MountPath+" "+map[bool]string{true: "ro", false: "rw"}[s.ReadOnly]+" "+mode)
		}
		return out
	}
	for _, tt := range []struct {
		supported bool
		want      []string
	}{
		{true, []string{"rw /rw rw -", "ro /ro ro Disabled", "possible /possible ro Enabled", "enabled /enabled ro Enabled", "propagating /propagating ro Disabled"}},
		{false, []string{"rw /rw rw -", "ro /ro ro Disabled", "possible /possible ro Disabled", "enabled /enabled ro Disabled", "propagating /propagating ro Disabled"}},
	} {
		if got := show(volumeMountStatuses(c, "h", tt.supported)); !slices.Equal(got, tt.want) {
			t.Errorf("supported %v: %q, want %q", tt.supported, got, tt.want)
		}
	}
}
