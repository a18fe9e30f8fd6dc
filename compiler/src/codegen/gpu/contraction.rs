//! Contractions on the GPU: MatMul, Gemm and Conv2d, each with its fused
//! epilogue applied to every output element before it is stored.
//!
//! One tiled GEMM template serves them all ([`Gemm`]): a workgroup owns a
//! `BM x BN` output tile, stages `BK`-deep slices of both operands in
//! workgroup memory, and each invocation accumulates a `TM x TN` block in
//! registers (register blocking: `TM + TN` shared loads per `TM * TN`
//! FMAs). The operands are expressions, not buffers, so a convolution is
//! an implicit GEMM: its im2col matrix is indexed on the fly and never
//! built. Depthwise convolutions, where a GEMM would have one row, run
//! directly (one invocation per output element). 3x3 stride-1
//! convolutions may run as Winograd F(2x2,3x3): an input transform, 16
//! batched GEMMs on the transformed tiles (the same template), and an
//! output transform that applies the epilogue; the filters are
//! transformed once at compile time.

use super::point::Point;
use super::wgsl::{digits, flat_stage, flit, row_stage, Loc, HEADER};
use super::GCtx;
use dnnc_ir::op::ConvAlgo;
use dnnc_ir::{Op, ValueId};
use dnnc_runtime::gpu::{GpuLimits, GpuStage};
use std::collections::HashMap;
use std::fmt::Write;

/// The ops lowered here.
pub(crate) fn supports(op: &Op) -> bool {
    matches!(op, Op::Conv2d(_) | Op::MatMul | Op::Gemm(_))
}

/// A tile shape for the GEMM template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tile {
    /// Output rows per workgroup.
    pub bm: usize,
    /// Output columns per workgroup.
    pub bn: usize,
    /// Reduction depth staged in workgroup memory per step.
    pub bk: usize,
    /// Rows per invocation (register block).
    pub tm: usize,
    /// Columns per invocation.
    pub tn: usize,
    /// Slices the reduction is split into (split-K): each slice's
    /// workgroups write partial sums, a second stage adds them and runs
    /// the store. 1 = no split.
    pub split: usize,
}

impl Tile {
    fn threads(&self) -> (usize, usize) {
        (self.bn / self.tn, self.bm / self.tm)
    }
}

/// Picks the tile for an `m x n x k` GEMM repeated `batch` times, within
/// the device limits. The model: a tile's time is its padded work divided
/// by the rate its register block sustains — an invocation issues
/// `TM*TN` FMAs per `TM+TN` workgroup-memory loads, so the rate grows
/// with `TM*TN/(TM+TN)` — and a grid of fewer workgroups than the device
/// keeps busy (`GpuLimits::busy_groups`: 64 for a GPU, the thread count
/// for a software adapter) leaves the rest idle, so its time is scaled by
/// `busy / groups`. A long reduction may also split into 2-16 slices
/// (split-K, at least 128 deep each), multiplying the workgroups, at the
/// price of writing and re-reading one partial result per slice (priced
/// at 16 FMAs a word). Among tiles that fit the limits (invocations,
/// workgroup size per axis, workgroup memory, grid z), the cheapest wins.
pub(crate) fn choose_tile(m: usize, n: usize, k: usize, batch: usize, l: &GpuLimits) -> Tile {
    let busy_groups = f64::from(l.busy_groups.max(1));
    let candidates = [
        (128, 128, 8, 8),
        (64, 128, 4, 8),
        (128, 64, 8, 4),
        (64, 64, 4, 4),
        (32, 64, 2, 4),
        (64, 32, 4, 2),
        (32, 32, 2, 2),
        (16, 64, 1, 4),
        (64, 16, 4, 1),
        (16, 32, 1, 2),
        (32, 16, 2, 1),
        (16, 16, 1, 1),
        (8, 8, 1, 1),
    ];
    const PARTIAL_WORD_COST: f64 = 16.0;
    let bk = if k >= 16 { 16 } else { 8 };
    let mut best: Option<(f64, Tile)> = None;
    for (bm, bn, tm, tn) in candidates {
        for split in [1, 2, 4, 8, 16] {
            if split > 1 && (k / split < 128 || batch * split > l.max_groups_per_dim as usize) {
                continue;
            }
            let t = Tile {
                bm,
                bn,
                bk,
                tm,
                tn,
                split,
            };
            let (tx, ty) = t.threads();
            let shared = (bm + bn) * bk * 4;
            if tx * ty > l.max_invocations as usize
                || tx > l.max_size_x as usize
                || ty > l.max_size_y as usize
                || shared > l.max_workgroup_storage as usize
            {
                continue;
            }
            let groups = m.div_ceil(bm) * n.div_ceil(bn) * batch * split;
            let padded = (m.div_ceil(bm) * bm * n.div_ceil(bn) * bn * batch * k.max(1)) as f64;
            let rate = (tm * tn) as f64 / (tm + tn) as f64;
            let idle = (busy_groups / groups as f64).max(1.0);
            let partials = if split > 1 {
                (split * batch * m * n) as f64 * PARTIAL_WORD_COST
            } else {
                0.0
            };
            let cost = padded / rate * idle + partials;
            if best.is_none_or(|(c, _)| cost < c) {
                best = Some((cost, t));
            }
        }
    }
    best.map(|(_, t)| t).unwrap_or(Tile {
        bm: 1,
        bn: 1,
        bk: 8,
        tm: 1,
        tn: 1,
        split: 1,
    })
}

