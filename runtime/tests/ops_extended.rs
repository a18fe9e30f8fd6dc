//! Hand-checked values for the extended op set: elementwise additions,
//! comparisons and logic, Cast, Shape/ConstantOfShape/Range/Tile, the
//! normalisations, ConvTranspose2d, Einsum (against explicit loops),
//! Resize in every coordinate mode, and RNN/GRU/LSTM against scalar
//! recurrences written out in the test.

mod common;
use common::*;
use dnnc_ir::attr::{AttrReader, AttrValue};
use dnnc_ir::op::{
    CellKind, Compare, ConvTranspose2d, CoordMode, Logical, NearestMode, RangeParams, Recurrent,
    Resize, ResizeMode, RnnActivation, RnnDirection, Scalar, Unary,
};
use dnnc_ir::{DType, Op, Tensor};

fn bools(t: &Tensor) -> Vec<bool> {
    t.as_bool()
        .unwrap_or_else(|| panic!("expected bool, got {}", t.ty()))
        .iter()
        .copied()
        .collect()
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.as_f32()
        .unwrap_or_else(|| panic!("expected f32, got {}", t.ty()))
        .iter()
        .copied()
        .collect()
}

fn build(name: &str, attrs: &[(&str, AttrValue)]) -> Result<Op, String> {
    let r = AttrReader::new(attrs.iter().map(|(k, v)| (k.to_string(), v.clone())));
    match Op::from_attrs(name, r) {
        Ok(Some(op)) => Ok(op),
        Ok(None) => Err(format!("unknown op {name}")),
        Err(e) => Err(e.to_string()),
    }
}

// ----- elementwise ----------------------------------------------------------

#[test]
fn sign_floor_ceil_round_sin_cos() {
    let un = |u: Unary, x: &[f32]| eval(Op::Unary(u), &[f(&[x.len()], x)]);
    let y = un(Unary::Sign, &[-2.5, 0.0, 3.0, f32::NAN]);
    assert_f32(&y, &[4], &[-1., 0., 1., f32::NAN]);
    assert_i64(
        &eval(Op::Unary(Unary::Sign), &[i(&[3], &[-5, 0, 7])]),
        &[3],
        &[-1, 0, 1],
    );
    assert_f32(&un(Unary::Floor, &[-1.5, 1.5, 2.0]), &[3], &[-2., 1., 2.]);
    assert_f32(&un(Unary::Ceil, &[-1.5, 1.5, 2.0]), &[3], &[-1., 2., 2.]);
    // Ties go to the even neighbour.
    let y = un(Unary::Round, &[0.5, 1.5, 2.5, -0.5, -1.5, 2.4, 2.6]);
    assert_f32(&y, &[7], &[0., 2., 2., -0., -2., 2., 3.]);
    let hp = std::f32::consts::FRAC_PI_2;
    assert_f32(&un(Unary::Sin, &[0.0, hp]), &[2], &[0., 1.]);
    assert_f32_tol(&un(Unary::Cos, &[0.0, hp]), &[2], &[1., 0.], 1e-6);
}

#[test]
fn selu_defaults_and_prelu_broadcast() {
    let op = build("Selu", &[]).unwrap();
    // gamma * x for x > 0; gamma * alpha * (e^x - 1) otherwise.
    let (a, g) = (1.673_263_2_f64, 1.050_701_f64);
    let y = eval(op, &[f(&[3], &[1.0, 0.0, -1.0])]);
    let e = [g as f32, 0.0, (g * a * ((-1f64).exp() - 1.0)) as f32];
    assert_f32(&y, &[3], &e);
    let y = eval(
        Op::Unary(Unary::Selu {
            alpha: 2.0,
            gamma: 3.0,
        }),
        &[f(&[2], &[2.0, -1.0])],
    );
    assert_f32(&y, &[2], &[6.0, 6.0 * ((-1f32).exp() - 1.0)]);
    // Slope per column: [[-1, 2, -3], [4, -5, 6]] with slope [0.1, 0.2, 0.3].
    let x = f(&[2, 3], &[-1., 2., -3., 4., -5., 6.]);
    let y = eval(Op::PRelu, &[x.clone(), f(&[3], &[0.1, 0.2, 0.3])]);
    assert_f32(&y, &[2, 3], &[-0.1, 2., -0.9, 4., -1.0, 6.]);
    // Scalar slope.
    let y = eval(Op::PRelu, &[x, f(&[], &[0.5])]);
    assert_f32(&y, &[2, 3], &[-0.5, 2., -1.5, 4., -2.5, 6.]);
}

// ----- comparisons, logic, where, cast --------------------------------------

#[test]
fn compare_broadcasts_to_bool() {
    // [[1,2,3],[4,5,6]] vs column [[2],[5]].
    let a = iota(&[2, 3], 1.0);
    let col = f(&[2, 1], &[2., 5.]);
    let eq = eval(Op::Compare(Compare::Equal), &[a.clone(), col.clone()]);
    assert_eq!(eq.ty().to_string(), "bool[2,3]");
    assert_eq!(bools(&eq), [false, true, false, false, true, false]);
    let lt = eval(Op::Compare(Compare::Less), &[a.clone(), col.clone()]);
    assert_eq!(bools(&lt), [true, false, false, true, false, false]);
    let gt = eval(Op::Compare(Compare::Greater), &[a, col]);
    assert_eq!(bools(&gt), [false, false, true, false, false, true]);
    // NaN is unequal to itself and unordered.
    let n = f(&[1], &[f32::NAN]);
    assert_eq!(
        bools(&eval(Op::Compare(Compare::Equal), &[n.clone(), n.clone()])),
        [false]
    );
    assert_eq!(
        bools(&eval(Op::Compare(Compare::Less), &[n, f(&[1], &[0.])])),
        [false]
    );
    // i64 with a scalar, and bool equality.
    let y = eval(
        Op::Compare(Compare::Greater),
        &[i(&[3], &[-1, 0, 1]), i(&[], &[0])],
    );
    assert_eq!(bools(&y), [false, false, true]);
    let y = eval(
        Op::Compare(Compare::Equal),
        &[b(&[2], &[true, false]), b(&[2, 1], &[true, false])],
    );
    assert_eq!(bools(&y), [true, false, false, true]);
}

