#!/usr/bin/env bash
# The SpecTrain paper's setting as a what-if study: VGG-16 and ResNet-18 at CIFAR sizes on 4
# GTX 1080 Ti-class GPUs over PCIe 3 (no NVLink), batch 128, pipeline (1F1B, GPipe) against hybrid
# (stages x replicas) and data parallelism, from the cost model and the simulator. Results:
# docs/whatif-paper.md.
# Usage: tools/bench/paper_whatif.sh [BUILD_DIR]   (the models are exported into a temp folder)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bin=${1:-build}/tools/onnx-pipetrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 tools/bench/export_paper_models.py "$tmp" >/dev/null 2>&1
for m in vgg16_cifar vgg16_cifar_fc4096 resnet18_cifar; do
  echo "== $m"
  "$bin" "$tmp/$m.onnx" --gpus 4 --plan-only --whatif --device-spec gtx1080ti --link pcie3 \
    --batch-size 128 --out "$tmp/run_$m" | sed -n '/^Partition of/,$p' | grep -v '^reports:' | sed "s|$tmp/||"
done
