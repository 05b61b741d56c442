#!/usr/bin/env bash
# Builds the Debian packages mptun_VERSION_ARCH.deb and
# mptun-lab_VERSION_ARCH.deb with nfpm (pinned in packaging/tools/go.mod,
# fetched through the Go module proxy) into $DIST (default dist/).
#
#   scripts/deb.sh [ARCH...]        default: amd64 arm64
#   VERSION=1.2.3 scripts/deb.sh    default: the git tag vX.Y.Z at HEAD, else
#                                   0.0~gitYYYYMMDDhhmmss.SHA (commit time, UTC),
#                                   which sorts by commit time under dpkg
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(amd64 arm64)
DIST=${DIST:-dist}

if [ -z "${VERSION:-}" ]; then
	if tag=$(git describe --tags --exact-match 2>/dev/null) && [[ $tag =~ ^v[0-9] ]]; then
		VERSION=${tag#v}
	elif sha=$(git rev-parse --short=7 HEAD 2>/dev/null); then
		VERSION="0.0~git$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S).$sha"
	else
		VERSION=0.0~dev
	fi
fi
if ! [[ $VERSION =~ ^[0-9][A-Za-z0-9.+~]*$ ]]; then
	echo "deb: VERSION $VERSION is not a Debian upstream version (digits first; letters, digits, . + ~)" >&2
	exit 2
fi

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
mkdir -p "$DIST"
go -C packaging/tools build -o "$build/nfpm" github.com/goreleaser/nfpm/v2/cmd/nfpm

# The unit in systemd/ is for `make install` (/usr/local); the package
# puts the binaries and docs under /usr.
sed -e 's#/usr/local/bin/#/usr/bin/#g' -e 's#/usr/local/share/doc/#/usr/share/doc/#g' \
	systemd/mptund@.service >"$build/mptund@.service"

for arch in "${arches[@]}"; do
	case $arch in
	amd64 | arm64) goarch=$arch goarm= ;;
	armhf) goarch=arm goarm=7 ;;
	*)
		echo "deb: unsupported architecture $arch (amd64, arm64, armhf)" >&2
		exit 2
		;;
	esac
	CGO_ENABLED=0 GOOS=linux GOARCH=$goarch GOARM=$goarm go build -trimpath \
		-ldflags "-s -w -X main.version=$VERSION" -o "$build/$arch/" ./cmd/mptund ./cmd/mptun ./cmd/mptun-lab
	for cfg in packaging/nfpm.yaml packaging/nfpm-lab.yaml; do
		ARCH=$arch VERSION=$VERSION BUILD=$build "$build/nfpm" package --packager deb \
			--config "$cfg" --target "$DIST/" | grep -v "^using deb packager" || true
	done
done
echo "deb: version $VERSION in $DIST/"
for arch in "${arches[@]}"; do
	for name in mptun mptun-lab; do
		f="$DIST/${name}_${VERSION}_${arch}.deb"
		[ -f "$f" ] || { echo "deb: $f was not built" >&2; exit 1; }
		installed=$(dpkg-deb -f "$f" Installed-Size 2>/dev/null || echo "?")
		printf '  %-48s %6d KiB  (installed %s KiB)\n' "$(basename "$f")" $(($(stat -c %s "$f") / 1024)) "$installed"
	done
done
