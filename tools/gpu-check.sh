#!/usr/bin/env bash
# The check to run on a machine with an NVIDIA GPU (CI has none). Gets the CUDA kernel tests, the
# ResNet-18 conv+BN benchmark, the onnx-pipetrain command line and the ResNet-18 / Fashion-MNIST
# assets either from a carried prebuilt archive (.gpu-prebuilt/, made by tools/gpu-prebuild.sh where
# the Debian build deps exist: the GPU machine of this workplace has CUDA, CMake, ninja and PyTorch
# but not libonnx/protobuf/OpenBLAS/oneDNN/GoogleTest) or by building for sm_90 in build-gpu. Then:
#   kernel_tests    every kernel test (the CUDA ones must run, not skip)
#   runtime_tests   the CUDA runtime tests (CudaRuntime.*: device arithmetic, trainer and pipelines
#                   of CUDA stages against CPU stages; they must run, not skip)
#   bench           the conv+BN work of a ResNet-18 step against PyTorch
#   cli             the packed onnx-pipetrain on this machine: 3 CPU steps of ResNet-18, and the
#                   number of CUDA devices it sees (from its refusal of one stage too many)
#   train_resnet18  ResNet-18 (3x32x32, batch 64) on 4 stages oversubscribed on one GPU, SpecTrain,
#                   200 steps of Fashion-MNIST: the loss must fall (mean of steps 1-10 against
#                   191-200); wall time, samples/s, validation accuracy
#   cost_model      the train_resnet18 run's plan against what it measured (stage times, samples/s;
#                   tools/bench/cost_model_bench.py --partition; target 25 %, issue #33)
#   replicas        2 stages x 2 replicas (--replicas) on the one GPU against CPU stages (weights)
#   cuda_graphs     the digits MLP on 2 stages with and without --no-cuda-graphs: weights bit for
#                   bit equal, graphs replayed, samples/s of both
#   step_vs_torch   one stage (--device cuda --gpus 1) against PyTorch eager on the same GPU:
#                   mean ms per training step and the ratio (tools/bench/step_vs_torch.py)
#   memcheck        the CUDA tests under compute-sanitizer where it works
#   gpu_bench       ResNet-50 (batch 32, 128) and a GPT-2-small-shaped decoder in fp32, tf32 and
#                   bf16 on 1 and 4 stages against PyTorch on the same GPU: ms per step, ratio,
#                   GPU memory peak against the plan, model FLOP utilisation (tools/bench/gpu_bench.py)
#   breakdown       ResNet-50 (batch 32) in tf32 and bf16: where a step's time goes by kind of work
#                   (convolutions forward and backward, batch norm, element-wise, casts, optimizer),
#                   ours (--profile's per-node times) beside PyTorch's profiler (tools/bench/gpu_breakdown.py);
#                   80 s of the budget are kept for it (GPU_CHECK_BREAKDOWN=0: none, gpu_bench gets them)
# and a short table last. A step the tool refuses (`--device cuda` before the runtime has a CUDA
# device) is a FAIL row quoting its one-line message. Exits non-zero on any failure. A global
# budget (GPU_CHECK_BUDGET, 360 s) keeps the whole run near 6 minutes: a step that would not fit
# is skipped and says so; gpu_bench takes what the steps before it left.
#
#   tools/gpu-check.sh     env: PREBUILT (.gpu-prebuilt), BUILD_DIR (build-gpu), JOBS (nproc),
#                               GPU_CHECK_SANITIZER=0, GPU_CHECK_BUDGET (seconds), GPU_CHECK_BREAKDOWN=0,
#                               PT_BUNDLED_CXX=1/0 (force the archive's libstdc++ on/off),
#                               GPU_CHECK_DEVICE=cpu (train_resnet18 and step_vs_torch on the CPU:
#                               a dry run of their logic on a machine without a GPU)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
start=$(date +%s)
budget=${GPU_CHECK_BUDGET:-360}
breakdown_s=80  # kept for the breakdown step (10.) unless GPU_CHECK_BREAKDOWN=0
prebuilt=${PREBUILT:-.gpu-prebuilt}
build=${BUILD_DIR:-build-gpu}
jobs=${JOBS:-$(nproc)}
log_dir=${GPU_CHECK_LOGS:-$build/gpu-check}
mkdir -p "$log_dir" || exit 1

