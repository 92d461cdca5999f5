// Package csidriver is a small CSI driver for tests. It keeps every volume as
// a directory, DataDir/<volumeID>, and serves the Identity, Controller and
// Node services of CSI v1.13 on one unix socket, inside the test process.
//
// The controller side records in memory which nodes each volume is published
// to and enforces the access modes as the CSI specification asks: a
// single-node volume published to a second node fails with
// FAILED_PRECONDITION. The node side bind-mounts the volume directory at the
// staging path and the staging path at each target path, read-only when
// asked, so it needs root.
//
// Tests steer and observe the driver through its methods: InjectError (and
// FailControllerPublish, FailControllerUnpublish) make calls fail until
// cleared, Hold makes calls wait until released, and Calls returns every
// call received on the socket in the order it arrived, with its start and
// end times and its error.
//
// The package owns only DataDir, the socket it serves and the mounts it
// makes at the staging and target paths it is given; it never touches any
// other part of the file system or any Kubernetes object.
package csidriver
