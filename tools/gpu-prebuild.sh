#!/usr/bin/env bash
# Builds, on a machine with this project's Debian build dependencies (no GPU needed), what
# tools/gpu-check.sh runs on a GPU machine that lacks them: kernel_tests and cuda_resnet_bench for
# sm_90, with the non-CUDA shared libraries they need (OpenBLAS, oneDNN and theirs), packed into
# .gpu-prebuilt/prebuilt.tar.xz (git-ignored through .git/info/exclude). The CUDA libraries
# (cudart, cuBLAS, cuDNN) are not packed: the GPU machine's own are used (cuDNN alone is larger
# than a carry). Carry `.gpu-prebuilt` to the GPU machine and run tools/gpu-check.sh there.
#
#   tools/gpu-prebuild.sh          env: BUILD_DIR (build-gpu-prebuilt), JOBS (2)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${BUILD_DIR:-build-gpu-prebuilt}
jobs=${JOBS:-2}
out=.gpu-prebuilt
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPETRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$build" -j "$jobs" --target kernel_tests cuda_resnet_bench

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$build/tests/kernel_tests" "$build/tools/bench/cuda_resnet_bench" "$stage/bin/"
# Every shared library they load, except glibc's, the C++ runtime (newer on the GPU machine) and
# the CUDA libraries (the GPU machine's own, matching its driver).
for bin in "$stage"/bin/*; do
  ldd "$bin" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
    libcuda*|libcublas*|libcudnn*|libnccl*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
{
  echo "source $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), nvcc $(/usr/local/cuda/bin/nvcc --version | grep -o 'release [0-9.]*')"
  echo "cuDNN built against: $(grep -E '#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ' /usr/local/cuda/include/cudnn_version.h | awk '{print $3}' | paste -sd.)"
} >"$stage/BUILD_INFO"
mkdir -p "$out"
tar -C "$stage" -cJf "$out/prebuilt.tar.xz" .
excl=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$excl")"
grep -qx '/.gpu-prebuilt/' "$excl" 2>/dev/null || echo '/.gpu-prebuilt/' >>"$excl"
echo "wrote $out/prebuilt.tar.xz ($(du -h "$out/prebuilt.tar.xz" | cut -f1); carry limit 64 MiB):"
tar -tJvf "$out/prebuilt.tar.xz" | awk '{print "  " $3 "  " $6}'
