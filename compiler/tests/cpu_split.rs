//! Intra-op splitting of generated kernels (the kernel ABI's task range):
//! every lowering that declares a split extent gives bitwise the result of
//! one task when run as 2, 3 or 7 tasks, on shapes whose units do not
//! divide evenly, and matches the interpreter; the zoo models give bitwise
//! the same outputs with kernels split on 1, 2 and 3 threads.

mod cpu_common;

use cpu_common::{bits, check_with, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};
use dnnc_ir::{Graph, Tensor};
use dnnc_runtime::cpu::{Concurrency, KernelSplit};
use std::path::PathBuf;

/// Checks `g` against the interpreter, then runs it on 1 thread and with
/// every splittable kernel forced into 2, 3 and 7 tasks (no wave run
/// concurrently): bitwise equal.
/// `op` names an op whose kernel must declare a split (so the test fails
/// if the lowering stops splitting).
fn split_equal(g: &Graph, inputs: &[(String, Tensor)], op: &str) {
    check_with(g, inputs, 1e-4, 1e-5, &CpuOptions::default());
    let mut exe = compile_cpu(g, &CpuOptions::default()).unwrap();
    let one = exe.run(inputs).unwrap();
    assert!(
        exe.steps().iter().any(|s| s.op.contains(op) && s.split > 1),
        "no {op} kernel declares a split: {:?}",
        exe.steps()
            .iter()
            .map(|s| (&s.op, s.split))
            .collect::<Vec<_>>()
    );
    exe.set_kernel_split(KernelSplit::Always);
    // Steps split only when they run alone, not inside a concurrent wave.
    exe.set_concurrency(Concurrency::Never);
    for t in [2, 3, 7] {
        exe.set_threads(t).unwrap();
        let tasks = exe.step_tasks();
        assert!(
            exe.steps()
                .iter()
                .zip(tasks)
                .any(|(s, &n)| s.op.contains(op) && n == t.min(s.split) && n > 1),
            "{op} did not run as {t} tasks: {tasks:?}"
        );
        let r = exe.run(inputs).unwrap();
        assert_eq!(bits(&one), bits(&r), "{op} with {t} threads");
    }
}

fn x(shape: &[usize], seed: u64) -> Vec<(String, Tensor)> {
    vec![("x".to_string(), rand_f32(shape, seed, -2.0, 2.0))]
}

#[test]
fn depthwise_conv_with_epilogue_splits_over_planes() {
    // 2 images x 13 channels = 26 planes (not a multiple of 3 or 7).
    let g = parse(
        "  input %x: f32[2,13,17,19]
  param %w: f32[13,1,3,3] = he(seed=3)
  param %b: f32[13] = he(seed=4)
  %c = Conv2d(%x, %w, %b) {pads=[1,1,1,1], group=13}
  %y = Relu(%c)
  output %y",
    );
    split_equal(&g, &x(&[2, 13, 17, 19], 1), "Conv2d");
}

/// Batch-1 depthwise convs on maps wide enough that the pointwise conv
/// before them splits by pixels split by bands of output rows instead of
/// planes (see `band_rows` in the code generator): the in-place stride-1
/// kernel (edge rows inside a band only when the band holds them), 5x5
/// windows with two padding rows, and the stride-2 scratch kernel with its
/// rows copied per band, both copied first and streamed. Each splits into
/// bands of whole rows that do not divide the row count evenly at 3 and 7
/// tasks.
#[test]
fn batch_one_depthwise_convs_split_over_row_bands() {
    let cases = [
        ([1usize, 3, 24, 32], "[3,1,3,3]", "pads=[1,1,1,1], group=3"),
        ([1, 3, 24, 32], "[3,1,5,5]", "pads=[2,2,2,2], group=3"),
        ([1, 3, 26, 18], "[3,1,3,3]", "pads=[0,0,0,0], group=3"),
        (
            [1, 3, 48, 64],
            "[3,1,3,3]",
            "strides=[2,2], pads=[1,1,1,1], group=3",
        ),
        (
            [1, 2, 128, 128],
            "[2,1,3,3]",
            "strides=[2,2], pads=[0,1,1,0], group=2",
        ),
    ];
    for (i, (shape, ws, attrs)) in cases.into_iter().enumerate() {
        let [_, c, h, w] = shape;
        let g = parse(&format!(
            "  input %x: f32[1,{c},{h},{w}]
  param %w: f32{ws} = he(seed={i})
  param %b: f32[{c}] = he(seed=4)
  %c = Conv2d(%x, %w, %b) {{{attrs}}}
  %y = Clip(%c) {{min=0.0, max=6.0}}
  output %y"
        ));
        let oh = g.value(g.outputs()[0]).ty.shape[2];
        let exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
        let split = exe
            .steps()
            .iter()
            .find(|s| s.op.contains("Conv2d"))
            .unwrap()
            .split;
        // Units of whole rows (not the `c` planes).
        assert!(
            split > c && oh.is_multiple_of(split),
            "{attrs}: {split} units for {oh} rows"
        );
        split_equal(&g, &x(&shape, 10 + i as u64), "Conv2d");
    }
}

