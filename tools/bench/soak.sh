#!/usr/bin/env bash
# Soak benchmark (not a CI test): 20,000 pipelined steps on 4 CPU stages of the
# digits MLP, checkpoints every 500, validation every 1,000; resident memory after warm-up must grow
# less than 1 %. Builds onnx-pipetrain in ${PIPETRAIN_BUILD_DIR:-build} first. Extra arguments go to
# tools/bench/soak.py (--steps N, --gpus K, --batch-size B, --out DIR). Results: docs/reliability.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${PIPETRAIN_BUILD_DIR:-build}
[ -d "$build" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target onnx-pipetrain >/dev/null
exec /usr/bin/python3 tools/bench/soak.py "$build/tools/onnx-pipetrain" "$@"
