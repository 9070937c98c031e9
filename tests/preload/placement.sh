#!/usr/bin/env bash
# Placement by use against allocation order, on the emulator: each workload of tests/preload/cuda_client.cu
# (placement-*) runs under transparent.placement = "allocation" and "use", and reports the share of the
# bytes its kernels touched that were in the device's own memory (the emulator's counters). Placing by use
# must raise it clearly where the most used memory is not the newest (model, skewed), and must not lower
# it where it is (recent). The environment (LD_PRELOAD, budgets, the mechanism) comes from ctest.
# Usage: placement.sh CUDA_CLIENT
set -euo pipefail
client=$1
share() {  # share WORKLOAD PLACEMENT
  local out
  if ! out=$(TVMM_TRANSPARENT_PLACEMENT=$2 "$client" "placement-$1" 2>&1); then
    echo "placement-$1 with placement $2 failed:" >&2
    echo "$out" >&2
    exit 1
  fi
  grep -q '^ok$' <<<"$out" || { echo "placement-$1 ($2) did not finish: $out" >&2; exit 1; }
  sed -n "s/^$1: device share \([0-9.]*\)$/\1/p" <<<"$out"
}
status=0
printf '%-8s %-11s %-11s %s\n' workload allocation use verdict
for w in model skewed recent; do
  a=$(share "$w" allocation)
  u=$(share "$w" use)
  if [[ $w == recent ]]; then
    ok=$(awk -v a="$a" -v u="$u" 'BEGIN { print (u >= a - 0.05) ? 1 : 0 }')  # no worse
  else
    ok=$(awk -v a="$a" -v u="$u" 'BEGIN { print (u >= a + 0.15) ? 1 : 0 }')  # clearly better
  fi
  verdict=ok
  [[ $ok == 1 ]] || { verdict=FAILED; status=1; }
  printf '%-8s %-11s %-11s %s\n' "$w" "$a" "$u" "$verdict"
done
[[ $status == 0 ]] && echo "placement: ok"
exit $status
