// Package hostvolume prepares the volumes of pods as
// directories on the host: emptyDir (on disk or tmpfs), configMap, secret,
// downwardAPI and projected volumes (including service account tokens), and
// hostPath after its type check. It keeps the API-derived contents current
// with atomic swaps, refreshes tokens before they expire, resolves a
// container's volumeMounts (subPath included) to host paths, and removes a
// pod's volume directories when the pod is gone. Image volumes are the
// runtime's: it only passes their source on.
//
// It owns RootDir/pods/<uid>/volumes and nothing else on disk. It never
// creates mount namespaces or bind-mounts into containers (the runtime does),
// never deletes inside a hostPath or across a mount point, and never writes
// to the API other than TokenRequests for the pods it serves.
package hostvolume
