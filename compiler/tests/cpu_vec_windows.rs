//! Wide planes for the f32x4 interior paths of pooling and depthwise
//! convolution (four output columns per iteration, strided loads for
//! strides 1, 2 and 3, scalar borders and tails), against the interpreter;
//! max pooling also with NaNs and infinities in the input.

mod cpu_common;

use cpu_common::{check, check_with, f32_tensor, parse, rand_f32, Rng};
use dnnc_compiler::codegen::cpu::{ConvAlgo, CpuOptions};

#[test]
fn wide_pools_match_the_interpreter() {
    let shape = [1usize, 3, 13, 41];
    let n: usize = shape.iter().product();
    let mut r = Rng(11);
    let v: Vec<f32> = (0..n)
        .map(|i| match r.below(40) {
            0 => f32::NAN,
            1 if i % 2 == 0 => f32::INFINITY,
            2 => f32::NEG_INFINITY,
            _ => r.uniform(-3.0, 3.0),
        })
        .collect();
    let nan_x = f32_tensor(&shape, v);
    let plain_x = rand_f32(&shape, 5, -3.0, 3.0);
    for attrs in [
        "kernel=[3,3], strides=[2,2], pads=[1,1,1,1]",
        "kernel=[3,3], strides=[1,1], pads=[1,1,1,1]",
        "kernel=[2,2], strides=[2,2]",
        "kernel=[3,3], strides=[3,3], pads=[1,1,1,1]",
        "kernel=[3,3], strides=[2,2], dilations=[2,2], pads=[2,2,2,2]",
    ] {
        let g = parse(&format!(
            "input %x: f32[1,3,13,41]\n%y = MaxPool(%x) {{{attrs}}}\noutput %y"
        ));
        check(&g, &[("x".into(), nan_x.clone())]);
        check(&g, &[("x".into(), plain_x.clone())]);
        if attrs.contains("dilations") {
            continue; // AveragePool has no dilations
        }
        let g = parse(&format!(
            "input %x: f32[1,3,13,41]\n%y = AveragePool(%x) {{{attrs}}}\noutput %y"
        ));
        check(&g, &[("x".into(), plain_x.clone())]);
    }
}

#[test]
fn wide_depthwise_convs_match_the_interpreter() {
    for (i, attrs) in [
        "pads=[1,1,1,1], group=4",
        "strides=[2,2], pads=[1,1,1,1], group=4",
        "strides=[2,2], pads=[0,0,1,1], group=4",
        "strides=[3,3], pads=[1,1,1,1], group=4",
        "dilations=[2,2], pads=[2,2,2,2], group=4",
        "group=4",
    ]
    .iter()
    .enumerate()
    {
        let src = format!(
            "input %x: f32[2,4,11,43]\nparam %w: f32[4,1,3,3] = he(seed={i})\nparam %b: f32[4] = uniform(low=-1, high=1, seed=9)\n%c = Conv2d(%x, %w, %b) {{{attrs}}}\n%y = Relu(%c)\noutput %y"
        );
        let g = parse(&src);
        let x = rand_f32(&[2, 4, 11, 43], 3 + i as u64, -2.0, 2.0);
        for algo in [None, Some(ConvAlgo::Depthwise), Some(ConvAlgo::Direct)] {
            check_with(
                &g,
                &[("x".into(), x.clone())],
                1e-4,
                1e-5,
                &CpuOptions {
                    conv_algo: algo,
                    ..Default::default()
                },
            );
        }
    }
}
