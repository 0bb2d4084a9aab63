// Package olm installs and upgrades phalanks-operator through the real Operator Lifecycle
// Manager, end to end, the way OperatorHub users meet it: the local cluster with a real
// node (containerd, kubelet, kube-proxy) in a sandbox of private namespaces; OLM
// v0.33.0's olm and catalog operators and package-server out of cluster; the project's
// images (operator, bundle, catalog, scorecard tests) built with the release process's
// own definitions and served by the node's registry under the names a release publishes
// them as. OLM runs the catalog image as a registry pod, unpacks each bundle image with a
// Job on the node and runs the operator image as a real pod. The suite is in this
// package's tests; `make test-olm` runs it.
package olm
