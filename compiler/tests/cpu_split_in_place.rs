//! Splits as views: a Split along an axis with only size-1 axes before it
//! gives results that are slices of its operand, so it costs no kernel and
//! no copy (merged branches end in one). Outputs match the interpreter at
//! 1 and 2 threads, and the cases that cannot be views (a batch axis
//! before the split axis, a misaligned offset, a result that is a graph
//! output or a part of an in-place Concat) keep a Split kernel that
//! copies only those results, and still match.

mod cpu_common;

use cpu_common::{bits, check, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};
use dnnc_ir::{Graph, Tensor};

fn x(shape: &[usize], seed: u64) -> Vec<(String, Tensor)> {
    vec![("x".to_string(), rand_f32(shape, seed, -2.0, 2.0))]
}

/// Split steps of `g`'s executable.
fn split_steps(g: &Graph) -> usize {
    let exe = compile_cpu(g, &CpuOptions::default()).unwrap();
    exe.steps()
        .iter()
        .filter(|s| s.op.contains("Split"))
        .count()
}

/// Three 1x1 convs of one input merged into one, then split per branch;
/// each branch goes on with its own ops.
const MERGED: &str = "  input %x: f32[1,8,12,12]
  param %w: f32[40,8,1,1] = he(seed=1)
  param %w2: f32[8,16,3,3] = he(seed=2)
  %m = Conv2d(%x, %w)
  %r = Relu(%m)
  %a, %b, %c = Split(%r) {axis=1, split=[16,16,8]}
  %b2 = Conv2d(%b, %w2) {pads=[1,1,1,1]}
  %c2 = Sigmoid(%c)
  %s = Add(%a, %a)
  output %s
  output %b2
  output %c2";

#[test]
fn results_view_their_slices_and_the_split_disappears() {
    let g = parse(MERGED);
    check(&g, &x(&[1, 8, 12, 12], 1));
    assert_eq!(split_steps(&g), 0);
    let inputs = x(&[1, 8, 12, 12], 2);
    let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    let one = exe.run(&inputs).unwrap();
    exe.set_threads(2).unwrap();
    for _ in 0..3 {
        assert_eq!(bits(&one), bits(&exe.run(&inputs).unwrap()));
    }
}

#[test]
fn a_split_of_a_graph_input_views_the_input() {
    let g = parse(
        "  input %x: f32[1,32,4,4]
  %a, %b = Split(%x) {axis=1, split=[16,16]}
  %y = Sub(%a, %b)
  output %y",
    );
    check(&g, &x(&[1, 32, 4, 4], 3));
    assert_eq!(split_steps(&g), 0);
}

#[test]
fn splits_that_cannot_be_views_keep_their_kernel() {
    // Batch 2 before the split axis: the results interleave.
    let g = parse(
        "  input %x: f32[2,32,4,4]
  %a, %b = Split(%x) {axis=1, split=[16,16]}
  %y = Sub(%a, %b)
  output %y",
    );
    check(&g, &x(&[2, 32, 4, 4], 4));
    assert_eq!(split_steps(&g), 1);
    // 3 channels of 5x5: the second result's offset (300 bytes) breaks
    // the 64-byte alignment.
    let g = parse(
        "  input %x: f32[1,6,5,5]
  %a, %b = Split(%x) {axis=1, split=[3,3]}
  %y = Sub(%a, %b)
  output %y",
    );
    check(&g, &x(&[1, 6, 5, 5], 5));
    assert_eq!(split_steps(&g), 1);
    // A result that is a graph output.
    let g = parse(
        "  input %x: f32[1,32,4,4]
  %e = Exp(%x)
  %a, %b = Split(%e) {axis=1, split=[16,16]}
  %y = Sub(%a, %b)
  output %y
  output %a",
    );
    check(&g, &x(&[1, 32, 4, 4], 6));
    assert_eq!(split_steps(&g), 1);
    // ... which the kernel copies alone: its arguments are the operand
    // and that result, the other result views the operand.
    let exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    let split = exe.steps().iter().find(|s| s.op.contains("Split")).unwrap();
    assert_eq!(split.args.len(), 2, "{split:?}");
    // Results that an in-place Concat takes as parts (written into its
    // buffer by the Split kernel).
    let g = parse(
        "  input %x: f32[1,32,4,4]
  %e = Exp(%x)
  %a, %b = Split(%e) {axis=1, split=[16,16]}
  %y = Concat(%b, %a) {axis=1}
  output %y",
    );
    check(&g, &x(&[1, 32, 4, 4], 7));
    assert_eq!(split_steps(&g), 1);
}

/// Slice steps of `g`'s executable.
fn slice_steps(g: &Graph) -> usize {
    let exe = compile_cpu(g, &CpuOptions::default()).unwrap();
    exe.steps()
        .iter()
        .filter(|s| s.op.contains("Slice"))
        .count()
}

/// Slices that are one contiguous, aligned block of their operand view
/// it (ShuffleNet-V2's channel halves); the others copy. Each matches the
/// interpreter.
#[test]
fn contiguous_slices_view_their_operand() {
    let views = [
        // The second half of the channels at batch 1.
        "starts=[16], ends=[32], axes=[1]",
        // Negative indices, the same block.
        "starts=[-16], ends=[100], axes=[1]",
        // Channels 3 and 4 (192 bytes in: 64-byte aligned), with the
        // whole of axis 2 named.
        "starts=[3, 0], ends=[5, 4], axes=[1, 2], steps=[1, 1]",
        // Everything.
        "starts=[0], ends=[32], axes=[1]",
    ];
    for attrs in views {
        let g = parse(&format!(
            "  input %x: f32[1,32,4,4]\n  %e = Exp(%x)\n  %s = Slice(%e) {{{attrs}}}\n  %y = Neg(%s)\n  output %y"
        ));
        check(&g, &x(&[1, 32, 4, 4], 8));
        assert_eq!(slice_steps(&g), 0, "{attrs}");
    }
    let copies = [
        // Every other channel.
        "starts=[0], ends=[32], axes=[1], steps=[2]",
        // Reversed channels.
        "starts=[-1], ends=[-100], axes=[1], steps=[-1]",
        // Columns 1..3 of every row: strided.
        "starts=[1], ends=[3], axes=[3]",
        // Row 1 of channel 1: contiguous, but 80 bytes in.
        "starts=[1, 1], ends=[2, 2], axes=[1, 2]",
    ];
    for attrs in copies {
        let g = parse(&format!(
            "  input %x: f32[1,32,4,4]\n  %e = Exp(%x)\n  %s = Slice(%e) {{{attrs}}}\n  %y = Neg(%s)\n  output %y"
        ));
        check(&g, &x(&[1, 32, 4, 4], 9));
        assert_eq!(slice_steps(&g), 1, "{attrs}");
    }
    // Batch 2: a channel range is two blocks.
    let g = parse(
        "  input %x: f32[2,32,4,4]\n  %s = Slice(%x) {starts=[16], ends=[32], axes=[1]}\n  %y = Neg(%s)\n  output %y",
    );
    check(&g, &x(&[2, 32, 4, 4], 10));
    assert_eq!(slice_steps(&g), 1);
}
