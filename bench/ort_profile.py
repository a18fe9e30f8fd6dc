#!/usr/bin/env python3
"""Per-node onnxruntime timings (CPU, profiling trace) to put next to `dnnc run --profile`.

Usage:
  /work/ort-venv/bin/python bench/ort_profile.py MODEL.onnx --input INPUT.npy [--threads 1] [--runs 30]
      [--warmup 3] [--top 0] [--dnnc PROFILE.txt]
Prints one line per node (sorted by median time, descending): median us, share, op type, node name.
ORT's optimised graph names most nodes after their (fused) output value, suffixed `_nchwc` in its
blocked layout; the suffix is dropped, so the names match the value names dnnc's `run --profile`
names its kernels by. With --dnnc (the saved output of `dnnc run MODEL --profile`), prints instead
one line per dnnc kernel: dnnc ms vs ORT us and the difference, sorted by the difference. A dnnc
kernel's ORT time is the sum over every ORT node named after a value the kernel computes (walking
back from its output, stopping at other kernels' outputs such as a residual operand): ORT names a
fused Conv + Add + Relu after the conv's output, and fuses a Conv + Sigmoid + Mul into a Conv and a
QuickGelu node named after the Mul node.
A last line puts both runtimes' pointwise (1x1) convs against the peak the dnnc profile measured.
The line before sums the ORT nodes that fall in no kernel (its layout reorders). Settings match ort_reference.py: ORT_ENABLE_ALL,
intra_op_num_threads=N, inter_op 1, sequential.
"""
import argparse
import collections
import json
import os
import statistics
import sys
import tempfile

