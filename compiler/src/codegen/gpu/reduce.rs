//! Reductions: pools and LRN with one invocation per output element
//! (each walks its window), and Reduce*, the global pools, Softmax,
//! LogSoftmax, InstanceNormalization and LayerNormalization as log-depth
//! workgroup tree reductions (one workgroup per output row: every
//! invocation strides over the reduced extent accumulating, then the
//! workgroup halves a `var<workgroup>` array log2(size) times). Each
//! kernel's fused elementwise epilogue runs on every result element before
//! it is stored. Semantics follow the interpreter (`dnnc_runtime::kernels`
//! `pool`, `norm`, `reduce`): tap rules, divisors, NaN propagation, the
//! axis conventions.

use super::point::Point;
use super::wgsl::{digits, flat_stage, flit, row_stage, strides, Loc};
use super::GCtx;
use dnnc_ir::infer::norm_axis;
use dnnc_ir::op::{Lrn, Pool2d, ReduceKind};
use dnnc_ir::{Op, OpClass, ValueId};
use dnnc_runtime::gpu::{GpuLimits, GpuStage};
use std::collections::HashMap;
use std::fmt::Write;

/// `-inf`, the identity of max (WGSL has no infinite literal).
const NEG_INF: &str = "bitcast<f32>(0xff800000u)";

/// Whether this module lowers `op` (as a Reduction kernel's anchor):
/// every op of the Reduction class.
pub(crate) fn supports(op: &Op) -> bool {
    op.class() == OpClass::Reduction
}

/// The stages of the kernel anchored by a reduction-class op.
pub(crate) fn lower(cx: &mut GCtx<'_>) -> Result<Vec<GpuStage>, String> {
    let a = cx.anchor();
    let node = cx.g.node(a);
    let op = node.op.clone();
    let x = *node.inputs.first().ok_or("the op has no operand")?;
    let xshape = cx.g.value(x).ty.shape.clone();
    let r = xshape.len();
    match &op {
        Op::MaxPool(p) => pool(cx, p, true),
        Op::AveragePool(p) => pool(cx, p, false),
        Op::Lrn(l) => lrn(cx, l),
        Op::GlobalAveragePool | Op::GlobalMaxPool => {
            if r < 3 {
                return Err(format!("input must have rank at least 3, found {xshape:?}"));
            }
            let kind = if op == Op::GlobalMaxPool {
                ReduceKind::Max
            } else {
                ReduceKind::Mean
            };
            reduce(cx, kind, &(2..r).collect::<Vec<_>>())
        }
        Op::Reduce { kind, axes, .. } => {
            let ax = dnnc_ir::infer::reduce_axes(axes, r)?;
            reduce(cx, *kind, &ax)
        }
        Op::Softmax { axis } => softmax(cx, norm_axis(*axis, r)?, false),
        Op::LogSoftmax { axis } => softmax(cx, norm_axis(*axis, r)?, true),
        Op::InstanceNormalization { epsilon } => {
            if r < 3 {
                return Err(format!("input must have rank at least 3, found {xshape:?}"));
            }
            norm(cx, 2, *epsilon, true)
        }
        Op::LayerNormalization { axis, epsilon } => norm(cx, norm_axis(*axis, r)?, *epsilon, false),
        other => Err(format!("{} is not a reduction", other.name())),
    }
}

/// The anchor's operand, its shape, its result and the result's shape.
fn anchor_io(cx: &GCtx<'_>) -> Result<(ValueId, Vec<usize>, ValueId, Vec<usize>), String> {
    let node = cx.g.node(cx.anchor());
    let x = *node.inputs.first().ok_or("the op has no operand")?;
    let y = *node.outputs.first().ok_or("the op has no result")?;
    Ok((
        x,
        cx.g.value(x).ty.shape.clone(),
        y,
        cx.g.value(y).ty.shape.clone(),
    ))
}

/// Statements that, given the anchor's result in WGSL `f32` expression
/// `acc` at the output element with linear index `oi`, evaluate the fused
/// epilogue there and store every kernel output (the epilogue's results
/// have the anchor's type, so all share the point).
fn finish_point(
    cx: &GCtx<'_>,
    y: ValueId,
    yshape: &[usize],
    acc: &str,
    oi: &str,
) -> Result<String, String> {
    let loc = cx.locf();
    let mut s = format!("  let oacc: f32 = {acc};\n");
    s += &digits(oi, yshape, "o");
    let mut p = Point {
        g: cx.g,
        shape: yshape,
        prefix: "o",
        known: HashMap::from([(y, "oacc".to_string())]),
    };
    s += &p.eval(cx.epilogue(), &loc)?;
    s += &p.store_outputs(&cx.k.outputs, oi, &loc)?;
    Ok(s)
}

