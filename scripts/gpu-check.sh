#!/usr/bin/env bash
# gpu-check.sh: gpumeter on a real GPU, checked against nvidia-smi and
# pynvml. For a machine with one NVIDIA GPU, python3 with PyTorch (CUDA)
# and nvidia-ml-py; it needs neither Docker nor a network. See
# docs/real-gpu.md for what it saves and how to read it.
#
#   scripts/gpu-check-build.sh               # here: bin/gpumeter (cgo, amd64, stripped)
#   scripts/gpu-check.sh [BINARY] [OUTDIR]   # there: BINARY defaults to bin/gpumeter,
#                                            # OUTDIR to $OUT, else gpu-check-out/<time>
#
# What it does, all bounded (about 90 s of load, at most ~5 min in all):
#   1. saves fixtures for the doctor: /proc/driver/nvidia/version,
#      ls -l /dev/nvidia*, nvidia-smi -q (text and XML), /proc/driver/nvidia
#   2. starts `gpumeter serve --source nvml --docker-enabled=false` on
#      127.0.0.1 (a free port) with a temporary data dir and API socket
#   3. starts nvidia-smi pmon (per process) and dmon (per device), a pynvml
#      reader and a poller of gpumeter's /api/v1/gpus and /metrics
#   4. runs three PyTorch loads: p90 (matmul, 90 % duty), p30 (30 % duty)
#      and hold (GPU memory only), on one schedule after a common epoch:
#        baseline  [0, B)        all idle (their CUDA contexts alive)
#        A         [B, B+P)      p90 alone
#        B         [B+P, B+2P)   p30 alone
#        C         [B+2P, B+3P)  p90 and p30 together
#      (B = 10 s, P = 30 s), with snapshots of `gpumeter ps --format json`
#      and nvidia-smi --query-compute-apps in the middle of each phase
#   5. stops everything, runs scripts/gpucheck/compare.py: comparison.json
#      and summary.txt
#
# A missing tool or a failing step is recorded in steps.tsv and the run
# goes on; every external command runs under timeout, and an EXIT trap
# ends every process the script started. Exit status: 0 when the loads
# ran, 2 when there is no NVIDIA GPU here, 3 when the deadline or a signal
# stopped it, 1 when the loads could not run.
#
# When OUTDIR is $OUT (a remote runner that brings back only a few
# files), the run goes to a folder in /tmp and OUTDIR gets summary.txt,
# comparison.json, steps.tsv, gpu-check.log and gpu-check.tar.gz.
#
# Knobs (environment): PYTHON (python3), GPUCHECK_PHASE_S (30),
# GPUCHECK_BASELINE_S (10), GPUCHECK_HOLD_MIB (2048), GPUCHECK_DEADLINE_S
# (275, when the watchdog stops the run), GPUCHECK_PACK (auto, 1, 0),
# GPUCHECK_SERVE_FLAGS
# ("--source nvml"; a dry run without a GPU may give "--demo").

set -u -o pipefail

script_dir=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$script_dir")
py_dir=$script_dir/gpucheck

BIN=${1:-$repo/bin/gpumeter}
OUTDIR=${2:-${OUT:-$repo/gpu-check-out/$(date -u +%Y%m%dT%H%M%SZ)}}
PY=${PYTHON:-python3}
PHASE_S=${GPUCHECK_PHASE_S:-30}
BASE_S=${GPUCHECK_BASELINE_S:-10}
HOLD_MIB=${GPUCHECK_HOLD_MIB:-2048}
DEADLINE_S=${GPUCHECK_DEADLINE_S:-275}
read -r -a SERVE_FLAGS <<<"${GPUCHECK_SERVE_FLAGS:---source nvml}"
TAIL_S=8
READY_S=60
MARGIN_S=3