/// A GEMM `C[b] = A[b] · B[b]` whose operands are WGSL expressions.
pub(crate) struct Gemm<'a> {
    /// Rows of the result.
    pub m: usize,
    /// Columns of the result.
    pub n: usize,
    /// Reduction length.
    pub k: usize,
    /// Independent GEMMs (grid z).
    pub batch: usize,
    /// `A[bb][gm][gk]` as an f32 expression of the u32s `bb`, `gm`, `gk`
    /// (called only in range).
    pub a: &'a str,
    /// `B[bb][gk][gn]`, of `bb`, `gk`, `gn`.
    pub b: &'a str,
    /// Statements consuming the result `acc` at `bb`, `gm`, `gn` (called
    /// only in range).
    pub store: &'a str,
    /// Statements before the main loop (per-batch constants of `bb`).
    pub prologue: &'a str,
    /// Module-scope declarations the operand expressions call (helper
    /// functions).
    pub decls: &'a str,
}

/// The stages of `gm`: the tiled GEMM shader, and with split-K a second
/// stage adding the slices' partial sums (kept in kernel scratch) before
/// the store.
pub(crate) fn gemm_stages(cx: &mut GCtx<'_>, what: &str, gm: &Gemm<'_>) -> Vec<GpuStage> {
    if gm.m.min(gm.n) <= DOT_MAX_SIDE && gm.k >= 32 {
        return vec![dot_stage(cx, what, gm)];
    }
    let t = choose_tile(gm.m, gm.n, gm.k, gm.batch, cx.limits());
    gemm_stages_with(cx, what, gm, t)
}

/// Up to this many rows (or columns), a GEMM is a few dot products per
/// output column (a batch-1 fully connected layer is one row): the tiled
/// template would pad it to a whole tile of 8-128 rows.
const DOT_MAX_SIDE: usize = 4;