#[test]
fn not_and_or_truth_tables() {
    let x = b(&[4], &[false, false, true, true]);
    let y = b(&[4], &[false, true, false, true]);
    assert_eq!(
        bools(&eval(Op::Logical(Logical::And), &[x.clone(), y.clone()])),
        [false, false, false, true]
    );
    assert_eq!(
        bools(&eval(Op::Logical(Logical::Or), &[x.clone(), y])),
        [false, true, true, true]
    );
    assert_eq!(bools(&eval(Op::Not, &[x])), [true, true, false, false]);
    // Broadcast: column [t, f] with row [t, f, t].
    let y = eval(
        Op::Logical(Logical::And),
        &[b(&[2, 1], &[true, false]), b(&[3], &[true, false, true])],
    );
    assert_eq!(bools(&y), [true, false, true, false, false, false]);
}

#[test]
fn where_broadcasts_all_three() {
    // cond [2,1], x [3], y scalar -> [2,3].
    let y = eval(
        Op::Where,
        &[
            b(&[2, 1], &[true, false]),
            f(&[3], &[1., 2., 3.]),
            f(&[], &[-1.]),
        ],
    );
    assert_f32(&y, &[2, 3], &[1., 2., 3., -1., -1., -1.]);
    // i64 branches, cond [3] against x [2,1].
    let y = eval(
        Op::Where,
        &[
            b(&[3], &[true, false, true]),
            i(&[2, 1], &[10, 20]),
            i(&[3], &[0, 1, 2]),
        ],
    );
    assert_i64(&y, &[2, 3], &[10, 1, 10, 20, 1, 20]);
    // bool branches.
    let y = eval(
        Op::Where,
        &[
            b(&[2], &[true, false]),
            b(&[2], &[false, false]),
            b(&[2], &[true, true]),
        ],
    );
    assert_eq!(bools(&y), [false, true]);
}

#[test]
fn cast_edge_cases() {
    let cast = |to: DType, t: Tensor| eval(Op::Cast { to }, &[t]);
    // Float to int truncates toward zero; out-of-range saturates, NaN is 0.
    let x = f(&[7], &[-1.7, 1.7, 2.5, -0.0, 1e20, -1e20, f32::NAN]);
    assert_i64(
        &cast(DType::I64, x.clone()),
        &[7],
        &[-1, 1, 2, 0, i64::MAX, i64::MIN, 0],
    );
    // Non-zero (NaN included) is true; -0 is false.
    assert_eq!(
        bools(&cast(DType::Bool, x)),
        [true, true, true, false, true, true, true]
    );
    let n = i(&[3], &[-3, 0, 1 << 40]);
    assert_f32(
        &cast(DType::F32, n.clone()),
        &[3],
        &[-3., 0., (1u64 << 40) as f32],
    );
    assert_eq!(bools(&cast(DType::Bool, n.clone())), [true, false, true]);
    let t = b(&[2], &[true, false]);
    assert_f32(&cast(DType::F32, t.clone()), &[2], &[1., 0.]);
    assert_i64(&cast(DType::I64, t), &[2], &[1, 0]);
    // Same-type cast is the identity.
    assert_i64(&cast(DType::I64, n), &[3], &[-3, 0, 1 << 40]);
    // `to` is validated.
    let e = build("Cast", &[("to", AttrValue::Word("f16".into()))]).unwrap_err();
    assert!(e.contains("f16"), "{e}");
}

// ----- generators -----------------------------------------------------------

#[test]
fn shape_with_start_and_end() {
    let x = f(&[2, 3, 4, 5], &[0.0; 120]);
    let shape = |start: i64, end: i64| eval(Op::Shape { start, end }, std::slice::from_ref(&x));
    assert_i64(&shape(0, i64::MAX), &[4], &[2, 3, 4, 5]);
    assert_i64(&shape(-1, i64::MAX), &[1], &[5]);
    assert_i64(&shape(1, -1), &[2], &[3, 4]);
    // Out-of-range values clamp; an empty range is an empty vector.
    assert_i64(&shape(-10, 2), &[2], &[2, 3]);
    assert_i64(&shape(10, i64::MAX), &[0], &[]);
    assert_i64(&shape(3, 1), &[0], &[]);
    assert_i64(
        &eval(Op::Shape { start: 0, end: 9 }, &[f(&[], &[1.])]),
        &[0],
        &[],
    );
}

#[test]
fn constant_of_shape_each_dtype() {
    let y = eval(
        Op::ConstantOfShape {
            shape: vec![2, 2],
            value: Scalar::F32(1.5),
        },
        &[],
    );
    assert_f32(&y, &[2, 2], &[1.5; 4]);
    let y = eval(
        Op::ConstantOfShape {
            shape: vec![3],
            value: Scalar::I64(-7),
        },
        &[],
    );
    assert_i64(&y, &[3], &[-7, -7, -7]);
    let y = eval(
        Op::ConstantOfShape {
            shape: vec![],
            value: Scalar::Bool(true),
        },
        &[],
    );
    assert_eq!(y.ty().to_string(), "bool[]");
    assert_eq!(bools(&y), [true]);
    // A zero dimension gives an empty tensor.
    let y = eval(
        Op::ConstantOfShape {
            shape: vec![0, 3],
            value: Scalar::I64(1),
        },
        &[],
    );
    assert_i64(&y, &[0, 3], &[]);
    // Defaults: f32 zero. An i64 value must be an integer.
    let op = build("ConstantOfShape", &[("shape", AttrValue::Ints(vec![2]))]).unwrap();
    assert_f32(&eval(op, &[]), &[2], &[0., 0.]);
    let e = build(
        "ConstantOfShape",
        &[
            ("dtype", AttrValue::Word("i64".into())),
            ("value", AttrValue::Float(0.5)),
        ],
    )
    .unwrap_err();
    assert!(e.contains("value"), "{e}");
}

