#!/usr/bin/env bash
# bench-oci.sh: the skeleton layout (tensor bytes in an OCI
# registry, the signed skeleton in Git) beside git-lfs, in one run.
#
#   scripts/bench-oci.sh [SIZE_BYTES] [GENS] [PATTERN] [CHANGE_PERCENT]
#   (defaults: $SNAPD_BENCH_SIZE or 1073741824, 10, clustered, 1;
#    e.g. `scripts/bench-oci.sh 268435456 10 uniform 100` for all rows changing)
#
# Generation g of a synthetic model (scripts/benchgen: four f32 matrices of
# 1024 columns, rows changing cumulatively) is written as safetensors, then
#   snapd    `snapd convert` (signed, chained with --prev) to WTXT, then
#            `snapd oci push` to a local CNCF registry (docker-registry on
#            127.0.0.1, HEAD first, uploads only missing segments), then
#            the skeleton committed as snapshots/current.wtxt.skel with
#            generation.txt and snapd's trailers (Snapd-Layout: skeleton),
#            SSH-signed commit and tag, pushed to a file:// bare remote
#   git-lfs  the safetensors file committed with git-lfs and pushed to a
#            file:// remote (standalone transfer agent); time = add +
#            commit + push
# Reported per generation: the raw bytes of the changed rows and of the
# changed segments (seg lines whose sha256 differs from the previous
# generation's), the bytes `oci push` uploaded, the Git remote's growth,
# the registry storage's growth, convert / push / end-to-end seconds and
# git-lfs's seconds and remote growth. At the end: `snapd verify-repo`
# of the whole history from the registry, full and with --sample 0.05.
# Times: wall seconds (_s) and CPU seconds, user+sys of the commands and
# their children (_c; reg_c is the registry server's own CPU during the
# push): on a shared machine the wall times mostly measure the load.
# Work dir: $BENCH_DIR (default a temp dir, removed at the end).
# SEGMENT_SIZE sets --segment-size (default snapd's 4 MiB).
# DIRECT=1 (the default) pushes the safetensors checkpoint itself:
# `snapd oci push CHECKPOINT` converts it straight to the skeleton and
# segments (no WTXT written; the conv column is then 0 and push is the
# whole of snapd's work). DIRECT=0 measures `snapd convert` to a WTXT,
# then `snapd oci push WTXT` (same skeleton, blobs and manifest).
# INCREMENTAL=0 measures the push without --prev-skeleton (A/B): every
# segment read, decoded and hashed again; by default `oci push` gets the
# skeleton Git holds (the previous generation's) as --prev-skeleton and
# reuses the digests of segments whose chunks did not change.
# CACHE=0 (direct pushes only) measures without --segment-cache: by
# default each push keeps a segment cache ($W/segments.cache) so that
# unchanged segments are recognised by keyed BLAKE3 instead of a SHA-256
# of every chunk.
set -euo pipefail
SIZE=${1:-${SNAPD_BENCH_SIZE:-1073741824}}; GENS=${2:-10}; PATTERN=${3:-clustered}; CHANGE=${4:-1}
SEG=${SEGMENT_SIZE:-4194304}
INC=${INCREMENTAL:-1}
DIRECT=${DIRECT:-1}
CACHE=${CACHE:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/bench-oci.XXXXXX")
REG=
cleanup() { [ -n "$REG" ] && kill "$REG" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=$W/gitconfig
git config --file "$W/gitconfig" user.name bench
git config --file "$W/gitconfig" user.email bench@localhost
git config --file "$W/gitconfig" init.defaultBranch main
git lfs install --skip-repo >/dev/null
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$W/bin/snapd" ./cmd/snapd && CGO_ENABLED=0 go build -trimpath -o "$W/bin/benchgen" ./scripts/benchgen)
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }
du_b() { du -sb "$1" | cut -f1; }
mib() { awk -v n="$1" 'BEGIN{printf "%.2f", n/1048576}'; }
# c KEY CMD...: run CMD, adding its user+sys CPU seconds to the KEY counter
# (wall times on a shared machine measure the load; CPU seconds do not).
c() { local k=$1; shift; /usr/bin/time -f '%U %S' -a -o "$W/cpu.$k" "$@"; }
regcpu() { awk '{printf "%.2f", ($14+$15)/100}' "/proc/$REG/stat"; }   # the registry's own CPU so far (s)
cpu() { awk '{s += $1 + $2} END {printf "%.2f", s}' "$W/cpu.$1" 2>/dev/null || echo 0; rm -f "$W/cpu.$1"; }

echo "bench-oci: size=$SIZE gens=$GENS pattern=$PATTERN change=$CHANGE% segment=$SEG incremental=$INC direct=$DIRECT cache=$CACHE on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg); git $(git --version | cut -d' ' -f3), $(git lfs version | cut -d' ' -f1), $(docker-registry --version 2>/dev/null | awk '{print $NF}' || true)"

# --- registry -----------------------------------------------------------------
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$W/registry"
cat > "$W/registry.yml" <<YAML
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: $W/registry}
  delete: {enabled: true}
