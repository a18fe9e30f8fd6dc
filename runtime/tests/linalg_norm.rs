//! Hand-checked Gemm, MatMul, batch norm, LRN, softmax and reductions.

mod common;
use common::*;
use dnnc_ir::op::{Gemm, Lrn, ReduceKind};
use dnnc_ir::Op;

fn gemm(alpha: f32, beta: f32, trans_a: bool, trans_b: bool) -> Op {
    Op::Gemm(Gemm {
        alpha,
        beta,
        trans_a,
        trans_b,
    })
}

#[test]
fn gemm_transposes_and_c_broadcasting() {
    // A = [[1,2,3],[4,5,6]], B = [[1,0],[0,1],[1,1]]:
    // A@B = [[1+3, 2+3], [4+6, 5+6]] = [[4,5],[10,11]].
    let a = iota(&[2, 3], 1.0);
    let b = f(&[3, 2], &[1., 0., 0., 1., 1., 1.]);
    let at = f(&[3, 2], &[1., 4., 2., 5., 3., 6.]); // A^T
    let bt = f(&[2, 3], &[1., 0., 1., 0., 1., 1.]); // B^T
    let ab = [4., 5., 10., 11.];
    assert_f32(
        &eval(gemm(1., 1., false, false), &[a.clone(), b.clone()]),
        &[2, 2],
        &ab,
    );
    assert_f32(
        &eval(gemm(1., 1., true, false), &[at.clone(), b.clone()]),
        &[2, 2],
        &ab,
    );
    assert_f32(
        &eval(gemm(1., 1., false, true), &[a.clone(), bt.clone()]),
        &[2, 2],
        &ab,
    );
    assert_f32(&eval(gemm(1., 1., true, true), &[at, bt]), &[2, 2], &ab);
    // alpha 2, beta 0.5, C a row [10, 20]: 2*AB + [5, 10] per row.
    let y = eval(
        gemm(2., 0.5, false, false),
        &[a.clone(), b.clone(), f(&[2], &[10., 20.])],
    );
    assert_f32(&y, &[2, 2], &[13., 20., 25., 32.]);
    // C a column [[10],[20]]: 2*AB + [[5],[10]].
    let y = eval(
        gemm(2., 0.5, false, false),
        &[a.clone(), b.clone(), f(&[2, 1], &[10., 20.])],
    );
    assert_f32(&y, &[2, 2], &[13., 15., 30., 32.]);
    // C a scalar 4: 2*AB + 2.
    let y = eval(
        gemm(2., 0.5, false, false),
        &[a.clone(), b.clone(), f(&[], &[4.])],
    );
    assert_f32(&y, &[2, 2], &[10., 12., 22., 24.]);
    // C full [2,2] = [1,2,3,4], beta 1: AB + C.
    let y = eval(gemm(1., 1., false, false), &[a, b, iota(&[2, 2], 1.0)]);
    assert_f32(&y, &[2, 2], &[5., 7., 13., 15.]);
}

#[test]
fn matmul_batched_and_promoted() {
    // a0 = [[1,2],[3,4]], a1 = [[0,1],[1,0]], b = [[1,1],[0,1]] (broadcast):
    // a0@b = [[1,3],[3,7]], a1@b = [[0,1],[1,1]].
    let a = f(&[2, 2, 2], &[1., 2., 3., 4., 0., 1., 1., 0.]);
    let b = f(&[2, 2], &[1., 1., 0., 1.]);
    let y = eval(Op::MatMul, &[a, b.clone()]);
    assert_f32(&y, &[2, 2, 2], &[1., 3., 3., 7., 0., 1., 1., 1.]);
    // 1-D on the left: [1,2] @ b = [1, 3]; on the right: b @ [1,2] = [3, 2];
    // both: [1,2].[1,2] = 5 (a scalar).
    let v = f(&[2], &[1., 2.]);
    assert_f32(&eval(Op::MatMul, &[v.clone(), b.clone()]), &[2], &[1., 3.]);
    assert_f32(&eval(Op::MatMul, &[b, v.clone()]), &[2], &[3., 2.]);
    assert_f32(&eval(Op::MatMul, &[v.clone(), v]), &[], &[5.]);
    // Batch axes broadcast both ways: a[2,1,1,2] rows a0 = [1,2], a1 = [3,4];
    // b[3,2,1] columns b0 = [1,0], b1 = [0,1], b2 = [1,1] -> out[2,3,1,1]
    // with out[i][j] = a_i . b_j = [[1,2,3],[3,4,7]].
    let a = f(&[2, 1, 1, 2], &[1., 2., 3., 4.]);
    let b = f(&[3, 2, 1], &[1., 0., 0., 1., 1., 1.]);
    let y = eval(Op::MatMul, &[a, b]);
    assert_f32(&y, &[2, 3, 1, 1], &[1., 2., 3., 3., 4., 7.]);
}