#[test]
fn range_f32_and_i64() {
    let r = |p: RangeParams| eval(Op::Range(p), &[]);
    assert_i64(
        &r(RangeParams::I64 {
            start: 1,
            limit: 5,
            delta: 2,
        }),
        &[2],
        &[1, 3],
    );
    assert_i64(
        &r(RangeParams::I64 {
            start: 10,
            limit: 4,
            delta: -3,
        }),
        &[2],
        &[10, 7],
    );
    assert_i64(
        &r(RangeParams::I64 {
            start: 3,
            limit: 3,
            delta: 1,
        }),
        &[0],
        &[],
    );
    assert_i64(
        &r(RangeParams::I64 {
            start: 5,
            limit: 0,
            delta: 1,
        }),
        &[0],
        &[],
    );
    assert_f32(
        &r(RangeParams::F32 {
            start: 10.0,
            limit: 6.0,
            delta: -3.0,
        }),
        &[2],
        &[10., 7.],
    );
    assert_f32(
        &r(RangeParams::F32 {
            start: 0.0,
            limit: 1.0,
            delta: 0.25,
        }),
        &[4],
        &[0., 0.25, 0.5, 0.75],
    );
    // A zero step is rejected when the op is built.
    let e = build(
        "Range",
        &[
            ("limit", AttrValue::Int(3)),
            ("delta", AttrValue::Int(0)),
            ("dtype", AttrValue::Word("i64".into())),
        ],
    )
    .unwrap_err();
    assert!(e.contains("delta"), "{e}");
}

#[test]
fn tile_repeats_every_axis() {
    // [[1,2],[3,4]] tiled [2,3].
    let y = eval(
        Op::Tile {
            repeats: vec![2, 3],
        },
        &[iota(&[2, 2], 1.0)],
    );
    #[rustfmt::skip]
    let e = [
        1., 2., 1., 2., 1., 2.,
        3., 4., 3., 4., 3., 4.,
        1., 2., 1., 2., 1., 2.,
        3., 4., 3., 4., 3., 4.,
    ];
    assert_f32(&y, &[4, 6], &e);
    let y = eval(Op::Tile { repeats: vec![0] }, &[i(&[2], &[1, 2])]);
    assert_i64(&y, &[0], &[]);
    let y = eval(Op::Tile { repeats: vec![2] }, &[b(&[2], &[true, false])]);
    assert_eq!(bools(&y), [true, false, true, false]);
}

// ----- normalisations -------------------------------------------------------

#[test]
fn instance_norm_per_image_and_channel() {
    // Channel 0: [1, 3] (mean 2, var 1); channel 1: [5, 5] (constant).
    let x = f(&[1, 2, 1, 2], &[1., 3., 5., 5.]);
    let y = eval(
        Op::InstanceNormalization { epsilon: 0.0 },
        &[x, f(&[2], &[2., 1.]), f(&[2], &[1., -1.])],
    );
    // c0: [-1, 1] * 2 + 1 (c1 has variance 0, so with epsilon 0 it is
    // NaN; only c0 is checked here).
    let v = vals(&y);
    assert_eq!(&v[..2], &[-1., 3.]);
    // With epsilon 1: c1 = (5 - 5) / sqrt(0 + 1) * 1 - 1 = -1; c0 scaled by
    // 1 / sqrt(1 + 1).
    let x = f(&[2, 2, 2], &[1., 3., 5., 5., 0., 4., -1., 1.]);
    let y = eval(
        Op::InstanceNormalization { epsilon: 1.0 },
        &[x, f(&[2], &[2., 1.]), f(&[2], &[1., -1.])],
    );
    let s2 = 1.0 / 2f32.sqrt();
    let s5 = 1.0 / 5f32.sqrt(); // image 1 channel 0: [0, 4], var 4
    assert_f32(
        &y,
        &[2, 2, 2],
        &[
            1. - 2. * s2,
            1. + 2. * s2,
            -1.,
            -1.,
            1. - 4. * s5,
            1. + 4. * s5,
            -1. - s2,
            -1. + s2,
        ],
    );
}

#[test]
fn layer_norm_over_trailing_axes() {
    // Rows [1, 3] and [0, 4] normalised over the last axis (eps 0):
    // [-1, 1] each; scale [1, 2], bias [0, 1] -> [-1, 3].
    let x = f(&[2, 2], &[1., 3., 0., 4.]);
    let op = Op::LayerNormalization {
        axis: -1,
        epsilon: 0.0,
    };
    let y = eval(
        op.clone(),
        &[x.clone(), f(&[2], &[1., 2.]), f(&[2], &[0., 1.])],
    );
    assert_f32(&y, &[2, 2], &[-1., 3., -1., 3.]);
    // Without bias.
    let y = eval(op, &[x.clone(), f(&[2], &[1., 2.])]);
    assert_f32(&y, &[2, 2], &[-1., 2., -1., 2.]);
    // axis 0: all four values [1, 3, 0, 4] (mean 2, var 2.5), scalar scale.
    let y = eval(
        Op::LayerNormalization {
            axis: 0,
            epsilon: 0.0,
        },
        &[x, f(&[], &[1.])],
    );
    let s = 1.0 / 2.5f32.sqrt();
    assert_f32(&y, &[2, 2], &[-s, s, -2. * s, 2. * s]);
    // The default epsilon is 1e-5.
    let op = build("LayerNormalization", &[]).unwrap();
    assert_eq!(
        op,
        Op::LayerNormalization {
            axis: -1,
            epsilon: 1e-5
        }
    );
}

// ----- ConvTranspose2d -------------------------------------------------------

fn convt(c: ConvTranspose2d, ins: &[Tensor]) -> Tensor {
    eval(Op::ConvTranspose2d(c), ins)
}