/// One workgroup per output element: its invocations stride over the
/// reduction (consecutive `k`, contiguous in a row-major A and a
/// transposed B, so loads coalesce), then a log-depth tree sum in
/// workgroup memory, and the first invocation runs the store.
fn dot_stage(cx: &GCtx<'_>, what: &str, gm: &Gemm<'_>) -> GpuStage {
    let l = cx.limits();
    let cap = 64.min(l.max_invocations).min(l.max_size_x).max(1);
    let wg = 1u32 << (31 - cap.leading_zeros());
    let rows = gm.batch * gm.m * gm.n;
    let mut body = gemm_point(gm, "row");
    let _ = write!(
        body,
        "  var part: f32 = 0.0;\n  for (var gk = lid; gk < {k}u; gk = gk + {wg}u) {{ part = fma({a}, {b}, part); }}\n",
        k = gm.k,
        a = gm.a,
        b = gm.b,
    );
    body += &super::reduce::tree_reduce(wg, "part", "sum", &|x, y| format!("{x} + {y}"));
    body += &format!(
        "  if (lid == 0u) {{\n      let acc = sum;\n{}  }}\n",
        gm.store
    );
    let decls = format!("var<workgroup> tree: array<f32, {wg}>;\n{}", gm.decls);
    let label = if what.is_empty() {
        "dot".to_string()
    } else {
        format!("{what}.dot")
    };
    row_stage(&cx.label(&label), rows, wg, l, &decls, &body)
}

/// Statements decoding the GEMM output point `bb`, `gm`, `gn` from the
/// linear index `lin` over `batch x m x n`, then the per-batch prologue:
/// what the store expects wherever the point comes from.
fn gemm_point(gm: &Gemm<'_>, lin: &str) -> String {
    format!(
        "  let bb = {lin} / {mn}u; let gm = ({lin} / {n}u) % {m}u; let gn = {lin} % {n}u;\n{}",
        gm.prologue,
        mn = gm.m * gm.n,
        n = gm.n,
        m = gm.m,
    )
}

/// [`gemm_stages`] with the tile given (tests force split-K with it).
pub(crate) fn gemm_stages_with(
    cx: &mut GCtx<'_>,
    what: &str,
    gm: &Gemm<'_>,
    t: Tile,
) -> Vec<GpuStage> {
    if t.split <= 1 {
        return vec![gemm_stage(&cx.label(what), gm, t, None, cx.limits())];
    }
    let mn = gm.batch * gm.m * gm.n;
    let partial = cx.scratch(t.split * mn);
    let sub = |s: &str| {
        if what.is_empty() {
            s.to_string()
        } else {
            format!("{what}.{s}")
        }
    };
    let main = gemm_stage(
        &cx.label(&sub("split-k")),
        gm,
        t,
        Some(partial),
        cx.limits(),
    );
    let mut body = gemm_point(gm, "gi");
    let _ = writeln!(
        body,
        "  var acc: f32 = 0.0;\n  for (var kz = 0u; kz < {split}u; kz = kz + 1u) {{ acc = acc + {p}; }}",
        split = t.split,
        p = partial.load(&format!("kz * {mn}u + gi")),
    );
    body.push_str(gm.store);
    let sum = flat_stage(
        &cx.label(&sub("split-k-sum")),
        mn,
        cx.limits(),
        gm.decls,
        &body,
    );
    vec![main, sum]
}

