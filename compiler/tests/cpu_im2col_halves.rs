//! Single-chunk im2col convs of one image split across two tasks by
//! halves of their output rows when the height is even (each task packs
//! and multiplies its half; one task given both does the whole chunk at
//! once), their GEMM splitting itself when it is odd (halves would be
//! uneven): stride 1 and stride 2 (phased), no epilogue and a fused
//! bias, residual and Relu, against the interpreter, and at 2 and 3
//! threads bitwise equal to one thread.

mod cpu_common;

use cpu_common::{bits, check_with, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, ConvAlgo, CpuOptions};
use dnnc_runtime::cpu::KernelSplit;

fn im2col() -> CpuOptions {
    CpuOptions {
        conv_algo: Some(ConvAlgo::Im2col),
        ..Default::default()
    }
}

/// (in channels, out channels, kernel, stride, pad, size, fused residual)
type Case = (usize, usize, usize, usize, usize, usize, bool);

const CASES: [Case; 5] = [
    (16, 40, 3, 2, 1, 20, false),
    (16, 40, 3, 2, 1, 21, true),
    (24, 56, 3, 1, 1, 9, true),
    (8, 29, 1, 2, 0, 14, false),
    (12, 64, 5, 2, 2, 15, true),
];

fn inputs(i: usize) -> (dnnc_ir::Graph, Vec<(String, dnnc_ir::Tensor)>) {
    let (c, m, k, s, p, h, res) = CASES[i];
    let oh = (h + 2 * p - k) / s + 1;
    let (rin, body) = if res {
        (
            format!("  input %r: f32[1,{m},{oh},{oh}]\n"),
            "  %a = Add(%c, %r)\n  %y = Relu(%a)\n  output %y\n",
        )
    } else {
        (String::new(), "  output %c\n")
    };
    let src = format!(
        "  input %x: f32[1,{c},{h},{h}]\n{rin}\
         param %w: f32[{m},{c},{k},{k}] = he(seed={i})\n\
         param %b: f32[{m}] = uniform(low=-1, high=1, seed=7)\n\
         %c = Conv2d(%x, %w, %b) {{strides=[{s},{s}], pads=[{p},{p},{p},{p}]}}\n{body}"
    );
    let mut ins = vec![(
        "x".to_string(),
        rand_f32(&[1, c, h, h], 500 + i as u64, -2.0, 2.0),
    )];
    if res {
        ins.push((
            "r".to_string(),
            rand_f32(&[1, m, oh, oh], 600 + i as u64, -1.0, 1.0),
        ));
    }
    (parse(&src), ins)
}

#[test]
fn row_halves_im2col_matches_the_interpreter() {
    for i in 0..CASES.len() {
        let (g, ins) = inputs(i);
        check_with(&g, &ins, 1e-4, 1e-5, &im2col());
    }
}

#[test]
fn row_halves_im2col_runs_as_two_tasks_bitwise() {
    for (i, &(c, _, k, s, p, h, _)) in CASES.iter().enumerate() {
        let even = ((h + 2 * p - k) / s + 1).is_multiple_of(2);
        let (g, ins) = inputs(i);
        let mut exe = compile_cpu(&g, &im2col()).expect("compile");
        let k = exe
            .steps()
            .iter()
            .position(|s| s.op.starts_with("Conv2d"))
            .expect("a conv kernel");
        let want = if even { 2 } else { 1 };
        assert_eq!(exe.steps()[k].split, want, "case {i} (c = {c})");
        let one = exe.run(&ins).expect("run");
        exe.set_kernel_split(KernelSplit::Always);
        for t in [2, 3] {
            exe.set_threads(t).expect("threads");
            assert_eq!(exe.step_tasks()[k], want, "case {i} on {t} threads");
            let r = exe.run(&ins).expect("run");
            assert_eq!(bits(&one), bits(&r), "case {i} with {t} threads");
        }
    }
}
