package realnode_test

import (
	. "github.com/onsi/ginkgo/v2"
)

// The suite is one ordered story, as an administrator lives it: deploy, use, renew the
// certificate, watch with Prometheus, undeploy. Ginkgo shuffles top-level containers, so
// every part is a container inside this one.
var _ = Describe("phalanks-operator on a real node, from make deploy to make undeploy", Ordered, func() {
	deploySpecs()
	operatorSpecs()
	samplesSpecs()
	fooSpecs()
	scalingSpecs()
	rotationSpecs()
	monitoringSpecs()
	undeploySpecs()
})