/// The tiled GEMM shader for `gm` with tile `t`; with `partial`, slice
/// `wid.z / batch` of the reduction, its sums stored there instead.
fn gemm_stage(
    label: &str,
    gm: &Gemm<'_>,
    t: Tile,
    partial: Option<Loc>,
    l: &GpuLimits,
) -> GpuStage {
    let (tx, ty) = t.threads();
    let nt = tx * ty;
    let (bm, bn, bk) = (t.bm, t.bn, t.bk);
    let mut s = String::new();
    s.push_str(HEADER);
    s.push_str(super::point::HELPERS);
    s.push_str(gm.decls);
    let _ = writeln!(s, "var<workgroup> As: array<f32, {}>;", bm * bk);
    let _ = writeln!(s, "var<workgroup> Bs: array<f32, {}>;", bn * bk);
    let gx = gm.n.div_ceil(bn);
    let gy = gm.m.div_ceil(bm);
    // The batch goes on z when it fits, else folds into y.
    let zmax = l.max_groups_per_dim as usize;
    let split = t.split.max(1);
    let (gy_eff, gz) = if gm.batch * split <= zmax {
        (gy, gm.batch * split)
    } else {
        (gy * gm.batch, 1)
    };
    let _ = write!(
        s,
        "\n@compute @workgroup_size({tx}, {ty})\n\
         fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{\n"
    );
    if split > 1 {
        let _ = writeln!(
            s,
            "  let bb = wid.z % {b}u;\n  let kz = wid.z / {b}u;\n  let by = wid.y;",
            b = gm.batch
        );
    } else if gz == gm.batch {
        let _ = writeln!(s, "  let bb = wid.z;\n  let by = wid.y;");
    } else {
        let _ = writeln!(s, "  let bb = wid.y / {gy}u;\n  let by = wid.y % {gy}u;");
    }
    let _ = writeln!(
        s,
        "  let m0 = by * {bm}u;\n  let n0 = wid.x * {bn}u;\n  let tx = lid3.x;\n  let ty = lid3.y;"
    );
    s.push_str(gm.prologue);
    for i in 0..t.tm * t.tn {
        let _ = writeln!(s, "  var c{i}: f32 = 0.0;");
    }
    // The slice of the reduction this workgroup adds up.
    let ks = gm.k.div_ceil(split).div_ceil(bk) * bk;
    if split > 1 {
        let _ = writeln!(
            s,
            "  let kbeg = kz * {ks}u;\n  let kend = min({k}u, kbeg + {ks}u);",
            k = gm.k
        );
    } else {
        let _ = writeln!(s, "  let kbeg = 0u;\n  let kend = {}u;", gm.k);
    }
    let _ = write!(
        s,
        "  for (var k0 = kbeg; k0 < kend; k0 = k0 + {bk}u) {{\n\
         \x20   for (var i = lid; i < {abk}u; i = i + {nt}u) {{\n\
         \x20     let mm = i / {bk}u; let kk = i % {bk}u; let gm = m0 + mm; let gk = k0 + kk;\n\
         \x20     var v = 0.0;\n\
         \x20     if (gm < {m}u && gk < kend) {{ v = {a}; }}\n\
         \x20     As[kk * {bm}u + mm] = v;\n\
         \x20   }}\n\
         \x20   for (var i = lid; i < {bbk}u; i = i + {nt}u) {{\n\
         \x20     let kk = i / {bn}u; let nn = i % {bn}u; let gn = n0 + nn; let gk = k0 + kk;\n\
         \x20     var v = 0.0;\n\
         \x20     if (gn < {n}u && gk < kend) {{ v = {b}; }}\n\
         \x20     Bs[kk * {bn}u + nn] = v;\n\
         \x20   }}\n\
         \x20   workgroupBarrier();\n\
         \x20   for (var kk = 0u; kk < {bk}u; kk = kk + 1u) {{\n",
        m = gm.m,
        n = gm.n,
        abk = bm * bk,
        bbk = bn * bk,
        a = gm.a,
        b = gm.b,
    );
    for i in 0..t.tm {
        let _ = writeln!(s, "      let a{i} = As[kk * {bm}u + ty + {}u];", i * ty);
    }
    for j in 0..t.tn {
        let _ = writeln!(s, "      let b{j} = Bs[kk * {bn}u + tx + {}u];", j * tx);
    }
    for i in 0..t.tm {
        for j in 0..t.tn {
            let c = i * t.tn + j;
            let _ = writeln!(s, "      c{c} = fma(a{i}, b{j}, c{c});");
        }
    }
    let _ = write!(s, "    }}\n    workgroupBarrier();\n  }}\n");
    let store = match partial {
        Some(p) => format!(
            "      {}\n",
            p.store(
                &format!(
                    "((kz * {}u + bb) * {}u + gm) * {}u + gn",
                    gm.batch, gm.m, gm.n
                ),
                "acc"
            )
        ),
        None => gm.store.to_string(),
    };
    for i in 0..t.tm {
        for j in 0..t.tn {
            let c = i * t.tn + j;
            let _ = write!(
                s,
                "  {{\n    let gm = m0 + ty + {}u; let gn = n0 + tx + {}u;\n    if (gm < {}u && gn < {}u) {{\n      let acc = c{c};\n{}    }}\n  }}\n",
                i * ty,
                j * tx,
                gm.m,
                gm.n,
                store
            );
        }
    }
    s.push_str("}\n");
    GpuStage {
        label: label.to_string(),
        wgsl: s,
        workgroups: if gm.m * gm.n * gm.batch == 0 {
            [0, 1, 1]
        } else {
            [gx as u32, gy_eff as u32, gz as u32]
        },
    }
}

