//! Elementwise ops: unary activations and numpy-broadcasting binary ops.
//! Buffers the interpreter hands over owned are updated in place.

use super::KResult;
use dnnc_ir::infer::broadcast_shapes;
use dnnc_ir::op::{Binary, Unary};
use dnnc_ir::Tensor;
use ndarray::{ArrayD, IxDyn, Zip};
use std::borrow::Cow;

/// `erf(x)` in f64, accurate to ~1e-15: the Maclaurin series below 2.5
/// (where the alternating terms stay small enough), `1 - erfc` above.
pub(crate) fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        erf_series(a)
    } else {
        1.0 - erfc_cf(a)
    };
    r.copysign(x)
}

/// `erfc(x) = 1 - erf(x)` without cancellation for large `x`.
pub(crate) fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else if x < 0.0 {
        2.0 - erfc(-x)
    } else if x < 2.5 {
        1.0 - erf_series(x)
    } else {
        erfc_cf(x)
    }
}

/// `2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1))`.
fn erf_series(x: f64) -> f64 {
    let x2 = x * x;
    let (mut term, mut sum) = (x, x); // term = (-1)^n x^(2n+1) / n!
    for n in 1..100 {
        term *= -x2 / n as f64;
        let t = term / (2 * n + 1) as f64;
        sum += t;
        if t.abs() < 1e-17 * sum.abs() {
            break;
        }
    }
    sum * std::f64::consts::FRAC_2_SQRT_PI
}

/// Continued fraction `erfc(x) = e^{-x^2}/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))`,
/// evaluated backwards; converges fast for `x >= 2.5`.
fn erfc_cf(x: f64) -> f64 {
    if x > 27.0 {
        return 0.0;
    }
    let mut t = x;
    for n in (1..=80).rev() {
        t = x + (n as f64 / 2.0) / t;
    }
    (-x * x).exp() / std::f64::consts::PI.sqrt() / t
}

fn unary_f32(u: Unary) -> fn(f32) -> f32 {
    match u {
        Unary::Relu => |x| if x < 0.0 { 0.0 } else { x },
        Unary::Sigmoid => sigmoid,
        Unary::Tanh => f32::tanh,
        Unary::HardSwish => |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        Unary::Softplus => |x| {
            // ln(1 + e^x) = max(x, 0) + ln(1 + e^-|x|): no overflow.
            let x = x as f64;
            (x.max(0.0) + (-x.abs()).exp().ln_1p()) as f32
        },
        Unary::Gelu { tanh_approx: false } => |x| {
            // 0.5 x (1 + erf(x/sqrt2)) = 0.5 x erfc(-x/sqrt2), exact for x << 0.
            let x = x as f64;
            (0.5 * x * erfc(-x / std::f64::consts::SQRT_2)) as f32
        },
        Unary::Gelu { tanh_approx: true } => |x| {
            let x = x as f64;
            let c = (2.0 / std::f64::consts::PI).sqrt();
            (0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())) as f32
        },
        Unary::Sqrt => f32::sqrt,
        Unary::Exp => f32::exp,
        Unary::Log => f32::ln,
        Unary::Neg => |x| -x,
        Unary::Abs => f32::abs,
        Unary::Reciprocal => |x| 1.0 / x,
        Unary::Erf => |x| erf(x as f64) as f32,
        // ONNX Sign: -1, 0 or 1; NaN (and -0) pass through.
        Unary::Sign => |x| {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        },
        Unary::Floor => f32::floor,
        Unary::Ceil => f32::ceil,
        Unary::Round => f32::round_ties_even,
        Unary::Sin => f32::sin,
        Unary::Cos => f32::cos,
        // Parameterised ops are handled by the caller.
        Unary::LeakyRelu { .. }
        | Unary::Clip { .. }
        | Unary::HardSigmoid { .. }
        | Unary::Elu { .. }
        | Unary::Selu { .. } => |x| x,
    }
}

/// `1 / (1 + e^-x)`, computed so that neither branch overflows.
fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// Applies a unary op, in place on the (owned) operand.
pub(crate) fn unary(t: Tensor, u: Unary) -> KResult<Tensor> {
    match t {
        Tensor::F32(mut a) => {
            match u {
                Unary::LeakyRelu { alpha } => {
                    a.mapv_inplace(|x| if x < 0.0 { alpha * x } else { x })
                }
                // ONNX Clip: min(max(x, min), max) (the IR keeps
                // min <= max); NaN stays NaN.
                Unary::Clip { min, max } => a.mapv_inplace(|x| {
                    let y = if x < min { min } else { x };
                    if max < y {
                        max
                    } else {
                        y
                    }
                }),
                Unary::HardSigmoid { alpha, beta } => {
                    a.mapv_inplace(|x| (alpha * x + beta).clamp(0.0, 1.0))
                }
                Unary::Elu { alpha } => {
                    a.mapv_inplace(|x| if x > 0.0 { x } else { alpha * x.exp_m1() })
                }
                Unary::Selu { alpha, gamma } => a.mapv_inplace(|x| {
                    if x > 0.0 {
                        gamma * x
                    } else {
                        gamma * alpha * x.exp_m1()
                    }
                }),
                _ => a.mapv_inplace(unary_f32(u)),
            }
            Ok(Tensor::F32(a))
        }
        Tensor::I64(mut a) => {
            match u {
                Unary::Relu => a.mapv_inplace(|x| x.max(0)),
                Unary::Neg => a.mapv_inplace(i64::wrapping_neg),
                Unary::Abs => a.mapv_inplace(i64::wrapping_abs),
                Unary::Sign => a.mapv_inplace(i64::signum),
                _ => return Err(format!("input must be f32, found {}", Tensor::I64(a).ty())),
            }
            Ok(Tensor::I64(a))
        }
        other => Err(format!("input must be f32 or i64, found {}", other.ty())),
    }
}