case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
mkdir -p "$OUTDIR" || { echo "gpu-check: cannot create $OUTDIR" >&2; exit 1; }
OUTDIR=$(cd "$OUTDIR" && pwd)
# A remote runner may bring back only a few files from $OUT: there the run is
# written to a folder in /tmp and $OUT gets the summary, the comparison,
# the steps, the log and one tarball of everything (GPUCHECK_PACK=1/0
# forces either way).
DEST=$OUTDIR
PACK=${GPUCHECK_PACK:-auto}
if [ "$PACK" = auto ]; then
  PACK=0
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ "$(cd "$OUT" && pwd)" = "$OUTDIR" ]; then PACK=1; fi
fi
[ "$PACK" = 1 ] && OUTDIR=$(mktemp -d /tmp/gpucheck-run.XXXXXX)
mkdir -p "$OUTDIR"/{fixtures,gpumeter,nvidia-smi,nvml,loads,snapshots}

T0=$(date +%s)
CHILDREN=()
DATA_DIR=""
WATCHDOG=""
STOPPED=""
COMPARED=""
STOP_FILE=$OUTDIR/.stop
rm -f "$STOP_FILE"
printf 'step\trc\tseconds\tnote\n' >"$OUTDIR/steps.tsv"

if command -v setsid >/dev/null 2>&1; then SETSID=(setsid); else SETSID=(); fi

log() {
  local line
  line=$(printf '%s +%ss %s' "$(date -u +%H:%M:%S)" "$(( $(date +%s) - T0 ))" "$*")
  printf '%s\n' "$line" >>"$OUTDIR/gpu-check.log"
  printf '%s\n' "$line" >&2 2>/dev/null || true
}

record() { # NAME RC SECONDS NOTE
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$OUTDIR/steps.tsv"
}

# nap sleeps in the background and waits, so that a signal's trap runs at
# once instead of after the sleep.
NAP_PID=""
nap() {
  sleep "$1" &
  NAP_PID=$!
  wait "$NAP_PID"
  NAP_PID=""
}

# step NAME TIMEOUT OUTFILE CMD...: runs CMD under timeout, stdout to
# OUTFILE and stderr to OUTFILE.err (removed when empty), and records it.
step() {
  local name=$1 limit=$2 out=$3
  shift 3
  if ! command -v "$1" >/dev/null 2>&1; then
    record "$name" missing 0 "$1 not found"
    echo "$1 not found" >"$out.err"
    return 127
  fi
  local s rc
  s=$(date +%s)
  timeout --kill-after=3 "$limit" "$@" >"$out" 2>"$out.err"
  rc=$?
  [ -s "$out.err" ] || rm -f "$out.err"
  local note=""
  [ "$rc" = 124 ] && note="timed out after ${limit}s"
  record "$name" "$rc" "$(( $(date +%s) - s ))" "$note"
  return "$rc"
}

# bg NAME LIMIT LOG CMD...: starts CMD in its own process group under
# timeout with stdout and stderr to LOG, remembers it for cleanup, and
# sets BG_PID.
BG_PID=""
bg() {
  local name=$1 limit=$2 out=$3
  shift 3
  BG_PID=""
  if ! command -v "$1" >/dev/null 2>&1; then
    record "$name" missing 0 "$1 not found"
    echo "$1 not found" >"$out"
    return 127
  fi
  "${SETSID[@]}" timeout --kill-after=3 "$limit" "$@" >"$out" 2>&1 </dev/null &
  BG_PID=$!
  CHILDREN+=("$BG_PID")
  printf '%s\t%s\n' "$name" "$BG_PID" >>"$OUTDIR/children.tsv"
  record "$name" started 0 "pid $BG_PID, at most ${limit}s"
}

# stop_children PID...: TERM to each one's process group, then KILL what
# is left after WAIT_S seconds (default 5).
stop_children() {
  local pid alive
  for pid in "$@"; do
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  done
  for _ in $(seq 1 $(( ${WAIT_S:-5} * 5 ))); do
    alive=""
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ -z "$alive" ] && break
    sleep 0.2
  done
  for pid in "$@"; do
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  return 0
}

run_compare() {
  [ -n "$COMPARED" ] && return 0
  COMPARED=1
  step compare 60 "$OUTDIR/compare.out" "$PY" "$py_dir/compare.py" "$OUTDIR"
}

