#!/usr/bin/env bash
# The check to run on a machine with an NVIDIA GPU (CI has none). Gets the CUDA kernel tests and
# the ResNet-18 conv+BN benchmark either from a carried prebuilt archive (.gpu-prebuilt/, made by
# tools/gpu-prebuild.sh where the Debian build deps exist: the GPU machine of this workplace has
# CUDA, CMake, ninja and PyTorch but not libonnx/protobuf/OpenBLAS/oneDNN/GoogleTest) or by
# building for sm_90 in build-gpu. Then: every kernel test (the CUDA ones must run, not skip), the
# CUDA tests under compute-sanitizer where it works, the benchmark against PyTorch, and a short
# table last. Exits non-zero on any failure. A global budget (GPU_CHECK_BUDGET, 420 s) keeps the
# whole run under 8 minutes: a step that would not fit is skipped and says so.
#
#   tools/gpu-check.sh     env: PREBUILT (.gpu-prebuilt), BUILD_DIR (build-gpu), JOBS (nproc),
#                               GPU_CHECK_SANITIZER=0, GPU_CHECK_BUDGET (seconds)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
start=$(date +%s)
budget=${GPU_CHECK_BUDGET:-420}
prebuilt=${PREBUILT:-.gpu-prebuilt}
build=${BUILD_DIR:-build-gpu}
jobs=${JOBS:-$(nproc)}
log_dir=${GPU_CHECK_LOGS:-$build/gpu-check}
mkdir -p "$log_dir" || exit 1

rows=()      # "step|result|detail" for the summary table
failed=0
row() {      # row STEP RESULT DETAIL
  rows+=("$1|$2|$3")
  [ "$2" = FAIL ] && failed=1
  return 0
}
tail_of() {  # the last lines of a log, indented, when a step fails
  echo "---- last lines of $1"
  tail -n "${2:-25}" "$1" | sed 's/^/    /'
}
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }
left() { echo $(( budget - ($(date +%s) - start) )); }
# cap WANT: the seconds a step may take, WANT or what is left of the budget; 0 when under 20.
cap() {
  local l; l=$(left)
  if [ "$l" -lt 20 ]; then echo 0; elif [ "$l" -lt "$1" ]; then echo "$l"; else echo "$1"; fi
}

# 1. The GPU (printed again at the end).
gpus=""
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(timeout 30 nvidia-smi -L 2>&1); fi
n_gpus=$(grep -c '^GPU [0-9]' <<<"$gpus")
if [ "$n_gpus" -gt 0 ]; then
  row gpu PASS "$n_gpus device(s)"
else
  row gpu FAIL "nvidia-smi lists no GPU: this script is for a GPU machine"
fi

# The directory holding a library, from the loader's cache, the CUDA toolkit or pip's nvidia-*
# wheels (PyTorch's CUDA libraries); empty when not found.
lib_dir() {
  local f
  f=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n {print $NF; exit}')
  if [ -z "$f" ]; then
    f=$(find /usr/local/cuda/lib64/ /usr/local/cuda/targets/x86_64-linux/lib/ /usr/local/cuda/lib/ \
              /usr/lib/x86_64-linux-gnu/ -maxdepth 1 -name "$1" 2>/dev/null | head -1)
  fi
  if [ -z "$f" ] && command -v python3 >/dev/null; then
    local site
    site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
    [ -n "$site" ] && f=$(find "$site/nvidia" -name "$1" 2>/dev/null | head -1)
  fi
  [ -n "$f" ] && dirname "$f"
}

