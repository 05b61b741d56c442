#!/usr/bin/env bash
# Installs the Debian packages mptun's lab, benchmarks and tests use
# (chromium: the status page's headless-browser test).
# Idempotent; needs root. Go itself comes from /usr/local/go on our machines.
set -euo pipefail
pkgs=(iproute2 ethtool iperf3 tshark tcpdump mptcpize iputils-ping procps kmod systemd nftables conntrack curl chromium chromium-driver)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing ${missing[*]}; run as root to install them" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# tshark asks whether non-root users may capture; answer no.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
