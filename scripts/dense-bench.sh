#!/usr/bin/env bash
# dense-bench.sh: dense updates (every element changing, f32, Adam-like),
# snapd beside git-lfs in one run, then the trainer step with the daemon.
#
#   scripts/dense-bench.sh                     # 40 MiB, then the trainer step
#   DENSE_BENCH_BIG=1 scripts/dense-bench.sh   # also 1 GiB
#
# Part 1, per size: generation g of a synthetic checkpoint
# (scripts/densebench: two layers' weights and their Adam moments, every
# element moving each generation) is written as safetensors, then
#   snapd    the daemon (`snapd run`, file:// bare remote, default
#            configuration) gets a request; time = request-snapshot ->
#            `snapd wait G --pushed` returns (the generation is on the
#            remote)
#   git-lfs  the same file, copied into a git-lfs work tree (not timed),
#            is added, committed and pushed (file:// remote, standalone
#            transfer agent); time = add + commit + push
# one after the other for each generation; medians over generations 2..GENS
# (generation 1 has nothing to compare with). The daemon's stage times for
# the last generation are printed from its log.
# Part 2 (TRAINER=0 skips it): scripts/densebench/trainer.py, a PyTorch
# MLP with AdamW (~40 MB checkpoints) on the CPU, alternating windows with
# the daemon (run at nice 10, as the systemd unit runs it) snapshotting
# every EVERY-th step and windows without; it prints the median step
# times and their ratio.
# Environment: GENS (default 6; BIG_GENS, default 4, for sizes of 1 GiB and
# more: each generation there stores ~7 GB in the work dir), SIZES (bytes, space-separated; default
# 41943040, plus 1073741824 with DENSE_BENCH_BIG=1), ROUNDS/STEPS/EVERY for
# the trainer (3/30/5), PYTHON (/usr/bin/python3), BENCH_DIR (work dir
# parent), KEEP=1 keeps the work dir. Installs git-lfs with apt-get when it
# is missing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GENS=${GENS:-6}
SIZES=${SIZES:-41943040${DENSE_BENCH_BIG:+ 1073741824}}
[ "${DENSE_BENCH_BIG:-0}" = 0 ] && SIZES=${SIZES/ 1073741824/}
PYTHON=${PYTHON:-/usr/bin/python3}
W=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/dense-bench.XXXXXX")
DAEMON=
stop_daemon() { if [ -n "$DAEMON" ]; then kill "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; DAEMON=; fi; }
cleanup() { stop_daemon; if [ "${KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi; }
trap cleanup EXIT
if ! git lfs version >/dev/null 2>&1; then
  apt-get install -y git-lfs >/dev/null
fi
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=$W/gitconfig
git config --file "$W/gitconfig" user.name bench
git config --file "$W/gitconfig" user.email bench@localhost
git config --file "$W/gitconfig" init.defaultBranch main
git lfs install --skip-repo >/dev/null
(cd "$ROOT" && go build -o "$W/snapd" ./cmd/snapd && go build -o "$W/densebench" ./scripts/densebench)
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$0} END {if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }

echo "dense-bench: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg); $(go version | cut -d' ' -f3); git $(git --version | cut -d' ' -f3), $(git lfs version | cut -d' ' -f1)"

# start_daemon DIR [NICE]: snapd run on DIR/state with a file:// remote.
start_daemon() {
  local d=$1
  git init -q --bare "$d/snapd-remote.git"
  mkdir -p "$d/state/gens"
  cat > "$d/snapd.yaml" <<YAML
state_dir: $d/state
log: {level: info}
git:
  remote: file://$d/snapd-remote.git
metrics:
  addr: "off"
YAML
  nice -n "${2:-0}" "$W/snapd" run --config "$d/snapd.yaml" 2>"$d/daemon.log" &
  DAEMON=$!
}

run_size() {
  local size=$1 GENS=$2 d=$W/size-$1
  mkdir -p "$d"
  start_daemon "$d"
  git init -q --bare "$d/lfs-remote.git"
  git init -q "$d/lfs"
  git -C "$d/lfs" remote add origin "file://$d/lfs-remote.git"
  git -C "$d/lfs" lfs install --local >/dev/null
  git -C "$d/lfs" config lfs.standalonetransferagent lfs-standalone-file
  git -C "$d/lfs" lfs track '*.safetensors' >/dev/null
  git -C "$d/lfs" add .gitattributes && git -C "$d/lfs" commit -qm attrs
  echo
  echo "size $size bytes ($(awk -v n="$size" 'BEGIN{printf "%.0f", n/1048576}') MiB), $GENS generations, every element changing:"
  printf '%4s | %8s | %8s | %6s | %s\n' gen snapd_s lfs_s ratio load
  local ts_all="" tl_all=""
  for g in $(seq 1 "$GENS"); do
    local src=$d/state/gens/gen-$(printf %06d "$g").safetensors
    "$W/densebench" -size "$size" -gen "$g" "$src"
    cp "$src" "$d/lfs/model.safetensors"
    local t0 ts tl
    t0=$(now)
    "$W/snapd" request-snapshot --state-dir "$d/state" --gen "$g" --source "$src" >/dev/null
    "$W/snapd" wait "$g" --pushed --state-dir "$d/state" --timeout 60m >/dev/null || { echo "snapd: generation $g failed"; tail -20 "$d/daemon.log"; exit 1; }
    ts=$(secs "$t0" "$(now)")
    t0=$(now)
    git -C "$d/lfs" add model.safetensors
    git -C "$d/lfs" commit -qm "gen $g"
    git -C "$d/lfs" push -q origin HEAD:main >/dev/null 2>&1
    tl=$(secs "$t0" "$(now)")
    printf '%4d | %8s | %8s | %6s | %s\n' "$g" "$ts" "$tl" "$(awk -v a="$ts" -v b="$tl" 'BEGIN{printf "%.2f", a/b}')" "$(cut -d' ' -f1 /proc/loadavg)"
    if [ "$g" -ge 2 ]; then ts_all="$ts_all $ts"; tl_all="$tl_all $tl"; fi
  done
  local ms ml
  ms=$(median <<<"$ts_all"); ml=$(median <<<"$tl_all")
  echo "median over gens 2..$GENS: snapd request->pushed $ms s, git-lfs commit+push $ml s: $(awk -v a="$ms" -v b="$ml" 'BEGIN{printf "%.2f", a/b}')x"
  echo "daemon stages of gen $GENS: $(grep 'msg="stage finished"' "$d/daemon.log" | grep " gen=$GENS " | sed -E 's/.*stage=([a-z]+) .*duration=([^ ]+).*/\1 \2/' | paste -sd, -), push $(grep 'msg=pushed' "$d/daemon.log" | grep "tag=gen-$(printf %06d "$GENS") " | sed -E 's/.* duration=([^ ]+).*/\1/')"
  stop_daemon
  [ "${KEEP:-0}" = 1 ] || rm -rf "$d" # keep the disk use bounded for the next size
}

for size in $SIZES; do
  if [ "$size" -ge 1073741824 ]; then run_size "$size" "${BIG_GENS:-4}"; else run_size "$size" "$GENS"; fi
done

if [ "${TRAINER:-1}" != 0 ]; then
  echo
  echo "trainer step (PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null), $(nproc) cores), daemon at nice 10:"
  d=$W/trainer
  mkdir -p "$d"
  start_daemon "$d" 10
  "$PYTHON" "$ROOT/scripts/densebench/trainer.py" --state-dir "$d/state" --snapd "$W/snapd" \
    --rounds "${ROUNDS:-3}" --steps "${STEPS:-30}" --every "${EVERY:-5}"
  echo "daemon stages of the last generation: $(grep 'msg="stage finished"' "$d/daemon.log" | tail -8 | sed -E 's/.*stage=([a-z]+) gen=([0-9]+) .*duration=([^ ]+).*/\1(\2) \3/' | paste -sd, -)"
  stop_daemon
fi
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
