#!/usr/bin/env bash
# gpu-check.sh — the CUDA backend's checks and measurements on a GPU machine (issue #5), in one go.
#
#   scripts/gpu-check.sh                 build (Release, sm_90, only what is needed) and run
#   scripts/gpu-check.sh --bundle DIR    build here, then copy the programs and the shared libraries
#                                        they need into DIR (to carry to a machine whose image lacks
#                                        nerve's build dependencies: hwloc, yaml-cpp, fmt, GTest, OpenBLAS)
#   scripts/gpu-check.sh --prebuilt DIR  run the programs of such a bundle instead of building
#
# Runs: nerve-info; the CUDA tests (fake driver, real GPU, the device-interface suite's CUDA case);
# nerve-bench-cuda (copy bandwidths, W5 vs the device-to-device copy, W12 vs the host<->device
# copies, completion latency of the GPU-written flag vs cudaStreamSynchronize / cudaEventSynchronize,
# the two device pools); the vector add example on every GPU and on one; the heterogeneous Cholesky
# at n = 16384 next to cuSOLVER potrf alone. Logs and results go to $OUT when set (else
# <build>/gpu-check/), with summary.txt listing each step, its status and seconds. Sized to finish in
# under 5 minutes on one H200 with 16 cores. Without a GPU every step says "no CUDA device" and the
# script still exits 0 (a failing step makes it exit 1).
#
# Environment: BUILD_DIR (default build-gpu), CUDA_ARCHS (default 90), JOBS (default nproc).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
[[ $build = /* ]] || build=$root/$build
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
mode=build
bundle=""
case "${1:-}" in
  --bundle) mode=bundle; bundle=${2:?--bundle needs a directory} ;;
  --prebuilt) mode=prebuilt; bundle=${2:?--prebuilt needs a directory} ;;
  "") ;;
  *) echo "usage: $0 [--bundle DIR | --prebuilt DIR]" >&2; exit 2 ;;
esac
[[ -z $bundle || $bundle = /* ]] || bundle=$root/$bundle

programs=(tools/nerve-info/nerve-info tests/backend/test_cuda_fake tests/backend/test_cuda_gpu
          tests/backend/test_backend_plugin bench/cuda/nerve-bench-cuda
          examples/vector_add_cuda/vector_add_cuda examples/cholesky_cuda/cholesky_cuda)
targets=(nerve-info test_cuda_fake test_cuda_gpu test_backend_plugin nerve-bench-cuda vector_add_cuda cholesky_cuda)

build_here() {
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" \
    -DNERVE_WITH_CUDA=ON -DNERVE_BUILD_TESTS=ON -DNERVE_BUILD_BENCH=ON -DNERVE_BUILD_EXAMPLES=ON \
    -DNERVE_BUILD_TOOLS=ON >"$out/configure.log" 2>&1 || { echo "configure failed: $out/configure.log"; return 1; }
  cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$out/build.log" 2>&1 ||
    { echo "build failed: $out/build.log"; tail -20 "$out/build.log"; return 1; }
}

if [[ $mode == prebuilt ]]; then
  bin=$bundle
  export LD_LIBRARY_PATH="$bundle/lib:${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  bin=$build
fi
out=${OUT:-$bin/gpu-check}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
failed=0

# step NAME TIMEOUT COMMAND...: run with a time limit, log to $out/NAME.log, record status and seconds.
step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS status
  echo "== $name"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  status=$?
  cat "$out/$name.log"
  local verdict=ok
  if ((status != 0)); then verdict="FAILED (exit $status)"; failed=1; fi
  printf '%-28s %-18s %4ds\n' "$name" "$verdict" $((SECONDS - start)) | tee -a "$summary"
}

# program NAME: where a program is (NAME is its path in the build tree; a bundle holds it flat).
program() { if [[ $mode == prebuilt ]]; then echo "$bin/$(basename "$1")"; else echo "$bin/$1"; fi; }

if [[ $mode != prebuilt ]]; then
  start=$SECONDS
  build_here || exit 1
  printf '%-28s %-18s %4ds\n' build ok $((SECONDS - start)) | tee -a "$summary"
fi

if [[ $mode == bundle ]]; then
  mkdir -p "$bundle/lib"
  for program in "${programs[@]}"; do cp "$build/$program" "$bundle/"; done
  # Every shared library the programs load, except the C library's own and the GPU driver's.
  for program in "${programs[@]}"; do ldd "$build/$program"; done | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda)\.so' |
    grep -Ev '/(libcudart|libcublas|libcublasLt|libcusolver|libcusparse|libnvJitLink)\.so' |
    xargs -r cp -L -t "$bundle/lib"
  # The CUDA libraries (1 GB) are not carried: the GPU machine's image has the same toolkit.
  strip --strip-unneeded "$bundle"/* "$bundle"/lib/* 2>/dev/null
  du -sh "$bundle"
  exit 0
fi

command -v nvidia-smi >/dev/null && step nvidia-smi 30 nvidia-smi
step nerve-info 60 "$(program tools/nerve-info/nerve-info)"
step test_cuda_fake 120 "$(program tests/backend/test_cuda_fake)"
step test_cuda_gpu 200 "$(program tests/backend/test_cuda_gpu)"
step device_interface_cuda 60 "$(program tests/backend/test_backend_plugin)" --gtest_filter='*cuda*'
step bench_cuda 240 "$(program bench/cuda/nerve-bench-cuda)" --json "$out/bench.json" --w12-mib 16,4,64
vector_add=$(program examples/vector_add_cuda/vector_add_cuda)
step vector_add_all_gpus 60 "$vector_add" --n 268435456 --chunk 16777216 --repeat 5
step vector_add_one_gpu 60 env CUDA_VISIBLE_DEVICES=0 "$vector_add" --n 268435456 --chunk 16777216 --repeat 5
cholesky=$(program examples/cholesky_cuda/cholesky_cuda)
step w6_cholesky_16384 150 "$cholesky" --n 16384 --tile 1024 --baseline --check
step w6_cholesky_16384_gpu_only 90 "$cholesky" --n 16384 --tile 1024 --gpu-only

echo "== summary ($out)"
cat "$summary"
exit $failed
