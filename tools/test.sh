#!/usr/bin/env bash
# Installs what is missing, builds everything (CUDA backend too when nvcc exists) and runs every
# test suite through ctest; the output of a failing test is shown. Usage: tools/test.sh [ctest args]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/setup.sh
build=${PIPETRAIN_BUILD_DIR:-build}
jobs=$(nproc)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPETRAIN_CUDA="${PIPETRAIN_CUDA:-AUTO}" >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
grep -E "CUDA backend" "$build.configure.log" || true
cmake --build "$build" -j "$jobs" 2>&1 | grep -vE "^\[ *[0-9]+%\] (Building|Linking|Built)" || true
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
cd "$build"
ctest --output-on-failure -j "$jobs" "$@"