/// Statements applying the epilogue to `acc` at output linear index `oi`
/// of `out` (shape `shape`) and storing every kernel output.
fn epilogue(cx: &GCtx<'_>, out: ValueId, shape: &[usize]) -> Result<String, String> {
    let loc = cx.locf();
    let mut p = Point {
        g: cx.g,
        shape,
        prefix: "o",
        known: HashMap::from([(out, "acc".to_string())]),
    };
    let mut s = digits("oi", shape, "o");
    s += &p.eval(cx.epilogue(), &loc)?;
    s += &p.store_outputs(&cx.k.outputs, "oi", &loc)?;
    Ok(s)
}

/// Lowers the kernel's MatMul, Gemm or Conv2d and its epilogue.
pub(crate) fn lower(cx: &mut GCtx<'_>) -> Result<Vec<GpuStage>, String> {
    let anchor = cx.anchor();
    let node = cx.g.node(anchor);
    match &node.op {
        Op::MatMul => matmul(cx),
        Op::Gemm(p) => gemm(cx, p.alpha, p.beta, p.trans_a, p.trans_b),
        Op::Conv2d(c) => conv(cx, c),
        other => Err(format!("{} is not a GEMM-based op", other.name())),
    }
}

fn matmul(cx: &mut GCtx<'_>) -> Result<Vec<GpuStage>, String> {
    let node = cx.g.node(cx.anchor());
    let (av, bv, out) = (node.inputs[0], node.inputs[1], node.outputs[0]);
    let mut sa = cx.g.value(av).ty.shape.clone();
    let mut sb = cx.g.value(bv).ty.shape.clone();
    if sa.len() == 1 {
        sa.insert(0, 1);
    }
    if sb.len() == 1 {
        sb.push(1);
    }
    let (ra, rb) = (sa.len(), sb.len());
    let (m, k, n) = (sa[ra - 2], sa[ra - 1], sb[rb - 1]);
    let batch_shape = dnnc_ir::infer::broadcast_shapes(&sa[..ra - 2], &sb[..rb - 2])?;
    let batch: usize = batch_shape.iter().product();
    let (la, lb) = (cx.loc(av)?, cx.loc(bv)?);
    let mut prologue = digits("bb", &batch_shape, "z");
    let a_off = super::wgsl::broadcast_index(&batch_shape, &sa[..ra - 2], "z");
    let b_off = super::wgsl::broadcast_index(&batch_shape, &sb[..rb - 2], "z");
    let _ = writeln!(
        prologue,
        "  let aoff = ({a_off}) * {}u;\n  let boff = ({b_off}) * {}u;",
        m * k,
        k * n
    );
    let a = la.load(&format!("aoff + gm * {k}u + gk"));
    let b = lb.load(&format!("boff + gk * {n}u + gn"));
    let shape = cx.g.value(out).ty.shape.clone();
    let store = format!(
        "      let oi = (bb * {m}u + gm) * {n}u + gn;\n{}",
        epilogue(cx, out, &shape)?
    );
    let gm = Gemm {
        m,
        n,
        k,
        batch,
        a: &a,
        b: &b,
        store: &store,
        prologue: &prologue,
        decls: "",
    };
    Ok(gemm_stages(cx, "", &gm))
}

