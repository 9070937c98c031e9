#!/usr/bin/env bash
# tools/setup/install-deps.sh as a non-root user with packages missing, over stub commands: with sudo
# missing, or needing a password with no terminal to ask on, it says exactly what to run instead; with
# passwordless sudo it installs through sudo. Nothing real is installed: apt-get is a stub.
set -euo pipefail
script=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install_deps_test: FAILED: $*"; exit 1; }

# A PATH of stubs and the few real tools the script uses.
stubs() {  # $1: folder; $2: "none" (no sudo), "password" (needs one), "free" (passwordless)
  local bin=$1
  mkdir -p "$bin"
  for tool in grep bash cat; do ln -sf "$(command -v $tool)" "$bin/$tool"; done
  printf '#!/bin/bash\n[ "${1:-}" = "-un" ] && echo alice || echo 1000\n' > "$bin/id"
  printf '#!/bin/bash\nexit 1\n' > "$bin/dpkg-query"  # nothing is installed
  printf '#!/bin/bash\necho "apt-get $*" >> "%s/calls"\n' "$bin" > "$bin/apt-get"
  case $2 in
    password) printf '#!/bin/bash\n[ "$1" = "-n" ] && exit 1\necho "sudo $*" >> "%s/calls"\nexit 1\n' "$bin" > "$bin/sudo" ;;
    free) printf '#!/bin/bash\n[ "$1" = "-n" ] && exit 0\necho "sudo $*" >> "%s/calls"\n"$@"\n' "$bin" > "$bin/sudo" ;;
  esac
  chmod +x "$bin"/*
}
run() {  # $1: folder of stubs; prints stderr, returns the script's status
  PATH=$1 "$(command -v bash)" "$script" < /dev/null 2>&1
}

stubs "$tmp/nosudo" none
out=$(run "$tmp/nosudo") && fail "no sudo: it succeeded"
grep -q "sudo is not installed" <<<"$out" || fail "no sudo: $out"
grep -q "su -c 'apt-get update && apt-get install -y cmake g++" <<<"$out" || fail "no sudo, no command: $out"
grep -q "usermod -aG sudo alice" <<<"$out" || fail "no sudo, no sudo rights hint: $out"
[ ! -e "$tmp/nosudo/calls" ] || fail "no sudo: something was run: $(cat "$tmp/nosudo/calls")"

stubs "$tmp/password" password
out=$(run "$tmp/password") && fail "sudo with a password and no terminal: it succeeded"
grep -q "no terminal" <<<"$out" || fail "sudo with a password, no terminal: $out"
grep -q "su -c 'apt-get update && apt-get install -y" <<<"$out" || fail "password, no command: $out"
[ ! -e "$tmp/password/calls" ] || fail "sudo was run without a terminal: $(cat "$tmp/password/calls")"

stubs "$tmp/free" free
run "$tmp/free" > /dev/null || fail "passwordless sudo: the script failed"
grep -q "^sudo apt-get install -y -qq --no-install-recommends cmake" "$tmp/free/calls" ||
  fail "passwordless sudo did not install through sudo: $(cat "$tmp/free/calls")"
echo "install_deps_test: ok"
