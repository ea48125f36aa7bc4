#!/usr/bin/env bash
# ci-verify.sh — verify-only CI check of a snapd snapshot repository.
#
# Runs `snapd verify-repo` on a repository (default: the current directory,
# e.g. a GitHub Actions checkout with full history) with public keys only,
# and prints a readable summary of its JSON report.
#
#   scripts/ci-verify.sh [REPO]
#
# Two modes:
#
#  * Branch mode (push, schedule, workflow_dispatch): verify the snapshot
#    branch SNAPD_BRANCH with the keys in SNAPD_PUBKEY_FILE (a path on
#    disk: take it from a trusted checkout, never from what is verified).
#
#  * Pull-request mode (SNAPD_PR_BASE set): verify exactly what the pull
#    request would merge, against the trusted base:
#      - the trusted keys are read from the BASE commit's tree
#        (git show "$SNAPD_PR_BASE:$SNAPD_PUBKEY_FILE"), never from the
#        PR's head, merge commit or the working tree, so a PR that edits
#        the key file changes nothing;
#      - SNAPD_PR_HEAD (GitHub's refs/pull/N/head) is verified with
#        verify-repo: every commit on its first-parent chain must be a
#        signed generation with a continuous Merkle chain;
#      - when the base already holds snapshots, the head's history must
#        contain a commit with exactly the base's snapshot tree (the PR
#        continues the base's history; it does not rewrite it);
#      - SNAPD_PR_MERGE (GitHub's refs/pull/N/merge; optional, GitHub
#        omits it when the PR conflicts) must have the parents base and
#        head, and its snapshot directory must be the head's byte for
#        byte (the merge brings nothing that was not verified);
#      - a PR that does not touch the snapshot directory passes with a
#        note (nothing to verify).
#
# Environment:
#   SNAPD_PUBKEY_FILE  trusted signers (allowed_signers or .pub lines);
#                      default .snapd/allowed_signers (in PR mode: a path
#                      inside the base commit's tree)
#   SNAPD_BRANCH       snapshot branch (default: snapd's, "snapshots")
#   SNAPD_PATH         directory of the generation files (default "snapshots")
#   SNAPD_SINCE        start at this revision (trusted chain anchor)
#   SNAPD_PR_BASE      PR mode: the base commit (github.event.pull_request.base.sha)
#   SNAPD_PR_HEAD      PR mode: the head revision (refs/pull/N/head, fetched)
#   SNAPD_PR_MERGE     PR mode: the merge revision (refs/pull/N/merge), if any
#   SNAPD_BIN          the snapd binary (default: snapd on PATH)
#   SNAPD_REPORT       also keep the JSON report at this path
#   SNAPD_OCI_REPOSITORY  skeleton layout: the OCI repository HOST[:PORT]/NAME
#                      holding the segment blobs, read only (pull credentials
#                      from SNAPD_OCI_USERNAME/SNAPD_OCI_PASSWORD or the Docker
#                      config; none for a public registry)
#   SNAPD_SAMPLE       with it: check only this fraction of each generation's
#                      segment blobs (e.g. 0.05 on pull requests; full
#                      verification otherwise); SNAPD_SEED reproduces a pick
#
# Exit status: snapd's — 0 every check passed, 1 a check failed, 2 usage
# or I/O error (also when snapd or the key file is missing).
set -euo pipefail

repo="${1:-.}"
pubkey="${SNAPD_PUBKEY_FILE:-.snapd/allowed_signers}"
snapd="${SNAPD_BIN:-snapd}"

if ! command -v "$snapd" >/dev/null 2>&1; then
  echo "ci-verify: $snapd not found (build it from a snapd checkout: go install ./cmd/snapd)" >&2
  exit 2
fi

report="$(mktemp)"
errs="$(mktemp)"
keyfile="$(mktemp)"
trap 'rm -f "$report" "$errs" "$keyfile"' EXIT

