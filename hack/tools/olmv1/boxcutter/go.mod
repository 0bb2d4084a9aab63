module pkg.package-operator.run/boxcutter

go 1.26.3

require (
	k8s.io/apimachinery v0.36.2
	k8s.io/client-go v0.36.2
	sigs.k8s.io/controller-runtime v0.24.1
)
