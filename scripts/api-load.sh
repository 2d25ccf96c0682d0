#!/usr/bin/env bash
# Load test of the authenticated API on loopback: starts `gpumeter serve`
# (sampling at 1 Hz in the same process) with one viewer (or admin) token,
# loads GET /api/v1/containers with scripts/apiload, and prints the figures
# with the ticks taken and missed meanwhile, the agent's RSS and CPU time,
# and what the audit log wrote. With FLOOD, a second apiload sends bad
# tokens from that many loopback addresses meanwhile. Stops by itself;
# everything it makes lives in a temp dir removed on exit.
#
#   scripts/api-load.sh [apiload flags...]
#
# Environment:
#   DURATION=20      seconds measured, after a 2 s warm-up (at most 300)
#   CONCURRENCY=16   connections, each with one request in flight
#   SCENARIO=        empty: serve --demo (4 GPUs, 6 containers);
#                    a file: serve --sim FILE, e.g. testdata/bench-8gpu-64ctr.yaml
#   TARGET=tcp       tcp: http://127.0.0.1:PORT; unix: the agent's socket
#   AUTH=token       token: send the token; none: send no token, to
#                    measure refusals (401 over TCP; over the socket this
#                    user is let in as admin without one)
#   ROLE=viewer      the token's role: viewer or admin
#   FLOOD=0          this many loopback addresses (127.0.0.2 and up, at
#                    most 250), one connection each, send a bad token to the
#                    same endpoint from the warm-up to the end
set -euo pipefail
scenario=${SCENARIO:-}
if [ -n "$scenario" ]; then
  # Relative to where the script was called from, before the cd below.
  scenario=$(realpath -e -- "$scenario") || { echo "SCENARIO=$SCENARIO: no such file" >&2; exit 2; }
fi
cd "$(dirname "$0")/.."

duration=${DURATION:-20}
concurrency=${CONCURRENCY:-16}
target=${TARGET:-tcp}
authmode=${AUTH:-token}
role=${ROLE:-viewer}
flood=${FLOOD:-0}
case $duration in '' | *[!0-9]*) echo "DURATION=$duration: want whole seconds" >&2; exit 2 ;; esac
if [ "$duration" -lt 1 ] || [ "$duration" -gt 300 ]; then
  echo "DURATION=$duration: want 1..300 seconds" >&2
  exit 2
fi
case $target in tcp | unix) ;; *) echo "TARGET=$target: want tcp or unix" >&2; exit 2 ;; esac
case $authmode in token | none) ;; *) echo "AUTH=$authmode: want token or none" >&2; exit 2 ;; esac
case $role in viewer | admin) ;; *) echo "ROLE=$role: want viewer or admin" >&2; exit 2 ;; esac
case $flood in '' | *[!0-9]*) echo "FLOOD=$flood: want a number of addresses" >&2; exit 2 ;; esac
if [ "$flood" -gt 250 ]; then echo "FLOOD=$flood: at most 250 addresses" >&2; exit 2; fi
if [ "$flood" -gt 0 ] && [ "$target" != tcp ]; then echo "FLOOD needs TARGET=tcp" >&2; exit 2; fi

