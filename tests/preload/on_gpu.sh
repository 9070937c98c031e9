#!/usr/bin/env bash
# Runs a program under the preloaded interposer only where the CUDA driver finds a GPU; exits 77 (ctest's
# SKIP_RETURN_CODE for the "gpu" tests) where `tvmm info` finds none, as on CI's machines, and fails
# where `tvmm info` itself fails.
# Usage: on_gpu.sh TVMM_CLI LIBTVMM_PRELOAD PROGRAM ARGS...
set -uo pipefail
cli=$1
preload=$2
shift 2
if ! info=$("$cli" info 2>&1); then
  echo "on_gpu.sh: $cli info failed:"
  echo "$info"
  exit 1
fi
if ! grep -q "CUDA driver found: [1-9]" <<<"$info"; then
  echo "skipped: the CUDA driver finds no GPU here (tvmm info)"
  exit 77
fi
LD_PRELOAD=$preload exec "$@"