rows=()      # "step|result|detail" for the summary table
failed=0
row() {      # row STEP RESULT DETAIL
  rows+=("$1|$2|$3")
  [ "$2" = FAIL ] && failed=1
  return 0
}
tail_of() {  # the last lines of a log, indented, when a step fails
  echo "---- last lines of $1"
  tail -n "${2:-25}" "$1" | sed 's/^/    /'
}
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }
# script_row STEP RC LOG PASS_DETAIL FAIL_DETAIL: the row of a step that ran a script into LOG
# (exit 124: its cap ran out), with the log's last lines when it failed.
script_row() {
  if [ "$2" = 0 ]; then
    row "$1" PASS "$4"
    return 0
  fi
  tail_of "$3" 15
  if [ "$2" = 124 ]; then row "$1" FAIL "timed out after its cap; see $3"; else row "$1" FAIL "$5"; fi
}
left() { echo $(( budget - ($(date +%s) - start) )); }
# cap WANT: the seconds a step may take, WANT or what is left of the budget; 0 when under 20.
cap() {
  local l; l=$(left)
  if [ "$l" -lt 20 ]; then echo 0; elif [ "$l" -lt "$1" ]; then echo "$l"; else echo "$1"; fi
}

# 1. The GPU (printed again at the end).
gpus=""
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(timeout 30 nvidia-smi -L 2>&1); fi
n_gpus=$(grep -c '^GPU [0-9]' <<<"$gpus")
if [ "$n_gpus" -gt 0 ]; then
  row gpu PASS "$n_gpus device(s)"
else
  row gpu FAIL "nvidia-smi lists no GPU: this script is for a GPU machine"
fi

# shellcheck source=tools/gpu-prebuilt-env.sh
. tools/gpu-prebuilt-env.sh   # lib_dir, prebuilt_env

# wrapper OUT BINARY LDP: a script that starts BINARY with LD_LIBRARY_PATH=LDP (so that PyTorch, in
# the Python scripts that call it, keeps its own libraries).
wrapper() {
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$3" "$2" >"$1" && chmod +x "$1"
}

