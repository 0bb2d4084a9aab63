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
# A suite's harness runs this script from a process that go test or go run started, and
# those put the Go release the project's go.mod names (its toolchain line, which the go
# command fetched into the module cache) first on PATH and in GOROOT. Undone here, so that
# the sets build with the Go make builds them with: a set's key holds that Go, and under
# another one a set make built, or is building in the background, would be built again.
if [[ ${GOROOT:-} == */golang.org/toolchain@* && :$PATH: == :"$GOROOT/bin":* ]]; then
	PATH=${PATH#"$GOROOT/bin"}
	PATH=${PATH#:}
	unset GOROOT
fi
tools=$root/hack/tools
cache=${PHALANKS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/phalanks-operator/tools}
bin=$root/bin

# set -> "package=binary ..." (binary defaults to the package's last element).
declare -A packages=(
	[kube]="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler go.etcd.io/etcd/server/v3=etcd"
	[kubectl]="k8s.io/kubernetes/cmd/kubectl"
	[kwok]="sigs.k8s.io/kwok/cmd/kwok"
	[minio]="github.com/minio/minio"
	[versitygw]="github.com/versity/versitygw/cmd/versitygw"
	[gen]="sigs.k8s.io/controller-tools/cmd/controller-gen sigs.k8s.io/kustomize/kustomize/v5=kustomize"
	[lint]="github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
	[olm]="github.com/operator-framework/operator-lifecycle-manager/cmd/olm github.com/operator-framework/operator-lifecycle-manager/cmd/catalog github.com/operator-framework/operator-lifecycle-manager/cmd/package-server"
	[peers]="k8s.io/sample-controller"
	[krew]="sigs.k8s.io/krew/cmd/krew sigs.k8s.io/krew/cmd/validate-krew-manifest"
	[node]="k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy"
	[containerd]="github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	[ctr]="github.com/containerd/containerd/v2/cmd/ctr"
	[sdk]="github.com/operator-framework/operator-sdk/cmd/operator-sdk github.com/operator-framework/operator-sdk/images/scorecard-test"
	[prometheus]="github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool"
	[prometheus-operator]="github.com/prometheus-operator/prometheus-operator/cmd/operator=prometheus-operator github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
	[olmv1]="github.com/operator-framework/operator-controller/cmd/catalogd github.com/operator-framework/operator-controller/cmd/operator-controller github.com/phalanks/phalanks-operator/hack/tools/olmv1/certmanager=cert-manager"
	[vuln]="golang.org/x/vuln/cmd/govulncheck golang.org/x/vulndb/cmd/indexdb"
	[cni]="github.com/containernetworking/plugins/plugins/main/bridge github.com/containernetworking/plugins/plugins/main/loopback github.com/containernetworking/plugins/plugins/ipam/host-local github.com/containernetworking/plugins/plugins/meta/portmap"
)
# The module (hack/tools/<module>) a set is built from, when it is not the set's name:
# kubectl comes from the same pinned Kubernetes as the control plane, but is a set of its
# own so that commands which only talk to a cluster (make deploy) do not build a control
# plane first; the real node's kubelet and kube-proxy come from it too, at the control
# plane's version. ctr, containerd's client, is only for looking into the real node by
# hand (docs/development.md), so no suite waits for it.
declare -A modules=(
	[kubectl]=kube
	[node]=kube
	[ctr]=containerd
)
# Built by `make tools`; every make target builds the sets it needs itself (see the
# TOOLS_* variables in the Makefile).
order=(gen lint kube kubectl kwok minio)
optional=(sdk olm peers node containerd ctr cni krew prometheus prometheus-operator olmv1 vuln versitygw)

# Build tags and cgo per set (default: no tags, CGO_ENABLED=0). The openpgp tag keeps
# containers/image off the gpgme C library. Prometheus is built with the Kubernetes
# service discovery only (its remove_all_sd and enable_<name>_sd tags): the Prometheus
# Operator's ServiceMonitors configure nothing else, and the cloud SDKs the other
# discoveries bring are more than half of what the set would compile.
declare -A tags=(
	[olm]="json1"
	[sdk]="containers_image_openpgp"
	[containerd]="no_btrfs,no_devmapper,no_zfs"
	[ctr]="no_btrfs,no_devmapper,no_zfs"
	[olmv1]="containers_image_openpgp"
	[prometheus]="remove_all_sd,enable_kubernetes_sd"
)
declare -A cgo=()

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
	# Kubernetes 1.30 and older compile the in-tree cloud providers (and their AWS, Azure,
	# GCE and vSphere SDKs) in, unless built providerless. From 1.29 on they are off by
	# default (DisableCloudProviders), so the tag drops only code the suites never run:
	# about 40 % of what the set compiles. Newer versions have no such code.
	tags[$set]=providerless
done

# Roughly how long a first build of each set takes on two cores with empty Go build and
# module caches, for the plan printed before building: from a cold .ci/run on
# 2026-11-28 (go build std from an empty cache: 44 s), rounded up; the sets built in the
# background shared the CPU with the foreground then, so theirs are on the high side.
declare -A estimate=(
	[gen]=2 [lint]=3 [kube]=14 [kubectl]=1 [kwok]=4 [minio]=7 [olm]=15 [peers]=1
	[node]=1 [containerd]=2 [cni]=1 [sdk]=8 [krew]=1 [vuln]=2 [prometheus]=12 [prometheus-operator]=7 [olmv1]=8
	[versitygw]=3
)

# A step some sets take after their binaries are built, in the set's directory $1.
declare -A after=(
	[vuln]=vuln_database
)

# vuln_database writes the Go vulnerability database govulncheck reads (the vulndb
# directory of the set) from the OSV reports of the pinned golang.org/x/vulndb revision.
vuln_database() {
	local osv
	osv=$(cd "$tools/vuln" && go list -m -f '{{.Dir}}' golang.org/x/vulndb)/data/osv
	"$1/indexdb" -vulns "$osv" -out "$1/vulndb"
}

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
		# In the set's module: the Go it builds with (a go.mod's toolchain line may choose
		# another than the one on PATH).
		(cd "$tools/$mod" && go env GOVERSION GOOS GOARCH)
	} | sha256sum | cut -c1-16
}

