#!/usr/bin/env bash
# A library that ctypes or dlopen loads into a running process (PyTorch's CUDAPluggableAllocator loads
# libtvmm_preload.so so) must not need static TLS: a process that has loaded many libraries has none
# left, and dlopen then fails with "cannot allocate memory in static TLS block" (initial-exec TLS sets
# the STATIC_TLS flag). Usage: dlopen_tls.sh LIBRARY...
set -euo pipefail
command -v readelf >/dev/null || { echo "dlopen_tls: readelf (binutils) is not installed" >&2; exit 1; }
for lib in "$@"; do
  dynamic=$(readelf -dW "$lib") || { echo "dlopen_tls: readelf cannot read $lib" >&2; exit 1; }
  if grep -q STATIC_TLS <<<"$dynamic"; then
    echo "$lib needs static TLS (a thread_local with the initial-exec model?):" >&2
    readelf -lW "$lib" | grep -w TLS >&2 || true
    exit 1
  fi
done
echo "dlopen_tls: no static TLS"
