#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan; build-fuzz/) and runs each one
# for SECONDS (default 60) from seed corpora: tests/fuzz/seeds/<target>/, the bundled models and
# ONNX's node test models for the model target. Prints each target's execution count; a crash
# leaves its input in build-fuzz/crashes/<target>/ and fails the script. A crash, once fixed, is
# kept in tests/fuzz/regressions/<target>/, which ctest replays in every build (fuzz_replay_*).
# Usage: tools/fuzz.sh [SECONDS] [TARGET...]   (targets: model data checkpoint device_spec)
# Environment: JOBS (build jobs, default nproc), PIPETRAIN_FUZZ_BUILD_DIR (default build-fuzz).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/setup.sh --clang
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(model data checkpoint device_spec)
build=${PIPETRAIN_FUZZ_BUILD_DIR:-build-fuzz}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DPIPETRAIN_CUDA=OFF -DPIPETRAIN_MPI=OFF -DPIPETRAIN_TESTS=OFF -DPIPETRAIN_FUZZ=ON \
  >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}" 2>&1 \
  | grep -vE "^\[ *[0-9]+%\] (Building|Linking|Built)" || true
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

onnx_data=/usr/include/onnx/backend/test/data
status=0
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  mkdir -p "$corpus" "$build/crashes/$t"
  cp -n tests/fuzz/seeds/"$t"/* "$corpus"/ 2>/dev/null || true
  if [ "$t" = model ]; then
    cp -n models/*.onnx "$corpus"/
    # ONNX's node test models, one file per case (opset 6 to 17, 167 op types).
    for m in "$onnx_data"/{node,pytorch-converted,pytorch-operator,simple}/*/model.onnx; do
      [ -f "$m" ] && cp -n "$m" "$corpus/$(basename "$(dirname "$m")").onnx"
    done
  fi
  log="$build/fuzz_$t.log"
  # -malloc_limit_mb: one allocation over 1 GiB is a finding (sizes read from a file must be
  # checked against it first); -timeout: an input that takes 10 s is a hang.
  if ! "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=3072 -malloc_limit_mb=1024 \
       -print_final_stats=1 -artifact_prefix="$build/crashes/$t/" "$corpus" >"$log" 2>&1; then
    status=1
    echo "fuzz_$t: FAILED (input in $build/crashes/$t/, log $log)"
    grep -m3 -E "ERROR|SUMMARY|runtime error" "$log" || true
  fi
  runs=$(grep -m1 -oE "stat::number_of_executed_units: [0-9]+" "$log" | grep -oE "[0-9]+$" || echo "?")
  echo "fuzz_$t: $runs executions in ${secs} s, corpus $(ls "$corpus" | wc -l) inputs"
done
exit $status
