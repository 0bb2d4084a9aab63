#!/usr/bin/env bash
# Writes the tools module of one more Kubernetes version the suites can run on:
#
#   hack/tools/kube-version.sh v1.29.15    writes hack/tools/kube-1.29/go.mod and go.sum
#
# hack/tools/build.sh then knows a set kube-<minor> (the control plane: kube-apiserver,
# kube-controller-manager, kube-scheduler and etcd; and kubectl), which PHALANKS_KUBE_TOOLS=kube-<minor>
# makes the test harnesses run; add it to KUBE_VERSIONS in the Makefile to put it in the
# matrix (docs/kubernetes-versions.md).
#
# The module requires k8s.io/kubernetes at that version, replaces every staging module
# its go.mod points at ./staging/... with the released v0.<minor>.<patch> (they resolve
# on the module proxy by exact version), builds etcd at the version that Kubernetes
# release requires, and keeps that release's language semantics (godebug).
set -euo pipefail

version=${1:-}
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "usage: $0 v1.<minor>.<patch>" >&2; exit 2; }
minor=${BASH_REMATCH[1]} patch=${BASH_REMATCH[2]}
tools=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=$tools/kube-1.$minor

gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[[ -f $gomod ]] || { echo "kube-version: the module proxy did not serve k8s.io/kubernetes@$version" >&2; exit 1; }
etcd=$(awk '$1 == "go.etcd.io/etcd/client/v3" { print $2; exit }' "$gomod")
godebug=$(awk '$1 == "godebug" && $2 ~ /^default=/ { sub("default=", "", $2); print $2; exit }' "$gomod")
[[ -n $godebug ]] || godebug=go$(awk '$1 == "go" { split($2, v, "."); print v[1] "." v[2]; exit }' "$gomod")

mkdir -p "$dir"
{
	cat <<EOF
// The control plane and kubectl of Kubernetes $version, for the suites that run on it
// (PHALANKS_KUBE_TOOLS=kube-1.$minor; docs/kubernetes-versions.md). Written by
// hack/tools/kube-version.sh $version.
module github.com/phalanks/phalanks-operator/hack/tools/kube-1.$minor

go 1.26.0

// The language semantics that Kubernetes release was built with.
godebug default=$godebug

tool (
	go.etcd.io/etcd/server/v3
	k8s.io/kubernetes/cmd/kube-apiserver
	k8s.io/kubernetes/cmd/kube-controller-manager
	k8s.io/kubernetes/cmd/kube-scheduler
	k8s.io/kubernetes/cmd/kubectl
)

require (
	go.etcd.io/etcd/server/v3 $etcd
	k8s.io/kubernetes $version
)

replace (
EOF
	awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$gomod" | while read -r m; do
		printf '\t%s => %s v0.%s.%s\n' "$m" "$m" "$minor" "$patch"
	done
	echo ")"
} >"$dir/go.mod"
(cd "$dir" && go mod tidy)
echo "kube-version: wrote $dir (Kubernetes $version, etcd $etcd); build it with: hack/tools/build.sh kube-1.$minor"
