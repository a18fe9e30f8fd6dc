//! Shape and dtype inference for every op. The graph builder calls this for
//! each node, so an ill-typed graph cannot be constructed.

use crate::op::{
    Binary, CellKind, Compare, ConvTranspose2d, DataLayout, EinsumSpec, Op, PadMode, RangeParams,
    Recurrent, Unary,
};
use crate::types::{DType, TensorType};

/// Inference failure, in words suitable for a user.
pub type InferResult = Result<Vec<TensorType>, String>;

/// Resolves a possibly negative axis against `rank`.
pub fn norm_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// numpy broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(format!(
                "shapes {a:?} and {b:?} do not broadcast (dimension {da} vs {db})"
            ));
        };
    }
    Ok(out)
}

fn need_dtype(t: &TensorType, allowed: &[DType], what: &str) -> Result<(), String> {
    if allowed.contains(&t.dtype) {
        Ok(())
    } else {
        let names: Vec<_> = allowed.iter().map(|d| d.name()).collect();
        Err(format!(
            "{what} must be {}, found {}",
            names.join(" or "),
            t.dtype
        ))
    }
}

fn need_rank(t: &TensorType, rank: usize, what: &str) -> Result<(), String> {
    if t.rank() == rank {
        Ok(())
    } else {
        Err(format!("{what} must have rank {rank}, found {t}"))
    }
}

/// Output size of a windowed op along one axis; `None` when the window does
/// not fit.
pub fn window_out(
    input: usize,
    kernel: usize,
    stride: usize,
    pad_begin: usize,
    pad_end: usize,
    dilation: usize,
    ceil_mode: bool,
) -> Option<usize> {
    if kernel == 0 || stride == 0 || dilation == 0 {
        return None;
    }
    let extent = dilation.checked_mul(kernel - 1)?.checked_add(1)?;
    let padded = input.checked_add(pad_begin)?.checked_add(pad_end)?;
    if padded < extent {
        return None;
    }
    let span = padded - extent;
    let mut out = if ceil_mode {
        span.div_ceil(stride) + 1
    } else {
        span / stride + 1
    };
    // A window must start inside the input or its leading padding.
    if ceil_mode && (out - 1).checked_mul(stride)? >= input.checked_add(pad_begin)? {
        out -= 1;
    }
    Some(out)
}

/// Resolves a Reshape target against the input element count (ONNX rules:
/// `0` copies the input dimension, one `-1` is inferred).
pub fn reshape_target(input: &[usize], target: &[i64]) -> Result<Vec<usize>, String> {
    let numel: usize = input.iter().product();
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, &d) in target.iter().enumerate() {
        match d {
            -1 => {
                if infer_at.replace(i).is_some() {
                    return Err("shape has more than one -1".into());
                }
                out.push(1);
            }
            0 => out.push(*input.get(i).ok_or_else(|| {
                format!(
                    "shape dimension {i} is 0 but the input has rank {}",
                    input.len()
                )
            })?),
            d if d > 0 => out.push(d as usize),
            d => return Err(format!("shape dimension {d} is negative")),
        }
    }
    let known = out
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("shape {target:?} has too many elements"))?;
    if let Some(i) = infer_at {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(format!("cannot reshape {numel} elements into {target:?}"));
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(format!(
            "cannot reshape {input:?} ({numel} elements) into {out:?} ({known} elements)"
        ));
    }
    Ok(out)
}

/// Whether cutting `shape` along `axis` (negative from the end) gives
/// contiguous pieces: only size-1 axes before it. The CPU backend builds
/// such Concats and Splits in place, and the optimiser's cost model
/// prices them as free.
pub fn contiguous_pieces(shape: &[usize], axis: i64) -> bool {
    norm_axis(axis, shape.len()).is_ok_and(|a| shape[..a].iter().all(|&d| d == 1))
}

/// Normalised `(start, step, len)` of an ONNX slice along a dimension.
pub fn slice_range(dim: usize, start: i64, end: i64, step: i64) -> (i64, i64, usize) {
    // i128 so that extreme starts, ends and steps (ONNX exporters use
    // i64::MAX / i64::MIN as "to the end") cannot overflow.
    let d = dim as i128;
    let fix = |v: i64| {
        let v = v as i128;
        if v < 0 {
            v + d
        } else {
            v
        }
    };
    let (s, e, st) = (fix(start), fix(end), step as i128);
    if st > 0 {
        let s = s.clamp(0, d);
        let e = e.clamp(0, d);
        let len = if e > s { (e - s - 1) / st + 1 } else { 0 };
        (s as i64, step, len as usize)
    } else if st < 0 {
        let s = s.clamp(-1, d - 1);
        let e = e.clamp(-1, d - 1);
        let len = if s > e { (s - e - 1) / (-st) + 1 } else { 0 };
        (s as i64, step, len as usize)
    } else {
        (0, step, 0)
    }
}

/// The axes a Reduce* over `axes` of a rank-`rank` tensor reduces,
/// ascending: every axis when `axes` is empty (ONNX's default), else each
/// normalised ([`norm_axis`]); a repeated axis is an error. Shared by type
/// inference, the interpreter and the code generators, so they agree.
pub fn reduce_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let mut ax = if axes.is_empty() {
        (0..rank).collect()
    } else {
        norm_axes(axes, rank)?
    };
    ax.sort_unstable();
    Ok(ax)
}

