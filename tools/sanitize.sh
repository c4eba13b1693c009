#!/usr/bin/env bash
# Sanitizer builds, clang 14, CUDA off, separate from CI's build (see docs/reliability.md
# for why it is not part of .ci/run):
#   asan: AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/), every ctest suite, MPI included;
#         any UB report is fatal (-fno-sanitize-recover), leaks are reported at exit.
#   tsan: ThreadSanitizer (build-tsan/), the runtime and pipeline suites (runtime_tests, the
#         pipelined CLI tests of training_tools_tests, replicas_tests, schedule_tests): stage and
#         device workers, channels, the prefetcher, the replicas' gradient averaging.
#   tsan-all: ThreadSanitizer (the same build-tsan/) over every suite that starts threads: the tsan
#         suites, the other test binaries that do (kernel_tests, partitioner_tests, data_tests,
#         run_training_tests) and every suite that runs the tool (pipelines, prefetcher, image
#         decoding workers, the device-spec measurement pool, MPI's heartbeat threads), MPI and netns
#         included. Left out (tsan_skip below): suites that start no thread of the project's.
# Suppressions (tools/sanitizers/*.supp) cover third-party code only, each with its reason.
# Usage: tools/sanitize.sh [asan|tsan|tsan-all|all] [extra ctest args]   (all: asan, then tsan)
# Environment: JOBS (build jobs, default nproc); TARGETS (asan: build only these targets, e.g.
# "runtime_tests onnx-pipetrain" with -R '^runtime_tests$' for the runtime and pipeline suite);
# LAUNCHER (compiler launcher: default ccache when installed, "none" for none).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
what=${1:-all}
shift || true
case $what in
  asan | tsan | tsan-all | all) ;;
  *) echo "sanitize.sh: unknown mode '$what' (asan, tsan, tsan-all or all)" >&2; exit 2 ;;
esac
tools/setup.sh --clang
supp="$PWD/tools/sanitizers"
jobs=${JOBS:-$(nproc)}
launcher=${LAUNCHER:-$(command -v ccache || echo none)}
[ "$launcher" = none ] && launcher=""

build_tree() {  # build_tree DIR FLAGS TARGETS...
  local dir=$1 flags=$2
  shift 2
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DPIPETRAIN_CUDA=OFF -DCMAKE_CXX_FLAGS="$flags -fno-omit-frame-pointer" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
    -DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" >"$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log"; exit 1; }
  cmake --build "$dir" -j "$jobs" ${1:+--target "$@"} 2>&1 | grep -vE "^\[ *[0-9]+%\] (Building|Linking|Built)" || true
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
}

status=0
if [ "$what" = asan ] || [ "$what" = all ]; then
  # shellcheck disable=SC2086  # TARGETS is a list
  build_tree build-asan "-fsanitize=address,undefined -fno-sanitize-recover=undefined" ${TARGETS:-}
  # One OpenMP and one BLAS thread per process: the sanitizers' cost grows with threads, and the
  # suites' results do not depend on them. allocator_may_return_null: an allocation that fails
  # returns null as it does without ASan (tests check that the executors report it as an error).
  # PIPETRAIN_SANITIZER tells the tests what they run under (ASan cannot start under `ulimit -v`).
  ( cd build-asan &&
    PIPETRAIN_SANITIZER=asan ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:allocator_may_return_null=1" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp" \
    LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0" \
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
    ctest --output-on-failure -j "$jobs" "$@" ) || status=1
fi
tsan_suites='runtime_tests|training_tools_tests|separate_host_tests|replicas_tests|schedule_tests'
# tsan-all leaves out: importer_tests and the fuzz_*_replay binaries (parsing and import on the
# calling thread only), docs_tests (`--help` only), and the suites that run no binary of the
# project's (oracle_selftest, code_shape_tests, nightly_cron_tests).
tsan_skip='importer_tests|fuzz_replay_.*|docs_tests|oracle_selftest|code_shape_tests|nightly_cron_tests'
# libomp is not built with TSan: OpenMP regions run on one thread, so every report is about the
# project's own threads (stage workers, channels, prefetcher, progress).
tsan_env() {
  PIPETRAIN_SANITIZER=tsan TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1:ignore_noninstrumented_modules=1:suppressions=$supp/tsan.supp" \
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$@"
}
if [ "$what" = tsan-all ]; then
  build_tree build-tsan "-fsanitize=thread" onnx-pipetrain runtime_tests kernel_tests partitioner_tests \
    data_tests run_training_tests
  ( cd build-tsan && tsan_env ctest --output-on-failure -j "$jobs" -E "^($tsan_skip)\$" "$@" ) || status=1
fi
if [ "$what" = tsan ] || [ "$what" = all ]; then
  build_tree build-tsan "-fsanitize=thread" onnx-pipetrain runtime_tests
  ( cd build-tsan && tsan_env ctest --output-on-failure -R "^($tsan_suites)\$" "$@" ) || status=1
fi
exit $status
