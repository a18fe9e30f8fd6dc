//! Hand-checked data movement ops, including i64 and bool data.

mod common;
use common::*;
use dnnc_ir::op::PadMode;
use dnnc_ir::Op;

fn slice(starts: &[i64], ends: &[i64], axes: &[i64], steps: &[i64]) -> Op {
    Op::Slice {
        starts: starts.to_vec(),
        ends: ends.to_vec(),
        axes: axes.to_vec(),
        steps: steps.to_vec(),
    }
}

fn pad(pads: &[i64], mode: PadMode, value: f32) -> Op {
    Op::Pad {
        pads: pads.to_vec(),
        mode,
        value,
    }
}

#[test]
fn slice_negative_steps_and_clamping() {
    let x = iota(&[5], 0.0); // [0,1,2,3,4]
                             // Full reverse: start -1 (= 4), end "minus infinity".
    let y = eval(
        slice(&[-1], &[i64::MIN], &[0], &[-1]),
        std::slice::from_ref(&x),
    );
    assert_f32(&y, &[5], &[4., 3., 2., 1., 0.]);
    // 4 down to (excluding) 0 by 2: [4, 2].
    let y = eval(slice(&[4], &[0], &[0], &[-2]), std::slice::from_ref(&x));
    assert_f32(&y, &[2], &[4., 2.]);
    // End beyond the axis clamps: [1, 100) -> [1,2,3,4].
    let y = eval(slice(&[1], &[100], &[0], &[1]), std::slice::from_ref(&x));
    assert_f32(&y, &[4], &[1., 2., 3., 4.]);
    // Empty when start >= end with a positive step.
    let y = eval(slice(&[3], &[1], &[0], &[1]), &[x]);
    assert_f32(&y, &[0], &[]);
    // 2-D, axes out of order: x[r][c] = 4r + c on 3x4. Rows 0..10 by 2 ->
    // rows 0, 2; columns from -1 (= 3) towards -10 (clamped to before 0)
    // by -2 -> columns 3, 1. Result [[3,1],[11,9]].
    let x = iota(&[3, 4], 0.0);
    let y = eval(slice(&[-1, 0], &[-10, 10], &[1, 0], &[-2, 2]), &[x]);
    assert_f32(&y, &[2, 2], &[3., 1., 11., 9.]);
    // i64 data slices the same way.
    let y = eval(
        slice(&[-1], &[i64::MIN], &[0], &[-2]),
        &[i(&[3], &[7, 8, 9])],
    );
    assert_i64(&y, &[2], &[9, 7]);
}

#[test]
fn pad_modes() {
    let x = f(&[3], &[1., 2., 3.]);
    // 2 before, 1 after.
    // reflect mirrors without repeating the edge: 3 2 | 1 2 3 | 2
    let y = eval(pad(&[2, 1], PadMode::Reflect, 0.), std::slice::from_ref(&x));
    assert_f32(&y, &[6], &[3., 2., 1., 2., 3., 2.]);
    // edge repeats it: 1 1 | 1 2 3 | 3
    let y = eval(pad(&[2, 1], PadMode::Edge, 0.), std::slice::from_ref(&x));
    assert_f32(&y, &[6], &[1., 1., 1., 2., 3., 3.]);
    // constant 9: 9 9 | 1 2 3 | 9
    let y = eval(
        pad(&[2, 1], PadMode::Constant, 9.),
        std::slice::from_ref(&x),
    );
    assert_f32(&y, &[6], &[9., 9., 1., 2., 3., 9.]);
    // A negative pad crops: drop 1 at the front, add one 0 at the back.
    let y = eval(pad(&[-1, 1], PadMode::Constant, 0.), &[x]);
    assert_f32(&y, &[3], &[2., 3., 0.]);
    // 2-D reflect, pads [axis0 begin 1, axis1 begin 1, axis0 end 0,
    // axis1 end 1] on [[1,2,3],[4,5,6]]: rows (1, 0, 1), columns
    // (1, 0, 1, 2, 1).
    let x = iota(&[2, 3], 1.0);
    let y = eval(pad(&[1, 1, 0, 1], PadMode::Reflect, 0.), &[x]);
    #[rustfmt::skip]
    let expected = [
        5., 4., 5., 6., 5.,
        2., 1., 2., 3., 2.,
        5., 4., 5., 6., 5.,
    ];
    assert_f32(&y, &[3, 5], &expected);
    // i64 constant padding uses the value converted to i64.
    let y = eval(pad(&[1, 0], PadMode::Constant, 7.), &[i(&[2], &[1, 2])]);
    assert_i64(&y, &[3], &[7, 1, 2]);
}

