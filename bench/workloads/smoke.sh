#!/usr/bin/env bash
# Runs every tvmm-bench workload once, small, and checks each prints its table: train (with the
# byte check), infer, random (uniform and Zipf), scan, replay of both shipped traces, host-bandwidth
# and vmm. Figures are not checked (benchmarks are not timed tests). Args: TVMM_BENCH SOURCE_DIR
set -euo pipefail
bench=$1
src=$2
small=(--iterations 3 --ratios 2 --policies lru,trace --peers naive --compute-us 100)
check() {  # check NAME OUTPUT: the table has an lru and a trace row for the workload
  grep -q "^workload $1:" <<<"$2" || { echo "no table for $1:"; echo "$2"; exit 1; }
  grep -Eq '^trace +2\.00x +[0-9.]+' <<<"$2" || { echo "no trace row for $1:"; echo "$2"; exit 1; }
  grep -Eq 'naive [0-9.]+ ms' <<<"$2" || { echo "no naive peer for $1:"; echo "$2"; exit 1; }
}
check train "$("$bench" --workload train --layers 3 --tensor-mib 2 "${small[@]}")"
check infer "$("$bench" --workload infer --layers 6 --tensor-mib 2 "${small[@]}")"
check random-uniform "$("$bench" --workload random --tensors 12 --tensor-mib 2 --accesses 24 "${small[@]}")"
check random-zipf "$("$bench" --workload random --zipf 1.1 --tensors 12 --tensor-mib 2 --accesses 24 "${small[@]}")"
check scan "$("$bench" --workload scan --tensors 8 --tensor-mib 2 "${small[@]}")"
check replay:resnet18 "$("$bench" --workload replay --trace "$src/bench/traces/resnet18.trace.gz" --min-mib 4 \
  "${small[@]}")"
# Two traces of one model (here one file twice) get two names, so their rows and files stay apart.
two=$("$bench" --workload replay --trace "$src/bench/traces/resnet18.trace.gz" "$src/bench/traces/resnet18.trace.gz" \
  --min-mib 4 --iterations 3 --ratios 2 --policies lru --peers none 2>&1)
grep -q "^workload replay:resnet18:" <<<"$two" && grep -q "^workload replay:resnet18-resnet18:" <<<"$two" &&
  grep -q "is replay:resnet18 too; its runs are named replay:resnet18-resnet18" <<<"$two" ||
  { echo "two traces of one model were not told apart:"; echo "$two"; exit 1; }
# A replay without --trace is refused with the fix.
if err=$("$bench" --workload replay 2>&1); then echo "replay without --trace succeeded"; exit 1; fi
grep -q -- "needs --trace FILE" <<<"$err" || { echo "unclear error: $err"; exit 1; }
# A workload that no ratio can run (its largest kernel needs more than the device at every ratio asked)
# fails, and says how many pages the kernel needs and at which ratio it would run.
if err=$("$bench" --workload train --layers 3 --tensor-mib 2 --ratios 6,8 --iterations 3 --policies lru --peers none \
  --compute-us 100 2>&1); then
  echo "a run in which no ratio could run exited 0:"; echo "$err"; exit 1
fi
grep -q "no ratio could run" <<<"$err" || { echo "no summary of the refusal: $err"; exit 1; }
# The summary gives each ratio's reason, not the last one's only (their reasons may differ).
grep -Eq "no ratio could run, so it has no results \(at 6.00x: .*; at 8.00x: " <<<"$err" ||
  { echo "the summary does not give each ratio's reason: $err"; exit 1; }
grep -Eq "need [0-9]+ device pages at once.*it runs at [0-9.]+x or less" <<<"$err" ||
  { echo "the refusal does not say what the kernel needs: $err"; exit 1; }
# Every byte written and checked through the pager (the CPU pattern kernels on the simulator).
v=$("$bench" --workload train --layers 2 --tensor-mib 2 --iterations 3 --ratios 2 --policies lru --peers none \
  --compute-us 100 --verify)
grep -Eq 'verified [0-9]+ bytes .*: all correct' <<<"$v" || { echo "byte check failed:"; echo "$v"; exit 1; }
# Host-tier bandwidth by NUMA placement: a near and an unbound row, each with a figure.
hb=$("$bench" --workload host-bandwidth --quick)
grep -Eq '^near +auto +[0-9.]+ +bound' <<<"$hb" || { echo "no bound near row:"; echo "$hb"; exit 1; }
grep -Eq '^unbound +none +[0-9.]+ +unbound' <<<"$hb" || { echo "no unbound row:"; echo "$hb"; exit 1; }
# Device call costs and page-move bandwidth on the simulator.
vmm=$("$bench" --workload vmm --quick)
grep -Eq 'per call: map [0-9.]+ us' <<<"$vmm" || { echo "no call costs:"; echo "$vmm"; exit 1; }
grep -Eq 'pager page moves: [0-9.]+ GB/s' <<<"$vmm" || { echo "no page-move bandwidth:"; echo "$vmm"; exit 1; }
grep -Eq 'set_access after [0-9]+ D2H copies of a page: [0-9.]+ us' <<<"$vmm" || { echo "no grant after copies:"; echo "$vmm"; exit 1; }
grep -Eq 'a launch call: [0-9.]+ us alone, [0-9.]+ us while another thread remaps' <<<"$vmm" ||
  { echo "no launches beside remaps:"; echo "$vmm"; exit 1; }
echo "tvmm-bench smoke: ok"
