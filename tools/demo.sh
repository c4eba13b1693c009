#!/usr/bin/env bash
# The main job: installs what is missing, builds onnx-pipetrain (Release), trains the bundled
# default model (a dense classifier on sklearn's digits) and says where the results are.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/setup.sh
build=${PIPETRAIN_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPETRAIN_CUDA="${PIPETRAIN_CUDA:-AUTO}" >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target onnx-pipetrain >"$build.build.log" 2>&1 \
  || { tail -50 "$build.build.log"; exit 1; }
"$build/tools/onnx-pipetrain" models/digits_mlp.onnx \
  --data models/digits/train --val-data models/digits/val \
  --epochs 30 --batch-size 32 --lr 0.5 --momentum 0.9 --seed 1 --out runs/digits_mlp --overwrite "$@"
echo "results: runs/digits_mlp/ (digits_mlp.trained.onnx, metrics.csv)"