#[test]
fn im2col_conv_with_fused_epilogue_splits_over_images_groups_and_chunks() {
    // 2 images x 2 groups, one chunk each: 4 units; bias, residual Add and
    // Relu fused into the packed GEMM.
    let g = parse(
        "  input %x: f32[2,6,21,19]
  param %w: f32[8,3,3,3] = he(seed=3)
  param %b: f32[8] = he(seed=4)
  param %r: f32[2,8,11,10] = he(seed=5)
  %c = Conv2d(%x, %w, %b) {strides=[2,2], pads=[1,1,1,1], group=2}
  %s = Add(%c, %r)
  %y = Relu(%s)
  output %y",
    );
    split_equal(&g, &x(&[2, 6, 21, 19], 1), "Conv2d");
    // A 7x7 stride-2 stem: 33 output rows in two chunks of 17 and 16.
    let g = parse(
        "  input %x: f32[1,3,66,66]
  param %w: f32[16,3,7,7] = he(seed=6)
  param %b: f32[16] = he(seed=7)
  %c = Conv2d(%x, %w, %b) {strides=[2,2], pads=[3,3,3,3]}
  %y = Relu(%c)
  output %y",
    );
    split_equal(&g, &x(&[1, 3, 66, 66], 2), "Conv2d");
}

#[test]
fn batched_pointwise_convs_split_over_images_and_groups() {
    // 7 images (not a multiple of 2 or 3): one whole GEMM per image, with
    // bias, residual Add and Relu fused into it.
    let g = parse(
        "  input %x: f32[7,24,9,9]
  param %w: f32[40,24,1,1] = he(seed=3)
  param %b: f32[40] = he(seed=4)
  param %r: f32[7,40,9,9] = he(seed=5)
  %c = Conv2d(%x, %w, %b) {strides=[1,1], pads=[0,0,0,0]}
  %s = Add(%c, %r)
  %y = Relu(%s)
  output %y",
    );
    split_equal(&g, &x(&[7, 24, 9, 9], 1), "Conv2d");
    // 3 images x 2 groups = 6 GEMMs, no epilogue.
    let g = parse(
        "  input %x: f32[3,8,6,7]
  param %w: f32[10,4,1,1] = he(seed=6)
  %y = Conv2d(%x, %w) {strides=[1,1], pads=[0,0,0,0], group=2}
  output %y",
    );
    split_equal(&g, &x(&[3, 8, 6, 7], 2), "Conv2d");
}

#[test]
fn strided_depthwise_conv_splits() {
    let g = parse(
        "  input %x: f32[1,11,23,21]
  param %w: f32[11,1,5,5] = he(seed=5)
  %y = Conv2d(%x, %w) {strides=[2,2], pads=[2,2,2,2], group=11}
  output %y",
    );
    split_equal(&g, &x(&[1, 11, 23, 21], 2), "Conv2d");
}

#[test]
fn max_and_average_pools_split_over_planes() {
    for body in [
        "%p = MaxPool(%x) {kernel=[3,3], strides=[2,2], pads=[1,1,1,1]}",
        "%p = MaxPool(%x) {kernel=[2,2], strides=[2,2]}",
        "%p = AveragePool(%x) {kernel=[3,3], strides=[1,1], pads=[1,1,1,1], count_include_pad=1}",
        "%p = AveragePool(%x) {kernel=[3,3], strides=[2,2], pads=[1,1,1,1], ceil_mode=1}",
    ] {
        let g = parse(&format!(
            "  input %x: f32[2,5,19,17]
  {body}
  %y = Sigmoid(%p)
  output %y"
        ));
        let op = if body.contains("MaxPool") {
            "MaxPool"
        } else {
            "AveragePool"
        };
        split_equal(&g, &x(&[2, 5, 19, 17], 3), op);
    }
}

