#!/usr/bin/env bash
# The NVMe tier against fio on the same directory: fio (io_uring engine, O_DIRECT, bs=2M) and the tier's
# own write and read paths (tvmm-nvme-bench: io_uring, O_DIRECT, per-page XXH3 checksums verified on
# read), with the same queue depth and file size. Each is run RUNS times, fio and tvmm alternating,
# and the median is kept. Writes are measured in the steady state (the file's blocks already written
# once: fio's file is laid out by an unmeasured first write; tvmm-nvme-bench writes twice and reports
# the second pass, and its first pass as tvmm_first_write_mbs).
# Prints both and ends with `read_ratio R` and `write_ratio W` (tvmm / fio). Target: both >= 0.9.
#
#   bench/nvme_vs_fio.sh DIR                 # 1 GiB, qd 32
#   SIZE=4G QD=64 RUNS=5 bench/nvme_vs_fio.sh /mnt/nvme0/tmp
set -euo pipefail

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
  echo "usage: $0 DIR   (an existing directory on the drive to measure; SIZE, QD, RUNS, BENCH from the environment)" >&2
  exit 2
fi
dir=$1
size=${SIZE:-1G}   # fio syntax; tvmm-nvme-bench reads the same number as GiB/MiB
qd=${QD:-32}
runs=${RUNS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
bench=${BENCH:-$root/build/bin/tvmm-nvme-bench}
command -v fio >/dev/null || { echo "fio is not installed: apt-get install fio" >&2; exit 1; }
[ -x "$bench" ] || { echo "$bench not found: build first (make test, or cmake --build build)" >&2; exit 1; }

tvmm_size=${size/%G/GiB}
tvmm_size=${tvmm_size/%M/MiB}
fio_file="$dir/.tvmm-fio-$$"
trap 'rm -f "$fio_file"' EXIT

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

fio_mbs() {  # fio_mbs read|write -> MB/s (1e6 bytes/s)
  fio --name=tvmm-cmp --filename="$fio_file" --rw="$1" --bs=2M --iodepth="$qd" --size="$size" \
      --ioengine=io_uring --direct=1 --output-format=json 2>/dev/null |
    awk -F: '/"bw_bytes"/ { gsub(/[ ,]/, "", $2); if ($2 + 0 > m) m = $2 + 0 } END { printf "%.1f\n", m / 1e6 }'
}

echo "directory $dir  size $size  qd $qd  bs 2M  runs $runs (median)"
fio_mbs write >/dev/null  # lay the file out
fw=(); fr=(); tw=(); tr=()
for ((i = 1; i <= runs; i++)); do
  fw+=("$(fio_mbs write)")
  fr+=("$(fio_mbs read)")
  out=$("$bench" "$dir" --size "$tvmm_size" --bs 2MiB --qd "$qd" --backend uring)
  [ "$i" -eq 1 ] && echo "$out" | head -1
  tw+=("$(echo "$out" | awk '/^tvmm_write_mbs/ {print $2}')")
  tr+=("$(echo "$out" | awk '/^tvmm_read_mbs/ {print $2}')")
  echo "run $i: fio write ${fw[-1]} read ${fr[-1]} MB/s; tvmm write ${tw[-1]} read ${tr[-1]} MB/s"
done
fio_w=$(printf '%s\n' "${fw[@]}" | median); fio_r=$(printf '%s\n' "${fr[@]}" | median)
tv_w=$(printf '%s\n' "${tw[@]}" | median); tv_r=$(printf '%s\n' "${tr[@]}" | median)
echo "fio_write_mbs $fio_w"
echo "fio_read_mbs $fio_r"
echo "tvmm_write_mbs $tv_w"
echo "tvmm_read_mbs $tv_r"
awk -v t="$tv_r" -v f="$fio_r" 'BEGIN { printf "read_ratio %.3f\n", t / f }'
awk -v t="$tv_w" -v f="$fio_w" 'BEGIN { printf "write_ratio %.3f\n", t / f }'