# pack puts the few files such a runner brings back into DEST: one
# tarball of the whole run (less the ledger and the raw scrapes when it
# would pass 15 MiB) and the files read first.
# shellcheck disable=SC2317 # run by cleanup
pack() {
  local tarball=$DEST/gpu-check.tar.gz f
  timeout 60 tar -czf "$tarball" -C "$OUTDIR" . 2>/dev/null
  if [ "$(stat -c %s "$tarball" 2>/dev/null || echo 0)" -gt $(( 15 * 1024 * 1024 )) ]; then
    timeout 60 tar -czf "$tarball" --exclude='./gpumeter/ledger.db*' --exclude='./gpumeter/metrics' -C "$OUTDIR" . 2>/dev/null
  fi
  for f in summary.txt comparison.json steps.tsv gpu-check.log; do
    [ -f "$OUTDIR/$f" ] && cp "$OUTDIR/$f" "$DEST/$f"
  done
  rm -rf "$OUTDIR"
}

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  local rc=$?
  trap '' TERM INT HUP
  [ -n "$STOPPED" ] && rc=3
  touch "$STOP_FILE"
  [ -n "$NAP_PID" ] && kill "$NAP_PID" 2>/dev/null
  [ "${#CHILDREN[@]}" -gt 0 ] && stop_children "${CHILDREN[@]}"
  [ -n "$WATCHDOG" ] && WAIT_S=1 stop_children "$WATCHDOG"
  if [ -n "$DATA_DIR" ] && [ -d "$DATA_DIR" ]; then
    cp -p "$DATA_DIR"/ledger.db* "$OUTDIR/gpumeter/" 2>/dev/null
    rm -rf "$DATA_DIR"
  fi
  run_compare
  rm -f "$STOP_FILE"
  if [ "$PACK" = 1 ]; then
    log "done in $(( $(date +%s) - T0 ))s, exit $rc; packing into $DEST"
    pack
  else
    log "done in $(( $(date +%s) - T0 ))s, exit $rc; summary: $OUTDIR/summary.txt"
  fi
  exit "$rc"
}

# shellcheck disable=SC2317 # run by the signal traps
on_signal() {
  STOPPED=1
  log "stopped by $1"
  exit 3
}

trap cleanup EXIT
trap 'on_signal "SIGTERM (the deadline, or the caller)"' TERM
trap 'on_signal SIGINT' INT
trap 'on_signal SIGHUP' HUP
# A caller that stops reading our stderr must not end the run before the
# cleanup: everything is in OUTDIR anyway.
trap '' PIPE

# The watchdog: the whole run stays inside DEADLINE_S plus cleanup.
# shellcheck disable=SC2016 # expanded by the watchdog's shell
"${SETSID[@]}" bash -c 'sleep "$1"; kill -TERM "$2"' _ "$DEADLINE_S" "$$" </dev/null >/dev/null 2>&1 &
WATCHDOG=$!

now_ms() { date +%s%3N; }

# until_epoch SECONDS: waits until EPOCH + SECONDS.
until_epoch() {
  local target_ms left_ms
  target_ms=$(awk -v e="$EPOCH" -v s="$1" 'BEGIN { printf "%.0f", (e + s) * 1000 }')
  left_ms=$(( target_ms - $(now_ms) ))
  [ "$left_ms" -gt 0 ] && nap "$(awk -v m="$left_ms" 'BEGIN { printf "%.3f", m / 1000 }')"
  return 0
}

log "gpu-check: binary $BIN, output $OUTDIR, deadline ${DEADLINE_S}s"

# ---- 1. the host and the fixtures for the doctor ----

