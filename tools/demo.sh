#!/usr/bin/env bash
# The main job: installs what is missing, builds onnx-pipetrain (Release), then trains the bundled
# LeNet-5 with BatchNorm (models/fashion_lenet5_bn.onnx) on Fashion-MNIST as a 4-stage 1F1B pipeline
# with SpecTrain weight prediction, and says where the partition report, the curves and the trained
# model are. Stages run on the CPU, or on CUDA GPUs where the build and the machine have them.
# Extra arguments go to onnx-pipetrain (flags the demo does not set itself, e.g. --trace).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/setup.sh
build=${PIPETRAIN_BUILD_DIR:-build}
data=${PIPETRAIN_DEMO_DATA:-/usr/share/datasets/fashion-mnist}
out=runs/fashion_lenet5_bn

echo "demo: building onnx-pipetrain (Release) in $build/ (log: $build.build.log)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPETRAIN_CUDA="${PIPETRAIN_CUDA:-AUTO}" >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target onnx-pipetrain >"$build.build.log" 2>&1 \
  || { tail -50 "$build.build.log"; exit 1; }
built_s=$SECONDS
bin="$build/tools/onnx-pipetrain"

[ -f "$data/train-images-idx3-ubyte.gz" ] && [ -f "$data/t10k-images-idx3-ubyte.gz" ] \
  || { echo "demo: no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist, or set PIPETRAIN_DEMO_DATA)"; exit 1; }

# On the CPU each stage is a thread; with a CUDA build and at least one GPU the 4 stages go to the
# GPUs (several share one where there are fewer than 4: --oversubscribe).
device=(--device auto)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -gt 0 ] && "$bin" --version | grep -q '^  CUDA [0-9]'; then
  device=(--device cuda --oversubscribe)
fi

# SGD with momentum as in the SpecTrain paper (v = 0.9 v + 0.1 g, w -= lr v), a cosine schedule
# and a fixed seed (data order, bitwise-reproducible on the CPU): 6 epochs reach 90.8 % accuracy on
# the 10,000 test images (models/README.md has the measured figures).
echo "demo: training LeNet-5 + BatchNorm on Fashion-MNIST, 4 pipeline stages, 1F1B + SpecTrain"
"$bin" models/fashion_lenet5_bn.onnx --data "$data/train" --val-data "$data/t10k" \
  --gpus 4 --schedule 1f1b --weights spectrain "${device[@]}" \
  --epochs 6 --batch-size 64 --lr 0.3 --lr-schedule cosine --momentum 0.9 --seed 1 \
  --out "$out" --overwrite "$@"

cat <<EOF

demo: done in $SECONDS s (setup and build $built_s s, training $((SECONDS - built_s)) s). Results in $out/:
  partition report  $out/partition.html (stages, their nodes, times and memory; open in a browser)
  training curves   $out/curves.svg (loss and validation accuracy per step)
  trained model     $out/fashion_lenet5_bn.trained.onnx (plain ONNX, runs in any ONNX runtime)
  per-step metrics  $out/metrics.csv
EOF
