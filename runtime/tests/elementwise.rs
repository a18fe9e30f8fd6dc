//! Hand-checked unary and broadcasting binary ops, f32 and i64.

mod common;
use common::*;
use dnnc_ir::op::{Binary, Unary};
use dnnc_ir::{Graph, Op, TensorType};
use dnnc_runtime::run;

fn bin(b: Binary, x: dnnc_ir::Tensor, y: dnnc_ir::Tensor) -> dnnc_ir::Tensor {
    eval(Op::Binary(b), &[x, y])
}

#[test]
fn broadcast_scalar_row_column() {
    // Scalar: [1,2,3,4] + 10.
    let y = bin(Binary::Add, iota(&[2, 2], 1.0), f(&[], &[10.]));
    assert_f32(&y, &[2, 2], &[11., 12., 13., 14.]);
    // Scalar on the left: 12 / [1,2,3,4] = [12,6,4,3].
    let y = bin(Binary::Div, f(&[1], &[12.]), iota(&[2, 2], 1.0));
    assert_f32(&y, &[2, 2], &[12., 6., 4., 3.]);
    // Row: [[1,2,3],[4,5,6]] * [1,10,100].
    let y = bin(Binary::Mul, iota(&[2, 3], 1.0), f(&[3], &[1., 10., 100.]));
    assert_f32(&y, &[2, 3], &[1., 20., 300., 4., 50., 600.]);
    // Column: [[1,2,3],[4,5,6]] - [[1],[2]].
    let y = bin(Binary::Sub, iota(&[2, 3], 1.0), f(&[2, 1], &[1., 2.]));
    assert_f32(&y, &[2, 3], &[0., 1., 2., 2., 3., 4.]);
}

#[test]
fn broadcast_three_way() {
    // a[2,1,3] + b[4,1] -> [2,4,3]: out[i][j][k] = a[i][k] + 10j with
    // a = [[1,2,3]],[[4,5,6]] and b = [0,10,20,30].
    let a = iota(&[2, 1, 3], 1.0);
    let b = f(&[4, 1], &[0., 10., 20., 30.]);
    let y = bin(Binary::Add, a, b);
    #[rustfmt::skip]
    let expected = [
        1., 2., 3., 11., 12., 13., 21., 22., 23., 31., 32., 33.,
        4., 5., 6., 14., 15., 16., 24., 25., 26., 34., 35., 36.,
    ];
    assert_f32(&y, &[2, 4, 3], &expected);
}

#[test]
fn max_min_pow() {
    let (a, b) = (f(&[2], &[1., 5.]), f(&[2], &[3., 2.]));
    assert_f32(&bin(Binary::Max, a.clone(), b.clone()), &[2], &[3., 5.]);
    assert_f32(&bin(Binary::Min, a, b), &[2], &[1., 2.]);
    // 2^3 = 8, 3^2 = 9, 4^0.5 = 2.
    let y = bin(Binary::Pow, f(&[3], &[2., 3., 4.]), f(&[3], &[3., 2., 0.5]));
    assert_f32(&y, &[3], &[8., 9., 2.]);
}

#[test]
fn chained_ops_reuse_owned_buffers_correctly() {
    // r = relu(x + 1) * y, with r's first operand an owned intermediate of
    // the result shape (updated in place) and then one that must broadcast.
    // x = [-3, 0, 2], y = [[1],[2]]: relu([-2, 1, 3]) = [0, 1, 3];
    // times column [1, 2] -> [[0,1,3],[0,2,6]]; plus itself -> doubled.
    let mut g = Graph::new("chain");
    let x = g.add_input("x", TensorType::f32(vec![3])).unwrap();
    let y = g.add_input("y", TensorType::f32(vec![2, 1])).unwrap();
    let one = g.add_constant("one", f(&[], &[1.])).unwrap();
    let s = g.add(Op::Binary(Binary::Add), &[x, one], "s").unwrap();
    let r = g.add(Op::Unary(Unary::Relu), &[s], "r").unwrap();
    let m = g.add(Op::Binary(Binary::Mul), &[r, y], "m").unwrap();
    let d = g.add(Op::Binary(Binary::Add), &[m, m], "d").unwrap();
    g.set_outputs(vec![d, r]);
    let out = run(
        &g,
        &[
            ("x".into(), f(&[3], &[-3., 0., 2.])),
            ("y".into(), f(&[2, 1], &[1., 2.])),
        ],
    )
    .unwrap();
    assert_f32(&out[0], &[2, 3], &[0., 2., 6., 0., 4., 12.]);
    // r is also an output, so it must survive its use by m unchanged.
    assert_f32(&out[1], &[3], &[0., 1., 3.]);
}

