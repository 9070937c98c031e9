#!/usr/bin/env bash
# `tvmm check-config` and `tvmm info`: checking a config overwrites no output file (it used to replace a
# real run's stats with a pager's empty ones), bad values are errors and never an abort, the printed
# configuration reads back the same, `tvmm info` applies the environment without --config too, and
# `tvmm stats` says why it cannot read a path. Args: TVMM [emulator]. With "emulator" the CUDA driver
# emulator is on LD_LIBRARY_PATH (two GPUs): a cuda config the GPUs present cannot run is an error,
# and only a machine with no GPU gives "not checked against the device".
set -euo pipefail
tvmm=$1
mode=${2:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
# run CMD...: sets rc and out (stdout and stderr); an abort (rc >= 128) fails the test at once.
run() {
  set +e
  out=$("$@" 2>&1)
  rc=$?
  set -e
  ((rc < 128)) || fail "'$*' died with status $rc: $out"
}
cfg=$dir/c.toml
printf '[device]\nbudget = "64MiB"\n[host]\nbudget = "64MiB"\nnuma = "none"\n' >"$cfg"

if [[ $mode == emulator ]]; then
  run env TVMM_DEVICE_BACKEND=cuda "$tvmm" check-config "$cfg"
  ((rc == 0)) && grep -q "is valid for the cuda backend" <<<"$out" || fail "a config the emulator can run: $out"
  run env TVMM_DEVICE_BACKEND=cuda TVMM_DEVICE_ORDINAL=5 "$tvmm" check-config "$cfg"
  ((rc == 1)) && grep -q "no CUDA device 5: the driver sees 2 GPU(s)" <<<"$out" || fail "ordinal 5 of 2: rc=$rc $out"
  run env TVMM_DEVICE_BACKEND=cuda TVMM_CUEMU_DISABLE=vmm "$tvmm" check-config "$cfg"
  ((rc == 1)) && grep -q "does not support virtual memory management" <<<"$out" || fail "no VMM: rc=$rc $out"
  run env TVMM_DEVICE_BACKEND=cuda TVMM_CUEMU_DEVICES=0 "$tvmm" check-config "$cfg"
  ((rc == 0)) && grep -q "not checked against the device (no CUDA device: the driver sees no GPU" <<<"$out" ||
    fail "no GPU at all: rc=$rc $out"
  echo "tvmm check-config on the emulator: ok"
  exit 0
fi

# No output file is written by check-config or info --config, but a path that could not be written is an
# error, as it would be for the program.
echo '{"precious": 1}' >"$dir/run.json"
for cmd in "check-config" "info --config"; do
  # shellcheck disable=SC2086 # $cmd is one or two words on purpose
  run env TVMM_STATS="$dir/run.json" TVMM_TIMELINE="$dir/timeline.json" "$tvmm" $cmd "$cfg"
  ((rc == 0)) || fail "tvmm $cmd with outputs set: $out"
  [[ $(cat "$dir/run.json") == '{"precious": 1}' ]] || fail "tvmm $cmd overwrote stats.file: $(cat "$dir/run.json")"
  [[ ! -e $dir/timeline.json ]] || fail "tvmm $cmd created timeline.file"
  # shellcheck disable=SC2086
  run env TVMM_STATS="$dir/no-such-dir/run.json" "$tvmm" $cmd "$cfg"
  ((rc == 1)) && grep -q 'stats.file = ".*no-such-dir/run.json": cannot open it for writing' <<<"$out" ||
    fail "tvmm $cmd with an unwritable stats.file: rc=$rc $out"
done
run env TVMM_STATS="$dir/run.json" "$tvmm" check-config "$cfg"
grep -qF "file = \"$dir/run.json\"" <<<"$out" || fail "the printed configuration lost stats.file: $out"

# An ordinal of 400 digits (std::stod's out_of_range, which aborted) and budgets past what can be
# reserved or numbered are errors naming the key. Whether 200 TiB can be reserved depends on the
# machine's address space: where it can, the command must still not abort or quote tvmm's source.
printf '[device]\nordinal = "%s"\n' "$(printf '9%.0s' {1..400})" >"$dir/ordinal.toml"
run "$tvmm" check-config "$dir/ordinal.toml"
((rc == 1)) && grep -q 'device.ordinal = .*expected "auto" or a GPU number from 0 to 1024' <<<"$out" ||
  fail "a 400-digit ordinal: rc=$rc $out"
printf '[device]\nva_size = "1GiB"\n[host]\nbudget = "200TiB"\nnuma = "none"\n' >"$dir/host.toml"
run "$tvmm" check-config "$dir/host.toml"
((rc == 0)) || grep -q 'host.budget' <<<"$out" || fail "a 200 TiB host tier: rc=$rc $out"
printf '[device]\nbudget = "200TiB"\nva_size = "1GiB"\n' >"$dir/device.toml"
run "$tvmm" check-config "$dir/device.toml"
((rc == 0)) || grep -q 'device.budget' <<<"$out" || fail "a 200 TiB device: rc=$rc $out"
grep -q '\.cpp:' <<<"$out" && fail "the error quotes tvmm's source: $out"
printf '[host]\nbudget = "8192TiB"\n' >"$dir/slots.toml"
run "$tvmm" check-config "$dir/slots.toml"
((rc == 1)) && grep -q 'host.budget = 8192 TiB holds more than 2^32 pages' <<<"$out" || fail "2^32 host slots: rc=$rc $out"

# The printed configuration reads back as itself (numbers were printed with 6 significant digits).
printf '[device.sim]\nbandwidth_gbs = 25.123456789\ncopy_latency_us = 1234567\n' >"$dir/prec.toml"
run "$tvmm" check-config --no-env "$dir/prec.toml"
((rc == 0)) || fail "$out"
grep -q '^bandwidth_gbs = 25.123456789$' <<<"$out" || fail "bandwidth printed as: $(grep bandwidth_gbs <<<"$out")"
grep -v '^#' <<<"$out" >"$dir/printed.toml"
first=$out
run "$tvmm" check-config --no-env "$dir/printed.toml"
[[ $(grep -v '^#' <<<"$out") == "$(grep -v '^#' <<<"$first")" ]] || fail "the printed configuration reads back differently"

# tvmm info applies TVMM_* without --config (what tvmm_pager_create(NULL) and transparent mode get).
run env TVMM_HOST_BUDGET=3GiB "$tvmm" info
grep -q '(the host tier, 3 GiB)' <<<"$out" || fail "tvmm info ignored TVMM_HOST_BUDGET: $out"
run env TVMM_HOST_BUDGET=3GiB "$tvmm" info --no-env
grep -q '(the host tier, 1 GiB)' <<<"$out" || fail "tvmm info --no-env applied TVMM_HOST_BUDGET: $out"

# A cuda backend from the environment on a machine with no GPU: still a report, with a note on the
# placement (on_gpu.sh reads `tvmm info` to find a GPU).
run env TVMM_DEVICE_BACKEND=cuda "$tvmm" info
((rc == 0)) || fail "tvmm info with TVMM_DEVICE_BACKEND=cuda: $out"
if ! grep -q "CUDA driver found: [1-9]" <<<"$out"; then
  grep -q "note: the cuda backend cannot start here" <<<"$out" || fail "no note on the placement: $out"
fi

# tvmm stats: a directory and a missing file say which.
run "$tvmm" stats "$dir"
((rc == 1)) && grep -q 'is a directory' <<<"$out" || fail "tvmm stats DIR: rc=$rc $out"
run "$tvmm" stats "$dir/missing.json"
((rc == 1)) && grep -q 'No such file or directory' <<<"$out" || fail "tvmm stats MISSING: rc=$rc $out"
echo "tvmm check-config: ok"