fn norm_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = norm_axis(a, rank)?;
        if out.contains(&n) {
            return Err(format!("axis {a} is repeated"));
        }
        out.push(n);
    }
    Ok(out)
}

/// Infers the result types of `op` applied to inputs of types `ins`.
/// Source ops (`input`, `param`, `const`) declare their type and are not
/// inferred here.
pub fn infer(op: &Op, ins: &[&TensorType]) -> InferResult {
    let (lo, hi) = op.arity();
    if ins.len() < lo || ins.len() > hi {
        return Err(if lo == hi {
            format!("{} takes {lo} inputs, found {}", op.name(), ins.len())
        } else if hi == usize::MAX {
            format!(
                "{} takes at least {lo} inputs, found {}",
                op.name(),
                ins.len()
            )
        } else {
            format!(
                "{} takes {lo} to {hi} inputs, found {}",
                op.name(),
                ins.len()
            )
        });
    }
    let f32_only = [DType::F32];
    let numeric = [DType::F32, DType::I64];
    let one = |t: TensorType| Ok(vec![t]);
    match op {
        Op::Input | Op::Param(_) | Op::Constant => Err("source ops declare their type".to_string()),
        Op::Conv2d(c) => {
            let (x, w) = (ins[0], ins[1]);
            need_dtype(x, &f32_only, "input")?;
            need_dtype(w, &f32_only, "weight")?;
            let Some([n, cin, h, wd]) = c.data.input().logical_dims(&x.shape) else {
                return Err(match c.data.input() {
                    DataLayout::Nchw | DataLayout::NchwToNchw8c => {
                        format!("input must have rank 4, found {x}")
                    }
                    DataLayout::Nchw8c => {
                        format!("input of a data=nchw8c conv must be [N, C/8, H, W, 8], found {x}")
                    }
                });
            };
            need_rank(w, 4, "weight")?;
            if c.group == 0 || c.strides.contains(&0) || c.dilations.contains(&0) {
                return Err("group, strides and dilations must be at least 1".into());
            }
            let (m, cg, kh, kw) = (w.shape[0], w.shape[1], w.shape[2], w.shape[3]);
            if cin % c.group != 0 || cin / c.group != cg {
                return Err(format!(
                    "input has {cin} channels but weight {w} expects {cg} per group x {} groups",
                    c.group
                ));
            }
            if m % c.group != 0 {
                return Err(format!(
                    "{m} output channels do not divide into {} groups",
                    c.group
                ));
            }
            if kh == 0 || kw == 0 {
                return Err("kernel has a zero dimension".into());
            }
            if let Some(b) = ins.get(2) {
                need_dtype(b, &f32_only, "bias")?;
                if b.shape != [m] {
                    return Err(format!("bias must be f32[{m}], found {b}"));
                }
            }
            let ho = window_out(
                h,
                kh,
                c.strides[0],
                c.pads[0],
                c.pads[2],
                c.dilations[0],
                false,
            );
            let wo = window_out(
                wd,
                kw,
                c.strides[1],
                c.pads[1],
                c.pads[3],
                c.dilations[1],
                false,
            );
            match (ho, wo) {
                (Some(_), Some(_))
                    if !m.is_multiple_of(DataLayout::BLOCK) && c.data != DataLayout::Nchw =>
                {
                    Err(format!(
                        "data={} needs output channels in blocks of {}, found {m}",
                        c.data.name(),
                        DataLayout::BLOCK
                    ))
                }
                (Some(ho), Some(wo)) => {
                    one(TensorType::f32(c.data.result().stored_shape(n, m, ho, wo)))
                }
                _ => Err(format!(
                    "kernel {kh}x{kw} (dilations {:?}) does not fit the padded {h}x{wd} input",
                    c.dilations
                )),
            }
        }
        Op::MatMul => {
            let (a, b) = (ins[0], ins[1]);
            need_dtype(a, &f32_only, "A")?;
            need_dtype(b, &f32_only, "B")?;
            if a.rank() == 0 || b.rank() == 0 {
                return Err("MatMul operands must have rank at least 1".into());
            }
            let mut sa = a.shape.clone();
            let mut sb = b.shape.clone();
            let a1 = sa.len() == 1;
            let b1 = sb.len() == 1;
            if a1 {
                sa.insert(0, 1);
            }
            if b1 {
                sb.push(1);
            }
            let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
            let (k2, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
            if k != k2 {
                return Err(format!("inner dimensions differ: {a} x {b} ({k} vs {k2})"));
            }
            let mut out = broadcast_shapes(&sa[..sa.len() - 2], &sb[..sb.len() - 2])?;
            if !a1 {
                out.push(m);
            }
            if !b1 {
                out.push(n);
            }
            one(TensorType::f32(out))
        }
        Op::Gemm(g) => {
            let (a, b) = (ins[0], ins[1]);
            need_dtype(a, &f32_only, "A")?;
            need_dtype(b, &f32_only, "B")?;
            need_rank(a, 2, "A")?;
            need_rank(b, 2, "B")?;
            let (m, k) = if g.trans_a {
                (a.shape[1], a.shape[0])
            } else {
                (a.shape[0], a.shape[1])
            };
            let (k2, n) = if g.trans_b {
                (b.shape[1], b.shape[0])
            } else {
                (b.shape[0], b.shape[1])
            };
            if k != k2 {
                return Err(format!("inner dimensions differ: {k} vs {k2}"));
            }
            if let Some(c) = ins.get(2) {
                need_dtype(c, &f32_only, "C")?;
                let bc = broadcast_shapes(&c.shape, &[m, n])?;
                if bc != [m, n] || c.rank() > 2 {
                    return Err(format!("C {c} does not broadcast to [{m},{n}]"));
                }
            }
            one(TensorType::f32(vec![m, n]))
        }
        Op::MaxPool(p) | Op::AveragePool(p) => {
            let x = ins[0];
            if p.kernel.contains(&0) || p.strides.contains(&0) || p.dilations.contains(&0) {
                return Err("kernel, strides and dilations must be at least 1".into());
            }
            need_dtype(x, &f32_only, "input")?;
            let Some([n, c, h, w]) = p.data.logical_dims(&x.shape) else {
                return Err(match p.data {
                    DataLayout::Nchw8c => {
                        format!("input of a data=nchw8c pool must be [N, C/8, H, W, 8], found {x}")
                    }
                    _ => format!("input must have rank 4, found {x}"),
                });
            };
            let ho = window_out(
                h,
                p.kernel[0],
                p.strides[0],
                p.pads[0],
                p.pads[2],
                p.dilations[0],
                p.ceil_mode,
            );
            let wo = window_out(
                w,
                p.kernel[1],
                p.strides[1],
                p.pads[1],
                p.pads[3],
                p.dilations[1],
                p.ceil_mode,
            );
            match (ho, wo) {
                (Some(ho), Some(wo)) => one(TensorType::f32(match p.data {
                    DataLayout::Nchw8c => {
                        let b = DataLayout::BLOCK;
                        vec![n, c / b, ho, wo, b]
                    }
                    _ => vec![n, c, ho, wo],
                })),
                _ => Err(format!(
                    "window {:?} does not fit the padded input {x}",
                    p.kernel
                )),
            }
        }
        Op::GlobalAveragePool | Op::GlobalMaxPool => {
            let x = ins[0];
            need_dtype(x, &f32_only, "input")?;
            if x.rank() < 3 {
                return Err(format!("input must have rank at least 3, found {x}"));
            }
            let mut s = x.shape.clone();
            for d in s.iter_mut().skip(2) {
                *d = 1;
            }
            one(TensorType::f32(s))
        }
        Op::BatchNormalization { .. } => {
            let x = ins[0];
            need_dtype(x, &f32_only, "input")?;
            if x.rank() < 2 {
                return Err(format!("input must have rank at least 2, found {x}"));
            }
            let c = x.shape[1];
            for (t, what) in ins[1..].iter().zip(["scale", "bias", "mean", "var"]) {
                need_dtype(t, &f32_only, what)?;
                if t.shape != [c] {
                    return Err(format!("{what} must be f32[{c}], found {t}"));
                }
            }
            one(x.clone())
        }
        Op::Lrn(_) => {
            need_dtype(ins[0], &f32_only, "input")?;
            need_rank(ins[0], 4, "input")?;
            one(ins[0].clone())
        }
        Op::Unary(u) => {
            let allowed: &[DType] = match u {
                Unary::Neg | Unary::Abs | Unary::Relu | Unary::Sign => &numeric,
                _ => &f32_only,
            };
            need_dtype(ins[0], allowed, "input")?;
            one(ins[0].clone())
        }
        Op::Binary(b) => {
            let (x, y) = (ins[0], ins[1]);
            let allowed: &[DType] = if *b == Binary::Pow {
                &f32_only
            } else {
                &numeric
            };
            need_dtype(x, allowed, "A")?;
            if x.dtype != y.dtype {
                return Err(format!("operand dtypes differ: {} vs {}", x.dtype, y.dtype));
            }
            one(TensorType::new(
                x.dtype,
                broadcast_shapes(&x.shape, &y.shape)?,
            ))
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            need_dtype(ins[0], &f32_only, "input")?;
            norm_axis(*axis, ins[0].rank())?;
            one(ins[0].clone())
        }
        Op::Reduce { axes, keepdims, .. } => {
            let x = ins[0];
            need_dtype(x, &f32_only, "input")?;
            let axes = reduce_axes(axes, x.rank())?;
            let mut s = vec![];
            for (i, &d) in x.shape.iter().enumerate() {
                if axes.contains(&i) {
                    if *keepdims {
                        s.push(1);
                    }
                } else {
                    s.push(d);
                }
            }
            one(TensorType::f32(s))
        }
        Op::Concat { axis } => {
            let first = ins[0];
            let ax = norm_axis(*axis, first.rank())?;
            let mut s = first.shape.clone();
            s[ax] = 0;
            for (i, t) in ins.iter().enumerate() {
                if t.dtype != first.dtype || t.rank() != first.rank() {
                    return Err(format!(
                        "input {i} is {t}, incompatible with input 0 {first}"
                    ));
                }
                for d in 0..t.rank() {
                    if d != ax && t.shape[d] != first.shape[d] {
                        return Err(format!(
                            "input {i} is {t}, which differs from input 0 {first} off axis {ax}"
                        ));
                    }
                }
                s[ax] += t.shape[ax];
            }
            one(TensorType::new(first.dtype, s))
        }
        Op::Split { axis, split } => {
            let x = ins[0];
            let ax = norm_axis(*axis, x.rank())?;
            if split.is_empty() {
                return Err("split needs at least one output".into());
            }
            let total: usize = split.iter().sum();
            if total != x.shape[ax] {
                return Err(format!(
                    "split sizes {split:?} sum to {total}, but axis {ax} of {x} has {}",
                    x.shape[ax]
                ));
            }
            Ok(split
                .iter()
                .map(|&n| {
                    let mut s = x.shape.clone();
                    s[ax] = n;
                    TensorType::new(x.dtype, s)
                })
                .collect())
        }
        Op::Slice {
            starts,
            ends,
            axes,
            steps,
        } => {
            let x = ins[0];
            if starts.len() != axes.len() || ends.len() != axes.len() || steps.len() != axes.len() {
                return Err("starts, ends, axes and steps must have equal lengths".into());
            }
            if steps.iter().any(|&s| s == 0 || s == i64::MIN) {
                return Err(format!(
                    "steps {steps:?} must be non-zero and greater than i64::MIN"
                ));
            }
            let ax = norm_axes(axes, x.rank())?;
            let mut s = x.shape.clone();
            for i in 0..ax.len() {
                s[ax[i]] = slice_range(x.shape[ax[i]], starts[i], ends[i], steps[i]).2;
            }
            one(TensorType::new(x.dtype, s))
        }
        Op::Reshape { shape } => one(TensorType::new(
            ins[0].dtype,
            reshape_target(&ins[0].shape, shape)?,
        )),
        Op::Flatten { axis } => {
            let x = ins[0];
            let r = x.rank() as i64;
            if *axis < -r || *axis > r {
                return Err(format!("axis {axis} is out of range for rank {r}"));
            }
            let a = if *axis < 0 { axis + r } else { *axis } as usize;
            let outer: usize = x.shape[..a].iter().product();
            let inner: usize = x.shape[a..].iter().product();
            one(TensorType::new(x.dtype, vec![outer, inner]))
        }
        Op::Transpose { perm } => {
            let x = ins[0];
            if perm.len() != x.rank() {
                return Err(format!(
                    "perm {perm:?} has {} entries for rank-{} input",
                    perm.len(),
                    x.rank()
                ));
            }
            one(TensorType::new(
                x.dtype,
                perm.iter().map(|&p| x.shape[p]).collect::<Vec<_>>(),
            ))
        }
        Op::Squeeze { axes } => {
            let x = ins[0];
            let ax = if axes.is_empty() {
                (0..x.rank()).filter(|&i| x.shape[i] == 1).collect()
            } else {
                norm_axes(axes, x.rank())?
            };
            for &a in &ax {
                if x.shape[a] != 1 {
                    return Err(format!("cannot squeeze axis {a} of size {}", x.shape[a]));
                }
            }
            let s: Vec<usize> = (0..x.rank())
                .filter(|i| !ax.contains(i))
                .map(|i| x.shape[i])
                .collect();
            one(TensorType::new(x.dtype, s))
        }
        Op::Unsqueeze { axes } => {
            let x = ins[0];
            let r = x.rank() + axes.len();
            let ax = norm_axes(axes, r)?;
            let mut src = x.shape.iter();
            let s: Vec<usize> = (0..r)
                .map(|i| {
                    if ax.contains(&i) {
                        1
                    } else {
                        *src.next().expect("rank")
                    }
                })
                .collect();
            one(TensorType::new(x.dtype, s))
        }
        Op::Pad { pads, mode, .. } => {
            let x = ins[0];
            let r = x.rank();
            if pads.len() != 2 * r {
                return Err(format!(
                    "pads has {} entries; a rank-{r} input needs {}",
                    pads.len(),
                    2 * r
                ));
            }
            let mut s = Vec::with_capacity(r);
            for i in 0..r {
                let (b, e) = (pads[i], pads[i + r]);
                let n = (x.shape[i] as i64)
                    .checked_add(b)
                    .and_then(|n| n.checked_add(e))
                    .ok_or_else(|| format!("pads {pads:?} overflow axis {i}"))?;
                if n < 0 {
                    return Err(format!("pads {pads:?} crop axis {i} below zero"));
                }
                if *mode == PadMode::Reflect && (b.max(e) >= x.shape[i] as i64 && (b > 0 || e > 0))
                {
                    return Err(format!(
                        "reflect padding {} on axis {i} needs a dimension larger than it, found {}",
                        b.max(e),
                        x.shape[i]
                    ));
                }
                if *mode == PadMode::Edge && x.shape[i] == 0 && (b > 0 || e > 0) {
                    return Err(format!("edge padding of empty axis {i}"));
                }
                s.push(n as usize);
            }
            one(TensorType::new(x.dtype, s))
        }
        Op::Gather { axis } => {
            let (x, idx) = (ins[0], ins[1]);
            need_dtype(idx, &[DType::I64], "indices")?;
            let ax = norm_axis(*axis, x.rank())?;
            let mut s = x.shape[..ax].to_vec();
            s.extend_from_slice(&idx.shape);
            s.extend_from_slice(&x.shape[ax + 1..]);
            one(TensorType::new(x.dtype, s))
        }
        Op::Expand { shape } => {
            let x = ins[0];
            if shape.iter().any(|&d| d < 0) {
                return Err(format!("shape {shape:?} has a negative dimension"));
            }
            let target: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            one(TensorType::new(
                x.dtype,
                broadcast_shapes(&x.shape, &target)?,
            ))
        }
        Op::Identity | Op::Dropout { .. } => one(ins[0].clone()),
        Op::ConvTranspose2d(c) => {
            let (x, w) = (ins[0], ins[1]);
            need_dtype(x, &f32_only, "input")?;
            need_dtype(w, &f32_only, "weight")?;
            need_rank(x, 4, "input")?;
            need_rank(w, 4, "weight")?;
            let (n, cin, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
            let (wc, mg, kh, kw) = (w.shape[0], w.shape[1], w.shape[2], w.shape[3]);
            let m = conv_transpose_channels(cin, wc, mg, c.group)?;
            if let Some(b) = ins.get(2) {
                need_dtype(b, &f32_only, "bias")?;
                if b.shape != [m] {
                    return Err(format!("bias must be f32[{m}], found {b}"));
                }
            }
            let ho = conv_transpose_out(h, kh, 0, c)?;
            let wo = conv_transpose_out(wd, kw, 1, c)?;
            one(TensorType::f32(vec![n, m, ho, wo]))
        }
        Op::InstanceNormalization { .. } => {
            let x = ins[0];
            need_dtype(x, &f32_only, "input")?;
            if x.rank() < 3 {
                return Err(format!("input must have rank at least 3, found {x}"));
            }
            let c = x.shape[1];
            for (t, what) in ins[1..].iter().zip(["scale", "bias"]) {
                need_dtype(t, &f32_only, what)?;
                if t.shape != [c] {
                    return Err(format!("{what} must be f32[{c}], found {t}"));
                }
            }
            one(x.clone())
        }
        Op::LayerNormalization { axis, .. } => {
            let x = ins[0];
            need_dtype(x, &f32_only, "input")?;
            let ax = norm_axis(*axis, x.rank())?;
            let norm_shape = &x.shape[ax..];
            for (t, what) in ins[1..].iter().zip(["scale", "bias"]) {
                need_dtype(t, &f32_only, what)?;
                if !broadcasts_to(&t.shape, norm_shape) {
                    return Err(format!(
                        "{what} {t} does not broadcast to the normalised shape {norm_shape:?}"
                    ));
                }
            }
            one(x.clone())
        }
        Op::PRelu => {
            let (x, s) = (ins[0], ins[1]);
            need_dtype(x, &f32_only, "input")?;
            need_dtype(s, &f32_only, "slope")?;
            if !broadcasts_to(&s.shape, &x.shape) {
                return Err(format!("slope {s} does not broadcast to the input {x}"));
            }
            one(x.clone())
        }
        Op::Shape { start, end } => {
            let (s, e) = shape_range(ins[0].rank(), *start, *end);
            one(TensorType::new(DType::I64, vec![e.saturating_sub(s)]))
        }
        Op::ConstantOfShape { shape, value } => {
            checked_numel(shape)?;
            one(TensorType::new(value.dtype(), shape.clone()))
        }
        Op::Range(r) => {
            let dtype = match r {
                RangeParams::F32 { .. } => DType::F32,
                RangeParams::I64 { .. } => DType::I64,
            };
            one(TensorType::new(dtype, vec![r.len()?]))
        }
        Op::Tile { repeats } => {
            let x = ins[0];
            if repeats.len() != x.rank() {
                return Err(format!(
                    "repeats {repeats:?} has {} entries for rank-{} input",
                    repeats.len(),
                    x.rank()
                ));
            }
            let s = x
                .shape
                .iter()
                .zip(repeats)
                .map(|(&d, &r)| d.checked_mul(r))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("tiling {x} by {repeats:?} overflows"))?;
            checked_numel(&s)?;
            one(TensorType::new(x.dtype, s))
        }
        Op::Where => {
            let (c, x, y) = (ins[0], ins[1], ins[2]);
            need_dtype(c, &[DType::Bool], "condition")?;
            if x.dtype != y.dtype {
                return Err(format!("X and Y dtypes differ: {} vs {}", x.dtype, y.dtype));
            }
            let s = broadcast_shapes(&broadcast_shapes(&c.shape, &x.shape)?, &y.shape)?;
            one(TensorType::new(x.dtype, s))
        }
        Op::Compare(k) => {
            let (x, y) = (ins[0], ins[1]);
            let allowed: &[DType] = if *k == Compare::Equal {
                &[DType::F32, DType::I64, DType::Bool]
            } else {
                &numeric
            };
            need_dtype(x, allowed, "A")?;
            if x.dtype != y.dtype {
                return Err(format!("operand dtypes differ: {} vs {}", x.dtype, y.dtype));
            }
            one(TensorType::new(
                DType::Bool,
                broadcast_shapes(&x.shape, &y.shape)?,
            ))
        }
        Op::Not => {
            need_dtype(ins[0], &[DType::Bool], "input")?;
            one(ins[0].clone())
        }
        Op::Logical(_) => {
            let (x, y) = (ins[0], ins[1]);
            need_dtype(x, &[DType::Bool], "A")?;
            need_dtype(y, &[DType::Bool], "B")?;
            one(TensorType::new(
                DType::Bool,
                broadcast_shapes(&x.shape, &y.shape)?,
            ))
        }
        Op::Cast { to } => one(TensorType::new(*to, ins[0].shape.clone())),
        Op::Einsum { equation } => {
            let spec = EinsumSpec::parse(equation)?;
            for t in ins {
                need_dtype(t, &f32_only, "every operand")?;
            }
            let shapes: Vec<&[usize]> = ins.iter().map(|t| t.shape.as_slice()).collect();
            let sizes = einsum_sizes(&spec, &shapes)?;
            let out: Vec<usize> = spec
                .output
                .iter()
                .map(|c| sizes.iter().find(|(l, _)| l == c).map_or(1, |&(_, d)| d))
                .collect();
            one(TensorType::f32(out))
        }
        Op::Resize(r) => {
            let x = ins[0];
            need_dtype(x, &f32_only, "input")?;
            if r.sizes.len() != x.rank() {
                return Err(format!(
                    "sizes {:?} has {} entries for rank-{} input",
                    r.sizes,
                    r.sizes.len(),
                    x.rank()
                ));
            }
            if !r.scales.is_empty() && r.scales.len() != x.rank() {
                return Err(format!(
                    "scales has {} entries for rank-{} input",
                    r.scales.len(),
                    x.rank()
                ));
            }
            if let Some(i) = (0..x.rank()).find(|&i| x.shape[i] == 0 && r.sizes[i] > 0) {
                return Err(format!("cannot resize empty axis {i} of {x}"));
            }
            checked_numel(&r.sizes)?;
            one(TensorType::f32(r.sizes.clone()))
        }
        Op::Recurrent(r) => infer_recurrent(r, ins),
    }
}

/// Whether `from` broadcasts to exactly `to` (unidirectional numpy rules).
pub fn broadcasts_to(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&f, &t)| f == t || f == 1)
}