fn gemm(
    cx: &mut GCtx<'_>,
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
) -> Result<Vec<GpuStage>, String> {
    let node = cx.g.node(cx.anchor());
    let (av, bv, out) = (node.inputs[0], node.inputs[1], node.outputs[0]);
    let sa = &cx.g.value(av).ty.shape;
    let sb = &cx.g.value(bv).ty.shape;
    let (m, k) = if trans_a {
        (sa[1], sa[0])
    } else {
        (sa[0], sa[1])
    };
    let n = if trans_b { sb[0] } else { sb[1] };
    let (la, lb) = (cx.loc(av)?, cx.loc(bv)?);
    let a = la.load(&if trans_a {
        format!("gk * {m}u + gm")
    } else {
        format!("gm * {k}u + gk")
    });
    let b = lb.load(&if trans_b {
        format!("gn * {k}u + gk")
    } else {
        format!("gk * {n}u + gn")
    });
    let mut scale = if alpha == 1.0 {
        String::new()
    } else {
        format!("      let acc0 = acc * {};\n", flit(alpha))
    };
    let mut acc = if alpha == 1.0 { "acc" } else { "acc0" }.to_string();
    if let Some(&cv) = node.inputs.get(2) {
        let lc = cx.loc(cv)?;
        let idx = super::wgsl::broadcast_index(&[m, n], &cx.g.value(cv).ty.shape, "c");
        let _ = writeln!(
            scale,
            "      let c0 = gm; let c1 = gn;\n      let acc1 = {acc} + {} * {};",
            flit(beta),
            lc.load(&idx)
        );
        acc = "acc1".into();
    }
    let shape = cx.g.value(out).ty.shape.clone();
    let store = format!(
        "{scale}      let oi = gm * {n}u + gn;\n      {{\n      let acc = {acc};\n{}      }}\n",
        epilogue(cx, out, &shape)?
    );
    let gm = Gemm {
        m,
        n,
        k,
        batch: 1,
        a: &a,
        b: &b,
        store: &store,
        prologue: "",
        decls: "",
    };
    Ok(gemm_stages(cx, "", &gm))
}

/// Geometry of one Conv2d.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConvGeom {
    /// Images.
    pub n: usize,
    /// Input channels.
    pub c: usize,
    /// Input height, width.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output channels.
    pub co: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Kernel height, width.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Strides (h, w).
    pub s: [usize; 2],
    /// Dilations (h, w).
    pub d: [usize; 2],
    /// Top and left padding.
    pub p: [usize; 2],
    /// Groups.
    pub g: usize,
}

fn geom(cx: &GCtx<'_>, c: &dnnc_ir::op::Conv2d) -> Result<ConvGeom, String> {
    let node = cx.g.node(cx.anchor());
    let xs = &cx.g.value(node.inputs[0]).ty.shape;
    let ws = &cx.g.value(node.inputs[1]).ty.shape;
    let ys = &cx.g.value(node.outputs[0]).ty.shape;
    let four = |s: &[usize], what: &str| -> Result<[usize; 4], String> {
        <[usize; 4]>::try_from(s).map_err(|_| format!("{what} must be 4-D, found {s:?}"))
    };
    let [n, ci, h, w] = four(xs, "input")?;
    let [co, _, kh, kw] = four(ws, "weight")?;
    let [_, _, oh, ow] = four(ys, "result")?;
    Ok(ConvGeom {
        n,
        c: ci,
        h,
        w,
        co,
        oh,
        ow,
        kh,
        kw,
        s: c.strides,
        d: c.dilations,
        p: [c.pads[0], c.pads[1]],
        g: c.group.max(1),
    })
}