import numpy as np
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--input", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--top", type=int, default=0, help="print only the N first lines (0: all)")
    ap.add_argument("--dnnc", help="saved `dnnc run --profile` output to put side by side")
    a = ap.parse_args()

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    tmp = tempfile.mkdtemp(prefix="ort_profile_")
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tmp, "ort")
    s = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    x = np.load(a.input)
    feed = {s.get_inputs()[0].name: x}
    for _ in range(a.warmup):
        s.run(None, feed)
    n_warm_runs = a.warmup
    for _ in range(a.runs):
        s.run(None, feed)
    path = s.end_profiling()
    with open(path) as f:
        trace = json.load(f)

    # Each model_run event brackets the node events of one run; skip the warm-up runs.
    runs = sorted((e for e in trace if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    timed = runs[n_warm_runs:]
    run_us = [e["dur"] for e in timed]
    t_start = timed[0]["ts"] if timed else 0
    durs = collections.defaultdict(list)
    info = {}
    for e in trace:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        if e["ts"] < t_start:
            continue
        name = e["name"][: -len("_kernel_time")]
        durs[name].append(e["dur"])
        args = e.get("args", {})
        info[name] = (args.get("op_name", "?"), args.get("output_type_shape", []))
    rows = [(statistics.median(v), name, info[name][0]) for name, v in durs.items()]
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"ort profile {a.model} threads={a.threads} runs={len(timed)} "
          f"median_run_us={statistics.median(run_us) if run_us else 0:.1f} node_sum_us={total:.1f}")
    ort_us = {name.removesuffix("_nchwc"): med for med, name, _ in rows}
    if a.dnnc:
        side_by_side(a, ort_us)
    else:
        print(f"{'us':>9} {'share':>6}  {'op':<22} node")
        for med, name, op in rows[: a.top or len(rows)]:
            print(f"{med:9.1f} {100 * med / total:5.1f}%  {op:<22} {name.removesuffix('_nchwc')}")
    os.remove(path)
    return 0


def side_by_side(a, ort_us):
    """Joins the dnnc profile in `a.dnnc` with the ORT medians by value name."""
    import onnx

    producer = {o: n for n in onnx.load(a.model).graph.node for o in n.output}
    kernels = []
    flops = {}
    peak = None
    with open(a.dnnc) as f:
        for line in f:
            parts = line.split()
            if peak is None and "GFLOP/s a core" in line:
                # "... measured FMA peak of the cores it ran on (249.1 GFLOP/s a core, ..."
                head = line.split("GFLOP/s a core")[0].split("(")[-1]
                try:
                    peak = float(head)
                except ValueError:
                    pass
            if len(parts) < 3 or not parts[0].startswith(("/", "output")):
                continue
            try:
                kernels.append((parts[0], float(parts[1]), parts[6] if len(parts) > 6 else "-"))
            except ValueError:
                continue
            try:
                flops[parts[0]] = float(parts[3]) * float(parts[1]) * 1e6
            except (ValueError, IndexError):
                pass
    outputs = {k[0] for k in kernels}
    lines = []
    claimed = set()

    def region(name):
        # The values dnnc's kernel computes: walk back from its output
        # through producers, stopping at other kernels' outputs (such as a
        # residual operand) and at graph inputs and weights, which have no
        # producer.
        seen, frontier = {name}, [name]
        while frontier:
            v = frontier.pop()
            node = producer.get(v)
            if node is None:
                continue
            for i in node.input:
                if i and i not in seen and i not in outputs and i in producer:
                    seen.add(i)
                    frontier.append(i)
        return seen

    for name, ms, algo in kernels:
        # ORT names a fused node after one value of the chain (Conv ->
        # BatchNormalization -> Add -> Relu after the Conv's output) and
        # may keep some of the chain as separate nodes (Conv, then
        # Sigmoid, then Mul, or fuses Sigmoid + Mul into a QuickGelu node
        # named after the Mul node, "<node>/QuickGeluFusion/"): every ORT
        # node named after a value or a node inside the kernel counts
        # toward it, each node once.
        inside = region(name)
        nodes = {producer[v].name for v in inside if v in producer}
        keys = [
            k for k in ort_us
            if k not in claimed
            and (k in inside or k in nodes or any(k.startswith(n + "/") for n in nodes))
        ]
        claimed.update(keys)
        o = sum(ort_us[k] for k in keys) if keys else None
        lines.append((ms * 1e3 - (o or 0.0), name, algo, ms * 1e3, o))
    rest = sum(v for k, v in ort_us.items() if k not in claimed)
    lines.sort(reverse=True)
    print(f"{'dnnc us':>9} {'ort us':>8} {'diff':>8}  {'algo':<10} kernel")
    for diff, name, algo, d, o in lines[: a.top or len(lines)]:
        ostr = f"{o:8.1f}" if o is not None else f"{'?':>8}"
        print(f"{d:9.1f} {ostr} {diff:8.1f}  {algo:<10} {name}")
    matched = [l for l in lines if l[4] is not None]
    print(f"sum over {len(matched)} matched kernels: dnnc {sum(l[3] for l in matched):.1f} us, "
          f"ort {sum(l[4] for l in matched):.1f} us ({len(lines) - len(matched)} unmatched); "
          f"ort nodes in no dnnc kernel (layout reorders, ...): {rest:.1f} us")
    # Both runtimes' share of the peak on the pointwise (1x1) convs, the
    # same FLOPs over each one's time: the one-core peak the dnnc profile
    # measured, times the thread count.
    if peak and a.threads >= 1:
        cap = peak * a.threads
        pw = [(n, flops[n], d, o) for _, n, algo, d, o in lines
              if algo == "pointwise" and o and n in flops and d > 0]
        if pw:
            share = lambda f, us: 100 * f / (us * 1e3) / cap
            ds = sorted(share(f, d) for _, f, d, _ in pw)
            os_ = sorted(share(f, o) for _, f, _, o in pw)
            print(f"pointwise convs against {cap:.1f} GFLOP/s ({a.threads} x the peak the dnnc profile "
                  f"measured): dnnc median {statistics.median(ds):.0f}% ({sum(v >= 80 for v in ds)} "
                  f"of {len(ds)} at >= 80%), ort median {statistics.median(os_):.0f}% "
                  f"({sum(v >= 80 for v in os_)} at >= 80%)")


if __name__ == "__main__":
    sys.exit(main())