/// Element count of a shape, or an error when it overflows.
fn checked_numel(shape: &[usize]) -> Result<usize, String> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("shape {shape:?} has too many elements"))
}

/// `[start, end)` of ONNX `Shape` on a rank-`rank` input: negative values
/// count from the end, then both clamp to `[0, rank]`.
pub fn shape_range(rank: usize, start: i64, end: i64) -> (usize, usize) {
    let r = rank as i128;
    let fix = |v: i64| {
        let v = v as i128;
        (if v < 0 { v + r } else { v }).clamp(0, r) as usize
    };
    (fix(start), fix(end))
}

/// Output channels of a transposed convolution, checking that the weight
/// `[C, M/g, kH, kW]` fits `cin` input channels in `group` groups.
pub fn conv_transpose_channels(
    cin: usize,
    wc: usize,
    mg: usize,
    group: usize,
) -> Result<usize, String> {
    if group == 0 {
        return Err("group must be at least 1".into());
    }
    if wc != cin || !cin.is_multiple_of(group) {
        return Err(format!(
            "input has {cin} channels but the weight's first dimension is {wc} (group {group}); ConvTranspose weights are [C, M/group, kH, kW]"
        ));
    }
    mg.checked_mul(group)
        .ok_or_else(|| "output channel count overflows".to_string())
}