{
  echo "date: $(date -u +%FT%TZ)"
  echo "uname: $(uname -a)"
  echo "id: $(id)"
  echo "glibc: $(ldd --version 2>&1 | head -1)"
  echo "nproc: $(nproc 2>/dev/null)"
  echo "python: $(command -v "$PY") $("$PY" --version 2>&1)"
  echo "in a container: $([ -f /.dockerenv ] && echo docker; grep -qa container= /proc/1/environ 2>/dev/null && echo yes)"
  echo "pid namespace: $(readlink /proc/self/ns/pid 2>/dev/null)"
  echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>} NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-<unset>}"
} >"$OUTDIR/env.txt" 2>&1

step proc-driver-version 5 "$OUTDIR/fixtures/proc-driver-nvidia-version.txt" cat /proc/driver/nvidia/version
# shellcheck disable=SC2016 # the glob is expanded by the inner shell
step ls-dev-nvidia 5 "$OUTDIR/fixtures/ls-dev-nvidia.txt" bash -c 'ls -l /dev/nvidia*'
step ls-proc-driver-nvidia 5 "$OUTDIR/fixtures/ls-proc-driver-nvidia.txt" ls -lR /proc/driver/nvidia
if [ -d /proc/driver/nvidia ]; then
  # A copy of the files as a tree, for an fs.FS rooted test of the doctor.
  # shellcheck disable=SC2016
  step copy-proc-driver-nvidia 10 "$OUTDIR/fixtures/copy-proc.log" bash -c '
    dst=$1/fixtures/root
    for f in /proc/driver/nvidia/version /proc/driver/nvidia/params /proc/driver/nvidia/registry \
             /proc/driver/nvidia/gpus/*/information /sys/module/nvidia/version; do
      [ -r "$f" ] || continue
      mkdir -p "$dst$(dirname "$f")" && timeout 2 cat "$f" >"$dst$f" && echo "$f"
    done' _ "$OUTDIR"
fi

SMI_OK=""
if step nvidia-smi-L 15 "$OUTDIR/fixtures/nvidia-smi-L.txt" nvidia-smi -L; then
  SMI_OK=1
  step nvidia-smi 15 "$OUTDIR/fixtures/nvidia-smi.txt" nvidia-smi
  step nvidia-smi-q 30 "$OUTDIR/fixtures/nvidia-smi-q.txt" nvidia-smi -q
  step nvidia-smi-q-x 30 "$OUTDIR/fixtures/nvidia-smi-q.xml" nvidia-smi -q -x
fi

if [ -z "$SMI_OK" ] && [ ! -e /dev/nvidia0 ] && [ ! -r /proc/driver/nvidia/version ]; then
  log "no NVIDIA GPU here: no working nvidia-smi, no /dev/nvidia0, no /proc/driver/nvidia/version"
  NO_GPU=1
else
  NO_GPU=""
fi

# ---- 2. gpumeter serve ----

# find_nvml prints where libnvidia-ml.so.1 is, if anywhere usual.
find_nvml() {
  local p
  for p in $(ldconfig -p 2>/dev/null | awk '/libnvidia-ml\.so\.1 / { print $NF }') \
           /usr/local/nvidia/lib64/libnvidia-ml.so.1 /usr/local/nvidia/lib/libnvidia-ml.so.1 \
           /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 /usr/lib64/libnvidia-ml.so.1 /usr/lib/wsl/lib/libnvidia-ml.so.1; do
    [ -e "$p" ] && { echo "$p"; return 0; }
  done
  return 0
}

# start_serve LOG [FLAGS...]: starts serve and waits until it prints its
# address and its socket exists; sets GM_OK, URL, SERVE_PID.
start_serve() {
  local slog=$1
  shift
  bg serve 280 "$slog" "$BIN" serve -c "$DATA_DIR/empty.yaml" "${SERVE_FLAGS[@]}" \
    --docker-enabled=false --listen 127.0.0.1:0 --data-dir "$DATA_DIR" --api-socket "$SOCK" \
    --hostname gpucheck --interval 1s --log-level debug "$@"
  SERVE_PID=$BG_PID
  URL=""
  for _ in $(seq 1 100); do
    URL=$(sed -n 's/^gpumeter: serving on \(http[^ ]*\).*/\1/p' "$slog" 2>/dev/null | head -1)
    [ -n "$URL" ] && [ -S "$SOCK" ] && break
    kill -0 "$SERVE_PID" 2>/dev/null || break
    nap 0.2
  done
  if [ -n "$URL" ] && [ -S "$SOCK" ]; then
    GM_OK=1
    log "gpumeter serving on $URL, socket $SOCK"
    step healthz 5 "$OUTDIR/gpumeter/healthz.txt" curl -sS "$URL/healthz"
  else
    URL=""
    wait "$SERVE_PID" 2>/dev/null
    log "gpumeter serve did not start (exit $?): $(tail -3 "$slog" 2>/dev/null | tr '\n' ' ')"
    record serve-start failed 0 "see gpumeter/$(basename "$slog")"
  fi
}