/// MaxPool / AveragePool: one invocation per output element walking its
/// window. Taps outside the input never contribute; AveragePool divides
/// by the in-bounds taps, or with `count_include_pad` by the taps inside
/// the padded input (never those past the end padding `ceil_mode` adds).
fn pool(cx: &mut GCtx<'_>, p: &Pool2d, max: bool) -> Result<Vec<GpuStage>, String> {
    if p.data != dnnc_ir::op::DataLayout::Nchw {
        return Err(format!(
            "data={} is a CPU layout; the gpu backend runs NCHW pools",
            p.data.name()
        ));
    }
    let (x, xs, y, ys) = anchor_io(cx)?;
    // The result's shape (its window count) is the graph's, which the
    // IR's inference computed with the same rules.
    let (&[_, _, h, w], 4) = (xs.as_slice(), ys.len()) else {
        return Err(format!(
            "input and result must have rank 4, found {xs:?} and {ys:?}"
        ));
    };
    let xl = cx.loc(x)?;
    let mut b = String::new();
    let _ = writeln!(
        b,
        "  let o2p: u32 = (gi / {wo}u) % {ho}u;\n  let o3p: u32 = gi % {wo}u;\n  \
         let base: u32 = (gi / {hw_o}u) * {hw}u;",
        wo = ys[3].max(1),
        ho = ys[2].max(1),
        hw_o = (ys[2] * ys[3]).max(1),
        hw = h * w,
    );
    if max {
        let _ = writeln!(b, "  var m: f32 = {NEG_INF};");
    } else {
        b += "  var sm: f32 = 0.0;\n  var inside: u32 = 0u;\n  var padded: u32 = 0u;\n";
    }
    let _ = writeln!(
        b,
        "  for (var ky: u32 = 0u; ky < {kh}u; ky = ky + 1u) {{\n\
         \x20   let iy: i32 = i32(o2p * {sh}u + ky * {dh}u) - {pt}i;\n\
         \x20   for (var kx: u32 = 0u; kx < {kw}u; kx = kx + 1u) {{\n\
         \x20     let ix: i32 = i32(o3p * {sw}u + kx * {dw}u) - {pl}i;",
        kh = p.kernel[0],
        kw = p.kernel[1],
        sh = p.strides[0],
        sw = p.strides[1],
        dh = p.dilations[0],
        dw = p.dilations[1],
        pt = p.pads[0],
        pl = p.pads[1],
    );
    if !max {
        let _ = writeln!(
            b,
            "      if (iy < {he}i && ix < {we}i) {{ padded = padded + 1u; }}",
            he = h + p.pads[2],
            we = w + p.pads[3],
        );
    }
    let load = xl.load(&format!("base + u32(iy) * {w}u + u32(ix)"));
    let _ = writeln!(
        b,
        "      if (iy >= 0i && iy < {h}i && ix >= 0i && ix < {w}i) {{\n\
         \x20       let xv: f32 = {load};"
    );
    if max {
        // The interpreter's `if v > m || v.is_nan() { m = v }`.
        b += "        m = select(m, xv, xv > m || d_isnan(xv));\n";
    } else {
        b += "        sm = sm + xv;\n        inside = inside + 1u;\n";
    }
    b += "      }\n    }\n  }\n";
    let acc = if max {
        "m".to_string()
    } else if p.count_include_pad {
        "sm / f32(padded)".to_string()
    } else {
        "sm / f32(inside)".to_string()
    };
    b += &finish_point(cx, y, &ys, &acc, "gi")?;
    let items: usize = ys.iter().product();
    Ok(vec![flat_stage(&cx.label(""), items, cx.limits(), "", &b)])
}

