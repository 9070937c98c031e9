#!/usr/bin/env bash
# `tvmm stats FILE`: reads a pager's stats (TVMM_STATS from tvmm-demo) and transparent mode's (TVMM_STATS
# under LD_PRELOAD), and refuses what is not a stats file with a reason. Args: TVMM TVMM_DEMO PRELOAD CLIENT
set -euo pipefail
tvmm=$1 demo=$2 preload=$3 client=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "$1"; shift; printf '%s\n' "$@"; exit 1; }

TVMM_STATS="$dir/pager.json" "$demo" --quick >/dev/null
out=$("$tvmm" stats "$dir/pager.json")
for want in "a pager's stats, pages of 2 MiB" "device " "host " "host to device" "device to host" "pins " "evictions " "page-ins into the frame still mapped at their address" \
  "host time in the driver calls of the other page-ins" "driver call " "copy "; do
  grep -qF "$want" <<<"$out" || fail "missing '$want' in the pager report:" "$out"
done

env LD_PRELOAD="$preload" TVMM_DEVICE_BACKEND=sim TVMM_DEVICE_BUDGET=16MiB TVMM_HOST_BUDGET=96MiB TVMM_LOG=off \
  TVMM_STATS="$dir/transparent.json" "$client" oversubscribe >/dev/null
out=$("$tvmm" stats "$dir/transparent.json")
for want in "transparent mode (vmm on the sim device)" "budgets: device 16 MiB, host 96 MiB" "pages demoted to the host" \
  "placement by use: 0 uses noted" "given back to allocations outside tvmm: 0 B"; do
  grep -qF "$want" <<<"$out" || fail "missing '$want' in the transparent report:" "$out"
done

# Frees that waited are counted by how: in stream order (a GPU) and at a quiescent point (the simulator).
sed -E -e 's/"stream_ordered_frees": [0-9]+/"stream_ordered_frees": 7/' -e 's/"deferred_frees": [0-9]+/"deferred_frees": 5/' \
  "$dir/transparent.json" >"$dir/frees.json"
out=$("$tvmm" stats "$dir/frees.json")
grep -qF "(7 in stream order, 5 at a quiescent point)" <<<"$out" || fail "frees not counted by how they waited:" "$out"

echo '{"pins": 3}' >"$dir/partial.json"
if err=$("$tvmm" stats "$dir/partial.json" 2>&1); then fail "a partial stats file was accepted"; fi
grep -q 'not a tvmm stats file' <<<"$err" || fail "unhelpful error:" "$err"
echo 'pins: 3' >"$dir/text.json"
if err=$("$tvmm" stats "$dir/text.json" 2>&1); then fail "a text file was accepted"; fi
grep -q 'is not JSON' <<<"$err" || fail "unhelpful error:" "$err"
if err=$("$tvmm" stats "$dir/missing.json" 2>&1); then fail "a missing file was accepted"; fi
grep -q 'cannot read' <<<"$err" || fail "unhelpful error:" "$err"
echo "tvmm stats: ok"
