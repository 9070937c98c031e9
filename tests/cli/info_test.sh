#!/usr/bin/env bash
# `tvmm info`: the text report has every section, the JSON report every key (and parses, when python3
# is here), a config's placement is reported, and a bad config (or a directory) is an error. Args: TVMM
set -euo pipefail
tvmm=$1
text=$("$tvmm" info)
for section in "NUMA nodes:" "GPUs:" "io_uring (the NVMe tier):" "RLIMIT_MEMLOCK:" "Huge pages:" "Placement" \
  "host tier:" "worker threads:"; do
  grep -qF "$section" <<<"$text" || { echo "missing '$section' in:"; echo "$text"; exit 1; }
done
json=$("$tvmm" info --json)
for key in numa_nodes cuda pci_nvidia_gpus io_uring memlock huge_pages placement host_policy host_outcome threads; do
  grep -q "\"$key\":" <<<"$json" || { echo "missing key $key in:"; echo "$json"; exit 1; }
done
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["numa_nodes"], d; assert d["placement"]["host_policy"]' <<<"$json"
fi
cfg=$(mktemp --suffix=.toml)
trap 'rm -f "$cfg"' EXIT
printf '[host]\nbudget = "64MiB"\nnuma = "none"\n' >"$cfg"
placed=$("$tvmm" info --config "$cfg")  # not piped into grep -q: with pipefail, an early exit can fail it
grep -q 'host tier: none' <<<"$placed" || { echo "placement of $cfg not reported"; exit 1; }
printf '[host]\nnuma = "nowhere"\n' >"$cfg"
if err=$("$tvmm" info --config "$cfg" 2>&1); then echo "a bad config was accepted"; exit 1; fi
grep -q 'host.numa' <<<"$err" || { echo "unhelpful error: $err"; exit 1; }
# A directory named as the config is an error (it used to read as an empty file: every default), for
# `tvmm info` and `tvmm check-config` alike.
dir=$(dirname "$cfg")
for cmd in "info --config" "check-config"; do
  # shellcheck disable=SC2086 # $cmd is two words on purpose
  if err=$("$tvmm" $cmd "$dir" 2>&1); then echo "tvmm $cmd accepted the directory $dir"; exit 1; fi
  grep -q 'is a directory, not a config file' <<<"$err" || { echo "unhelpful error: $err"; exit 1; }
done
echo "tvmm info: ok"
