#!/usr/bin/env bash
# Installs the Debian packages that provide commands the real node needs, when a command
# is missing: runc (containerd runs pods with it), iptables (kube-proxy and the CNI portmap
# plugin), ip (the node's network namespace), and others a target names (yamllint, the
# test suites' tinyproxy).
#
#   hack/tools/apt.sh command=package ...
set -euo pipefail

missing=()
for spec in "$@"; do
	cmd=${spec%%=*}
	pkg=${spec#*=}
	PATH=$PATH:/usr/sbin:/sbin command -v "$cmd" >/dev/null || missing+=("$pkg")
done
[[ ${#missing[@]} -gt 0 ]] || exit 0
if [[ $(id -u) -ne 0 ]]; then
	echo "tools: this target needs the Debian packages ${missing[*]}; install them as root" >&2
	exit 1
fi
echo "tools: installing ${missing[*]} from Debian"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
