#!/usr/bin/env bash
# TVMM_LOG: level names in any case; a value that names no level says so once on stderr and keeps the
# default (failures still print), and the program runs on. And a warning at that default level: a host
# budget beyond the machine's memory. Args: CLIENT PRELOAD
set -euo pipefail
client=$1 preload=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() {
  env LD_PRELOAD="$preload" TVMM_DEVICE_BACKEND=sim TVMM_DEVICE_BUDGET=16MiB TVMM_HOST_BUDGET="${host:-96MiB}" \
    TVMM_LOG="$1" "$client" oversubscribe >"$dir/out" 2>"$dir/err"
  grep -q '^ok$' "$dir/out" || { echo "TVMM_LOG=$1: the program did not finish"; cat "$dir/out" "$dir/err"; exit 1; }
}
run verbose
[ "$(grep -c 'TVMM_LOG=verbose is not a level; use off, error, warn (the default, used now), info or debug' "$dir/err")" = 1 ] ||
  { echo "TVMM_LOG=verbose: no single line saying it is not a level:"; cat "$dir/err"; exit 1; }
run DEBUG
grep -q 'tvmm: cudaMalloc(' "$dir/err" || { echo "TVMM_LOG=DEBUG: no debug lines:"; cat "$dir/err"; exit 1; }
if grep -q 'is not a level' "$dir/err"; then echo "TVMM_LOG=DEBUG refused:"; cat "$dir/err"; exit 1; fi
if grep -q 'more than this machine' "$dir/err"; then echo "a 96 MiB host budget warned:"; cat "$dir/err"; exit 1; fi
mem_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
host=$(((mem_kib / 1048576 + 1) * 2048))MiB run warn
grep -q "the host budget (.*) is more than this machine's memory (.*): allocations fail once the machine runs out; lower TVMM_HOST_BUDGET" "$dir/err" ||
  { echo "TVMM_HOST_BUDGET of twice the memory: no warning:"; cat "$dir/err"; exit 1; }
echo "log level: ok"
