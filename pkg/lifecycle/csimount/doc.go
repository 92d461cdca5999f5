// Package csimount mounts the CSI volumes of the process provider's pods:
// PersistentVolumeClaims (and generic ephemeral volumes) bound to CSI
// PersistentVolumes. For each such volume of a pod it resolves the claim to
// its PersistentVolume, waits — when the driver's CSIDriver says attach is
// required, or there is no CSIDriver — until the volume is reported in use
// and listed as attached in the Node's status, reads the publish context from
// the VolumeAttachment, then asks the driver's node service (over its socket
// at <rootDir>/plugins/<driver>/csi.sock) to stage the volume once for the
// node and to publish it into the pod's volume directory, whose path the
// container runtime bind-mounts into the containers. On the pod's removal it
// unpublishes the volume and, once no other pod on the node uses it,
// unstages it.
//
// What it did is kept on disk, written before each call to the driver, so
// that a restarted agent (or one that crashed during a call) still
// unpublishes and unstages everything: a record per published volume in
// RootDir/pods/<uid>/volumes/kubernetes.io~csi/<volume>/vol_data.json (the
// volume is published at .../mount), and one per staged volume in
// RootDir/plugins/kubernetes.io/csi/<driver>/<sha256 of handle>/vol_data.json
// (staged at .../globalmount), the paths the kubelet uses. From these and the
// pods that want volumes it computes the node's volumesInUse.
//
// It owns those directories and nothing else on disk. It only reads the API
// (claims, volumes, CSIDrivers, VolumeAttachments, the Node, and the Secrets
// that volumes name for their driver); attach and detach are the volume
// controller's, and the runtime makes the bind mounts.
package csimount
