#!/usr/bin/env bash
# Load figures of the GPU queue through the real binary and the real
# Docker engine (BENCHMARKS.md, "Queue through the binary"): submissions
# per second through POST /api/v1/jobs into SQLite with api.rate_limit 0,
# and release-to-start latency over many releases on a 4-GPU sim host.
# Runs TestQueueLoad of test/e2e/queue, which skips unless
# GPUMETER_LOAD=1, as every load run does; the figures are its lines
# starting FIGURE.
#
#   scripts/queue-load.sh
#
# Environment:
#   SUBMITS=2000     submissions, all waiting behind four running jobs
#   CONCURRENCY=16   clients, each with one submission in flight
#   RELEASES=34      releases measured (RELEASES+4 jobs of 1 s each)
set -euo pipefail
cd "$(dirname "$0")/.."
for v in SUBMITS CONCURRENCY RELEASES; do
  val=${!v:-}
  case $val in '' ) ;; *[!0-9]* | 0) echo "$v=$val: want a whole number above 0" >&2; exit 2 ;; esac
done
export GPUMETER_LOAD=1
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
go test -count=1 -run '^TestQueueLoad$' -v -timeout 15m ./test/e2e/queue 2>&1 |
  tee /dev/stderr | grep -o 'FIGURE .*' || { echo "queue-load: the run failed or gave no figures; see the output above" >&2; exit 1; }