# 2. The binaries: carried prebuilt archive, else configure and build here.
tests="" rtests="" bench="" pipetrain="" assets=""
run_env=()   # how our binaries are started (the carried libraries' path, for a prebuilt archive)
if [ -f "$prebuilt/prebuilt.tar.xz" ] || [ -x "$prebuilt/bin/kernel_tests" ]; then
  t0=$(date +%s)
  dir=$prebuilt
  if [ -f "$prebuilt/prebuilt.tar.xz" ]; then
    dir=$(mktemp -d /tmp/pt-prebuilt.XXXXXX)
    tar -C "$dir" -xJf "$prebuilt/prebuilt.tar.xz"
  fi
  prebuilt_env "$dir"
  echo "prebuilt: $PT_ENV_NOTE"
  run_env=(env "LD_LIBRARY_PATH=$PT_LDP")
  tests=$dir/bin/kernel_tests
  [ -x "$dir/bin/runtime_tests" ] && rtests=$dir/bin/runtime_tests
  bench=$dir/bench.sh
  wrapper "$bench" "$dir/bin/cuda_resnet_bench" "$PT_LDP"
  if [ -x "$dir/bin/onnx-pipetrain" ]; then
    pipetrain=$dir/pipetrain.sh
    wrapper "$pipetrain" "$dir/bin/onnx-pipetrain" "$PT_LDP"
  fi
  # The ResNet-18 skeleton's weights, filled in again (seeded): the archive carries them zeroed.
  if [ -f "$dir/assets/resnet18.skeleton.onnx" ] &&
     timeout 60 python3 tools/bench/gpu_assets.py init "$dir/assets/resnet18.skeleton.onnx" \
       "$dir/assets/resnet18.onnx" >"$log_dir/assets.log" 2>&1; then
    assets=$dir/assets
  else
    tail_of "$log_dir/assets.log" 5 2>/dev/null
  fi
  info=$(head -1 "$dir/BUILD_INFO" 2>/dev/null)
  not_found=$(for b in "$dir"/bin/*; do "${run_env[@]}" ldd "$b" | grep 'not found' | sed "s|^|    $(basename "$b"): |"; done)
  if [ -n "$PT_ENV_PROBLEM" ]; then
    row binaries FAIL "prebuilt, but ${PT_ENV_PROBLEM%; }"
    tests="" rtests="" bench="" pipetrain=""
  elif [ -z "$not_found" ]; then
    built_rev=$(grep -o '[0-9a-f]\{40\}' <<<"$info" | head -1)
    head_rev=$(git rev-parse HEAD 2>/dev/null || echo unknown)
    stale=""
    if [ "$head_rev" != unknown ] && [ "$built_rev" != "$head_rev" ]; then
      stale="; STALE: the tree is at ${head_rev:0:12}, rerun tools/gpu-prebuild.sh"
      echo "warning: $prebuilt was built from ${built_rev:0:12}, the tree is at ${head_rev:0:12}"
    fi
    [ -z "$pipetrain" ] && stale+="; no onnx-pipetrain in the archive (made before it was packed)"
    # runtime_tests read models/ through the source folder compiled in: link it to this tree.
    src_dir=$(sed -n 's/^source_dir //p' "$dir/BUILD_INFO")
    if [ -n "$rtests" ] && [ -n "$src_dir" ] && [ ! -e "$src_dir" ] && mkdir -p "$(dirname "$src_dir")" &&
       ln -s "$PWD" "$src_dir"; then
      linked_src=$src_dir
      trap 'rm -f "$linked_src"' EXIT
      echo "linked $src_dir -> $PWD (the runtime tests' models/)"
    fi
    [ -z "$assets" ] && stale+="; no ResNet-18 assets (see $log_dir/assets.log)"
    row binaries PASS "prebuilt (${info:0:19}), $(elapsed "$t0")$stale"
  else
    echo "$not_found"
    row binaries FAIL "prebuilt, libraries missing (above)"
    tests="" rtests="" bench="" pipetrain=""
  fi
else
  cuda_args=(-DPIPETRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
  if [ ! -x /usr/local/cuda/bin/nvcc ] && [ -z "${CUDACXX:-}" ] && command -v nvcc >/dev/null; then
    cuda_args+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
  fi
  gen_args=()
  if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then gen_args=(-G Ninja); fi
  t0=$(date +%s)
  if timeout 60 cmake -S . -B "$build" "${gen_args[@]}" -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" \
       >"$log_dir/configure.log" 2>&1; then
    t1=$(date +%s)
    c=$(cap 200)
    if [ "$c" -gt 0 ] && timeout "$c" cmake --build "$build" -j "$jobs" --target kernel_tests runtime_tests \
         cuda_resnet_bench onnx-pipetrain >"$log_dir/build.log" 2>&1; then
      row binaries PASS "built in $build: configure $((t1 - t0))s, build $(elapsed "$t1"), -j$jobs"
      tests=$build/tests/kernel_tests
      rtests=$build/tests/runtime_tests
      bench=$build/tools/bench/cuda_resnet_bench
      pipetrain=$build/tools/onnx-pipetrain
      # The assets as gpu-prebuild.sh packs them (needs this torch to export and Fashion-MNIST).
      if timeout 120 python3 tools/bench/gpu_assets.py pack "$build/gpu-assets" >"$log_dir/assets.log" 2>&1 &&
         python3 tools/bench/gpu_assets.py init "$build/gpu-assets/resnet18.skeleton.onnx" \
           "$build/gpu-assets/resnet18.onnx" >>"$log_dir/assets.log" 2>&1; then
        assets=$build/gpu-assets
      else
        tail_of "$log_dir/assets.log" 5
      fi
    else
      tail_of "$log_dir/build.log"
      row binaries FAIL "build failed or passed ${c}s, see $log_dir/build.log"
    fi
  else
    tail_of "$log_dir/configure.log"
    echo "    (no build deps here? make .gpu-prebuilt with tools/gpu-prebuild.sh on a dev machine and carry it)"
    row binaries FAIL "configure failed and no $prebuilt/prebuilt.tar.xz, see $log_dir/configure.log"
  fi
fi

# 3. Every kernel test. On this machine a skipped CUDA test is a failure: the GPU went unused.
n_cuda_fail=0
if [ -n "$tests" ] && [ "$(cap 120)" -gt 0 ]; then
  t0=$(date +%s)
  timeout "$(cap 120)" "${run_env[@]}" "$tests" --gtest_color=no >"$log_dir/kernel_tests.log" 2>&1
  rc=$?
  n_ok=$(grep -c '^\[       OK \]' "$log_dir/kernel_tests.log")
  n_fail=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log_dir/kernel_tests.log")
  n_skip=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log_dir/kernel_tests.log")
  cuda_ok=$(grep -cE '^\[       OK \] \S*Cuda' "$log_dir/kernel_tests.log")
  cuda_skip=$(grep -cE '^\[  SKIPPED \] \S*Cuda\S* \(' "$log_dir/kernel_tests.log")
  n_cuda_fail=$(grep -cE '^\[  FAILED  \] \S*Cuda\S* .*\([0-9]+ ms\)$' "$log_dir/kernel_tests.log")
  detail="$(elapsed "$t0"): $n_ok passed, $n_fail failed, $n_skip skipped"
  detail+="; CUDA: $cuda_ok passed, $n_cuda_fail failed, $cuda_skip skipped"
  if [ "$rc" -ne 0 ]; then
    grep -E '^\[  FAILED  \].*ms\)$' "$log_dir/kernel_tests.log" | head -40
    grep -E 'Failure|differ|error' "$log_dir/kernel_tests.log" | head -20
    [ "$rc" -eq 124 ] && detail="timed out; $detail"
    row kernel_tests FAIL "exit $rc, $detail"
  elif [ "$cuda_skip" -gt 0 ] || [ "$cuda_ok" -eq 0 ]; then
    grep -m1 'no GPU' "$log_dir/kernel_tests.log" | sed 's/^/    /'
    row kernel_tests FAIL "CUDA tests did not run on the GPU; $detail"
  else
    row kernel_tests PASS "$detail"
  fi
  libs=$(grep -m1 '^cuda libraries:' "$log_dir/kernel_tests.log" | cut -d: -f2-)
  [ -n "$libs" ] && row libraries INFO "${libs# }"
else
  row kernel_tests SKIP "no binaries or no time left"
fi

# 3b. The CUDA runtime tests (the rest of runtime_tests runs in CI). Skipping is a failure here,
#     except for the test of the refusal without a GPU.
if [ -z "$rtests" ]; then
  row runtime_tests SKIP "no runtime_tests binary (an archive made before it was packed?)"
elif [ "$(cap 120)" -lt 20 ]; then
  row runtime_tests SKIP "under 20 s of the budget left"
else
  t0=$(date +%s)
  timeout "$(cap 120)" "${run_env[@]}" "$rtests" --gtest_color=no --gtest_filter='CudaRuntime.*' \
    >"$log_dir/runtime_tests.log" 2>&1
  rc=$?
  r_ok=$(grep -c '^\[       OK \]' "$log_dir/runtime_tests.log")
  r_fail=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log_dir/runtime_tests.log")
  r_skip=$(grep -E '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log_dir/runtime_tests.log" | grep -vc 'RefusedWithTheReasonWithoutAGpu')
  detail="$(elapsed "$t0"): $r_ok passed, $r_fail failed, $r_skip skipped (CudaRuntime.*)"
  if [ "$rc" -ne 0 ]; then
    grep -E '^\[  FAILED  \].*ms\)$|Failure|error' "$log_dir/runtime_tests.log" | head -20
    [ "$rc" -eq 124 ] && detail="timed out; $detail"
    row runtime_tests FAIL "exit $rc, $detail"
  elif [ "$r_skip" -gt 0 ] || [ "$r_ok" -eq 0 ]; then
    grep -m1 -A1 'SKIPPED\|Skipped' "$log_dir/runtime_tests.log" | sed 's/^/    /'
    row runtime_tests FAIL "CUDA runtime tests did not run on the GPU; $detail"
  else
    row runtime_tests PASS "$detail"
  fi
fi

# 4. The ResNet-18 conv+BN work of a training step against PyTorch (validated against the CPU
#    kernels first). Before memcheck: the timing matters more than the sanitizer's second look.
if [ -n "$bench" ] && [ "$(cap 150)" -gt 0 ]; then
  t0=$(date +%s)
  timeout "$(cap 150)" python3 tools/bench/cuda_resnet_vs_torch.py "$bench" --batch 64 --iters 20 \
    >"$log_dir/bench.log" 2>&1
  rc=$?
  cat "$log_dir/bench.log"
  result=$(grep -m1 '^RESULT' "$log_dir/bench.log" | cut -d' ' -f2-)
  if [ "$rc" -eq 0 ]; then
    row bench PASS "$(elapsed "$t0"): ResNet-18 conv+BN, batch 64: $result"
  elif [ "$rc" -eq 77 ]; then
    row bench SKIP "$(grep -m1 -E 'SKIP|ours' "$log_dir/bench.log")"
  else
    row bench FAIL "exit $rc, see $log_dir/bench.log"
  fi
else
  row bench SKIP "no benchmark binary or no time left"
fi

# The one-line message of a failed onnx-pipetrain run: its last "onnx-pipetrain: ..." line.
tool_message() {
  local m
  m=$(grep -E '^onnx-pipetrain: ' "$1" | tail -1)
  [ -z "$m" ] && m=$(grep -v '^\s*$' "$1" | tail -1)
  echo "${m:0:220}"
}
train_dev=${GPU_CHECK_DEVICE:-cuda}
data_flags=()
[ -n "$assets" ] && data_flags=(--data "$assets/fmnist32/train" --mean 0.286 --std 0.353)

# 5. The command line itself on this machine: it starts, trains ResNet-18 on the CPU for 3 steps,
#    and sees the GPUs (its refusal of one stage more than there are devices names their number).
if [ -z "$pipetrain" ] || [ -z "$assets" ]; then
  row cli SKIP "no onnx-pipetrain or no assets (see the binaries row)"
elif [ "$(cap 60)" -lt 20 ]; then
  row cli SKIP "under 20 s of the budget left"
else
  t0=$(date +%s)
  timeout "$(cap 60)" "$pipetrain" "$assets/resnet18.onnx" --device cpu --steps 3 --batch-size 32 "${data_flags[@]}" \
    --out "$log_dir/cli_cpu" --overwrite >"$log_dir/cli_cpu.log" 2>&1
  rc=$?
  timeout 30 "$pipetrain" "$assets/resnet18.onnx" --device cuda --gpus $((n_gpus + 1)) --steps 1 \
    --out "$log_dir/cli_count" --overwrite >"$log_dir/cli_count.log" 2>&1
  rc_count=$?
  if [ "$rc_count" = 2 ] && grep -q "this machine has $n_gpus CUDA device" "$log_dir/cli_count.log"; then
    sees="sees $n_gpus CUDA device(s) as nvidia-smi does"
  else
    sees="device count not confirmed (exit $rc_count: $(tool_message "$log_dir/cli_count.log"))"
  fi
  if [ "$rc" = 0 ]; then
    row cli PASS "$(elapsed "$t0"): --device cpu $(grep -m1 '^done:' "$log_dir/cli_cpu.log" | cut -d, -f1,2); $sees"
  else
    tail_of "$log_dir/cli_cpu.log" 10
    row cli FAIL "--device cpu: exit $rc: $(tool_message "$log_dir/cli_cpu.log"); $sees"
  fi
fi

# 6. ResNet-18 on 4 stages oversubscribed on the one GPU, SpecTrain, 200 steps of Fashion-MNIST.
if [ -z "$pipetrain" ] || [ -z "$assets" ]; then
  row train_resnet18 SKIP "no onnx-pipetrain or no assets (see the binaries row)"
elif [ "$(cap 150)" -lt 30 ]; then
  row train_resnet18 SKIP "under 30 s of the budget left"
else
  t0=$(date +%s)
  c=$(cap 150)
  run_dir=$log_dir/train_resnet18
  rm -rf "$run_dir"
  timeout "$c" "$pipetrain" "$assets/resnet18.onnx" --device "$train_dev" --gpus 4 --oversubscribe --weights spectrain \
    --steps 200 --batch-size 64 --lr 0.05 --seed 1 "${data_flags[@]}" --val-data "$assets/fmnist32/val" \
    --log-every 20 --out "$run_dir" >"$log_dir/train_resnet18.log" 2>&1
  rc=$?
  wall=$(elapsed "$t0")
  grep -E '^(step [0-9]|done:|validation:|stage [0-9]|pipeline efficiency|memory:)' "$log_dir/train_resnet18.log" | sed 's/^/    /'
  # loss: the mean of steps 1-10 against that of the last 10 (single steps are noisy).
  loss_trend() {
    awk -F, 'NR > 1 {n++; l[n] = $3} END {
        if (n < 20) { print "FAIL only " n " steps in metrics.csv"; exit }
        for (i = 1; i <= 10; i++) a += l[i]; for (i = n - 9; i <= n; i++) b += l[i]; a /= 10; b /= 10
        printf "%s loss %.3f -> %.3f (mean of steps 1-10 -> %d-%d)", (b < 0.8 * a ? "PASS" : "FAIL"), a, b, n - 9, n }' "$1"
  }
  if [ "$rc" = 0 ] && [ -f "$run_dir/metrics.csv" ]; then
    verdict=$(loss_trend "$run_dir/metrics.csv")
    done_line=$(grep -m1 '^done:' "$log_dir/train_resnet18.log" | sed 's/, loss.*//; s/^done: //')
    val=$(grep -m1 '^validation:' "$log_dir/train_resnet18.log" | grep -o 'accuracy [0-9.]*%')
    row train_resnet18 "${verdict%% *}" "${verdict#* }; $done_line, wall ${wall}${val:+; val $val}"
  elif [ "$rc" = 124 ]; then
    # metrics.csv is published while training goes: say how far it got.
    so_far=""
    [ -f "$run_dir/metrics.csv" ] && so_far="; so far: $(loss_trend "$run_dir/metrics.csv" | cut -d' ' -f2-)"
    row train_resnet18 FAIL "timed out after ${c}s (cap)$so_far; see $log_dir/train_resnet18.log"
  else
    tail_of "$log_dir/train_resnet18.log" 10
    row train_resnet18 FAIL "exit $rc: $(tool_message "$log_dir/train_resnet18.log")"
  fi
fi

# 6a. The cost model against that run (issue #33; tools/bench/cost_model_bench.py --partition): the
#    plan's stage times and samples/s beside the measured ones, as on the CPU. No GPU time of its own.
if [ -f "$log_dir/train_resnet18/partition.json" ]; then
  if timeout 30 python3 tools/bench/cost_model_bench.py --partition "$log_dir/train_resnet18/partition.json" \
      >"$log_dir/cost_model.log" 2>&1; then
    sed 's/^/    /' "$log_dir/cost_model.log"
    worst=$(sed -n 's/^largest error: \([0-9]*\)%.*/\1/p' "$log_dir/cost_model.log")
    meas=$(awk 'NR == 2 {print "worst stage " $(NF - 4) ", samples/s " $(NF - 3) " predicted / " $(NF - 2) " measured"}' \
      "$log_dir/cost_model.log")
    if [ -n "$worst" ] && [ "$worst" -le 25 ]; then verdict="within"; else verdict="NOT within"; fi
    row cost_model PASS "ResNet-18 on 4 stages: $meas; largest error ${worst:-?}% ($verdict the 25 % target)"
  else
    tail_of "$log_dir/cost_model.log" 5
    row cost_model FAIL "tools/bench/cost_model_bench.py --partition failed; see $log_dir/cost_model.log"
  fi
else
  row cost_model SKIP "no partition.json from train_resnet18"
fi

# 6b. Replicas on the GPU (--replicas, averaged through host copies): the digits MLP on 2 stages x 2
# replicas oversubscribed on the one GPU, 30 steps, against the same run on CPU stages (every trained
# weight within 1e-4).
if [ -z "$pipetrain" ]; then
  row replicas SKIP "no onnx-pipetrain (see the binaries row)"
elif [ "$(cap 60)" -lt 20 ]; then
  row replicas SKIP "under 20 s of the budget left"
else
  c=$(cap 60)
  rep_flags=(models/digits_mlp.onnx --data models/digits/train --gpus 2 --replicas 2 --steps 30 --seed 3 --quiet --overwrite)
  timeout "$c" "$pipetrain" "${rep_flags[@]}" --device "$train_dev" --oversubscribe --out "$log_dir/replicas_gpu" \
    >"$log_dir/replicas.log" 2>&1
  rc=$?
  timeout "$c" "$pipetrain" "${rep_flags[@]}" --device cpu --out "$log_dir/replicas_cpu" >>"$log_dir/replicas.log" 2>&1
  rc_cpu=$?
  if [ "$rc" != 0 ] || [ "$rc_cpu" != 0 ]; then
    row replicas FAIL "exit $rc (GPU) / $rc_cpu (CPU): $(tool_message "$log_dir/replicas.log")"
  else
    verdict=$(python3 - "$log_dir/replicas_gpu/digits_mlp.trained.onnx" "$log_dir/replicas_cpu/digits_mlp.trained.onnx" <<'PY' 2>&1
import sys
try:
    import onnx, numpy as np
    from onnx import numpy_helper as nh
except ImportError as e:
    print(f"SKIP no onnx/numpy here ({e})"); sys.exit()
a, b = ({i.name: nh.to_array(i).astype(np.float64) for i in onnx.load(p).graph.initializer} for p in sys.argv[1:3])
worst = max(float(np.max(np.abs(a[k] - b[k])) / (np.max(np.abs(b[k])) + 1e-6)) for k in b)
print(("PASS" if worst <= 1e-4 else "FAIL") + f" worst relative difference GPU vs CPU {worst:.2e}")
PY
)
    row replicas "${verdict%% *}" "${verdict#* }"
  fi
fi

# 6c. CUDA graphs: the digits MLP (small kernels: launch-bound) on 2 stages oversubscribed on the GPU,
# SpecTrain, 60 steps with and without --no-cuda-graphs: trained weights equal to the last bit, the
# graphs really replayed, and both runs' samples/s.
if [ -z "$pipetrain" ] || [ "$train_dev" = cpu ]; then
  row cuda_graphs SKIP "no onnx-pipetrain, or no GPU (graphs are CUDA's)"
elif [ "$(cap 60)" -lt 20 ]; then
  row cuda_graphs SKIP "under 20 s of the budget left"
else
  c=$(cap 60)
  g_flags=(models/digits_mlp.onnx --data models/digits/train --gpus 2 --steps 60 --seed 3 --overwrite --device cuda --oversubscribe)
  timeout "$c" "$pipetrain" "${g_flags[@]}" --out "$log_dir/graphs_on" >"$log_dir/graphs_on.log" 2>&1
  rc=$?
  timeout "$c" "$pipetrain" "${g_flags[@]}" --no-cuda-graphs --out "$log_dir/graphs_off" >"$log_dir/graphs_off.log" 2>&1
  rc_off=$?
  grep -h 'CUDA graphs' "$log_dir/graphs_on.log" | sed 's/^/    /'
  if [ "$rc" != 0 ] || [ "$rc_off" != 0 ]; then
    row cuda_graphs FAIL "exit $rc (graphs) / $rc_off (--no-cuda-graphs): $(tool_message "$log_dir/graphs_on.log")"
  else
    rate() { grep -m1 '^done:' "$1" | grep -o '[0-9.]* samples/s' | head -1; }
    verdict=$(python3 - "$log_dir/graphs_on/digits_mlp.trained.onnx" "$log_dir/graphs_off/digits_mlp.trained.onnx" <<'PY' 2>&1
import sys
try:
    import onnx, numpy as np
    from onnx import numpy_helper as nh
except ImportError as e:
    print(f"SKIP no onnx/numpy here ({e})"); sys.exit()
a, b = ({i.name: nh.to_array(i) for i in onnx.load(p).graph.initializer} for p in sys.argv[1:3])
same = all(np.array_equal(a[k], b[k]) for k in b)
print(("PASS" if same else "FAIL") + (" weights bit for bit equal" if same else " weights differ"))
PY
)
    replays=$(grep -ho '[0-9]* replays' "$log_dir/graphs_on.log" | awk '{s += $1} END {print s + 0}')
    [ "$replays" -gt 0 ] || verdict="FAIL no graph replayed"
    row cuda_graphs "${verdict%% *}" "${verdict#* }; $replays replays; graphs $(rate "$log_dir/graphs_on.log"), without $(rate "$log_dir/graphs_off.log")"
  fi
fi

# 7. One stage on the GPU against PyTorch eager on the same GPU: ms per training step.
if [ -z "$pipetrain" ] || [ -z "$assets" ]; then
  row step_vs_torch SKIP "no onnx-pipetrain or no assets (see the binaries row)"
elif [ "$(cap 120)" -lt 30 ]; then
  row step_vs_torch SKIP "under 30 s of the budget left"
else
  t0=$(date +%s)
  via=()
  [ "$train_dev" = cpu ] && via=(--via-cli)
  timeout "$(cap 120)" python3 tools/bench/step_vs_torch.py --device "$train_dev" "${via[@]}" --pipetrain "$pipetrain" \
    --model-file "$assets/resnet18.onnx" --only resnet18 --batch 64 --warmup 5 --steps 30 \
    --json "$log_dir/step_vs_torch.json" >"$log_dir/step_vs_torch.log" 2>&1
  rc=$?
  cat "$log_dir/step_vs_torch.log"
  result=$(grep -m1 -E '^(RESULT|FAIL) ' "$log_dir/step_vs_torch.log" | cut -d' ' -f2-)
  if [ "$rc" = 0 ] && [ -n "$result" ]; then
    row step_vs_torch PASS "$(elapsed "$t0"): $result"
  elif [ "$rc" = 124 ]; then
    row step_vs_torch FAIL "timed out after its cap; see $log_dir/step_vs_torch.log"
  else
    row step_vs_torch FAIL "exit $rc: ${result:-see $log_dir/step_vs_torch.log}"
  fi
fi

# 8. The CUDA tests under compute-sanitizer memcheck (out-of-bounds reads guards cannot see).
#    Where the sanitizer cannot attach to the device (gVisor machines) the step is skipped.
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ "${GPU_CHECK_SANITIZER:-1}" = 0 ]; then
  row memcheck SKIP "GPU_CHECK_SANITIZER=0"