#[test]
fn conv_transpose_hand_examples() {
    let x = f(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    // Stride 1, 2x2 ones: every output sums the inputs whose window covers it.
    let y = convt(
        ConvTranspose2d::default(),
        &[x.clone(), f(&[1, 1, 2, 2], &[1.; 4])],
    );
    assert_f32(&y, &[1, 1, 3, 3], &[1., 3., 2., 4., 10., 6., 3., 7., 4.]);
    // Stride 2, 2x2 ones: each input becomes a 2x2 block.
    let s2 = ConvTranspose2d {
        strides: [2, 2],
        ..Default::default()
    };
    let y = convt(s2, &[x.clone(), f(&[1, 1, 2, 2], &[1.; 4])]);
    #[rustfmt::skip]
    let e = [1., 1., 2., 2., 1., 1., 2., 2., 3., 3., 4., 4., 3., 3., 4., 4.];
    assert_f32(&y, &[1, 1, 4, 4], &e);
    // Stride 2, 3x3 ones: the full 5x5 output is
    //   1 1 3 2 2 / 1 1 3 2 2 / 4 4 10 6 6 / 3 3 7 4 4 / 3 3 7 4 4;
    // output_padding 1 makes it 6x6 (a zero row and column), pads 1 crop
    // one from each side: rows/cols 1..=4.
    let c = ConvTranspose2d {
        strides: [2, 2],
        pads: [1, 1, 1, 1],
        output_padding: [1, 1],
        ..Default::default()
    };
    let y = convt(c, &[x.clone(), f(&[1, 1, 3, 3], &[1.; 9])]);
    #[rustfmt::skip]
    let e = [1., 3., 2., 2., 4., 10., 6., 6., 3., 7., 4., 4., 3., 7., 4., 4.];
    assert_f32(&y, &[1, 1, 4, 4], &e);
    // Without the pads the output-padding column/row is zero (no bias).
    let c = ConvTranspose2d {
        strides: [2, 2],
        output_padding: [1, 0],
        ..Default::default()
    };
    let y = convt(c, &[x, f(&[1, 1, 3, 3], &[1.; 9])]);
    assert_eq!(y.shape(), &[1, 1, 6, 5]);
    assert_eq!(&vals(&y)[25..], &[0.; 5]);
    // Groups: channel 0 -> output 0 (w 2), channel 1 -> output 1 (w 3),
    // with bias [1, -1].
    let g = ConvTranspose2d {
        group: 2,
        ..Default::default()
    };
    let y = convt(
        g,
        &[
            f(&[1, 2, 1, 1], &[1., 10.]),
            f(&[2, 1, 1, 1], &[2., 3.]),
            f(&[2], &[1., -1.]),
        ],
    );
    assert_f32(&y, &[1, 2, 1, 1], &[3., 29.]);
}

/// Gather-form reference: `y[n][m][oy][ox] = sum x[n][c][iy][ix] *
/// w[c][m % mg][i][j]` over `oy + pt = iy*s + i*d` (and likewise x).
fn convt_reference(x: &Tensor, w: &Tensor, c: &ConvTranspose2d) -> (Vec<usize>, Vec<f32>) {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let (n, cin, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (mg, kh, kw) = (ws[1], ws[2], ws[3]);
    let (g, cg) = (c.group, cin / c.group);
    let m = mg * g;
    let out = |len: usize, k: usize, a: usize| {
        c.strides[a] * (len - 1) + c.output_padding[a] + (k - 1) * c.dilations[a] + 1
            - c.pads[a]
            - c.pads[a + 2]
    };
    let (ho, wo) = (out(h, kh, 0), out(wd, kw, 1));
    let (xv, wv) = (vals(x), vals(w));
    let mut y = vec![0.0f32; n * m * ho * wo];
    for ni in 0..n {
        for mo in 0..m {
            let gi = mo / mg;
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut acc = 0.0;
                    for ci in gi * cg..(gi + 1) * cg {
                        for iy in 0..h {
                            for i in 0..kh {
                                if iy * c.strides[0] + i * c.dilations[0] != oy + c.pads[0] {
                                    continue;
                                }
                                for ix in 0..wd {
                                    for j in 0..kw {
                                        if ix * c.strides[1] + j * c.dilations[1] == ox + c.pads[1]
                                        {
                                            acc += xv[((ni * cin + ci) * h + iy) * wd + ix]
                                                * wv[((ci * mg + mo % mg) * kh + i) * kw + j];
                                        }
                                    }
                                }
                            }
                        }
                    }
                    y[((ni * m + mo) * ho + oy) * wo + ox] = acc;
                }
            }
        }
    }
    (vec![n, m, ho, wo], y)
}

#[test]
fn conv_transpose_matches_gather_reference() {
    // Asymmetric pads, stride, dilation, output padding and 2 groups of
    // 2 input / 3 output channels, on two images.
    let x = iota(&[2, 4, 3, 2], -10.0);
    let wdata: Vec<f32> = (0..4 * 3 * 2 * 3)
        .map(|k| ((k * 7) % 11) as f32 - 5.0)
        .collect();
    let w = f(&[4, 3, 2, 3], &wdata);
    for c in [
        ConvTranspose2d {
            strides: [2, 3],
            pads: [1, 0, 0, 2],
            dilations: [2, 1],
            group: 2,
            output_padding: [1, 2],
        },
        ConvTranspose2d {
            strides: [1, 2],
            pads: [0, 1, 1, 0],
            dilations: [1, 2],
            group: 1,
            output_padding: [0, 1],
        },
    ] {
        let (shape, e) = convt_reference(&x, &w, &c);
        let y = convt(c, &[x.clone(), w.clone()]);
        assert_f32(&y, &shape, &e);
    }
}

// ----- Einsum ----------------------------------------------------------------

fn einsum(eq: &str, ins: &[Tensor]) -> Tensor {
    let op = build("Einsum", &[("equation", AttrValue::Word(eq.into()))]).unwrap();
    eval(op, ins)
}

