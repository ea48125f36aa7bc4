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
#   snapd-oci the daemon in the registry layout (store.oci: the tensor
#            bytes as segment blobs in a local `docker-registry`, the signed
#            skeleton in Git, file:// bare remote), timed the same way:
#            git-lfs's own split (pointer in Git, bytes in LFS storage)
# one after the other for each generation; medians over generations 2..GENS
# (generation 1 has nothing to compare with). Each timed window starts
# after a `sync` (not timed): otherwise the untimed copies just before a
# daemon's window, and the gigabytes the tool before it wrote, would be
# written back during it (the git-lfs window, last, had the least). That
# sync is timed too, so a second comparison counts each tool until what
# it wrote is on disk ("durable": the registry fsyncs every blob it
# stores inside snapd's window; git-lfs writes its two copies of the
# object, work tree's and remote's, without fsync). The
# daemon's stage times for the last generation are printed from its log,
# and the median CPU seconds per generation: the daemon's during its
# window (with the git processes it ran; in the registry layout the
# registry's too; background work after the push, such as retention, is
# not counted) and git-lfs's add, commit and push.
# Part 2 (TRAINER=0 skips it): scripts/densebench/trainer.py, a PyTorch
# MLP with AdamW (~40 MB checkpoints) on the CPU, alternating windows with
# the daemon (run at nice 10, as the systemd unit runs it) snapshotting
# every EVERY-th step and windows without; it prints the median step
# times and their ratio.
# Environment: GENS (default 6; BIG_GENS, default 4, for sizes of 1 GiB and
# more: each generation there stores ~7 GB in the work dir), SIZES (bytes, space-separated; default
# 41943040, plus 1073741824 with DENSE_BENCH_BIG=1), ROUNDS/STEPS/EVERY for
# the trainer (3/30/5), TRAINER_SCHED (idle: the daemon beside the
# trainer at nice 10 and SCHED_IDLE, as configs/snapd-ml.service and
# snapd-ml.slice run it; nice: nice 10 only), TRAINER_STORE (git, or oci: the daemon beside the
# trainer in the registry layout), PYTHON (/usr/bin/python3), BENCH_DIR (work dir
# parent), KEEP=1 keeps the work dir, SPLIT_ABOVE (bytes: the daemons'
# git.split_above, above which a WTXT goes into Git in the segments
# layout; default the configuration's 64 MiB), STORES ("git oci" by default; "git"
# skips the registry). Installs git-lfs (and docker-registry for oci) with
# apt-get when missing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GENS=${GENS:-6}
SIZES=${SIZES:-41943040${DENSE_BENCH_BIG:+ 1073741824}}
[ "${DENSE_BENCH_BIG:-0}" = 0 ] && SIZES=${SIZES/ 1073741824/}
PYTHON=${PYTHON:-/usr/bin/python3}
W=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/dense-bench.XXXXXX")
DAEMON=
DAEMONS=
REGISTRY=
stop_daemon() {
  for p in $DAEMON $DAEMONS $REGISTRY; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  DAEMON= DAEMONS= REGISTRY=
}
cleanup() { stop_daemon; if [ "${KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi; }
trap cleanup EXIT
STORES=${STORES:-git oci}
if ! git lfs version >/dev/null 2>&1; then
  apt-get install -y git-lfs >/dev/null
fi
case " $STORES " in *" oci "*) command -v docker-registry >/dev/null || apt-get install -y docker-registry >/dev/null ;; esac
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=$W/gitconfig
git config --file "$W/gitconfig" user.name bench
git config --file "$W/gitconfig" user.email bench@localhost
git config --file "$W/gitconfig" init.defaultBranch main
git lfs install --skip-repo >/dev/null
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$W/snapd" ./cmd/snapd && CGO_ENABLED=0 go build -trimpath -o "$W/densebench" ./scripts/densebench)
now() { date +%s.%N; }
HZ=$(getconf CLK_TCK)
# cpu PID...: the CPU seconds (user + system, waited-for children
# included) the processes have used so far.
cpu() {
  local p t=0
  for p in "$@"; do
    t=$(awk -v t="$t" -v hz="$HZ" '{printf "%.2f", t + ($14+$15+$16+$17)/hz}' "/proc/$p/stat")
  done
  echo "$t"
}
# sync_time: the seconds a sync takes (what the window before it left
# to write back).
sync_time() { local t0; t0=$(now); sync; secs "$t0" "$(now)"; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$0} END {if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }

echo "dense-bench: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg); $(go version | cut -d' ' -f3); git $(git --version | cut -d' ' -f3), $(git lfs version | cut -d' ' -f1)"

# start_daemon DIR [NICE [REGISTRY]]: snapd run on DIR/state with a
# file:// remote; with REGISTRY (HOST:PORT) in the registry layout.
start_daemon() {
  local d=$1
  git init -q --bare "$d/snapd-remote.git"
  mkdir -p "$d/state/gens"
  cat > "$d/snapd.yaml" <<YAML
state_dir: $d/state
log: {level: info}
git:
  remote: file://$d/snapd-remote.git
${SPLIT_ABOVE:+  split_above: $SPLIT_ABOVE}
metrics:
  addr: "off"
YAML
  if [ -n "${3:-}" ]; then printf 'store:\n  oci:\n    repository: %s/bench\n' "$3" >> "$d/snapd.yaml"; fi
  local idle=()
  if [ "${2:-0}" != 0 ] && [ "${TRAINER_SCHED:-idle}" = idle ]; then idle=(chrt --idle 0); fi
  nice -n "${2:-0}" "${idle[@]}" "$W/snapd" run --config "$d/snapd.yaml" 2>"$d/daemon.log" &
  DAEMON=$!
  DAEMONS="$DAEMONS $DAEMON"
}

# start_registry DIR: docker-registry (filesystem storage in DIR) on a free
# loopback port; sets REG_ADDR to HOST:PORT.
start_registry() {
  local d=$1 port
  port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mkdir -p "$d"
  cat > "$d/config.yml" <<YAML
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $d/storage}, delete: {enabled: true}}
http: {addr: 127.0.0.1:$port}
YAML
  docker-registry serve "$d/config.yml" >"$d/registry.log" 2>&1 &
  REGISTRY="$REGISTRY $!"
  for _ in $(seq 1 300); do curl -fso /dev/null "http://127.0.0.1:$port/v2/" && break; sleep 0.1; done
  REG_ADDR=127.0.0.1:$port
}

