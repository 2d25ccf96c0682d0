#!/usr/bin/env bash
# The GPU queue beside Slurm on this machine, with the same sleep jobs on
# 4 GPUs (gpumeter: sim GPUs, the sleeper image, the real Docker engine;
# Slurm 22.05: one node with Gres=gpu:4 on placeholder device files), and
# a table of both columns (BENCHMARKS.md, "Queue at depth, beside Slurm", says what each row is):
#   (a) JOBS x DUR s one-GPU jobs: makespan, first start to last end
#   (b) release-to-start gap p50/p99 over those releases
#   (c) DEPTH waiting 1 s jobs from 3 users behind 4 blockers; the
#       blockers are cancelled: starts in the next 60 s, and their gap
#   (d) cancelling the jobs still waiting then (jobs/s)
#   (e) listing the queue at DEPTH waiting (median of 3)
#   (f) CLI submissions, CONC in parallel (jobs/s; sbatch for Slurm), and
#       API submissions (gpumeter only: Slurm's slurmrestd is not set up)
# Opt-in, as every load run: GPUMETER_LOAD=1. Needs root, Docker, and for
# Slurm `apt-get install -y slurm-wlm munge`. Everything it starts (agent,
# job containers, munged, slurmctld, slurmd) lives in a temp dir and is
# stopped and removed on exit.
#
#   GPUMETER_LOAD=1 scripts/queue-depth.sh [both|gpumeter|slurm]
#
# Environment:
#   JOBS=200 DUR=2   part (a) and (b)
#   DEPTH=5000       part (c), (d), (e)
#   CONC=16          parallel CLI submitters
#   WINDOW=60        seconds of part (c) in which starts are counted
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
which=${1:-both}
case $which in both | gpumeter | slurm) ;; *) echo "queue-depth: want both, gpumeter or slurm, not $which" >&2; exit 2 ;; esac
[ "${GPUMETER_LOAD:-}" = 1 ] || { echo "queue-depth: a load run; set GPUMETER_LOAD=1 to run it" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "queue-depth: needs root (the agent's socket, Slurm's daemons)" >&2; exit 2; }
JOBS=${JOBS:-200} DUR=${DUR:-2} DEPTH=${DEPTH:-5000} CONC=${CONC:-16} WINDOW=${WINDOW:-60}
for v in JOBS DUR DEPTH CONC WINDOW; do
  case ${!v} in '' | *[!0-9]* | 0) echo "queue-depth: $v=${!v}: want a whole number above 0" >&2; exit 2 ;; esac
