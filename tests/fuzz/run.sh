#!/usr/bin/env bash
# Runs a libFuzzer target for a bounded time, seeded with the example configs (copied: libFuzzer adds
# the inputs it finds to its first corpus directory). Args: FUZZER SECONDS
set -euo pipefail
fuzzer=$1
seconds=${2:-60}
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cp "$(dirname "$0")/../../configs/"*.toml "$corpus/"
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 "$corpus"