#[test]
fn einsum_matmul_forms_match_loops() {
    let a = iota(&[2, 3], 1.0);
    let bm = iota(&[3, 4], -2.0);
    let (av, bv) = (vals(&a), vals(&bm));
    let mut mm = vec![0.0; 8];
    for i in 0..2 {
        for k in 0..4 {
            mm[i * 4 + k] = (0..3).map(|j| av[i * 3 + j] * bv[j * 4 + k]).sum();
        }
    }
    assert_f32(&einsum("ij,jk->ik", &[a.clone(), bm.clone()]), &[2, 4], &mm);
    // Implicit output (alphabetical single-use letters) and spaces.
    assert_f32(&einsum("ij, jk", &[a.clone(), bm.clone()]), &[2, 4], &mm);
    // Transposed result: (AB)^T.
    let mut mmt = vec![0.0; 8];
    for i in 0..2 {
        for k in 0..4 {
            mmt[k * 2 + i] = mm[i * 4 + k];
        }
    }
    assert_f32(
        &einsum("ij,jk->ki", &[a.clone(), bm.clone()]),
        &[4, 2],
        &mmt,
    );
    // A^T from a transpose-only equation.
    assert_f32(
        &einsum("ij->ji", std::slice::from_ref(&a)),
        &[3, 2],
        &[1., 4., 2., 5., 3., 6.],
    );
    // Outer product.
    let u = f(&[2], &[1., 2.]);
    let v = f(&[3], &[1., 10., 100.]);
    assert_f32(
        &einsum("i,j->ij", &[u, v]),
        &[2, 3],
        &[1., 10., 100., 2., 20., 200.],
    );
    // Full contraction to a scalar (Frobenius inner product): sum of squares.
    assert_f32(&einsum("ij,ij->", &[a.clone(), a.clone()]), &[], &[91.]);
    // Row sums.
    assert_f32(&einsum("ij->i", &[a]), &[2], &[6., 15.]);
}

#[test]
fn einsum_batched_and_multi_index_contractions_match_loops() {
    // Batched matmul bij,bjk->bik.
    let x = iota(&[2, 2, 3], 0.5);
    let y = iota(&[2, 3, 2], -3.0);
    let (xv, yv) = (vals(&x), vals(&y));
    let mut e = vec![0.0; 8];
    for bb in 0..2 {
        for i in 0..2 {
            for k in 0..2 {
                e[(bb * 2 + i) * 2 + k] = (0..3)
                    .map(|j| xv[(bb * 2 + i) * 3 + j] * yv[(bb * 3 + j) * 2 + k])
                    .sum();
            }
        }
    }
    assert_f32(
        &einsum("bij,bjk->bik", &[x.clone(), y.clone()]),
        &[2, 2, 2],
        &e,
    );
    // Contraction over two indices: ijk,jkl->il.
    let p = iota(&[2, 3, 2], 1.0);
    let q = iota(&[3, 2, 4], -5.0);
    let (pv, qv) = (vals(&p), vals(&q));
    let mut e = vec![0.0; 8];
    for i in 0..2 {
        for l in 0..4 {
            let mut s = 0.0;
            for j in 0..3 {
                for k in 0..2 {
                    s += pv[(i * 3 + j) * 2 + k] * qv[(j * 2 + k) * 4 + l];
                }
            }
            e[i * 4 + l] = s;
        }
    }
    assert_f32(&einsum("ijk,jkl->il", &[p, q]), &[2, 4], &e);
    // Three operands: i,ij,j-> = u^T A v.
    let u = f(&[2], &[1., -1.]);
    let v = f(&[3], &[1., 2., 3.]);
    let a = iota(&[2, 3], 1.0);
    // u^T A = [1-4, 2-5, 3-6] = [-3,-3,-3]; . v = -18.
    assert_f32(&einsum("i,ij,j->", &[u, a, v]), &[], &[-18.]);
    // Diagonal of a square matrix (repeated index) and its trace.
    let sq = iota(&[3, 3], 0.0);
    assert_f32(
        &einsum("ii->i", std::slice::from_ref(&sq)),
        &[3],
        &[0., 4., 8.],
    );
    assert_f32(&einsum("ii", &[sq]), &[], &[12.]);
}

#[test]
fn einsum_rejects_ellipsis_and_bad_equations() {
    let e = build(
        "Einsum",
        &[("equation", AttrValue::Word("...ij->...ji".into()))],
    )
    .unwrap_err();
    assert!(e.contains("ellipsis"), "{e}");
    let e = build("Einsum", &[("equation", AttrValue::Word("ij->k".into()))]).unwrap_err();
    assert!(e.contains("`k`"), "{e}");
    let e = build("Einsum", &[("equation", AttrValue::Word("ij->ii".into()))]).unwrap_err();
    assert!(e.contains("repeated"), "{e}");
    // Operand count and sizes are checked by inference.
    let op = build(
        "Einsum",
        &[("equation", AttrValue::Word("ij,jk->ik".into()))],
    )
    .unwrap();
    let t = |s: &[usize]| dnnc_ir::TensorType::f32(s.to_vec());
    let err = dnnc_ir::infer::infer(&op, &[&t(&[2, 3])]).unwrap_err();
    assert!(err.contains("2 operands"), "{err}");
    let err = dnnc_ir::infer::infer(&op, &[&t(&[2, 3]), &t(&[4, 5])]).unwrap_err();
    assert!(err.contains("index `j`"), "{err}");
}

// ----- Resize -----------------------------------------------------------------

fn resize(
    mode: ResizeMode,
    coord: CoordMode,
    nearest: NearestMode,
    sizes: &[usize],
    x: &Tensor,
) -> Tensor {
    eval(
        Op::Resize(Resize {
            sizes: sizes.to_vec(),
            scales: vec![],
            mode,
            coord,
            nearest,
        }),
        std::slice::from_ref(x),
    )
}