/// LRN: one invocation per element, summing the squares over the
/// channel window `c - floor((size-1)/2) ..= c + ceil((size-1)/2)`
/// clipped to the tensor.
fn lrn(cx: &mut GCtx<'_>, l: &Lrn) -> Result<Vec<GpuStage>, String> {
    let (x, xs, y, ys) = anchor_io(cx)?;
    let &[_, c, h, w] = xs.as_slice() else {
        return Err(format!("input must have rank 4, found {xs:?}"));
    };
    if l.size == 0 {
        return Err("size must be positive".into());
    }
    if ys != xs {
        return Err(format!("result shape {ys:?} differs from the input {xs:?}"));
    }
    let (before, after) = ((l.size - 1) / 2, l.size / 2);
    let hw = h * w;
    let xl = cx.loc(x)?;
    let mut b = String::new();
    let _ = writeln!(
        b,
        "  let cc: u32 = (gi / {hw}u) % {c}u;\n\
         \x20 let plane0: u32 = gi - cc * {hw}u;\n\
         \x20 let lo: u32 = select(0u, cc - {before}u, cc >= {before}u);\n\
         \x20 let hi: u32 = min(cc + {after}u, {cm1}u);\n\
         \x20 var sq: f32 = 0.0;\n\
         \x20 for (var k: u32 = lo; k <= hi; k = k + 1u) {{\n\
         \x20   let xv: f32 = {xk};\n\
         \x20   sq = sq + xv * xv;\n\
         \x20 }}",
        hw = hw.max(1),
        c = c.max(1),
        cm1 = c.saturating_sub(1),
        xk = xl.load(&format!("plane0 + k * {hw}u")),
    );
    let acc = format!(
        "{xv} / d_pow({bias} + {scale} * sq, {beta})",
        xv = xl.load("gi"),
        bias = flit(l.bias),
        scale = flit(l.alpha / l.size as f32),
        beta = flit(l.beta),
    );
    b += &finish_point(cx, y, &ys, &acc, "gi")?;
    let items: usize = ys.iter().product();
    Ok(vec![flat_stage(&cx.label(""), items, cx.limits(), "", &b)])
}

/// How the rows of a row-wise reduction map onto the input: `rows`
/// output rows of `count` reduced elements each; a row's first element
/// and an element's offset within its row are mixed-radix sums over the
/// kept and reduced axes (size-1 axes dropped, adjacent axes of the same
/// kind merged), so reductions over non-trailing axes need no transpose.
struct RowMap {
    rows: usize,
    count: usize,
    kept: Vec<(usize, usize)>,
    red: Vec<(usize, usize)>,
}

impl RowMap {
    fn new(shape: &[usize], axes: &[usize]) -> RowMap {
        let st = strides(shape);
        let mut kept: Vec<(usize, usize)> = Vec::new();
        let mut red: Vec<(usize, usize)> = Vec::new();
        let mut last_red: Option<bool> = None;
        for (a, &d) in shape.iter().enumerate() {
            if d == 1 {
                continue;
            }
            let is_red = axes.contains(&a);
            let list = if is_red { &mut red } else { &mut kept };
            match list.last_mut() {
                // Contiguous with the previous group of the same kind.
                Some(g) if last_red == Some(is_red) => {
                    g.0 *= d;
                    g.1 = st[a];
                }
                _ => list.push((d, st[a])),
            }
            last_red = Some(is_red);
        }
        let rows = shape
            .iter()
            .enumerate()
            .filter(|(a, _)| !axes.contains(a))
            .map(|(_, &d)| d)
            .product();
        let count = axes.iter().map(|&a| shape[a]).product();
        RowMap {
            rows,
            count,
            kept,
            red,
        }
    }

    /// WGSL functions `row_base(row)` and `red_off(j)`.
    fn decls(&self) -> String {
        fn f(name: &str, groups: &[(usize, usize)]) -> String {
            let mut s =
                format!("fn {name}(i: u32) -> u32 {{\n  var rem: u32 = i;\n  var off: u32 = 0u;\n");
            for (k, &(d, st)) in groups.iter().enumerate().rev() {
                if k == 0 {
                    let _ = writeln!(s, "  off = off + rem * {st}u;");
                } else {
                    let _ = writeln!(s, "  off = off + (rem % {d}u) * {st}u; rem = rem / {d}u;");
                }
            }
            s + "  return off;\n}\n"
        }
        f("row_base", &self.kept) + &f("red_off", &self.red)
    }
}

/// Invocations per workgroup of a tree reduction over `count` elements:
/// a power of two, at most 256 and the device's limits (invocations, x
/// size, workgroup memory for `arrays` f32 arrays of that length), no
/// larger than `count` needs.
fn tree_size(l: &GpuLimits, count: usize, arrays: usize) -> u32 {
    let mem = l.max_workgroup_storage / (4 * arrays.max(1) as u32);
    let cap = 256.min(l.max_invocations).min(l.max_size_x).min(mem).max(1);
    let cap = 1u32 << (31 - cap.leading_zeros());
    let need = (count.max(1) as u32).next_power_of_two();
    cap.min(need)
}