fn conv(cx: &mut GCtx<'_>, c: &dnnc_ir::op::Conv2d) -> Result<Vec<GpuStage>, String> {
    if c.data != dnnc_ir::op::DataLayout::Nchw {
        return Err(format!(
            "data={} is a CPU layout; the gpu backend runs NCHW convolutions",
            c.data.name()
        ));
    }
    let gmt = geom(cx, c)?;
    let node = cx.g.node(cx.anchor());
    let (xv, wv, out) = (node.inputs[0], node.inputs[1], node.outputs[0]);
    let bias = node.inputs.get(2).copied();
    let (lx, lw) = (cx.loc(xv)?, cx.loc(wv)?);
    let lb = bias.map(|b| cx.loc(b)).transpose()?;
    let cg = gmt.c / gmt.g;
    let mg = gmt.co / gmt.g;
    if cg == 1 && mg == 1 && gmt.g > 1 {
        cx.algo = Some("direct");
        return direct(cx, &gmt, lx, lw, lb, out);
    }
    if winograd_applies(&gmt) && use_winograd(cx, &gmt, c.algo) {
        if let Some(filter) = cx.weight_data(wv) {
            cx.algo = Some("winograd2");
            return super::winograd::lower(cx, &gmt, &filter, lx, lb, out);
        }
    }
    cx.algo = Some("implicit-gemm");
    let ConvGeom {
        n: _,
        c: cin,
        h,
        w,
        co,
        oh,
        ow,
        kh,
        kw,
        s,
        d,
        p,
        g: _,
    } = gmt;
    let k = cg * kh * kw;
    let ncols = gmt.n * oh * ow;
    let a = lw.load(&format!("(bb * {mg}u + gm) * {k}u + gk"));
    let pointwise = kh == 1 && kw == 1 && s == [1, 1] && p == [0, 0];
    let b = if pointwise {
        let hw = oh * ow;
        lx.load(&format!(
            "((gn / {hw}u) * {cin}u + bb * {cg}u + gk) * {hw}u + gn % {hw}u"
        ))
    } else {
        "conv_b(bb, gk, gn)".to_string()
    };
    let helper = if pointwise {
        String::new()
    } else {
        // The implicit im2col element: input channel, tap, output pixel
        // decoded from (gk, gn); zero outside the padded input.
        format!(
            "fn conv_b(bb: u32, gk: u32, gn: u32) -> f32 {{\n\
             \x20 let ci = gk / {kk}u; let r = gk % {kk}u; let ky = r / {kw}u; let kx = r % {kw}u;\n\
             \x20 let img = gn / {hw}u; let q = gn % {hw}u; let oy = q / {ow}u; let ox = q % {ow}u;\n\
             \x20 let iy = i32(oy * {sh}u + ky * {dh}u) - {ph}i;\n\
             \x20 let ix = i32(ox * {sw}u + kx * {dw}u) - {pw}i;\n\
             \x20 if (iy < 0i || ix < 0i || iy >= {h}i || ix >= {w}i) {{ return 0.0; }}\n\
             \x20 return {load};\n}}\n",
            kk = kh * kw,
            hw = oh * ow,
            sh = s[0],
            sw = s[1],
            dh = d[0],
            dw = d[1],
            ph = p[0],
            pw = p[1],
            load = lx.load(&format!(
                "((img * {cin}u + bb * {cg}u + ci) * {h}u + u32(iy)) * {w}u + u32(ix)"
            )),
        )
    };
    let shape = cx.g.value(out).ty.shape.clone();
    let hw = oh * ow;
    let bias_add = match lb {
        Some(l) => format!("      let acc = acc0 + {};\n", l.load("co")),
        None => "      let acc = acc0;\n".to_string(),
    };
    let store = format!(
        "      let acc0 = acc;\n      let co = bb * {mg}u + gm;\n      {{\n{bias_add}      let oi = ((gn / {hw}u) * {co}u + co) * {hw}u + gn % {hw}u;\n{}      }}\n",
        epilogue(cx, out, &shape)?
    );
    let gm = Gemm {
        m: mg,
        n: ncols,
        k,
        batch: gmt.g,
        a: &a,
        b: &b,
        store: &store,
        prologue: "",
        decls: &helper,
    };
    Ok(gemm_stages(cx, "", &gm))
}

