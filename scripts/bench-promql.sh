#!/usr/bin/env bash
# bench-promql.sh [DAYS...]: gpumeter's ledger beside Prometheus holding the
# same series (issue 27 item 2), for histories of DAYS days (default 7 and
# 30): a scenario from a fixed seed simulated into a ledger, its minutes
# converted to OpenMetrics and backfilled with promtool, Prometheus started
# on the blocks and left to compact; then GPU-hours per user asked of both,
# compared, timed as whole processes and in process, and sized on disk.
# Prints one markdown table (and the per-user differences under it); exits
# non-zero when a step fails or the answers differ beyond Prometheus's known
# extrapolation. Timings are printed, never judged.
#
# Needs prometheus and promtool (2.42 here; Debian's packages) and curl.
# Environment: RUNS (timed runs of each side, default 20), KEEP=1 to keep
# the work directory (it is printed), BENCH_FLAGS for more flags of
# scripts/benchpromql (-interval, -containers, -backfill-block, -retention,
# -max-block). Here (two cores) 7 and 30 days take about 5 minutes, two of
# them waiting for Prometheus's first compaction pass, with 1.2 GB of
# OpenMetrics text at the peak; one day takes 11-21 s (the lower with the
# build cached).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- 7 30
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
for tool in prometheus promtool curl; do
  command -v $tool >/dev/null || { echo "bench-promql: $tool is not installed" >&2; exit 2; }
done
bin=$(mktemp -d /tmp/bench-promql.XXXXXX)
flags=(-runs "${RUNS:-20}")
if [ "${KEEP:-}" = 1 ]; then
  flags+=(-keep -dir "$bin/work")
  echo "bench-promql: keeping $bin" >&2
else
  trap 'rm -rf "$bin"' EXIT
fi
go build -o "$bin/gpumeter" ./cmd/gpumeter
go build -o "$bin/benchpromql" ./scripts/benchpromql
echo "bench-promql: $(uptime | sed 's/.*load/load/'), $(prometheus --version 2>&1 | head -1)" >&2
# shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
"$bin/benchpromql" -gpumeter "$bin/gpumeter" "${flags[@]}" ${BENCH_FLAGS:-} "$@"
