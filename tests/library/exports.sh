#!/usr/bin/env bash
# libtvmm.so exports the public API of include/tvmm and nothing else: every dynamic symbol it defines is
# a C function that tvmm.h declares, or belongs to a class or function that the public C++ headers
# declare. One more C function is exported on purpose: tvmm_internal_error_slot (vmm/api/c_api.cpp), the
# last-error slot shared with libtvmm_preload.so.
set -euo pipefail
# No `printf ... | grep -q` below: grep -q exits at its first match, printf may then die of SIGPIPE, and
# pipefail turns the match into a failure (it reported a declared function as missing, once, in CI's
# ASan stage). Here-strings have no writer to kill.
lib="$1"
header="$2"
declared=$(grep -o 'tvmm_[a-z_]*(' "$header" | tr -d '(' | sort -u)
public='Pager|Tensor|Pin|Stream|StreamTimer|Config|error|invalid_argument|out_of_memory|config_error|device_error'
public+='|io_error|timeout_error|format_bytes|parse_size|load_config|read_config_file|parse_config|apply_environment'
public+='|to_toml|to_string|to_json|driver_times|release_together'
symbols=$(nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' | c++filt)
total=$(printf '%s\n' "$symbols" | grep -c . || true)
bad=$(printf '%s\n' "$symbols" | grep -Ev "^tvmm_[a-z_]+$|^((typeinfo|typeinfo name|vtable) for )?tvmm::($public)\b" || true)
for c in $(printf '%s\n' "$symbols" | grep -E '^tvmm_[a-z_]+$' || true); do
  if [ "$c" != tvmm_internal_error_slot ] && ! grep -qx -- "$c" <<<"$declared"; then bad+=$'\n'"$c (not in tvmm.h)"; fi
done
bad=$(printf '%s\n' "$bad" | grep . || true)
if [ -n "$bad" ]; then
  echo "libtvmm.so exports $(printf '%s\n' "$bad" | grep -c .) of $total symbols that are not the public API:"
  printf '%s\n' "$bad" | head -20
  exit 1
fi
# Declared in the public headers, so they must be there (a program calling one would not link):
for must in '^tvmm::to_json(\[abi:cxx11\])?\(tvmm::Stats const&\)$' '^typeinfo for tvmm::config_error$' \
            '^typeinfo for tvmm::error$' '^vtable for tvmm::out_of_memory$' '^tvmm_version$'; do
  if ! grep -qE -- "$must" <<<"$symbols"; then
    echo "libtvmm.so does not export $must"
    exit 1
  fi
done
c_api=$(printf '%s\n' "$symbols" | grep -c '^tvmm_' || true)
cxx_api=$(printf '%s\n' "$symbols" | grep -c '^tvmm::Pager::' || true)
if [ "$c_api" -lt 10 ] || [ "$cxx_api" -lt 3 ]; then
  echo "libtvmm.so exports too little: $c_api C functions, $cxx_api tvmm::Pager members (of $total symbols)"
  exit 1
fi
echo "libtvmm.so exports $total symbols, all public API ($c_api C functions)"
