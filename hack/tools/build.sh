#!/usr/bin/env bash
# Builds the project's pinned tools from the Go module proxy into a per-machine cache and
# links them into bin/. Each tool set is built from a small Go module under
# hack/tools/<module>; its cache entry is keyed by that module's go.mod, go.sum and the
# set's build recipe, so a second run on the same machine (or a second clone) reuses the
# binaries and a version bump rebuilds.
#
#   hack/tools/build.sh [set...]   build the named sets (default: the default sets)
#   hack/tools/build.sh --list     print the sets and the binaries each provides
#   hack/tools/build.sh --defaults print the sets built when none is named
#
# PHALANKS_TOOLS_CACHE overrides the cache directory.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tools=$root/hack/tools
cache=${PHALANKS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/phalanks-operator/tools}
bin=$root/bin

# set -> "package=binary ..." (binary defaults to the package's last element).
declare -A packages=(
	[kube]="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler go.etcd.io/etcd/server/v3=etcd"
	[kubectl]="k8s.io/kubernetes/cmd/kubectl"
	[kwok]="sigs.k8s.io/kwok/cmd/kwok"
	[minio]="github.com/minio/minio"
	[gen]="sigs.k8s.io/controller-tools/cmd/controller-gen sigs.k8s.io/kustomize/kustomize/v5=kustomize"
	[lint]="github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
	[olm]="github.com/operator-framework/operator-lifecycle-manager/cmd/olm github.com/operator-framework/operator-lifecycle-manager/cmd/catalog github.com/operator-framework/operator-lifecycle-manager/cmd/package-server"
	[opm]="github.com/operator-framework/operator-registry/cmd/opm"
	[peers]="k8s.io/sample-controller"
	[krew]="sigs.k8s.io/krew/cmd/krew sigs.k8s.io/krew/cmd/validate-krew-manifest"
	[node]="k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy"
	[containerd]="github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr"
	[sdk]="github.com/operator-framework/operator-sdk/cmd/operator-sdk github.com/operator-framework/operator-sdk/images/scorecard-test"
	[prometheus]="github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool"
	[prometheus-operator]="github.com/prometheus-operator/prometheus-operator/cmd/operator=prometheus-operator github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
	[olmv1]="github.com/operator-framework/operator-controller/cmd/catalogd github.com/operator-framework/operator-controller/cmd/operator-controller github.com/phalanks/phalanks-operator/hack/tools/olmv1/certmanager=cert-manager"
	[cni]="github.com/containernetworking/plugins/plugins/main/bridge github.com/containernetworking/plugins/plugins/main/loopback github.com/containernetworking/plugins/plugins/ipam/host-local github.com/containernetworking/plugins/plugins/meta/portmap"
)
# The module (hack/tools/<module>) a set is built from, when it is not the set's name:
# kubectl comes from the same pinned Kubernetes as the control plane, but is a set of its
# own so that commands which only talk to a cluster (make deploy) do not build a control
# plane first; the real node's kubelet and kube-proxy come from it too, at the control
# plane's version.
declare -A modules=(
	[kubectl]=kube
	[node]=kube
)
# Built by `make tools`; every make target builds the sets it needs itself (see the
# TOOLS_* variables in the Makefile).
order=(gen lint kube kubectl kwok minio)
optional=(sdk olm opm peers node containerd cni krew prometheus prometheus-operator olmv1)

# Every other Kubernetes version the suites run on (docs/kubernetes-versions.md) is a
# set kube-<minor> built from hack/tools/kube-<minor>, which hack/tools/kube-version.sh
# writes: its control plane and kubectl (suites call kubectl against it, and kubectl
# supports one minor version of skew), not the node, since the real node runs at the
# default version.
for dir in "$tools"/kube-*/; do
	[[ -f $dir/go.mod ]] || continue
	set=$(basename "$dir")
	packages[$set]="${packages[kube]} ${packages[kubectl]}"
	optional+=("$set")
done

# Roughly how long a first build of each set takes on two cores with an empty Go build
# cache (measured on this project's CI machines), for the plan printed before building.
declare -A estimate=(
	[gen]=1 [lint]=3 [kube]=6 [kubectl]=2 [kwok]=2 [minio]=4 [olm]=5 [opm]=3 [peers]=1
	[node]=4 [containerd]=5 [cni]=1 [sdk]=3 [krew]=1 [prometheus]=5 [prometheus-operator]=3 [olmv1]=5
)

# Build tags and cgo per set (default: no tags, CGO_ENABLED=0). opm links sqlite through
# cgo; the openpgp tag keeps containers/image off the gpgme C library.
declare -A tags=(
	[olm]="json1"
	[opm]="json1,containers_image_openpgp"
	[sdk]="containers_image_openpgp"
	[containerd]="no_btrfs,no_devmapper,no_zfs"
	[olmv1]="containers_image_openpgp"
)
declare -A cgo=(
	[opm]=1
)