http: {addr: 127.0.0.1:$PORT}
YAML
docker-registry serve "$W/registry.yml" >"$W/registry.log" 2>&1 &
REG=$!
until curl -fs "http://127.0.0.1:$PORT/v2/" >/dev/null; do kill -0 "$REG" || { cat "$W/registry.log"; exit 1; }; sleep 0.05; done
REPO=127.0.0.1:$PORT/bench/model

# --- snapd's Git ledger and the git-lfs peer ----------------------------------
"$W/bin/snapd" keygen "$W/keys" >/dev/null
SIGN=(-c gpg.format=ssh -c user.signingkey="$W/keys/sign_ed25519")
for kind in snapd lfs; do
  git init -q --bare "$W/$kind-remote.git"
  git init -q "$W/$kind"
  git -C "$W/$kind" remote add origin "file://$W/$kind-remote.git"
done
git -C "$W/snapd" checkout -q -b snapshots
mkdir -p "$W/snapd/snapshots"
git -C "$W/lfs" lfs install --local >/dev/null
git -C "$W/lfs" config lfs.standalonetransferagent lfs-standalone-file
git -C "$W/lfs" lfs track '*.safetensors' >/dev/null
git -C "$W/lfs" add .gitattributes && git -C "$W/lfs" commit -qm attrs && git -C "$W/lfs" push -q origin HEAD:main >/dev/null 2>&1

# field KEY LINE: the value of KEY=... in LINE.
field() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }

printf '%4s %9s %9s %10s %8s %8s %9s | %6s %6s %6s | %6s %6s %6s %6s | %6s %6s %9s\n' \
  gen rows_KiB chseg_KiB upload_KiB up/chseg git_KiB reg_KiB conv_s push_s e2e_s conv_c push_c e2e_c reg_c lfs_s lfs_c lfs_KiB