elif [ -z "$tests" ] || [ "$n_gpus" -eq 0 ]; then
  row memcheck SKIP "no binaries or no GPU"
elif [ ! -x "$sanitizer" ]; then
  row memcheck SKIP "compute-sanitizer not found"
elif [ "$(cap 120)" -lt 30 ]; then
  row memcheck SKIP "under 30 s of the budget left"
else
  t0=$(date +%s)
  timeout "$(cap 120)" "${run_env[@]}" "$sanitizer" --tool memcheck --error-exitcode 1 "$tests" --gtest_color=no \
    --gtest_filter='*Cuda*.Float*:CudaDevice.*:*CudaRelu*' >"$log_dir/memcheck.log" 2>&1
  rc=$?
  summary=$(grep -m1 'ERROR SUMMARY' "$log_dir/memcheck.log")
  if [ "$rc" -eq 0 ] && grep -q 'ERROR SUMMARY: 0 errors' "$log_dir/memcheck.log"; then
    row memcheck PASS "$(elapsed "$t0"), $summary"
  elif grep -qiE 'device not supported|unable to (initiali[sz]e|attach)|LibraryNotLoaded' "$log_dir/memcheck.log"; then
    why=$(grep -m1 -iE 'not supported|unable|LibraryNotLoaded' "$log_dir/memcheck.log")
    row memcheck SKIP "sanitizer cannot use this device: $why"
  elif [ "$rc" -eq 124 ]; then
    row memcheck SKIP "timed out after its cap (the suite is slow under the sanitizer)"
  else
    tail_of "$log_dir/memcheck.log" 30
    row memcheck FAIL "exit $rc, ${summary:-no summary}, see $log_dir/memcheck.log"
  fi