/// Statements reducing every invocation's `mine` (an `f32` expression)
/// into `total` across the workgroup: a log2(wg)-step tree over the
/// workgroup array `tree`, `comb(a, b)` the combining expression. Ends
/// with a barrier, so `tree` may be reused right after.
pub(crate) fn tree_reduce(
    wg: u32,
    mine: &str,
    total: &str,
    comb: &dyn Fn(&str, &str) -> String,
) -> String {
    let mut s = format!("  tree[lid] = {mine};\n  workgroupBarrier();\n");
    let mut half = wg / 2;
    while half > 0 {
        let _ = writeln!(
            s,
            "  if (lid < {half}u) {{ tree[lid] = {}; }}\n  workgroupBarrier();",
            comb("tree[lid]", &format!("tree[lid + {half}u]"))
        );
        half /= 2;
    }
    let _ = writeln!(s, "  let {total}: f32 = tree[0];\n  workgroupBarrier();");
    s
}

/// The kernel's single stage: one workgroup of `wg` invocations per row
/// of `map` running `body`, with the workgroup array `tree` that
/// [`tree_reduce`] uses and `map`'s index helpers declared.
fn tree_stage(cx: &GCtx<'_>, map: &RowMap, wg: u32, body: &str) -> GpuStage {
    let decls = format!("var<workgroup> tree: array<f32, {wg}>;\n{}", map.decls());
    row_stage(&cx.label(""), map.rows, wg, cx.limits(), &decls, body)
}

/// Statements accumulating `acc` over this invocation's share of the row
/// (`j = lid, lid + wg, ...`): `init`, then `acc = step(acc, xv)` with `xv`
/// the element.
fn strided(xl: &Loc, count: usize, wg: u32, acc: &str, init: &str, step: &str) -> String {
    format!(
        "  var {acc}: f32 = {init};\n  for (var j: u32 = lid; j < {count}u; j = j + {wg}u) {{\n\
         \x20   let xv: f32 = {x};\n    {acc} = {step};\n  }}\n",
        x = xl.load("base + red_off(j)"),
    )
}

/// The combining expression of a reduction kind.
fn combine(kind: ReduceKind) -> fn(&str, &str) -> String {
    match kind {
        // NaN in either operand wins, like the interpreter's fold.
        ReduceKind::Max => |a, b| format!("d_max({a}, {b})"),
        ReduceKind::Sum | ReduceKind::Mean => |a, b| format!("{a} + {b}"),
    }
}

/// Reduce* and the global pools: one workgroup per output element (the
/// output's linear index is the row: kept axes keep their order).
fn reduce(cx: &mut GCtx<'_>, kind: ReduceKind, axes: &[usize]) -> Result<Vec<GpuStage>, String> {
    let (x, xs, y, ys) = anchor_io(cx)?;
    let map = RowMap::new(&xs, axes);
    if ys.iter().product::<usize>() != map.rows {
        return Err(format!(
            "result shape {ys:?} does not match reducing {xs:?} over {axes:?}"
        ));
    }
    let xl = cx.loc(x)?;
    let wg = tree_size(cx.limits(), map.count, 1);
    let comb = combine(kind);
    let init = match kind {
        ReduceKind::Max => NEG_INF,
        _ => "0.0",
    };
    let mut b = "  let base: u32 = row_base(row);\n".to_string();
    b += &strided(&xl, map.count, wg, "part", init, &comb("part", "xv"));
    b += &tree_reduce(wg, "part", "total", &comb);
    let acc = match kind {
        ReduceKind::Mean => format!("total / {}", flit(map.count as f32)),
        _ => "total".to_string(),
    };
    b += "  if (lid == 0u) {\n";
    b += &finish_point(cx, y, &ys, &acc, "row")?;
    b += "  }\n";
    Ok(vec![tree_stage(cx, &map, wg, &b)])
}

/// Softmax / LogSoftmax along `axis`: per lane, the maximum, then the
/// sum of `exp(x - max)`, then every element written (max subtracted
/// first, like the interpreter, so large inputs cannot overflow).
fn softmax(cx: &mut GCtx<'_>, axis: usize, log: bool) -> Result<Vec<GpuStage>, String> {
    let (x, xs, y, ys) = anchor_io(cx)?;
    if ys != xs {
        return Err(format!("result shape {ys:?} differs from the input {xs:?}"));
    }
    let map = RowMap::new(&xs, &[axis]);
    let xl = cx.loc(x)?;
    let wg = tree_size(cx.limits(), map.count, 1);
    let mut b = "  let base: u32 = row_base(row);\n".to_string();
    b += &strided(&xl, map.count, wg, "pmax", NEG_INF, "max(pmax, xv)");
    b += &tree_reduce(wg, "pmax", "mx", &|a, b| format!("max({a}, {b})"));
    b += &strided(&xl, map.count, wg, "psum", "0.0", "psum + exp(xv - mx)");
    b += &tree_reduce(wg, "psum", "total", &|a, b| format!("{a} + {b}"));
    let acc = if log {
        "(xv - mx) - log(total)"
    } else {
        "exp(xv - mx) / total"
    };
    let _ = writeln!(
        b,
        "  for (var j: u32 = lid; j < {count}u; j = j + {wg}u) {{\n\
         \x20   let idx: u32 = base + red_off(j);\n    let xv: f32 = {xv};",
        count = map.count,
        xv = xl.load("idx"),
    );
    b += &finish_point(cx, y, &ys, acc, "idx")?;
    b += "  }\n";
    Ok(vec![tree_stage(cx, &map, wg, &b)])
}

