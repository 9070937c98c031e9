#!/usr/bin/env bash
# Runs a tiny tvmm-bench training matrix and checks the JSON has one record per run with the promised
# fields; then a quick host-bandwidth run. Args: TVMM_BENCH
set -euo pipefail
bench=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bench" --workload train --layers 3 --tensor-mib 2 --iterations 3 --ratios 2 --policies lru,trace --compute-us 200 \
  --json "$out"
records=$(grep -c '"workload": "train"' "$out")
[ "$records" -eq 2 ] || { echo "expected 2 records, got $records"; cat "$out"; exit 1; }
for field in workload backend policy oversubscription step_time_s bytes_moved bytes_vs_belady time_vs_bound; do
  n=$(grep -o "\"$field\": " "$out" | wc -l)
  [ "$n" -eq 2 ] || { echo "field $field appears $n times"; cat "$out"; exit 1; }
done
grep -q '"policy": "trace"' "$out"
# Every byte written and checked through the pager (the CPU pattern kernels on the simulator).
v=$("$bench" --workload train --layers 2 --tensor-mib 2 --iterations 3 --ratios 2 --policies lru --compute-us 100 \
  --verify)
grep -Eq 'verified [0-9]+ bytes .*: all correct' <<<"$v" || { echo "byte check failed:"; echo "$v"; exit 1; }
# Host-tier bandwidth by NUMA placement: a near and an unbound row, each with a figure.
hb=$("$bench" --workload host-bandwidth --quick)
grep -Eq '^near +auto +[0-9.]+ +bound' <<<"$hb" || { echo "no bound near row:"; echo "$hb"; exit 1; }
grep -Eq '^unbound +none +[0-9.]+ +unbound' <<<"$hb" || { echo "no unbound row:"; echo "$hb"; exit 1; }
# Device call costs and page-move bandwidth on the simulator.
vmm=$("$bench" --workload vmm --quick)
grep -Eq 'per call: map [0-9.]+ us' <<<"$vmm" || { echo "no call costs:"; echo "$vmm"; exit 1; }
grep -Eq 'pager page moves: [0-9.]+ GB/s' <<<"$vmm" || { echo "no page-move bandwidth:"; echo "$vmm"; exit 1; }
echo "tvmm-bench smoke: ok"
