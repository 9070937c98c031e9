#!/usr/bin/env bash
# The NVMe tier against fio on the same directory: fio (io_uring engine, O_DIRECT, bs=2M) and the tier's
# own write and read paths (tvmm-nvme-bench: io_uring, O_DIRECT, per-page XXH3 checksums verified on
# read), with the same queue depth and file size. Each is run RUNS times, fio and tvmm alternating.
# Writes are measured in the steady state (the file's blocks already written once: fio's file is laid
# out by an unmeasured first write; tvmm-nvme-bench writes twice and reports the second pass, and its
# first pass as tvmm_first_write_mbs).
# Prints each run, the spread (min/median/max) of every series and of the per-run ratios (tvmm / fio
# of the same run: the runs are interleaved, so a ratio compares the two under the same conditions),
# and ends with `read_ratio R` and `write_ratio W`, the medians of the per-run ratios. Target: both >= 0.9.
#
# BUSY=N keeps N other CPUs busy (a spinning shell each, at normal priority) during every run of both
# tools, as a training process keeps them busy; BUSY=auto is one less than the CPUs there are.
#
#   bench/nvme_vs_fio.sh DIR                 # 1 GiB, qd 32, 7 runs
#   BUSY=auto bench/nvme_vs_fio.sh DIR       # the same with the other cores busy
#   SIZE=4G QD=64 RUNS=9 bench/nvme_vs_fio.sh /mnt/nvme0/tmp
set -euo pipefail

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
  echo "usage: $0 DIR   (an existing directory on the drive to measure; SIZE, QD, RUNS, BENCH from the environment)" >&2
  exit 2
fi
dir=$1
size=${SIZE:-1G}   # fio syntax; tvmm-nvme-bench reads the same number as GiB/MiB
qd=${QD:-32}
runs=${RUNS:-7}
busy=${BUSY:-0}
[ "$busy" = auto ] && busy=$(($(nproc) - 1))
[[ "$busy" =~ ^[0-9]+$ ]] || { echo "BUSY must be a number of CPUs or auto, not '$busy'" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
bench=${BENCH:-$root/build/bin/tvmm-nvme-bench}
command -v fio >/dev/null || { echo "fio is not installed: apt-get install fio" >&2; exit 1; }
[ -x "$bench" ] || { echo "$bench not found: build first (make test, or cmake --build build)" >&2; exit 1; }

tvmm_size=${size/%G/GiB}
tvmm_size=${tvmm_size/%M/MiB}
fio_file="$dir/.tvmm-fio-$$"
spinners=()
stop_spinners() {
  ((${#spinners[@]})) && kill "${spinners[@]}" 2>/dev/null && wait "${spinners[@]}" 2>/dev/null
  spinners=()
  return 0
}
trap 'stop_spinners; rm -f "$fio_file"' EXIT
for ((c = 0; c < busy; c++)); do
  bash -c 'while :; do :; done' &
  spinners+=($!)
done

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
spread() { sort -g | awk '{v[NR]=$1} END {printf "min %s median %s max %s", v[1], v[int((NR+1)/2)], v[NR]}'; }

fio_mbs() {  # fio_mbs read|write -> MB/s (1e6 bytes/s)
  fio --name=tvmm-cmp --filename="$fio_file" --rw="$1" --bs=2M --iodepth="$qd" --size="$size" \
      --ioengine=io_uring --direct=1 --output-format=json 2>/dev/null |
    awk -F: '/"bw_bytes"/ { gsub(/[ ,]/, "", $2); if ($2 + 0 > m) m = $2 + 0 } END { printf "%.1f\n", m / 1e6 }'
}

echo "directory $dir  size $size  qd $qd  bs 2M  runs $runs  busy CPUs $busy (of $(nproc))"
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
rr=(); wr=()
for ((i = 0; i < runs; i++)); do
  rr+=("$(awk -v t="${tr[i]}" -v f="${fr[i]}" 'BEGIN { printf "%.3f\n", t / f }')")
  wr+=("$(awk -v t="${tw[i]}" -v f="${fw[i]}" 'BEGIN { printf "%.3f\n", t / f }')")
done
for series in fw fr tw tr rr wr; do
  declare -n values=$series
  case $series in
    fw) label="fio write MB/s " ;; fr) label="fio read MB/s  " ;; tw) label="tvmm write MB/s" ;;
    tr) label="tvmm read MB/s " ;; rr) label="read ratio     " ;; wr) label="write ratio    " ;;
  esac
  echo "$label $(printf '%s\n' "${values[@]}" | spread)"
done
echo "fio_write_mbs $(printf '%s\n' "${fw[@]}" | median)"
echo "fio_read_mbs $(printf '%s\n' "${fr[@]}" | median)"
echo "tvmm_write_mbs $(printf '%s\n' "${tw[@]}" | median)"
echo "tvmm_read_mbs $(printf '%s\n' "${tr[@]}" | median)"
echo "read_ratio $(printf '%s\n' "${rr[@]}" | median)"
echo "write_ratio $(printf '%s\n' "${wr[@]}" | median)"
