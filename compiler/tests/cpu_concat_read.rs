//! A channel Concat that only 1x1 convs read through their
//! BatchNormalization + Relu prologues, and that would be a copy, is read
//! in place by the convs' GEMMs, row by row from the Concat's operands
//! (`group::absorb_concats`): DenseNet's layers, which each concatenate
//! every earlier layer's output anew. The kernels' ops then start with
//! `Concat`, no kernel writes the concatenation, and the outputs match
//! the interpreter, bitwise equal at 1 and 2 threads and bitwise equal
//! to the build that copies. A Concat built in place (batch 1, operands
//! no other Concat takes), read by a conv without a prologue or by
//! anything else stays.

mod cpu_common;

use cpu_common::checked_steps;
use dnnc_compiler::codegen::cpu::{ConvAlgo, CpuOptions};

/// A dense block of three layers on `n` images of `c` channels, `h x
/// h`: each layer concatenates the block input and every earlier layer's
/// output (`growth` channels each), normalises it (BatchNormalization +
/// Relu), and runs a 1x1 conv to `4 * growth` channels, Relu, then a 3x3
/// conv to `growth`; the block's output is the last layer's
/// concatenation through a 1x1 conv (`pre`: with its prologue, else the
/// conv reads the Concat directly).
fn dense_block(n: usize, c: usize, h: usize, growth: usize, pre: bool) -> String {
    let mut s = format!("  input %x: f32[{n},{c},{h},{h}]\n");
    let mut parts = vec!["%x".to_string()];
    let mut width = c;
    for l in 0..3 {
        let cat = parts.join(", ");
        let wide = 4 * growth;
        s += &format!(
            "  param %s{l}: f32[{width}] = uniform(low=0.5, high=1.5, seed={})
  param %b{l}: f32[{width}] = uniform(low=-0.5, high=0.5, seed={})
  param %mu{l}: f32[{width}] = uniform(low=-0.3, high=0.3, seed={})
  param %var{l}: f32[{width}] = uniform(low=0.5, high=2, seed={})
  param %w{l}: f32[{wide},{width},1,1] = he(seed={})
  param %v{l}: f32[{growth},{wide},3,3] = he(seed={})
  %cat{l} = Concat({cat}) {{axis=1}}
  %n{l} = BatchNormalization(%cat{l}, %s{l}, %b{l}, %mu{l}, %var{l})
  %a{l} = Relu(%n{l})
  %p{l} = Conv2d(%a{l}, %w{l})
  %q{l} = Relu(%p{l})
  %y{l} = Conv2d(%q{l}, %v{l}) {{pads=[1,1,1,1]}}
",
            10 * l + 1,
            10 * l + 2,
            10 * l + 3,
            10 * l + 4,
            10 * l + 5,
            10 * l + 6,
        );
        parts.push(format!("%y{l}"));
        width += growth;
    }
    let cat = parts.join(", ");
    s += &format!(
        "  param %wt: f32[8,{width},1,1] = he(seed=99)
  param %st: f32[{width}] = uniform(low=0.5, high=1.5, seed=97)
  param %bt: f32[{width}] = uniform(low=-0.5, high=0.5, seed=96)
  param %mt: f32[{width}] = uniform(low=-0.3, high=0.3, seed=95)
  param %vt: f32[{width}] = uniform(low=0.5, high=2, seed=94)
  %cat = Concat({cat}) {{axis=1}}
"
    );
    if pre {
        s += "  %nt = BatchNormalization(%cat, %st, %bt, %mt, %vt)
  %at = Relu(%nt)
  %t = Conv2d(%at, %wt)
  output %t
";
    } else {
        s += "  %t = Conv2d(%cat, %wt)
  output %t
";
    }
    s
}

/// The kernel ops of `body`, after checking it against the interpreter
/// and 2 threads bitwise against 1; and its outputs' bits, in order.
fn run(body: &str, opts: &CpuOptions) -> (Vec<String>, Vec<u32>) {
    checked_steps(body, opts, 3)
}

