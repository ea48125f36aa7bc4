#!/usr/bin/env bash
# Runs every fuzz target of the module for a short time (default 5s each;
# FUZZTIME=1m scripts/fuzz-smoke.sh for a longer local run). The seed corpora
# also run as plain tests in scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-5s}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz $pkg $f ($t)"
    go test -run='^$' -fuzz="^${f}\$" -fuzztime="$t" -fuzzminimizetime=100x "$pkg" >/tmp/fuzz-$$.log 2>&1 || { cat /tmp/fuzz-$$.log; exit 1; }
  done
done
echo "fuzz smoke: all targets ran without findings"