# 2. The binaries: carried prebuilt archive, else configure and build here.
tests="" bench=""
run_env=()   # how our binaries are started (the carried libraries' path, for a prebuilt archive)
if [ -f "$prebuilt/prebuilt.tar.xz" ] || [ -x "$prebuilt/bin/kernel_tests" ]; then
  t0=$(date +%s)
  dir=$prebuilt
  if [ -f "$prebuilt/prebuilt.tar.xz" ]; then
    dir=$(mktemp -d /tmp/pt-prebuilt.XXXXXX)
    tar -C "$dir" -xJf "$prebuilt/prebuilt.tar.xz"
  fi
  missing=""
  cuda_dirs=""
  for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
    d=$(lib_dir "$l")
    if [ -z "$d" ]; then missing+=" $l"; else cuda_dirs+="$d:"; fi
  done
  # Only our binaries get the carried libraries: PyTorch (the benchmark's reference) keeps its own.
  ldp="$dir/lib:$cuda_dirs${LD_LIBRARY_PATH:-}"
  run_env=(env "LD_LIBRARY_PATH=$ldp")
  tests=$dir/bin/kernel_tests
  bench=$dir/bench.sh
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$ldp" "$dir/bin/cuda_resnet_bench" >"$bench"
  chmod +x "$bench"
  info=$(head -1 "$dir/BUILD_INFO" 2>/dev/null)
  if [ -n "$missing" ]; then
    row binaries FAIL "prebuilt, but no$missing on this machine"
  elif ! "${run_env[@]}" ldd "$tests" | grep -q 'not found'; then
    built_rev=$(grep -o '[0-9a-f]\{40\}' <<<"$info" | head -1)
    head_rev=$(git rev-parse HEAD 2>/dev/null || echo unknown)
    stale=""
    if [ "$head_rev" != unknown ] && [ "$built_rev" != "$head_rev" ]; then
      stale="; STALE: the tree is at ${head_rev:0:12}, rerun tools/gpu-prebuild.sh"
      echo "warning: $prebuilt was built from ${built_rev:0:12}, the tree is at ${head_rev:0:12}"
    fi
    row binaries PASS "prebuilt (${info:0:19}), $(elapsed "$t0")$stale"
  else
    "${run_env[@]}" ldd "$tests" | grep 'not found' | sed 's/^/    /'
    row binaries FAIL "prebuilt, libraries missing (above)"
    tests=""
  fi
else
  cuda_args=(-DPIPETRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
  if [ ! -x /usr/local/cuda/bin/nvcc ] && [ -z "${CUDACXX:-}" ] && command -v nvcc >/dev/null; then
    cuda_args+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
  fi
  gen_args=()
  if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then gen_args=(-G Ninja); fi
  t0=$(date +%s)
  if timeout 60 cmake -S . -B "$build" "${gen_args[@]}" -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" \
       >"$log_dir/configure.log" 2>&1; then
    t1=$(date +%s)
    c=$(cap 200)
    if [ "$c" -gt 0 ] && timeout "$c" cmake --build "$build" -j "$jobs" --target kernel_tests cuda_resnet_bench \
         >"$log_dir/build.log" 2>&1; then
      row binaries PASS "built in $build: configure $((t1 - t0))s, build $(elapsed "$t1"), -j$jobs"
      tests=$build/tests/kernel_tests
      bench=$build/tools/bench/cuda_resnet_bench
    else
      tail_of "$log_dir/build.log"
      row binaries FAIL "build failed or passed ${c}s, see $log_dir/build.log"
    fi
  else
    tail_of "$log_dir/configure.log"
    echo "    (no build deps here? make .gpu-prebuilt with tools/gpu-prebuild.sh on a dev machine and carry it)"
    row binaries FAIL "configure failed and no $prebuilt/prebuilt.tar.xz, see $log_dir/configure.log"
  fi
fi

# 3. Every kernel test. On this machine a skipped CUDA test is a failure: the GPU went unused.
n_cuda_fail=0
if [ -n "$tests" ] && [ "$(cap 120)" -gt 0 ]; then
  t0=$(date +%s)
  timeout "$(cap 120)" "${run_env[@]}" "$tests" --gtest_color=no >"$log_dir/kernel_tests.log" 2>&1
  rc=$?
  n_ok=$(grep -c '^\[       OK \]' "$log_dir/kernel_tests.log")
  n_fail=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log_dir/kernel_tests.log")
  n_skip=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log_dir/kernel_tests.log")
  cuda_ok=$(grep -cE '^\[       OK \] \S*Cuda' "$log_dir/kernel_tests.log")
  cuda_skip=$(grep -cE '^\[  SKIPPED \] \S*Cuda\S* \(' "$log_dir/kernel_tests.log")
  n_cuda_fail=$(grep -cE '^\[  FAILED  \] \S*Cuda\S* .*\([0-9]+ ms\)$' "$log_dir/kernel_tests.log")
  detail="$(elapsed "$t0"): $n_ok passed, $n_fail failed, $n_skip skipped"
  detail+="; CUDA: $cuda_ok passed, $n_cuda_fail failed, $cuda_skip skipped"
  if [ "$rc" -ne 0 ]; then
    grep -E '^\[  FAILED  \].*ms\)$' "$log_dir/kernel_tests.log" | head -40
    grep -E 'Failure|differ|error' "$log_dir/kernel_tests.log" | head -20
    [ "$rc" -eq 124 ] && detail="timed out; $detail"
    row kernel_tests FAIL "exit $rc, $detail"
  elif [ "$cuda_skip" -gt 0 ] || [ "$cuda_ok" -eq 0 ]; then
    grep -m1 'no GPU' "$log_dir/kernel_tests.log" | sed 's/^/    /'
    row kernel_tests FAIL "CUDA tests did not run on the GPU; $detail"
  else
    row kernel_tests PASS "$detail"
  fi
  libs=$(grep -m1 '^cuda libraries:' "$log_dir/kernel_tests.log" | cut -d: -f2-)
  [ -n "$libs" ] && row libraries INFO "${libs# }"
else
  row kernel_tests SKIP "no binaries or no time left"
fi

# 4. The ResNet-18 conv+BN work of a training step against PyTorch (validated against the CPU
#    kernels first). Before memcheck: the timing matters more than the sanitizer's second look.
if [ -n "$bench" ] && [ "$(cap 150)" -gt 0 ]; then
  t0=$(date +%s)
  timeout "$(cap 150)" python3 tools/bench/cuda_resnet_vs_torch.py "$bench" --batch 64 --iters 20 \
    >"$log_dir/bench.log" 2>&1
  rc=$?
  cat "$log_dir/bench.log"
  result=$(grep -m1 '^RESULT' "$log_dir/bench.log" | cut -d' ' -f2-)
  if [ "$rc" -eq 0 ]; then
    row bench PASS "$(elapsed "$t0"): ResNet-18 conv+BN, batch 64: $result"
  elif [ "$rc" -eq 77 ]; then
    row bench SKIP "$(grep -m1 -E 'SKIP|ours' "$log_dir/bench.log")"
  else
    row bench FAIL "exit $rc, see $log_dir/bench.log"
  fi
else
  row bench SKIP "no benchmark binary or no time left"
fi

# 5. The CUDA tests under compute-sanitizer memcheck (out-of-bounds reads guards cannot see).
#    Where the sanitizer cannot attach to the device (gVisor machines) the step is skipped.
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ "${GPU_CHECK_SANITIZER:-1}" = 0 ]; then
  row memcheck SKIP "GPU_CHECK_SANITIZER=0"
