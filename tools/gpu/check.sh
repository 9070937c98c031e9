#!/usr/bin/env bash
# tvmm on a real GPU, in one run: the "gpu" tests, the interposer under PyTorch, and the benchmarks that
# need the card (docs/gpu.md). For a GPU machine that cannot install packages: run tools/gpu/pack.sh
# here first, carry its folder there, then, in the repository root on that machine:
#   tools/gpu/check.sh CARRY_DIR OUT_DIR [STEP...]
# STEP: env tests torch vmm train replay replay3 behind sanitize nvme (default: all but replay3, behind,
# sanitize and nvme, in that order). Every step runs under a time limit and its log goes to OUT_DIR/check.log; the table of
# steps, their status and seconds comes last. TORCH_BUDGET sets the device budget of the torch step (default 4GiB, of 11.4 GB the program holds).
set -uo pipefail
die() { echo "check.sh: $*" >&2; exit 1; }
(($# >= 2)) || die "usage: check.sh CARRY_DIR OUT_DIR [STEP...]"
[[ -f $1/source-dir && -f $1/build-dir && -d $1/build ]] || die "$1 is not a folder tools/gpu/pack.sh made"
carry=$(realpath "$1")
out=$(realpath -m "$2")
shift 2
steps=("$@")
((${#steps[@]})) || steps=(env tests torch vmm train replay)
mkdir -p "$out" || die "cannot make $out"
exec > >(tee "$out/check.log") 2>&1
tee_pid=$!

# The build's paths are absolute: put this tree and the carried build where it was configured.
src=$(cat "$carry/source-dir")
build=$(cat "$carry/build-dir")
if [[ $(realpath "$src" 2>/dev/null) != "$(realpath .)" ]]; then
  [[ -e $src || -L $src ]] && die "$src exists and is not this tree"
  mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src" || die "cannot link $src to this tree"
fi
if [[ ! -e $build ]]; then
  [[ -L $build ]] && rm "$build"  # a dangling link from an earlier carry
  ln -s "$carry/build" "$build" || die "cannot link $build to the carried build"
fi
[[ -x $build/bin/tvmm ]] || die "$build/bin/tvmm is missing: is $build the carried build?"
export LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ! "$build/bin/tvmm" --help >/dev/null 2>&1; then
  echo "check.sh: the machine's libstdc++ does not do; using the carried one"
  export LD_LIBRARY_PATH=$carry/libcxx:$LD_LIBRARY_PATH
fi
bin=$build/bin
preload=$build/lib/libtvmm_preload.so

results=()
step() {  # step [--stdout FILE] NAME SECONDS COMMAND...: the command's standard output to FILE if given
  local to=/dev/stdout
  if [[ $1 == --stdout ]]; then
    to=$2
    shift 2
  fi
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  echo "=== $name (limit ${limit}s): $*"
  timeout -k 5 "$limit" "$@" >"$to"
  rc=$?
  results+=("$(printf '%-34s rc %-4s %4ss' "$name" "$rc" $((SECONDS - start)))")
  echo "=== $name: rc $rc in $((SECONDS - start))s"
}
losses() { sed -n 's/^step \([0-9]*\) loss \([0-9.]*\).*/\1 \2/p' "$1"; }
step_ms() { sed -n 's/.* time_ms \([0-9.]*\)$/\1/p' "$1" | tail -n +3 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for s in "${steps[@]}"; do
  case $s in
    env)
      step nvidia-smi 20 nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
      step "tvmm info" 30 "$bin/tvmm" info
      ;;
    tests)
      step "ctest -L gpu" 200 ctest --test-dir "$build" -L gpu --output-on-failure --timeout 40 -j1
      ;;
    torch)  # 8 GiB of parameters, gradients and Adam state (10.8 GB at PyTorch's peak) under the budget
      mlp=(python3 examples/pytorch_mlp.py --steps 8 --width 8192 --layers 8)
      tb=${TORCH_BUDGET:-4GiB}
      budget=(TVMM_DEVICE_BACKEND=cuda TVMM_DEVICE_BUDGET=$tb TVMM_HOST_BUDGET=16GiB TVMM_LOG=warn)
      step --stdout "$out/torch-ref.txt" "pytorch reference" 90 "${mlp[@]}" --peak
      step --stdout "$out/torch-preload.txt" "pytorch preload $tb" 120 env LD_PRELOAD="$preload" "${budget[@]}" \
        TVMM_STATS_FILE="$out/torch-preload-stats.json" "${mlp[@]}"
      step --stdout "$out/torch-pluggable.txt" "pytorch pluggable $tb" 120 env "${budget[@]}" "${mlp[@]}" \
        --pluggable "$preload"
      for f in ref preload pluggable; do
        echo "--- torch-$f:"; cat "$out/torch-$f.txt"
      done
      for f in preload pluggable; do
        if [[ -n $(losses "$out/torch-ref.txt") ]] && diff <(losses "$out/torch-ref.txt") <(losses "$out/torch-$f.txt") >/dev/null; then
          results+=("$(printf '%-34s %s' "torch $f losses" "same as the reference")")
        else
          results+=("$(printf '%-34s %s' "torch $f losses" "DIFFER or missing")")
        fi
        results+=("$(printf '%-34s %s ms (reference %s ms)' "torch $f median step" "$(step_ms "$out/torch-$f.txt")" \
                      "$(step_ms "$out/torch-ref.txt")")")
      done
      ;;
    vmm)
      step "bench vmm" 60 "$bin/tvmm-bench" --device cuda --workload vmm --json "$out/vmm.json"
      ;;
    train)
      step "bench train" 90 "$bin/tvmm-bench" --device cuda --workload train --ratios 1.5 2 3 \
        --policies lru trace --peers memory naive um --json "$out/train.json"
      ;;
    replay)
      traces=()
      for t in resnet18 gpt2 mobilenet_v2 widefc encoder lstm; do traces+=("bench/traces/$t.trace.gz"); done
      step "bench replay 2x" 120 "$bin/tvmm-bench" --device cuda --workload replay --trace "${traces[@]}" --ratios 2 \
        --op-time h100-sxm --policies trace belady lru --peers memory naive --host-fraction 0 --iterations 5 \
        --json "$out/replay.json"
      ;;
    replay3)  # 3x, where the policies part (docs/gpu.md, "The fourth run"); the wide-FC CNN does not fit there
      traces=()
      for t in resnet18 gpt2 mobilenet_v2 encoder lstm; do traces+=("bench/traces/$t.trace.gz"); done
      traces+=(bench/traces/held-out/vit.trace.gz bench/traces/held-out/unet.trace.gz)
      step "bench replay 3x" 120 "$bin/tvmm-bench" --device cuda --workload replay --trace "${traces[@]}" --ratios 3 \
        --op-time h100-sxm --policies trace belady lru --peers memory --host-fraction 0 --iterations 5 \
        --json "$out/replay3.json"
      ;;
    behind)  # write-behind off against on, interleaved, where the simulator says it helps most (1.5x)
      traces=(bench/traces/gpt2.trace.gz bench/traces/resnet18.trace.gz bench/traces/encoder.trace.gz
              bench/traces/held-out/vit.trace.gz)
      for rep in 1 2 3; do
        for wb in off on; do
          step "bench replay 1.5x, write-behind $wb ($rep)" 90 "$bin/tvmm-bench" --device cuda --workload replay \
            --trace "${traces[@]}" --ratios 1.5 --op-time h100-sxm --policies trace --peers none \
            --host-fraction 0.5 --iterations 10 --write-behind "$wb" --json "$out/behind-$wb-$rep.json"
        done
      done
      for wb in off on; do
        step "bench train 1.5x 2x, write-behind $wb" 60 "$bin/tvmm-bench" --device cuda --workload train \
          --layers 4 --tensor-mib 4 --compute-us 300 --ratios 1.5 2 --policies trace --peers none \
          --host-fraction 0.5 --iterations 10 --write-behind "$wb" --json "$out/behind-train-$wb.json"
      done
      ;;
    sanitize)  # compute-sanitizer: memcheck (memory errors, leaks, failed API calls) and racecheck; rc 9 = a report
      cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
      if [[ -z $cs ]]; then
        results+=("$(printf '%-34s %s' "sanitize" "no compute-sanitizer on this machine")")
        continue
      fi
      mc=("$cs" --tool memcheck --report-api-errors explicit --error-exitcode 9)
      # The conformance tests make two failing calls on purpose (cuEventElapsedTime on untimed events).
      step "memcheck gpu tests" 120 "$cs" --tool memcheck --report-api-errors no --error-exitcode 9 --leak-check full \
        "$build/bin/tvmm_gpu_tests" '--gtest_filter=*cuda*:CudaKernels.*'
      step "memcheck unified memory test" 60 "${mc[@]}" --leak-check full "$build/bin/tvmm_bench_gpu_tests"
      step "memcheck replay" 90 "${mc[@]}" "$bin/tvmm-bench" --device cuda --workload replay \
        --trace bench/traces/gpt2.trace.gz --ratios 2 --policies trace --peers none --host-fraction 0.5 --iterations 3
      # fork: under the sanitizer its child did not finish within 20 s (it passes in 0.6 s without).
      for c in oversubscribe passthrough threads launches context stream-ordered null-stream-free stats pointers \
               pitched small driver driver-allocations capture; do
        step "memcheck preload vmm $c" 30 "${mc[@]}" --target-processes all env LD_PRELOAD="$preload" \
          TVMM_DEVICE_BACKEND=cuda TVMM_DEVICE_BUDGET=16MiB TVMM_HOST_BUDGET=96MiB TVMM_TRANSPARENT_MEMORY=vmm \
          TVMM_LOG=error "$build/bin/tvmm_cuda_client_gpu" "$c"
      done
      step "racecheck kernels" 60 "$cs" --tool racecheck --error-exitcode 9 "$build/bin/tvmm_gpu_tests" \
        '--gtest_filter=CudaKernels.*'
      ;;
    nvme)  # two traces with half the device budget in host memory, the rest in files on this disk
      disk=$(mktemp -d /var/tmp/tvmm-nvme.XXXXXX)
      step "bench replay 2x, NVMe tier" 120 "$bin/tvmm-bench" --device cuda --workload replay \
        --trace bench/traces/resnet18.trace.gz bench/traces/gpt2.trace.gz --ratios 2 3 --op-time h100-sxm \
        --policies trace lru --peers memory naive --host-fraction 0.5 --disk-dir "$disk" --iterations 5 \
        --json "$out/nvme.json"
      rm -rf "$disk"
      ;;
    *) echo "check.sh: no step '$s' (env tests torch vmm train replay replay3 behind sanitize nvme)" ;;
  esac
done
echo
echo "=== summary"
printf '%s\n' "${results[@]}"
exec >&- 2>&-
wait "$tee_pid"  # the log is whole before the script ends
