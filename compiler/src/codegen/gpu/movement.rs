//! Data movement and generated tensors: Concat, Split, Slice, Transpose,
//! Pad, Gather, Expand, ConstantOfShape, Tile, Range and Resize.
//!
//! Every stage runs one invocation per element it writes, which computes
//! the linear index of the element it reads from the output digits with
//! compile-time shapes and strides, and copies that 32-bit word (f32 bits,
//! i64 as i32, bool as 0/1: one copy path for every dtype). Concat runs one
//! stage per operand and Split one per result, so no invocation branches on
//! which piece it is in. Semantics are the interpreter's
//! (`dnnc_runtime::kernels::{movement, generate, resize}`), with one
//! Gather index outside `[-d, d)` fails the run with the interpreter's
//! message (the shader raises the kernel's error code and reads a clamped
//! index, so it never reads out of bounds). Resize uses the interpreter's own per-axis taps
//! (`dnnc_runtime::resize_axis_taps`), emitted as `var<private>` tables, so
//! the source indices and weights are bit-identical; only the weighted sum
//! runs in f32 instead of f64.

use super::wgsl::{broadcast_index, digits, flat_stage, flit, strides};
use super::GCtx;
use dnnc_ir::infer::{norm_axis, slice_range};
use dnnc_ir::op::{PadMode, RangeParams, Resize, ResizeMode, Scalar};
use dnnc_ir::{DType, Op, OpClass, ValueId};
use dnnc_runtime::gpu::GpuStage;
use std::fmt::Write;

/// Whether `op` has a data-movement lowering here: the DataMovement
/// class (`Shape` included: `compile_gpu` materialises it as a constant,
/// so its kernel needs no stage but must count as supported), and Range,
/// a generated sequence the fusion overlay gives a kernel of its own.
pub(crate) fn supports(op: &Op) -> bool {
    op.class() == OpClass::DataMovement || matches!(op, Op::Range(_))
}

/// The stages of the kernel's single data-movement node.
pub(crate) fn lower(cx: &mut GCtx<'_>) -> Result<Vec<GpuStage>, String> {
    let node = cx.g.node(cx.anchor());
    let op = &node.op;
    let inputs = node.inputs.clone();
    let outputs = node.outputs.clone();
    let out = *outputs.first().ok_or("the node has no result")?;
    let oshape = shape(cx, out);
    match op {
        Op::Shape { .. } => Ok(Vec::new()),
        Op::Concat { axis } => concat(cx, &inputs, out, *axis),
        Op::Split { axis, .. } => split(cx, inputs[0], &outputs, *axis),
        Op::Slice {
            starts,
            ends,
            axes,
            steps,
        } => slice(cx, inputs[0], out, starts, ends, axes, steps),
        Op::Transpose { perm } => {
            let ishape = shape(cx, inputs[0]);
            let ist = strides(&ishape);
            if perm.len() != ishape.len() || perm.iter().any(|&p| p >= ishape.len()) {
                return Err(format!("perm {perm:?} does not fit rank {}", ishape.len()));
            }
            let coords: Vec<(String, usize)> = perm
                .iter()
                .enumerate()
                .map(|(a, &p)| (format!("i{a}"), ist[p]))
                .collect();
            copy(cx, inputs[0], out, &linear(&coords), "")
        }
        Op::Pad { pads, mode, value } => pad(cx, inputs[0], out, pads, *mode, *value),
        Op::Gather { axis } => gather(cx, inputs[0], inputs[1], out, *axis),
        Op::Expand { .. } => {
            let ishape = shape(cx, inputs[0]);
            copy(
                cx,
                inputs[0],
                out,
                &broadcast_index(&oshape, &ishape, "i"),
                "",
            )
        }
        Op::Tile { repeats } => {
            let ishape = shape(cx, inputs[0]);
            if repeats.len() != ishape.len() {
                return Err(format!(
                    "repeats {repeats:?} do not fit rank {}",
                    ishape.len()
                ));
            }
            let ist = strides(&ishape);
            let coords: Vec<(String, usize)> = (0..ishape.len())
                .map(|a| {
                    let c = if repeats[a] == 1 {
                        format!("i{a}")
                    } else {
                        format!("(i{a} % {}u)", ishape[a].max(1))
                    };
                    (c, ist[a])
                })
                .collect();
            copy(cx, inputs[0], out, &linear(&coords), "")
        }
        Op::ConstantOfShape { value, .. } => {
            let w = scalar_word(*value)?;
            fill(cx, out, &format!("{w}u"))
        }
        Op::Range(r) => range(cx, out, r),
        Op::Resize(p) => resize(cx, inputs[0], out, p),
        other => Err(format!("{} is not a data-movement op", other.name())),
    }
}