fn binary_f32(b: Binary) -> fn(f32, f32) -> f32 {
    match b {
        Binary::Add => |x, y| x + y,
        Binary::Sub => |x, y| x - y,
        Binary::Mul => |x, y| x * y,
        Binary::Div => |x, y| x / y,
        Binary::Pow => f32::powf,
        // numpy maximum/minimum: NaN propagates from either side.
        Binary::Max => |x, y| if x.is_nan() || x > y { x } else { y },
        Binary::Min => |x, y| if x.is_nan() || x < y { x } else { y },
    }
}

fn binary_i64(b: Binary) -> KResult<fn(i64, i64) -> i64> {
    Ok(match b {
        Binary::Add => i64::wrapping_add,
        Binary::Sub => i64::wrapping_sub,
        Binary::Mul => i64::wrapping_mul,
        // Truncates toward zero like ONNX / C; divisors are checked first.
        Binary::Div => i64::wrapping_div,
        Binary::Max => |x, y| x.max(y),
        Binary::Min => |x, y| x.min(y),
        Binary::Pow => return Err("Pow is only defined on f32".into()),
    })
}

/// `f` over the numpy broadcast of `a` and `b`; reuses `a`'s buffer when it
/// is owned and already has the result shape.
fn zip_broadcast<T: Copy>(
    a: Cow<'_, ArrayD<T>>,
    b: &ArrayD<T>,
    f: fn(T, T) -> T,
) -> KResult<ArrayD<T>> {
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let bv = b
        .broadcast(IxDyn(&shape))
        .ok_or_else(|| format!("cannot broadcast {:?} to {shape:?}", b.shape()))?;
    if a.shape() == shape.as_slice() {
        if let Cow::Owned(mut a) = a {
            Zip::from(&mut a).and(&bv).for_each(|x, &y| *x = f(*x, y));
            return Ok(a);
        }
    }
    let av = a
        .broadcast(IxDyn(&shape))
        .ok_or_else(|| format!("cannot broadcast {:?} to {shape:?}", a.shape()))?;
    Ok(Zip::from(&av).and(&bv).map_collect(|&x, &y| f(x, y)))
}

/// Applies a binary op with numpy broadcasting. Both operands must share a
/// dtype; i64 arithmetic wraps and integer division by zero is an error.
pub(crate) fn binary(a: Cow<'_, Tensor>, b: &Tensor, op: Binary) -> KResult<Tensor> {
    let mismatch = |a: &Tensor| {
        format!(
            "operand dtypes differ or are unsupported: {} and {}",
            a.ty(),
            b.ty()
        )
    };
    match (a, b) {
        (Cow::Owned(Tensor::F32(x)), Tensor::F32(y)) => Ok(Tensor::F32(zip_broadcast(
            Cow::Owned(x),
            y,
            binary_f32(op),
        )?)),
        (Cow::Borrowed(Tensor::F32(x)), Tensor::F32(y)) => Ok(Tensor::F32(zip_broadcast(
            Cow::Borrowed(x),
            y,
            binary_f32(op),
        )?)),
        (a, Tensor::I64(y)) if a.as_i64().is_some() => {
            let f = binary_i64(op)?;
            if op == Binary::Div && y.iter().any(|&v| v == 0) {
                return Err("integer division by zero".into());
            }
            let x = match a {
                Cow::Owned(Tensor::I64(x)) => Cow::Owned(x),
                Cow::Borrowed(Tensor::I64(x)) => Cow::Borrowed(x),
                other => return Err(mismatch(&other)),
            };
            Ok(Tensor::I64(zip_broadcast(x, y, f)?))
        }
        (a, _) => Err(mismatch(&a)),
    }
}

/// ONNX PRelu: `x` where positive, else `slope * x`; the slope broadcasts
/// unidirectionally to `x`, whose buffer is updated in place.
pub(crate) fn prelu(mut x: ArrayD<f32>, slope: &ArrayD<f32>) -> KResult<ArrayD<f32>> {
    let sv = slope.broadcast(x.raw_dim()).ok_or_else(|| {
        format!(
            "slope {:?} does not broadcast to the input {:?}",
            slope.shape(),
            x.shape()
        )
    })?;
    Zip::from(&mut x).and(&sv).for_each(|v, &s| {
        if *v < 0.0 {
            *v *= s
        }
    });
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::{erf, erfc};

    #[test]
    fn erf_matches_reference_values() {
        // Values from Abramowitz & Stegun / high-precision tables.
        let cases = [
            (0.1, 0.112_462_916_018_284_9),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (2.5, 0.999_593_047_982_555),
            (3.5, 0.999_999_256_901_627_7),
        ];
        for (x, e) in cases {
            assert!((erf(x) - e).abs() < 1e-14, "erf({x}) = {}", erf(x));
            assert!((erf(-x) + e).abs() < 1e-14, "erf(-{x})");
        }
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(f64::INFINITY), 1.0);
        assert!(erf(f64::NAN).is_nan());
    }

    #[test]
    fn erfc_tail_is_relatively_accurate() {
        let cases = [
            (3.0, 2.209_049_699_858_544e-5),
            (5.0, 1.537_459_794_428_035e-12),
            (10.0, 2.088_487_583_762_545e-45),
        ];
        for (x, e) in cases {
            let r = erfc(x) / e - 1.0;
            assert!(r.abs() < 1e-12, "erfc({x}) = {} (rel {r})", erfc(x));
        }
        assert!((erfc(-1.0) - 1.842_700_792_949_715).abs() < 1e-14);
    }
}
