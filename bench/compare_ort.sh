#!/usr/bin/env bash
# dnnc vs onnxruntime on every model in ../shared/models, at 1 and 2
# threads, timed in the same run (interleaved per model, so machine noise
# hits both), then peak RSS of `dnnc run` vs onnxruntime on ResNet-18.
#
# Usage: bench/compare_ort.sh [ITERS]   (from the repository root; default 20)
# ROUNDS=R (default 5) times each model and thread count R times, dnnc and
# onnxruntime alternating (onnxruntime first in every other round), and
# prints the medians of the R medians and of the R per-round ratios: on a
# shared machine one pair can be off by 0.2 or more in its ratio (a burst
# of seconds at 0.6x speed on one side), and more rounds shrink that.
# OPTIMIZE=1 also times `dnnc bench --optimize` (the pass pipeline, e-graph
# included, before compiling) in each round, between the two, and adds
# its median, its per-round ratio to the default build and to onnxruntime,
# and `opt/dnnc_pair`: `dnnc bench --optimize --against-unoptimized` (the
# two builds in one process, a run of each per iteration in alternating
# order; the median per-pair ratio, median over the rounds), which a
# burst on the host cannot tilt as it can the separate runs' ratio.
# BLOCKS=1 also times the batch-8 blocks of tests/fixtures/blocks (the
# block types of DenseNet, EfficientNet, Inception-v3, RegNet and
# ResNet-50, onnxruntime-checked) after the zoo.
# EXTRA=DIR also times every model directory under DIR (model.onnx and
# input.npy), e.g. the batch-8 torchvision exports that
# bench/export_torchvision.py writes, after the rest; MODELS=DIR replaces
# ../shared/models (an empty directory times the EXTRA models alone; the
# RSS lines need MODELS/resnet18).
# Needs: a release build (`cargo build --release -p dnnc-compiler`), the
# onnxruntime venv at ../ort-venv, /usr/bin/time.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-20}
ROUNDS=${ROUNDS:-5}
OPTIMIZE=${OPTIMIZE:-0}
BLOCKS=${BLOCKS:-0}
MODELS=${MODELS:-../shared/models}
PY=../ort-venv/bin/python
ORT=../shared/bench/ort_reference.py
DNNC=./target/release/dnnc
[ -x "$DNNC" ] || { echo "build first: cargo build --release -p dnnc-compiler" >&2; exit 2; }
[ -x "$PY" ] || { echo "onnxruntime venv $PY not found" >&2; exit 2; }

head=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || head="$head+uncommitted"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') dnnc $head, $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# dnnc bench --warmup 3 --iters $ITERS vs ort_reference.py --warmup 3 --runs $ITERS; medians in ms (median of $ROUNDS rounds)"
if [ "$OPTIMIZE" = 1 ]; then
  printf '%-20s %7s %10s %10s %10s %12s %10s %9s %9s %14s\n' model threads dnnc_ms ort_ms dnnc/ort dnnc_GFLOP/s opt_ms opt/dnnc opt/ort opt/dnnc_pair
else
  printf '%-20s %7s %10s %10s %10s %12s\n' model threads dnnc_ms ort_ms dnnc/ort dnnc_GFLOP/s
