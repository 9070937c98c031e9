#!/usr/bin/env bash
# README.md shows the demo's table of step times as `make demo` prints it: this test runs the demo and
# compares the README's rows with the demo's (the figures drifted three times before it existed). The
# demo's figures are the simulator's model time, which repeats exactly from run to run and machine to
# machine (since 2026-12-01 also with two streams copying in one direction: docs/architecture.md,
# "Device time on the simulator"), so the rows must match character for character.
# Usage: readme_demo_test.sh TVMM_DEMO README.md
set -euo pipefail
demo=$1
readme=$2
rows='^(all in device memory|tvmm, default policy|tvmm, recorded trace|naive swapping)'
printed=$("$demo")
want=$(grep -E "$rows" <<<"$printed" || true)
have=$(grep -E "$rows" "$readme" || true)
if [[ -z $want ]]; then
  echo "readme_demo_test: the demo printed no table rows; its output was:"
  echo "$printed"
  exit 1
fi
if [[ $want != "$have" ]]; then
  echo "readme_demo_test: README.md's demo table differs from what $demo prints; update README.md"
  echo "(and the figures quoted around it). Differences (< README.md, > the demo):"
  diff <(echo "$have") <(echo "$want") || true
  exit 1
fi
echo "readme_demo_test: ok"
