#!/usr/bin/env bash
# Runs every fuzz target of the module briefly: by default 10000 executions
# each (FUZZTIME=1m scripts/fuzz-smoke.sh, or any -fuzztime value, for a
# longer local run). An execution count, not a duration: Go 1.26's fuzz
# coordinator can report a spurious "context deadline exceeded" when a
# duration budget expires (golang/go#75804, fixed in Go 1.27). A real
# finding always writes testdata/fuzz/<target>/<input> and fails the run.
# The seed corpora also run as plain tests in scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-10000x}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz $pkg $f ($t)"
    go test -run='^$' -fuzz="^${f}\$" -fuzztime="$t" -fuzzminimizetime=100x "$pkg" >/tmp/fuzz-$$.log 2>&1 || { cat /tmp/fuzz-$$.log; exit 1; }
  done
done
echo "fuzz smoke: all targets ran without findings"