#[test]
fn i64_arithmetic() {
    // Integer Div truncates toward zero like C: 7/2 = 3, -7/2 = -3,
    // 7/-2 = -3, -7/-2 = 3.
    let y = bin(
        Binary::Div,
        i(&[4], &[7, -7, 7, -7]),
        i(&[4], &[2, 2, -2, -2]),
    );
    assert_i64(&y, &[4], &[3, -3, -3, 3]);
    // Broadcast column + row: [[10],[20]] + [1,2,3].
    let y = bin(Binary::Add, i(&[2, 1], &[10, 20]), i(&[3], &[1, 2, 3]));
    assert_i64(&y, &[2, 3], &[11, 12, 13, 21, 22, 23]);
    let y = bin(Binary::Sub, i(&[2], &[5, 1]), i(&[], &[3]));
    assert_i64(&y, &[2], &[2, -2]);
    let y = bin(Binary::Mul, i(&[2], &[5, -1]), i(&[2], &[-3, 4]));
    assert_i64(&y, &[2], &[-15, -4]);
    let y = bin(Binary::Max, i(&[2], &[5, -1]), i(&[2], &[-3, 4]));
    assert_i64(&y, &[2], &[5, 4]);
    let y = bin(Binary::Min, i(&[2], &[5, -1]), i(&[2], &[-3, 4]));
    assert_i64(&y, &[2], &[-3, -1]);
    let x = i(&[3], &[-2, 0, 3]);
    assert_i64(
        &eval(Op::Unary(Unary::Relu), std::slice::from_ref(&x)),
        &[3],
        &[0, 0, 3],
    );
    assert_i64(
        &eval(Op::Unary(Unary::Neg), std::slice::from_ref(&x)),
        &[3],
        &[2, 0, -3],
    );
    assert_i64(&eval(Op::Unary(Unary::Abs), &[x]), &[3], &[2, 0, 3]);
}

#[test]
fn activations() {
    let x = f(&[5], &[-4., -1., 0., 1., 3.]);
    let un = |u: Unary| eval(Op::Unary(u), std::slice::from_ref(&x));
    assert_f32(&un(Unary::Relu), &[5], &[0., 0., 0., 1., 3.]);
    // LeakyRelu 0.1: negatives scaled by 0.1.
    assert_f32(
        &un(Unary::LeakyRelu { alpha: 0.1 }),
        &[5],
        &[-0.4, -0.1, 0., 1., 3.],
    );
    // Clip to [0, 2].
    assert_f32(
        &un(Unary::Clip { min: 0., max: 2. }),
        &[5],
        &[0., 0., 0., 1., 2.],
    );
    // HardSigmoid(0.2, 0.5): clamp(0.2x + 0.5, 0, 1) = [0, 0.3, 0.5, 0.7, 1].
    let hs = un(Unary::HardSigmoid {
        alpha: 0.2,
        beta: 0.5,
    });
    assert_f32(&hs, &[5], &[0., 0.3, 0.5, 0.7, 1.]);
    // HardSwish: x * clamp(x/6 + 0.5, 0, 1): -4 -> 0, -1 -> -1/3,
    // 0 -> 0, 1 -> 2/3, 3 -> 3.
    assert_f32(
        &un(Unary::HardSwish),
        &[5],
        &[0., -1. / 3., 0., 2. / 3., 3.],
    );
    // Elu(1): e^x - 1 for negatives: e^-4 - 1 = -0.98168436, e^-1 - 1 = -0.63212056.
    assert_f32(
        &un(Unary::Elu { alpha: 1. }),
        &[5],
        &[-0.981_684_4, -0.632_120_6, 0., 1., 3.],
    );
    // Neg, Abs.
    assert_f32(&un(Unary::Neg), &[5], &[4., 1., 0., -1., -3.]);
    assert_f32(&un(Unary::Abs), &[5], &[4., 1., 0., 1., 3.]);
}