done
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
T=$(mktemp -d /tmp/qdepth.XXXXXX)
chmod 755 "$T"
py="python3 $repo/scripts/queuedepth.py"
declare -A R # figures: R[system.row]
node=depth-$$
agent_pid="" slurm_pids=()
cleanup() {
  set +e
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
  ids=$(docker ps -aq --filter "label=gpumeter.node=$node")
  [ -n "$ids" ] && docker rm -f $ids >/dev/null
  if [ ${#slurm_pids[@]} -gt 0 ]; then
    # Every job ended first, so that slurmd has no step left to wait for;
    # a daemon not gone 10 s after SIGTERM is killed.
    SLURM_CONF=$T/slurm/slurm.conf scancel --quiet --full --user=root 2>/dev/null
    for _ in $(seq 75); do [ -z "$(SLURM_CONF=$T/slurm/slurm.conf squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
    # slurmd, slurmctld, then munged: the reverse of their start.
    for ((i = ${#slurm_pids[@]} - 1; i >= 0; i--)); do
      p=${slurm_pids[i]}
      kill "$p" 2>/dev/null
      for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$p" 2>/dev/null
    done
  fi
  rm -rf "$T"
}
trap cleanup EXIT
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
rate() { python3 -c "import sys; print('%.1f' % (float(sys.argv[1]) / max(float(sys.argv[2]), 1e-9)))" "$1" "$2"; }
median3() { # median of three timings of "$@", in seconds
  local a=() i t0
  for i in 1 2 3; do t0=$(now); "$@" >/dev/null 2>&1; a+=("$(elapsed "$t0" "$(now)")"); done
  printf '%s\n' "${a[@]}" | sort -n | sed -n 2p
}

# ---------------------------------------------------------------- gpumeter
gm_setup() {
  mkdir -p "$T/gm" "$T/gm/data" "$T/gm/mnt"
  chmod 700 "$T/gm/data"
  go build -o "$T/gpumeter" ./cmd/gpumeter
  # The sleeper image of internal/dockertest, built from the same source.
  awk '/^const sleeperSource = `/{f=1; sub(/^const sleeperSource = `/, ""); } f && /^`$/{exit} f' internal/dockertest/container.go >"$T/gm/sleeper.go"
  (cd "$T/gm" && cat >go.mod <<<'module sleeper' && CGO_ENABLED=0 go build -o sleeper sleeper.go)
  printf 'FROM scratch\nCOPY sleeper /sleeper\nENTRYPOINT ["/sleeper"]\n' >"$T/gm/Dockerfile"
  DOCKER_BUILDKIT=0 docker build -q -t gpumeter-depth-sleeper:1 "$T/gm" >/dev/null
  printf 'root:x:0:0::/root:/bin/sh\nalice:x:2001:2001::/:/bin/sh\nbob:x:2002:2002::/:/bin/sh\ncarol:x:2003:2003::/:/bin/sh\ndora:x:2004:2004::/:/bin/sh\n' >"$T/gm/passwd"
  printf 'root:x:0:\nalice:x:2001:\nbob:x:2002:\ncarol:x:2003:\ndora:x:2004:\n' >"$T/gm/group"
  cat >"$T/gm/scenario.yaml" <<'Y'
version: 1
node: depth
duration: 24h
docker:
  containers: from_labels
gpus:
  - count: 4
    model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 100W
    max_power: 500W
Y
  cat >"$T/gm/gpumeter.yaml" <<Y
hostname: $node
log_level: debug
docker:
  enabled: true
host:
  passwd_file: $T/gm/passwd
  group_file: $T/gm/group
api:
  rate_limit: 0
queue:
  enabled: true
  images: ["gpumeter-depth-sleeper:*"]
  gpu_passing: env
  mount_roots: [$T/gm/mnt]
  stop_grace: 1s
  max_gpus_per_user: {default: 8}
Y
  env -u GPUMETER_LOAD GPUMETER_DATA_DIR=$T/gm/data "$T/gpumeter" serve --config "$T/gm/gpumeter.yaml" --sim "$T/gm/scenario.yaml" --interval 1s --listen 127.0.0.1:0 >"$T/gm/agent.log" 2>&1 &
  agent_pid=$!
  for _ in $(seq 600); do
    kill -0 "$agent_pid" 2>/dev/null || break
    [ -S "$T/gm/data/api.sock" ] && gm jobs >/dev/null 2>&1 && return
    sleep 0.2
  done
  echo "queue-depth: the agent did not answer in 2 minutes; its log:" >&2; tail -30 "$T/gm/agent.log" >&2; exit 1
}
gm() { env -u GPUMETER_LOAD GPUMETER_URL=unix://$T/gm/data/api.sock GPUMETER_DATA_DIR=$T/gm/data "$T/gpumeter" "$@"; }
gm_live() { gm jobs --limit 0 --all-users --state queued,starting,running --format json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d if isinstance(d,list) else d.get("jobs",[])))'; }
gm_submit() { gm submit --as "$1" --gpus 1 --time-limit 2h --image gpumeter-depth-sleeper:1 -- "${@:2}"; }
export -f gm gm_submit
export T

gm_run() {
  gm_setup
  echo "gpumeter $(git -C "$repo" rev-parse --short HEAD): (a)+(f) $JOBS x ${DUR}s jobs through the CLI, $CONC in parallel" >&2
  local t0 t1
  t0=$(now)
  seq "$JOBS" | xargs -P "$CONC" -I{} bash -c 'gm_submit alice exit-after '"$DUR"'s 0 >/dev/null'
  t1=$(now)
  R[gm.cli]=$(rate "$JOBS" "$(elapsed "$t0" "$t1")")
  while [ "$(gm_live)" != 0 ]; do sleep 1; done
  gm jobs --limit 0 --all --all-users --format json | $py gm-times "$T/gm/a.times" 0 0 >/dev/null
  read -r R[gm.makespan] R[gm.p50] R[gm.p99] R[gm.n] < <($py figures "$T/gm/a.times" 4)
  grep 'job start trace' "$T/gm/agent.log" >"$T/gm/trace.log" || true

  echo "gpumeter: (c) $DEPTH waiting behind 4 blockers, from 3 users (API, $CONC clients: the API submit rate)" >&2
  local blockers=()
  for _ in 1 2 3 4; do blockers+=("$(gm_submit dora exit-after 3600s 0)"); done
  read -r R[gm.api] _ _ < <($py api-submit "$T/gm/data/api.sock" "$DEPTH" "$CONC" alice,bob,carol 1 gpumeter-depth-sleeper:1 2h)
  local list=(gm jobs --all-users)
  gm jobs --help | grep -q -- '--limit' && list+=(--limit 100)
  R[gm.list]=$(median3 "${list[@]}")
  R[gm.listcmd]="${list[*]:1}"
  t0=$(now)
  gm cancel "${blockers[@]}" >/dev/null
  sleep "$WINDOW"
  t1=$(now)
  gm jobs --limit 0 --all --all-users --format json | $py gm-times "$T/gm/c.times" "$t0" "$t1" >"$T/gm/c.n"
  R[gm.starts60]=$(cat "$T/gm/c.n")
  window_gaps gm "$T/gm/c.times" "$t0"

  echo "gpumeter: (d) cancel what still waits" >&2
  local ids n
  ids=$(gm jobs --limit 0 --all-users --state queued --format json | python3 -c 'import json,sys; d=json.load(sys.stdin); d=d if isinstance(d,list) else d.get("jobs",[]); print(" ".join(j["id"] for j in d))')
  n=$(wc -w <<<"$ids")
  t0=$(now)
  if gm cancel --help | grep -q -- '--all-users'; then
    gm cancel --state queued --all-users >/dev/null
    R[gm.cancelhow]="cancel --state queued --all-users"
    t1=$(now)
    R[gm.cancel]="$n in $(elapsed "$t0" "$t1") s"
  else
    # One call per id: stopped after 60 s, and the cancelled counted.
    timeout 60 bash -c 'gm cancel "$@" >/dev/null 2>&1' _ $ids || true
    t1=$(now)
    local left
    left=$(gm jobs --limit 0 --all-users --state queued --format json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d if isinstance(d,list) else d.get("jobs",[])))')
    R[gm.cancelhow]="cancel ID... (per id; no bulk cancel in this build)"
    R[gm.cancel]="$((n - left)) of $n in $(elapsed "$t0" "$t1") s"
  fi
  kill "$agent_pid"; wait "$agent_pid" 2>/dev/null || true; agent_pid=""
  ids=$(docker ps -aq --filter "label=gpumeter.node=$node"); [ -z "$ids" ] || docker rm -f $ids >/dev/null
}

# ---------------------------------------------------------------- Slurm
sl() { SLURM_CONF=$T/slurm/slurm.conf "$@"; }
sl_setup() {
  command -v slurmctld >/dev/null || { echo "queue-depth: no slurmctld; apt-get install -y slurm-wlm munge" >&2; exit 2; }
  local S=$T/slurm host
  host=$(hostname -s)
  mkdir -p "$S/state" "$S/spool" "$S/dev" "$S/munge"
  chmod 700 "$S/munge"
  for i in 0 1 2 3; do : >"$S/dev/nvidia$i"; done
  dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 2>/dev/null
  chmod 400 "$S/munge/munge.key"
  munged --force --socket="$S/munge/sock" --key-file="$S/munge/munge.key" --pid-file="$S/munge/pid" \
    --log-file="$S/munge/log" --seed-file="$S/munge/seed"
  sleep 0.5
  slurm_pids+=("$(cat "$S/munge/pid")")
  cat >"$S/gres.conf" <<Y
Name=gpu File=$S/dev/nvidia[0-3]
Y
  cat >"$S/slurm.conf" <<Y
ClusterName=depth
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
AuthInfo=socket=$S/munge/sock
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/ctld.pid
SlurmdPidFile=$S/d.pid
SlurmctldLogFile=$S/ctld.log
SlurmdLogFile=$S/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
GresTypes=gpu
MpiDefault=none
ReturnToService=2
MaxJobCount=50000
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
NodeName=$host CPUs=16 RealMemory=1000 Gres=gpu:4 State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
Y
  cp "$S/gres.conf" "$S/gres.conf.bak"
  sl slurmctld -i
  sleep 1
  slurm_pids+=("$(cat "$S/ctld.pid")")
  sl slurmd
  for _ in $(seq 100); do [ -s "$S/d.pid" ] && break; sleep 0.2; done
  slurm_pids+=("$(cat "$S/d.pid")")
  for _ in $(seq 150); do sl sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 0.2; done
  sl sinfo -h -o %t | grep -q idle || { echo "queue-depth: the Slurm node is not idle:" >&2; sl sinfo -R >&2; tail -20 "$S/ctld.log" "$S/d.log" >&2; exit 1; }
  cat >"$S/job.sh" <<Y
#!/bin/sh
s=\$(date +%s.%N); sleep \$1; echo "\$s \$(date +%s.%N)" >>"\$2"
Y
  chmod 755 "$S/job.sh"
}
sl_submit() { sl sbatch -Q -o /dev/null --gres=gpu:1 -n1 -c1 -t 120 "$T/slurm/job.sh" "$@" >/dev/null; }
export -f sl sl_submit

sl_run() {
  sl_setup
  local S=$T/slurm t0 t1
  echo "Slurm $(sl sinfo -V): (a)+(f) $JOBS x ${DUR}s jobs through sbatch, $CONC in parallel" >&2
  t0=$(now)
  seq "$JOBS" | xargs -P "$CONC" -I{} bash -c 'sl_submit '"$DUR"' $T/slurm/a.times'
  t1=$(now)
  R[sl.cli]=$(rate "$JOBS" "$(elapsed "$t0" "$t1")")
  while [ "$(sl squeue -h | wc -l)" != 0 ]; do sleep 1; done
  sleep 1
  read -r R[sl.makespan] R[sl.p50] R[sl.p99] R[sl.n] < <($py figures "$S/a.times" 4)

  echo "Slurm: (c) $DEPTH waiting behind 4 blockers (sbatch, $CONC in parallel)" >&2
  for _ in 1 2 3 4; do sl sbatch -Q -o /dev/null --gres=gpu:1 -n1 -c1 -J blocker --wrap "sleep 3600" >/dev/null; done
  seq "$DEPTH" | xargs -P "$CONC" -I{} bash -c 'sl_submit 1 $T/slurm/c.times'
  R[sl.list]=$(median3 sl squeue)
  t0=$(now)
  sl scancel --name blocker
  sleep "$WINDOW"
  t1=$(now)
  sleep 3 # a job writes its start and end when it ends
  python3 - "$S/c.times" "$t0" "$t1" >"$S/c.win" <<'P'
import sys
lo, hi = float(sys.argv[2]), float(sys.argv[3])
for l in open(sys.argv[1]):
    s, e = map(float, l.split())
    if lo <= s < hi:
        print(l.strip())
P
  R[sl.starts60]=$(wc -l <"$S/c.win")
  window_gaps sl "$S/c.win" "$t0"
  echo "Slurm: (d) scancel what still waits" >&2
  local n
  n=$(sl squeue -h -t PENDING | wc -l)
  t0=$(now)
  sl scancel --state=PENDING
  while [ "$(sl squeue -h -t PENDING | wc -l)" != 0 ]; do sleep 0.1; done
  t1=$(now)
  R[sl.cancel]="$n in $(elapsed "$t0" "$t1") s"
  sl scancel --quiet --full --user=root || true
}

# window_gaps SYS FILE T0: the gaps of part (c)'s starts (FILE: "start
# end" of the jobs started in the window). The four blockers were
# released at T0: four lines "T0 T0" stand for them, so that the first
# four starts take their GPUs.
window_gaps() {
  local f=$2.gaps
  { cat "$2"; for _ in 1 2 3 4; do echo "$3 $3"; done; } >"$f"
  read -r _ R[$1.cp50] R[$1.cp99] _ < <($py figures "$f" 4 2>/dev/null || echo "- - - -")
}

[ "$which" = slurm ] || gm_run
[ "$which" = gpumeter ] || sl_run

row() { printf '| %-52s | %-22s | %-22s |\n' "$1" "$2" "$3"; }
v() { echo "${R[$1]:--}"; }
echo
row "measured ($(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg))" "Slurm" "gpumeter $(git rev-parse --short HEAD)"
row "---" "---" "---"
row "(a) $JOBS x ${DUR}s jobs on 4 GPUs, makespan (s)" "$(v sl.makespan)" "$(v gm.makespan)"
row "(b) release->start gap p50 / p99 (s), n" "$(v sl.p50) / $(v sl.p99), $(v sl.n)" "$(v gm.p50) / $(v gm.p99), $(v gm.n)"
row "(c) $DEPTH waiting: starts in $WINDOW s" "$(v sl.starts60)" "$(v gm.starts60)"
row "(c) $DEPTH waiting: gap p50 / p99 (s)" "$(v sl.cp50) / $(v sl.cp99)" "$(v gm.cp50) / $(v gm.cp99)"
row "(d) cancelling the waiting jobs" "$(v sl.cancel)" "$(v gm.cancel)"
row "(e) listing at depth (s, median of 3)" "$(v sl.list) (squeue)" "$(v gm.list) ($(v gm.listcmd))"
row "(f) CLI submit, $CONC in parallel (jobs/s)" "$(v sl.cli) (sbatch)" "$(v gm.cli)"
row "(f) API submit, $CONC clients (jobs/s)" "-" "$(v gm.api)"
[ -z "${R[gm.cancelhow]:-}" ] || echo "gpumeter cancel: ${R[gm.cancelhow]}"
if [ -s "$T/gm/trace.log" ]; then
  echo "gpumeter start steps over part (a) (ms, p50 / p99):"
  python3 - "$T/gm/trace.log" <<'P'
import re, sys
steps = {}
for l in open(sys.argv[1]):
    for k, v in re.findall(r'(\w+)_ms=([0-9.]+)', l):
        steps.setdefault(k, []).append(float(v))
for k, xs in steps.items():
    xs.sort()
    print("  %-18s %8.1f / %8.1f  (n %d)" % (k, xs[len(xs) // 2], xs[min(len(xs) - 1, len(xs) * 99 // 100)], len(xs)))
P
fi