prev=
sum_e2e=0 sum_push=0 sum_lfs=0 sum_ec=0 sum_pc=0 sum_lc=0
for g in $(seq 1 "$GENS"); do
  G=$(printf %06d "$g")
  src="$W/gen.safetensors"
  "$W/bin/benchgen" -size "$SIZE" -pattern "$PATTERN" -change "$CHANGE" -gen "$g" "$src"
  changed=$("$W/bin/benchgen" -size "$SIZE" -pattern "$PATTERN" -change "$CHANGE" -gen "$g" -report)
  git_before=$(du_b "$W/snapd-remote.git"); reg_before=$(du_b "$W/registry"); rc0=$(regcpu)
  # snapd: convert, push the blobs, commit + push the skeleton.
  t0=$(now)
  prevarg=(); skelarg=()
  sk="$W/snapd/snapshots/current.wtxt.skel"
  if [ -n "$prev" ]; then
    prevarg=(--prev "$prev")
    if [ "$INC" = 1 ]; then
      cp "$sk" "$W/prev.skel"; skelarg=(--prev-skeleton "$W/prev.skel")
    fi
  fi
  wopts=(--gen "$g" --ts "2026-11-24T06:00:$(printf %02d $((g % 60)))Z" --build bench --sign-key "$W/keys/sign_ed25519" --hmac-key "$W/keys/hmac.key" "${prevarg[@]}")
  if [ "$DIRECT" = 1 ]; then
    t1=$t0
    cachearg=(); [ "$CACHE" = 1 ] && cachearg=(--segment-cache "$W/segments.cache")
    c push "$W/bin/snapd" oci push "$src" --oci-repository "$REPO" --segment-size "$SEG" \
      --skeleton "$sk" "${wopts[@]}" "${skelarg[@]}" "${cachearg[@]}" --json >"$W/push.json"
    # The skeleton's header: line 1 is its magic, then the WTXT's header.
    hdr=$(head -n 5 "$sk"); meta=$(sed -n 3p <<<"$hdr"); root=$(sed -n 5p <<<"$hdr")
  else
    c conv "$W/bin/snapd" convert "$src" "$W/gen-$G.wtxt" "${wopts[@]}" >/dev/null
    t1=$(now)
    c push "$W/bin/snapd" oci push "$W/gen-$G.wtxt" --oci-repository "$REPO" --segment-size "$SEG" \
      --skeleton "$sk" "${skelarg[@]}" --json >"$W/push.json"
    # (head first: sed -n 2p alone reads the whole 1.4x-raw WTXT, ~1.8 s of
    # the push column at 1 GiB that is the bench's, not snapd's)
    hdr=$(head -n 4 "$W/gen-$G.wtxt"); meta=$(sed -n 2p <<<"$hdr"); root=$(sed -n 4p <<<"$hdr")
  fi
  ts=$(field ts "$meta"); build=$(field build "$meta")
  sa=$(field sha256_all "$root"); mp=$(field merkle_prev "$root"); mt=$(field merkle_this "$root")
  # wtxt_bytes/wtxt_sha256 are optional in generation.txt (the daemon has them from
  # encoding for free); hashing the 1.4x-raw WTXT again here would be bench overhead.
  printf 'gen=%s\nts=%s\nbuild=%s\nsha256_all=%s\nmerkle_prev=%s\nmerkle_this=%s\nlayout=skeleton\nskel_bytes=%s\nskel_sha256=%s\n' \
    "$G" "$ts" "$build" "$sa" "$mp" "$mt" "$(stat -c %s "$sk")" "$(sha256sum "$sk" | cut -d' ' -f1)" >"$W/snapd/snapshots/generation.txt"
  printf 'snapd: generation %s\n\nSnapd-Gen: %s\nSnapd-Ts: %s\nSnapd-Build: %s\nSnapd-Sha256-All: %s\nSnapd-Merkle-Prev: %s\nSnapd-Merkle-This: %s\nSnapd-Layout: skeleton\n' \
    "$G" "$G" "$ts" "$build" "$sa" "$mp" "$mt" >"$W/msg"
  c git git -C "$W/snapd" add -A
  c git git -C "$W/snapd" "${SIGN[@]}" commit -q -S --cleanup=verbatim -F "$W/msg"
  c git git -C "$W/snapd" "${SIGN[@]}" tag -s -a --cleanup=verbatim -F "$W/msg" "gen-$G"
  c git git -C "$W/snapd" push -q origin snapshots "gen-$G" 2>/dev/null
  t2=$(now)
  rc=$(awk -v a="$rc0" -v b="$(regcpu)" 'BEGIN{printf "%.2f", b-a}')
  # Changed segments: seg lines (in order) whose sha256 differs from the
  # previous generation's.
  grep '^seg ' "$sk" >"$W/segs.new"
  if [ -f "$W/segs.old" ]; then
    chseg=$(paste -d'|' "$W/segs.old" "$W/segs.new" | awk -F'|' '$1 != $2 { split($2, f, " "); sub("len=", "", f[3]); s += f[3] } END { print s + 0 }')
  else
    chseg=$(awk '{ split($0, f, " "); sub("len=", "", f[3]); s += f[3] } END { print s + 0 }' "$W/segs.new")
  fi
  mv "$W/segs.new" "$W/segs.old"
  up=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["uploaded_bytes"])' "$W/push.json")
  gitg=$(( $(du_b "$W/snapd-remote.git") - git_before )); regg=$(( $(du_b "$W/registry") - reg_before ))
  if [ "$DIRECT" = 1 ]; then
    prev="$W/chain.skel"; cp "$sk" "$prev"   # --prev: the skeleton's merkle_this
  else
    [ -n "$prev" ] && rm -f "$prev"
    prev="$W/gen-$G.wtxt"
  fi
  # git-lfs: the same generation as safetensors.
  lfs_before=$(du_b "$W/lfs-remote.git")
  t3=$(now)
  c lfs cp "$src" "$W/lfs/model.safetensors"
  c lfs git -C "$W/lfs" add model.safetensors
  c lfs git -C "$W/lfs" commit -qm "gen $g"
  c lfs git -C "$W/lfs" push -q origin HEAD:main >/dev/null 2>&1
  t4=$(now)
  lfsg=$(( $(du_b "$W/lfs-remote.git") - lfs_before ))
  ratio=$(awk -v u="$up" -v c="$chseg" 'BEGIN{ if (c > 0) printf "%.3f", u/c; else print "-" }')
  cc=$(cpu conv); pc=$(awk -v a="$(cpu push)" -v b="$(cpu git)" 'BEGIN{printf "%.2f", a+b}'); lc=$(cpu lfs)
  ec=$(awk -v a="$cc" -v b="$pc" 'BEGIN{printf "%.2f", a+b}')
  printf '%4d %9.0f %9.0f %10.0f %8s %8.1f %9.0f | %6s %6s %6s | %6s %6s %6s %6s | %6s %6s %9.0f\n' "$g" \
    "$(awk -v n="$changed" 'BEGIN{print n/1024}')" "$(awk -v n="$chseg" 'BEGIN{print n/1024}')" "$(awk -v n="$up" 'BEGIN{print n/1024}')" "$ratio" \
    "$(awk -v n="$gitg" 'BEGIN{print n/1024}')" "$(awk -v n="$regg" 'BEGIN{print n/1024}')" \
    "$(secs "$t0" "$t1")" "$(secs "$t1" "$t2")" "$(secs "$t0" "$t2")" "$cc" "$pc" "$ec" "$rc" "$(secs "$t3" "$t4")" "$lc" "$(awk -v n="$lfsg" 'BEGIN{print n/1024}')"
  if [ "$g" -gt 1 ]; then
    sum_e2e=$(awk -v a="$sum_e2e" -v b="$(secs "$t0" "$t2")" 'BEGIN{print a+b}')
    sum_push=$(awk -v a="$sum_push" -v b="$(secs "$t1" "$t2")" 'BEGIN{print a+b}')
    sum_lfs=$(awk -v a="$sum_lfs" -v b="$(secs "$t3" "$t4")" 'BEGIN{print a+b}')
    sum_ec=$(awk -v a="$sum_ec" -v b="$ec" 'BEGIN{print a+b}')
    sum_pc=$(awk -v a="$sum_pc" -v b="$pc" 'BEGIN{print a+b}')
    sum_lc=$(awk -v a="$sum_lc" -v b="$lc" 'BEGIN{print a+b}')
  fi