/// InstanceNormalization (`instance`: rows are (image, channel), scale
/// and bias per channel) and LayerNormalization (rows are the axes
/// before `axis`, scale and optional bias broadcast over the rest): the
/// mean, then the variance about it (two passes, as the interpreter),
/// then `(x - mean) / sqrt(var + eps) * scale + bias` per element.
fn norm(cx: &mut GCtx<'_>, axis: usize, eps: f32, instance: bool) -> Result<Vec<GpuStage>, String> {
    let (x, xs, y, ys) = anchor_io(cx)?;
    if ys != xs {
        return Err(format!("result shape {ys:?} differs from the input {xs:?}"));
    }
    let inputs = cx.g.node(cx.anchor()).inputs.clone();
    let axes: Vec<usize> = (axis..xs.len()).collect();
    let map = RowMap::new(&xs, &axes);
    let inner = &xs[axis..];
    let xl = cx.loc(x)?;
    let wg = tree_size(cx.limits(), map.count, 1);
    let count = map.count;
    let mut b = "  let base: u32 = row_base(row);\n".to_string();
    b += &strided(&xl, count, wg, "psum", "0.0", "psum + xv");
    b += &tree_reduce(wg, "psum", "total", &|a, b| format!("{a} + {b}"));
    let _ = writeln!(
        b,
        "  let mean: f32 = total / {};",
        flit(count.max(1) as f32)
    );
    b += &strided(
        &xl,
        count,
        wg,
        "pvar",
        "0.0",
        "pvar + (xv - mean) * (xv - mean)",
    );
    b += &tree_reduce(wg, "pvar", "vsum", &|a, b| format!("{a} + {b}"));
    let _ = writeln!(
        b,
        "  let inv: f32 = 1.0 / sqrt(vsum / {} + {});",
        flit(count.max(1) as f32),
        flit(eps)
    );
    let _ = writeln!(
        b,
        "  for (var j: u32 = lid; j < {count}u; j = j + {wg}u) {{\n\
         \x20   let idx: u32 = base + red_off(j);\n    let xv: f32 = {xv};",
        xv = xl.load("idx"),
    );
    let (sc, bi) = if instance {
        let c = xs[1];
        let _ = writeln!(b, "    let ch: u32 = row % {}u;", c.max(1));
        let s = cx.loc(inputs[1])?.load("ch");
        let bv = cx.loc(inputs[2])?.load("ch");
        (s, bv)
    } else {
        // Scale and bias broadcast over the normalised axes `inner`.
        let idx_of = |v: ValueId| -> Result<String, String> {
            let vs = &cx.g.value(v).ty.shape;
            if vs.len() > inner.len() {
                return Err(format!(
                    "{vs:?} does not broadcast to the normalised shape {inner:?}"
                ));
            }
            if vs.iter().product::<usize>() == count {
                Ok("j".to_string())
            } else {
                Ok(super::wgsl::broadcast_index(inner, vs, "q"))
            }
        };
        let s = cx.loc(inputs[1])?.load(&idx_of(inputs[1])?);
        let bv = match inputs.get(2) {
            Some(&bv) => cx.loc(bv)?.load(&idx_of(bv)?),
            None => "0.0".to_string(),
        };
        let full = |v: &ValueId| cx.g.value(*v).ty.shape.iter().product::<usize>() == count;
        if !inputs[1..].iter().all(full) {
            // The digits of `j` over the normalised axes.
            b += &digits("j", inner, "q");
        }
        (s, bv)
    };
    let acc = format!("(xv - mean) * inv * {sc} + {bi}");
    b += &finish_point(cx, y, &ys, &acc, "idx")?;
    b += "  }\n";
    Ok(vec![tree_stage(cx, &map, wg, &b)])
}
