#!/usr/bin/env bash
# Measures the resident memory of `gpumeter serve` under the benchmark load
# (8 GPUs, 64 containers, 256 GPU processes, sampled every second) while
# /metrics is scraped every 5 s, as Prometheus would. Loopback only; stops
# by itself after DURATION seconds (default 600). With CONSOLE=1 the
# console is open as well: the overview every 10 s (as the page reloads
# itself) and the GPUs page's 1h and 24h windows every 30 s, over the
# agent's socket, which signs root in as an admin.
#   [CONSOLE=1] scripts/rss.sh [DURATION]
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-600}
port=${PORT:-19401}
bin=$(mktemp -d)/gpumeter
go build -o "$bin" ./cmd/gpumeter
data=$(mktemp -d)
"$bin" serve --sim testdata/bench-8gpu-64ctr.yaml --listen "127.0.0.1:$port" --data-dir "$data" --log-level warn &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$(dirname "$bin")" "$data"' EXIT
sleep 2
start=$(date +%s)
max=0
scrapes=0
pages=0
while [ $(( $(date +%s) - start )) -lt "$duration" ]; do
  curl -sf -o /dev/null "http://127.0.0.1:$port/metrics" && scrapes=$((scrapes + 1))
  if [ "${CONSOLE:-0}" = 1 ]; then
    elapsed=$(( $(date +%s) - start ))
    if [ $((elapsed % 10)) -lt 5 ]; then
      curl -sf -o /dev/null --unix-socket "$data/api.sock" http://agent/ && pages=$((pages + 1))
    fi
    if [ $((elapsed % 30)) -lt 5 ]; then
      curl -sf -o /dev/null --unix-socket "$data/api.sock" "http://agent/gpus?window=1h" && pages=$((pages + 1))
      curl -sf -o /dev/null --unix-socket "$data/api.sock" "http://agent/gpus?window=24h" && pages=$((pages + 1))
    fi
  fi
  rss=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status)
  [ "$rss" -gt "$max" ] && max=$rss
  sleep 5
done
final=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status)
series=$(curl -sf "http://127.0.0.1:$port/metrics" | grep -vc '^#')
echo "after ${duration}s: VmRSS ${final} KiB (max ${max} KiB), ${scrapes} scrapes, ${series} series per scrape, ${pages} console pages"
