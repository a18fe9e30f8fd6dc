//! Data movement for every dtype: concat, split, slice, reshape family,
//! transpose, pad, gather and expand.

use super::{flat, from_vec, map_dtype, reshape, standard, Elem, KResult};
use dnnc_ir::infer::{broadcast_shapes, norm_axis, slice_range};
use dnnc_ir::op::PadMode;
use dnnc_ir::Tensor;
use ndarray::{ArrayD, ArrayViewD, Axis, IxDyn, Slice};

/// For each output axis, the input index each output position reads, or
/// `None` for a fill value. `out[i0, .., ir] = src[map0[i0], .., mapr[ir]]`.
type AxisMaps = Vec<Vec<Option<usize>>>;

/// Gathers `src` (row-major, shape `in_shape`) through per-axis maps. The
/// maps must index within `in_shape`; any slip yields `fill`, not a panic.
fn remap<T: Elem>(src: &[T], in_shape: &[usize], maps: &AxisMaps, fill: T) -> Vec<T> {
    let r = in_shape.len();
    let Some(last) = maps.last() else {
        return src.to_vec(); // rank 0
    };
    let total: usize = maps.iter().map(Vec::len).product();
    if total == 0 {
        return vec![];
    }
    let mut strides = vec![1usize; r];
    for d in (0..r.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * in_shape[d + 1];
    }
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0usize; r - 1];
    loop {
        let mut base = Some(0usize);
        for (d, &i) in idx.iter().enumerate() {
            base = match (base, maps[d][i]) {
                (Some(b), Some(j)) => Some(b + j * strides[d]),
                _ => None,
            };
        }
        match base {
            None => out.extend(std::iter::repeat_n(fill, last.len())),
            Some(b) => out.extend(
                last.iter()
                    .map(|m| m.and_then(|j| src.get(b + j).copied()).unwrap_or(fill)),
            ),
        }
        // Advance the odometer over the outer axes.
        let mut d = r - 1;
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < maps[d].len() {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// `remap` on an array of any layout.
fn remap_array<T: Elem>(a: &ArrayD<T>, maps: &AxisMaps, fill: T) -> KResult<ArrayD<T>> {
    let ac = standard(a);
    let out = remap(flat(&ac)?, a.shape(), maps, fill);
    from_vec(maps.iter().map(Vec::len).collect(), out)
}

fn identity_maps(shape: &[usize]) -> AxisMaps {
    shape.iter().map(|&d| (0..d).map(Some).collect()).collect()
}

/// Joins tensors of one dtype along `axis`.
pub(crate) fn concat(ts: &[&Tensor], axis: i64) -> KResult<Tensor> {
    fn join<T: Elem>(arrs: Vec<ArrayViewD<'_, T>>, ax: usize) -> KResult<ArrayD<T>> {
        ndarray::concatenate(Axis(ax), &arrs).map_err(|e| format!("inputs do not concatenate: {e}"))
    }
    let first = ts.first().ok_or("Concat needs at least one input")?;
    let ax = norm_axis(axis, first.shape().len())?;
    let wrong = |t: &Tensor| format!("inputs mix dtypes: {} and {}", first.ty(), t.ty());
    Ok(match first {
        Tensor::F32(_) => Tensor::F32(join(
            ts.iter()
                .map(|t| t.as_f32().map(|a| a.view()).ok_or_else(|| wrong(t)))
                .collect::<KResult<_>>()?,
            ax,
        )?),
        Tensor::I64(_) => Tensor::I64(join(
            ts.iter()
                .map(|t| t.as_i64().map(|a| a.view()).ok_or_else(|| wrong(t)))
                .collect::<KResult<_>>()?,
            ax,
        )?),
        Tensor::Bool(_) => Tensor::Bool(join(
            ts.iter()
                .map(|t| t.as_bool().map(|a| a.view()).ok_or_else(|| wrong(t)))
                .collect::<KResult<_>>()?,
            ax,
        )?),
    })
}

/// Cuts `x` along `axis` into consecutive pieces of the given sizes.
pub(crate) fn split(x: &Tensor, axis: i64, sizes: &[usize]) -> KResult<Vec<Tensor>> {
    let ax = norm_axis(axis, x.shape().len())?;
    let dim = x.shape()[ax];
    if sizes.iter().sum::<usize>() != dim {
        return Err(format!(
            "split sizes {sizes:?} do not sum to axis {ax} size {dim}"
        ));
    }
    let mut start = 0;
    let mut out = Vec::with_capacity(sizes.len());
    for &s in sizes {
        let sl = Slice::from(start..start + s);
        out.push(map_dtype!(x, |a| a.slice_axis(Axis(ax), sl).to_owned()));
        start += s;
    }
    Ok(out)
}

/// ONNX Slice: per listed axis, elements `start, start+step, ...` (negative
/// indices count from the end, out-of-range ones clamp, steps may be negative).
pub(crate) fn slice(
    x: &Tensor,
    starts: &[i64],
    ends: &[i64],
    axes: &[i64],
    steps: &[i64],
) -> KResult<Tensor> {
    let n = starts.len();
    if ends.len() != n || axes.len() != n || steps.len() != n {
        return Err("starts, ends, axes and steps must have equal lengths".into());
    }
    let shape = x.shape();
    let mut maps = identity_maps(shape);
    let mut seen = vec![false; shape.len()];
    for i in 0..n {
        let ax = norm_axis(axes[i], shape.len())?;
        if std::mem::replace(&mut seen[ax], true) {
            return Err(format!("axis {} is sliced twice", axes[i]));
        }
        if steps[i] == 0 {
            return Err("a step cannot be 0".into());
        }
        let (s, step, len) = slice_range(shape[ax], starts[i], ends[i], steps[i]);
        maps[ax] = (0..len as i64)
            .map(|k| usize::try_from(s + k * step).ok())
            .collect();
    }
    Ok(map_dtype!(x, |a| remap_array(
        a,
        &maps,
        Elem::from_f32(0.0)
    )?))
}

/// Reinterprets `x` with a new shape of the same size (row-major order);
/// free when `x` is owned and contiguous.
pub(crate) fn reshape_tensor(x: Tensor, shape: Vec<usize>) -> KResult<Tensor> {
    Ok(map_dtype!(x, |a| reshape(a, shape)?))
}

/// Target of ONNX Flatten: `[prod(dims[..axis]), prod(dims[axis..])]`.
pub(crate) fn flatten_shape(shape: &[usize], axis: i64) -> KResult<Vec<usize>> {
    let r = shape.len() as i64;
    if axis < -r || axis > r {
        return Err(format!("axis {axis} is out of range for rank {r}"));
    }
    let a = if axis < 0 { axis + r } else { axis } as usize;
    Ok(vec![
        shape[..a].iter().product(),
        shape[a..].iter().product(),
    ])
}

/// Target of Squeeze: drops the listed size-1 axes (all size-1 axes when
/// `axes` is empty).
pub(crate) fn squeeze_shape(shape: &[usize], axes: &[i64]) -> KResult<Vec<usize>> {
    let ax: Vec<usize> = if axes.is_empty() {
        (0..shape.len()).filter(|&i| shape[i] == 1).collect()
    } else {
        axes.iter()
            .map(|&a| norm_axis(a, shape.len()))
            .collect::<Result<_, _>>()?
    };
    if let Some(&a) = ax.iter().find(|&&a| shape[a] != 1) {
        return Err(format!("cannot squeeze axis {a} of size {}", shape[a]));
    }
    Ok((0..shape.len())
        .filter(|i| !ax.contains(i))
        .map(|i| shape[i])
        .collect())
}

/// Target of Unsqueeze: size-1 axes inserted at the listed output positions.
pub(crate) fn unsqueeze_shape(shape: &[usize], axes: &[i64]) -> KResult<Vec<usize>> {
    let r = shape.len() + axes.len();
    let mut ax = vec![false; r];
    for &a in axes {
        let i = norm_axis(a, r)?;
        if std::mem::replace(&mut ax[i], true) {
            return Err(format!("axis {a} is repeated"));
        }
    }
    let mut src = shape.iter();
    ax.iter()
        .map(|&ins| {
            if ins {
                Ok(1)
            } else {
                src.next()
                    .copied()
                    .ok_or_else(|| "axes do not fit the rank".to_string())
            }
        })
        .collect()
}

/// Permutes axes: output axis `i` is input axis `perm[i]`.
pub(crate) fn transpose(x: &Tensor, perm: &[usize]) -> KResult<Tensor> {
    let r = x.shape().len();
    let mut seen = vec![false; r];
    if perm.len() != r
        || perm
            .iter()
            .any(|&p| p >= r || std::mem::replace(&mut seen[p], true))
    {
        return Err(format!("perm {perm:?} is not a permutation of {r} axes"));
    }
    Ok(map_dtype!(x, |a| a
        .view()
        .permuted_axes(IxDyn(perm))
        .as_standard_layout()
        .into_owned()))
}

/// ONNX Pad: `pads` lists every axis's begin then every axis's end; negative
/// amounts crop. Reflect mirrors without repeating the edge; edge repeats it.
pub(crate) fn pad(x: &Tensor, pads: &[i64], mode: PadMode, value: f32) -> KResult<Tensor> {
    let shape = x.shape();
    let r = shape.len();
    if pads.len() != 2 * r {
        return Err(format!(
            "pads has {} entries; a rank-{r} input needs {}",
            pads.len(),
            2 * r
        ));
    }
    let mut maps = AxisMaps::with_capacity(r);
    for (i, &d) in shape.iter().enumerate() {
        let (b, e) = (pads[i], pads[i + r]);
        let di = d as i64;
        let n = di + b + e;
        if n < 0 {
            return Err(format!("pads {pads:?} crop axis {i} below zero"));
        }
        let padding = (b.max(0) + e.max(0)) > 0;
        if padding && mode == PadMode::Edge && d == 0 {
            return Err(format!("cannot edge-pad empty axis {i}"));
        }
        if padding && mode == PadMode::Reflect && b.max(e) >= di {
            return Err(format!(
                "reflect padding {} on axis {i} needs a dimension larger than it, found {d}",
                b.max(e)
            ));
        }
        maps.push(
            (0..n)
                .map(|o| {
                    let j = o - b; // input coordinate
                    if (0..di).contains(&j) {
                        return Some(j as usize);
                    }
                    match mode {
                        PadMode::Constant => None,
                        PadMode::Edge => Some(j.clamp(0, di - 1) as usize),
                        PadMode::Reflect => {
                            let period = 2 * (di - 1);
                            let m = j.rem_euclid(period.max(1));
                            Some(if m >= di { period - m } else { m } as usize)
                        }
                    }
                })
                .collect(),
        );
    }
    Ok(map_dtype!(x, |a| remap_array(
        a,
        &maps,
        Elem::from_f32(value)
    )?))
}

/// ONNX Gather: `out[pre, idx..., post] = x[pre, indices[idx...], post]`.
/// Negative indices count from the end; out-of-range ones are an error.
pub(crate) fn gather(x: &Tensor, indices: &Tensor, axis: i64) -> KResult<Tensor> {
    let idx = indices
        .as_i64()
        .ok_or_else(|| format!("indices must be i64, found {}", indices.ty()))?;
    let shape = x.shape();
    let ax = norm_axis(axis, shape.len())?;
    let d = shape[ax];
    let pos: Vec<usize> = idx
        .iter()
        .map(|&i| {
            let j = if i < 0 { i + d as i64 } else { i };
            if (0..d as i64).contains(&j) {
                Ok(j as usize)
            } else {
                Err(format!(
                    "index {i} is out of range for axis {ax} of size {d}"
                ))
            }
        })
        .collect::<KResult<_>>()?;
    let outer: usize = shape[..ax].iter().product();
    let inner: usize = shape[ax + 1..].iter().product();
    let mut oshape = shape[..ax].to_vec();
    oshape.extend_from_slice(idx.shape());
    oshape.extend_from_slice(&shape[ax + 1..]);
    fn take<T: Elem>(
        a: &ArrayD<T>,
        pos: &[usize],
        outer: usize,
        d: usize,
        inner: usize,
        oshape: Vec<usize>,
    ) -> KResult<ArrayD<T>> {
        let ac = standard(a);
        let src = flat(&ac)?;
        let mut out = Vec::with_capacity(outer * pos.len() * inner);
        for o in 0..outer {
            for &p in pos {
                let s = (o * d + p) * inner;
                out.extend_from_slice(
                    src.get(s..s + inner)
                        .ok_or("internal error: gather out of bounds")?,
                );
            }
        }
        from_vec(oshape, out)
    }
    Ok(map_dtype!(x, |a| take(a, &pos, outer, d, inner, oshape)?))
}

/// Broadcasts `x` to `shape` with numpy rules in both directions (the
/// result has the broadcast of both shapes).
pub(crate) fn expand(x: &Tensor, shape: &[i64]) -> KResult<Tensor> {
    let target: Vec<usize> = shape
        .iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| format!("shape {shape:?} has a negative dimension"))
        })
        .collect::<KResult<_>>()?;
    let out = broadcast_shapes(x.shape(), &target)?;
    let xs = x.shape();
    let lead = out.len() - xs.len();
    // Treat x as having leading size-1 axes; same row-major data.
    let mut in_shape = vec![1; lead];
    in_shape.extend_from_slice(xs);
    let maps: AxisMaps = out
        .iter()
        .zip(&in_shape)
        .map(|(&o, &i)| (0..o).map(|k| Some(if i == 1 { 0 } else { k })).collect())
        .collect();
    fn go<T: Elem>(
        a: &ArrayD<T>,
        in_shape: &[usize],
        maps: &AxisMaps,
        out: &[usize],
    ) -> KResult<ArrayD<T>> {
        let ac = standard(a);
        from_vec(
            out.to_vec(),
            remap(flat(&ac)?, in_shape, maps, T::default()),
        )
    }
    Ok(map_dtype!(x, |a| go(a, &in_shape, &maps, &out)?))
}
