#!/usr/bin/env bash
# README.md shows the demo's table of step times as `make demo` prints it: this test runs the demo and
# compares the README's rows with the demo's (the figures drifted three times before it existed). The
# bytes moved repeat exactly from run to run, the step times within about 1.5% (the recorded trace's
# row), so each figure is compared within a margin: step times 3%, bytes 1%, "vs all in memory" 0.05.
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
# Each row: a label, then "<ms> ms <ratio>x <bytes> <unit>".
verdict=$(awk -v want="$want" -v have="$have" '
  function split_rows(text, label, fig,   n, i, line, f, k) {
    n = split(text, line, "\n")
    for (i = 1; i <= n; i++) {
      k = split(line[i], f, " ")
      label[i] = substr(line[i], 1, index(line[i], "  ") - 1)
      fig[i, "ms"] = f[k - 4]; fig[i, "ratio"] = f[k - 2]; fig[i, "bytes"] = f[k - 1]; fig[i, "unit"] = f[k]
    }
    return n
  }
  function off(a, b, rel) { return (a - b > rel * b) || (b - a > rel * b) }
  BEGIN {
    nw = split_rows(want, wl, wf); nh = split_rows(have, hl, hf)
    if (nw != nh) { print "README.md has " nh " rows, the demo printed " nw; exit }
    for (i = 1; i <= nw; i++) {
      if (wl[i] != hl[i]) { print "row " i ": README says \"" hl[i] "\", the demo \"" wl[i] "\""; exit }
      if (off(wf[i, "ms"], hf[i, "ms"], 0.03)) { print wl[i] ": step time " hf[i, "ms"] " ms in README.md, " wf[i, "ms"] " printed"; exit }
      r = substr(wf[i, "ratio"], 1, length(wf[i, "ratio"]) - 1) - substr(hf[i, "ratio"], 1, length(hf[i, "ratio"]) - 1)
      if (r > 0.05 || r < -0.05) { print wl[i] ": " hf[i, "ratio"] " in README.md, " wf[i, "ratio"] " printed"; exit }
      if (wf[i, "unit"] != hf[i, "unit"] || off(wf[i, "bytes"], hf[i, "bytes"], 0.01)) {
        print wl[i] ": " hf[i, "bytes"] " " hf[i, "unit"] " moved in README.md, " wf[i, "bytes"] " " wf[i, "unit"] " printed"; exit
      }
    }
    print "same"
  }')
if [[ $verdict != same ]]; then
  echo "readme_demo_test: README.md's demo table differs from what $demo prints ($verdict); the demo printed:"
  echo "$want"
  echo "README.md has:"
  echo "$have"
  exit 1
fi
echo "readme_demo_test: ok"