done
echo "gens 2..$GENS wall: snapd end-to-end $sum_e2e s (push only, after convert: $sum_push s), git-lfs $sum_lfs s; ratios e2e/lfs $(awk -v a="$sum_e2e" -v b="$sum_lfs" 'BEGIN{printf "%.2f", a/b}'), push/lfs $(awk -v a="$sum_push" -v b="$sum_lfs" 'BEGIN{printf "%.2f", a/b}')"
echo "gens 2..$GENS CPU (user+sys): snapd end-to-end $sum_ec s (push only: $sum_pc s), git-lfs $sum_lc s; ratios e2e/lfs $(awk -v a="$sum_ec" -v b="$sum_lc" 'BEGIN{printf "%.2f", a/b}'), push/lfs $(awk -v a="$sum_pc" -v b="$sum_lc" 'BEGIN{printf "%.2f", a/b}')"
echo "totals: snapd Git remote $(mib "$(du_b "$W/snapd-remote.git")") MiB, registry $(mib "$(du_b "$W/registry")") MiB; git-lfs remote $(mib "$(du_b "$W/lfs-remote.git")") MiB; skeleton $(stat -c %s "$W/snapd/snapshots/current.wtxt.skel") B$([ "$DIRECT" = 1 ] || echo ", last WTXT $(stat -c %s "$prev") B")"
# --- verify-only CI over the whole history, from the registry ---------------
if [ "${VERIFY:-1}" = 1 ]; then
  for mode in full sample; do
    extra=(); [ "$mode" = sample ] && extra=(--sample 0.05 --seed 1)
    t0=$(now)
    if "$W/bin/snapd" verify-repo "file://$W/snapd-remote.git" --pubkey "$W/keys/allowed_signers" --oci-repository "$REPO" "${extra[@]}" >"$W/verify.out" 2>&1; then
      res=ok
    else
      res="FAILED (exit $?)"; cat "$W/verify.out"
    fi
    echo "verify-repo $mode over $GENS generations: $res, $(secs "$t0" "$(now)") s"
  done
fi
