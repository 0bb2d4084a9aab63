#!/usr/bin/env bash
# Installs a Node.js tool set (hack/tools/<set>/package.json and its package-lock.json)
# from the npm registry into the per-machine tool cache, once, and prints the directory
# holding its node_modules. The cache entry is keyed by the two files and the Node.js
# major version, so a version bump installs afresh and a second clone reuses it.
#
#   hack/tools/npm.sh <set>
#
# PHALANKS_TOOLS_CACHE overrides the cache directory, as for hack/tools/build.sh.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
set=${1:?usage: hack/tools/npm.sh <set>}
src=$root/hack/tools/$set
cache=${PHALANKS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/phalanks-operator/tools}

for cmd in node npm; do
	command -v "$cmd" >/dev/null || {
		echo "tools: $set needs Node.js and npm (Debian: apt-get install nodejs npm)" >&2
		exit 1
	}
done
[[ -f $src/package-lock.json ]] || {
	echo "tools: no hack/tools/$set/package-lock.json" >&2
	exit 1
}

key=$({
	cat "$src/package.json" "$src/package-lock.json"
	node --version | cut -d. -f1
} | sha256sum | cut -c1-16)
dir=$cache/$set-$key
if [[ ! -f $dir/.complete ]]; then
	mkdir -p "$cache"
	exec {lock_fd}>"$cache/.lock-$set"
	flock "$lock_fd"
	if [[ ! -f $dir/.complete ]]; then
		echo "tools: installing $set from the npm registry into $dir (about 15 s)" >&2
		tmp=$dir.tmp
		rm -rf "$tmp" "$dir"
		mkdir -p "$tmp"
		cp "$src/package.json" "$src/package-lock.json" "$tmp/"
		# The lock file pins every package by version and integrity; no install scripts run.
		if ! (cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2); then
			echo "tools: FAILED installing $set; nothing was cached. Retry with: hack/tools/npm.sh $set" >&2
			rm -rf "$tmp"
			exit 1
		fi
		mv "$tmp" "$dir"
		touch "$dir/.complete"
	fi
fi
echo "$dir"
