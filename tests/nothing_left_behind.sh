#!/usr/bin/env bash
# The last test of a run (ctest fixture cleanup): every test ran with TMPDIR=$1, so whatever a test
# left behind is there. Lists it and fails; with nothing there, removes the folder.
set -euo pipefail
dir=$1
if [ ! -d "$dir" ]; then
  echo "nothing left behind (no $dir)"
  exit 0
fi
left=$(find "$dir" -mindepth 1 -maxdepth 1 | sort)
if [ -n "$left" ]; then
  echo "tests left $(echo "$left" | wc -l) entries behind in $dir (a test that exits without cleaning up, e.g. a death test's child):"
  find "$dir" -mindepth 1 -maxdepth 2 -printf '  %y %p\n' | sort
  exit 1
fi
rmdir "$dir"
echo "nothing left behind"
