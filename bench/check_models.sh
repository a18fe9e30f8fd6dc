#!/usr/bin/env bash
# Numerics of every model directory under DIR (model.onnx, input.npy,
# output.npy: onnxruntime's output, as bench/export_torchvision.py writes
# them) on the cpu backend: the default build, the optimised one
# (--optimize), each forced conv algorithm (ALGOS, default "im2col
# winograd2 winograd4"), and the reference interpreter (BUILDS overrides
# the whole list, e.g. BUILDS="default optimize"), each against output.npy with the zoo's rule
# |out - ref| <= 1e-4 + 1e-3 |ref|. One line per model and build: max
# abs error, elements outside the bound, OK or FAIL. The interpreter's
# line tells how far plain f32 summation in another order already is
# from onnxruntime on that model. Where the directory also holds
# output_f64.npy (the float64 answer bench/export_torchvision.py writes),
# each line adds the same count against it, and a first line per model
# gives onnxruntime's own output against it: the bound a float32
# implementation can be held to.
#
# Usage: bench/check_models.sh DIR [THREADS]   (from the repository root)
# Needs: a release build, the onnxruntime venv at ../ort-venv (numpy).
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=${1:?usage: bench/check_models.sh DIR [THREADS]}
T=${2:-2}
[ -d "$DIR" ] || { echo "check_models.sh: $DIR is not a directory" >&2; exit 2; }
ls "$DIR"/*/model.onnx >/dev/null 2>&1 || { echo "check_models.sh: no */model.onnx under $DIR" >&2; exit 2; }
ALGOS=${ALGOS-im2col winograd2 winograd4}
BUILDS=${BUILDS:-default optimize $ALGOS interp}
PY=../ort-venv/bin/python
DNNC=./target/release/dnnc
[ -x "$DNNC" ] || { echo "build first: cargo build --release -p dnnc-compiler" >&2; exit 2; }
[ -x "$PY" ] || { echo "onnxruntime venv $PY not found" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
compare='
import sys, os, numpy as np
y, r = np.load(sys.argv[1]), np.load(sys.argv[2])
if y.shape != r.shape: print(f"shape {y.shape} vs {r.shape} FAIL"); sys.exit(1)
def outside(r):
    d = np.abs(y.astype(np.float64) - r)
    return d, int((d > 1e-4 + 1e-3 * np.abs(r)).sum())
d, bad = outside(r)
verdict = "FAIL" if bad else "OK"
exact = ""
if len(sys.argv) > 3 and os.path.exists(sys.argv[3]):
    de, be = outside(np.load(sys.argv[3]))
    exact = f"   vs float64: max abs err {de.max():.2e}  outside {be}/{r.size}"
print(f"max abs err {d.max():.2e}  outside {bad}/{r.size}  {verdict}{exact}")
sys.exit(1 if bad else 0)'
status=0
for dir in "$DIR"/*/; do
  name=$(basename "$dir")
  exact="$dir/output_f64.npy"
  if [ -f "$exact" ]; then
    line=$("$PY" -c "$compare" "$dir/output.npy" "$exact")
    printf '%-20s %-10s %s\n' "$name" onnxruntime "vs float64: ${line#max abs err }"
  fi
  for build in $BUILDS; do
    args=(--threads "$T")
    case $build in
      default) ;;
      optimize) args+=(--optimize) ;;
      interp) args=(--backend interp) ;;
      *) args+=(--conv-algo "$build") ;;
    esac
    rm -rf "$tmp/out"
    if ! "$DNNC" run "$dir/model.onnx" --input "$dir/input.npy" --out "$tmp/out" "${args[@]}" >"$tmp/log" 2>&1; then
      printf '%-20s %-10s run failed: %s\n' "$name" "$build" "$(tail -1 "$tmp/log")"; status=1; continue
    fi
    out=$(ls "$tmp/out"/*.npy | head -1)
    line=$("$PY" -c "$compare" "$out" "$dir/output.npy" "$exact") || status=1
    printf '%-20s %-10s %s\n' "$name" "$build" "$line"
  done
done
exit $status
