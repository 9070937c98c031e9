#!/usr/bin/env bash
# Packs a build for a GPU machine that has the NVIDIA driver and CUDA but none of tvmm's other packages
# (hwloc, liburing, GoogleTest, ...) and cannot install them: the build tree without its object files,
# debug info stripped, and every shared library its programs need that a CUDA image may lack.
# tools/gpu/check.sh runs it there. Usage: tools/gpu/pack.sh BUILD_DIR CARRY_DIR
set -euo pipefail
build=$(realpath "$1")
carry=$2
[[ -f $build/CMakeCache.txt ]] || { echo "pack.sh: $build is not a CMake build tree" >&2; exit 1; }
rm -rf "$carry"
mkdir -p "$carry/lib" "$carry/libcxx"
# The tree without objects, static archives and CMake's own files (ctest needs the CTestTestfile.cmake
# and gtest include files, which stay).
mkdir -p "$carry/build"
tar -C "$build" --exclude='*.o' --exclude='*.a' --exclude=CMakeFiles --exclude=test-tmp -cf - . | tar -C "$carry/build" -xf -
find "$carry/build" -type f \( -perm -u+x -o -name '*.so*' \) -exec sh -c \
  'file -b "$1" | grep -q ELF && strip --strip-debug "$1"' _ {} \;
# The libraries the programs load, less glibc and the driver (the machine's own). libstdc++ and libgcc_s
# go apart: check.sh uses them only where the machine's are older (PyTorch needs its own, newer ones).
find "$carry/build" -type f -exec sh -c 'file -b "$1" | grep -q ELF && ldd "$1" 2>/dev/null' _ {} \; |
  awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u | while read -r lib; do
    name=$(basename "$lib")
    case $name in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libcuda.so.*) ;;
      libtvmm*|libcudart.so.*) [[ $lib == "$build"/* ]] || cp -L "$lib" "$carry/lib/" ;;
      libstdc++.so.*|libgcc_s.so.*) cp -L "$lib" "$carry/libcxx/" ;;
      *) [[ $lib == "$build"/* ]] || cp -L "$lib" "$carry/lib/" ;;
    esac
  done
grep '^CMAKE_HOME_DIRECTORY:' "$build/CMakeCache.txt" | cut -d= -f2 >"$carry/source-dir"
echo "$build" >"$carry/build-dir"
du -sh "$carry"
