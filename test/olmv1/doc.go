// Package olmv1 installs, upgrades and uninstalls phalanks-operator through OLM v1 —
// catalogd and operator-controller v1.11.0, the ClusterCatalog and ClusterExtension APIs —
// end to end, on the local cluster's real node: OLM v1 runs as upstream ships it
// (manifests/standard.yaml of the operator-controller module: its Deployments in
// olmv1-system, their RBAC, webhook, CRDs and cert-manager objects) from images built here
// of the binaries the olmv1 tool set builds, with cert-manager's own controllers issuing
// the certificates that manifest and every bundle's webhooks ask for. The project's
// catalog and bundle images are built with test/olm's helpers. The suite is in this
// package's tests; `make test-olmv1` runs it.
package olmv1
