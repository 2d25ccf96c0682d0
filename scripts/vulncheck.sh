#!/usr/bin/env bash
# Runs govulncheck over the module: the known vulnerabilities of the Go
# standard library and of every module the code calls, reached from this
# code. The scanner is the one go.mod's tool line pins (go tool
# govulncheck), or a govulncheck on PATH in a checkout without it. It
# needs its vulnerability database (GOVULNDB, https://vuln.go.dev by
# default): when the scanner or the database cannot be had, the script
# says so in one line and exits 0, so that a machine without the network
# still runs the rest of CI. A finding fails it (status 3).
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"

if go tool -n govulncheck >/dev/null 2>&1; then
  scan=(go tool govulncheck)
elif command -v govulncheck >/dev/null 2>&1; then
  scan=(govulncheck)
else
  echo "vulncheck skipped: no govulncheck (neither go.mod's tool line nor one on PATH)"
  exit 0
fi

db=${GOVULNDB:-https://vuln.go.dev}
case $db in
  file://*)
    reachable() { [ -f "${db#file://}/index/db.json" ] || [ -f "${db#file://}/index/db.json.gz" ]; } ;;
  *)
    if ! command -v curl >/dev/null 2>&1; then
      echo "vulncheck skipped: no curl to see whether the vulnerability database $db is reachable"
      exit 0
    fi
    reachable() { curl -fsS --max-time 15 -o /dev/null "$db/index/db.json.gz" 2>/dev/null; } ;;
esac
if ! reachable; then
  echo "vulncheck skipped: the vulnerability database $db is not reachable from here"
  exit 0
fi

echo "== govulncheck (database $db)"
"${scan[@]}" -db "$db" ./...
