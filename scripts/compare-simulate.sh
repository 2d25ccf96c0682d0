#!/usr/bin/env bash
# compare-simulate.sh OLD NEW [SCENARIO]: simulate SCENARIO (default the
# benchmark day) with two gpumeter binaries and compare, byte for byte,
# every report (seven groupings, four formats), waste in three formats, a
# dump of the three hour tables and every minute as the ledger reads it
# (scripts/dumpminutes); prints each run's wall, CPU and peak RSS. Needs
# sqlite3 for the hour tables. Exits 1 when anything differs.
set -euo pipefail
old=${1:?usage: compare-simulate.sh OLD NEW [SCENARIO]} new=${2:?usage: compare-simulate.sh OLD NEW [SCENARIO]}
root=$(cd "$(dirname "$0")/.." && pwd)
scenario=${3:-$root/testdata/bench-8gpu-64ctr.yaml}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(sed -n 's/^start: *//p' "$scenario")
start=${start:-2026-01-01T00:00:00Z}
for v in old new; do
  bin=${!v}
  d=$out/$v
  mkdir -p "$d/out"
  echo "$v: $(uptime | sed 's/.*load/load/')"
  /usr/bin/time -f "$v: %e s wall, %U s user, %S s sys, %M KiB peak RSS" "$bin" simulate --scenario "$scenario" --db "$d/b.db" |
    grep -v '^ticks\|^ledger\|^report' > "$d/out/summary.txt"
  from=$(date -u -d "$start" +%Y-%m-%dT%H:%M:%SZ)
  to=$(date -u -d "$start + 400 days" +%Y-%m-%dT%H:%M:%SZ)
  for by in user team project container image gpu node; do
    for f in json csv table focus; do
      "$bin" report --db "$d/b.db" --from "$from" --to "$to" --by $by --format $f > "$d/out/report-$by.$f"
    done
  done
  for f in json csv table; do
    "$bin" waste --db "$d/b.db" --from "$from" --to "$to" --format $f > "$d/out/waste.$f"
  done
  if command -v sqlite3 >/dev/null; then
    sqlite3 "$d/b.db" ".dump usage_hour gpu_hour container_hour" > "$d/out/dump.sql"
  fi
  # Minutes through the ledger's readers, whatever layout keeps them (a
  # ledger of an older schema is migrated in a copy first).
  (cd "$root" && go run ./scripts/dumpminutes "$d/b.db") > "$d/out/minutes.txt"
done
if diff -r "$out/old/out" "$out/new/out" > "$out/diff"; then
  echo "identical: $(ls "$out/new/out" | wc -l) files"
else
  head -40 "$out/diff"
  exit 1
fi
