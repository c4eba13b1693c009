#!/usr/bin/env bash
# Convergence benchmark: builds onnx-pipetrain for CPU in build-conv, then runs
# tools/bench/convergence.py (12 runs, ~8 minutes on 2 cores). Extra arguments go to the script,
# e.g. --lrs 0.1 or --report-only. Needs the dataset-fashion-mnist package (tools/setup.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cmake -S "$root" -B "$root/build-conv" -DPIPETRAIN_CUDA=OFF >/dev/null
cmake --build "$root/build-conv" -j"$(nproc)" --target onnx-pipetrain >/dev/null
exec /usr/bin/python3 "$root/tools/bench/convergence.py" --bin "$root/build-conv/tools/onnx-pipetrain" "$@"