fi
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
shopt -s nullglob
DIRS=("$MODELS"/*/)
[ "$BLOCKS" = 1 ] && DIRS+=(tests/fixtures/blocks/*/)
if [ -n "${EXTRA:-}" ]; then
  [ -d "$EXTRA" ] || { echo "EXTRA=$EXTRA is not a directory" >&2; exit 2; }
  DIRS+=("$EXTRA"/*/)
fi
for dir in "${DIRS[@]}"; do
  name=$(basename "$dir")
  for t in 1 2; do
    ds=(); os=(); rs=(); gs=(); ps=(); pd=(); po=(); pq=()
    for r in $(seq "$ROUNDS"); do
      # Every other round times onnxruntime first, so a drift of the
      # machine's speed across a round favours neither side.
      if [ $((r % 2)) = 0 ]; then
        o=$("$PY" "$ORT" "$dir/model.onnx" --input "$dir/input.npy" --threads "$t" --runs "$ITERS" 2>/dev/null)
      fi
      d=$("$DNNC" bench "$dir/model.onnx" --input "$dir/input.npy" --threads "$t" --warmup 3 --iters "$ITERS" 2>/dev/null) || continue
      dms=$(sed -n 's/.*median \([0-9.]*\) ms.*/\1/p' <<<"$d")
      gs+=("$(sed -n 's/.*throughput *\([0-9.]*\) GFLOP.*/\1/p' <<<"$d")")
      if [ "$OPTIMIZE" = 1 ]; then
        p=$("$DNNC" bench "$dir/model.onnx" --input "$dir/input.npy" --threads "$t" --warmup 3 --iters "$ITERS" --optimize 2>/dev/null) || continue
        pms=$(sed -n 's/.*median \([0-9.]*\) ms.*/\1/p' <<<"$p")
        q=$("$DNNC" bench "$dir/model.onnx" --input "$dir/input.npy" --threads "$t" --warmup 3 --iters "$ITERS" --optimize --against-unoptimized 2>/dev/null) || continue
        pq+=("$(sed -n 's/.*median \([0-9.]*\) over the pairs.*/\1/p' <<<"$q")")
      fi
      if [ $((r % 2)) = 1 ]; then
        o=$("$PY" "$ORT" "$dir/model.onnx" --input "$dir/input.npy" --threads "$t" --runs "$ITERS" 2>/dev/null)
      fi
      oms=$(sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p' <<<"$o")
      ds+=("$dms"); os+=("$oms")
      rs+=("$(awk -v a="$dms" -v b="$oms" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }')")
      if [ "$OPTIMIZE" = 1 ]; then
        ps+=("$pms")
        pd+=("$(awk -v a="$pms" -v b="$dms" 'BEGIN { printf "%.3f", a / b }')")
        po+=("$(awk -v a="$pms" -v b="$oms" 'BEGIN { printf "%.3f", a / b }')")
      fi
    done
    if [ ${#ds[@]} -eq 0 ]; then
      printf '%-20s %7s %10s\n' "$name" "$t" "failed"; continue
    fi
    dms=$(printf '%s\n' "${ds[@]}" | median)
    oms=$(printf '%s\n' "${os[@]}" | median)
    ratio=$(printf '%s\n' "${rs[@]}" | median | awk '{ printf "%.2f", $1 }')
    gf=$(printf '%s\n' "${gs[@]}" | median)
    if [ "$OPTIMIZE" = 1 ]; then
      pms=$(printf '%s\n' "${ps[@]}" | median)
      rpd=$(printf '%s\n' "${pd[@]}" | median | awk '{ printf "%.3f", $1 }')
      rpo=$(printf '%s\n' "${po[@]}" | median | awk '{ printf "%.2f", $1 }')
      rpq=$(printf '%s\n' "${pq[@]}" | median | awk '{ printf "%.3f", $1 }')
      printf '%-20s %7s %10s %10s %10s %12s %10s %9s %9s %14s\n' "$name" "$t" "$dms" "$oms" "$ratio" "$gf" "$pms" "$rpd" "$rpo" "$rpq"
    else
      printf '%-20s %7s %10s %10s %10s %12s\n' "$name" "$t" "$dms" "$oms" "$ratio" "$gf"
    fi
  done
done

R=$MODELS/resnet18
[ -f "$R/model.onnx" ] || exit 0
echo
echo "# peak RSS (/usr/bin/time -v, maximum resident set size), ResNet-18, 1 thread, one inference"
rss() { /usr/bin/time -v "$@" 2>&1 >/dev/null | sed -n 's/.*Maximum resident set size (kbytes): //p'; }
d_rss=$(rss "$DNNC" run "$R/model.onnx" --input "$R/input.npy" --backend cpu)
o_rss=$(rss "$PY" "$ORT" "$R/model.onnx" --input "$R/input.npy" --threads 1 --runs 1 --warmup 0)
echo "dnnc run --backend cpu: ${d_rss} KiB"
echo "onnxruntime (python):   ${o_rss} KiB"
"$DNNC" bench "$R/model.onnx" --input "$R/input.npy" --warmup 0 --iters 1 | grep activations