fi

# 9. The GPU benchmark (tools/bench/gpu_bench.py): ResNet-50 224x224 at batch 32 and 128 and a
#    GPT-2-small-shaped decoder at batch 8, each in fp32, tf32 and bf16 on 1 and 4 stages against
#    PyTorch eager at the same precision (and autocast + channels_last + cudnn.benchmark for bf16);
#    GPU memory peak against the plan and model FLOP utilisation. Gets what is left of the budget
#    (the most telling rows first); with GPU_CHECK_DEVICE=cpu tiny models on the CPU (a dry run).
if [ -z "$pipetrain" ]; then
  row gpu_bench SKIP "no onnx-pipetrain (see the binaries row)"
elif [ "$(cap 600)" -lt 60 ]; then
  row gpu_bench SKIP "under 60 s of the budget left"
else
  t0=$(date +%s)
  c=$(cap 600)
  # What the breakdown after it needs stays in the budget.
  [ "${GPU_CHECK_BREAKDOWN:-1}" = 1 ] && [ "$c" -gt $((60 + breakdown_s)) ] && c=$((c - breakdown_s))
  bench_args=(--pipetrain "$pipetrain" --budget $((c - 15)) --work "$log_dir/gpu_bench" --json "$log_dir/gpu_bench.json")
  [ "$train_dev" = cpu ] && bench_args+=(--device cpu --tiny)
  timeout "$c" python3 tools/bench/gpu_bench.py "${bench_args[@]}" >"$log_dir/gpu_bench.log" 2>&1
  rc=$?
  sed -n '/^== gpu_bench/,$p' "$log_dir/gpu_bench.log"
  result=$(grep -m1 '^RESULT ' "$log_dir/gpu_bench.log" | cut -d' ' -f2-)
  script_row gpu_bench "$rc" "$log_dir/gpu_bench.log" \
    "$(elapsed "$t0"): ${result#PASS: } (table above; $log_dir/gpu_bench.json)" \
    "exit $rc: ${result:-see $log_dir/gpu_bench.log}"