#[test]
fn gather_negative_indices() {
    // x = [[1,2],[3,4],[5,6]]; rows -1 (= 2) and 0.
    let x = iota(&[3, 2], 1.0);
    let y = eval(Op::Gather { axis: 0 }, &[x.clone(), i(&[2], &[-1, 0])]);
    assert_f32(&y, &[2, 2], &[5., 6., 1., 2.]);
    // Axis 1 with [2,1] indices [[1],[-2]] -> out[r][k][0] = x[r][idx[k]]:
    // [[2],[1]], [[4],[3]], [[6],[5]].
    let y = eval(Op::Gather { axis: 1 }, &[x.clone(), i(&[2, 1], &[1, -2])]);
    assert_f32(&y, &[3, 2, 1], &[2., 1., 4., 3., 6., 5.]);
    // A scalar index drops the axis: row 1 = [3, 4].
    let y = eval(Op::Gather { axis: 0 }, &[x, i(&[], &[1])]);
    assert_f32(&y, &[2], &[3., 4.]);
    // Embedding-style i64 table.
    let y = eval(
        Op::Gather { axis: 0 },
        &[i(&[3], &[10, 20, 30]), i(&[2], &[2, -3])],
    );
    assert_i64(&y, &[2], &[30, 10]);
}

#[test]
fn reshape_zero_and_minus_one() {
    let x = iota(&[2, 3, 4], 0.0);
    let data: Vec<f32> = (0..24).map(|v| v as f32).collect();
    // 0 copies dim 0, -1 infers 12.
    let y = eval(Op::Reshape { shape: vec![0, -1] }, std::slice::from_ref(&x));
    assert_f32(&y, &[2, 12], &data);
    // -1 infers 2, 0 at position 2 copies the input's dim 2 (4).
    let y = eval(
        Op::Reshape {
            shape: vec![-1, 3, 0],
        },
        std::slice::from_ref(&x),
    );
    assert_f32(&y, &[2, 3, 4], &data);
    let y = eval(Op::Flatten { axis: 2 }, std::slice::from_ref(&x));
    assert_f32(&y, &[6, 4], &data);
    let y = eval(Op::Flatten { axis: 0 }, &[x]);
    assert_f32(&y, &[1, 24], &data);
}

#[test]
fn reshape_after_transpose_uses_logical_order() {
    // transpose([[1,2,3],[4,5,6]]) = [[1,4],[2,5],[3,6]]; flattening it
    // reads row-major: [1,4,2,5,3,6].
    let mut g = dnnc_ir::Graph::new("t");
    let x = g
        .add_input("x", dnnc_ir::TensorType::f32(vec![2, 3]))
        .unwrap();
    let t = g
        .add(Op::Transpose { perm: vec![1, 0] }, &[x], "t")
        .unwrap();
    let r = g.add(Op::Reshape { shape: vec![-1] }, &[t], "r").unwrap();
    g.set_outputs(vec![r, t]);
    let out = dnnc_runtime::run(&g, &[("x".into(), iota(&[2, 3], 1.0))]).unwrap();
    assert_f32(&out[0], &[6], &[1., 4., 2., 5., 3., 6.]);
    assert_f32(&out[1], &[3, 2], &[1., 4., 2., 5., 3., 6.]);
}

