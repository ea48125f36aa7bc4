#!/usr/bin/env bash
# ci-verify.sh — verify-only CI check of a snapd snapshot repository.
#
# Runs `snapd verify-repo` on a repository (default: the current directory,
# e.g. a GitHub Actions checkout with full history) with public keys only,
# and prints a readable summary of its JSON report.
#
#   scripts/ci-verify.sh [REPO]
#
# Environment:
#   SNAPD_PUBKEY_FILE  trusted signers (allowed_signers or .pub lines);
#                      default .snapd/allowed_signers
#   SNAPD_BRANCH       snapshot branch (default: snapd's, "snapshots")
#   SNAPD_PATH         directory of the generation files (default "snapshots")
#   SNAPD_SINCE        start at this revision (trusted chain anchor)
#   SNAPD_BIN          the snapd binary (default: snapd on PATH)
#   SNAPD_REPORT       also keep the JSON report at this path
#
# Exit status: snapd's — 0 every check passed, 1 a check failed, 2 usage
# or I/O error (also when snapd or the key file is missing).
set -euo pipefail

repo="${1:-.}"
pubkey="${SNAPD_PUBKEY_FILE:-.snapd/allowed_signers}"
snapd="${SNAPD_BIN:-snapd}"

if ! command -v "$snapd" >/dev/null 2>&1; then
  echo "ci-verify: $snapd not found (install it: go install github.com/snapd-ml/snapd/cmd/snapd@latest)" >&2
  exit 2
fi
if [ ! -r "$pubkey" ]; then
  echo "ci-verify: trusted keys file $pubkey is not readable (set SNAPD_PUBKEY_FILE)" >&2
  exit 2
fi

args=(verify-repo "$repo" --pubkey "$pubkey" --json)
[ -n "${SNAPD_BRANCH:-}" ] && args+=(--branch "$SNAPD_BRANCH")
[ -n "${SNAPD_PATH:-}" ] && args+=(--path "$SNAPD_PATH")
[ -n "${SNAPD_SINCE:-}" ] && args+=(--since "$SNAPD_SINCE")

report="$(mktemp)"
errs="$(mktemp)"
trap 'rm -f "$report" "$errs"' EXIT

status=0
"$snapd" "${args[@]}" >"$report" 2>"$errs" || status=$?
[ -n "${SNAPD_REPORT:-}" ] && cp "$report" "$SNAPD_REPORT"

if [ "$status" -ge 2 ] || [ ! -s "$report" ]; then
  # Usage or I/O error: there is no report, only snapd's message.
  cat "$errs" >&2
  echo "ci-verify: snapd verify-repo could not run (exit $status)" >&2
  exit "$status"
fi

summarize() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
gens = r["generations"]
print(f"snapd verify-repo {r['repo']}: branch {r['branch']}, path {r['path']}, head {r['head'][:12]}")
for g in gens:
    state = "ok" if not g["failures"] else f"FAIL ({len(g['failures'])})"
    kind = "sealed" if g["encrypted"] else "wtxt"
    print(f"  gen {g['gen'] or '?':>6}  {g['commit'][:12]}  {state:<9} {kind} sig {g['signature']}, "
          f"commit {g['commit_signature']}, tag {g['tag_signature']}, chain {g['chain']}, delta {g['delta']}")
    for f in g["failures"]:
        where = f.get("file", "")
        if f.get("line"):
            where += f":{f['line']}"
        print(f"      FAIL [{f['check']}] {where} {f['message']}")
for gap in r["gaps"]:
    print(f"  gap: {gap['missing']} generation number(s) between {gap['after']} and {gap['before']} (reported, not a failure)")
if gens:
    span = f"{gens[0]['gen']}..{gens[-1]['gen']}"
else:
    span = "none"
verdict = "OK: every check passed" if r["ok"] else f"FAILED: {r['failures']} check(s)"
print(f"{len(gens)} generation(s) {span}: {verdict}")
PY
}

if command -v python3 >/dev/null 2>&1; then
  summarize "$report"
elif command -v jq >/dev/null 2>&1; then
  jq -r '"snapd verify-repo \(.repo): \(.generations | length) generation(s), ok=\(.ok), failures=\(.failures)",
         (.generations[] | .failures[] | "  FAIL gen \(.gen) [\(.check)] \(.file // "") \(.message)")' "$report"
else
  cat "$report"
fi
exit "$status"