# dir_for is set $1's cache entry. The keys of the sets a run names are computed once, up
# front (dir_for runs in subshells, which could not keep them).
declare -A keys=()
dir_for() {
	[[ -n ${keys[$1]:-} ]] || keys[$1]=$(key_for "$1")
	echo "$cache/$1-${keys[$1]}"
}

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

# go_name is the file name go build gives package $1's binary: its last path element, or
# the one before when the last is a major version suffix (…/server/v3 -> server).
go_name() {
	local pkg=$1 last
	last=${pkg##*/}
	if [[ $last =~ ^v[0-9]+$ && $pkg == */*/* ]]; then
		pkg=${pkg%/*}
		last=${pkg##*/}
	fi
	echo "$last"
}

# same_build reports whether sets $1 and $2 compile with one go build: the same module,
# tags and cgo setting (a module's linker flags are the same for all its sets).
same_build() {
	[[ $(module_of "$1") == "$(module_of "$2")" && ${tags[$1]:-} == "${tags[$2]:-}" && ${cgo[$1]:-0} == "${cgo[$2]:-0}" ]]
}

# lock takes set $1's lock into lock_fd: one builder per set and machine at a time, so
# two CI runs never build the same set twice. When a background build (--background)
# holds it, that build is raised to normal priority, since someone now waits for it.
lock() {
	local set=$1 pgid said=
	exec {lock_fd}>"$cache/.lock-$set"
	until flock -w 2 "$lock_fd"; do
		[[ -n $said ]] && continue
		if pgid=$(cat "$cache/.background-$set" 2>/dev/null) && [[ -n $pgid ]]; then
			echo "tools: waiting for $set, which a background build is making (raised to normal priority)"
			renice -n 0 -g "$pgid" >/dev/null 2>&1 || true
			ionice -c 2 -n 4 -P "$pgid" >/dev/null 2>&1 || true
			autogroup_nice "$pgid" 0
		else
			echo "tools: waiting for $set, which another build on this machine is making"
		fi
		said=1
	done
}

# lower puts this background build back at the lowest priority, for the next set after
# one that a waiting command raised.
lower() {
	local pgid
	pgid=$(ps -o pgid= $$ | tr -d ' ')
	renice -n 19 -g "$pgid" >/dev/null 2>&1 || true
	ionice -c 3 -P "$pgid" >/dev/null 2>&1 || true
	autogroup_nice $$ 19
}

# autogroup_nice gives the session of process $1 the CPU share of nice value $2. With the
# kernel's autogroup scheduling (on by default in most distributions), each session
# (setsid) shares the CPU with the others as one group whatever its processes' nice
# values, so a background build's nice 19 alone still took half the CPU from the
# foreground; the group's own nice value is what lowers it.
autogroup_nice() {
	[[ -w /proc/$1/autogroup ]] || return 0
	echo "$2" 2>/dev/null >"/proc/$1/autogroup" || true
}

# remaining_estimate sums the estimates of the sets from index $1 of the run on.
remaining_estimate() {
	local i total=0
	for ((i = $1; i < ${#run_sets[@]}; i++)); do
		[[ -f $(dir_for "${run_sets[$i]}")/.complete ]] || total=$((total + $(estimate_of "${run_sets[$i]}")))
	done
	echo "$total"
}

# watch prints, every 30 s, how far the go build logging to $2 got: the packages it
# compiled so far (go build -v logs each) and the time spent. It runs until killed.
watch() {
	local what=$1 log=$2 start=$SECONDS nap
	trap 'kill "$nap" 2>/dev/null; exit 0' TERM
	while :; do
		# In the background and without our output, so that a kill ends the wait at once
		# and no sleep keeps a reader of the output waiting.
		sleep 30 >/dev/null 2>&1 &
		nap=$!
		wait "$nap"
		echo "tools:   … $what: $(duration $((SECONDS - start))) so far, $(grep -c '^[[:alnum:]]' "$log" || true) packages compiled"
	done
}

# build_batch builds the sets named in its arguments, which same_build says compile
# together, with one go build: the packages they share compile once, and one binary's
# link overlaps another's compiles (kube, kubectl and node are one Kubernetes). Each set
# is then moved into its own cache entry.
build_batch() {
	local first=$1 set spec pkg start log pkgs=() names=() tmp pid watcher status=0 i
	start=$SECONDS
	tmp=$cache/.batch-$first.tmp
	rm -rf "$tmp"
	mkdir -p "$tmp"
	log=$cache/$first.log
	: >"$log"
	for set in "$@"; do
		echo "tools: [$((run_index + 1))/${#run_sets[@]}] building $set into $(dir_for "$set") (about $(estimate_of "$set") min on 2 cores)"
		for spec in ${packages[$set]}; do
			pkg=${spec%%=*}
			pkgs+=("$pkg")
			names+=("$(go_name "$pkg")")
			echo "tools:   $(binary_name "$spec") ($pkg)"
		done
	done
	if [[ $(printf '%s\n' "${names[@]}" | sort | uniq -d) ]]; then
		echo "tools: two packages of $* build to the same file name; set them apart in build.sh" >&2
		return 1
	fi
	(cd "$tools/$(module_of "$first")" && exec env CGO_ENABLED="${cgo[$first]:-0}" GOFLAGS=-mod=readonly go build -v -trimpath \
		-tags "${tags[$first]:-}" -ldflags "$(ldflags_for "$first")" -o "$tmp/" "${pkgs[@]}") >>"$log" 2>&1 &
	pid=$!
	watch "$*" "$log" &
	watcher=$!
	wait "$pid" || status=$?
	kill "$watcher" 2>/dev/null || true
	wait "$watcher" 2>/dev/null || true
	if ((status != 0)); then
		rm -rf "$tmp"
		explain "$first" "$(failed_package "$log" "${pkgs[@]}")" "$log"
		return 1
	fi
	i=0
	for set in "$@"; do
		local dir
		dir=$(dir_for "$set")
		rm -rf "$dir.tmp"
		mkdir -p "$dir.tmp"
		for spec in ${packages[$set]}; do
			mv "$tmp/${names[$i]}" "$dir.tmp/$(binary_name "$spec")"
			i=$((i + 1))
		done
		if [[ -n ${after[$set]:-} ]] && ! "${after[$set]}" "$dir.tmp" >>"$log" 2>&1; then
			rm -rf "$dir.tmp" "$tmp"
			explain "$set" "${after[$set]}" "$log"
			return 1
		fi
		[[ $background == worker ]] && echo "$(duration $((SECONDS - start)))" >"$dir.tmp/.background"
		touch "$dir.tmp/.complete"
		rm -rf "$dir"
		mv "$dir.tmp" "$dir"
		link "$dir" "$(link_dir_of "$set")"
		unmark "$set"
		run_index=$((run_index + 1))
	done
	rm -rf "$tmp" "$log"
	echo "tools: [$run_index/${#run_sets[@]}] $* built in $(duration $((SECONDS - start)))$(left)"
}

# left says how long the sets still to build in this run usually take.
left() {
	local m
	m=$(remaining_estimate "$run_index")
	((m > 0)) && echo "; about $m min of tool builds left"
}

binary_name() {
	local spec=$1 pkg=${1%%=*}
	if [[ $spec == *=* ]]; then echo "${spec#*=}"; else echo "${pkg##*/}"; fi
}

# failed_package names the package of the batch whose build the log shows failing (the
# first one the log mentions), or the batch's first.
failed_package() {
	local log=$1 pkg
	shift
	for pkg in "$@"; do
		grep -qF "$pkg" "$log" && { echo "$pkg"; return; }
	done
	echo "$1"
}

# mark and unmark keep bin/.building/<binary> (bin/<set>/.building/ for versioned kube
# sets) while a background build of its set is under way: test/harness/tools waits for
# such a binary (running this script for its set) instead of failing.
mark() {
	local set=$1 b d
	d=$(link_dir_of "$set")/.building
	mkdir -p "$d"
	for b in $(binaries_of "$set"); do echo "$set" >"$d/$b"; done
}
unmark() {
	local set=$1 b d
	d=$(link_dir_of "$set")/.building
	for b in $(binaries_of "$set"); do rm -f "$d/$b"; done
}

# reported says, once, that set $1 was built by a background build and how long that
# took, in the form of a foreground build's line.
reported() {
	local f
	f=$(dir_for "$1")/.background
	[[ -f $f && $background != worker ]] || return 0
	echo "tools: [background] $1 built in $(cat "$f")"
	rm -f "$f"
}

# build_all builds (or links from the cache) every set in run_sets, in order, each batch
# of sets that compile together with one go build.
build_all() {
	local i j s set batch fds fd
	run_index=0
	for ((i = 0; i < ${#run_sets[@]}; i++)); do
		set=${run_sets[$i]}
		[[ -n ${done_sets[$set]:-} ]] && continue
		batch=("$set")
		for ((j = i + 1; j < ${#run_sets[@]}; j++)); do
			[[ -z ${done_sets[${run_sets[$j]}]:-} ]] && same_build "$set" "${run_sets[$j]}" &&
				[[ ! -f $(dir_for "${run_sets[$j]}")/.complete ]] && batch+=("${run_sets[$j]}")
		done
		[[ -f $(dir_for "$set")/.complete ]] && batch=("$set")
		# Locks are taken in name order, so two builders never wait for each other.
		fds=()
		for s in $(printf '%s\n' "${batch[@]}" | sort); do
			lock "$s"
			fds+=("$lock_fd")
		done
		local todo=()
		for s in "${batch[@]}"; do
			done_sets[$s]=1
			if [[ -f $(dir_for "$s")/.complete ]]; then
				link "$(dir_for "$s")" "$(link_dir_of "$s")"
				unmark "$s"
				run_index=$((run_index + 1))
				reported "$s"
			else
				todo+=("$s")
			fi
		done
		if ((${#todo[@]} > 0)); then
			if [[ $background == worker ]]; then
				lower
				for s in "${todo[@]}"; do ps -o pgid= $$ | tr -d ' ' >"$cache/.background-$s"; done
			fi
			build_batch "${todo[@]}" || { for s in "${todo[@]}"; do rm -f "$cache/.background-$s"; unmark "$s"; done; return 1; }
			for s in "${todo[@]}"; do rm -f "$cache/.background-$s"; done
		fi
		for fd in "${fds[@]}"; do exec {fd}>&-; done
	done
}

# start_background builds the named sets in a process of its own, at the lowest CPU and
# I/O priority, and returns at once: suites that spend most of their time waiting leave
# the CPU to it, and it takes none from them (a command that needs one of its sets waits
# for it, raising it to normal priority). Its output goes to the cache's background.log.
start_background() {
	local set missing=()
	for set in "$@"; do
		[[ -f $(dir_for "$set")/.complete ]] || missing+=("$set")
	done
	if ((${#missing[@]} == 0)); then
		exec "$0" "$@"
	fi
	for set in "${missing[@]}"; do mark "$set"; done
	echo "tools: building ${missing[*]} in the background, at the lowest priority (log: $cache/background.log)"
	setsid nice -n 19 ionice -c 3 "$0" --background-worker "${missing[@]}" </dev/null >>"$cache/background.log" 2>&1 &
	# The sets already built are linked now.
	local built=()
	for set in "$@"; do [[ -f $(dir_for "$set")/.complete ]] && built+=("$set"); done
	((${#built[@]} == 0)) || "$0" "${built[@]}"
}

background=
case ${1:-} in
--list)
	for set in "${order[@]}" "${optional[@]}"; do echo "$set: $(binaries_of "$set")"; done
	exit 0
	;;
--defaults)
	echo "${order[*]}"
	exit 0
	;;
--background)
	background=start
	shift
	;;
--background-worker)
	background=worker
	shift
	;;
esac

sets=("$@")
[[ ${#sets[@]} -gt 0 ]] || sets=("${order[@]}")
for set in "${sets[@]}"; do
	[[ -n ${packages[$set]:-} ]] || { echo "tools: unknown set $set (known: ${order[*]} ${optional[*]})" >&2; exit 2; }
done
mkdir -p "$cache"
for set in "${sets[@]}"; do keys[$set]=$(key_for "$set"); done
if [[ $background == start ]]; then
	start_background "${sets[@]}"
	exit 0
fi
# A background worker runs in a session of its own (setsid), which the autogroup scheduler
# shares the CPU with as an equal unless the session is lowered too.
[[ $background == worker ]] && autogroup_nice $$ 19
[[ $background == worker ]] && echo "tools: background build of ${sets[*]} started $(date -u +%FT%TZ)"
run_sets=("${sets[@]}")
declare -A done_sets=()
plan "${sets[@]}"
build_all