#[test]
fn transpose_3d() {
    // x[a][0][c] = 3a + c with shape [2,1,3]; perm [2,0,1] gives
    // y[c][a][0] = x[a][0][c] -> shape [3,2,1]: [0,3, 1,4, 2,5].
    let x = iota(&[2, 1, 3], 0.0);
    let y = eval(
        Op::Transpose {
            perm: vec![2, 0, 1],
        },
        &[x],
    );
    assert_f32(&y, &[3, 2, 1], &[0., 3., 1., 4., 2., 5.]);
}

#[test]
fn concat_split_any_dtype() {
    // Axis 1 of [[1],[2]] and [[3,4],[5,6]] -> [[1,3,4],[2,5,6]].
    let y = eval(
        Op::Concat { axis: 1 },
        &[f(&[2, 1], &[1., 2.]), iota(&[2, 2], 3.0)],
    );
    assert_f32(&y, &[2, 3], &[1., 3., 4., 2., 5., 6.]);
    let y = eval(Op::Concat { axis: -1 }, &[i(&[1], &[1]), i(&[2], &[2, 3])]);
    assert_i64(&y, &[3], &[1, 2, 3]);
    let y = eval(
        Op::Concat { axis: 0 },
        &[b(&[1], &[true]), b(&[1], &[false])],
    );
    assert_eq!(y, b(&[2], &[true, false]));
    // Split [[0..4],[4..8]] on axis 1 into sizes 1 and 3.
    let out = try_eval(
        Op::Split {
            axis: 1,
            split: vec![1, 3],
        },
        &[iota(&[2, 4], 0.0)],
    )
    .unwrap();
    assert_f32(&out[0], &[2, 1], &[0., 4.]);
    assert_f32(&out[1], &[2, 3], &[1., 2., 3., 5., 6., 7.]);
}

#[test]
fn squeeze_unsqueeze_expand_identity() {
    let x = iota(&[1, 3, 1], 0.0);
    let y = eval(Op::Squeeze { axes: vec![] }, std::slice::from_ref(&x));
    assert_f32(&y, &[3], &[0., 1., 2.]);
    let y = eval(Op::Squeeze { axes: vec![-1] }, std::slice::from_ref(&x));
    assert_f32(&y, &[1, 3], &[0., 1., 2.]);
    // Unsqueeze positions refer to the output: [3] -> [1,3,1].
    let y = eval(
        Op::Unsqueeze { axes: vec![0, -1] },
        &[f(&[3], &[0., 1., 2.])],
    );
    assert_f32(&y, &[1, 3, 1], &[0., 1., 2.]);
    // Expand the [3,1] column [1,2,3] by [2,1,2]: numpy rules give shape
    // [2,3,2] with out[k][r][c] = x[r].
    let y = eval(
        Op::Expand {
            shape: vec![2, 1, 2],
        },
        &[iota(&[3, 1], 1.0)],
    );
    assert_f32(
        &y,
        &[2, 3, 2],
        &[1., 1., 2., 2., 3., 3., 1., 1., 2., 2., 3., 3.],
    );
    // Expand to a smaller rank keeps the input's larger dims: [2,2] by [2].
    let y = eval(Op::Expand { shape: vec![2] }, &[iota(&[2, 1], 1.0)]);
    assert_f32(&y, &[2, 2], &[1., 1., 2., 2.]);
    let y = eval(Op::Expand { shape: vec![2, 2] }, &[b(&[1], &[true])]);
    assert_eq!(y, b(&[2, 2], &[true; 4]));
    let y = eval(Op::Identity, std::slice::from_ref(&x));
    assert_eq!(y, x);
    let y = eval(Op::Dropout { ratio: 0.5 }, &[i(&[2], &[1, 2])]);
    assert_i64(&y, &[2], &[1, 2]);
}