/// Output size of a transposed convolution along spatial axis `i` (0 = H):
/// `stride*(in-1) + output_padding + (k-1)*dilation + 1 - pads`.
pub fn conv_transpose_out(
    input: usize,
    kernel: usize,
    i: usize,
    c: &ConvTranspose2d,
) -> Result<usize, String> {
    let (s, d, op) = (c.strides[i], c.dilations[i], c.output_padding[i]);
    let (pb, pe) = (c.pads[i], c.pads[i + 2]);
    if s == 0 || d == 0 {
        return Err("strides and dilations must be at least 1".into());
    }
    if kernel == 0 {
        return Err("kernel has a zero dimension".into());
    }
    if input == 0 {
        return Ok(0);
    }
    let full = s
        .checked_mul(input - 1)
        .and_then(|v| v.checked_add(op))
        .and_then(|v| v.checked_add((kernel - 1).checked_mul(d)?))
        .and_then(|v| v.checked_add(1))
        .ok_or_else(|| "output size overflows".to_string())?;
    full.checked_sub(pb)
        .and_then(|v| v.checked_sub(pe))
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("pads {pb}+{pe} remove the whole {full}-long output along axis {i}"))
}

/// The size of every index letter of an Einsum, checking that each
/// operand has one letter per axis and that a letter's sizes agree
/// (a size-1 axis broadcasts, as in numpy).
pub fn einsum_sizes(spec: &EinsumSpec, shapes: &[&[usize]]) -> Result<Vec<(u8, usize)>, String> {
    if spec.inputs.len() != shapes.len() {
        return Err(format!(
            "the equation has {} operands but {} inputs are given",
            spec.inputs.len(),
            shapes.len()
        ));
    }
    let mut sizes: Vec<(u8, usize)> = vec![];
    for (k, (letters, shape)) in spec.inputs.iter().zip(shapes).enumerate() {
        if letters.len() != shape.len() {
            return Err(format!(
                "operand {k} has rank {} but the equation gives it {} indices",
                shape.len(),
                letters.len()
            ));
        }
        for (&c, &d) in letters.iter().zip(shape.iter()) {
            match sizes.iter_mut().find(|(l, _)| *l == c) {
                None => sizes.push((c, d)),
                Some((_, s)) if *s == d || d == 1 => {}
                Some((_, s)) if *s == 1 => *s = d,
                Some((_, s)) => {
                    return Err(format!(
                        "index `{}` has size {s} in one place and {d} in operand {k}",
                        c as char
                    ))
                }
            }
        }
    }
    checked_numel(&sizes.iter().map(|&(_, d)| d).collect::<Vec<_>>())
        .map_err(|_| "the Einsum index space is too large".to_string())?;
    Ok(sizes)
}

