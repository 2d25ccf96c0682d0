#!/usr/bin/env bash
# Measures the resident memory of `gpumeter serve` under the benchmark load
# (8 GPUs, 64 containers, 256 GPU processes, sampled every second) while
# /metrics is scraped every 5 s, as Prometheus would. Loopback only; stops
# by itself after DURATION seconds (default 600). With CONSOLE=1 the
# console is open as well: the overview every 10 s (as the page reloads
# itself) and the GPUs page's 1h and 24h windows every 30 s, over the
# agent's socket, which signs root in as an admin.
#
# SCRAPE_EVERY sets the pause between scrapes (seconds, default 5; 0.1 is
# ten a second) and SCRAPES stops after that many scrapes instead of after
# DURATION; GZIP=1 asks for gzip as Prometheus does. At the end it prints
# VmRSS and, from /proc/PID/smaps_rollup, the resident memory split into
# anonymous and file-backed (the binary's mapped text and data) pages.
# Default GOGC, no GOMEMLIMIT: both are unset for the agent. BIN=FILE
# measures a copy of that binary instead of building one, so that two
# builds can be measured in turns.
#
# The file-backed part depends on how the binary came into the page
# cache, not only on its size. Written in large chunks, as `go build -o`
# writes it, it sits there in large folios that the kernel maps whole:
# all of the 31 MiB mapping is resident, 22 MiB of it in 2 MiB pages.
# Copied with cat's 128 KiB writes, as here, or read from disk (COLD=1
# drops the copy's cached pages first, as after a reboot), only what
# read-ahead and fault-around bring in is: about 23.5 MiB on this machine.
#   [CONSOLE=1] [SCRAPE_EVERY=0.1] [SCRAPES=300] [GZIP=1] [BIN=FILE] [COLD=1] scripts/rss.sh [DURATION]
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-600}
port=${PORT:-19401}
bin=$(mktemp -d)/gpumeter
src=${BIN:-}
if [ -z "$src" ]; then
  src=$(dirname "$bin")/built
  go build -o "$src" ./cmd/gpumeter
fi
cat "$src" >"$bin" && chmod 755 "$bin"
if [ "${COLD:-0}" = 1 ]; then
  dd of="$bin" oflag=nocache conv=notrunc,fdatasync count=0 status=none
fi
data=$(mktemp -d)
env -u GOGC -u GOMEMLIMIT "$bin" serve --sim testdata/bench-8gpu-64ctr.yaml --listen "127.0.0.1:$port" --data-dir "$data" --log-level warn &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$(dirname "$bin")" "$data"' EXIT
sleep 2
start=$(date +%s)
max=0
scrapes=0
pages=0
every=${SCRAPE_EVERY:-5}
want=${SCRAPES:-0}
compressed=()
[ "${GZIP:-0}" = 1 ] && compressed=(--compressed)
rollup() { awk -v k="$1" '$1 == k":" {print $2}' /proc/$pid/smaps_rollup; }
echo "before scrapes: VmRSS $(awk '/^VmRSS/ {print $2}' /proc/$pid/status) KiB, Rss $(rollup Rss) KiB = anonymous $(rollup Anonymous) KiB + file $(( $(rollup Rss) - $(rollup Anonymous) )) KiB"
while if [ "$want" -gt 0 ]; then [ "$scrapes" -lt "$want" ]; else [ $(( $(date +%s) - start )) -lt "$duration" ]; fi; do
  curl -sf "${compressed[@]}" -o /dev/null "http://127.0.0.1:$port/metrics" && scrapes=$((scrapes + 1))
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
  sleep "$every"
done
final=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status)
rss=$(rollup Rss)
anon=$(rollup Anonymous)
took=$(( $(date +%s) - start ))
series=$(curl -sf "http://127.0.0.1:$port/metrics" | grep -vc '^#')
echo "after ${took}s: VmRSS ${final} KiB (max ${max} KiB), ${scrapes} scrapes, ${series} series per scrape, ${pages} console pages"
echo "smaps_rollup: Rss ${rss} KiB = anonymous ${anon} KiB + file $(( rss - anon )) KiB"
