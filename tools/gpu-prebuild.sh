#!/usr/bin/env bash
# Builds, on a machine with this project's Debian build dependencies (no GPU needed), what
# tools/gpu-check.sh runs on a GPU machine that lacks them, packed into .gpu-prebuilt/prebuilt.tar.xz
# (git-ignored through .git/info/exclude), then checks the archive offline. Carry `.gpu-prebuilt`
# to the GPU machine and run tools/gpu-check.sh there. The archive holds:
#   bin/     kernel_tests, runtime_tests, cuda_resnet_bench, onnx-pipetrain (Release, sm_90)
#   lib/     every shared library they load (ldd) but glibc's and the CUDA libraries (cudart,
#            cuBLAS(Lt), cuDNN: the GPU machine's own, matching its driver; cuDNN alone is larger
#            than a carry): onnx, protobuf, OpenBLAS (+gfortran, quadmath), oneDNN (+OpenCL loader),
#            gomp, OpenMPI (+hwloc, libevent, udev; MPI_Init only runs under a launcher), zlib
#   lib/cxx/ this machine's libstdc++ and libgcc_s, which tools/gpu-prebuilt-env.sh puts on the
#            path only where the GPU machine's are older than BUILD_INFO's "needs" line
#   assets/  tools/bench/gpu_assets.py's ResNet-18 skeleton (weights zeroed: filled again, seeded,
#            on the GPU machine) and Fashion-MNIST at 3x32x32 (6,400 train, 1,000 val)
#   BUILD_INFO  source commit and folder (runtime_tests read models/ through it), build host, nvcc,
#            cuDNN, and the glibc / GLIBCXX / CXXABI versions the binaries need
# The offline check (also alone: --verify): unpack into a temporary folder, ldd of every binary
# with only the archive's library path must resolve everything to the archive, glibc or the CUDA
# libraries; then, in a chroot holding only the unpacked archive, glibc and the CUDA libraries
# (root only; no system libstdc++, so lib/cxx is exercised), and again under `env -i` with the path
# gpu-check.sh would choose, the packed onnx-pipetrain trains the packed ResNet-18 for 2 steps
# with --device cpu on the packed data.
#
#   tools/gpu-prebuild.sh [--verify]     env: BUILD_DIR (build-gpu-prebuilt), JOBS (2)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${BUILD_DIR:-build-gpu-prebuilt}
jobs=${JOBS:-2}
out=.gpu-prebuilt
archive=$out/prebuilt.tar.xz
# shellcheck source=tools/gpu-prebuilt-env.sh
. tools/gpu-prebuilt-env.sh
tmps=()
# shellcheck disable=SC2154  # t is the loop variable inside the trap string
trap 'for t in "${tmps[@]}"; do rm -rf "$t"; done' EXIT

is_glibc() {  # the libraries the archive leaves to the machine (glibc's)
  case "$1" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libutil.so.*|libresolv.so.*) return 0 ;;
  esac
  return 1
}
is_cuda() { case "$1" in libcuda.so*|libcudart*|libcublas*|libcudnn*|libnccl*) return 0 ;; esac; return 1; }

