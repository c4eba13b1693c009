#!/usr/bin/env bash
# Installs the peers of tools/bench/peers.py that Debian does not package: ONNX Runtime Training
# (onnxruntime-training-cpu from PyPI) into a virtual environment of its own, beside Debian's
# python3 (whose torch, onnx and numpy 1.24 it sees: the package needs numpy < 2, and its module is
# also called onnxruntime, so it must not replace the inference package tools/setup.sh installs).
# Idempotent; called by `tools/setup.sh --peers`. The folder: $PIPETRAIN_PEERS_VENV, by default
# ~/.cache/onnx-pipetrain/peers-venv (peers.py looks there too).
set -euo pipefail

venv=${PIPETRAIN_PEERS_VENV:-$HOME/.cache/onnx-pipetrain/peers-venv}
ok() { "$venv/bin/python" -c "import numpy, onnxruntime.training.api as a; assert int(numpy.__version__.split('.')[0]) < 2" \
         2>/dev/null; }
ok && exit 0

if ! /usr/bin/python3 -c "import ensurepip" 2>/dev/null; then
  echo "setup_peers: installing python3-venv"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
echo "setup_peers: installing onnxruntime-training-cpu 1.19.2 (PyPI) into $venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
# Its dependencies (numpy < 2, onnx, protobuf, sympy, flatbuffers, packaging) come from Debian
# (tools/setup.sh); cerberus and h5py, which it lists, are not used by the training API.
"$venv/bin/python" -m pip install -q --no-deps "onnxruntime-training-cpu==1.19.2"
ok || { echo "setup_peers: onnxruntime.training does not import in $venv (numpy must be < 2)" >&2; exit 1; }
