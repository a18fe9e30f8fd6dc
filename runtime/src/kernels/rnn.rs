//! Recurrent layers (ONNX RNN, GRU, LSTM with `layout = 0`), written as the
//! ONNX equations step by step. Gate order in W, R and B is ONNX's: GRU
//! `z, r, h`; LSTM `i, o, f, c`; peepholes `i, o, f`. Gate pre-activations
//! are clipped to `[-clip, clip]` before their activation, as in
//! onnxruntime.

use super::{flat, from_vec, standard, KResult};
use dnnc_ir::op::{CellKind, Recurrent, RnnActivation, RnnDirection};
use ndarray::ArrayD;

fn act(a: RnnActivation, x: f32) -> f32 {
    match a {
        RnnActivation::Relu => x.max(0.0),
        RnnActivation::Tanh => x.tanh(),
        RnnActivation::Sigmoid => {
            if x >= 0.0 {
                1.0 / (1.0 + (-x).exp())
            } else {
                let e = x.exp();
                e / (1.0 + e)
            }
        }
        RnnActivation::HardSigmoid { alpha, beta } => (alpha * x + beta).clamp(0.0, 1.0),
    }
}

/// Row-major data of each operand, checked against the shapes the layer
/// implies.
struct Operands<'a> {
    x: &'a [f32],
    w: &'a [f32],
    r: &'a [f32],
    b: &'a [f32],
    h0: &'a [f32],
    c0: &'a [f32],
    p: &'a [f32],
}

/// Runs the layer; returns `Y`, `Y_h` and (LSTM) `Y_c`.
pub(crate) fn recurrent(spec: &Recurrent, ins: &[&ArrayD<f32>]) -> KResult<Vec<ArrayD<f32>>> {
    let lstm = matches!(spec.cell, CellKind::Lstm { .. });
    let xs = ins.first().ok_or("X is missing")?.shape();
    let &[seq, batch, input] = xs else {
        return Err(format!("X must have rank 3, found {xs:?}"));
    };
    let (dirs, h, g) = (spec.direction.count(), spec.hidden_size, spec.cell.gates());
    let per = spec.cell.activations_per_direction();
    if spec.activations.len() != dirs * per {
        return Err(format!(
            "{} activations given; {} needed",
            spec.activations.len(),
            dirs * per
        ));
    }
    let big = || "hidden size overflows".to_string();
    let gh = g.checked_mul(h).ok_or_else(big)?;
    let gh2 = gh.checked_mul(2).ok_or_else(big)?;
    let h3 = h.checked_mul(3).ok_or_else(big)?;
    let mut want = vec![
        ("W", vec![dirs, gh, input]),
        ("R", vec![dirs, gh, h]),
        ("B", vec![dirs, gh2]),
        ("initial_h", vec![dirs, batch, h]),
    ];
    if lstm {
        want.push(("initial_c", vec![dirs, batch, h]));
        want.push(("P", vec![dirs, h3]));
    }
    let need = if lstm { 6 } else { 5 };
    if ins.len() < need || ins.len() > want.len() + 1 {
        return Err(format!("takes {need} inputs, found {}", ins.len()));
    }
    for (t, (what, shape)) in ins[1..].iter().zip(&want) {
        if t.shape() != shape.as_slice() {
            return Err(format!(
                "{what} must have shape {shape:?}, found {:?}",
                t.shape()
            ));
        }
    }
    let cows: Vec<_> = ins.iter().map(|a| standard(a)).collect();
    let sl: Vec<&[f32]> = cows.iter().map(flat).collect::<KResult<_>>()?;
    let zeros = if lstm && sl.len() <= 6 {
        vec![0.0f32; dirs * h3]
    } else {
        vec![]
    };
    let o = Operands {
        x: sl[0],
        w: sl[1],
        r: sl[2],
        b: sl[3],
        h0: sl[4],
        c0: if lstm { sl[5] } else { &[] },
        p: if lstm && sl.len() > 6 { sl[6] } else { &zeros },
    };
    let mut y = vec![0.0f32; seq * dirs * batch * h];
    let mut yh = vec![0.0f32; dirs * batch * h];
    let mut yc = vec![0.0f32; dirs * batch * h];
    for d in 0..dirs {
        let reverse = spec.direction == RnnDirection::Reverse || d == 1;
        let acts = &spec.activations[d * per..(d + 1) * per];
        let state = d * batch * h..(d + 1) * batch * h;
        let mut hs = o.h0[state.clone()].to_vec();
        let mut cs = if lstm {
            o.c0[state.clone()].to_vec()
        } else {
            vec![]
        };
        for step in 0..seq {
            let t = if reverse { seq - 1 - step } else { step };
            for bi in 0..batch {
                let xt = &o.x[(t * batch + bi) * input..(t * batch + bi + 1) * input];
                let hp = hs[bi * h..(bi + 1) * h].to_vec();
                let cp = if lstm {
                    cs[bi * h..(bi + 1) * h].to_vec()
                } else {
                    vec![]
                };
                let (hn, cn) = cell(spec, &o, d, acts, xt, &hp, &cp, input);
                hs[bi * h..(bi + 1) * h].copy_from_slice(&hn);
                if lstm {
                    cs[bi * h..(bi + 1) * h].copy_from_slice(&cn);
                }
                let y0 = ((t * dirs + d) * batch + bi) * h;
                y[y0..y0 + h].copy_from_slice(&hn);
            }
        }
        yh[state.clone()].copy_from_slice(&hs);
        if lstm {
            yc[state].copy_from_slice(&cs);
        }
    }
    let mut out = vec![
        from_vec(vec![seq, dirs, batch, h], y)?,
        from_vec(vec![dirs, batch, h], yh)?,
    ];
    if lstm {
        out.push(from_vec(vec![dirs, batch, h], yc)?);
    }
    Ok(out)
}