GM_OK=""
step gpumeter-version 10 "$OUTDIR/gpumeter/version.txt" "$BIN" version
if [ -x "$BIN" ]; then
  DATA_DIR=$(mktemp -d /tmp/gpucheck.XXXXXX)
  : >"$DATA_DIR/empty.yaml"
  SOCK=$DATA_DIR/api.sock
  # No config but this empty one, and no GPUMETER_* from the caller.
  while IFS='=' read -r name _; do
    case $name in GPUMETER_*) unset "$name" ;; esac
  done < <(env)
  start_serve "$OUTDIR/gpumeter/serve.log"
  if [ -z "$GM_OK" ] && [ -z "$NO_GPU" ] && grep -q 'no NVIDIA driver found' "$OUTDIR/gpumeter/serve.log" 2>/dev/null; then
    # The driver's library may sit outside the loader's path (a container
    # with the driver mounted at /usr/local/nvidia): name it.
    lib=$(find_nvml)
    if [ -n "$lib" ]; then
      log "retrying serve with --nvml-library $lib"
      start_serve "$OUTDIR/gpumeter/serve-retry.log" --nvml-library "$lib"
    fi
  fi
else
  log "no gpumeter binary at $BIN (build it with scripts/gpu-check-build.sh); going on without it"
  record gpumeter-binary missing 0 "$BIN"
fi

if [ -n "$NO_GPU" ]; then
  log "nothing to measure without a GPU; writing what there is"
  exit 2
fi

# ---- 3. the monitors ----

LOAD_END_S=$(( BASE_S + 3 * PHASE_S ))
MON_S=$(( READY_S + LOAD_END_S + TAIL_S + 15 ))
if [ -n "$SMI_OK" ]; then
  bg pmon "$MON_S" "$OUTDIR/nvidia-smi/pmon.txt" env TZ=UTC nvidia-smi pmon -s um -d 1 -o DT -c "$MON_S"
  bg dmon "$MON_S" "$OUTDIR/nvidia-smi/dmon.txt" env TZ=UTC nvidia-smi dmon -s pucm -d 1 -o DT -c "$MON_S"
fi
bg pynvml "$(( MON_S + 5 ))" "$OUTDIR/nvml/reader.log" "$PY" "$py_dir/nvml_read.py" \
  --out "$OUTDIR/nvml" --duration "$MON_S" --stop-file "$STOP_FILE"
if [ -n "$GM_OK" ]; then
  bg gm-poll "$(( MON_S + 5 ))" "$OUTDIR/gpumeter/poll.log" "$PY" "$py_dir/gm_poll.py" \
    --socket "$SOCK" --metrics-url "$URL/metrics" --out "$OUTDIR/gpumeter" --duration "$MON_S" --stop-file "$STOP_FILE"
fi

# ---- 4. the loads ----

