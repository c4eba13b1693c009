#!/usr/bin/env bash
# The check to run on a machine with an NVIDIA GPU (CI has none): builds the CUDA backend for sm_90
# in build-gpu, runs every kernel test (the CUDA ones must run, not skip), runs the CUDA tests under
# compute-sanitizer where it works, then prints nvidia-smi -L and a summary table. Exits non-zero
# on any failure. Every step has a time cap; all of them together stay under 7 minutes.
#
#   tools/gpu-check.sh            env: BUILD_DIR (build-gpu), JOBS (nproc), GPU_CHECK_SANITIZER=0
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
build=${BUILD_DIR:-build-gpu}
jobs=${JOBS:-$(nproc)}
mkdir -p "$build" || exit 1
log_dir=$build/gpu-check
mkdir -p "$log_dir"

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

# 1. The GPU (printed again at the end).
gpus=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(timeout 30 nvidia-smi -L 2>&1)
fi
n_gpus=$(grep -c '^GPU [0-9]' <<<"$gpus")
if [ "$n_gpus" -gt 0 ]; then
  row gpu PASS "$n_gpus device(s)"
else
  row gpu FAIL "nvidia-smi lists no GPU: this script is for a GPU machine"
fi

# 2. Configure. CMake finds /usr/local/cuda/bin/nvcc itself; elsewhere, the nvcc on PATH.
cuda_args=(-DPIPETRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
if [ ! -x /usr/local/cuda/bin/nvcc ] && [ -z "${CUDACXX:-}" ] && command -v nvcc >/dev/null; then
  cuda_args+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
fi
gen_args=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then gen_args=(-G Ninja); fi
t0=$(date +%s)
if timeout 90 cmake -S . -B "$build" "${gen_args[@]}" -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" \
     >"$log_dir/configure.log" 2>&1; then
  row configure PASS "$(elapsed "$t0")"
  configured=1
else
  tail_of "$log_dir/configure.log"
  echo "    (missing packages? tools/setup.sh installs them where a registry can be reached)"
  row configure FAIL "$(elapsed "$t0"), see $log_dir/configure.log"
  configured=0
fi

# 3. Build the kernel tests (and what they link: core, kernels with the CUDA backend).
built=0
if [ "$configured" = 1 ]; then
  t0=$(date +%s)
  if timeout 210 cmake --build "$build" -j "$jobs" --target kernel_tests \
       >"$log_dir/build.log" 2>&1; then
    row build PASS "$(elapsed "$t0"), -j$jobs"
    built=1
  else
    tail_of "$log_dir/build.log"
    row build FAIL "$(elapsed "$t0"), see $log_dir/build.log"
  fi
else
  row build SKIP "not configured"
fi

# 4. Every kernel test. On this machine a skipped CUDA test is a failure: the GPU went unused.
tests=$build/tests/kernel_tests
if [ "$built" = 1 ]; then
  t0=$(date +%s)
  timeout 60 "$tests" --gtest_color=no >"$log_dir/kernel_tests.log" 2>&1
  rc=$?
  n_ok=$(grep -c '^\[       OK \]' "$log_dir/kernel_tests.log")
  n_fail=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log_dir/kernel_tests.log")
  n_skip=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log_dir/kernel_tests.log")
  cuda_ok=$(grep -cE '^\[       OK \] \S*Cuda' "$log_dir/kernel_tests.log")
  cuda_skip=$(grep -cE '^\[  SKIPPED \] \S*Cuda\S* \(' "$log_dir/kernel_tests.log")
  detail="$(elapsed "$t0"): $n_ok passed, $n_fail failed, $n_skip skipped"
  detail+="; CUDA: $cuda_ok passed, $cuda_skip skipped"
  if [ "$rc" -ne 0 ]; then
    grep -E '^\[  FAILED  \]|Skipped|Failure|error' "$log_dir/kernel_tests.log" | head -40
    tail_of "$log_dir/kernel_tests.log" 15
    [ "$rc" -eq 124 ] && detail="timed out after 60s; $detail"
    row kernel_tests FAIL "exit $rc, $detail"
  elif [ "$cuda_skip" -gt 0 ] || [ "$cuda_ok" -eq 0 ]; then
    grep -m1 '^no GPU' "$log_dir/kernel_tests.log" | sed 's/^/    /'
    row kernel_tests FAIL "CUDA tests did not run on the GPU; $detail"
  else
    row kernel_tests PASS "$detail"
  fi
else
  row kernel_tests SKIP "not built"
fi

# 5. The CUDA tests under compute-sanitizer memcheck: out-of-bounds reads, which guards cannot see.
#    Where the sanitizer cannot attach to the device (gVisor machines) the step is skipped.
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ "${GPU_CHECK_SANITIZER:-1}" = 0 ]; then
  row memcheck SKIP "GPU_CHECK_SANITIZER=0"
elif [ "$built" != 1 ] || [ "$n_gpus" -eq 0 ]; then
  row memcheck SKIP "no build or no GPU"
elif [ ! -x "$sanitizer" ]; then
  row memcheck SKIP "compute-sanitizer not found"
else
  t0=$(date +%s)
  timeout 60 "$sanitizer" --tool memcheck --error-exitcode 1 "$tests" --gtest_color=no \
    --gtest_filter='*Cuda*' >"$log_dir/memcheck.log" 2>&1
  rc=$?
  summary=$(grep -m1 'ERROR SUMMARY' "$log_dir/memcheck.log")
  if [ "$rc" -eq 0 ] && grep -q 'ERROR SUMMARY: 0 errors' "$log_dir/memcheck.log"; then
    row memcheck PASS "$(elapsed "$t0"), $summary"
  elif grep -qiE 'device not supported|unable to (initiali[sz]e|attach)|LibraryNotLoaded' \
         "$log_dir/memcheck.log"; then
    why=$(grep -m1 -iE 'not supported|unable|LibraryNotLoaded' "$log_dir/memcheck.log")
    row memcheck SKIP "sanitizer cannot use this device: $why"
  else
    tail_of "$log_dir/memcheck.log" 30
    row memcheck FAIL "exit $rc, ${summary:-no summary}, see $log_dir/memcheck.log"
  fi
fi

# Last: the GPU list and the table.
echo
echo "== nvidia-smi -L"
if [ -n "$gpus" ]; then echo "$gpus"; else echo "(nvidia-smi not found or printed nothing)"; fi
echo
rev=$(git rev-parse --short HEAD 2>/dev/null || echo 'no commit')
echo "== gpu-check summary ($rev, build dir $build)"
printf '%-13s %-6s %s\n' step result detail
for r in "${rows[@]}"; do
  IFS='|' read -r step result detail <<<"$r"
  printf '%-13s %-6s %s\n' "$step" "$result" "$detail"
done
if [ "$failed" = 0 ]; then overall=PASS; else overall=FAIL; fi
printf '%-13s %s\n' overall "$overall"
exit "$failed"
