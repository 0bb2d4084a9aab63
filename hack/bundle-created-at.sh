#!/usr/bin/env bash
# Keeps a regenerated CSV's createdAt annotation stable.
#
# `operator-sdk generate bundle` stamps createdAt with the time it runs, and has no
# option to do otherwise, so every `make bundle` would change the committed bundle and
# `make verify` could never pass. createdAt records when a version's bundle was first
# created: while the CSV in the last commit has the same spec.version, its createdAt is
# kept; a new version keeps the new stamp. Outside a git checkout nothing is changed.
#
#   hack/bundle-created-at.sh bundle/manifests/<package>.clusterserviceversion.yaml
set -euo pipefail

csv=$1
committed=$(git show "HEAD:./$csv" 2>/dev/null) || exit 0

# spec.version is the CSV's only `version:` two spaces in; createdAt is an annotation.
version() { sed -n 's/^  version: *//p'; }
created() { sed -n 's/^    createdAt: *//p'; }

[[ $(version <"$csv") == "$(version <<<"$committed")" ]] || exit 0
old=$(created <<<"$committed")
[[ -n $old ]] || exit 0
sed -i "s/^    createdAt: .*/    createdAt: ${old//\//\\/}/" "$csv"