module_of() { echo "${modules[$1]:-$1}"; }

estimate_of() {
	case $1 in
	kube-*) echo "${estimate[kube]}" ;;
	*) echo "${estimate[$1]:-1}" ;;
	esac
}

# A control plane of another Kubernetes version than the default's (kube-<minor>) is
# linked into bin/<set>/ rather than bin/, beside the default one; the harnesses run it
# when PHALANKS_KUBE_TOOLS names the set (test/harness/tools).
link_dir_of() {
	case $1 in
	kube-*) echo "$bin/$1" ;;
	*) echo "$bin" ;;
	esac
}

# Kubernetes binaries report the version stamped into them; unstamped they claim v0.0.0,
# which OLM and minKubeVersion checks reject.
kube_ldflags() {
	local module=$1 version minor flags="" pkg
	version=$(cd "$tools/$module" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
	minor=${version#v1.}
	minor=${minor%%.*}
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
		flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	echo "$flags"
}

# operator-sdk reports its version, and stamps it into the bundles it generates
# (operators.operatorframework.io/builder) and the scorecard-test image references it
# scaffolds, from these variables; unstamped they say "unknown".
sdk_ldflags() {
	local version pkg=github.com/operator-framework/operator-sdk/internal/version
	version=$(cd "$tools/sdk" && go list -m -f '{{.Version}}' github.com/operator-framework/operator-sdk)
	echo "-X $pkg.Version=$version -X $pkg.GitVersion=$version -X $pkg.ImageVersion=$version -X $pkg.GitCommit=release-$version" \
		"-X $pkg.KubernetesVersion=$(cd "$tools/sdk" && go list -m -f '{{.Version}}' k8s.io/api | sed s/^v0/v1/)"
}

# Prometheus and the Prometheus Operator report the version stamped into
# prometheus/common/version (prometheus_build_info, --version). Prometheus's Go module
# versions v0.3XX.Y are its releases v3.XX.Y.
prometheus_version() {
	local v
	v=$(cd "$tools/prometheus" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
	v=${v#v0.}
	echo "${v:0:1}.${v:1}"
}

# operator-controller and catalogd report the version stamped into them (upstream's
# Makefile does the same); cert-manager's library reports its own in its user agent.
olmv1_ldflags() {
	local oc cm
	oc=$(cd "$tools/olmv1" && go list -m -f '{{.Version}}' github.com/operator-framework/operator-controller)
	cm=$(cd "$tools/olmv1" && go list -m -f '{{.Version}}' github.com/cert-manager/cert-manager)
	echo "-s -w -X github.com/operator-framework/operator-controller/internal/shared/version.version=$oc -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$cm"
}

ldflags_for() {
	local module
	module=$(module_of "$1")
	case $module in
	kube | kube-*) echo "-s -w $(kube_ldflags "$module")" ;;
	prometheus) echo "-s -w -X github.com/prometheus/common/version.Version=$(prometheus_version)" ;;
	prometheus-operator) echo "-s -w -X github.com/prometheus/common/version.Version=$(cd "$tools/prometheus-operator" && go list -m -f '{{.Version}}' github.com/prometheus-operator/prometheus-operator | sed 's/^v//')" ;;
	sdk) echo "-s -w $(sdk_ldflags)" ;;
	containerd) echo "-s -w -X github.com/containerd/containerd/v2/version.Version=$(cd "$tools/containerd" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)" ;;
	olmv1) olmv1_ldflags ;;
	*) echo "-s -w" ;;
	esac
}

# local_sources lists the Go sources a set builds from its own module directory: a
# command written here, or a module the set's go.mod replaces with a directory of it.
# Other sets build only downloaded code, and their cache keys stay as they were.
local_sources() {
	local mod
	mod=$(module_of "$1")
	if [[ ${packages[$1]} == *"/hack/tools/$mod/"* ]] || grep -q '=> \./' "$tools/$mod/go.mod"; then
		find "$tools/$mod" -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) ! -name '*_test.go' | LC_ALL=C sort
	fi
}

key_for() {
	local set=$1 mod f
	mod=$(module_of "$set")
	{
		cat "$tools/$mod/go.mod" "$tools/$mod/go.sum"
		for f in $(local_sources "$set"); do
			echo "${f#"$tools/"}"
			cat "$f"
		done
		echo "${packages[$set]}"
		ldflags_for "$set"
		# Only sets with tags or cgo add a line, so the other sets keep their cache keys.
		[[ -z ${tags[$set]:-}${cgo[$set]:-} ]] || echo "tags=${tags[$set]:-} cgo=${cgo[$set]:-0}"
		go env GOVERSION GOOS GOARCH
	} | sha256sum | cut -c1-16
}

dir_for() { echo "$cache/$1-$(key_for "$1")"; }

