#!/usr/bin/env bash
# Runtime figures of the fleet (issue 29) through the real binary and the
# real Docker engine (BENCHMARKS.md, "Fleet runtime"): three agents on one
# throwaway PostgreSQL cluster (internal/ledger/pgtest starts it from
# Debian's binaries), four simulated GPUs each, real job containers of the
# sleeper image. Release on one node to start, leader failover after a
# SIGKILL, submissions through one agent on PostgreSQL against a
# single-node agent on SQLite in the same run, and the scheduler's pass
# time. Runs TestFleetLoad of test/e2e/queue, which skips unless
# GPUMETER_LOAD=1, as every load run does; the figures are its lines
# starting FIGURE, each with the load average when it was taken. About
# two minutes here.
#
#   scripts/fleet-load.sh
#
# Environment:
#   SUBMITS=1000     submissions to each of the two, all waiting
#   CONCURRENCY=16   clients, each with one submission in flight
#   RELEASES=48      one-second jobs beyond the twelve that fill the fleet
#   FAILOVERS=3      kills of the scheduler's agent
#   LOGS=DIR         keep the agents' debug logs there
set -euo pipefail
cd "$(dirname "$0")/.."
for v in SUBMITS CONCURRENCY RELEASES FAILOVERS; do
  val=${!v:-}
  case $val in '' ) ;; *[!0-9]* | 0) echo "$v=$val: want a whole number above 0" >&2; exit 2 ;; esac
done
export GPUMETER_LOAD=1
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
if [ -n "${LOGS:-}" ]; then
  mkdir -p "$LOGS"
  export FLEET_LOAD_LOGS=$(cd "$LOGS" && pwd)
fi
echo "fleet-load: $(uptime | sed 's/.*load/load/')" >&2
go test -count=1 -run '^TestFleetLoad$' -v -timeout 15m ./test/e2e/queue 2>&1 |
  tee /dev/stderr | grep -o 'FIGURE .*' || { echo "fleet-load: the run failed or gave no figures; see the output above" >&2; exit 1; }
echo "fleet-load: done, $(uptime | sed 's/.*load/load/')" >&2