fn infer_recurrent(r: &Recurrent, ins: &[&TensorType]) -> InferResult {
    let lstm = matches!(r.cell, CellKind::Lstm { .. });
    for (i, t) in ins.iter().enumerate() {
        need_dtype(t, &[DType::F32], &format!("input {i}"))?;
    }
    let x = ins[0];
    need_rank(x, 3, "X")?;
    let (seq, batch, input) = (x.shape[0], x.shape[1], x.shape[2]);
    let (dirs, h, g) = (r.direction.count(), r.hidden_size, r.cell.gates());
    if r.activations.len() != dirs * r.cell.activations_per_direction() {
        return Err(format!(
            "{} activations given; {} needed",
            r.activations.len(),
            dirs * r.cell.activations_per_direction()
        ));
    }
    let gh = g
        .checked_mul(h)
        .ok_or_else(|| "hidden size overflows".to_string())?;
    let gh2 = gh
        .checked_mul(2)
        .ok_or_else(|| "hidden size overflows".to_string())?;
    let h3 = h
        .checked_mul(3)
        .ok_or_else(|| "hidden size overflows".to_string())?;
    let mut expect: Vec<(&str, Vec<usize>)> = vec![
        ("W", vec![dirs, gh, input]),
        ("R", vec![dirs, gh, h]),
        ("B", vec![dirs, gh2]),
        ("initial_h", vec![dirs, batch, h]),
    ];
    if lstm {
        expect.push(("initial_c", vec![dirs, batch, h]));
        expect.push(("P", vec![dirs, h3]));
    }
    for (t, (what, shape)) in ins[1..].iter().zip(&expect) {
        if t.shape != *shape {
            return Err(format!(
                "{what} must be f32{shape:?} (directions {dirs}, hidden {h}), found {t}"
            ));
        }
    }
    checked_numel(&[seq, dirs, batch, h])?;
    let state = TensorType::f32(vec![dirs, batch, h]);
    let mut out = vec![TensorType::f32(vec![seq, dirs, batch, h]), state.clone()];
    if lstm {
        out.push(state);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{Conv2d, Pool2d};

    fn t(s: &[usize]) -> TensorType {
        TensorType::f32(s.to_vec())
    }

    #[test]
    fn conv_output_shape_with_stride_pad_dilation_groups() {
        let op = Op::Conv2d(Conv2d {
            strides: [2, 2],
            pads: [3, 3, 3, 3],
            dilations: [1, 1],
            group: 1,
            ..Conv2d::default()
        });
        let out = infer(&op, &[&t(&[1, 3, 224, 224]), &t(&[64, 3, 7, 7])]).unwrap();
        assert_eq!(out[0].shape, vec![1, 64, 112, 112]);
        let dw = Op::Conv2d(Conv2d {
            group: 32,
            pads: [2, 2, 2, 2],
            dilations: [2, 2],
            ..Conv2d::default()
        });
        let out = infer(&dw, &[&t(&[1, 32, 10, 10]), &t(&[32, 1, 3, 3])]).unwrap();
        assert_eq!(out[0].shape, vec![1, 32, 10, 10]);
        let bad = infer(&dw, &[&t(&[1, 31, 10, 10]), &t(&[32, 1, 3, 3])]).unwrap_err();
        assert!(bad.contains("channels"), "{bad}");
    }

    /// A `data=nchw8c` pool reads and writes `[N, C/8, H, W, 8]`; a plain
    /// rank-4 input is refused with the layout named.
    #[test]
    fn blocked_pools_keep_the_blocked_shape() {
        let p = Pool2d {
            kernel: [3, 3],
            strides: [2, 2],
            pads: [0, 0, 0, 0],
            dilations: [1, 1],
            ceil_mode: true,
            count_include_pad: false,
            data: DataLayout::Nchw8c,
        };
        let out = infer(&Op::MaxPool(p.clone()), &[&t(&[1, 8, 112, 112, 8])]).unwrap();
        assert_eq!(out[0].shape, vec![1, 8, 56, 56, 8]);
        let bad = infer(&Op::AveragePool(p), &[&t(&[1, 64, 112, 112])]).unwrap_err();
        assert!(bad.contains("data=nchw8c pool"), "{bad}");
    }

    #[test]
    fn pool_ceil_mode_drops_window_starting_in_padding() {
        let p = Pool2d {
            kernel: [3, 3],
            strides: [2, 2],
            pads: [0, 0, 0, 0],
            dilations: [1, 1],
            ceil_mode: true,
            count_include_pad: false,
            data: crate::op::DataLayout::Nchw,
        };
        // GoogLeNet: 112 -> 56 with ceil mode.
        let out = infer(&Op::MaxPool(p.clone()), &[&t(&[1, 64, 112, 112])]).unwrap();
        assert_eq!(out[0].shape, vec![1, 64, 56, 56]);
        assert_eq!(window_out(5, 2, 2, 1, 1, 1, true), Some(3));
        assert_eq!(window_out(4, 2, 2, 0, 0, 1, true), Some(2));
    }

    #[test]
    fn broadcasting_and_matmul() {
        assert_eq!(
            broadcast_shapes(&[2, 1, 3], &[4, 1]).unwrap(),
            vec![2, 4, 3]
        );
        assert!(broadcast_shapes(&[2, 3], &[4]).is_err());
        let out = infer(&Op::MatMul, &[&t(&[5, 2, 3]), &t(&[3, 4])]).unwrap();
        assert_eq!(out[0].shape, vec![5, 2, 4]);
        let out = infer(&Op::MatMul, &[&t(&[3]), &t(&[3, 4])]).unwrap();
        assert_eq!(out[0].shape, vec![4]);
    }

    #[test]
    fn extended_ops_shapes_and_errors() {
        use crate::op::{CellKind, ConvTranspose2d, Recurrent, RnnActivation, RnnDirection};
        let ct = Op::ConvTranspose2d(ConvTranspose2d {
            strides: [2, 2],
            pads: [1, 1, 1, 1],
            output_padding: [1, 1],
            group: 2,
            ..ConvTranspose2d::default()
        });
        // 2*(8-1) + 1 + 2 + 1 - 2 = 16; M = 3 per group x 2.
        let out = infer(&ct, &[&t(&[1, 4, 8, 8]), &t(&[4, 3, 3, 3])]).unwrap();
        assert_eq!(out[0].shape, vec![1, 6, 16, 16]);
        let e = infer(&ct, &[&t(&[1, 4, 8, 8]), &t(&[2, 3, 3, 3])]).unwrap_err();
        assert!(e.contains("[C, M/group, kH, kW]"), "{e}");
        let crop = Op::ConvTranspose2d(ConvTranspose2d {
            pads: [2, 0, 2, 0],
            ..ConvTranspose2d::default()
        });
        let e = infer(&crop, &[&t(&[1, 1, 1, 1]), &t(&[1, 1, 3, 1])]).unwrap_err();
        assert!(e.contains("remove the whole"), "{e}");

        let b = TensorType::new(DType::Bool, vec![2, 1]);
        let out = infer(&Op::Where, &[&b, &t(&[3]), &t(&[])]).unwrap();
        assert_eq!(out[0], t(&[2, 3]));
        let e = infer(&Op::Where, &[&t(&[2, 1]), &t(&[3]), &t(&[])]).unwrap_err();
        assert!(e.contains("condition must be bool"), "{e}");
        let i = TensorType::new(DType::I64, vec![3]);
        let e = infer(&Op::Where, &[&b, &t(&[3]), &i]).unwrap_err();
        assert!(e.contains("dtypes differ"), "{e}");

        let lstm = Op::Recurrent(Recurrent {
            cell: CellKind::Lstm {
                input_forget: false,
            },
            hidden_size: 2,
            direction: RnnDirection::Bidirectional,
            activations: vec![RnnActivation::Tanh; 6],
            clip: f32::INFINITY,
        });
        let (x, w, r, bb, h) = (
            t(&[5, 3, 4]),
            t(&[2, 8, 4]),
            t(&[2, 8, 2]),
            t(&[2, 16]),
            t(&[2, 3, 2]),
        );
        let out = infer(&lstm, &[&x, &w, &r, &bb, &h, &h]).unwrap();
        assert_eq!(out, vec![t(&[5, 2, 3, 2]), h.clone(), h.clone()]);
        let e = infer(&lstm, &[&x, &w, &r, &bb, &h, &h, &t(&[2, 5])]).unwrap_err();
        assert!(e.contains("P must be f32[2, 6]"), "{e}");
        let e = infer(&lstm, &[&x, &t(&[1, 8, 4]), &r, &bb, &h, &h]).unwrap_err();
        assert!(e.contains("W must be"), "{e}");

        let shape = Op::Shape {
            start: -2,
            end: i64::MAX,
        };
        let out = infer(&shape, &[&t(&[2, 3, 4])]).unwrap();
        assert_eq!(out[0], TensorType::new(DType::I64, vec![2]));
    }

    #[test]
    fn reshape_and_slice_rules() {
        assert_eq!(reshape_target(&[2, 3, 4], &[0, -1]).unwrap(), vec![2, 12]);
        assert!(reshape_target(&[2, 3], &[4, -1]).is_err());
        assert_eq!(slice_range(10, 1, i64::MAX, 2), (1, 2, 5));
        assert_eq!(slice_range(10, -1, i64::MIN, -1), (9, -1, 10));
        assert_eq!(slice_range(10, 5, 2, 1).2, 0);
    }
}
