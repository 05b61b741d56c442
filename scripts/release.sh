#!/usr/bin/env bash
# Cross-compiles stripped static release binaries of mptund and mptun for
# the CPE targets, prints their sizes and fails if mptund for arm64 is
# over its budget (routers have little flash).
# Usage: scripts/release.sh [OUTDIR]   (default dist/)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
GO=${GO:-go}
budget=10000000 # bytes, mptund linux/arm64
mkdir -p "$out"
targets=(linux/amd64 linux/arm64 linux/arm linux/mipsle)
for t in "${targets[@]}"; do
	os=${t%/*} arch=${t#*/}
	for cmd in mptund mptun; do
		# GOARM only matters for arm, GOMIPS only for mipsle.
		CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOARM=7 GOMIPS=softfloat \
			$GO build -trimpath -ldflags "-s -w" -o "$out/$cmd-$os-$arch" "./cmd/$cmd"
	done
done
printf '%-26s %12s\n' binary bytes
for t in "${targets[@]}"; do
	for cmd in mptund mptun; do
		f="$out/$cmd-${t%/*}-${t#*/}"
		stat -c '%n %s' "$f" | awk '{n=split($1, p, "/"); printf "%-26s %12d  %5.2f MB\n", p[n], $2, $2/1e6}'
	done
done
size=$(stat -c %s "$out/mptund-linux-arm64")
if [ "$size" -gt "$budget" ]; then
	echo "mptund-linux-arm64 is $size bytes, over the $budget-byte budget" >&2
	exit 1
fi