/// One image's stride-2 max pools without an epilogue split over bands
/// of output rows, every plane's rows of its band per task (a stem's
/// pool reads what the GEMM before it wrote on the same core): odd row
/// counts, padding and ceil mode, and NaNs in three planes (those planes'
/// bands are recomputed by the exact loop, which propagates them), bitwise
/// across thread counts and against the interpreter.
#[test]
fn batch_one_stride2_max_pools_split_over_row_bands() {
    for (body, oh) in [
        (
            "%p = MaxPool(%x) {kernel=[3,3], strides=[2,2], pads=[1,1,1,1]}",
            34,
        ),
        (
            "%p = MaxPool(%x) {kernel=[3,3], strides=[2,2], ceil_mode=1}",
            33,
        ),
        ("%p = MaxPool(%x) {kernel=[2,2], strides=[2,2]}", 33),
    ] {
        let g = parse(&format!(
            "  input %x: f32[1,5,67,29]
  {body}
  output %p"
        ));
        let mut ins = x(&[1, 5, 67, 29], 14);
        if let Tensor::F32(a) = &mut ins[0].1 {
            a[[0, 1, 3, 4]] = f32::NAN;
            a[[0, 3, 30, 20]] = f32::NAN;
            a[[0, 4, 66, 28]] = f32::NAN;
        }
        let exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
        let pool = exe.steps().iter().find(|s| s.op == "MaxPool").unwrap();
        assert_eq!(pool.split, oh, "{body}: split over {} units", pool.split);
        split_equal(&g, &ins, "MaxPool");
    }
}

/// One-copy movement kernels split over the outer rows of the copy
/// (Transpose, a strided Slice, Expand) or over 4096-element chunks when
/// the copy is one run (a misaligned contiguous Slice, a Split copying
/// its one piece that cannot be a view).
#[test]
fn copies_split_over_outer_rows_or_chunks() {
    for (src, op) in [
        ("%y = Transpose(%x) {perm=[0,2,1,3]}", "Transpose"),
        (
            "%y = Slice(%x) {starts=[1], ends=[9], axes=[3], steps=[2]}",
            "Slice",
        ),
    ] {
        let g = parse(&format!(
            "  input %x: f32[2,6,20,11]\n  {src}\n  %z = Neg(%y)\n  output %z"
        ));
        split_equal(&g, &x(&[2, 6, 20, 11], 11), op);
    }
    let g = parse(
        "  input %x: f32[1,5,1,9]\n  %y = Expand(%x) {shape=[3,5,4,9]}\n  %z = Neg(%y)\n  output %z",
    );
    split_equal(&g, &x(&[1, 5, 1, 9], 12), "Expand");
    // 4 bytes into the operand: contiguous, but no aligned view.
    let g = parse(
        "  input %x: f32[1,20001]\n  %e = Exp(%x)\n  %y = Slice(%e) {starts=[1], ends=[20001], axes=[1]}\n  %z = Neg(%y)\n  output %z",
    );
    split_equal(&g, &x(&[1, 20001], 13), "Slice");
    // The first piece is a graph output (copied, in 4096-element chunks);
    // the second views the operand.
    let g = parse(
        "  input %x: f32[1,32,40,40]\n  %e = Exp(%x)\n  %a, %b = Split(%e) {axis=1, split=[16,16]}\n  %z = Neg(%b)\n  output %a, %z",
    );
    split_equal(&g, &x(&[1, 32, 40, 40], 14), "Split");
}

/// A Concat along a later axis that is a copy (its parts are also parts
/// of another Concat, so not all can be built in place: DenseNet's
/// pattern) splits over the leading axis, each task copying every part of
/// its images; 5 images do not divide evenly into 2 or 3 tasks.
#[test]
fn concatenations_of_a_batch_split_over_images() {
    let g = parse(
        "  input %x: f32[5,3,6,7]\n  input %w: f32[5,2,6,7]\n  %a = Exp(%x)\n  %b = Neg(%w)\n\
         %c1 = Concat(%a, %b) {axis=1}\n  %c2 = Concat(%b, %c1, %a) {axis=1}\n\
         %z = Neg(%c2)\n  output %z, %c1",
    );
    let ins = vec![
        ("x".to_string(), rand_f32(&[5, 3, 6, 7], 21, -2.0, 2.0)),
        ("w".to_string(), rand_f32(&[5, 2, 6, 7], 22, -2.0, 2.0)),
    ];
    split_equal(&g, &ins, "Concat");
}