fi

# 10. Where the time goes (tools/bench/gpu_breakdown.py): ResNet-50 at batch 32 in tf32 and bf16, our
#     per-node times by class beside PyTorch's profiler, so that a ratio above 1 in gpu_bench's
#     table comes with the classes that make it. With GPU_CHECK_DEVICE=cpu tiny models on the CPU.
if [ "${GPU_CHECK_BREAKDOWN:-1}" != 1 ]; then
  row breakdown SKIP "GPU_CHECK_BREAKDOWN=0"
elif [ -z "$pipetrain" ]; then
  row breakdown SKIP "no onnx-pipetrain (see the binaries row)"
elif [ "$(cap "$breakdown_s")" -lt 30 ]; then
  row breakdown SKIP "under 30 s of the budget left (tools/bench/gpu_breakdown.py runs it alone)"
else
  t0=$(date +%s)
  c=$(cap "$breakdown_s")
  bd_args=(--pipetrain "$pipetrain" --work "$log_dir/gpu_bench" --json "$log_dir/gpu_breakdown.json")
  [ "$train_dev" = cpu ] && bd_args+=(--device cpu --tiny)
  timeout "$c" python3 tools/bench/gpu_breakdown.py "${bd_args[@]}" >"$log_dir/gpu_breakdown.log" 2>&1
  rc=$?
  sed -n '/^== /,$p' "$log_dir/gpu_breakdown.log" | grep -v '^RESULT '
  script_row breakdown "$rc" "$log_dir/gpu_breakdown.log" "$(elapsed "$t0"): tables above; $log_dir/gpu_breakdown.json" \
    "exit $rc; see $log_dir/gpu_breakdown.log"
fi

# Last: the GPU list and the table.
echo
echo "== nvidia-smi -L"
if [ -n "$gpus" ]; then echo "$gpus"; else echo "(nvidia-smi not found or printed nothing)"; fi
echo
rev=$(git rev-parse --short HEAD 2>/dev/null || echo 'no commit')
echo "== gpu-check summary ($rev, $(elapsed "$start") of ${budget}s budget, logs in $log_dir)"
printf '%-15s %-6s %s\n' step result detail
for r in "${rows[@]}"; do
  IFS='|' read -r step result detail <<<"$r"
  printf '%-15s %-6s %s\n' "$step" "$result" "$detail"
done
if [ "$failed" = 0 ]; then overall=PASS; else overall=FAIL; fi
printf '%-15s %s\n' overall "$overall"
exit "$failed"
