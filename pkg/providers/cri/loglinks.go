package cri

import (
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
)

// Every container's log is linked as
// <containerLogsDir>/<pod>_<namespace>_<container>-<id>.log, where log
// shippers look for them, as the kubelet links them in
// /var/log/containers.

func (r *criRuntime) logLink(pod *corev1.Pod, container, id string) string {
	return filepath.Join(r.containerLogsDir, fmt.Sprintf("%s_%s_%s-%s.log", pod.Name, pod.Namespace, container, id))
}

// linkLog links a new container's log; failing to is only logged.
func (r *criRuntime) linkLog(pod *corev1.Pod, container, id, logPath string) error {
	if err := os.MkdirAll(r.containerLogsDir, 0o755); err != nil {
		return fmt.Errorf("container log link: %w", err)
	}
	if err := os.Symlink(logPath, r.logLink(pod, container, id)); err != nil && !os.IsExist(err) {
		return fmt.Errorf("container log link: %w", err)
	}
	return nil
}

// removeLogLink removes the link of a container's log.
func (r *criRuntime) removeLogLink(id string) {
	links, _ := filepath.Glob(filepath.Join(r.containerLogsDir, "*-"+id+".log"))
	for _, l := range links {
		_ = os.Remove(l)
	}
}
