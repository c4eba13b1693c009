#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan; build-fuzz/) and runs each one
# for SECONDS (default 60) from seed corpora: tests/fuzz/seeds/<target>/, the bundled models and
# ONNX's node test models for the model target. Prints each target's execution count; a crash, or a
# UBSan report, leaves its input in build-fuzz/crashes/<target>/ and fails the script. A crash, once
# fixed, is kept in tests/fuzz/regressions/<target>/, which ctest replays in every build
# (fuzz_replay_*).
# Usage: tools/fuzz.sh [SECONDS|replay] [TARGET...]   (targets: model data checkpoint device_spec)
#   replay: run every input of build-fuzz/corpus/<target>/ once (libFuzzer -runs=0), no fuzzing:
#           with the default sanitizers, this confirms under ASan + UBSan what a faster build found.
# Environment:
#   JOBS                      build jobs, default nproc
#   FUZZ_SANITIZERS           sanitizers of the build: address,undefined (default), undefined, or none
#                             (coverage only: faster, but no memory-error checks and no -malloc_limit_mb;
#                             replay its corpus with the default build afterwards). The build folder is
#                             build-fuzz/ for the default, build-fuzz-undefined/ or build-fuzz-none/ else;
#                             the corpus, crashes and logs are build-fuzz/'s whatever the build.
#   FUZZ_WORKERS              fuzzing processes per target (default 1): N > 1 runs N libFuzzer processes
#                             on the same corpus folder (each reloads what the others add), each with its
#                             own log; the executions printed are the sum of their final stats.
#   PIPETRAIN_FUZZ_BUILD_DIR  default build-fuzz (the folder of the corpus, crashes and logs).
#   LAUNCHER                  compiler launcher: default ccache when installed, "none" for none.
# Logs: build-fuzz/logs/fuzz_<target>_<sanitizers>_<UTC time>[.<worker>].log.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/setup.sh --clang
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(model data checkpoint device_spec)
case $secs in
  replay) ;;
  '' | *[!0-9]* | 0) echo "fuzz.sh: SECONDS must be a positive number of seconds or 'replay', not '$secs'" >&2; exit 2 ;;
esac
sanitizers=${FUZZ_SANITIZERS:-address,undefined}
case $sanitizers in
  address,undefined | undefined | none) ;;
  *) echo "fuzz.sh: FUZZ_SANITIZERS=$sanitizers: expected address,undefined, undefined or none" >&2; exit 2 ;;
esac
workers=${FUZZ_WORKERS:-1}
case $workers in
  '' | *[!0-9]* | 0) echo "fuzz.sh: FUZZ_WORKERS=$workers: expected a positive number" >&2; exit 2 ;;
esac
state=${PIPETRAIN_FUZZ_BUILD_DIR:-build-fuzz}
build=$state
[ "$sanitizers" = address,undefined ] || build="$state-$sanitizers"
tag=${sanitizers/address,undefined/asan-ubsan}
launcher=${LAUNCHER:-$(command -v ccache || echo none)}
[ "$launcher" = none ] && launcher=""
mkdir -p "$build" "$state/logs"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DPIPETRAIN_CUDA=OFF -DPIPETRAIN_MPI=OFF -DPIPETRAIN_TESTS=OFF -DPIPETRAIN_FUZZ=ON \
  -DPIPETRAIN_FUZZ_SANITIZERS="$sanitizers" \
  -DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" \
  >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}" 2>&1 \
  | grep -vE "^\[ *[0-9]+%\] (Building|Linking|Built)" || true
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

# A UBSan report stops the run (it is a finding, as a crash is) and leaves its input as a crash-*.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
onnx_data=/usr/include/onnx/backend/test/data
status=0
for t in "${targets[@]}"; do
  corpus="$state/corpus/$t"
  mkdir -p "$corpus" "$state/crashes/$t"
  cp -n tests/fuzz/seeds/"$t"/* "$corpus"/ 2>/dev/null || true
  if [ "$t" = model ]; then
    cp -n models/*.onnx "$corpus"/
    # ONNX's node test models, one file per case (opset 6 to 17, 167 op types).
    for m in "$onnx_data"/{node,pytorch-converted,pytorch-operator,simple}/*/model.onnx; do
      [ -f "$m" ] && cp -n "$m" "$corpus/$(basename "$(dirname "$m")").onnx"
    done
  fi
  log="$state/logs/fuzz_${t}_${tag}_$(date -u +%Y%m%dT%H%M%S).log"
  # -malloc_limit_mb: one allocation over 1 GiB is a finding (sizes read from a file must be
  # checked against it first; only the ASan build can see it); -timeout: an input that takes 10 s
  # is a hang.
  opts=(-timeout=10 -rss_limit_mb=3072 -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$state/crashes/$t/")
  if [ "$secs" = replay ]; then
    opts+=(-runs=0)
  else
    opts+=(-max_total_time="$secs")
  fi
  logs=()
  start=$(date +%s)
  if [ "$workers" -eq 1 ]; then
    logs=("$log")
    "$build/tests/fuzz/fuzz_$t" "${opts[@]}" "$corpus" >"$log" 2>&1 || status=2
  else
    pids=()
    for ((w = 0; w < workers; w++)); do
      logs+=("${log%.log}.$w.log")
      "$build/tests/fuzz/fuzz_$t" "${opts[@]}" "$corpus" >"${logs[w]}" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || status=2; done
  fi
  runs=0
  for l in "${logs[@]}"; do
    n=$(grep -m1 -oE "stat::number_of_executed_units: [0-9]+" "$l" | grep -oE "[0-9]+$" || echo 0)
    runs=$((runs + n))
    if grep -qE "runtime error:|ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|SUMMARY: " "$l"; then
      status=2
    fi
  done
  if [ $status -eq 2 ]; then
    status=1
    echo "fuzz_$t: FAILED (input in $state/crashes/$t/, log ${logs[*]})"
    for l in "${logs[@]}"; do grep -m3 -E "ERROR|SUMMARY|runtime error" "$l" || true; done
  fi
  what="in $(($(date +%s) - start)) s"
  [ "$secs" = replay ] && what="(replay of the corpus)"
  echo "fuzz_$t ($tag, $workers worker(s)): $runs executions $what, corpus $(ls "$corpus" | wc -l) inputs, log ${logs[*]}"
done
exit $status