#[test]
fn resize_nearest_2x2_to_4x4_each_mode() {
    let x = f(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let up = [1, 1, 4, 4];
    // half_pixel: source coords -0.25, 0.25, 0.75, 1.25 -> 0, 0, 1, 1.
    let blocks = [
        1., 1., 2., 2., 1., 1., 2., 2., 3., 3., 4., 4., 3., 3., 4., 4.,
    ];
    let r = |c, n| resize(ResizeMode::Nearest, c, n, &up, &x);
    assert_f32(
        &r(CoordMode::HalfPixel, NearestMode::RoundPreferFloor),
        &up,
        &blocks,
    );
    // asymmetric: x/2 = 0, 0.5, 1, 1.5; floor -> 0,0,1,1; prefer-ceil ->
    // 0,1,1,2 (clamped to 1); prefer-floor -> 0,0,1,1; ceil -> 0,1,1,2->1.
    assert_f32(&r(CoordMode::Asymmetric, NearestMode::Floor), &up, &blocks);
    assert_f32(
        &r(CoordMode::Asymmetric, NearestMode::RoundPreferFloor),
        &up,
        &blocks,
    );
    let shifted = [
        1., 2., 2., 2., 3., 4., 4., 4., 3., 4., 4., 4., 3., 4., 4., 4.,
    ];
    assert_f32(
        &r(CoordMode::Asymmetric, NearestMode::RoundPreferCeil),
        &up,
        &shifted,
    );
    assert_f32(&r(CoordMode::Asymmetric, NearestMode::Ceil), &up, &shifted);
    // align_corners: 0, 1/3, 2/3, 1 -> 0, 0, 1, 1.
    assert_f32(
        &r(CoordMode::AlignCorners, NearestMode::RoundPreferFloor),
        &up,
        &blocks,
    );
    // pytorch_half_pixel equals half_pixel when the output is longer than 1.
    assert_f32(
        &r(CoordMode::PytorchHalfPixel, NearestMode::RoundPreferFloor),
        &up,
        &blocks,
    );
    // half_pixel, ceil: -0.25 -> 0, 0.25 -> 1, 0.75 -> 1, 1.25 -> 2 -> 1.
    assert_f32(&r(CoordMode::HalfPixel, NearestMode::Ceil), &up, &shifted);
}

#[test]
fn resize_linear_2x2_to_4x4_each_mode() {
    // x = [[1,2],[3,4]] is the plane 1 + cx + 2 cy, so bilinear output at
    // clamped source coords (cy, cx) is exactly 1 + cx + 2 cy.
    let x = f(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let up = [1, 1, 4, 4];
    let plane = |cs: [f32; 4]| -> Vec<f32> {
        let mut v = vec![];
        for cy in cs {
            for cx in cs {
                v.push(1. + cx + 2. * cy);
            }
        }
        v
    };
    let r = |c| {
        resize(
            ResizeMode::Linear,
            c,
            NearestMode::RoundPreferFloor,
            &up,
            &x,
        )
    };
    // half_pixel: -0.25, 0.25, 0.75, 1.25 clamped to [0, 1].
    assert_f32(&r(CoordMode::HalfPixel), &up, &plane([0., 0.25, 0.75, 1.]));
    assert_f32(
        &r(CoordMode::PytorchHalfPixel),
        &up,
        &plane([0., 0.25, 0.75, 1.]),
    );
    assert_f32(
        &r(CoordMode::AlignCorners),
        &up,
        &plane([0., 1. / 3., 2. / 3., 1.]),
    );
    assert_f32(&r(CoordMode::Asymmetric), &up, &plane([0., 0.5, 1., 1.]));
    // Spelled out for half_pixel, row 2 (cy = 0.75): 2.5, 2.75, 3.25, 3.5.
    assert_eq!(
        &vals(&r(CoordMode::HalfPixel))[8..12],
        &[2.5, 2.75, 3.25, 3.5]
    );
}

#[test]
fn resize_to_one_pixel_and_explicit_scales() {
    let x = f(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let one = [1, 1, 1, 1];
    // half_pixel: (0 + 0.5) / 0.5 - 0.5 = 0.5 on both axes -> the mean.
    let y = resize(
        ResizeMode::Linear,
        CoordMode::HalfPixel,
        NearestMode::RoundPreferFloor,
        &one,
        &x,
    );
    assert_f32(&y, &one, &[2.5]);
    // pytorch_half_pixel maps a length-1 output to coordinate 0.
    let y = resize(
        ResizeMode::Linear,
        CoordMode::PytorchHalfPixel,
        NearestMode::RoundPreferFloor,
        &one,
        &x,
    );
    assert_f32(&y, &one, &[1.]);
    // Scale 0.6 on a length-4 axis gives 2 outputs; asymmetric floor reads
    // x/0.6 = 0, 1.67 -> 0, 1, whereas sizes alone (scale 0.5) read 0, 2.
    let row = f(&[4], &[1., 2., 3., 4.]);
    let mk = |scales: Vec<f32>| Resize {
        sizes: vec![2],
        scales,
        mode: ResizeMode::Nearest,
        coord: CoordMode::Asymmetric,
        nearest: NearestMode::Floor,
    };
    assert_f32(
        &eval(Op::Resize(mk(vec![0.6])), std::slice::from_ref(&row)),
        &[2],
        &[1., 2.],
    );
    assert_f32(&eval(Op::Resize(mk(vec![])), &[row]), &[2], &[1., 3.]);
    // With explicit scales the transform's resized length is `in * scale`,
    // unfloored (ONNX's reference): 2x4 by 0.6 -> 1x2, align_corners on the
    // width reads x * 3 / (2.4 - 1) = 0, 2.142857 -> [1, 3 + 1/7].
    let x = iota(&[2, 4], 1.0);
    let y = eval(
        Op::Resize(Resize {
            sizes: vec![1, 2],
            scales: vec![0.6, 0.6],
            mode: ResizeMode::Linear,
            coord: CoordMode::AlignCorners,
            nearest: NearestMode::RoundPreferFloor,
        }),
        &[x],
    );
    assert_f32(&y, &[1, 2], &[1., 3. + 1. / 7.]);
    // Unsupported modes are rejected by name.
    let e = build(
        "Resize",
        &[
            ("sizes", AttrValue::Ints(vec![4])),
            ("mode", AttrValue::Word("cubic".into())),
        ],
    )
    .unwrap_err();
    assert!(e.contains("cubic"), "{e}");
    let e = build(
        "Resize",
        &[
            ("sizes", AttrValue::Ints(vec![4])),
            (
                "coordinate_transformation_mode",
                AttrValue::Word("tf_crop_and_resize".into()),
            ),
        ],
    )
    .unwrap_err();
    assert!(e.contains("tf_crop_and_resize"), "{e}");
}

// ----- recurrent layers --------------------------------------------------------

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn rec(cell: CellKind, hidden: usize, direction: RnnDirection) -> Recurrent {
    Recurrent {
        cell,
        hidden_size: hidden,
        direction,
        activations: cell
            .default_activations()
            .iter()
            .copied()
            .cycle()
            .take(cell.activations_per_direction() * direction.count())
            .collect(),
        clip: f32::INFINITY,
    }
}

#[test]
fn rnn_bidirectional_matches_scalar_recurrence() {
    // Hidden 1, input 1, batch 1, seq 3. Forward: w 0.5, r -0.8, wb 0.1,
    // rb 0.2, h0 0.3. Reverse: w -1, r 0.4, wb 0, rb -0.1, h0 -0.2.
    let xs = [1.0f32, -2.0, 0.5];
    let x = f(&[3, 1, 1], &xs);
    let w = f(&[2, 1, 1], &[0.5, -1.0]);
    let r = f(&[2, 1, 1], &[-0.8, 0.4]);
    let bias = f(&[2, 2], &[0.1, 0.2, 0.0, -0.1]);
    let h0 = f(&[2, 1, 1], &[0.3, -0.2]);
    let out = try_eval(
        Op::Recurrent(rec(CellKind::Rnn, 1, RnnDirection::Bidirectional)),
        &[x, w, r, bias, h0],
    )
    .unwrap();
    let mut fw = [0.0f32; 3];
    let mut h = 0.3f32;
    for t in 0..3 {
        h = (xs[t] * 0.5 + h * -0.8 + 0.1 + 0.2).tanh();
        fw[t] = h;
    }
    let mut bw = [0.0f32; 3];
    let mut h = -0.2f32;
    for t in (0..3).rev() {
        h = (-xs[t] + h * 0.4 - 0.1).tanh(); // w -1, wb 0, rb -0.1
        bw[t] = h;
    }
    // Y[t, dir, batch, hidden].
    let y: Vec<f32> = (0..3).flat_map(|t| [fw[t], bw[t]]).collect();
    assert_f32(&out[0], &[3, 2, 1, 1], &y);
    // Y_h: forward's last step, reverse's state after t = 0.
    assert_f32(&out[1], &[2, 1, 1], &[fw[2], bw[0]]);
}

#[test]
fn rnn_relu_activation_and_clip() {
    // Relu with clip 1: pre-activation clipped to [-1, 1] first.
    let mut spec = rec(CellKind::Rnn, 1, RnnDirection::Forward);
    spec.activations = vec![RnnActivation::Relu];
    spec.clip = 1.0;
    let out = try_eval(
        Op::Recurrent(spec),
        &[
            f(&[2, 1, 1], &[3.0, -0.5]),
            f(&[1, 1, 1], &[1.0]),
            f(&[1, 1, 1], &[0.25]),
            f(&[1, 2], &[0.0, 0.0]),
            f(&[1, 1, 1], &[0.0]),
        ],
    )
    .unwrap();
    // t0: relu(clip(3)) = 1; t1: relu(clip(-0.5 + 0.25)) = 0.
    assert_f32(&out[0], &[2, 1, 1, 1], &[1.0, 0.0]);
    assert_f32(&out[1], &[1, 1, 1], &[0.0]);
}

/// GRU with hidden 1, input 1, one direction, gates z, r, h.
fn gru_reference(xs: &[f32], p: [f32; 12], h0: f32, lbr: bool) -> Vec<f32> {
    // p = [wz, wr, wh, rz, rr, rh, wbz, wbr, wbh, rbz, rbr, rbh]
    let [wz, wr, wh, rz, rr, rh, wbz, wbr, wbh, rbz, rbr, rbh] = p;
    let mut h = h0;
    let mut ys = vec![];
    for &x in xs {
        let z = sigmoid(x * wz + h * rz + wbz + rbz);
        let r = sigmoid(x * wr + h * rr + wbr + rbr);
        let hh = if lbr {
            (x * wh + r * (h * rh + rbh) + wbh).tanh()
        } else {
            (x * wh + (r * h) * rh + rbh + wbh).tanh()
        };
        h = (1.0 - z) * hh + z * h;
        ys.push(h);
    }
    ys
}

#[test]
fn gru_matches_scalar_recurrence_both_reset_forms() {
    let xs = [0.5f32, -1.0, 2.0];
    let p = [
        0.3, -0.6, 0.9, 0.2, 0.5, -0.7, 0.1, -0.1, 0.05, 0.2, 0.3, -0.4,
    ];
    for lbr in [false, true] {
        let out = try_eval(
            Op::Recurrent(rec(
                CellKind::Gru {
                    linear_before_reset: lbr,
                },
                1,
                RnnDirection::Forward,
            )),
            &[
                f(&[3, 1, 1], &xs),
                f(&[1, 3, 1], &p[0..3]),
                f(&[1, 3, 1], &p[3..6]),
                f(&[1, 6], &p[6..12]),
                f(&[1, 1, 1], &[0.25]),
            ],
        )
        .unwrap();
        let e = gru_reference(&xs, p, 0.25, lbr);
        assert_f32(&out[0], &[3, 1, 1, 1], &e);
        assert_f32(&out[1], &[1, 1, 1], &[e[2]]);
    }
    // The two forms differ for these weights.
    assert_ne!(
        gru_reference(&xs, p, 0.25, false),
        gru_reference(&xs, p, 0.25, true)
    );
}

#[test]
fn gru_reverse_with_batch_two() {
    // Each batch row runs independently; reverse direction.
    let xs = [[1.0f32, 0.0], [-1.0, 2.0]]; // [t][batch]
    let p = [
        0.4, 0.1, -0.3, 0.6, -0.2, 0.8, 0.0, 0.1, 0.2, -0.1, 0.0, 0.3,
    ];
    let out = try_eval(
        Op::Recurrent(rec(
            CellKind::Gru {
                linear_before_reset: false,
            },
            1,
            RnnDirection::Reverse,
        )),
        &[
            f(&[2, 2, 1], &[xs[0][0], xs[0][1], xs[1][0], xs[1][1]]),
            f(&[1, 3, 1], &p[0..3]),
            f(&[1, 3, 1], &p[3..6]),
            f(&[1, 6], &p[6..12]),
            f(&[1, 2, 1], &[0.5, -0.5]),
        ],
    )
    .unwrap();
    let mut y = [0.0f32; 4];
    let mut last = [0.0f32; 2];
    for (bi, h0) in [0.5f32, -0.5].into_iter().enumerate() {
        // Reverse: feed t = 1 then t = 0; outputs stay at their t.
        let seq = [xs[1][bi], xs[0][bi]];
        let e = gru_reference(&seq, p, h0, false);
        y[bi] = e[1];
        y[2 + bi] = e[0];
        last[bi] = e[1];
    }
    assert_f32(&out[0], &[2, 1, 2, 1], &y);
    assert_f32(&out[1], &[1, 2, 1], &last);
}

/// LSTM with input 1 and hidden `hid`, one direction, gates i, o, f, c;
/// weights given per gate and unit as scalars, so the reference is a plain
/// per-unit loop over the ONNX equations.
struct LstmCase {
    hid: usize,
    w: Vec<f32>,  // [4*hid] (input 1)
    r: Vec<f32>,  // [4*hid, hid]
    b: Vec<f32>,  // [8*hid]
    p: Vec<f32>,  // [3*hid]
    h0: Vec<f32>, // [hid]
    c0: Vec<f32>, // [hid]
}

fn lstm_reference(xs: &[f32], k: &LstmCase, input_forget: bool) -> (Vec<Vec<f32>>, Vec<f32>) {
    let hid = k.hid;
    let (mut h, mut c) = (k.h0.clone(), k.c0.clone());
    let mut ys = vec![];
    for &x in xs {
        let pre = |gate: usize, u: usize, h: &[f32]| -> f32 {
            let row = gate * hid + u;
            let rec: f32 = (0..hid).map(|j| h[j] * k.r[row * hid + j]).sum();
            x * k.w[row] + rec + k.b[row] + k.b[4 * hid + row]
        };
        let mut hn = vec![0.0; hid];
        let mut cn = vec![0.0; hid];
        for u in 0..hid {
            let i = sigmoid(pre(0, u, &h) + k.p[u] * c[u]);
            let fg = if input_forget {
                1.0 - i
            } else {
                sigmoid(pre(2, u, &h) + k.p[2 * hid + u] * c[u])
            };
            let g = pre(3, u, &h).tanh();
            cn[u] = fg * c[u] + i * g;
            let o = sigmoid(pre(1, u, &h) + k.p[hid + u] * cn[u]);
            hn[u] = o * cn[u].tanh();
        }
        h = hn;
        c = cn;
        ys.push(h.clone());
    }
    (ys, c)
}

#[test]
fn lstm_with_peepholes_matches_scalar_recurrence() {
    let hid = 2;
    let k = LstmCase {
        hid,
        w: (0..8).map(|v| (v as f32 - 3.5) * 0.2).collect(),
        r: (0..16).map(|v| ((v * 5) % 7) as f32 * 0.1 - 0.3).collect(),
        b: (0..16).map(|v| (v % 4) as f32 * 0.05 - 0.05).collect(),
        p: vec![0.3, -0.2, 0.1, 0.4, -0.5, 0.25],
        h0: vec![0.1, -0.3],
        c0: vec![0.5, 0.2],
    };
    let xs = [1.0f32, -0.5, 2.0];
    for input_forget in [false, true] {
        let out = try_eval(
            Op::Recurrent(rec(
                CellKind::Lstm { input_forget },
                hid,
                RnnDirection::Forward,
            )),
            &[
                f(&[3, 1, 1], &xs),
                f(&[1, 8, 1], &k.w),
                f(&[1, 8, 2], &k.r),
                f(&[1, 16], &k.b),
                f(&[1, 1, 2], &k.h0),
                f(&[1, 1, 2], &k.c0),
                f(&[1, 6], &k.p),
            ],
        )
        .unwrap();
        assert_eq!(out.len(), 3);
        let (ys, c) = lstm_reference(&xs, &k, input_forget);
        let flat: Vec<f32> = ys.iter().flatten().copied().collect();
        assert_f32(&out[0], &[3, 1, 1, 2], &flat);
        assert_f32(&out[1], &[1, 1, 2], &ys[2]);
        assert_f32(&out[2], &[1, 1, 2], &c);
    }
    // Without P (6 inputs) the peepholes are zero.
    let k0 = LstmCase {
        p: vec![0.0; 6],
        ..k
    };
    let out = try_eval(
        Op::Recurrent(rec(
            CellKind::Lstm {
                input_forget: false,
            },
            hid,
            RnnDirection::Forward,
        )),
        &[
            f(&[2, 1, 1], &xs[..2]),
            f(&[1, 8, 1], &k0.w),
            f(&[1, 8, 2], &k0.r),
            f(&[1, 16], &k0.b),
            f(&[1, 1, 2], &k0.h0),
            f(&[1, 1, 2], &k0.c0),
        ],
    )
    .unwrap();
    let (ys, c) = lstm_reference(&xs[..2], &k0, false);
    assert_f32(&out[1], &[1, 1, 2], &ys[1]);
    assert_f32(&out[2], &[1, 1, 2], &c);
}

#[test]
fn recurrent_attribute_validation() {
    let hs = ("hidden_size", AttrValue::Int(2));
    let e = build("LSTM", &[]).unwrap_err();
    assert!(e.contains("hidden_size"), "{e}");
    let e = build(
        "GRU",
        &[
            hs.clone(),
            ("activations", AttrValue::Word("Sigmoid".into())),
        ],
    )
    .unwrap_err();
    assert!(e.contains("needs 2 activations"), "{e}");
    let e = build(
        "RNN",
        &[
            hs.clone(),
            ("activations", AttrValue::Word("Softsign".into())),
        ],
    )
    .unwrap_err();
    assert!(e.contains("Softsign"), "{e}");
    // Bidirectional defaults repeat the per-direction set.
    let op = build(
        "LSTM",
        &[hs, ("direction", AttrValue::Word("bidirectional".into()))],
    )
    .unwrap();
    let Op::Recurrent(r) = &op else {
        panic!("{op:?}")
    };
    assert_eq!(r.activations.len(), 6);
    assert_eq!(op.num_outputs(), 3);
    assert_eq!(op.arity(), (6, 7));
}