tmp=$(mktemp -d)
pid=
gen=
bad=
cleanup() {
  if [ -n "$bad" ] && kill -0 "$bad" 2>/dev/null; then
    kill -TERM "$bad" 2>/dev/null || true
    wait "$bad" 2>/dev/null || true
  fi
  if [ -n "$gen" ] && kill -0 "$gen" 2>/dev/null; then
    # timeout passes the signal on to apiload, which prints what it has.
    kill -TERM "$gen" 2>/dev/null || true
    wait "$gen" 2>/dev/null || true
  fi
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building gpumeter and apiload ..."
go build -o "$tmp/gpumeter" ./cmd/gpumeter
go build -o "$tmp/apiload" ./scripts/apiload

# A token as `gpumeter token create` makes one: gpm_ and 32 random bytes
# in URL-safe base64. The agent keeps only its SHA-256 in hex, as
# internal/auth hashes it.
secret=gpm_$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
hash=$(printf '%s' "$secret" | sha256sum | cut -d' ' -f1)

source_flag=(--demo)
if [ -n "$scenario" ]; then source_flag=(--sim "$scenario"); fi
mkdir -p "$tmp/data"
# A clean environment and an empty config file, so that no GPUMETER_*
# variable or /etc/gpumeter/gpumeter.yaml of this host changes the run.
# Port 0: the agent picks a free port and prints it.
: >"$tmp/gpumeter.yaml"
env -i PATH="$PATH" HOME="$HOME" \
  GPUMETER_CONFIG="$tmp/gpumeter.yaml" \
  GPUMETER_DATA_DIR="$tmp/data" \
  GPUMETER_AUTH_TOKENS="load=user=load role=$role sha256=$hash" \
  GPUMETER_API_RATE_LIMIT=0 \
  GPUMETER_LOG_LEVEL=warn \
  "$tmp/gpumeter" serve "${source_flag[@]}" --listen 127.0.0.1:0 2>"$tmp/serve.log" &
pid=$!

base=
for _ in $(seq 100); do
  base=$(sed -n 's/^gpumeter: serving on \(http[^ ]*\).*/\1/p' "$tmp/serve.log" | head -1)
  [ -n "$base" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$base" ]; then
  echo "the agent did not start:" >&2
  cat "$tmp/serve.log" >&2
  exit 1
fi
healthy=
for _ in $(seq 100); do
  if curl -sf -o /dev/null "$base/healthz"; then healthy=1; break; fi
  sleep 0.1
done
if [ -z "$healthy" ]; then
  echo "the agent at $base took no sample within 10 s:" >&2
  cat "$tmp/serve.log" >&2
  exit 1
fi
if ! curl -sf -o /dev/null -H "Authorization: Bearer $secret" "$base/api/v1/whoami"; then
  echo "the agent at $base does not accept the load token" >&2
  exit 1
fi

url=$base
if [ "$target" = unix ]; then
  sock=$tmp/data/api.sock
  if [ ! -S "$sock" ]; then
    echo "the agent serves no socket at $sock:" >&2
    cat "$tmp/serve.log" >&2
    exit 1
  fi
  url=unix://$sock
fi
token=
if [ "$authmode" = token ]; then token=$secret; fi

# metric sums a metric's samples over its labels.
metric() { curl -sf "$base/metrics" | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $NF; f = 1 } END { if (f) print s }'; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
status_kib() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$pid/status"; }

echo "agent pid $pid at $base (source: ${source_flag[*]}), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "api.rate_limit is off (GPUMETER_API_RATE_LIMIT=0): one token would otherwise be held to 50 req/s"
echo "loading $url with ${concurrency} connections for ${duration} s after a 2 s warm-up, token: $authmode ($role)"
audit=$tmp/data/audit.jsonl
audit_bytes() { if [ -f "$audit" ]; then stat -c %s "$audit"; else echo 0; fi; }
audit_lines() { if [ -f "$audit" ]; then wc -l <"$audit"; else echo 0; fi; }
ticks0=$(metric gpumeter_ticks_total)
missed0=$(metric gpumeter_ticks_missed_total)
observed0=$(metric gpumeter_audit_observed_total)
abytes0=$(audit_bytes)
alines0=$(audit_lines)
cpu0=$(cpu_ticks)
t0=$(date +%s.%N)
rc=0
if [ "$flood" -gt 0 ]; then
  echo "flood: $flood addresses (127.0.0.2 and up) send a bad token to the same endpoint meanwhile"
  # A token of the right form that the agent does not know.
  APILOAD_BAD=gpm_$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n') timeout -k 5 $((duration + 30)) \
    "$tmp/apiload" -url "$url" -token-env APILOAD_BAD -c "$flood" -sources "$flood" -d "$((duration + 2))s" -warmup 0s "$@" >"$tmp/flood.txt" 2>&1 &
  bad=$!
fi
# In the background, so that a signal to this script is acted on at once.
APILOAD_TOKEN=$token timeout -k 5 $((duration + 30)) \
  "$tmp/apiload" -url "$url" -token-env APILOAD_TOKEN -c "$concurrency" -d "${duration}s" -warmup 2s "$@" &
gen=$!
wait "$gen" || rc=$?
gen=
if [ -n "$bad" ]; then
  wait "$bad" || true
  bad=
  echo "flood:"
  sed 's/^/  /' "$tmp/flood.txt"
fi
t1=$(date +%s.%N)
cpu1=$(cpu_ticks)
ticks1=$(metric gpumeter_ticks_total)
missed1=$(metric gpumeter_ticks_missed_total)
dropped=$(metric gpumeter_audit_dropped_total)
observed1=$(metric gpumeter_audit_observed_total)
rss=$(status_kib VmRSS)
hwm=$(status_kib VmHWM)
# The audit log writes each minute's sums when the minute ends, and what
# it holds when the agent stops: stop it, then measure.
kill -TERM "$pid" 2>/dev/null || true
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
wait "$pid" 2>/dev/null || true
t2=$(date +%s)
abytes1=$(audit_bytes)
alines1=$(audit_lines)

hz=$(getconf CLK_TCK)
awk -v t0="$t0" -v t1="$t1" -v c0="$cpu0" -v c1="$cpu1" -v hz="$hz" \
  -v k0="$ticks0" -v k1="$ticks1" -v m0="$missed0" -v m1="$missed1" \
  -v rss="$rss" -v hwm="$hwm" -v dropped="${dropped:-n/a}" \
  -v t2="$t2" -v demo="$([ -z "$scenario" ] && echo 1 || echo 0)" -v o0="${observed0:-0}" -v o1="${observed1:-0}" -v b0="$abytes0" -v b1="$abytes1" -v l0="$alines0" -v l1="$alines1" 'BEGIN {
  wall = t1 - t0; cpu = (c1 - c0) / hz
  printf "agent      %d ticks taken, %d missed during the %.1f s run (warm-up included)\n", k1 - k0, m1 - m0, wall
  printf "agent      CPU %.1f s (%.0f %% of one core), RSS %.1f MiB (peak %.1f MiB), audit events dropped %s\n", cpu, 100 * cpu / wall, rss / 1024, hwm / 1024, dropped
  minutes = int(t2 / 60) - int(t0 / 60) + 1
  if (demo) printf "audit      %d calls observed; the demo keeps its audit log elsewhere: use SCENARIO to measure it\n", o1 - o0
  else printf "audit      %d calls observed; audit.jsonl grew %d bytes in %d lines over %d minute window(s) (bound: 1,020,800 bytes a window)\n", o1 - o0, b1 - b0, l1 - l0, minutes
}'
if [ "$rc" -ne 0 ]; then
  echo "apiload failed (exit $rc)" >&2
  exit "$rc"
fi
