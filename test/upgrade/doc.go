// Package upgrade is the upgrade-invariance suite (`make test-upgrade`): on the local
// cluster's real node it installs the previous release, creates a fleet of everything
// the operator looks after (StorageBuckets of every depth, management and deletion
// policy, with labelled and unlabelled credentials Secrets and a CA-bundle ConfigMap,
// created as v1alpha1 and as v1beta1; Foos with their Deployments; workloads in the
// middle of a downtime, from a holiday calendar), upgrades it through an install path
// users take, and samples every second through the upgrade: no StorageBucket changes its
// Ready condition, none goes unprobed longer than its interval plus the documented
// handover bound (docs/storagebucket.md, "Fault model"), every v1alpha1 read converts,
// no Foo's Deployment is re-created or rolled, no scaled-down workload moves, and no
// Warning event appears that CHANGELOG.md does not announce. After the upgrade the
// downtime ends and every workload comes back to its saved count. The same fleet is then
// rolled back to the previous release (docs/upgrading.md).
//
// A module of its own, next to test/olm whose packaging it reuses.
package upgrade
