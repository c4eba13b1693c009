#!/usr/bin/env bash
# Installs what onnx-pipetrain needs to build and test, from Debian packages (and PyPI only for what
# Debian lacks). Idempotent: when everything is present it prints nothing and returns at once.
# --peers: also the peers of the benchmark tools/bench/peers.py (tools/bench/setup_peers.sh).
set -euo pipefail
peers=0
[ "${1:-}" = "--peers" ] && peers=1

# --clang: also clang 14 with its OpenMP runtime and sanitizer/libFuzzer runtimes, for the fuzz
# targets (tools/fuzz.sh) and the sanitizer builds (tools/sanitize.sh); CI's build does not need them.
extra=()
[ "${1:-}" = "--clang" ] && extra=(clang clang-14 libomp-14-dev libclang-rt-14-dev)
# --cron: also cron and flock (util-linux), which tools/nightly-cron.sh schedules .ci/nightly with.
[ "${1:-}" = "--cron" ] && extra=(cron util-linux)

debs=(cmake g++ make pkg-config
      libonnx-dev libonnx-testdata libprotobuf-dev protobuf-compiler
      libcli11-dev libgtest-dev libgmock-dev libopenblas-dev libdnnl-dev nlohmann-json3-dev zlib1g-dev
      libjpeg62-turbo-dev libpng-dev
      libopenmpi-dev openmpi-bin iproute2
      graphviz chromium dataset-fashion-mnist bible-kjv bible-kjv-text
      python3-torch python3-torchvision python3-onnx python3-numpy python3-sklearn python3-protobuf
      python3-pip python3-flatbuffers python3-coloredlogs python3-sympy python3-packaging
      python3-absl "${extra[@]}")

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ONNX Runtime (a test oracle) is not packaged by Debian: from PyPI, for Debian's python3, without
# letting pip replace any Debian package (its dependencies come from apt above).
if ! /usr/bin/python3 -c "import onnxruntime" 2>/dev/null; then
  echo "setup: installing onnxruntime (PyPI) for /usr/bin/python3"
  /usr/bin/python3 -m pip install -q --no-deps --break-system-packages --root-user-action=ignore \
    onnxruntime==1.18.1
fi
# TensorBoard's own event-file reader checks the --tensorboard files (tests/cli/test_trainer_ux.py);
# what that reader imports (absl, numpy, protobuf) comes from apt above.
if ! /usr/bin/python3 -c "import tensorboard" 2>/dev/null; then
  echo "setup: installing tensorboard (PyPI) for /usr/bin/python3"
  /usr/bin/python3 -m pip install -q --no-deps --break-system-packages --root-user-action=ignore \
    tensorboard==2.17.1
fi
# ONNX Runtime Training for tools/bench/peers.py, on demand (a virtual environment of its own).
if [ $peers -eq 1 ]; then
  "$(dirname "$0")/bench/setup_peers.sh"
fi