A0=$BASE_S
B0=$(( BASE_S + PHASE_S ))
C0=$(( BASE_S + 2 * PHASE_S ))
EPOCH_FILE=$OUTDIR/loads/epoch
rm -f "$EPOCH_FILE"
# LOAD_PID is each load's timeout wrapper (what cleanup stops); PY_PID the
# python process under it, as its ready line gives it (what NVML lists).
declare -A LOAD_PID=() PY_PID=()
start_load() { # ROLE ARGS...
  local role=$1
  shift
  bg "load-$role" "$(( READY_S + LOAD_END_S + 20 ))" "$OUTDIR/loads/$role.out" "$PY" "$py_dir/load.py" \
    --role "$role" --end "$LOAD_END_S" --epoch-file "$EPOCH_FILE" --ready-timeout "$(( READY_S + 10 ))" \
    --log "$OUTDIR/loads/$role.jsonl" "$@"
  LOAD_PID[$role]=$BG_PID
}
start_load p90 --mode duty --duty 0.9 --windows "$A0:$B0,$C0:$LOAD_END_S" --extra-mib 256
start_load p30 --mode duty --duty 0.3 --windows "$B0:$C0,$C0:$LOAD_END_S" --extra-mib 768
start_load hold --mode hold --extra-mib "$HOLD_MIB"

ready_wait_start=$(date +%s)
READY=()
while :; do
  READY=()
  pending=0
  for role in p90 p30 hold; do
    if grep -q '"event": "ready"' "$OUTDIR/loads/$role.jsonl" 2>/dev/null; then
      READY+=("$role")
      PY_PID[$role]=$(grep '"event": "ready"' "$OUTDIR/loads/$role.jsonl" | grep -o '"pid": [0-9]*' | grep -o '[0-9]*$' | head -1)
    elif [ -n "${LOAD_PID[$role]:-}" ] && kill -0 "${LOAD_PID[$role]}" 2>/dev/null; then
      pending=$(( pending + 1 ))
    fi
  done
  [ "$pending" = 0 ] && break
  [ $(( $(date +%s) - ready_wait_start )) -ge "$READY_S" ] && break
  nap 0.2
done
record loads-ready "${#READY[@]}" "$(( $(date +%s) - ready_wait_start ))" "ready: ${READY[*]:-none}"
for role in p90 p30 hold; do
  case " ${READY[*]:-} " in *" $role "*) ;; *)
    log "load $role not ready: $(tail -2 "$OUTDIR/loads/$role.out" 2>/dev/null | tr '\n' ' ')" ;;
  esac
done
# Without any load, the GPU is still read idle for a while: the idle
# power, the energy counter and the NOT_SUPPORTED answers are worth having.
IDLE_ONLY=""
if [ "${#READY[@]}" = 0 ]; then
  log "no load became ready (torch with CUDA missing?); see loads/*.out; measuring the idle GPU for 20s instead"
  IDLE_ONLY=1
  LOAD_END_S=20
  phases_json='{"name": "idle (no load ran)", "start": 0, "end": 20}'
