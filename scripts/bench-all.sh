#!/usr/bin/env bash
# Runs every Go benchmark BENCHMARKS.md quotes, one pass, and the full
# simulated day, printing one line a benchmark. Run it from a checkout's
# root (or give the checkout as $1), e.g. before and after a change, one
# after the other on a quiet machine. The PostgreSQL benchmarks start a
# throwaway cluster as their tests do.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
export CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
api=./internal/api/server
[ -d internal/api/server ] || api=./internal/api # trees before the API split
b() { go test -run '^$' -count=1 "$@" 2>&1 | grep -E '^Benchmark|FAIL' || true; }
b -bench Tick -benchmem ./internal/sampler
b -bench . -benchmem ./internal/meter
b -bench Read -benchmem ./internal/sim
b -bench . -benchmem ./internal/nvml
b -bench Containers64 -benchmem ./internal/docker
b -bench 'Render|Handler' -benchmem ./internal/exporter
b -bench Resolve -benchmem ./internal/cgroup
b -bench SimulateHour -benchtime 3x ./cmd/gpumeter
b -bench 'Add$' -benchmem ./internal/record
b -bench 'WriteMinute|LedgerSize|Usage30Days' ./internal/ledger/sqlite
b -bench 'WriteMinute|Usage30Days' ./internal/ledger/postgres
b -bench . -benchmem ./internal/report
b -bench 'LiveAdd|Tick|Evaluate30Days' -benchmem ./internal/waste
b -bench Observe -benchmem ./internal/audit
b -bench 'Containers|Guard' -benchmem "$api"
b -bench EngineStep -benchmem ./internal/policy
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/gpumeter" ./cmd/gpumeter
/usr/bin/time -f "simulate day: %e s wall, %U+%S s CPU, %M KB peak RSS" \
  "$tmp/gpumeter" simulate --scenario testdata/bench-8gpu-64ctr.yaml --db "$tmp/b.db" >/dev/null