/// One time step of one batch row in direction `d`: the new hidden state
/// and (LSTM) the new cell state.
#[allow(clippy::too_many_arguments)]
fn cell(
    spec: &Recurrent,
    o: &Operands<'_>,
    d: usize,
    acts: &[RnnActivation],
    xt: &[f32],
    hp: &[f32],
    cp: &[f32],
    input: usize,
) -> (Vec<f32>, Vec<f32>) {
    let (h, g) = (spec.hidden_size, spec.cell.gates());
    let clip = |v: f64| -> f32 {
        let v = v as f32;
        if v.is_nan() {
            v
        } else {
            v.clamp(-spec.clip, spec.clip)
        }
    };
    // Gate row j: x . W[d, j] + Wb[d, j], and h . R[d, j] + Rb[d, j].
    let wrow = |j: usize| &o.w[(d * g * h + j) * input..(d * g * h + j + 1) * input];
    let rrow = |j: usize| &o.r[(d * g * h + j) * h..(d * g * h + j + 1) * h];
    let dot = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(&p, &q)| p as f64 * q as f64)
            .sum::<f64>()
    };
    let wb = |j: usize| o.b[d * 2 * g * h + j] as f64;
    let rb = |j: usize| o.b[d * 2 * g * h + g * h + j] as f64;
    let xw = |j: usize| dot(xt, wrow(j)) + wb(j);
    let hr = |hv: &[f32], j: usize| dot(hv, rrow(j)) + rb(j);
    match spec.cell {
        CellKind::Rnn => {
            let hn = (0..h)
                .map(|k| act(acts[0], clip(xw(k) + hr(hp, k))))
                .collect();
            (hn, vec![])
        }
        CellKind::Gru {
            linear_before_reset,
        } => {
            let z: Vec<f32> = (0..h)
                .map(|k| act(acts[0], clip(xw(k) + hr(hp, k))))
                .collect();
            let r: Vec<f32> = (0..h)
                .map(|k| act(acts[0], clip(xw(h + k) + hr(hp, h + k))))
                .collect();
            let rh: Vec<f32> = r.iter().zip(hp).map(|(a, b)| a * b).collect();
            let hn = (0..h)
                .map(|k| {
                    let j = 2 * h + k;
                    let rec = if linear_before_reset {
                        r[k] as f64 * hr(hp, j)
                    } else {
                        hr(&rh, j)
                    };
                    let ht = act(acts[1], clip(xw(j) + rec));
                    (1.0 - z[k]) * ht + z[k] * hp[k]
                })
                .collect();
            (hn, vec![])
        }
        CellKind::Lstm { input_forget } => {
            let pre = |gate: usize, k: usize| xw(gate * h + k) + hr(hp, gate * h + k);
            let peep = |gate: usize, k: usize| o.p[d * 3 * h + gate * h + k] as f64;
            let mut hn = vec![0.0f32; h];
            let mut cn = vec![0.0f32; h];
            for k in 0..h {
                let i = act(acts[0], clip(pre(0, k) + peep(0, k) * cp[k] as f64));
                let f = if input_forget {
                    1.0 - i
                } else {
                    act(acts[0], clip(pre(2, k) + peep(2, k) * cp[k] as f64))
                };
                let c = act(acts[1], clip(pre(3, k)));
                let ct = f * cp[k] + i * c;
                let og = act(acts[0], clip(pre(1, k) + peep(1, k) * ct as f64));
                cn[k] = ct;
                hn[k] = og * act(acts[2], ct);
            }
            (hn, cn)
        }
    }
}
