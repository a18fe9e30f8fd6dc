//! Stride-2 im2col through padded phase rows: odd and even kernel sizes,
//! symmetric, asymmetric and no padding, input widths and heights around
//! the phase-row tails, groups, several row chunks per image, a batch, and
//! a fused epilogue, with the im2col algorithm forced, against the
//! interpreter; and split across threads, bitwise equal to one thread.
//! With the filter a weight the GEMM gathers its B straight from the phase
//! rows (an implicit im2col) when `k >= 128` or A has at most three
//! AVX-512 row panels, reading strips that lie in one output row in
//! place; with more rows and a small `k` the column matrix is written and
//! read in place by the packed GEMM; with the filter a run-time input the
//! column matrix is written and multiplied by the unpacked GEMM. All are
//! covered.

mod cpu_common;

use cpu_common::{bits, check_with, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, ConvAlgo, CpuOptions};

fn im2col() -> CpuOptions {
    CpuOptions {
        conv_algo: Some(ConvAlgo::Im2col),
        ..Default::default()
    }
}

/// (channels, groups, out channels, kernel, pads, height, width)
type Case = (usize, usize, usize, [usize; 2], [usize; 4], usize, usize);

const CASES: [Case; 12] = [
    (3, 1, 8, [7, 7], [3, 3, 3, 3], 30, 30),
    // Groups with k = 16 * 9 >= 128: the gathered B per group.
    (32, 2, 8, [3, 3], [1, 1, 1, 1], 14, 15),
    (3, 1, 8, [7, 7], [3, 3, 3, 3], 29, 31),
    (3, 1, 16, [3, 3], [0, 0, 0, 0], 23, 23),
    (4, 1, 8, [3, 3], [1, 1, 1, 1], 14, 15),
    (4, 1, 8, [3, 3], [0, 1, 2, 0], 13, 9),
    (6, 2, 8, [3, 3], [1, 1, 1, 1], 16, 16),
    (2, 1, 4, [2, 2], [0, 0, 1, 1], 11, 12),
    (2, 1, 4, [4, 5], [2, 1, 1, 2], 12, 9),
    // Many rows of a narrow map: several chunks per image.
    (64, 1, 8, [3, 3], [1, 1, 1, 1], 120, 8),
    // k = 27 over 48 rows (four panels): the written columns.
    (3, 1, 48, [3, 3], [1, 1, 1, 1], 17, 19),
    // k = 27 over 24 rows, 75-column output rows: gathered, two strips of
    // each row read in place, the third copied.
    (3, 1, 24, [3, 3], [1, 1, 1, 1], 9, 150),
];

fn graph(i: usize) -> (dnnc_ir::Graph, Vec<usize>) {
    graph_with(
        i,
        format!("param %w: f32[{{m}},{{cg}},{{kh}},{{kw}}] = he(seed={i})"),
    )
}

/// Case `i` with the filter declared by `filter` (a template over `m`,
/// `cg`, `kh`, `kw`).
fn graph_with(i: usize, filter: String) -> (dnnc_ir::Graph, Vec<usize>) {
    let (c, g, m, [kh, kw], [pt, pl, pb, pr], h, w) = CASES[i];
    let shape = vec![2, c, h, w];
    let filter = filter
        .replace("{m}", &m.to_string())
        .replace("{cg}", &(c / g).to_string())
        .replace("{kh}", &kh.to_string())
        .replace("{kw}", &kw.to_string());
    let src = format!(
        "input %x: f32[2,{c},{h},{w}]\n\
         {filter}\n\
         param %b: f32[{m}] = uniform(low=-1, high=1, seed=5)\n\
         %c = Conv2d(%x, %w, %b) {{strides=[2,2], pads=[{pt},{pl},{pb},{pr}], group={g}}}\n\
         %y = Relu(%c)\n\
         output %y"
    );
    (parse(&src), shape)
}

#[test]
fn phased_im2col_matches_the_interpreter() {
    for i in 0..CASES.len() {
        let (g, shape) = graph(i);
        let x = rand_f32(&shape, 300 + i as u64, -2.0, 2.0);
        check_with(&g, &[("x".into(), x)], 1e-4, 1e-5, &im2col());
    }
}

#[test]
fn phased_im2col_splits_bitwise() {
    for i in [0, 1, 6, 9, 10, 11] {
        let (g, shape) = graph(i);
        let x = rand_f32(&shape, 400 + i as u64, -2.0, 2.0);
        let mut exe = compile_cpu(&g, &im2col()).expect("compile");
        let one = exe.run(&[("x".into(), x.clone())]).expect("run");
        for t in [2, 3] {
            exe.set_threads(t).expect("threads");
            let r = exe.run(&[("x".into(), x.clone())]).expect("run");
            assert_eq!(bits(&one), bits(&r), "case {i} with {t} threads");
        }
    }
}

/// The filter as a run-time input: nothing is packed at compile time, so
/// the columns are written out and the plain GEMM multiplies them.
#[test]
fn phased_im2col_with_a_runtime_filter_matches_the_interpreter() {
    for (i, &(c, grp, m, [kh, kw], ..)) in CASES.iter().enumerate() {
        let (g, shape) = graph_with(i, "input %w: f32[{m},{cg},{kh},{kw}]".into());
        let x = rand_f32(&shape, 500 + i as u64, -2.0, 2.0);
        let w = rand_f32(&[m, c / grp, kh, kw], 600 + i as u64, -0.5, 0.5);
        check_with(
            &g,
            &[("x".into(), x), ("w".into(), w)],
            1e-4,
            1e-5,
            &im2col(),
        );
    }
}
