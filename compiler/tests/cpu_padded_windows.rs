//! The padded-plane kernels (depthwise convolution, max and average pooling over a
//! scratch copy of each plane with its padding written out): widths around
//! the f32x4 and stride-2 copy tails and past the fully unrolled rows, odd and asymmetric pads, ceil mode,
//! dilation, 5x5 windows, and max pooling with a NaN in only some planes
//! (those planes take the exact fallback), against the interpreter.

mod cpu_common;

use cpu_common::{check, check_with, f32_tensor, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{ConvAlgo, CpuOptions};

const POOLS: [&str; 7] = [
    "kernel=[3,3], strides=[2,2], ceil_mode=1",
    "kernel=[3,3], strides=[2,2], pads=[1,1,1,1]",
    "kernel=[3,3], strides=[1,1], pads=[1,1,1,1]",
    "kernel=[3,3], strides=[2,2], pads=[0,1,2,0], ceil_mode=1",
    "kernel=[2,3], strides=[1,2], pads=[1,0,0,2]",
    "kernel=[3,3], strides=[2,1], dilations=[1,2], pads=[2,2,2,2]",
    "kernel=[5,5], strides=[2,2], pads=[2,2,2,2]",
];

/// A depthwise conv (filter `ws`, attributes `attrs`, bias, then
/// `Clip(lo, hi)`) over `x` of `shape` against the interpreter, the
/// depthwise algorithm forced; `false` (nothing checked) when the window
/// does not fit the padded input.
fn check_depthwise(shape: [usize; 4], ws: &str, attrs: &str, clip: (f32, f32), seed: u64) -> bool {
    let [n, c, h, w] = shape;
    let (lo, hi) = clip;
    let src = format!(
        "graph t {{\ninput %x: f32[{n},{c},{h},{w}]\nparam %w: f32{ws} = he(seed={seed})\nparam %b: f32[{c}] = uniform(low=-1, high=1, seed=9)\n%c = Conv2d(%x, %w, %b) {{{attrs}}}\n%y = Clip(%c) {{min={lo}, max={hi}}}\noutput %y\n}}\n"
    );
    // Windows larger than the padded input are rejected by the parser.
    let Ok(g) = dnnc_ir::text::parse(&src, "t.dnn") else {
        return false;
    };
    let x = rand_f32(&shape, seed, -2.0, 2.0);
    check_with(
        &g,
        &[("x".into(), x)],
        1e-4,
        1e-5,
        &CpuOptions {
            conv_algo: Some(ConvAlgo::Depthwise),
            ..Default::default()
        },
    );
    true
}

#[test]
fn padded_max_and_average_pools_match_the_interpreter() {
    for (wi, w) in [4usize, 5, 7, 8, 9, 15, 17, 23, 301]
        .into_iter()
        .enumerate()
    {
        let shape = [2usize, 3, 9, w];
        let x = rand_f32(&shape, 40 + wi as u64, -3.0, 3.0);
        // A NaN in plane 1 only, an infinity in plane 4.
        let mut v: Vec<f32> = x.as_f32().expect("f32").iter().copied().collect();
        v[9 * w + 4 * w + w / 2] = f32::NAN;
        v[4 * 9 * w + 2 * w + 1] = f32::INFINITY;
        let nan_x = f32_tensor(&shape, v);
        for attrs in POOLS {
            let g = parse(&format!(
                "input %x: f32[2,3,9,{w}]\n%y = MaxPool(%x) {{{attrs}}}\noutput %y"
            ));
            if g.value(g.outputs()[0]).ty.shape[3] == 0 {
                continue;
            }
            check(&g, &[("x".into(), x.clone())]);
            check(&g, &[("x".into(), nan_x.clone())]);
            // Average pools (no dilation) with and without the padding
            // counted: window sums over the zero-padded plane, divided by
            // each window's count.
            if attrs.contains("dilations") {
                continue;
            }
            for include in [0, 1] {
                let g = parse(&format!(
                    "input %x: f32[2,3,9,{w}]\n%y = AveragePool(%x) {{{attrs}, count_include_pad={include}}}\noutput %y"
                ));
                check(&g, &[("x".into(), x.clone())]);
                check(&g, &[("x".into(), nan_x.clone())]);
            }
        }
    }
}

#[test]
fn padded_depthwise_convs_match_the_interpreter() {
    let cases = [
        ("[3,1,3,3]", "pads=[1,1,1,1], group=3"),
        ("[3,1,3,3]", "strides=[2,2], pads=[1,1,1,1], group=3"),
        ("[3,1,3,3]", "strides=[2,2], pads=[0,1,1,0], group=3"),
        (
            "[3,1,3,3]",
            "strides=[1,2], dilations=[2,1], pads=[2,1,2,1], group=3",
        ),
        ("[3,1,5,5]", "strides=[2,2], pads=[2,2,2,2], group=3"),
        ("[3,1,5,5]", "pads=[2,2,2,2], group=3"),
        ("[3,1,1,3]", "pads=[0,2,0,2], group=3"),
    ];
    for (wi, w) in [4usize, 6, 7, 9, 14, 17, 301].into_iter().enumerate() {
        for (i, (ws, attrs)) in cases.iter().enumerate() {
            let seed = 70 + (wi * 10 + i) as u64;
            assert!(check_depthwise([2, 3, 8, w], ws, attrs, (0.0, 6.0), seed));
        }
    }
}

/// Stride-1 depthwise convs read their input planes in place (no padded
/// copy): padding rows and the side padding of the edge blocks shifted in
/// as zeros, for pads 0 to 3 on each side (asymmetric too), windows 1x1 to
/// 7x7, heights where every output row touches the top or bottom padding,
/// and widths from one block to past the fully unrolled rows.
#[test]
fn in_place_depthwise_convs_match_the_interpreter() {
    let cases = [
        ("[2,1,3,3]", "pads=[1,1,1,1], group=2"),
        ("[2,1,3,3]", "pads=[0,0,0,0], group=2"),
        ("[2,1,3,3]", "pads=[2,0,0,3], group=2"),
        ("[2,1,5,5]", "pads=[2,2,2,2], group=2"),
        ("[2,1,5,5]", "pads=[3,1,1,3], group=2"),
        ("[2,1,7,7]", "pads=[3,3,3,3], group=2"),
        ("[2,1,1,1]", "pads=[1,1,1,1], group=2"),
        ("[2,1,3,1]", "pads=[1,0,1,0], group=2"),
    ];
    let mut checked = 0;
    for (hi, h) in [1usize, 2, 3, 9].into_iter().enumerate() {
        for (wi, w) in [4usize, 5, 7, 9, 13, 131].into_iter().enumerate() {
            for (i, (ws, attrs)) in cases.iter().enumerate() {
                let seed = 900 + (hi * 100 + wi * 10 + i) as u64;
                checked += check_depthwise([1, 2, h, w], ws, attrs, (-1.0, 1.0), seed) as usize;
            }
        }
    }
    // Most geometries fit (only the 7x7 window on the shortest planes
    // does not).
    assert!(checked >= 180, "{checked} geometries checked");
}

/// Depthwise planes whose padded scratch is too big to stay in L1 copy
/// their rows as the row blocks first need them: stride 2 (stride 1 reads
/// in place) with symmetric and asymmetric pads, 3x3 and 5x5, odd sizes.
#[test]
fn streamed_depthwise_planes_match_the_interpreter() {
    let cases = [
        ("[2,1,3,3]", "strides=[2,2], pads=[1,1,1,1], group=2"),
        ("[2,1,3,3]", "strides=[2,2], pads=[0,1,2,0], group=2"),
        ("[2,1,5,5]", "strides=[2,2], pads=[2,2,2,2], group=2"),
        (
            "[2,1,3,3]",
            "strides=[1,1], dilations=[2,2], pads=[2,2,2,2], group=2",
        ),
    ];
    for (si, (h, w)) in [(80usize, 120usize), (97, 131)].into_iter().enumerate() {
        for (i, (ws, attrs)) in cases.iter().enumerate() {
            let seed = 1200 + (si * 10 + i) as u64;
            assert!(check_depthwise([1, 2, h, w], ws, attrs, (0.0, 6.0), seed));
        }
    }
}
