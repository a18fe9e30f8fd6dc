//! Static Resize: nearest and n-linear interpolation with ONNX's coordinate
//! transforms. Each axis is reduced to a list of `(input index, weight)`
//! taps per output position; an output element is the weighted sum over
//! the product of its axes' taps (one tap per axis for nearest, two for
//! linear), so n-linear is separable and exact.

use super::{flat, from_vec, standard, KResult};
use dnnc_ir::op::{CoordMode, NearestMode, Resize, ResizeMode};
use ndarray::ArrayD;

/// The input coordinate (before rounding or clamping) that output position
/// `x` of an axis of length `len_in` reads, with scale `scale`. `len_out`
/// is the resized length the formulas use: the output size when sizes were
/// given, `len_in * scale` (unfloored, as in ONNX's reference) when scales
/// were.
pub(crate) fn source_coord(
    x: usize,
    len_in: usize,
    len_out: f32,
    scale: f32,
    mode: CoordMode,
) -> f32 {
    let x = x as f32;
    match mode {
        CoordMode::HalfPixel => (x + 0.5) / scale - 0.5,
        CoordMode::PytorchHalfPixel => {
            if len_out > 1.0 {
                (x + 0.5) / scale - 0.5
            } else {
                0.0
            }
        }
        CoordMode::AlignCorners => {
            if len_out == 1.0 {
                0.0
            } else {
                x * (len_in as f32 - 1.0) / (len_out - 1.0)
            }
        }
        CoordMode::Asymmetric => x / scale,
    }
}

/// Rounds a source coordinate per `mode`, clamped into `[0, len_in)`.
fn nearest_index(c: f32, len_in: usize, mode: NearestMode) -> usize {
    let fl = c.floor();
    let r = match mode {
        NearestMode::Floor => fl,
        NearestMode::Ceil => c.ceil(),
        NearestMode::RoundPreferFloor => {
            if c - fl == 0.5 {
                fl
            } else {
                c.round()
            }
        }
        NearestMode::RoundPreferCeil => {
            if c - fl == 0.5 {
                fl + 1.0
            } else {
                c.round()
            }
        }
    };
    // `as` saturates (NaN to 0), then clamp to the last index.
    (r.max(0.0) as usize).min(len_in.saturating_sub(1))
}

/// The taps of every output position along one axis: (input index,
/// weight) pairs, one for nearest, one or two for linear. Public so the CPU
/// code generator builds its compile-time tables from the same arithmetic.
pub fn axis_taps(
    len_in: usize,
    len_out: usize,
    scale: Option<f32>,
    p: &Resize,
) -> Vec<Vec<(usize, f32)>> {
    let (len_f, scale) = match scale {
        Some(s) => (len_in as f32 * s, s),
        None => (len_out as f32, len_out as f32 / len_in as f32),
    };
    (0..len_out)
        .map(|x| {
            let c = source_coord(x, len_in, len_f, scale, p.coord);
            match p.mode {
                ResizeMode::Nearest => vec![(nearest_index(c, len_in, p.nearest), 1.0)],
                ResizeMode::Linear => {
                    let hi = len_in.saturating_sub(1) as f32;
                    let c = if c.is_nan() { 0.0 } else { c.clamp(0.0, hi) };
                    let i0 = c.floor();
                    let w1 = c - i0;
                    let i0 = i0 as usize;
                    let i1 = (i0 + 1).min(len_in.saturating_sub(1));
                    if w1 == 0.0 {
                        vec![(i0, 1.0)]
                    } else {
                        vec![(i0, 1.0 - w1), (i1, w1)]
                    }
                }
            }
        })
        .collect()
}

/// Resizes `x` to `p.sizes`.
pub(crate) fn resize(x: &ArrayD<f32>, p: &Resize) -> KResult<ArrayD<f32>> {
    let s = x.shape();
    let r = s.len();
    if p.sizes.len() != r || (!p.scales.is_empty() && p.scales.len() != r) {
        return Err(format!(
            "sizes {:?} / scales {:?} do not match a rank-{r} input",
            p.sizes, p.scales
        ));
    }
    let total = p
        .sizes
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("output has too many elements")?;
    if total == 0 {
        return from_vec(p.sizes.clone(), vec![]);
    }
    if s.contains(&0) {
        return Err(format!("cannot resize the empty input {s:?}"));
    }
    let taps: Vec<Vec<Vec<(usize, f32)>>> = (0..r)
        .map(|d| axis_taps(s[d], p.sizes[d], p.scales.get(d).copied(), p))
        .collect();
    let xc = standard(x);
    let src = flat(&xc)?;
    let mut strides = vec![1usize; r];
    for d in (0..r.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * s[d + 1];
    }
    let mut out = Vec::with_capacity(total);
    let mut pos = vec![0usize; r];
    for _ in 0..total {
        // Sum over the product of this position's taps, odometer-style.
        let lists: Vec<&[(usize, f32)]> = (0..r).map(|d| &taps[d][pos[d]][..]).collect();
        let mut choice = vec![0usize; r];
        let mut acc = 0.0f64;
        loop {
            let (mut off, mut w) = (0usize, 1.0f64);
            for d in 0..r {
                let (i, wt) = lists[d][choice[d]];
                off += i * strides[d];
                w *= wt as f64;
            }
            acc += w * *src
                .get(off)
                .ok_or("internal error: Resize tap out of range")? as f64;
            if !step(&mut choice, |d| lists[d].len()) {
                break;
            }
        }
        out.push(acc as f32);
        step(&mut pos, |d| p.sizes[d]);
    }
    from_vec(p.sizes.clone(), out)
}

/// Advances a row-major odometer with per-digit limits; `false` once it
/// wraps around to all zeros.
fn step(idx: &mut [usize], len: impl Fn(usize) -> usize) -> bool {
    for d in (0..idx.len()).rev() {
        idx[d] += 1;
        if idx[d] < len(d) {
            return true;
        }
        idx[d] = 0;
    }
    false
}
