#!/usr/bin/env bash
# The project's test command (README). On a fresh Debian machine it installs
# the tools the tests drive for real (git, age, ssh-keygen, python3,
# python3-torch), then
# runs every Go test under the race detector.
#
#   scripts/test.sh                 # all tests
#   scripts/test.sh ./formats/...   # a subset (arguments go to `go test`)
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v git >/dev/null        || need+=(git)
command -v age >/dev/null        || need+=(age)
command -v age-keygen >/dev/null || need+=(age)
command -v ssh-keygen >/dev/null || need+=(openssh-client)
command -v python3 >/dev/null    || need+=(python3)
{ python3 -c 'import numpy' || /usr/bin/python3 -c 'import numpy'; } >/dev/null 2>&1 || need+=(python3-numpy)
# PyTorch for the torch codec's real-torch tests (Debian's 1.13; the tests
# also look in /usr/bin/python3 when python3 on PATH is another build).
python3 -c 'import torch' 2>/dev/null || /usr/bin/python3 -c 'import torch' 2>/dev/null || need+=(python3-torch)
# A venv (with pip) installs python/ (snapd_trainer) offline in cmd/snapd's
# TestTrainerModuleInstalls.
/usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
command -v systemd-analyze >/dev/null || need+=(systemd)   # configs/systemd_test.go
command -v promtool >/dev/null   || need+=(prometheus)     # pipeline metrics lint
# The CNCF distribution registry and htpasswd for gitops/layout/oci (the skeleton layout).
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v htpasswd >/dev/null        || need+=(apache2-utils)
# rsvg-convert rasterizes the diff pictures (snapshot/diffsvg) in a test.
command -v rsvg-convert >/dev/null    || need+=(librsvg2-bin)
if [ ${#need[@]} -gt 0 ]; then
  echo "test.sh: installing missing tools: ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Git refuses to commit without an identity; tests that drive the git CLI set
# their own, this is a fallback for a bare CI machine.
git config --global user.email >/dev/null 2>&1 || git config --global user.email "ci@snapd.invalid"
git config --global user.name  >/dev/null 2>&1 || git config --global user.name  "snapd CI"

# actionlint checks configs/github/verify.yml (TestWorkflowActionlint skips
# without it, naming the reason).
export PATH="$PATH:$(go env GOPATH)/bin"
command -v actionlint >/dev/null || go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12 ||
  echo "test.sh: could not install actionlint; the workflow lint test will be skipped" >&2
# The oras CLI shows snapd's registry artifacts are standard (gitops/layout/oci skips
# that subtest without it).
command -v oras >/dev/null || go install oras.land/oras/cmd/oras@v1.3.6 ||
  echo "test.sh: could not install oras; the oras interoperability test will be skipped" >&2

if [ $# -eq 0 ]; then set -- ./...; fi
# Vet with scripts/release.sh's compile settings (no cgo, -trimpath; snapd
# has no cgo code): the snapd binaries the tests build (testutil.GoBuild)
# and the install test's release build then reuse these compiled packages,
# and a cold build cache compiles the module once for all of them.
CGO_ENABLED=0 go vet -trimpath "$@"
# The read commands build and vet on macOS and Windows too (docs/PLATFORMS.md);
# the daemon is Linux-only, so these targets only compile and vet. snapd has
# no architecture-specific code, so one macOS architecture stands for both
# (each target costs a full compile of the dependencies on a cold cache).
for t in darwin/arm64 windows/amd64; do
  GOOS=${t%/*} GOARCH=${t#*/} go build -o /dev/null ./cmd/snapd
  GOOS=${t%/*} GOARCH=${t#*/} go vet "$@"
done
# -parallel 4: the tests that mostly wait on real daemons, registries and
# git servers (t.Parallel) overlap their waits, beyond the 2 cores.
# -timeout is a hang guard per package, not a speed target: on a loaded
# 2-core machine a package takes up to 5x its quiet time (docs/TESTING.md).
exec go test -race -count=1 -parallel 4 -timeout 30m "$@"
