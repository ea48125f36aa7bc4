#!/usr/bin/env bash
# Build a release binary of snapd with its version embedded from
# `git describe` (e.g. v0.3.0, or v0.3.0-4-gabc1234-dirty between tags).
#
#   scripts/release.sh                  # -> dist/snapd-<version>-<os>-<arch> (+ .sha256)
#   GOOS=linux GOARCH=arm64 scripts/release.sh
#   OUT=/usr/local/bin/snapd scripts/release.sh
#
# The binary is static (CGO_ENABLED=0), reproducible (-trimpath, no build
# ID) and prints its version with `snapd version` / `snapd --version`.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(git describe --tags --always --dirty 2>/dev/null || true)
if [ -z "$version" ]; then
  echo "release.sh: not a git checkout with history; cannot derive the version" >&2
  exit 2
fi
goos=${GOOS:-$(go env GOOS)}
goarch=${GOARCH:-$(go env GOARCH)}
out=${OUT:-dist/snapd-${version}-${goos}-${goarch}}
mkdir -p "$(dirname "$out")"
CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath \
  -ldflags "-s -w -buildid= -X main.version=${version}" \
  -o "$out" ./cmd/snapd
( cd "$(dirname "$out")" && sha256sum "$(basename "$out")" > "$(basename "$out").sha256" )
echo "$out"
