// Package env builds the environment of a container of the process provider
// the way the kubelet does: service link variables, envFrom sources, then the
// container's env with $(VAR) expansion and downward API values. It also
// holds the downward API field and resource lookups that the volume package
// shares.
//
// This package owns only the computation of environment values. It reads
// ConfigMaps, Secrets and Services through a Getter and never writes to the
// API, the file system or the process table.
package env
