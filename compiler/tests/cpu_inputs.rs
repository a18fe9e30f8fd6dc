//! Graph inputs are read where the caller's tensors hold them when their
//! elements lie contiguously (no copy into the arena), and copied when they
//! do not: both give the interpreter's results, a run never writes into
//! the caller's tensors, and outputs that are views of an input read it.

mod cpu_common;

use cpu_common::{assert_close, check, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};
use dnnc_ir::Tensor;

fn graph() -> dnnc_ir::Graph {
    parse(
        "input %x: f32[2,3,8,8]\n\
         input %s: f32[2,3,8,8]\n\
         param %w: f32[4,3,3,3] = he(seed=1)\n\
         %c = Conv2d(%x, %w) {pads=[1,1,1,1]}\n\
         %r = Relu(%c)\n\
         %a = Add(%x, %s)\n\
         %f = Flatten(%a) {axis=1}\n\
         output %r\n\
         output %f",
    )
}

#[test]
fn contiguous_inputs_are_read_in_place_and_left_unchanged() {
    let g = graph();
    let feeds = |seed: u64| -> Vec<(String, Tensor)> {
        vec![
            ("x".into(), rand_f32(&[2, 3, 8, 8], seed, -2.0, 2.0)),
            ("s".into(), rand_f32(&[2, 3, 8, 8], seed + 1, -2.0, 2.0)),
        ]
    };
    let (a, b) = (feeds(1), feeds(3));
    check(&g, &a);
    check(&g, &b);
    let exe = compile_cpu(&g, &CpuOptions::default()).expect("compile");
    let ra = exe.run(&a).expect("run");
    // The cached run state is bound to the new tensors, not the old ones:
    // the same results as an executable that never saw `a`.
    let rb = exe.run(&b).expect("run");
    let fresh = compile_cpu(&g, &CpuOptions::default()).expect("compile");
    let want = fresh.run(&b).expect("run");
    for (x, y) in rb.iter().zip(&want) {
        assert_close("second run", x, y, 0.0, 0.0);
    }
    assert_ne!(ra, rb);
    // No run wrote into the caller's tensors.
    assert_eq!(a, feeds(1));
    assert_eq!(b, feeds(3));
}

#[test]
fn strided_inputs_are_copied_and_give_the_same_results() {
    let g = graph();
    let x = rand_f32(&[2, 3, 8, 8], 3, -2.0, 2.0);
    let s = rand_f32(&[2, 3, 8, 8], 4, -2.0, 2.0);
    // The same values held transposed in memory: not row-major.
    let Tensor::F32(xa) = &x else { unreachable!() };
    let mut t = xa.clone();
    t.swap_axes(2, 3);
    let t = t.as_standard_layout().to_owned();
    let mut xt = t;
    xt.swap_axes(2, 3);
    assert!(xt.as_slice().is_none(), "the test input must be strided");
    assert_eq!(&xt, xa);
    let exe = compile_cpu(&g, &CpuOptions::default()).expect("compile");
    let want = exe
        .run(&[("x".into(), x.clone()), ("s".into(), s.clone())])
        .expect("run");
    let got = exe
        .run(&[("x".into(), Tensor::F32(xt)), ("s".into(), s.clone())])
        .expect("run");
    for (a, b) in got.iter().zip(&want) {
        assert_close("strided input", a, b, 0.0, 0.0);
    }
}

#[test]
fn an_output_that_is_a_view_of_an_input_reads_it() {
    let g = parse(
        "input %x: f32[2,3,4]\n\
         %f = Flatten(%x) {axis=1}\n\
         output %f",
    );
    let x = rand_f32(&[2, 3, 4], 5, -1.0, 1.0);
    let exe = compile_cpu(&g, &CpuOptions::default()).expect("compile");
    let y = exe.run(&[("x".into(), x.clone())]).expect("run");
    let Tensor::F32(xa) = &x else { unreachable!() };
    let Tensor::F32(ya) = &y[0] else {
        panic!("f32 output")
    };
    assert_eq!(ya.shape(), &[2, 12]);
    assert_eq!(
        ya.iter().copied().collect::<Vec<_>>(),
        xa.iter().copied().collect::<Vec<_>>()
    );
}

/// An input whose elements start 4 bytes past a 64-byte boundary (an owned
/// array sliced from the second element) is read in place as well: no
/// kernel assumes the arena's alignment of its operands.
#[test]
fn misaligned_inputs_are_read_in_place() {
    let g = parse(
        "input %x: f32[1,8,12,12]\n\
         param %w: f32[8,1,3,3] = he(seed=1)\n\
         %d = Conv2d(%x, %w) {pads=[1,1,1,1], group=8}\n\
         param %p: f32[16,8,1,1] = he(seed=2)\n\
         %c = Conv2d(%d, %p)\n\
         param %s: f32[16,8,3,3] = he(seed=3)\n\
         %e = Conv2d(%x, %s) {strides=[2,2], pads=[1,1,1,1]}\n\
         %m = MaxPool(%x) {kernel=[3,3], strides=[2,2], pads=[1,1,1,1]}\n\
         output %c\n\
         output %e\n\
         output %m",
    );
    let n = 8 * 12 * 12;
    let Tensor::F32(flat) = rand_f32(&[n + 1], 7, -2.0, 2.0) else {
        unreachable!()
    };
    let flat = flat.into_dimensionality::<ndarray::Ix1>().unwrap();
    let shifted = flat.slice_move(ndarray::s![1..]);
    let x = shifted.into_shape_with_order(vec![1, 8, 12, 12]).unwrap();
    let addr = x.as_slice().expect("contiguous").as_ptr() as usize;
    assert_ne!(addr % 16, 0, "the test input must be misaligned");
    check(&g, &[("x".into(), Tensor::F32(x))]);
}