#[test]
fn transcendental_unaries() {
    // e^-100 = 3.720076e-44, a subnormal f32 (spelled via f64 for precision).
    const TINY: f32 = 3.720_075_976_020_836e-44_f64 as f32;
    let un = |u: Unary, v: &[f32]| eval(Op::Unary(u), &[f(&[v.len()], v)]);
    // Sigmoid(0) = 0.5; sigmoid(2) = 1/(1+e^-2) = 0.880797; far tails stay
    // finite: sigmoid(-100) = e^-100 ~ 3.72e-44, sigmoid(100) = 1.
    let s = un(Unary::Sigmoid, &[0., 2., -100., 100.]);
    assert_f32(&s, &[4], &[0.5, 0.880_797, TINY, 1.]);
    // Softplus: ln(1+e^x): 0 -> ln 2; 100 -> 100 (no overflow);
    // -100 -> e^-100.
    let s = un(Unary::Softplus, &[0., 100., -100.]);
    assert_f32(&s, &[3], &[std::f32::consts::LN_2, 100., TINY]);
    // Erf table values: erf(0.5) = 0.5204999, erf(-1) = -0.8427008,
    // erf(3) = 0.99997791.
    let e = un(Unary::Erf, &[0., 0.5, -1., 3.]);
    assert_f32(&e, &[4], &[0., 0.520_499_9, -0.842_700_8, 0.999_977_9]);
    // Exact Gelu: 0.5x(1+erf(x/sqrt2)) = x * Phi(x): Phi(1) = 0.8413447,
    // so gelu(1) = 0.8413447, gelu(-1) = -(1 - 0.8413447) = -0.1586553;
    // gelu(-6) = -6 * Phi(-6) = -6 * 9.8658765e-10 = -5.9195259e-9.
    let g = un(Unary::Gelu { tanh_approx: false }, &[0., 1., -1., -6.]);
    assert_f32(&g, &[4], &[0., 0.841_344_7, -0.158_655_3, -5.919_526e-9]);
    // The far tail must be relatively accurate, not just tiny (no 1 + erf
    // cancellation).
    let tail = g.as_f32().unwrap()[[3]];
    assert!(
        (tail / -5.919_526e-9 - 1.0).abs() < 1e-5,
        "gelu(-6) = {tail}"
    );
    // Tanh-approximate Gelu at 1: 0.5(1 + tanh(sqrt(2/pi)(1 + 0.044715)))
    // = 0.5(1 + tanh(0.8335672)) = 0.8411920.
    let g = un(Unary::Gelu { tanh_approx: true }, &[0., 1.]);
    assert_f32(&g, &[2], &[0., 0.841_192]);
    let g = un(Unary::Sqrt, &[4., 2.]);
    assert_f32(&g, &[2], &[2., std::f32::consts::SQRT_2]);
    let g = un(Unary::Exp, &[0., 1.]);
    assert_f32(&g, &[2], &[1., std::f32::consts::E]);
    let g = un(Unary::Log, &[1., std::f32::consts::E]);
    assert_f32(&g, &[2], &[0., 1.]);
    let g = un(Unary::Reciprocal, &[4., -0.5]);
    assert_f32(&g, &[2], &[0.25, -2.]);
    let g = un(Unary::Tanh, &[0., 1.]);
    assert_f32(&g, &[2], &[0., 0.761_594_2]);
}
