#!/usr/bin/env bash
# Build a release binary of snapd with its version embedded from
# `git describe` (e.g. v0.3.0, or v0.3.0-4-gabc1234-dirty between tags) and
# its commit from `git rev-parse HEAD` (always: also when the build runs
# with -buildvcs=false, e.g. GOFLAGS=-buildvcs=false or a copied tree).
#
#   scripts/release.sh                  # -> dist/snapd-<version>-<os>-<arch> (+ .sha256)
#   GOOS=darwin GOARCH=arm64 scripts/release.sh
#   OUT=/usr/local/bin/snapd scripts/release.sh
#
# The binary is static (CGO_ENABLED=0), reproducible (-trimpath, no build
# ID) and prints its version and commit with `snapd version [--json]`.
# Progress goes to stderr (a first build compiles every dependency: a few
# minutes on 2 cores); the path of the binary is the one line on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "release.sh: $*" >&2; }

version=$(git describe --tags --always --dirty 2>/dev/null || true)
rev=$(git rev-parse HEAD 2>/dev/null || true)
if [ -z "$version" ] || [ -z "$rev" ]; then
  say "not a git checkout with history; cannot derive the version"
  exit 2
fi
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  rev="${rev}-dirty"
fi
goos=${GOOS:-$(go env GOOS)}
goarch=${GOARCH:-$(go env GOARCH)}
out=${OUT:-dist/snapd-${version}-${goos}-${goarch}}
mkdir -p "$(dirname "$out")"

total=$(CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go list -deps ./cmd/snapd | wc -l)
say "building snapd ${version} (${rev}) for ${goos}/${goarch}: ${total} packages"
# go build -v names each package as it compiles it (cached ones are not
# named); count them as progress. A failed build ends the stream with a
# marker line, so its status survives the pipe.
progress() {
  local n=0 line
  while IFS= read -r line; do
    case "$line" in
      "release.sh: build failed"*) say "go build failed"; return 1 ;;
      *" "*|*:*) echo "$line" >&2 ;;   # a compiler message, not a package path
      *) n=$((n + 1))
         if [ $((n % 20)) -eq 0 ]; then say "compiled ${n} packages (of at most ${total})"; fi ;;
    esac
  done
  return 0
}
{ CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -v -trimpath \
    -ldflags "-s -w -buildid= -X main.version=${version} -X main.revision=${rev}" \
    -o "$out" ./cmd/snapd 2>&1 || echo "release.sh: build failed"; } | progress
( cd "$(dirname "$out")" && sha256sum "$(basename "$out")" > "$(basename "$out").sha256" )
say "wrote $out and $out.sha256"
echo "$out"
