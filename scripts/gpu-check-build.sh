#!/usr/bin/env bash
# Builds the gpumeter binary that scripts/gpu-check.sh runs on a GPU
# machine: linux/amd64, cgo on (go-nvml dlopens libnvidia-ml.so.1 through
# cgo), stripped, into bin/gpumeter (ignored by git). The binary links
# glibc dynamically, so the GPU machine needs a glibc at least as new as
# the newest GLIBC_ symbol version printed at the end; a static glibc
# binary could not dlopen the driver's library.
#   scripts/gpu-check-build.sh [OUTPUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/gpumeter}
if ! command -v "${CC:-gcc}" >/dev/null 2>&1 && ! command -v cc >/dev/null 2>&1; then
  echo "gpu-check-build: no C compiler; cgo needs one (Debian: apt-get install gcc)" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
rev=$(git describe --always --dirty 2>/dev/null || echo unknown)
CGO_ENABLED=1 GOOS=linux GOARCH=amd64 go build -trimpath \
  -ldflags "-s -w -X main.version=gpucheck-$rev" -o "$out" ./cmd/gpumeter
echo "built $out ($(stat -c %s "$out") bytes): $("$out" version)"
if command -v objdump >/dev/null 2>&1; then
  echo "needs glibc >= $(objdump -T "$out" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 | sed 's/GLIBC_//')"
fi
