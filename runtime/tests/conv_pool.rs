//! Hand-checked convolution and pooling cases. Every expected value is worked
//! out in the comment above it.

mod common;
use common::*;
use dnnc_ir::op::{Conv2d, Pool2d};
use dnnc_ir::Op;

fn conv(strides: [usize; 2], pads: [usize; 4], dilations: [usize; 2], group: usize) -> Op {
    Op::Conv2d(Conv2d {
        strides,
        pads,
        dilations,
        group,
        ..Conv2d::default()
    })
}

fn pool(
    kernel: usize,
    stride: usize,
    pads: [usize; 4],
    dilation: usize,
    ceil: bool,
    include: bool,
) -> Pool2d {
    Pool2d {
        kernel: [kernel, kernel],
        strides: [stride, stride],
        pads,
        dilations: [dilation, dilation],
        ceil_mode: ceil,
        count_include_pad: include,
        data: dnnc_ir::op::DataLayout::Nchw,
    }
}

#[test]
fn conv_3x3_ones_with_padding_and_bias() {
    // x = [[1,2,3],[4,5,6],[7,8,9]], all-ones 3x3 kernel, pad 1: each output
    // is the sum of the 3x3 neighbourhood, e.g. corner 1+2+4+5 = 12, centre
    // 45; then + bias 1.
    let x = iota(&[1, 1, 3, 3], 1.0);
    let w = f(&[1, 1, 3, 3], &[1.0; 9]);
    let bias = f(&[1], &[1.0]);
    let y = eval(conv([1, 1], [1; 4], [1, 1], 1), &[x, w, bias]);
    assert_f32(
        &y,
        &[1, 1, 3, 3],
        &[13., 22., 17., 28., 46., 34., 25., 40., 29.],
    );
}

#[test]
fn conv_stride_2() {
    // Same sums as above at stride 2: output 2x2 = the four corners
    // (12, 16, 24, 28) of the stride-1 result.
    let x = iota(&[1, 1, 3, 3], 1.0);
    let w = f(&[1, 1, 3, 3], &[1.0; 9]);
    let y = eval(conv([2, 2], [1; 4], [1, 1], 1), &[x, w]);
    assert_f32(&y, &[1, 1, 2, 2], &[12., 16., 24., 28.]);
}

#[test]
fn conv_dilation_2() {
    // x[r][c] = 5r + c on 5x5; a 2x2 ones kernel with dilation 2 sums
    // x[i][j] + x[i][j+2] + x[i+2][j] + x[i+2][j+2] = 20i + 4j + 24.
    let x = iota(&[1, 1, 5, 5], 0.0);
    let w = f(&[1, 1, 2, 2], &[1.0; 4]);
    let y = eval(conv([1, 1], [0; 4], [2, 2], 1), &[x, w]);
    assert_f32(
        &y,
        &[1, 1, 3, 3],
        &[24., 28., 32., 44., 48., 52., 64., 68., 72.],
    );
}