/// Depthwise convolution: one invocation per output element.
fn direct(
    cx: &GCtx<'_>,
    gmt: &ConvGeom,
    lx: Loc,
    lw: Loc,
    lb: Option<Loc>,
    out: ValueId,
) -> Result<Vec<GpuStage>, String> {
    let ConvGeom {
        h,
        w,
        co,
        oh,
        ow,
        kh,
        kw,
        s,
        d,
        p,
        ..
    } = *gmt;
    let shape = cx.g.value(out).ty.shape.clone();
    let total: usize = shape.iter().product();
    let mut body = String::new();
    let _ = write!(
        body,
        "  let ox = gi % {ow}u; let oy = (gi / {ow}u) % {oh}u; let ch = (gi / {ohw}u) % {co}u; let img = gi / {cohw}u;\n\
         \x20 var acc0: f32 = {init};\n\
         \x20 for (var ky = 0u; ky < {kh}u; ky = ky + 1u) {{\n\
         \x20   let iy = i32(oy * {sh}u + ky * {dh}u) - {ph}i;\n\
         \x20   if (iy < 0i || iy >= {h}i) {{ continue; }}\n\
         \x20   for (var kx = 0u; kx < {kw}u; kx = kx + 1u) {{\n\
         \x20     let ix = i32(ox * {sw}u + kx * {dw}u) - {pw}i;\n\
         \x20     if (ix < 0i || ix >= {w}i) {{ continue; }}\n\
         \x20     acc0 = fma({x}, {wt}, acc0);\n\
         \x20   }}\n\
         \x20 }}\n\
         \x20 let acc = acc0;\n\
         \x20 let oi = gi;\n",
        ohw = oh * ow,
        cohw = co * oh * ow,
        init = lb.map(|l| l.load("ch")).unwrap_or_else(|| "0.0".into()),
        sh = s[0],
        sw = s[1],
        dh = d[0],
        dw = d[1],
        ph = p[0],
        pw = p[1],
        x = lx.load(&format!("((img * {co}u + ch) * {h}u + u32(iy)) * {w}u + u32(ix)")),
        wt = lw.load(&format!("(ch * {kh}u + ky) * {kw}u + kx")),
    );
    body += &epilogue(cx, out, &shape)?;
    Ok(vec![flat_stage(
        &cx.label(""),
        total,
        cx.limits(),
        "",
        &body,
    )])
}

/// Whether Winograd F(2x2,3x3) computes this convolution.
pub(crate) fn winograd_applies(gmt: &ConvGeom) -> bool {
    gmt.kh == 3 && gmt.kw == 3 && gmt.s == [1, 1] && gmt.d == [1, 1] && gmt.g == 1
}

/// Whether to run an applicable convolution as Winograd: forced by the
/// options or the node's `algo`, else when its multiply count (16 per
/// 2x2 output tile and channel pair, against 36) saves more than the
/// transforms cost: enough channels that the GEMMs dominate.
fn use_winograd(cx: &GCtx<'_>, gmt: &ConvGeom, algo: ConvAlgo) -> bool {
    match (cx.opts.winograd, algo) {
        (Some(force), _) => force,
        (None, ConvAlgo::Winograd2 | ConvAlgo::Winograd4) => true,
        (None, ConvAlgo::Auto) => gmt.c >= 32 && gmt.co >= 32 && gmt.oh * gmt.ow >= 64,
        (None, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_fit_the_limits_and_shrink_for_small_gemms() {
        let l = GpuLimits::default();
        let big = choose_tile(512, 3136, 576, 1, &l);
        assert_eq!((big.bm, big.bn), (128, 128));
        let fc = choose_tile(1, 1000, 512, 1, &l);
        assert!(fc.bm <= 16, "{fc:?}");
        let tiny = GpuLimits {
            max_invocations: 64,
            max_size_x: 64,
            max_size_y: 64,
            ..l
        };
        let t = choose_tile(512, 512, 512, 1, &tiny);
        let (tx, ty) = t.threads();
        assert!(tx * ty <= 64, "{t:?}");
    }
}