pack() {
  # Without MPI: the GPU check runs one process (stages oversubscribed on one GPU), and OpenMPI's
  # libraries alone (no mpirun, no MCA plugins) could not start a job there anyway; they would add
  # six libraries, one of which (libevent) needs glibc 2.36 where everything else needs 2.34.
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPETRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DPIPETRAIN_MPI=OFF >/dev/null
  cmake --build "$build" -j "$jobs" --target kernel_tests runtime_tests cuda_resnet_bench onnx-pipetrain
  local stage lib base
  stage=$(mktemp -d)
  tmps+=("$stage")
  mkdir -p "$stage/bin" "$stage/lib/cxx"
  cp "$build/tests/kernel_tests" "$build/tests/runtime_tests" "$build/tools/bench/cuda_resnet_bench" \
    "$build/tools/onnx-pipetrain" "$stage/bin/"
  for bin in "$stage"/bin/*; do
    ldd "$bin" | awk '$3 ~ /^\// {print $3}'
  done | sort -u | while read -r lib; do
    base=$(basename "$lib")
    if is_glibc "$base" || is_cuda "$base"; then continue; fi
    case "$base" in
      libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$stage/lib/cxx/" ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
  strip --strip-unneeded "$stage"/lib/*.so* "$stage"/lib/cxx/*.so* 2>/dev/null || true
  /usr/bin/python3 tools/bench/gpu_assets.py pack "$stage/assets"
  local needs cxx_needs
  # The versions referenced (undefined symbols), without and with the bundled C++ runtime.
  newest() {
    for f in "$@"; do objdump -T "$f"; done | grep -F '*UND*' | grep -oE '\b(GLIBC|GLIBCXX|CXXABI)_[0-9][0-9.]*' |
      sort -u -V | awk -F_ '{last[$1] = $0} END {print last["GLIBC"], last["GLIBCXX"], last["CXXABI"]}'
  }
  needs=$(newest "$stage"/bin/* "$stage"/lib/*.so*)
  cxx_needs=$(newest "$stage"/lib/cxx/*.so*)
  {
    echo "source $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty)')"
    echo "source_dir $PWD"
    echo "built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), nvcc $(/usr/local/cuda/bin/nvcc --version | grep -o 'release [0-9.]*')"
    echo "cuDNN built against: $(grep -E '#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ' /usr/local/cuda/include/cudnn_version.h | awk '{print $3}' | paste -sd.)"
    echo "needs $needs"
    echo "lib/cxx needs $cxx_needs"
  } >"$stage/BUILD_INFO"
  mkdir -p "$out"
  tar -C "$stage" -cJf "$archive.tmp" .
  mv "$archive.tmp" "$archive"
  local excl
  excl=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$excl")"
  grep -qx '/.gpu-prebuilt/' "$excl" 2>/dev/null || echo '/.gpu-prebuilt/' >>"$excl"
}

verify() {
  local dir bad=0 f lib base resolved n_arch=0 chrooted=skipped
  dir=$(mktemp -d /tmp/pt-prebuilt-verify.XXXXXX)
  tmps+=("$dir")
  tar -C "$dir" -xJf "$archive"
  echo "== offline check of $archive in $dir"
  local sizes
  sizes=$(cd "$dir" && du -sh bin lib/cxx assets && du -sh --exclude=cxx lib)
  # 1. ldd with the archive's path only (plus the CUDA libraries): everything from the archive,
  #    glibc, or CUDA; nothing missing.
  prebuilt_env "$dir"
  [ -n "$PT_ENV_PROBLEM" ] && { echo "FAIL: $PT_ENV_PROBLEM"; bad=1; }
  for f in "$dir"/bin/* "$dir"/lib/*.so*; do
    while read -r lib resolved; do
      base=$(basename "$lib")
      case "$resolved" in
        "$dir"/*) n_arch=$((n_arch + 1)) ;;
        "not found") echo "FAIL: $(basename "$f"): $lib not found"; bad=1 ;;
        *) if ! is_glibc "$base" && ! is_cuda "$base" && [[ "$base" != libstdc++* && "$base" != libgcc_s* ]]; then
             echo "FAIL: $(basename "$f"): $lib resolved outside the archive: $resolved"; bad=1
           fi ;;
      esac
    done < <(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$PT_LDP" ldd "$f" | awk '$2 == "=>" {print $1, ($3 == "not" ? "not found" : $3)}')
  done
  echo "ldd: $n_arch references resolved inside the archive; the rest glibc, libstdc++/libgcc_s, CUDA ($PT_ENV_NOTE)"
  /usr/bin/python3 tools/bench/gpu_assets.py init "$dir/assets/resnet18.skeleton.onnx" "$dir/assets/resnet18.onnx" >/dev/null
  local train_args=(--device cpu --steps 2 --batch-size 16 --data "$dir/assets/fmnist32/train" --quiet)
  # 2. A chroot with nothing but the archive, glibc and the CUDA libraries (hard links or copies).
  local chroot_bin
  chroot_bin=$(command -v chroot || echo /usr/sbin/chroot)
  if [ "$(id -u)" = 0 ] && [ -x "$chroot_bin" ]; then
    local cr="$dir/chroot" src
    mkdir -p "$cr/lib/x86_64-linux-gnu" "$cr/lib64" "$cr/cuda" "$cr/tmp" "$cr/dev" "$cr/proc"
    for src in /lib64/ld-linux-x86-64.so.2 /lib/x86_64-linux-gnu/{libc.so.6,libm.so.6,libdl.so.2,libpthread.so.0,librt.so.1}; do
      cp -lL "$src" "$cr$src" 2>/dev/null || cp -L "$src" "$cr$src"
    done
    for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
      src=$(readlink -f "$(lib_dir "$l")/$l")
      ln "$src" "$cr/cuda/$l" 2>/dev/null || cp "$src" "$cr/cuda/$l"
    done
    cp -a "$dir/bin" "$dir/lib" "$dir/assets" "$cr/"
    : >"$cr/dev/null"
    if env -i PATH=/bin LD_LIBRARY_PATH=/lib:/lib/cxx:/cuda OMP_NUM_THREADS=2 \
         "$chroot_bin" "$cr" /bin/onnx-pipetrain /assets/resnet18.onnx "${train_args[@]/$dir/}" --out /tmp/run --overwrite \
         >"$dir/chroot.log" 2>&1 && [ -f "$cr/tmp/run/metrics.csv" ]; then
      chrooted="ok ($(tail -1 "$cr/tmp/run/metrics.csv" | cut -d, -f1,3 | sed 's/,/ steps, last loss /'))"
      for f in kernel_tests runtime_tests cuda_resnet_bench; do
        env -i LD_LIBRARY_PATH=/lib:/lib/cxx:/cuda "$chroot_bin" "$cr" "/bin/$f" --help >"$dir/chroot-$f.log" 2>&1 || true
        if grep -q 'error while loading shared libraries' "$dir/chroot-$f.log"; then
          echo "FAIL: chroot: $f: $(grep -m1 'error while loading' "$dir/chroot-$f.log")"; bad=1
        fi
      done
    else
      sed 's/^/    /' "$dir/chroot.log" | tail -5
      chrooted="FAILED"
      bad=1
    fi
  fi
  echo "chroot (archive + glibc + CUDA libraries only, bundled libstdc++): $chrooted"
  # 3. env -i with the library path gpu-check.sh chooses.
  if env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$PT_LDP" OMP_NUM_THREADS=2 "$dir/bin/onnx-pipetrain" \
       "$dir/assets/resnet18.onnx" "${train_args[@]}" --out "$dir/run" --overwrite >"$dir/envi.log" 2>&1; then
    echo "env -i: onnx-pipetrain --device cpu on the packed ResNet-18 and data: ok ($(tail -1 "$dir/run/metrics.csv" | cut -d, -f1,3 | sed 's/,/ steps, last loss /'))"
  else
    echo "FAIL: env -i run:"; sed 's/^/    /' "$dir/envi.log" | tail -5
    bad=1
  fi
  local size
  size=$(stat -c %s "$archive")
  echo "archive: $archive, $((size / 1024)) KiB ($(awk -v s="$size" 'BEGIN {printf "%.1f", s / 1048576}') MiB of the 64 MiB carry); $(sed -n 1p "$dir/BUILD_INFO"); $(sed -n 's/^needs/needs/p' "$dir/BUILD_INFO")"
  awk '{printf "  %-8s %s unpacked\n", $2, $1}' <<<"$sizes"
  [ "$size" -lt $((48 * 1048576)) ] || { echo "FAIL: the archive passed 48 MiB; the carry limit is 64 MiB"; bad=1; }
  if [ "$bad" = 0 ]; then echo "offline check: PASS"; else echo "offline check: FAIL"; fi
  return "$bad"
}

if [ "${1:-}" != --verify ]; then
  pack
  echo "wrote $archive:"
  tar -tJvf "$archive" | awk '$3 > 100000 {print "  " $3 "  " $6}'
fi
[ -f "$archive" ] || { echo "no $archive: run tools/gpu-prebuild.sh first" >&2; exit 1; }
verify