#[test]
fn batch_norm_inference() {
    // Channel 0: scale 3, bias 1, mean 1, var 4: (x-1)/2*3 + 1 -> x=1: 1,
    // x=2: 2.5. Channel 1: scale 0.5, bias -1, mean 3, var 0.25:
    // (x-3)/0.5*0.5 - 1 = x - 4 -> x=3: -1, x=4: 0. eps = 0.
    let x = f(&[1, 2, 1, 2], &[1., 2., 3., 4.]);
    let ins = [
        x,
        f(&[2], &[3., 0.5]),
        f(&[2], &[1., -1.]),
        f(&[2], &[1., 3.]),
        f(&[2], &[4., 0.25]),
    ];
    let y = eval(Op::BatchNormalization { epsilon: 0.0 }, &ins);
    assert_f32(&y, &[1, 2, 1, 2], &[1., 2.5, -1., 0.]);
    // epsilon is added to the variance: var 3 + eps 1 = 4 -> std 2:
    // (x - 0)/2 for x = [2, 4] -> [1, 2].
    let ins = [
        f(&[1, 1, 2], &[2., 4.]),
        f(&[1], &[1.]),
        f(&[1], &[0.]),
        f(&[1], &[0.]),
        f(&[1], &[3.]),
    ];
    let y = eval(Op::BatchNormalization { epsilon: 1.0 }, &ins);
    assert_f32(&y, &[1, 1, 2], &[1., 2.]);
}

#[test]
fn lrn_across_channels() {
    // x = [1,2,3] over 3 channels, size 3 (one neighbour each side),
    // alpha 3 (alpha/size = 1), beta 1, bias 1:
    //   c0: 1 / (1 + 1 + 4) = 1/6; c1: 2 / (1 + 14) = 2/15; c2: 3 / (1 + 13).
    let x = f(&[1, 3, 1, 1], &[1., 2., 3.]);
    let op = Op::Lrn(Lrn {
        size: 3,
        alpha: 3.0,
        beta: 1.0,
        bias: 1.0,
    });
    assert_f32(
        &eval(op, std::slice::from_ref(&x)),
        &[1, 3, 1, 1],
        &[1. / 6., 2. / 15., 3. / 14.],
    );
    // Even size 2 sums channels c ..= c+1 (floor((2-1)/2) = 0 before,
    // ceil((2-1)/2) = 1 after): squares 1+4, 4+9, 9. alpha 2 (alpha/size 1),
    // beta 0.5, bias 1: [1/sqrt 6, 2/sqrt 14, 3/sqrt 10].
    let op = Op::Lrn(Lrn {
        size: 2,
        alpha: 2.0,
        beta: 0.5,
        bias: 1.0,
    });
    let y = eval(op, &[x]);
    assert_f32(
        &y,
        &[1, 3, 1, 1],
        &[1. / 6f32.sqrt(), 2. / 14f32.sqrt(), 3. / 10f32.sqrt()],
    );
}

#[test]
fn softmax_is_stable() {
    // [1000,1001,1002] would overflow exp; shifted by the max it is
    // [e^-2, e^-1, 1] / (e^-2 + e^-1 + 1) with sum 1.5032147:
    // [0.0900306, 0.2447285, 0.6652410]; log-softmax subtracts
    // ln(1.5032147) = 0.4076060 from [-2, -1, 0].
    let x = f(&[1, 3], &[1000., 1001., 1002.]);
    let y = eval(Op::Softmax { axis: -1 }, std::slice::from_ref(&x));
    assert_f32(&y, &[1, 3], &[0.090_030_6, 0.244_728_5, 0.665_241]);
    let y = eval(Op::LogSoftmax { axis: 1 }, &[x]);
    assert_f32(&y, &[1, 3], &[-2.407_606, -1.407_606, -0.407_606]);
    // A hugely negative entry gets probability 0, not NaN; the others split
    // evenly. Log-softmax keeps it finite: -3e38 - ln 2 rounds to -3e38.
    let x = f(&[3], &[-3.0e38, 0., 0.]);
    let y = eval(Op::Softmax { axis: 0 }, std::slice::from_ref(&x));
    assert_f32(&y, &[3], &[0., 0.5, 0.5]);
    let y = eval(Op::LogSoftmax { axis: 0 }, &[x]);
    assert_f32(
        &y,
        &[3],
        &[-3.0e38, -std::f32::consts::LN_2, -std::f32::consts::LN_2],
    );
    // Axis 0 of [[1,2],[1,4]]: column 0 is even, column 1 is
    // [e^-2, 1] / (1 + e^-2) = [0.1192029, 0.8807971].
    let x = f(&[2, 2], &[1., 2., 1., 4.]);
    let y = eval(Op::Softmax { axis: 0 }, &[x]);
    assert_f32(&y, &[2, 2], &[0.5, 0.119_202_9, 0.5, 0.880_797_1]);
}

#[test]
fn reductions() {
    // x = [[1,2,3],[4,5,6]].
    let x = iota(&[2, 3], 1.0);
    let red = |kind, axes: &[i64], keepdims| {
        eval(
            Op::Reduce {
                kind,
                axes: axes.to_vec(),
                keepdims,
            },
            std::slice::from_ref(&x),
        )
    };
    assert_f32(&red(ReduceKind::Sum, &[1], true), &[2, 1], &[6., 15.]);
    assert_f32(&red(ReduceKind::Sum, &[1], false), &[2], &[6., 15.]);
    // Empty axes = all: mean 21/6 = 3.5, as a scalar or [1,1].
    assert_f32(&red(ReduceKind::Mean, &[], false), &[], &[3.5]);
    assert_f32(&red(ReduceKind::Mean, &[], true), &[1, 1], &[3.5]);
    assert_f32(&red(ReduceKind::Max, &[-2], false), &[3], &[4., 5., 6.]);
    assert_f32(
        &red(ReduceKind::Mean, &[0], true),
        &[1, 3],
        &[2.5, 3.5, 4.5],
    );
    assert_f32(&red(ReduceKind::Max, &[0, 1], false), &[], &[6.]);
}