#[test]
fn a_dense_blocks_concats_are_read_in_place_by_their_convs() {
    // Batch 2: no Concat's pieces are contiguous. Batch 1: the layers'
    // Concats share operands, so at most one could be built in place.
    // 10x10 maps: 100 columns, whole 32-column strips and a tail.
    // Without its prologue the last conv reads a copied Concat.
    for (n, pre) in [(2, true), (1, true), (2, false), (3, true)] {
        let (ops, _) = run(&dense_block(n, 24, 10, 8, pre), &CpuOptions::default());
        let read = ops.iter().filter(|o| o.starts_with("Concat+")).count();
        let copies = ops.iter().filter(|o| *o == "Concat").count();
        let want = if pre { (4, 0) } else { (3, 1) };
        assert_eq!((read, copies), want, "batch {n} prologue {pre}: {ops:?}");
        if pre {
            assert!(
                ops.iter()
                    .any(|o| o == "Concat+BatchNormalization+Relu+Conv2d+Relu"),
                "{ops:?}"
            );
        }
    }
}

#[test]
fn reading_the_operands_gives_bitwise_the_copied_concatenation() {
    // An extra reader of a Concat (a second output) keeps it a kernel of
    // its own; the model's other Concats are read in place. Their convs'
    // outputs equal those of the build where every Concat is copied.
    let base = dense_block(2, 16, 9, 8, true);
    let (ops, read) = run(&base, &CpuOptions::default());
    assert!(ops.iter().all(|o| o != "Concat"), "{ops:?}");
    let kept = base.replace("  output %t\n", "  output %t\n  output %cat1\n");
    let (ops, copied) = run(&kept, &CpuOptions::default());
    assert_eq!(
        ops.iter().filter(|o| *o == "Concat").count(),
        1,
        "the Concat that is an output stays: {ops:?}"
    );
    // `%t` comes first in both.
    assert_eq!(
        copied[..read.len()],
        read[..],
        "reading the operands changed the result"
    );
}

#[test]
fn a_concat_that_two_convs_read_is_read_by_both_unless_a_pool_reads_it_too() {
    let two = |third: &str| {
        format!(
            "  input %x: f32[2,16,8,8]
  input %z: f32[2,8,8,8]
  param %s: f32[24] = uniform(low=0.5, high=1.5, seed=1)
  param %b: f32[24] = uniform(low=-0.5, high=0.5, seed=2)
  param %mu: f32[24] = uniform(low=-0.3, high=0.3, seed=3)
  param %var: f32[24] = uniform(low=0.5, high=2, seed=4)
  param %w1: f32[8,24,1,1] = he(seed=5)
  param %w2: f32[12,24,1,1] = he(seed=6)
  %cat = Concat(%x, %z) {{axis=1}}
  %n1 = BatchNormalization(%cat, %s, %b, %mu, %var)
  %a1 = Relu(%n1)
  %c1 = Conv2d(%a1, %w1)
  %n2 = BatchNormalization(%cat, %b, %s, %mu, %var)
  %a2 = Relu(%n2)
  %c2 = Conv2d(%a2, %w2)
  output %c1
  output %c2
{third}"
        )
    };
    let (ops, _) = run(&two(""), &CpuOptions::default());
    let read = ops.iter().filter(|o| o.starts_with("Concat+")).count();
    assert_eq!(read, 2, "{ops:?}");
    assert!(ops.iter().all(|o| o != "Concat"), "{ops:?}");
    let pooled =
        two("  %p = MaxPool(%cat) {kernel=[3,3], strides=[1,1], pads=[1,1,1,1]}\n  output %p\n");
    let (ops, _) = run(&pooled, &CpuOptions::default());
    assert!(ops.iter().any(|o| o == "Concat"), "{ops:?}");
    assert!(ops.iter().all(|o| !o.starts_with("Concat+")), "{ops:?}");
}

#[test]
fn a_concat_built_in_place_or_before_another_algorithm_stays() {
    // Batch 1, operands no other Concat takes: built in place (no kernel
    // at all), not read through a row table.
    let body = "  input %x: f32[1,16,8,8]
  input %z: f32[1,16,8,8]
  param %w: f32[8,32,1,1] = he(seed=1)
  %a = Relu(%x)
  %b = Relu(%z)
  %cat = Concat(%a, %b) {axis=1}
  %t = Conv2d(%cat, %w)
  output %t
";
    let (ops, _) = run(body, &CpuOptions::default());
    assert!(ops.iter().all(|o| !o.starts_with("Concat")), "{ops:?}");
    // Batch 2 with the conv forced to im2col: the Concat stays a copy.
    let body = body.replace("[1,16,8,8]", "[2,16,8,8]");
    let opts = CpuOptions {
        conv_algo: Some(ConvAlgo::Im2col),
        ..Default::default()
    };
    let (ops, _) = run(&body, &opts);
    assert!(ops.iter().any(|o| o == "Concat"), "{ops:?}");
}
