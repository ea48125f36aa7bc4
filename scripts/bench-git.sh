#!/usr/bin/env bash
# bench-git.sh: the Git path at real sizes, snapd beside its peers, in one run.
#
#   scripts/bench-git.sh [SIZE_BYTES] [GENS] [PATTERN] [CHANGE_PERCENT]
#   (defaults: 52428800 10 clustered 1; e.g. `scripts/bench-git.sh 52428800 10 uniform 2`)
#
# Generation g of a synthetic model (scripts/benchgen: 4 f32 matrices,
# rows changing cumulatively) is written as safetensors, then
#   snapd     the daemon (`snapd run`, file:// bare remote) gets a request;
#             time = request -> the generation's tag is on the remote
#   git-lfs   the file committed with git-lfs (file:// remote, standalone
#             transfer agent) and pushed; time = add + commit + push
#   git       the file committed with plain git and pushed
# Reported per generation: time, remote size; at the end: daemon peak RSS
# (VmHWM) and CPU (its own and its git children's), the CPU of a plain
# `snapd convert` of the same generations (the conversion's share), clone
# of the latest generation (snapd: --depth 1 --single-branch + assemble;
# lfs: git clone, which fetches the latest object only).
# Work dir: $BENCH_DIR (default a temp dir, removed at the end).
# LAYOUT sets git.layout (default auto = segments above git.split_above, 64 MiB; segments = text
# pieces + raw segments); PART_LIMIT sets git.part_limit (default 256 KiB); PEERS=0 skips git-lfs and git, PEERS=lfs runs git-lfs only; PACK_WINDOW=N sets pack.window in the
# daemon's repository (snapd sets 0) to measure git's delta search on push.
# KEEP=1 keeps the work dir (remotes, clones) for inspection.
# CPUPROFILE=FILE writes the daemon's Go CPU profile there when it stops
# (`go tool pprof -top FILE`; git children are not in it).
set -euo pipefail
SIZE=${1:-52428800}; GENS=${2:-10}; PATTERN=${3:-clustered}; CHANGE=${4:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/bench-git.XXXXXX")
DAEMON=
cleanup() { [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null; wait 2>/dev/null; if [ "${KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi; }
trap cleanup EXIT
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=$W/gitconfig
git config --file "$W/gitconfig" user.name bench
git config --file "$W/gitconfig" user.email bench@localhost
git config --file "$W/gitconfig" init.defaultBranch main
git lfs install --skip-repo >/dev/null   # the smudge filter, so a clone gets the file, not its pointer
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$W/snapd" ./cmd/snapd && CGO_ENABLED=0 go build -trimpath -o "$W/benchgen" ./scripts/benchgen)
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }
du_b() { du -sb "$1" | cut -f1; }
mib() { awk -v n="$1" 'BEGIN{printf "%.1f", n/1048576}'; }
cpu_of() { awk '{print ($14+$15)/100, ($16+$17)/100}' "/proc/$1/stat"; }   # self, reaped children (s)

echo "bench-git: size=$SIZE gens=$GENS pattern=$PATTERN change=$CHANGE% on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg); git $(git --version | cut -d' ' -f3), $(git lfs version | cut -d' ' -f1)"

# --- snapd daemon -----------------------------------------------------------
git init -q --bare "$W/snapd-remote.git"
mkdir -p "$W/state/gens"
cat > "$W/snapd.yaml" <<YAML
state_dir: $W/state
log: {level: warn}
git:
  remote: file://$W/snapd-remote.git
  part_limit: ${PART_LIMIT:-262144}
  layout: ${LAYOUT:-auto}
metrics:
  addr: "off"
YAML
"$W/snapd" run --config "$W/snapd.yaml" ${CPUPROFILE:+--cpuprofile "$CPUPROFILE"} 2>"$W/daemon.log" &
DAEMON=$!
if [ -n "${PACK_WINDOW:-}" ]; then
  until [ -f "$W/state/repo/config" ]; do sleep 0.05; done
  sleep 0.5; git --git-dir "$W/state/repo" config pack.window "$PACK_WINDOW"
fi
PEERS=${PEERS:-1}
# --- git-lfs and plain git --------------------------------------------------
for kind in lfs git; do
  git init -q --bare "$W/$kind-remote.git"
  git init -q "$W/$kind"
  git -C "$W/$kind" remote add origin "file://$W/$kind-remote.git"
done
git -C "$W/lfs" lfs install --local >/dev/null
git -C "$W/lfs" config lfs.standalonetransferagent lfs-standalone-file
git -C "$W/lfs" lfs track '*.safetensors' >/dev/null
git -C "$W/lfs" add .gitattributes && git -C "$W/lfs" commit -qm attrs

printf '%4s %10s | %9s %9s %10s | %9s %10s | %9s %10s\n' gen changed_B snapd_s snapd_cpu snapd_MiB lfs_s lfs_MiB git_s git_MiB
sum_changed=0
for g in $(seq 1 "$GENS"); do
  src="$W/state/gens/gen-$(printf %06d "$g").safetensors"
  "$W/benchgen" -size "$SIZE" -pattern "$PATTERN" -change "$CHANGE" -gen "$g" "$src"
  changed=$("$W/benchgen" -size "$SIZE" -pattern "$PATTERN" -change "$CHANGE" -gen "$g" -report)
  [ "$g" -gt 1 ] && sum_changed=$((sum_changed + changed))
  tag=refs/tags/gen-$(printf %06d "$g")
  read -r c_self c_child < <(cpu_of "$DAEMON")
  t0=$(now)
  "$W/snapd" request-snapshot --state-dir "$W/state" --gen "$g" --source "$src" >/dev/null
  until git --git-dir "$W/snapd-remote.git" rev-parse -q --verify "$tag" >/dev/null; do
    kill -0 "$DAEMON" || { echo "daemon died"; cat "$W/daemon.log"; exit 1; }
    sleep 0.05
  done
  ts=$(secs "$t0" "$(now)")
  sleep 0.3 # let the daemon reap its last git child before sampling
  read -r n_self n_child < <(cpu_of "$DAEMON")
  tcpu=$(awk -v a="$c_self" -v b="$c_child" -v c="$n_self" -v d="$n_child" 'BEGIN{printf "%.2f", (c+d)-(a+b)}')
  t_lfs=- t_git=-
  for kind in lfs git; do
    [ "$PEERS" = 1 ] || [ "$PEERS" = "$kind" ] || continue
    t0=$(now)
    cp "$src" "$W/$kind/model.safetensors"
    git -C "$W/$kind" add model.safetensors
    git -C "$W/$kind" commit -qm "gen $g"
    git -C "$W/$kind" push -q origin HEAD:main 2>/dev/null
    eval "t_$kind=$(secs "$t0" "$(now)")"
  done
  lfs_size=$(( $(du_b "$W/lfs-remote.git") ))
  printf '%4d %10d | %9s %9s %10s | %9s %10s | %9s %10s\n' "$g" "$changed" "$ts" "$tcpu" "$(mib "$(du_b "$W/snapd-remote.git")")" \
    "$t_lfs" "$(mib "$lfs_size")" "$t_git" "$(mib "$(du_b "$W/git-remote.git")")"
done
read -r self children < <(cpu_of "$DAEMON")
hwm=$(awk '/VmHWM/{print $2}' "/proc/$DAEMON/status")
kill "$DAEMON"; wait "$DAEMON" || true; DAEMON=
# The conversion's CPU alone: snapd convert of every generation.
conv=0
for g in $(seq 1 "$GENS"); do
  src="$W/state/gens/gen-$(printf %06d "$g").safetensors"
  c=$( { /usr/bin/time -f '%U %S' "$W/snapd" convert "$src" "$W/conv.wtxt" --sign-key "$W/state/keys/sign_ed25519" --hmac-key "$W/state/keys/hmac.key" >/dev/null; } 2>&1 | tail -1 | awk '{print $1+$2}')
  conv=$(awk -v a="$conv" -v b="$c" 'BEGIN{print a+b}')
  echo "convert gen $g: $c s CPU"
done
echo "snapd daemon: peak RSS $(awk -v k="$hwm" 'BEGIN{printf "%.0f", k/1024}') MiB; CPU $self s own + $children s git children over $GENS gens; a plain convert of the same gens: $conv s"
echo "snapd remote growth gens 2..$GENS vs changed raw bytes: $(mib "$sum_changed") MiB changed"
# --- clone of the latest generation (wall s / CPU s of the whole command) ---
# Each clone runs CLONE_RUNS times (default 3; the snapd and git-lfs runs
# alternate) and the median wall time (with that run's CPU) is reported:
# single clone timings on a shared 2-core machine vary by 2x.
timed() { /usr/bin/time -f '%e/%U/%S' "$@" 2>&1 >/dev/null | tail -1 | awk -F/ '{printf "%.2fs/%.2fs", $1, $2+$3}'; }
median() { tr ' ' '\n' | sort -t s -k1,1n | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
RUNS=${CLONE_RUNS:-3}
r_cs= r_cs0= r_cl= r_cg=
for run in $(seq 1 "$RUNS"); do
  rm -rf "$W/c-snapd" "$W/c-snapd0" "$W/c-lfs" "$W/c-git"
  r_cs="$r_cs $(timed "$W/snapd" clone "file://$W/snapd-remote.git" "$W/c-snapd")"
  # The same clone from a server that does no delta search when it packs
  # (pack.window=0, as snapd's own repository has).
  r_cs0="$r_cs0 $(timed git clone -q --depth 1 --single-branch --no-tags --branch snapshots --upload-pack 'git -c pack.window=0 upload-pack' "file://$W/snapd-remote.git" "$W/c-snapd0")"
  if [ "$PEERS" = 1 ] || [ "$PEERS" = lfs ]; then
    r_cl="$r_cl $(timed git clone -q "file://$W/lfs-remote.git" "$W/c-lfs")"
    cmp -s "$W/c-lfs/model.safetensors" "$src" || echo "WARNING: git-lfs clone did not restore the file"
  fi
  if [ "$PEERS" = 1 ] || [ "$PEERS" = git ]; then
    r_cg="$r_cg $(timed git clone -q "file://$W/git-remote.git" "$W/c-git")"
  fi
done
t_cs=$(median <<<"${r_cs# }") t_cs0=$(median <<<"${r_cs0# }")
t_cl=- t_cg=-
[ -n "$r_cl" ] && t_cl=$(median <<<"${r_cl# }")
[ -n "$r_cg" ] && t_cg=$(median <<<"${r_cg# }")
t_ca=$(timed "$W/snapd" checkout latest "$W/latest.wtxt" --repo "$W/c-snapd")
t_cst=$(timed "$W/snapd" checkout latest "$W/latest.safetensors" --repo "$W/c-snapd")
cmp -s "$W/latest.safetensors" "$src" || echo "WARNING: restored safetensors differs from generation $GENS"
echo "clone runs (wall/CPU): snapd${r_cs}; window-0 server${r_cs0}; git-lfs${r_cl:- -}; git${r_cg:- -}"
echo "clone latest (median of $RUNS, wall/CPU): snapd clone $t_cs (server pack.window=0: $t_cs0), + checkout as WTXT $t_ca or as safetensors $t_cst; git-lfs clone $t_cl; git clone $t_cg"