# snap_time DIR GEN SRC: request GEN from the daemon on DIR/state, wait
# until it is pushed; prints the seconds.
snap_time() {
  local t0
  t0=$(now)
  "$W/snapd" request-snapshot --state-dir "$1/state" --gen "$2" --source "$3" >/dev/null
  "$W/snapd" wait "$2" --pushed --state-dir "$1/state" --timeout 60m >/dev/null || { echo "snapd: generation $2 failed in $1" >&2; tail -20 "$1/daemon.log" >&2; exit 1; }
  secs "$t0" "$(now)"
}

# stages DIR GEN: the daemon's stage times of GEN and its push.
stages() {
  echo "$(grep 'msg="stage finished"' "$1/daemon.log" | grep " gen=$2 " | sed -E 's/.*stage=([a-z]+) .*duration=([^ ]+).*/\1 \2/' | paste -sd, -), push $(grep 'msg=pushed' "$1/daemon.log" | grep "tag=gen-$(printf %06d "$2") " | sed -E 's/.* duration=([^ ]+).*/\1/')"
}

run_size() {
  local size=$1 GENS=$2 d=$W/size-$1 st
  mkdir -p "$d"
  local -A pids=() cpus=()
  for st in $STORES; do
    case $st in
      git) start_daemon "$d/git"; pids[git]=$DAEMON ;;
      oci) start_registry "$d/registry"; start_daemon "$d/oci" 0 "$REG_ADDR"; pids[oci]="$DAEMON ${REGISTRY##* }" ;;
      *) echo "dense-bench: unknown store $st (git, oci)" >&2; exit 2 ;;
    esac
  done
  git init -q --bare "$d/lfs-remote.git"
  git init -q "$d/lfs"
  git -C "$d/lfs" remote add origin "file://$d/lfs-remote.git"
  git -C "$d/lfs" lfs install --local >/dev/null
  git -C "$d/lfs" config lfs.standalonetransferagent lfs-standalone-file
  git -C "$d/lfs" lfs track '*.safetensors' >/dev/null
  git -C "$d/lfs" add .gitattributes && git -C "$d/lfs" commit -qm attrs
  echo
  echo "size $size bytes ($(awk -v n="$size" 'BEGIN{printf "%.0f", n/1048576}') MiB), $GENS generations, every element changing:"
  printf '%4s |' gen; for st in $STORES; do printf ' %9s |' "snapd-$st"; done; printf ' %8s | %s\n' lfs_s load
  local -A all=() durable=()
  for g in $(seq 1 "$GENS"); do
    local name=gen-$(printf %06d "$g").safetensors t0 tl row=""
    "$W/densebench" -size "$size" -gen "$g" "$d/$name"
    cp "$d/$name" "$d/lfs/model.safetensors"
    for st in $STORES; do
      cp "$d/$name" "$d/$st/state/gens/$name" # not timed, as the copy into the LFS work tree
      local ts c0
      sync # each timed window starts without the write-back of what ran before it
      c0=$(cpu ${pids[$st]})
      ts=$(snap_time "$d/$st" "$g" "$d/$st/state/gens/$name")
      [ "$g" -ge 2 ] && cpus[$st]="${cpus[$st]:-} $(secs "$c0" "$(cpu ${pids[$st]})")"
      tsync=$(sync_time)
      row="$row $(printf ' %9s |' "$ts")"
      [ "$g" -ge 2 ] && all[$st]="${all[$st]:-} $ts" && durable[$st]="${durable[$st]:-} $(awk -v a="$ts" -v b="$tsync" 'BEGIN{printf "%.2f", a+b}')"
    done
    rm -f "$d/$name"
    sync
    t0=$(now)
    tc=$(git -C "$d/lfs" add model.safetensors && git -C "$d/lfs" commit -qm "gen $g" &&
      git -C "$d/lfs" push -q origin HEAD:main >/dev/null 2>&1 && awk -v hz="$HZ" '{printf "%.2f", ($16+$17)/hz}' "/proc/$BASHPID/stat")
    tl=$(secs "$t0" "$(now)")
    tsync=$(sync_time)
    [ "$g" -ge 2 ] && all[lfs]="${all[lfs]:-} $tl" && cpus[lfs]="${cpus[lfs]:-} $tc" &&
      durable[lfs]="${durable[lfs]:-} $(awk -v a="$tl" -v b="$tsync" 'BEGIN{printf "%.2f", a+b}')"
    printf '%4d |%s %8s | %s\n' "$g" "$row" "$tl" "$(cut -d' ' -f1 /proc/loadavg)"
  done
  local ml ms
  ml=$(median <<<"${all[lfs]}")
  for st in $STORES; do
    ms=$(median <<<"${all[$st]}")
    echo "median over gens 2..$GENS: snapd ($st) request->pushed $ms s, git-lfs commit+push $ml s: $(awk -v a="$ms" -v b="$ml" 'BEGIN{printf "%.2f", a/b}')x"
    echo "  daemon ($st) stages of gen $GENS: $(stages "$d/$st" "$GENS")"
  done
  ml=$(median <<<"${durable[lfs]}")
  for st in $STORES; do
    ms=$(median <<<"${durable[$st]}")
    echo "durable, median over gens 2..$GENS (each window followed by a timed sync): snapd ($st) $ms s, git-lfs $ml s: $(awk -v a="$ms" -v b="$ml" 'BEGIN{printf "%.2f", a/b}')x"
  done
  printf 'CPU seconds per generation, median over gens 2..%s (during the timed window; the registry layout: daemon + registry):' "$GENS"
  for st in $STORES; do printf ' snapd (%s) %s,' "$st" "$(median <<<"${cpus[$st]}")"; done
  echo " git-lfs $(median <<<"${cpus[lfs]}")"
  stop_daemon
  [ "${KEEP:-0}" = 1 ] || rm -rf "$d" # keep the disk use bounded for the next size
}

for size in $SIZES; do
  if [ "$size" -ge 1073741824 ]; then run_size "$size" "${BIG_GENS:-4}"; else run_size "$size" "$GENS"; fi
done

if [ "${TRAINER:-1}" != 0 ]; then
  echo
  echo "trainer step (PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null), $(nproc) cores), daemon at nice 10 (scheduling ${TRAINER_SCHED:-idle}), store ${TRAINER_STORE:-git}:"
  d=$W/trainer
  mkdir -p "$d"
  if [ "${TRAINER_STORE:-git}" = oci ]; then start_registry "$d/registry"; start_daemon "$d" 10 "$REG_ADDR"; else start_daemon "$d" 10; fi
  "$PYTHON" "$ROOT/scripts/densebench/trainer.py" --state-dir "$d/state" --snapd "$W/snapd" \
    --rounds "${ROUNDS:-3}" --steps "${STEPS:-30}" --every "${EVERY:-5}"
  echo "daemon stages of the last generation: $(grep 'msg="stage finished"' "$d/daemon.log" | tail -8 | sed -E 's/.*stage=([a-z]+) gen=([0-9]+) .*duration=([^ ]+).*/\1(\2) \3/' | paste -sd, -)"
  stop_daemon
fi
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