branch="${SNAPD_BRANCH:-}"
spath="${SNAPD_PATH:-snapshots}"
if [ -n "${SNAPD_PR_BASE:-}" ]; then
  # Pull-request mode. Everything is read from Git objects; nothing of the
  # PR is executed or taken from the working tree.
  g() { git -C "$repo" "$@"; }
  fail() { echo "ci-verify: FAIL: $*" >&2; exit 1; }
  base="$(g rev-parse --verify --quiet "${SNAPD_PR_BASE}^{commit}")" || { echo "ci-verify: base $SNAPD_PR_BASE is not a commit here (fetch it)" >&2; exit 2; }
  [ -n "${SNAPD_PR_HEAD:-}" ] || { echo "ci-verify: SNAPD_PR_BASE needs SNAPD_PR_HEAD" >&2; exit 2; }
  head="$(g rev-parse --verify --quiet "${SNAPD_PR_HEAD}^{commit}")" || { echo "ci-verify: head $SNAPD_PR_HEAD is not a commit here (fetch refs/pull/N/head)" >&2; exit 2; }
  if ! g cat-file -e "$base:$pubkey" 2>/dev/null; then
    echo "ci-verify: the base commit ${base:0:12} has no $pubkey: the trusted keys must be committed on the base branch (SNAPD_PUBKEY_FILE)" >&2
    exit 2
  fi
  g show "$base:$pubkey" >"$keyfile"
  echo "ci-verify: pull request: base ${base:0:12}, head ${head:0:12}; trusted keys from the base's $pubkey"
  pubkey="$keyfile"
  tree_of() { g rev-parse --verify --quiet "$1:$spath" 2>/dev/null || echo none; }
  head_tree="$(tree_of "$head")"
  base_tree="$(tree_of "$base")"
  if [ -n "${SNAPD_PR_MERGE:-}" ]; then
    merge="$(g rev-parse --verify --quiet "${SNAPD_PR_MERGE}^{commit}")" || { echo "ci-verify: merge $SNAPD_PR_MERGE is not a commit here" >&2; exit 2; }
    parents="$(g rev-list --parents -n 1 "$merge" | cut -d' ' -f2-)"
    [ "$parents" = "$base $head" ] || fail "merge commit ${merge:0:12} has parents ($parents), not the base and head (${base:0:12} ${head:0:12})"
    [ "$(tree_of "$merge")" = "$head_tree" ] || fail "merge commit ${merge:0:12}: $spath/ differs from the PR head's: the merge would bring snapshot content that was not verified"
    echo "ci-verify: merge ${merge:0:12}: parents are base and head, $spath/ equals the head's"
  else
    echo "ci-verify: no merge commit given (GitHub makes none for a conflicting PR); verifying the head only"
  fi
  if [ "$head_tree" = "$base_tree" ]; then
    echo "ci-verify: the pull request does not change $spath/: nothing to verify"
    exit 0
  fi
  if [ "$base_tree" != none ]; then
    found=""
    for c in $(g rev-list --first-parent "$head"); do
      if [ "$(tree_of "$c")" = "$base_tree" ]; then found="$c"; break; fi
    done
    [ -n "$found" ] || fail "the PR head's first-parent history never holds the base's $spath/ (${base_tree:0:12}): it does not continue the base's snapshot history"
    echo "ci-verify: the head continues the base's snapshot history (at ${found:0:12})"
  fi
  branch="$head"
fi

if [ ! -r "$pubkey" ]; then
  echo "ci-verify: trusted keys file $pubkey is not readable (set SNAPD_PUBKEY_FILE)" >&2
  exit 2
fi

args=(verify-repo "$repo" --pubkey "$pubkey" --json)
[ -n "$branch" ] && args+=(--branch "$branch")
[ -n "${SNAPD_PATH:-}" ] && args+=(--path "$SNAPD_PATH")
[ -n "${SNAPD_SINCE:-}" ] && args+=(--since "$SNAPD_SINCE")
[ -n "${SNAPD_OCI_REPOSITORY:-}" ] && args+=(--oci-repository "$SNAPD_OCI_REPOSITORY")
[ -n "${SNAPD_SAMPLE:-}" ] && args+=(--sample "$SNAPD_SAMPLE")
[ -n "${SNAPD_SEED:-}" ] && args+=(--seed "$SNAPD_SEED")

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
    print(f"  gen {g.get('gen_text') or '?':>6}  {g['commit'][:12]}  {state:<9} {kind} sig {g['signature']}, "
          f"commit {g['commit_signature']}, tag {g['tag_signature']}, chain {g['chain']}, delta {g['delta']}")
    for f in g["failures"]:
        where = f.get("file", "")
        if f.get("line"):
            where += f":{f['line']}"
        print(f"      FAIL [{f['check']}] {where} {f['message']}")
for gap in r["gaps"]:
    print(f"  gap: {gap['missing']} generation number(s) between {gap['after_text']} and {gap['before_text']} (reported, not a failure)")
if gens:
    span = f"{gens[0]['gen_text']}..{gens[-1]['gen_text']}"
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
         (.generations[] | .failures[] | "  FAIL gen \(.gen_text // .gen) [\(.check)] \(.file // "") \(.message)")' "$report"
else
  cat "$report"
fi
exit "$status"