binaries_of() {
	local spec pkg name out=()
	for spec in ${packages[$1]}; do
		pkg=${spec%%=*}
		name=${pkg##*/}
		[[ $spec == *=* ]] && name=${spec#*=}
		out+=("$name")
	done
	echo "${out[*]}"
}

link() {
	local dir=$1 to=$2 f
	mkdir -p "$to"
	for f in "$dir"/*; do
		ln -sfn "$f" "$to/$(basename "$f")"
	done
}

duration() {
	local s=$1
	if ((s >= 60)); then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

# plan prints, before anything is built, which of the requested sets are not in the cache
# yet, roughly how long each takes and where they go.
plan() {
	local set missing=() total=0
	for set in "$@"; do
		[[ -f $(dir_for "$set")/.complete ]] || missing+=("$set")
	done
	((${#missing[@]} > 0)) || return 0
	echo "tools: building ${#missing[@]} tool set(s) from the Go module proxy into $cache"
	echo "tools: (first use on this machine; later runs and other clones reuse them at once)"
	for set in "${missing[@]}"; do
		printf 'tools:   %-9s about %2d min on 2 cores  %s\n' "$set" "$(estimate_of "$set")" "$(binaries_of "$set")"
		total=$((total + $(estimate_of "$set")))
	done
	echo "tools: about $total min in all; each set is cached as soon as it is built"
}

# explain turns a failed build's log into what failed, why (when the log says), and how to
# retry.
explain() {
	local set=$1 pkg=$2 log=$3 module
	echo "tools: FAILED building set $set (package $pkg); nothing of this attempt was cached" >&2
	module=$(grep -oE '[[:alnum:]./_~-]+@v[[:alnum:]./+_-]+' "$log" | head -n 1 || true)
	if grep -qE '403 Forbidden|410 Gone|404 Not Found' "$log"; then
		echo "tools: the module proxy refused ${module:-a module}; pin a version that resolves in hack/tools/$(module_of "$set")/go.mod" >&2
	elif grep -q 'no space left on device' "$log"; then
		echo "tools: the disk is full:" >&2
		df -h "$cache" "$(go env GOCACHE)" "$(go env GOMODCACHE)" >&2 || true
	elif [[ -n $module ]]; then
		echo "tools: the first module the log names is $module" >&2
	fi
	echo "tools: last lines of the build log ($log):" >&2
	tail -n 20 "$log" | sed 's/^/tools:   | /' >&2
	echo "tools: retry with: hack/tools/build.sh $set   (or: make tools-$set)" >&2
}

build_set() {
	local set=$1 n=$2 of=$3 dir spec pkg name start log
	dir=$(dir_for "$set")
	if [[ -f $dir/.complete ]]; then
		link "$dir" "$(link_dir_of "$set")"
		return
	fi
	start=$SECONDS
	echo "tools: [$n/$of] building $set into $dir"
	rm -rf "$dir.tmp"
	mkdir -p "$dir.tmp"
	log=$cache/$set.log
	: >"$log"
	for spec in ${packages[$set]}; do
		pkg=${spec%%=*}
		name=${pkg##*/}
		[[ $spec == *=* ]] && name=${spec#*=}
		echo "tools:   $name ($pkg)"
		if ! (cd "$tools/$(module_of "$set")" && CGO_ENABLED=${cgo[$set]:-0} GOFLAGS=-mod=readonly go build -trimpath \
			-tags "${tags[$set]:-}" -ldflags "$(ldflags_for "$set")" -o "$dir.tmp/$name" "$pkg") >>"$log" 2>&1; then
			rm -rf "$dir.tmp"
			explain "$set" "$pkg" "$log"
			return 1
		fi
	done
	touch "$dir.tmp/.complete"
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
	rm -f "$log"
	echo "tools: [$n/$of] $set built in $(duration $((SECONDS - start)))"
	link "$dir" "$(link_dir_of "$set")"
}

case ${1:-} in
--list)
	for set in "${order[@]}" "${optional[@]}"; do echo "$set: $(binaries_of "$set")"; done
	exit 0
	;;
--defaults)
	echo "${order[*]}"
	exit 0
	;;
esac

sets=("$@")
[[ ${#sets[@]} -gt 0 ]] || sets=("${order[@]}")
for set in "${sets[@]}"; do
	[[ -n ${packages[$set]:-} ]] || { echo "tools: unknown set $set (known: ${order[*]} ${optional[*]})" >&2; exit 2; }
done
mkdir -p "$cache"
plan "${sets[@]}"
i=0
for set in "${sets[@]}"; do
	i=$((i + 1))
	# One builder per set and machine at a time: two CI runs would otherwise build the same
	# set twice, and a long build of one set does not hold up the others.
	exec 9>"$cache/.lock-$set"
	flock 9
	build_set "$set" "$i" "${#sets[@]}"
	exec 9>&-
done