#[test]
fn broadcasting_elementwise_splits_over_leading_axes() {
    let g = parse(
        "  input %x: f32[3,7,11,13]
  param %b: f32[7,1,13] = he(seed=6)
  param %s: f32[11,1] = he(seed=7)
  %a = Add(%x, %b)
  %m = Mul(%a, %s)
  %y = Tanh(%m)
  output %y",
    );
    split_equal(&g, &x(&[3, 7, 11, 13], 4), "Add");
    // A contiguous 2-D domain: the rows are the units.
    let g = parse(
        "  input %x: f32[67,33]
  %e = Exp(%x)
  %y = Neg(%e)
  output %y",
    );
    split_equal(&g, &x(&[67, 33], 5), "Exp");
}

#[test]
fn reductions_and_global_pools_split_over_results() {
    for (shape, body, op) in [
        (
            vec![2usize, 9, 7, 5],
            "%r = GlobalAveragePool(%x)\n  %y = Relu(%r)",
            "GlobalAveragePool",
        ),
        (vec![2, 9, 7, 5], "%y = GlobalMaxPool(%x)", "GlobalMaxPool"),
        (
            vec![5, 7, 11],
            "%y = ReduceSum(%x) {axes=[-1], keepdims=0}",
            "ReduceSum",
        ),
        (
            vec![5, 7, 11],
            "%y = ReduceMean(%x) {axes=[1], keepdims=1}",
            "ReduceMean",
        ),
        (
            vec![3, 7, 10, 9],
            "%r = ReduceMax(%x) {axes=[2,3], keepdims=1}\n  %y = Sigmoid(%r)",
            "ReduceMax",
        ),
    ] {
        let dims = shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let g = parse(&format!("  input %x: f32[{dims}]\n  {body}\n  output %y"));
        split_equal(&g, &x(&shape, 6), op);
    }
}

#[test]
fn softmax_splits_over_lanes() {
    for (body, op) in [
        ("%y = Softmax(%x) {axis=-1}", "Softmax"),
        ("%y = Softmax(%x) {axis=1}", "Softmax"),
        ("%s = LogSoftmax(%x) {axis=2}\n  %y = Neg(%s)", "LogSoftmax"),
    ] {
        let g = parse(&format!("  input %x: f32[3,11,13]\n  {body}\n  output %y"));
        split_equal(&g, &x(&[3, 11, 13], 7), op);
    }
}

/// The zoo models with 2 threads under the W-D rule and with every
/// splittable kernel split on 2 and 3 threads: bitwise equal to 1 thread.
#[test]
#[ignore = "release-mode test on real models (CI runs it with --include-ignored)"]
fn zoo_models_split_kernels_bitwise() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/models");
    for name in [
        "mobilenet_v2",
        "shufflenet_v2_x1_0",
        "squeezenet1_1",
        "googlenet",
        "resnet18",
    ] {
        let dir = root.join(name);
        if !dir.exists() {
            println!("SKIPPED: {} not found", dir.display());
            continue;
        }
        let g = dnnc_compiler::onnx::import_onnx_file(dir.join("model.onnx")).unwrap();
        let xin = dnnc_ir::tensor::read_npy(&dir.join("input.npy")).unwrap();
        let ins = vec![(g.value(g.inputs()[0]).name.clone(), xin)];
        let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
        let one = exe.run(&ins).unwrap();
        exe.set_threads(2).unwrap();
        let split = exe.step_tasks().iter().filter(|&&t| t > 1).count();
        println!("{name}: {split} kernels split on 2 threads");
        assert_eq!(bits(&one), bits(&exe.run(&ins).unwrap()), "{name} auto");
        exe.set_kernel_split(KernelSplit::Always);
        for t in [2, 3] {
            exe.set_threads(t).unwrap();
            assert!(exe.step_tasks().iter().any(|&n| n > 1), "{name}");
            assert_eq!(
                bits(&one),
                bits(&exe.run(&ins).unwrap()),
                "{name} always, {t} threads"
            );
        }
    }
}

#[test]
fn profile_shows_the_tasks_each_kernel_ran_as() {
    let g = parse(
        "  input %x: f32[1,64,112,112]
  %p = MaxPool(%x) {kernel=[3,3], strides=[1,1], pads=[1,1,1,1]}
  output %p",
    );
    let ins = x(&[1, 64, 112, 112], 8);
    let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    exe.set_threads(2).unwrap();
    // 64 planes of 112x112 outputs, 9 taps each (7.2M units): above twice
    // the per-task minimum, so the W-D rule splits it in two.
    assert_eq!(exe.step_tasks(), &[2]);
    let (_, times) = exe.run_profiled(&ins).unwrap();
    let report = dnnc_compiler::bench::render_profile(&g, &exe, &times);
    assert!(
        report.contains("tasks") && report.contains("2/64"),
        "{report}"
    );
}
