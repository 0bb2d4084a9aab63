package realnode_test

import (
	. "github.com/onsi/ginkgo/v2"
)

// The suite is one ordered story, as an administrator lives it: deploy, use, renew the
// certificate, watch with Prometheus, put behind the company's egress proxy, undeploy.
// Ginkgo shuffles top-level containers, so every part is a container inside this one.
var _ = Describe("phalanks-operator on a real node, from make deploy to make undeploy", Ordered, func() {
	deploySpecs()
	operatorSpecs()
	samplesSpecs()
	fooSpecs()
	scalingSpecs()
	rotationSpecs()
	monitoringSpecs()
	egressSpecs()
	undeploySpecs()
})
