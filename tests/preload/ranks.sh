#!/usr/bin/env bash
# Four ranks of one job on one node at once, as torchrun would start them: each under LD_PRELOAD with
# its own host budget, its own NVMe directory ({local_rank}) and its own stats file ({rank}). Checks
# that all four finish with their bytes intact and that no rank's file is another's.
set -euo pipefail
client=$1
preload=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pids=()
for r in 0 1 2 3; do
  mkdir -p "$dir/nvme-$r"
  env RANK=$r LOCAL_RANK=$r WORLD_SIZE=4 LOCAL_WORLD_SIZE=4 LD_PRELOAD="$preload" \
    TVMM_DEVICE_BACKEND=sim TVMM_DEVICE_BUDGET=8MiB TVMM_HOST_BUDGET=$((16 + 8 * r))MiB \
    TVMM_NVME_PATHS="$dir/nvme-{local_rank}" TVMM_NVME_BUDGET=32MiB TVMM_NVME_DIRECT=false \
    TVMM_STATS_FILE="$dir/stats-{rank}.json" "$client" rank >"$dir/out-$r" 2>&1 &
  pids+=($!)
done
status=0
for r in 0 1 2 3; do
  if ! wait "${pids[$r]}"; then
    echo "rank $r failed:"; cat "$dir/out-$r"; status=1
  fi
done
[ $status -eq 0 ] || exit 1
for r in 0 1 2 3; do
  grep -q '^ok$' "$dir/out-$r" || { echo "rank $r did not finish"; cat "$dir/out-$r"; exit 1; }
  f="$dir/stats-$r.json"
  [ -s "$f" ] || { echo "rank $r wrote no stats file $f"; ls "$dir"; exit 1; }
  want=$(((16 + 8 * r) * 1048576))
  grep -q "\"host_budget\": $want," "$f" || { echo "stats-$r.json is not rank $r's (host budget $want):"; cat "$f"; exit 1; }
  grep -q '"pages_demoted": [1-9]' "$f" || { echo "rank $r demoted nothing:"; cat "$f"; exit 1; }
done
echo "ranks: ok"
