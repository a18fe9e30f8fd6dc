#!/usr/bin/env python3
"""Float32 error of Winograd F(2x2,3x3) and F(4x4,3x3) against direct convolution, per output
tile, in numpy: the transform matrices of dnnc's CPU backend (compiler/src/codegen/cpu/fastconv.rs,
points 0, +-1, +-2 and infinity for F(4x4)), the filter transform in float64 rounded once (as the
compiler does at compile time), the input transform, the per-frequency sum over channels and the
output transform each rounded to float32. Inputs are ReLU-like (max(N(0,1) + 0.5, 0)), as inside a
CNN, or zero-mean with --zero-mean; filters N(0, 1/(9C)). Prints the mean relative error
(mean |y - exact| / mean |exact|, exact in float64) of direct float32 convolution and of each
algorithm, and each step's share (the error left when that one step runs in float64).

Usage: ../ort-venv/bin/python bench/winograd_error.py [--channels 32] [--tiles 4000] [--zero-mean]
"""
import argparse

import numpy as np

F2 = dict(m=2,
          bt=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
          g=[[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]],
          at=[[1, 1, 1, 0], [0, 1, -1, -1]])
F4 = dict(m=4,
          bt=[[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
              [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
          g=[[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
             [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
          at=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]])


def run(alg, c, tiles, zero_mean, exact_steps=(), seed=0):
    m = alg["m"]
    bt, g, at = (np.array(alg[k], dtype=np.float64) for k in ("bt", "g", "at"))
    a = m + 2
    rng = np.random.default_rng(seed)
    d = rng.standard_normal((c, tiles, a, a))
    if not zero_mean:
        d = np.maximum(d + 0.5, 0.0)
    w = rng.standard_normal((c, 3, 3)) / np.sqrt(9 * c)
    d = d.astype(np.float32).astype(np.float64)
    w = w.astype(np.float32).astype(np.float64)
    exact = np.zeros((tiles, m, m))
    for i in range(3):
        for j in range(3):
            exact += np.einsum("ctxy,c->txy", d[:, :, i:i + m, j:j + m], w[:, i, j])
    f32 = np.float32
    r = (lambda x, step: x if step in exact_steps else x.astype(f32).astype(np.float64))
    u = (g @ w @ g.T).astype(f32).astype(np.float64)
    v = r(bt @ d @ bt.T, "input")
    mm = r(np.einsum("ctij,cij->tij", v, u), "sum")
    y = r(at @ mm @ at.T, "output")
    direct = np.zeros((tiles, m, m), f32)
    for i in range(3):
        for j in range(3):
            direct += np.einsum("ctxy,c->txy", d[:, :, i:i + m, j:j + m].astype(f32),
                                w[:, i, j].astype(f32)).astype(f32)
    scale = np.abs(exact).mean()
    return np.abs(y - exact).mean() / scale, np.abs(direct - exact).mean() / scale


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channels", type=int, default=32)
    ap.add_argument("--tiles", type=int, default=4000)
    ap.add_argument("--zero-mean", action="store_true")
    a = ap.parse_args()
    if a.channels < 1 or a.tiles < 1:
        ap.error("--channels and --tiles must be positive")
    for name, alg in (("F(2x2,3x3)", F2), ("F(4x4,3x3)", F4)):
        err, direct = run(alg, a.channels, a.tiles, a.zero_mean)
        steps = ", ".join(
            f"{s} exact {run(alg, a.channels, a.tiles, a.zero_mean, (s,))[0]:.2e}"
            for s in ("input", "sum", "output"))
        print(f"{name}: mean relative error {err:.2e} = {err / direct:.1f}x direct's {direct:.2e}"
              f"  ({steps})")


if __name__ == "__main__":
    main()