elif [ -z "$tests" ] || [ "$n_gpus" -eq 0 ]; then
  row memcheck SKIP "no binaries or no GPU"
elif [ ! -x "$sanitizer" ]; then
  row memcheck SKIP "compute-sanitizer not found"
elif [ "$(cap 120)" -lt 30 ]; then
  row memcheck SKIP "under 30 s of the budget left"
else
  t0=$(date +%s)
  timeout "$(cap 120)" "${run_env[@]}" "$sanitizer" --tool memcheck --error-exitcode 1 "$tests" --gtest_color=no \
    --gtest_filter='*Cuda*.Float*:CudaDevice.*:*CudaRelu*' >"$log_dir/memcheck.log" 2>&1
  rc=$?
  summary=$(grep -m1 'ERROR SUMMARY' "$log_dir/memcheck.log")
  if [ "$rc" -eq 0 ] && grep -q 'ERROR SUMMARY: 0 errors' "$log_dir/memcheck.log"; then
    row memcheck PASS "$(elapsed "$t0"), $summary"
  elif grep -qiE 'device not supported|unable to (initiali[sz]e|attach)|LibraryNotLoaded' "$log_dir/memcheck.log"; then
    why=$(grep -m1 -iE 'not supported|unable|LibraryNotLoaded' "$log_dir/memcheck.log")
    row memcheck SKIP "sanitizer cannot use this device: $why"
  elif [ "$rc" -eq 124 ]; then
    row memcheck SKIP "timed out after its cap (the suite is slow under the sanitizer)"
  else
    tail_of "$log_dir/memcheck.log" 30
    row memcheck FAIL "exit $rc, ${summary:-no summary}, see $log_dir/memcheck.log"
  fi
fi

# 6. Training end to end on the GPU needs runtime support (CUDA devices, streams, transfers) that
#    does not exist yet: docs/cuda.md says what is missing.
row train_resnet18 SKIP "runtime has no CUDA device yet (docs/cuda.md); kernels only"

# Last: the GPU list and the table.
echo
echo "== nvidia-smi -L"
if [ -n "$gpus" ]; then echo "$gpus"; else echo "(nvidia-smi not found or printed nothing)"; fi
echo
rev=$(git rev-parse --short HEAD 2>/dev/null || echo 'no commit')
echo "== gpu-check summary ($rev, $(elapsed "$start") of ${budget}s budget, logs in $log_dir)"
printf '%-15s %-6s %s\n' step result detail
for r in "${rows[@]}"; do
  IFS='|' read -r step result detail <<<"$r"
  printf '%-15s %-6s %s\n' "$step" "$result" "$detail"
done
if [ "$failed" = 0 ]; then overall=PASS; else overall=FAIL; fi
printf '%-15s %s\n' overall "$overall"
exit "$failed"
