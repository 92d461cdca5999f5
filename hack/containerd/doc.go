// Package containerd holds nothing but this comment: the module around it
// exists to build containerd (github.com/containerd/containerd/v2/cmd/containerd)
// and its runc shim (cmd/containerd-shim-runc-v2) from the Go module proxy,
// for the tests of the cri provider (see test/crienv).
//
// Both commands are tool directives of this module, which pins the release
// and every dependency in go.sum. Build them with "make bin/containerd
// bin/containerd-shim-runc-v2" at the top of the tree, which runs
//
//	cd hack/containerd && CGO_ENABLED=0 go build -tags "no_btrfs no_devmapper no_zfs" \
//		-o ../../bin/containerd github.com/containerd/containerd/v2/cmd/containerd
//
// (and the same for the shim). Without cgo the btrfs, devmapper and zfs
// snapshotters cannot build, hence the tags; the tests use overlayfs, or the
// native snapshotter where overlayfs is unusable. runc and the CNI plugins
// come from Debian's packages ("make cri-deps").
//
// To move to another release, run
//
//	go get -tool github.com/containerd/containerd/v2/cmd/containerd@vX.Y.Z github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@vX.Y.Z
//
// here, and check that containerd's go.mod still has no replace directives
// (they would have to be repeated here, as hack/csi-attacher does).
package containerd
