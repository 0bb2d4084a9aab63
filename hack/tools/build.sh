#!/usr/bin/env bash
# Builds the project's pinned tools from the Go module proxy into a per-machine cache and
# links them into bin/. Each tool set is a small Go module under hack/tools/<set>; its
# cache entry is keyed by that module's go.mod, go.sum and build recipe, so a second run on
# the same machine (or a second clone) reuses the binaries and a version bump rebuilds.
#
#   hack/tools/build.sh [set...]   build the named sets (default: all of them)
#   hack/tools/build.sh --list     print the sets and the binaries each provides
#
# PHALANKS_TOOLS_CACHE overrides the cache directory.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tools=$root/hack/tools
cache=${PHALANKS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/phalanks-operator/tools}
bin=$root/bin

# set -> "package=binary ..." (binary defaults to the package's last element).
declare -A packages=(
	[kube]="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3=etcd"
	[kwok]="sigs.k8s.io/kwok/cmd/kwok"
	[minio]="github.com/minio/minio"
	[gen]="sigs.k8s.io/controller-tools/cmd/controller-gen sigs.k8s.io/kustomize/kustomize/v5=kustomize"
	[lint]="github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
	[olm]="github.com/operator-framework/operator-lifecycle-manager/cmd/olm github.com/operator-framework/operator-lifecycle-manager/cmd/catalog github.com/operator-framework/operator-lifecycle-manager/cmd/package-server"
	[opm]="github.com/operator-framework/operator-registry/cmd/opm"
	[peers]="k8s.io/sample-controller"
)
# Built by default (make tools); the others only when named: the OLM sets for
# make test-olm (make tools-olm), the benchmark peers for make bench (make tools-peers).
order=(gen lint kube kwok minio)
optional=(olm opm peers)

# Build tags and cgo per set (default: no tags, CGO_ENABLED=0). opm links sqlite through
# cgo; the openpgp tag keeps containers/image off the gpgme C library.
declare -A tags=(
	[olm]="json1"
	[opm]="json1,containers_image_openpgp"
)
declare -A cgo=(
	[opm]=1
)

# Kubernetes binaries report the version stamped into them; unstamped they claim v0.0.0,
# which OLM and minKubeVersion checks reject.
kube_ldflags() {
	local version minor flags="" pkg
	version=$(cd "$tools/kube" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
	minor=${version#v1.}
	minor=${minor%%.*}
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
		flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	echo "$flags"
}

ldflags_for() {
	case $1 in
	kube) echo "-s -w $(kube_ldflags)" ;;
	*) echo "-s -w" ;;
	esac
}

key_for() {
	local set=$1
	{
		cat "$tools/$set/go.mod" "$tools/$set/go.sum"
		echo "${packages[$set]}"
		ldflags_for "$set"
		# Only sets with tags or cgo add a line, so the other sets keep their cache keys.
		[[ -z ${tags[$set]:-}${cgo[$set]:-} ]] || echo "tags=${tags[$set]:-} cgo=${cgo[$set]:-0}"
		go env GOVERSION GOOS GOARCH
	} | sha256sum | cut -c1-16
}

link() {
	local dir=$1 f
	mkdir -p "$bin"
	for f in "$dir"/*; do
		ln -sfn "$f" "$bin/$(basename "$f")"
	done
}

build_set() {
	local set=$1 key dir spec pkg name start
	key=$(key_for "$set")
	dir=$cache/$set-$key
	if [[ -f $dir/.complete ]]; then
		echo "tools: $set is cached ($dir)"
		link "$dir"
		return
	fi
	start=$SECONDS
	echo "tools: building $set into $dir (first build on this machine; this can take minutes)"
	rm -rf "$dir.tmp"
	mkdir -p "$dir.tmp"
	for spec in ${packages[$set]}; do
		pkg=${spec%%=*}
		name=${pkg##*/}
		[[ $spec == *=* ]] && name=${spec#*=}
		echo "tools:   $name ($pkg)"
		(cd "$tools/$set" && CGO_ENABLED=${cgo[$set]:-0} GOFLAGS=-mod=readonly go build -trimpath \
			-tags "${tags[$set]:-}" -ldflags "$(ldflags_for "$set")" -o "$dir.tmp/$name" "$pkg")
	done
	touch "$dir.tmp/.complete"
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
	echo "tools: $set built in $((SECONDS - start))s"
	link "$dir"
}

if [[ ${1:-} == --list ]]; then
	for set in "${order[@]}" "${optional[@]}"; do echo "$set: ${packages[$set]}"; done
	exit 0
fi

sets=("$@")
[[ ${#sets[@]} -gt 0 ]] || sets=("${order[@]}")
mkdir -p "$cache"
for set in "${sets[@]}"; do
	[[ -n ${packages[$set]:-} ]] || { echo "tools: unknown set $set (known: ${order[*]} ${optional[*]})" >&2; exit 2; }
	# One builder per set and machine at a time: two CI runs would otherwise build the same
	# set twice, and a long build of one set does not hold up the others.
	exec 9>"$cache/.lock-$set"
	flock 9
	build_set "$set"
	exec 9>&-
done