else
  phases_json="{\"name\": \"baseline (all idle)\", \"start\": 0, \"end\": $A0},
    {\"name\": \"A: p90 alone\", \"start\": $A0, \"end\": $B0},
    {\"name\": \"B: p30 alone\", \"start\": $B0, \"end\": $C0},
    {\"name\": \"C: p90 and p30\", \"start\": $C0, \"end\": $LOAD_END_S}"
fi
roles_json=""
add_role() { # ROLE JSON-FIELDS: only the loads that became ready
  case " ${READY[*]:-} " in *" $1 "*) ;; *) return 0 ;; esac
  roles_json+="${roles_json:+,}
    \"$1\": {\"pid\": ${PY_PID[$1]:-null}, \"wrapper_pid\": ${LOAD_PID[$1]:-null}, $2}"
}
add_role p90 "\"mode\": \"duty\", \"duty\": 0.9, \"windows\": [[$A0, $B0], [$C0, $LOAD_END_S]], \"extra_mib\": 256"
add_role p30 "\"mode\": \"duty\", \"duty\": 0.3, \"windows\": [[$B0, $C0], [$C0, $LOAD_END_S]], \"extra_mib\": 768"
add_role hold "\"mode\": \"hold\", \"duty\": 0, \"windows\": [], \"extra_mib\": $HOLD_MIB"

EPOCH=$(awk -v ms="$(( $(now_ms) + 1000 ))" 'BEGIN { printf "%.3f", ms / 1000 }')
cat >"$OUTDIR/run.json" <<EOF
{
  "epoch": $EPOCH,
  "margin_s": $MARGIN_S,
  "load_end_s": $LOAD_END_S,
  "tail_s": $TAIL_S,
  "gpumeter_url": "${URL:-}",
  "phases": [
    $phases_json
  ],
  "roles": {$roles_json
  },
  "ready": "${READY[*]:-}"
}
EOF
echo "$EPOCH" >"$EPOCH_FILE.tmp" && mv "$EPOCH_FILE.tmp" "$EPOCH_FILE"
if [ -n "$IDLE_ONLY" ]; then
  log "epoch $EPOCH: ${LOAD_END_S}s of the idle GPU"
else
  log "epoch $EPOCH: baseline ${BASE_S}s, then three phases of ${PHASE_S}s (loads ready: ${READY[*]})"
fi

# snapshot LABEL: gpumeter ps, nvidia-smi's process list and whether its
# PIDs are in /proc, at one moment.
snapshot() {
  local label=$1 d=$OUTDIR/snapshots
  if [ -n "$GM_OK" ]; then
    step "ps-$label" 10 "$d/ps-$label.json" "$BIN" ps --url "unix://$SOCK" --format json
    step "ps-table-$label" 10 "$d/ps-table-$label.txt" "$BIN" ps --url "unix://$SOCK"
  fi
  if [ -n "$SMI_OK" ]; then
    local apps=$OUTDIR/nvidia-smi/compute-apps-$label.csv pid
    # Drivers that do not know a field refuse the whole query: then ask
    # for the fields every driver has.
    step "compute-apps-$label" 10 "$apps" \
      nvidia-smi --query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory --format=csv,nounits ||
      step "compute-apps-$label-plain" 10 "$apps" \
        nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,nounits
    # shellcheck disable=SC2013 # one PID a line, no spaces
    for pid in $(awk -F', *' 'NR == 1 { for (i = 1; i <= NF; i++) if ($i ~ /^pid/) c = i; next }
                              c && $c ~ /^[0-9]+$/ { print $c }' "$apps" 2>/dev/null); do
      if [ -d "/proc/$pid" ]; then
        printf '%s\tyes\t%s\n' "$pid" "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | head -c 200)"
      else
        printf '%s\tno\t\n' "$pid"
      fi
    done >"$d/proc-check-$label.txt"
  fi
}

if [ -n "$IDLE_ONLY" ]; then
  until_epoch 10;                         snapshot idle
else
  until_epoch $(( BASE_S / 2 ));          snapshot baseline
  until_epoch $(( A0 + PHASE_S / 2 ));    snapshot A
  until_epoch $(( B0 + PHASE_S / 2 ));    snapshot B
  until_epoch $(( C0 + PHASE_S / 2 ));    snapshot C
  until_epoch $(( LOAD_END_S + 3 ));      snapshot after
fi
until_epoch $(( LOAD_END_S + TAIL_S ))

# ---- 5. stop, report, compare ----

touch "$STOP_FILE"
for role in p90 p30 hold; do
  [ -n "${LOAD_PID[$role]:-}" ] || continue
  wait "${LOAD_PID[$role]}" 2>/dev/null
  record "load-$role-exit" "$?" 0
done
nap 2
if [ -n "$GM_OK" ]; then
  step metrics-final 5 "$OUTDIR/gpumeter/metrics-final.txt" curl -sS "$URL/metrics"
  step gpus-final 5 "$OUTDIR/gpumeter/gpus-final.json" curl -sS --unix-socket "$SOCK" http://localhost/api/v1/gpus
  stop_children "$SERVE_PID"
  step report-user 20 "$OUTDIR/gpumeter/report-user.json" "$BIN" report -c "$DATA_DIR/empty.yaml" \
    --db "$DATA_DIR/ledger.db" --by user --since 1h --format json
fi
stop_children "${CHILDREN[@]}"
run_compare
[ -n "$IDLE_ONLY" ] && exit 1
exit 0
