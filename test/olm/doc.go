// Package olm installs and upgrades phalanks-operator through the real Operator Lifecycle
// Manager, end to end and without a container runtime: a local control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kwok) inside a private network
// namespace, OLM v0.33.0's olm and catalog operators and package-server out of cluster,
// the project's own bundles and catalog served by opm, and the project's manager binary
// run in place of the pod OLM deploys (kwok only fakes that pod). The suite is in this
// package's tests; `make test-olm` runs it.
package olm

import (
	"net"
	"time"
)

// dial checks that something accepts TCP connections at address.
func dial(address string) error {
	conn, err := net.DialTimeout("tcp", address, 2*time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}