#[test]
fn conv_asymmetric_pads() {
    // pads [top=1, left=0, bottom=0, right=2] turn x = [[1,2],[3,4]] into
    //   0 0 0 0
    //   1 2 0 0
    //   3 4 0 0
    // and w = [[1,2],[3,4]] slides over it (2x3 outputs):
    //   (0,0): 0+0+3*1+4*2 = 11   (0,1): 3*2 = 6    (0,2): 0
    //   (1,0): 1+2*2+3*3+4*4 = 30 (1,1): 2+3*4 = 14 (1,2): 0
    let x = f(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let w = f(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let y = eval(conv([1, 1], [1, 0, 0, 2], [1, 1], 1), &[x, w]);
    assert_f32(&y, &[1, 1, 2, 3], &[11., 6., 0., 30., 14., 0.]);
}

#[test]
fn conv_groups_dense_and_pointwise() {
    // 4 channels, 2 groups. Channel c is filled with c+1; 2x2 ones kernel,
    // no pad: group 0 sums 4*1 + 4*2 = 12, group 1 sums 4*3 + 4*4 = 28.
    let mut data = vec![];
    for c in 0..4 {
        data.extend([(c + 1) as f32; 4]);
    }
    let x = f(&[1, 4, 2, 2], &data);
    let w = f(&[2, 2, 2, 2], &[1.0; 16]);
    let y = eval(conv([1, 1], [0; 4], [1, 1], 2), &[x, w]);
    assert_f32(&y, &[1, 2, 1, 1], &[12., 28.]);

    // 1x1 kernel, 2 groups over x = [1,2,3,4]: out0 = 1*1 + 10*2 = 21,
    // out1 = 100*3 + 1000*4 = 4300.
    let x = f(&[1, 4, 1, 1], &[1., 2., 3., 4.]);
    let w = f(&[2, 2, 1, 1], &[1., 10., 100., 1000.]);
    let y = eval(conv([1, 1], [0; 4], [1, 1], 2), &[x, w]);
    assert_f32(&y, &[1, 2, 1, 1], &[21., 4300.]);
}

#[test]
fn conv_depthwise_and_channel_multiplier() {
    // Depthwise (group = 2 = channels), 3x3 ones kernel, pad 1. Channel 0 is
    // 1..9, giving the neighbourhood sums of the first test; channel 1 is all
    // ones, giving the neighbourhood sizes 4/6/9.
    let mut data: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    data.extend([1.0; 9]);
    let x = f(&[1, 2, 3, 3], &data);
    let w = f(&[2, 1, 3, 3], &[1.0; 18]);
    let y = eval(conv([1, 1], [1; 4], [1, 1], 2), &[x, w]);
    assert_f32(
        &y,
        &[1, 2, 3, 3],
        &[
            12., 21., 16., 27., 45., 33., 24., 39., 28., 4., 6., 4., 6., 9., 6., 4., 6., 4.,
        ],
    );

    // Channel multiplier 2: group 2, 4 output channels with 1x1 weights
    // [1, 2, 3, 4]: outputs are 1*ch0, 2*ch0, 3*ch1, 4*ch1.
    let x = f(&[1, 2, 1, 2], &[1., 2., 5., 6.]);
    let w = f(&[4, 1, 1, 1], &[1., 2., 3., 4.]);
    let y = eval(conv([1, 1], [0; 4], [1, 1], 2), &[x, w]);
    assert_f32(&y, &[1, 4, 1, 2], &[1., 2., 2., 4., 15., 18., 20., 24.]);
}

#[test]
fn conv_batch_of_two() {
    // Two images through a 1x1 kernel of weight 2 with bias -1: y = 2x - 1.
    let x = f(&[2, 1, 1, 2], &[1., 2., 3., 4.]);
    let w = f(&[1, 1, 1, 1], &[2.]);
    let bias = f(&[1], &[-1.]);
    let y = eval(conv([1, 1], [0; 4], [1, 1], 1), &[x, w, bias]);
    assert_f32(&y, &[2, 1, 1, 2], &[1., 3., 5., 7.]);
}

#[test]
fn max_pool_ceil_mode() {
    // x[r][c] = 4r + c + 1 on 4x4, 3x3 window, stride 2. Floor mode fits one
    // window (max x[2][2] = 11). Ceil mode adds clipped windows at rows/cols
    // 2..3: maxima x[2][3] = 12, x[3][2] = 15, x[3][3] = 16.
    let x = iota(&[1, 1, 4, 4], 1.0);
    let y = eval(
        Op::MaxPool(pool(3, 2, [0; 4], 1, false, false)),
        std::slice::from_ref(&x),
    );
    assert_f32(&y, &[1, 1, 1, 1], &[11.]);
    let y = eval(Op::MaxPool(pool(3, 2, [0; 4], 1, true, false)), &[x]);
    assert_f32(&y, &[1, 1, 2, 2], &[11., 12., 15., 16.]);
}

#[test]
fn max_pool_padding_never_wins() {
    // All-negative x = [[-1,-2],[-3,-4]], 2x2 window, stride 1, pad 1: each
    // output is the max of the real pixels its window covers; the implicit
    // padding must not contribute a 0.
    let x = f(&[1, 1, 2, 2], &[-1., -2., -3., -4.]);
    let y = eval(Op::MaxPool(pool(2, 1, [1; 4], 1, false, false)), &[x]);
    assert_f32(
        &y,
        &[1, 1, 3, 3],
        &[-1., -1., -2., -1., -1., -2., -3., -3., -4.],
    );
}

#[test]
fn max_pool_dilated() {
    // 2x2 window with dilation 2 reads taps (i,j), (i,j+2), (i+2,j), (i+2,j+2):
    //   out(0,0) = max(0,0,0,5) = 5   out(0,1) = max(9,0,0,0) = 9
    //   out(1,0) = max(0,0,7,0) = 7   out(1,1) = 0
    // (an undilated 3x3 window would see the 5 at (1,1)).
    #[rustfmt::skip]
    let x = f(&[1, 1, 4, 4], &[
        0., 9., 0., 0.,
        0., 0., 0., 0.,
        0., 0., 5., 0.,
        7., 0., 0., 0.,
    ]);
    let y = eval(Op::MaxPool(pool(2, 1, [0; 4], 2, false, false)), &[x]);
    assert_f32(&y, &[1, 1, 2, 2], &[5., 9., 7., 0.]);
}

#[test]
fn average_pool_count_include_pad_both_ways() {
    // x = [[1,2],[3,4]], 2x2 window, stride 1, pad 1 -> 3x3 outputs.
    // Excluding padding, divide by the real pixels covered:
    //   1/1, (1+2)/2, 2/1, (1+3)/2, 10/4, (2+4)/2, 3/1, (3+4)/2, 4/1.
    // Including padding, every window is 4 taps inside the padded input.
    let x = f(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let y = eval(
        Op::AveragePool(pool(2, 1, [1; 4], 1, false, false)),
        std::slice::from_ref(&x),
    );
    assert_f32(&y, &[1, 1, 3, 3], &[1., 1.5, 2., 2., 2.5, 3., 3., 3.5, 4.]);
    let y = eval(Op::AveragePool(pool(2, 1, [1; 4], 1, false, true)), &[x]);
    assert_f32(
        &y,
        &[1, 1, 3, 3],
        &[0.25, 0.75, 0.5, 1., 2.5, 1.5, 0.75, 1.75, 1.],
    );
}

#[test]
fn average_pool_ceil_mode_never_counts_beyond_padded_input() {
    // All-ones 4x4 input, 3x3 window, stride 2, pad 1, ceil mode -> 3 windows
    // per axis starting at -1, 1, 3. Per axis:
    //   window -1..1: 2 real taps, 3 inside the padded input [-1, 5)
    //   window  1..3: 3 real, 3 padded
    //   window  3..5: 1 real (3), 2 padded (3 and 4; 5 lies beyond it)
    // Excluding padding every output is 1. Including it, output (i,j) is
    // real_i*real_j / (padded_i*padded_j), e.g. corner 1*1 / (2*2) = 0.25
    // (PyTorch gives the same).
    let x = f(&[1, 1, 4, 4], &[1.0; 16]);
    let y = eval(
        Op::AveragePool(pool(3, 2, [1; 4], 1, true, false)),
        std::slice::from_ref(&x),
    );
    assert_f32(&y, &[1, 1, 3, 3], &[1.0; 9]);
    let y = eval(Op::AveragePool(pool(3, 2, [1; 4], 1, true, true)), &[x]);
    #[rustfmt::skip]
    let expected = [
        4. / 9., 6. / 9., 2. / 6.,
        6. / 9., 1.,      3. / 6.,
        2. / 6., 3. / 6., 1. / 4.,
    ];
    assert_f32(&y, &[1, 1, 3, 3], &expected);

    // Without padding: 3x3 input 1..9, 2x2 window, stride 2, ceil mode ->
    // windows (1+2+4+5)/4 = 3, (3+6)/2 = 4.5, (7+8)/2 = 7.5, 9/1 = 9.
    let x = iota(&[1, 1, 3, 3], 1.0);
    for include in [false, true] {
        let y = eval(
            Op::AveragePool(pool(2, 2, [0; 4], 1, true, include)),
            std::slice::from_ref(&x),
        );
        assert_f32(&y, &[1, 1, 2, 2], &[3., 4.5, 7.5, 9.]);
    }
}

#[test]
fn global_pools() {
    // Channel 0 = [1,2,3,4]: mean 2.5, max 4. Channel 1 = [5,6,7,8]: 6.5, 8.
    let x = iota(&[1, 2, 2, 2], 1.0);
    let y = eval(Op::GlobalAveragePool, std::slice::from_ref(&x));
    assert_f32(&y, &[1, 2, 1, 1], &[2.5, 6.5]);
    let y = eval(Op::GlobalMaxPool, &[x]);
    assert_f32(&y, &[1, 2, 1, 1], &[4., 8.]);
}
