#!/usr/bin/env bash
# dnnc --backend gpu against PyTorch eager fp32 (TF32 off) on ResNet-18 and
# ResNet-50 at batch 1 and 32, timed in the same script, with the fraction
# of the GPU's fp32 peak dnnc reaches.
#
# Usage: bench/gpu_bench.sh [ITERS]   (from the repository root; default 20)
# GPU_FP32_TFLOPS=67 sets the peak for the fraction (the H200's datasheet
# figure for plain fp32). Needs a release build of dnnc (DNNC=path to use
# another) and, for the PyTorch rows, python3 with torch and torchvision.
# dnnc's latency is a whole run: input upload, every dispatch, output
# read-back; PyTorch's is the forward pass between CUDA events.
#
# On a lent GPU machine (no Rust there; its python3 has torch): build
# `target/release/dnnc` here, fetch the Vulkan loader packages once
# (`.gl/*.deb`: libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0
# libgles2, downloaded for amd64 into a git-ignored `.gl/`), carry
# `target/release/dnnc` and `.gl`, and run
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bench/gpu_bench.sh 20
# adding VK_DRIVER_FILES=<the driver's nvidia_icd.json> if `dnnc devices`
# finds no adapter. `dnnc run MODEL --backend gpu --profile` then shows
# which kernels to work on.
set -uo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-20}
DNNC=${DNNC:-./target/release/dnnc}
PEAK=${GPU_FP32_TFLOPS:-67}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
tmp=$(mktemp -d)
"$DNNC" devices || { echo "no GPU adapter" >&2; exit 2; }
declare -A dnnc_ms dnnc_gf
for m in resnet18 resnet50; do
  for b in 1 32; do
    # Every batch-1 type annotation becomes batch b (the examples' weights
    # have no leading 1: tests/gpu_models.rs checks the result compiles).
    sed "s/f32\[1,/f32[$b,/g" "examples/$m.dnn" > "$tmp/${m}_b$b.dnn"
    out=$("$DNNC" bench "$tmp/${m}_b$b.dnn" --backend gpu --warmup 3 --iters "$ITERS" 2>&1)
    echo "$out"
    dnnc_ms[$m.$b]=$(sed -n 's/.*latency *median \([0-9.]*\) ms.*/\1/p' <<<"$out")
    dnnc_gf[$m.$b]=$(sed -n 's/.*throughput *\([0-9.]*\) GFLOP.*/\1/p' <<<"$out")
  done
done
torch_out=$(python3 bench/torch_reference.py "$ITERS" 2>&1) || echo "PyTorch rows unavailable: $torch_out" >&2
echo "$torch_out" | grep '^#'
printf '%-10s %6s %12s %12s %10s %14s\n' model batch dnnc_ms torch_ms dnnc/torch "dnnc_%fp32peak"
for m in resnet18 resnet50; do
  for b in 1 32; do
    t=$(awk -v m=$m -v b=$b '$1=="torch" && $2==m && $3==b {print $4}' <<<"$torch_out")
    d=${dnnc_ms[$m.$b]:-nan}
    ratio=$(awk -v d="$d" -v t="$t" 'BEGIN { if (t > 0 && d > 0) printf "%.2f", d / t; else print "-" }')
    frac=$(awk -v g="${dnnc_gf[$m.$b]:-0}" -v p="$PEAK" 'BEGIN { printf "%.1f%%", 100 * g / (p * 1000) }')
    printf '%-10s %6s %12s %12s %10s %14s\n' "$m" "$b" "$d" "${t:--}" "$ratio" "$frac"
  done
done
