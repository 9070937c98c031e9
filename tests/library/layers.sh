#!/usr/bin/env bash
# The folders are layers: each includes only its own headers and those of the layers below it (the
# order is docs/architecture.md's "Layers"). Tests are not a layer: they may include anything.
set -euo pipefail
root="$1"
cd "$root"
# Layer of a folder, bottom first: the public headers and the shared primitives, the machine's
# topology, the device and storage backends, the eviction policies, the pager (in sub-layers: config,
# observe, core, transparent, api), the preload library, the benchmarks, the tools.
layer_of() {
  case "$1" in
    include/*|tvmm/*|common/*|kernels/*) echo 10 ;;
    backends/topology/*) echo 20 ;;
    backends/device/*|backends/storage/*) echo 30 ;;
    policies/*) echo 40 ;;
    vmm/config/*) echo 50 ;;
    vmm/observe/*) echo 51 ;;
    vmm/core/*) echo 52 ;;
    vmm/transparent/*) echo 53 ;;
    vmm/api/*) echo 54 ;;
    preload/*) echo 60 ;;
    bench/*) echo 70 ;;
    tools/*) echo 80 ;;
    *) echo "?" ;;
  esac
}
bad=0
checked=0
while IFS= read -r file; do
  from=$(layer_of "$file")
  while IFS= read -r inc; do
    [ -n "$inc" ] || continue
    to=$(layer_of "$inc")
    checked=$((checked + 1))
    if [ "$to" = "?" ] || [ "$from" = "?" ]; then
      echo "$file includes \"$inc\": a folder with no layer (add it to tests/library/layers.sh and docs)"
      bad=$((bad + 1))
    elif [ "$to" -gt "$from" ]; then
      echo "$file (layer $from) includes \"$inc\" (layer $to): a layer above it"
      bad=$((bad + 1))
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
done < <(find include common kernels backends policies vmm preload bench tools -type f \
           \( -name '*.hpp' -o -name '*.h' -o -name '*.cpp' -o -name '*.cu' \) | sort)
if [ "$bad" -gt 0 ]; then
  echo "$bad includes go up a layer (of $checked)"
  exit 1
fi
echo "layers: $checked includes, none goes up a layer"
