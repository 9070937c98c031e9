#!/usr/bin/env bash
# Installs the Debian packages tvmm needs to build and test, only those missing.
# Uses sudo when not root. Safe to run repeatedly: it does nothing when all are present.
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libboost-dev          # Boost.Intrusive (header-only)
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  libtomlplusplus-dev   # TOML policy config files
  libcli11-dev          # the tvmm command-line tool
  nlohmann-json3-dev    # JSON: tvmm stats, and the tests that check tvmm's JSON output
  zlib1g-dev            # tvmm-bench reads gzip-compressed model traces
  gnuplot-nox           # tvmm-bench --out draws its plots
  liburing-dev          # the NVMe tier's io_uring backend
  libxxhash-dev         # NVMe page checksums (XXH3)
  libhwloc-dev          # NUMA topology and host-memory / thread placement
  libzstd-dev           # the CUDA driver emulator reads nvcc's zstd-compressed PTX
  fio                   # bench/nvme_vs_fio.sh compares the NVMe tier with it
)

# `install-deps.sh fuzz` also installs clang and its libFuzzer runtime; `install-deps.sh traces`
# PyTorch for bench/traces/capture.py (the shipped traces do not need it).
if [ "${1:-}" = "fuzz" ]; then
  packages+=(clang libclang-rt-14-dev)
elif [ "${1:-}" = "traces" ]; then
  packages+=(python3-torch python3-torchvision)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "tvmm: missing packages: ${missing[*]}; install them with your package manager (apt-get not found)" >&2
  exit 1
fi

# Not root: apt-get needs sudo, and sudo needs this user's rights and, unless they are passwordless, a
# terminal to ask for the password on. When either is missing, say exactly what to run instead.
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  how="install them as root and run make again:
    su -c 'apt-get update && apt-get install -y ${missing[*]}'
  or give your user sudo rights (as root: usermod -aG sudo $(id -un); then log in again) and run make
  again from a terminal, where sudo can ask for your password"
  if ! command -v sudo >/dev/null 2>&1; then
    echo "tvmm: missing packages: ${missing[*]}. You are not root and sudo is not installed; $how" >&2
    exit 1
  fi
  if sudo -n true 2>/dev/null; then
    sudo_cmd=(sudo)  # passwordless sudo
  elif [ -t 0 ]; then
    echo "tvmm: installing ${missing[*]} needs root; sudo will ask for your password" >&2
    if ! sudo -v; then
      echo "tvmm: missing packages: ${missing[*]}. sudo refused (your user may not have sudo rights); $how" >&2
      exit 1
    fi
    sudo_cmd=(sudo)
  else
    echo "tvmm: missing packages: ${missing[*]}. You are not root, and sudo needs a password but there is no" \
      "terminal to ask for it on (or your user has no sudo rights); $how" >&2
    exit 1
  fi
fi

echo "tvmm: installing missing packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