fn shape(cx: &GCtx<'_>, v: ValueId) -> Vec<usize> {
    cx.g.value(v).ty.shape.clone()
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

/// `sum(coord * stride)` as a `u32` expression (`0u` for rank 0).
fn linear(terms: &[(String, usize)]) -> String {
    let parts: Vec<String> = terms
        .iter()
        .map(|(c, s)| {
            if *s == 1 {
                c.clone()
            } else {
                format!("{c} * {s}u")
            }
        })
        .collect();
    if parts.is_empty() {
        "0u".into()
    } else {
        parts.join(" + ")
    }
}

/// The word an i64 takes on the GPU (as i32), or an error when it does
/// not fit, as for weights (`dnnc_runtime::gpu::tensor_words`).
fn i64_word(x: i64) -> Result<u32, String> {
    i32::try_from(x)
        .map(|v| v as u32)
        .map_err(|_| format!("i64 value {x} does not fit the GPU's 32-bit integers"))
}

/// The word of a ConstantOfShape fill in its dtype.
fn scalar_word(s: Scalar) -> Result<u32, String> {
    Ok(match s {
        Scalar::F32(v) => v.to_bits(),
        Scalar::I64(v) => i64_word(v)?,
        Scalar::Bool(b) => b as u32,
    })
}

/// One invocation per element of `out`: `pre` (statements over the output
/// digits `i0..`) then `out[gi] = x[src]`.
fn copy(
    cx: &GCtx<'_>,
    x: ValueId,
    out: ValueId,
    src: &str,
    pre: &str,
) -> Result<Vec<GpuStage>, String> {
    let (xl, ol) = (cx.loc(x)?, cx.loc(out)?);
    let oshape = shape(cx, out);
    let mut body = digits("gi", &oshape, "i");
    body += pre;
    let _ = writeln!(body, "  let src: u32 = {src};");
    let _ = writeln!(body, "  {} = {};", ol.word("gi"), xl.word("src"));
    single(cx, numel(&oshape), &body)
}

/// The kernel's only stage: `body` once per item `gi` in `0..items`.
fn single(cx: &GCtx<'_>, items: usize, body: &str) -> Result<Vec<GpuStage>, String> {
    Ok(vec![flat_stage(
        &cx.label(""),
        items,
        cx.limits(),
        "",
        body,
    )])
}

/// One invocation per element of `out` writing the word `word`.
fn fill(cx: &GCtx<'_>, out: ValueId, word: &str) -> Result<Vec<GpuStage>, String> {
    let ol = cx.loc(out)?;
    let body = format!("  {} = {word};\n", ol.word("gi"));
    single(cx, numel(&shape(cx, out)), &body)
}

/// One stage per operand, each writing its block of the output at its
/// offset along `axis` (empty operands get no stage).
fn concat(
    cx: &GCtx<'_>,
    parts: &[ValueId],
    out: ValueId,
    axis: i64,
) -> Result<Vec<GpuStage>, String> {
    blocks(cx, out, parts, axis, Block::ToWhole, "part")
}

/// One stage per (non-empty) result, each copying its block of `x`.
fn split(
    cx: &GCtx<'_>,
    x: ValueId,
    results: &[ValueId],
    axis: i64,
) -> Result<Vec<GpuStage>, String> {
    blocks(cx, x, results, axis, Block::FromWhole, "result")
}

/// Which way [`blocks`] copies between the pieces and the whole tensor.
#[derive(Clone, Copy)]
enum Block {
    /// Each piece is copied into its block of the whole (Concat).
    ToWhole,
    /// Each piece is copied out of its block of the whole (Split).
    FromWhole,
}

/// One stage per non-empty piece of `pieces`, copying it to (`ToWhole`)
/// or from (`FromWhole`) its block of `whole`: the pieces lie one after
/// another along `axis`, each stage labelled `{label}{i}` with `i` the
/// piece's position.
fn blocks(
    cx: &GCtx<'_>,
    whole: ValueId,
    pieces: &[ValueId],
    axis: i64,
    dir: Block,
    label: &str,
) -> Result<Vec<GpuStage>, String> {
    let ws = shape(cx, whole);
    let ax = norm_axis(axis, ws.len())?;
    let wst = strides(&ws);
    let wl = cx.loc(whole)?;
    let mut stages = Vec::new();
    let mut off = 0usize;
    for (i, &v) in pieces.iter().enumerate() {
        let ps = shape(cx, v);
        let n = numel(&ps);
        if n > 0 {
            let pl = cx.loc(v)?;
            let coords: Vec<(String, usize)> = (0..ps.len())
                .map(|a| {
                    let c = if a == ax && off > 0 {
                        format!("(i{a} + {off}u)")
                    } else {
                        format!("i{a}")
                    };
                    (c, wst[a])
                })
                .collect();
            let mut body = digits("gi", &ps, "i");
            match dir {
                Block::ToWhole => {
                    let _ = writeln!(body, "  let dst: u32 = {};", linear(&coords));
                    let _ = writeln!(body, "  {} = {};", wl.word("dst"), pl.word("gi"));
                }
                Block::FromWhole => {
                    let _ = writeln!(body, "  let src: u32 = {};", linear(&coords));
                    let _ = writeln!(body, "  {} = {};", pl.word("gi"), wl.word("src"));
                }
            }
            stages.push(flat_stage(
                &cx.label(&format!("{label}{i}")),
                n,
                cx.limits(),
                "",
                &body,
            ));
        }
        off += ps.get(ax).copied().unwrap_or(0);
    }
    Ok(stages)
}

/// ONNX Slice: starts and ends resolved at compile time with the IR's
/// `slice_range` (the interpreter's), so each output digit maps to
/// `start + k * step` in `u32` arithmetic (never negative in range).
fn slice(
    cx: &GCtx<'_>,
    x: ValueId,
    out: ValueId,
    starts: &[i64],
    ends: &[i64],
    axes: &[i64],
    steps: &[i64],
) -> Result<Vec<GpuStage>, String> {
    let xs = shape(cx, x);
    let n = starts.len();
    if ends.len() != n || axes.len() != n || steps.len() != n {
        return Err("starts, ends, axes and steps must have equal lengths".into());
    }
    let xst = strides(&xs);
    let mut coords: Vec<(String, usize)> =
        (0..xs.len()).map(|a| (format!("i{a}"), xst[a])).collect();
    for i in 0..n {
        let ax = norm_axis(axes[i], xs.len())?;
        if steps[i] == 0 {
            return Err("a step cannot be 0".into());
        }
        let (s, step, _) = slice_range(xs[ax], starts[i], ends[i], steps[i]);
        // An empty slice has no invocations; clamp so the literals stay
        // valid `u32`s.
        let s = s.max(0) as u64;
        let c = match step {
            1 => format!("({s}u + i{ax})"),
            st if st > 0 => format!("({s}u + i{ax} * {st}u)"),
            st => format!("({s}u - i{ax} * {}u)", st.unsigned_abs()),
        };
        coords[ax].0 = c;
    }
    copy(cx, x, out, &linear(&coords), "")
}

/// ONNX Pad in i32 arithmetic: the input coordinate `j = o - begin`, then
/// per mode the fill (constant), the clamp (edge) or the mirror (reflect,
/// the remainder by `2 (d - 1)`), exactly as the interpreter's maps.
fn pad(
    cx: &GCtx<'_>,
    x: ValueId,
    out: ValueId,
    pads: &[i64],
    mode: PadMode,
    value: f32,
) -> Result<Vec<GpuStage>, String> {
    let xs = shape(cx, x);
    let r = xs.len();
    if pads.len() != 2 * r {
        return Err(format!(
            "pads has {} entries; a rank-{r} input needs {}",
            pads.len(),
            2 * r
        ));
    }
    let (xl, ol) = (cx.loc(x)?, cx.loc(out)?);
    let oshape = shape(cx, out);
    let xst = strides(&xs);
    let mut body = digits("gi", &oshape, "i");
    body += "  var inb = true;\n";
    let mut coords = Vec::new();
    for (a, &d) in xs.iter().enumerate() {
        let (b, e) = (pads[a], pads[a + r]);
        let di = d as i64;
        let padding = b.max(0) + e.max(0) > 0;
        if !padding {
            // Crop only: always in range.
            coords.push((format!("(i{a} + {}u)", (-b).max(0)), xst[a]));
            continue;
        }
        if mode == PadMode::Edge && d == 0 {
            return Err(format!("cannot edge-pad empty axis {a}"));
        }
        if mode == PadMode::Reflect && b.max(e) >= di {
            return Err(format!(
                "reflect padding {} on axis {a} needs a dimension larger than it, found {d}",
                b.max(e)
            ));
        }
        let _ = writeln!(body, "  var j{a}: i32 = i32(i{a}) + ({}i);", -b);
        match mode {
            PadMode::Constant => {
                let _ = writeln!(body, "  inb = inb && j{a} >= 0i && j{a} < {di}i;");
            }
            PadMode::Edge => {
                let _ = writeln!(body, "  j{a} = clamp(j{a}, 0i, {}i);", di - 1);
            }
            PadMode::Reflect => {
                // `j >= -b > -d >= -p`, so `j + p` is never negative: GLSL
                // (wgpu's GL backend) leaves `%` of a negative undefined,
                // and llvmpipe's GL answered with the mirror flipped.
                let p = (2 * (di - 1)).max(1);
                let _ = writeln!(
                    body,
                    "  j{a} = (j{a} + {p}i) % {p}i;\n  if (j{a} >= {di}i) {{ j{a} = {p}i - j{a}; }}"
                );
            }
        }
        coords.push((format!("u32(j{a})"), xst[a]));
    }
    let fill = match ol.dtype {
        DType::F32 => value.to_bits(),
        // The interpreter's `value as i64` (saturating), then as i32.
        DType::I64 => i64_word(value as i64)?,
        DType::Bool => (value != 0.0) as u32,
    };
    let _ = writeln!(
        body,
        "  if (inb) {{\n    let src: u32 = {};\n    {} = {};\n  }} else {{\n    {} = {fill}u;\n  }}",
        linear(&coords),
        ol.word("gi"),
        xl.word("src"),
        ol.word("gi"),
    );
    single(cx, numel(&oshape), &body)
}

/// ONNX Gather: the output digits split into the outer axes, the index
/// tensor's axes and the inner axes. A negative index wraps once (`+ d`);
/// an index still outside `[0, d)` fails the run (the kernel's error
/// code), reading a clamped index meanwhile so it stays in bounds.
/// Gathering from an empty axis writes zeros.
fn gather(
    cx: &mut GCtx<'_>,
    x: ValueId,
    idx: ValueId,
    out: ValueId,
    axis: i64,
) -> Result<Vec<GpuStage>, String> {
    let xs = shape(cx, x);
    let qs = shape(cx, idx);
    let ax = norm_axis(axis, xs.len())?;
    let il = cx.loc(idx)?;
    if il.dtype != DType::I64 {
        return Err(format!("indices must be i64, found {}", il.dtype));
    }
    let d = xs[ax];
    if d == 0 {
        return fill(cx, out, "0u");
    }
    let xst = strides(&xs);
    let qst = strides(&qs);
    let qr = qs.len();
    let qcoords: Vec<(String, usize)> = (0..qr).map(|t| (format!("i{}", ax + t), qst[t])).collect();
    let mut pre = String::new();
    let _ = writeln!(pre, "  let q: i32 = {};", il.load(&linear(&qcoords)));
    let raise = cx.raise(&format!("index out of range for an axis of size {d}"));
    let _ = writeln!(
        pre,
        "  let qw = select(q, q + {d}i, q < 0i);\n  if (qw < 0i || qw >= {d}i) {{ {raise} }}\n  let j: u32 = u32(clamp(qw, 0i, {}i));",
        d - 1
    );
    let mut coords: Vec<(String, usize)> = Vec::new();
    for (a, &st) in xst.iter().enumerate() {
        let c = if a < ax {
            format!("i{a}")
        } else if a == ax {
            "j".to_string()
        } else {
            format!("i{}", a + qr - 1)
        };
        coords.push((c, st));
    }
    copy(cx, x, out, &linear(&coords), &pre)
}

/// Static Range: `start + i * delta` per element (f32 as the interpreter
/// computes it, up to a fused multiply-add; i64 in wrapping `u32`
/// arithmetic, whose bits are the low 32 bits of the interpreter's
/// wrapping i64, after checking both ends fit i32).
fn range(cx: &GCtx<'_>, out: ValueId, r: &RangeParams) -> Result<Vec<GpuStage>, String> {
    let n = r.len()?;
    let val = match *r {
        RangeParams::F32 { start, delta, .. } => {
            format!("bitcast<u32>({} + f32(gi) * {})", flit(start), flit(delta))
        }
        RangeParams::I64 { start, delta, .. } => {
            if n > 0 {
                let last = start as i128 + (n as i128 - 1) * delta as i128;
                i64_word(start)?;
                i64_word(i64::try_from(last).map_err(|_| format!("Range end {last} overflows"))?)?;
            }
            format!("{}u + gi * {}u", start as i32 as u32, delta as i32 as u32)
        }
    };
    fill(cx, out, &val)
}

/// Static Resize: each axis is an identity, a single-tap table (nearest,
/// or linear with every weight 1) or a two-tap table of indices and
/// weights; tables are `var<private>` arrays (runtime-indexable). The
/// output is the weighted sum over the two-tap axes' combinations, in the
/// interpreter's order, skipping zero weights as its tap lists do; with
/// no two-tap axis it is a plain word copy.
fn resize(cx: &GCtx<'_>, x: ValueId, out: ValueId, p: &Resize) -> Result<Vec<GpuStage>, String> {
    let xs = shape(cx, x);
    let r = xs.len();
    let (xl, ol) = (cx.loc(x)?, cx.loc(out)?);
    if xl.dtype != DType::F32 {
        return Err(format!("Resize needs f32 data, found {}", xl.dtype));
    }
    if p.sizes.len() != r || (!p.scales.is_empty() && p.scales.len() != r) {
        return Err(format!(
            "sizes {:?} / scales {:?} do not match a rank-{r} input",
            p.sizes, p.scales
        ));
    }
    let total = numel(&p.sizes);
    if total == 0 {
        return Ok(Vec::new());
    }
    if xs.contains(&0) {
        return Err(format!("cannot resize the empty input {xs:?}"));
    }
    let xst = strides(&xs);
    let mut decls = String::new();
    let mut body = digits("gi", &p.sizes, "i");
    // Per axis: the one-tap coordinate expression (empty for a two-tap
    // axis), and the two-tap axes' index and weight expressions.
    let mut single: Vec<String> = Vec::new();
    let mut two: Vec<(usize, [String; 2], [String; 2])> = Vec::new();
    for (a, (&len_in, &len_out)) in xs.iter().zip(&p.sizes).enumerate() {
        let taps = dnnc_runtime::resize_axis_taps(len_in, len_out, p.scales.get(a).copied(), p);
        let identity =
            len_in == len_out && taps.iter().enumerate().all(|(i, t)| t[..] == [(i, 1.0)]);
        let one_tap = taps.iter().all(|t| t.len() == 1 && t[0].1 == 1.0);
        if identity {
            single.push(format!("i{a}"));
            continue;
        }
        let table = |name: &str, ty: &str, vals: Vec<String>| {
            format!(
                "var<private> {name}: array<{ty}, {len_out}> = array<{ty}, {len_out}>({});\n",
                vals.join(", ")
            )
        };
        if one_tap || p.mode == ResizeMode::Nearest {
            decls += &table(
                &format!("rz{a}"),
                "u32",
                taps.iter().map(|t| format!("{}u", t[0].0)).collect(),
            );
            single.push(format!("rz{a}[i{a}]"));
        } else {
            let tap = |t: &Vec<(usize, f32)>, k: usize| t.get(k).copied().unwrap_or((t[0].0, 0.0));
            for k in 0..2 {
                decls += &table(
                    &format!("rz{a}i{k}"),
                    "u32",
                    taps.iter().map(|t| format!("{}u", tap(t, k).0)).collect(),
                );
                decls += &table(
                    &format!("rz{a}w{k}"),
                    "f32",
                    taps.iter().map(|t| flit(tap(t, k).1)).collect(),
                );
            }
            single.push(String::new());
            two.push((
                a,
                [format!("rz{a}i0[i{a}]"), format!("rz{a}i1[i{a}]")],
                [format!("rz{a}w0[i{a}]"), format!("rz{a}w1[i{a}]")],
            ));
        }
    }
    if two.is_empty() {
        let coords: Vec<(String, usize)> = single.into_iter().zip(xst).collect();
        let _ = writeln!(body, "  let src: u32 = {};", linear(&coords));
        let _ = writeln!(body, "  {} = {};", ol.word("gi"), xl.word("src"));
    } else {
        // The one-tap axes' part of the index, then each combination.
        let base: Vec<(String, usize)> = single
            .iter()
            .zip(&xst)
            .filter(|(c, _)| !c.is_empty())
            .map(|(c, &s)| (c.clone(), s))
            .collect();
        let _ = writeln!(body, "  let base: u32 = {};", linear(&base));
        for (t, (a, idx, w)) in two.iter().enumerate() {
            for k in 0..2 {
                let _ = writeln!(body, "  let x{t}_{k}: u32 = {} * {}u;", idx[k], xst[*a]);
                let _ = writeln!(body, "  let w{t}_{k}: f32 = {};", w[k]);
            }
        }
        body += "  var acc: f32 = 0.0;\n";
        let m = two.len();
        for combo in 0..(1usize << m) {
            // Odometer order: the last two-tap axis varies fastest.
            let choice: Vec<usize> = (0..m).map(|t| (combo >> (m - 1 - t)) & 1).collect();
            let w: Vec<String> = choice
                .iter()
                .enumerate()
                .map(|(t, k)| format!("w{t}_{k}"))
                .collect();
            let i: Vec<String> = choice
                .iter()
                .enumerate()
                .map(|(t, k)| format!("x{t}_{k}"))
                .collect();
            let _ = writeln!(
                body,
                "  {{ let w: f32 = {}; if (w != 0.0) {{ acc = acc + w * {}; }} }}",
                w.join(" * "),
                xl.load(&format!("base + {}", i.join(" + ")))
            );
        }
        body += &format!("  {}\n", ol.store("gi", "acc"));
    }
    Ok(vec![flat_stage(
        &cx.label(""),
        total,
        cx.limits(),
        &decls,
        &body,
    )])
}
