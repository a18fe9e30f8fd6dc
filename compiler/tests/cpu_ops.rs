//! Differential tests of the CPU backend against the interpreter: every op
//! the backend lowers, broadcasting patterns, f32x4 tails, fused
//! epilogues, and the errors for what it cannot compile.

mod cpu_common;

use cpu_common::{check, f32_tensor, parse, rand_f32, Rng};
use dnnc_compiler::codegen::cpu::{compile_cpu, CodegenError, ConvAlgo, CpuOptions};
use dnnc_ir::{DType, Graph, Tensor};
use ndarray::{ArrayD, IxDyn};
use std::collections::BTreeSet;

/// Random inputs for every graph input: f32 uniform in `[lo, hi)`, i64 in
/// `[-3, 3]`, bool fair coins.
fn inputs(g: &Graph, seed: u64, lo: f32, hi: f32) -> Vec<(String, Tensor)> {
    let mut r = Rng(seed);
    g.inputs()
        .iter()
        .map(|&v| {
            let val = g.value(v);
            let shape = val.ty.shape.clone();
            let n: usize = shape.iter().product();
            let t = match val.ty.dtype {
                DType::F32 => rand_f32(&shape, r.next_u64(), lo, hi),
                DType::I64 => Tensor::I64(
                    ArrayD::from_shape_vec(
                        IxDyn(&shape),
                        (0..n).map(|_| r.below(7) as i64 - 3).collect(),
                    )
                    .unwrap(),
                ),
                DType::Bool => Tensor::Bool(
                    ArrayD::from_shape_vec(
                        IxDyn(&shape),
                        (0..n).map(|_| r.below(2) == 1).collect(),
                    )
                    .unwrap(),
                ),
            };
            (val.name.clone(), t)
        })
        .collect()
}

/// Parses `body`, runs it on random inputs in `[lo, hi)` on both backends,
/// and returns the op names it exercised.
fn diff(body: &str, lo: f32, hi: f32) -> BTreeSet<String> {
    let g = parse(body);
    let ins = inputs(&g, 7, lo, hi);
    check(&g, &ins);
    g.topo_order()
        .into_iter()
        .map(|n| g.node(n).op.name().to_string())
        .collect()
}

const UNARY: &[&str] = &[
    "Relu",
    "LeakyRelu {alpha=0.1}",
    "Sigmoid",
    "Tanh",
    "Clip {min=-1.5, max=2.0}",
    "HardSigmoid",
    "HardSwish",
    "Elu {alpha=0.7}",
    "Softplus",
    "Gelu",
    "Gelu {approximate=tanh}",
    "Exp",
    "Neg",
    "Abs",
    "Reciprocal",
    "Erf",
    "Selu",
    "Sign",
    "Floor",
    "Ceil",
    "Round",
    "Sin",
    "Cos",
];

#[test]
fn every_op_the_ir_supports_is_covered() {
    let mut seen = BTreeSet::new();
    // Unary ops on a shape that is not a multiple of 4 (f32x4 tail) and a
    // longer contiguous one.
    for u in UNARY {
        let (name, attrs) = u.split_once(' ').unwrap_or((u, ""));
        for shape in ["[2,3,7]", "[3,37]", "[1]"] {
            seen.extend(diff(
                &format!("input %x: f32{shape}\n%y = {name}(%x) {attrs}\noutput %y"),
                -6.0,
                6.0,
            ));
        }
    }
    for u in ["Sqrt", "Log"] {
        seen.extend(diff(
            &format!("input %x: f32[5,9]\n%y = {u}(%x)\noutput %y"),
            0.001,
            50.0,
        ));
    }
    // Binary ops with broadcasting.
    for b in ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"] {
        let (lo, hi) = if b == "Pow" { (0.1, 3.0) } else { (-4.0, 4.0) };
        for (sa, sb) in [
            ("[2,3,4,5]", "[2,3,4,5]"),
            ("[2,3,4,5]", "[5]"),
            ("[2,3,4,5]", "[3,1,1]"),
            ("[2,1,4,1]", "[1,3,1,5]"),
            ("[7]", "[1]"),
            ("[1]", "[3,6]"),
        ] {
            seen.extend(diff(
                &format!("input %a: f32{sa}\ninput %b: f32{sb}\n%y = {b}(%a, %b)\noutput %y"),
                lo,
                hi,
            ));
        }
    }
    // i64 arithmetic and the i64 unary ops.
    for b in ["Add", "Sub", "Mul", "Max", "Min"] {
        seen.extend(diff(
            &format!("input %a: i64[3,5]\ninput %b: i64[5]\n%y = {b}(%a, %b)\noutput %y"),
            0.0,
            1.0,
        ));
    }
    seen.extend(diff(
        "input %a: i64[3,5]\nconst %b: i64[5] = [1, -2, 3, -1, 7]\n%y = Div(%a, %b)\noutput %y",
        0.0,
        1.0,
    ));
    for u in ["Relu", "Neg", "Abs", "Sign"] {
        seen.extend(diff(
            &format!("input %a: i64[9]\n%y = {u}(%a)\noutput %y"),
            0.0,
            1.0,
        ));
    }
    // Comparisons, logic, Where and Cast.
    for c in ["Equal", "Less", "Greater"] {
        seen.extend(diff(
            &format!(
                "input %a: f32[2,5]\ninput %b: f32[5]\n%r = Round(%a)\n%s = Round(%b)\n%y = {c}(%r, %s)\noutput %y"
            ),
            -2.0,
            2.0,
        ));
        seen.extend(diff(
            &format!("input %a: i64[2,5]\ninput %b: i64[2,1]\n%y = {c}(%a, %b)\noutput %y"),
            0.0,
            1.0,
        ));
    }
    seen.extend(diff(
        "input %a: bool[3,4]\ninput %b: bool[4]\n%n = Not(%a)\n%x = And(%n, %b)\n%o = Or(%x, %a)\n%e = Equal(%o, %b)\noutput %e",
        0.0,
        1.0,
    ));
    seen.extend(diff(
        "input %c: bool[3,1]\ninput %x: f32[3,4]\ninput %y: f32[4]\n%w = Where(%c, %x, %y)\noutput %w",
        -1.0,
        1.0,
    ));
    for (from, to) in [
        ("f32", "i64"),
        ("f32", "bool"),
        ("i64", "f32"),
        ("i64", "bool"),
        ("bool", "f32"),
        ("bool", "i64"),
        ("f32", "f32"),
    ] {
        seen.extend(diff(
            &format!("input %x: {from}[2,7]\n%y = Cast(%x) {{to={to}}}\noutput %y"),
            -3.0,
            3.0,
        ));
    }
    // Parameterised elementwise ops.
    seen.extend(diff(
        "input %x: f32[2,3,5,5]\ninput %s: f32[3,1,1]\n%y = PRelu(%x, %s)\noutput %y",
        -2.0,
        2.0,
    ));
    seen.extend(diff(
        "input %x: f32[2,3,5,6]\nparam %s: f32[3] = uniform(low=0.5, high=1.5, seed=1)\nparam %b: f32[3] = uniform(low=-1, high=1, seed=2)\nparam %m: f32[3] = uniform(low=-1, high=1, seed=3)\nparam %v: f32[3] = uniform(low=0.5, high=2, seed=4)\n%y = BatchNormalization(%x, %s, %b, %m, %v)\noutput %y",
        -2.0,
        2.0,
    ));
    // Reductions.
    seen.extend(diff(
        "input %x: f32[2,7,9,9]\n%y = LRN(%x) {size=5, alpha=0.001, beta=0.75, bias=2.0}\noutput %y",
        -2.0,
        2.0,
    ));
    for axis in [-1, 0, 1, 2] {
        for op in ["Softmax", "LogSoftmax"] {
            seen.extend(diff(
                &format!("input %x: f32[3,5,7]\n%y = {op}(%x) {{axis={axis}}}\noutput %y"),
                -5.0,
                5.0,
            ));
        }
    }
    for op in ["ReduceMean", "ReduceSum", "ReduceMax"] {
        for (axes, keep) in [
            ("[]", 1),
            ("[1]", 0),
            ("[2,3]", 1),
            ("[0,2]", 0),
            ("[-1]", 1),
        ] {
            seen.extend(diff(
                &format!("input %x: f32[2,3,5,7]\n%y = {op}(%x) {{axes={axes}, keepdims={keep}}}\noutput %y"),
                -3.0,
                3.0,
            ));
        }
    }
    // Sums and means that keep a last axis of whole f32x4 vectors (a
    // channel-blocked tensor's planes averaged) run four lanes a vector.
    for op in ["ReduceMean", "ReduceSum"] {
        for (shape, axes, keep) in [
            ("[2,3,5,7,8]", "[2,3]", 1),
            ("[2,3,5,7,8]", "[1,3]", 0),
            ("[3,4,12]", "[0,1]", 1),
        ] {
            seen.extend(diff(
                &format!("input %x: f32{shape}\n%y = {op}(%x) {{axes={axes}, keepdims={keep}}}\noutput %y"),
                -3.0,
                3.0,
            ));
        }
    }
    for op in ["GlobalAveragePool", "GlobalMaxPool"] {
        seen.extend(diff(
            &format!("input %x: f32[2,3,7,9]\n%y = {op}(%x)\noutput %y"),
            -3.0,
            3.0,
        ));
    }
    for attrs in [
        "kernel=[3,3], strides=[2,2], pads=[1,1,1,1]",
        "kernel=[2,2], strides=[2,2]",
        "kernel=[3,2], strides=[2,1], pads=[1,0,1,1], ceil_mode=1",
        "kernel=[3,3], strides=[1,1], pads=[1,1,1,1], dilations=[2,2]",
    ] {
        seen.extend(diff(
            &format!("input %x: f32[1,3,11,10]\n%y = MaxPool(%x) {{{attrs}}}\noutput %y"),
            -3.0,
            3.0,
        ));
    }
    for attrs in [
        "kernel=[3,3], strides=[2,2], pads=[1,1,1,1]",
        "kernel=[3,3], strides=[2,2], pads=[1,1,1,1], count_include_pad=1",
        "kernel=[2,3], strides=[2,2], pads=[0,1,1,1], ceil_mode=1, count_include_pad=1",
        "kernel=[7,7]",
    ] {
        seen.extend(diff(
            &format!("input %x: f32[2,2,11,10]\n%y = AveragePool(%x) {{{attrs}}}\noutput %y"),
            -3.0,
            3.0,
        ));
    }
    seen.extend(diff(
        "input %x: f32[2,3,4,5]\nparam %s: f32[3] = uniform(low=0.5, high=1.5, seed=1)\nparam %b: f32[3] = uniform(low=-1, high=1, seed=2)\n%y = InstanceNormalization(%x, %s, %b)\noutput %y",
        -3.0,
        5.0,
    ));
    seen.extend(diff(
        "input %x: f32[2,3,4,5]\nparam %s: f32[4,5] = uniform(low=0.5, high=1.5, seed=1)\nparam %b: f32[5] = uniform(low=-1, high=1, seed=2)\n%y = LayerNormalization(%x, %s, %b) {axis=2}\noutput %y",
        -3.0,
        5.0,
    ));
    seen.extend(diff(
        "input %x: f32[2,3,4,5]\nparam %s: f32[5] = uniform(low=0.5, high=1.5, seed=1)\n%y = LayerNormalization(%x, %s)\noutput %y",
        -3.0,
        5.0,
    ));
    // Data movement and views, in f32 and other dtypes.
    seen.extend(diff(
        "input %a: f32[2,3,4]\ninput %b: f32[2,5,4]\ninput %c: f32[2,1,4]\n%y = Concat(%a, %b, %c) {axis=1}\noutput %y",
        -1.0,
        1.0,
    ));
    seen.extend(diff(
        "input %a: i64[2,3]\ninput %b: i64[1,3]\n%y = Concat(%a, %b) {axis=0}\noutput %y",
        -1.0,
        1.0,
    ));
    seen.extend(diff(
        "input %x: f32[2,9,40]\n%a, %b, %c = Split(%x) {axis=1, split=[2,3,4]}\noutput %a, %b, %c",
        -1.0,
        1.0,
    ));
    for attrs in [
        "starts=[1], ends=[4], axes=[1]",
        "starts=[-1, 0], ends=[-100, 9], axes=[2, 1], steps=[-2, 3]",
        "starts=[0, 1, 2], ends=[1, 100, 8], axes=[0, 1, 2], steps=[1, 1, 1]",
    ] {
        seen.extend(diff(
            &format!("input %x: f32[2,9,10]\n%y = Slice(%x) {{{attrs}}}\noutput %y"),
            -1.0,
            1.0,
        ));
    }
    for perm in ["[0,2,1]", "[2,0,1]", "[1,0,2]"] {
        seen.extend(diff(
            &format!("input %x: f32[3,4,37]\n%y = Transpose(%x) {{perm={perm}}}\noutput %y"),
            -1.0,
            1.0,
        ));
    }
    for mode in ["constant", "reflect", "edge"] {
        seen.extend(diff(
            &format!("input %x: f32[1,2,5,6]\n%y = Pad(%x) {{pads=[0,0,2,1,0,1,1,3], mode={mode}, value=1.5}}\noutput %y"),
            -1.0,
            1.0,
        ));
    }
    seen.extend(diff(
        "input %x: f32[4,6]\n%y = Pad(%x) {pads=[-1,2,1,-2]}\noutput %y",
        -1.0,
        1.0,
    ));
    seen.extend(diff(
        "input %x: f32[5,4,3]\nconst %i: i64[2,2] = [0, -1, 3, 2]\n%y = Gather(%x, %i) {axis=1}\noutput %y",
        -1.0,
        1.0,
    ));
    seen.extend(diff(
        "input %x: f32[5,40]\nconst %i: i64[3] = [4, 0, -2]\n%y = Gather(%x, %i) {axis=0}\noutput %y",
        -1.0,
        1.0,
    ));
    seen.extend(diff(
        "input %x: f32[3,1,5]\n%y = Expand(%x) {shape=[2,3,4,5]}\noutput %y",
        -1.0,
        1.0,
    ));
    seen.extend(diff(
        "input %x: bool[2,3]\n%y = Tile(%x) {repeats=[2,3]}\noutput %y",
        -1.0,
        1.0,
    ));
    seen.extend(diff(
        "input %x: f32[2,3,5]\n%y = Tile(%x) {repeats=[1,2,3]}\noutput %y",
        -1.0,
        1.0,
    ));
    seen.extend(diff(
        "input %x: f32[2,3,4]\n%r = Reshape(%x) {shape=[6,-1]}\n%f = Flatten(%r) {axis=1}\n%u = Unsqueeze(%f) {axes=[0,3]}\n%s = Squeeze(%u)\n%i = Identity(%s)\n%d = Dropout(%i)\n%e = Exp(%d)\noutput %e, %d",
        -1.0,
        1.0,
    ));
    seen.extend(diff(
        "input %x: f32[2,3,4]\n%s = Shape(%x) {start=1}\n%c = ConstantOfShape() {shape=[2,3], value=7, dtype=i64}\n%f = ConstantOfShape() {shape=[5], value=0.5}\n%r = Range() {start=1, limit=2, delta=0.125}\n%q = Range() {start=10, limit=-3, delta=-4, dtype=i64}\noutput %s, %c, %f, %r, %q",
        -1.0,
        1.0,
    ));
    // Contractions.
    for (ta, tb, sa, sb, c) in [
        (0, 0, "[5,7]", "[7,6]", "[6]"),
        (1, 0, "[7,5]", "[7,6]", "[5,1]"),
        (0, 1, "[5,7]", "[6,7]", "[1]"),
        (1, 1, "[7,5]", "[6,7]", "[5,6]"),
    ] {
        seen.extend(diff(
            &format!("input %a: f32{sa}\ninput %b: f32{sb}\ninput %c: f32{c}\n%y = Gemm(%a, %b, %c) {{alpha=0.5, beta=2.0, transA={ta}, transB={tb}}}\noutput %y"),
            -1.0,
            1.0,
        ));
    }
    seen.extend(diff(
        "input %a: f32[5,7]\ninput %b: f32[7,6]\n%y = Gemm(%a, %b)\noutput %y",
        -1.0,
        1.0,
    ));
    for (sa, sb) in [
        ("[5,7]", "[7,6]"),
        ("[7]", "[7,6]"),
        ("[5,7]", "[7]"),
        ("[3,1,5,7]", "[2,7,6]"),
        ("[2,5,7]", "[7,3]"),
    ] {
        seen.extend(diff(
            &format!("input %a: f32{sa}\ninput %b: f32{sb}\n%y = MatMul(%a, %b)\noutput %y"),
            -1.0,
            1.0,
        ));
    }
    seen.extend(diff(
        "input %x: f32[2,4,9,9]\nparam %w: f32[6,2,3,3] = he(seed=1)\nparam %b: f32[6] = uniform(low=-1, high=1, seed=2)\n%y = Conv2d(%x, %w, %b) {strides=[2,1], pads=[1,0,2,1], dilations=[1,2], group=2}\noutput %y",
        -1.0,
        1.0,
    ));

    seen.extend(extended_ops());
    let uncovered: Vec<&str> = dnnc_ir::op::OP_NAMES
        .iter()
        .copied()
        .filter(|n| !seen.contains(*n))
        .collect();
    assert!(
        uncovered.is_empty(),
        "ops without a CPU test: {uncovered:?}"
    );
}

/// Differential cases of ConvTranspose2d, Einsum, Resize and the recurrent
/// layers; returns the op names exercised.
fn extended_ops() -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    // ConvTranspose2d: strides, pads, output_padding, groups, dilations,
    // bias, fused epilogue.
    for (x, w, attrs, bias) in [
        (
            "[2,4,5,5]",
            "[4,3,3,3]",
            "strides=[2,2], pads=[1,1,1,1], output_padding=[1,1]",
            true,
        ),
        (
            "[1,4,6,5]",
            "[4,2,3,2]",
            "strides=[1,2], pads=[0,1,2,0], dilations=[2,1], group=2",
            true,
        ),
        ("[2,3,4,7]", "[3,5,1,1]", "strides=[1,1]", false),
        (
            "[1,6,3,3]",
            "[6,1,4,4]",
            "strides=[3,2], dilations=[1,2], group=6, output_padding=[2,1]",
            true,
        ),
        (
            "[1,2,5,9]",
            "[2,2,5,5]",
            "strides=[2,1], pads=[2,2,2,2]",
            false,
        ),
    ] {
        let m = w[1..w.len() - 1]
            .split(',')
            .nth(1)
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(1)
            * attrs
                .split("group=")
                .nth(1)
                .and_then(|g| g.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|g| g.parse::<usize>().ok())
                .unwrap_or(1);
        let (b_decl, b_arg) = if bias {
            (
                format!("param %b: f32[{m}] = uniform(low=-1, high=1, seed=3)\n"),
                ", %b",
            )
        } else {
            (String::new(), "")
        };
        seen.extend(diff(
            &format!("input %x: f32{x}\nparam %w: f32{w} = he(seed=2)\n{b_decl}%y = ConvTranspose2d(%x, %w{b_arg}) {{{attrs}}}\n%z = Relu(%y)\noutput %z"),
            -1.0,
            1.0,
        ));
    }
    // Einsum: GEMM forms (in place, transposed, packed, permuted result,
    // broadcast batch) and the generic loop nest (diagonal, one operand,
    // three operands, one-sided sums).
    for (eq, shapes) in [
        ("ij,jk->ik", vec!["[5,7]", "[7,6]"]),
        ("bij,bkj->bik", vec!["[3,4,5]", "[3,6,5]"]),
        ("bij,bjk->bki", vec!["[2,4,5]", "[2,5,3]"]),
        ("jb,bkj->kb", vec!["[5,3]", "[3,4,5]"]),
        ("bij,bjk->bik", vec!["[1,3,4]", "[2,4,5]"]),
        ("ij,j->i", vec!["[6,9]", "[9]"]),
        ("i,j->ij", vec!["[5]", "[7]"]),
        ("ij,ij->ij", vec!["[3,5]", "[3,5]"]),
        ("ij,jk", vec!["[2,3]", "[3,4]"]),
        ("ii->i", vec!["[5,5]"]),
        ("ij->", vec!["[4,6]"]),
        ("ij->ji", vec!["[4,6]"]),
        ("abc,cd,de->abe", vec!["[2,3,4]", "[4,5]", "[5,3]"]),
        ("ij,jk->i", vec!["[3,4]", "[4,5]"]),
        ("bii,bi->b", vec!["[2,3,3]", "[2,3]"]),
    ] {
        let decls: String = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| format!("input %x{i}: f32{s}\n"))
            .collect();
        let args: Vec<String> = (0..shapes.len()).map(|i| format!("%x{i}")).collect();
        seen.extend(diff(
            &format!(
                "{decls}%y = Einsum({}) {{equation=\"{eq}\"}}\n%z = Tanh(%y)\noutput %z",
                args.join(", ")
            ),
            -1.0,
            1.0,
        ));
    }
    // Resize: every nearest mode and coordinate transform, up and down,
    // with and without scales; n-linear over two and three axes.
    for nearest in ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"] {
        for coord in [
            "half_pixel",
            "pytorch_half_pixel",
            "align_corners",
            "asymmetric",
        ] {
            for (x, sizes, scales) in [
                ("[1,2,4,5]", "[1,2,8,15]", ""),
                ("[1,2,9,7]", "[1,2,4,3]", ""),
                ("[2,1,5,4]", "[2,1,7,6]", ", scales=[1,1,1.5,1.6]"),
            ] {
                seen.extend(diff(
                    &format!("input %x: f32{x}\n%y = Resize(%x) {{sizes={sizes}{scales}, mode=nearest, coordinate_transformation_mode={coord}, nearest_mode={nearest}}}\noutput %y"),
                    -3.0,
                    3.0,
                ));
            }
        }
    }
    for coord in [
        "half_pixel",
        "pytorch_half_pixel",
        "align_corners",
        "asymmetric",
    ] {
        for (x, sizes, scales) in [
            ("[1,2,4,5]", "[1,2,8,11]", ""),
            ("[1,3,9,7]", "[1,3,4,3]", ""),
            ("[2,1,5,4]", "[2,1,7,6]", ", scales=[1,1,1.5,1.6]"),
            ("[2,3,4,5]", "[2,5,1,9]", ""),
            ("[6]", "[13]", ""),
        ] {
            seen.extend(diff(
                &format!("input %x: f32{x}\n%y = Resize(%x) {{sizes={sizes}{scales}, mode=linear, coordinate_transformation_mode={coord}}}\noutput %y"),
                -3.0,
                3.0,
            ));
        }
    }
    seen.extend(recurrent_cases(1e-4, 1e-5));
    seen
}

/// RNN, GRU and LSTM layers in every direction with their options, checked
/// within `rtol`/`atol`; returns the op names exercised.
fn recurrent_cases(rtol: f32, atol: f32) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut cases: Vec<String> = Vec::new();
    // (seq, batch, input, hidden)
    let dims = [(4usize, 3usize, 5usize, 6usize), (3, 1, 2, 9), (1, 2, 7, 4)];
    for (i, &(seq, batch, input, hid)) in dims.iter().enumerate() {
        for (dir, dirs) in [("forward", 1), ("reverse", 1), ("bidirectional", 2)] {
            let common = format!(
                "input %x: f32[{seq},{batch},{input}]\ninput %h0: f32[{dirs},{batch},{hid}]\n"
            );
            let wts = |g: usize, extra: &str| {
                format!(
                    "param %w: f32[{dirs},{},{input}] = uniform(low=-0.6, high=0.6, seed={})\nparam %r: f32[{dirs},{},{hid}] = uniform(low=-0.6, high=0.6, seed={})\nparam %b: f32[{dirs},{}] = uniform(low=-0.5, high=0.5, seed={})\n{extra}",
                    g * hid,
                    10 + i,
                    g * hid,
                    20 + i,
                    2 * g * hid,
                    30 + i
                )
            };
            let acts = |a: &str| {
                if dirs == 2 {
                    format!("{a},{a}")
                } else {
                    a.to_string()
                }
            };
            for (a, clip) in [
                ("Tanh", ""),
                ("Relu", ", clip=2.5"),
                ("HardSigmoid(0.3;0.4)", ""),
            ] {
                cases.push(format!(
                    "{common}{}%y, %yh = RNN(%x, %w, %r, %b, %h0) {{hidden_size={hid}, direction={dir}, activations=\"{}\"{clip}}}\noutput %y, %yh",
                    wts(1, ""),
                    acts(a)
                ));
            }
            for lbr in [0, 1] {
                for (a, clip) in [("Sigmoid,Tanh", ""), ("HardSigmoid,Relu", ", clip=1.5")] {
                    cases.push(format!(
                        "{common}{}%y, %yh = GRU(%x, %w, %r, %b, %h0) {{hidden_size={hid}, direction={dir}, linear_before_reset={lbr}, activations=\"{}\"{clip}}}\n%z = Relu(%yh)\noutput %y, %z",
                        wts(3, ""),
                        acts(a)
                    ));
                }
            }
            for (forget, peep, a, clip) in [
                (0, true, "Sigmoid,Tanh,Tanh", ""),
                (1, true, "Sigmoid,Tanh,Tanh", ", clip=2.0"),
                (0, false, "HardSigmoid,Tanh,Relu", ""),
            ] {
                let p_decl = format!(
                    "param %p: f32[{dirs},{}] = uniform(low=-0.5, high=0.5, seed=40)\ninput %c0: f32[{dirs},{batch},{hid}]\n",
                    3 * hid
                );
                let p_arg = if peep { ", %p" } else { "" };
                cases.push(format!(
                    "{common}{}%y, %yh, %yc = LSTM(%x, %w, %r, %b, %h0, %c0{p_arg}) {{hidden_size={hid}, direction={dir}, input_forget={forget}, activations=\"{}\"{clip}}}\noutput %y, %yh, %yc",
                    wts(4, &p_decl),
                    acts(a)
                ));
            }
        }
    }
    let mut worst = 0.0f32;
    for body in &cases {
        let g = parse(body);
        let ins = inputs(&g, 11, -1.0, 1.0);
        let err = cpu_common::check_with(&g, &ins, rtol, atol, &CpuOptions::default());
        worst = worst.max(err);
        seen.extend(
            g.topo_order()
                .into_iter()
                .map(|n| g.node(n).op.name().to_string()),
        );
    }
    eprintln!(
        "recurrent layers: {} cases, max abs error {worst:e}",
        cases.len()
    );
    seen
}

#[test]
fn transcendentals_over_wide_ranges() {
    // Large magnitudes, near-zero values and special values.
    let mut vals: Vec<f32> = vec![
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        1e-7,
        -1e-7,
        0.5,
        -0.5,
        1.0,
        -1.0,
        88.0,
        88.7,
        -87.0,
        -100.0,
        -200.0,
        200.0,
        1e30,
        -1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let mut r = Rng(3);
    for _ in 0..300 {
        vals.push(r.uniform(-20.0, 20.0));
    }
    for _ in 0..100 {
        vals.push(r.uniform(-1.0, 1.0) * 10f32.powi(r.below(8) as i32 - 4));
    }
    let n = vals.len();
    let x = f32_tensor(&[n], vals.clone());
    for op in [
        "Exp",
        "Sigmoid",
        "Tanh",
        "Erf",
        "Gelu",
        "Softplus",
        "Elu",
        "Selu",
        "HardSwish",
    ] {
        let g = parse(&format!("input %x: f32[{n}]\n%y = {op}(%x)\noutput %y"));
        check(&g, &[("x".into(), x.clone())]);
    }
    // Sin and Cos on moderate magnitudes (range reduction is f32).
    let trig: Vec<f32> = vals
        .iter()
        .map(|v| {
            if v.is_finite() && v.abs() < 1e4 {
                *v
            } else {
                0.25
            }
        })
        .collect();
    for op in ["Sin", "Cos"] {
        let g = parse(&format!("input %x: f32[{n}]\n%y = {op}(%x)\noutput %y"));
        check(&g, &[("x".into(), f32_tensor(&[n], trig.clone()))]);
    }
    // Log and Sqrt on positives, zero, subnormals, negatives and inf.
    let mut pos: Vec<f32> = vals.iter().map(|v| v.abs()).collect();
    pos.extend([
        0.0,
        1e-40,
        1e-44,
        f32::MIN_POSITIVE,
        -1.0,
        f32::INFINITY,
        3.0e38,
    ]);
    let m = pos.len();
    for op in ["Log", "Sqrt", "Reciprocal"] {
        let g = parse(&format!("input %x: f32[{m}]\n%y = {op}(%x)\noutput %y"));
        check(&g, &[("x".into(), f32_tensor(&[m], pos.clone()))]);
    }
    // Pow with negative bases and integral exponents, zero bases.
    let a = f32_tensor(&[8], vec![-2.0, -2.0, -3.0, 0.0, 0.0, 4.0, 2.5, -1.5]);
    let b = f32_tensor(&[8], vec![2.0, 3.0, 0.0, 2.0, 0.0, 0.5, -1.5, 4.0]);
    let g = parse("input %a: f32[8]\ninput %b: f32[8]\n%y = Pow(%a, %b)\noutput %y");
    check(&g, &[("a".into(), a), ("b".into(), b)]);
}

#[test]
fn generated_sigmoid_is_bitwise_the_gemm_epilogues() {
    // The f32x4 Sigmoid of an elementwise kernel (and its scalar tail)
    // and the packed GEMM's fused Sigmoid compute the same operations, so
    // a Sigmoid gives the same bits fused into a GEMM or not.
    let mut vals: Vec<f32> = (-2000..2000).map(|i| i as f32 * 0.0537).collect();
    // 4009 values: pairs of vectors, one vector and a scalar tail.
    vals.extend([
        0.0,
        -0.0,
        1e-30,
        87.9,
        -88.1,
        300.0,
        -300.0,
        f32::INFINITY,
        2.5,
    ]);
    let n = vals.len();
    let g = parse(&format!("input %x: f32[{n}]\n%y = Sigmoid(%x)\noutput %y"));
    let exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    let out = exe
        .run(&[("x".to_string(), f32_tensor(&[n], vals.clone()))])
        .unwrap();
    let Tensor::F32(y) = &out[0] else {
        panic!("f32 output")
    };
    for (x, got) in vals.iter().zip(y.iter()) {
        let want = dnnc_runtime::cpu::pgemm::sigmoid(*x);
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "sigmoid({x}): {got} vs {want}"
        );
    }
}

#[test]
fn fused_epilogues_match_and_fuse() {
    let cases = [
        // conv + bias + relu
        ("input %x: f32[1,3,12,12]\nparam %w: f32[8,3,3,3] = he(seed=1)\nparam %b: f32[8] = uniform(low=-1, high=1, seed=2)\n%c = Conv2d(%x, %w, %b) {pads=[1,1,1,1]}\n%y = Relu(%c)\noutput %y", 1),
        // conv + add(residual) + relu
        ("input %x: f32[1,4,10,10]\nparam %w: f32[4,4,3,3] = he(seed=1)\n%c = Conv2d(%x, %w) {pads=[1,1,1,1]}\n%a = Add(%c, %x)\n%y = Relu(%a)\noutput %y", 1),
        // gemm + bias + relu
        ("input %x: f32[3,10]\nparam %w: f32[7,10] = he(seed=1)\nparam %b: f32[7] = uniform(low=-1, high=1, seed=2)\n%c = Gemm(%x, %w, %b) {transB=1}\n%y = Relu(%c)\noutput %y", 1),
        // 1x1 conv + clip (ReLU6), depthwise conv + bias + clip
        ("input %x: f32[1,6,9,9]\nparam %w: f32[12,6,1,1] = he(seed=1)\nparam %d: f32[12,1,3,3] = he(seed=3)\nparam %b: f32[12] = uniform(low=-1, high=1, seed=2)\n%c = Conv2d(%x, %w)\n%r = Clip(%c) {min=0, max=6}\n%e = Conv2d(%r, %d, %b) {strides=[2,2], pads=[1,1,1,1], group=12}\n%y = Clip(%e) {min=0, max=6}\noutput %y", 2),
        // conv + bias + SiLU, 1x1 conv + residual + Sigmoid, gemm + bias +
        // SiLU: the packed GEMM's activations
        ("input %x: f32[2,3,12,12]\nparam %w: f32[8,3,3,3] = he(seed=1)\nparam %b: f32[8] = uniform(low=-1, high=1, seed=2)\n%c = Conv2d(%x, %w, %b) {pads=[1,1,1,1]}\n%s = Sigmoid(%c)\n%y = Mul(%c, %s)\noutput %y", 1),
        ("input %x: f32[1,6,9,9]\ninput %r: f32[1,12,9,9]\nparam %w: f32[12,6,1,1] = he(seed=1)\n%c = Conv2d(%x, %w)\n%a = Add(%r, %c)\n%y = Sigmoid(%a)\noutput %y", 1),
        ("input %x: f32[3,10]\nparam %w: f32[7,10] = he(seed=1)\nparam %b: f32[7] = uniform(low=-1, high=1, seed=2)\n%c = Gemm(%x, %w, %b) {transB=1}\n%s = Sigmoid(%c)\n%y = Mul(%s, %c)\noutput %y", 1),
        // depthwise conv + SiLU: the epilogue runs over each plane
        ("input %x: f32[2,6,9,9]\nparam %d: f32[6,1,3,3] = he(seed=3)\n%c = Conv2d(%x, %d) {pads=[1,1,1,1], group=6}\n%s = Sigmoid(%c)\n%y = Mul(%c, %s)\noutput %y", 1),
        // elementwise chain with broadcast operands
        ("input %x: f32[2,3,5,7]\ninput %s: f32[3,1,1]\n%a = Mul(%x, %s)\n%b = Sigmoid(%a)\n%c = Mul(%b, %x)\noutput %c", 1),
        // reduction + epilogue: pool + relu, global pool + residual mul
        ("input %x: f32[1,3,9,9]\ninput %s: f32[1,3,1,1]\n%p = MaxPool(%x) {kernel=[3,3], strides=[2,2]}\n%r = Relu(%p)\n%g = GlobalAveragePool(%r)\n%y = Mul(%g, %s)\noutput %y", 2),
        // a Range head is split from its elementwise chain
        ("input %x: f32[8]\n%r = Range() {start=0, limit=8, delta=1}\n%e = Exp(%r)\n%y = Add(%e, %x)\noutput %y", 3),
        // a Split piece nobody reads still gets written somewhere
        ("input %x: f32[2,6]\n%a, %b = Split(%x) {axis=1, split=[2,4]}\n%y = Neg(%b)\noutput %y", 2),
        // two users of the conv's result that meet again: one kernel
        ("input %x: f32[1,2,6,6]\nparam %w: f32[2,2,3,3] = he(seed=1)\n%c = Conv2d(%x, %w)\n%r = Relu(%c)\n%t = Tanh(%c)\n%y = Add(%r, %t)\noutput %y", 1),
        // ... that do not (one is also a graph output): still correct
        ("input %x: f32[1,2,6,6]\nparam %w: f32[2,2,3,3] = he(seed=1)\n%c = Conv2d(%x, %w)\n%r = Relu(%c)\n%t = Tanh(%c)\n%y = Add(%r, %t)\noutput %y, %t", 3),
    ];
    for (src, steps) in cases {
        let g = parse(src);
        let ins = inputs(&g, 11, -1.0, 1.0);
        check(&g, &ins);
        let exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
        assert_eq!(exe.num_steps(), steps, "kernels for:\n{src}");
    }
}

#[test]
fn conv_algorithms_agree() {
    let src = "input %x: f32[2,6,9,8]\nparam %w: f32[6,1,3,3] = he(seed=1)\nparam %v: f32[4,6,1,1] = he(seed=2)\n%d = Conv2d(%x, %w) {pads=[1,1,1,1], group=6}\n%y = Conv2d(%d, %v)\noutput %y";
    let g = parse(src);
    let ins = inputs(&g, 5, -1.0, 1.0);
    for algo in [
        None,
        Some(ConvAlgo::Im2col),
        Some(ConvAlgo::Pointwise),
        Some(ConvAlgo::Depthwise),
    ] {
        cpu_common::check_with(
            &g,
            &ins,
            1e-4,
            1e-5,
            &CpuOptions {
                conv_algo: algo,
                ..Default::default()
            },
        );
    }
}

#[test]
fn formerly_unsupported_op_compiles_and_errors_name_the_node() {
    // Einsum was the example of an op without a lowering; every op has one
    // now, so it compiles, and the error form still names node and op.
    let g = parse(
        "input %a: f32[2,3]\ninput %b: f32[3,4]\n%my_einsum = Einsum(%a, %b) {equation=\"ij,jk->ik\"}\noutput %my_einsum",
    );
    assert!(compile_cpu(&g, &CpuOptions::default()).is_ok());
    let err = CodegenError::Unsupported {
        node: "my_einsum".into(),
        op: "Einsum".into(),
        reason: "no lowering for this op yet".into(),
    };
    let msg = err.to_string();
    assert!(msg.contains("my_einsum") && msg.contains("Einsum"), "{msg}");
}

#[test]
fn run_errors_like_the_interpreter() {
    let g = parse("input %x: f32[5]\ninput %i: i64[2]\n%y = Gather(%x, %i)\noutput %y");
    let exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    let x = f32_tensor(&[5], vec![1.0; 5]);
    let bad = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[2]), vec![1, 9]).unwrap());
    let err = exe
        .run(&[("x".into(), x.clone()), ("i".into(), bad)])
        .unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    let err = exe.run(&[("x".into(), x.clone())]).unwrap_err();
    assert!(err.to_string().contains("missing graph input"), "{err}");
    let err = exe
        .run(&[("x".into(), f32_tensor(&[4], vec![0.0; 4]))])
        .unwrap_err();
    assert!(err.to_string().contains("expects"), "{err}");
    // i64 division by zero is reported, not a crash.
    let g = parse("input %a: i64[3]\ninput %b: i64[3]\n%y = Div(%a, %b)\noutput %y");
    let exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    let a = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[3]), vec![1, 2, 3]).unwrap());
    let b = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[3]), vec![1, 0, 3]).unwrap());
    let err = exe.run(&[("a".into(), a), ("b".into(), b)]).unwrap_err();
    assert!(err.to_string().contains("division by zero"), "{err}");
}

#[test]
fn executable_is_send_sync_and_reusable() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<dnnc_runtime::cpu::Executable>();
    let g = parse("input %x: f32[4,9]\n%y = Tanh(%x)\noutput %y");
    let exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    std::thread::scope(|s| {
        for seed in 0..4u64 {
            let (exe, g) = (&exe, &g);
            s.spawn(move || {
                for k in 0..5 {
                    let ins = inputs(g, seed * 10 + k, -3.0, 3.0);
                    let want = dnnc_runtime::run(g, &ins).unwrap();
                    let got = exe.run(&ins).unwrap();
                    cpu_common::assert_close("threaded", &got[0], &want[0], 1e-4, 1e-5);
                }
            });
        }
    });
}

/// A sum keeping a last axis of 8 lanes (a channel-blocked tensor's
/// planes summed) adds each lane's elements in order, so every result is
/// bitwise the sequential f32 sum, whichever thread takes its unit and
/// however many units run together: 15 units (three groups of four and
/// three alone) at 1, 2 and 3 threads.
#[test]
fn lane_sums_add_in_order_at_any_thread_count() {
    let shape = [3usize, 5, 6, 7, 8];
    let g =
        parse("input %x: f32[3,5,6,7,8]\n%y = ReduceSum(%x) {axes=[2,3], keepdims=1}\noutput %y");
    let x = rand_f32(&shape, 11, -3.0, 3.0);
    let xs = x.as_f32().expect("f32 input").to_owned();
    let xv: Vec<f32> = xs.iter().copied().collect();
    let mut want = Vec::new();
    for unit in 0..15 {
        for lane in 0..8 {
            let mut s = 0f32;
            for p in 0..42 {
                s += xv[unit * 42 * 8 + p * 8 + lane];
            }
            want.push(s.to_bits());
        }
    }
    let mut exe = compile_cpu(&g, &CpuOptions::default()).expect("compile");
    for threads in [1, 2, 3] {
        exe.set_threads(threads).expect("threads");
        let got = exe.run(&[("x".to_string(), x.clone())]).expect("run");
        let got: Vec<u32> = got[0]
            .as_f32()
            .expect("f32 output")
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(got, want, "{threads} threads");
    }
}

/// Compiles `g` and asserts its first output at two threads is bitwise
/// the one at one thread (`what` names the case).
fn two_threads_bitwise(g: &Graph, ins: &[(String, Tensor)], what: &str) {
    let mut exe = compile_cpu(g, &CpuOptions::default()).unwrap();
    let bits = |t: &[Tensor]| match &t[0] {
        Tensor::F32(a) => a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        _ => unreachable!(),
    };
    exe.set_threads(1).unwrap();
    let one = bits(&exe.run(ins).unwrap());
    exe.set_threads(2).unwrap();
    assert_eq!(one, bits(&exe.run(ins).unwrap()), "{what}");
}

/// Softmax and LogSoftmax along a contiguous last axis run four lanes at
/// a time with a scalar tail: rows of 4, 8, 9 and 197 elements (ViT's
/// attention rows) against the interpreter, with the values that decide
/// the max and the sum — a NaN in a row (every output NaN, as the
/// interpreter's), a row of -inf (NaN), -inf entries among finite ones
/// (zero weight), large logits, a last element far above the rest — and
/// two threads bitwise one.
#[test]
fn softmax_rows_run_in_vectors() {
    for len in [4usize, 8, 9, 197] {
        for op in ["Softmax", "LogSoftmax"] {
            let body = format!("input %x: f32[2,3,{len}]\n%y = {op}(%x) {{axis=-1}}\noutput %y");
            let g = parse(&body);
            let mut r = Rng(len as u64);
            let mut v: Vec<f32> = (0..6 * len).map(|_| r.uniform(-8.0, 8.0)).collect();
            // Row 1: a NaN in the tail or the vectors; row 2: all -inf;
            // row 3: -inf entries; row 4: logits near f32's exp range.
            v[len + len - 1] = f32::NAN;
            v[2 * len..3 * len].fill(f32::NEG_INFINITY);
            v[3 * len] = f32::NEG_INFINITY;
            v[4 * len - 1] = f32::NEG_INFINITY;
            for x in &mut v[4 * len..5 * len] {
                *x += 80.0;
            }
            // Row 5: its last element so far above the rest that a max
            // missing it overflows the exponentials.
            v[6 * len - 1] = 100.0;
            let ins = vec![("x".to_string(), f32_tensor(&[2, 3, len], v))];
            check(&g, &ins);
            two_threads_bitwise(&g, &ins, &body);
        }
    }
}

/// LayerNormalization over the last axis with a scale and a bias of its
/// length (a transformer's) runs four lanes at a time with a scalar tail
/// and splits its rows across threads: rows of 4, 7 and 768 elements,
/// with and without a bias, a row of large offset values (the variance
/// of deviations, not of values), and a fused Relu after it, against the
/// interpreter; two threads bitwise one.
#[test]
fn layer_norm_rows_run_in_vectors_and_split() {
    for l in [4usize, 7, 768] {
        for (bias, tail) in [(true, ""), (false, "\n%r = Relu(%y)")] {
            let out = if tail.is_empty() { "%y" } else { "%r" };
            let (bp, bv) = if bias {
                (
                    format!("\nparam %b: f32[{l}] = uniform(low=-1, high=1, seed=2)"),
                    ", %b",
                )
            } else {
                (String::new(), "")
            };
            let body = format!(
                "input %x: f32[3,50,{l}]\nparam %s: f32[{l}] = uniform(low=0.5, high=1.5, seed=1){bp}\n%y = LayerNormalization(%x, %s{bv}) {{axis=-1, epsilon=1e-5}}{tail}\noutput {out}"
            );
            let g = parse(&body);
            let mut r = Rng(l as u64);
            let mut v: Vec<f32> = (0..150 * l).map(|_| r.uniform(-3.0, 5.0)).collect();
            for x in &mut v[..l] {
                *x += 20.0;
            }
            let ins = vec![("x".to_string(), f32_tensor(&[3, 50, l], v))];
            check(&g, &ins);
            two_threads_bitwise(&g, &ins, &body);
        }
    }
}

/// A MatMul by a weight followed by a bias Add and the GELU the
/// exporters write (`x * 0.5 * (1 + erf(x / sqrt 2))` as Div, Erf, Add,
/// Mul, Mul: ViT's and ConvNeXt's MLPs) applies bias and GELU as its
/// packed GEMM stores, on every kernel and layout. Against the
/// interpreter, and bitwise against the same graph with the biased value
/// also an output (which keeps the chain out of the GEMM): rows and
/// features that leave partial tiles, `k` within one block and over two,
/// eight rows (the lanes layout on AVX2 and AVX-512), one row (a
/// matrix-vector product), one thread and two; a chain with another
/// constant stays generic and is still right.
#[test]
fn matmul_bias_gelu_fuses_into_the_gemm_bitwise() {
    let graph = |(b, rows, k, n): (usize, usize, usize, usize), sqrt2: &str, extra_out: bool| {
        format!(
            "input %x: f32[{b},{rows},{k}]\nparam %w: f32[{k},{n}] = he(seed=1)\nparam %b: f32[{n}] = uniform(low=-0.5, high=0.5, seed=2)\nconst %s2: f32[] = [{sqrt2}]\nconst %one: f32[] = [1.0]\nconst %half: f32[] = [0.5]\n%m = MatMul(%x, %w)\n%a = Add(%m, %b)\n%d = Div(%a, %s2)\n%e = Erf(%d)\n%p = Add(%e, %one)\n%q = Mul(%a, %p)\n%r = Mul(%q, %half)\noutput %r{}",
            if extra_out { "\noutput %a" } else { "" }
        )
    };
    let bits = |t: &Tensor| match t {
        Tensor::F32(a) => a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        _ => unreachable!(),
    };
    for dims in [
        (2, 37, 64, 40),
        (2, 5, 300, 22),
        (2, 100, 48, 96),
        (2, 4, 64, 96),
        (1, 1, 70, 45),
    ] {
        for sqrt2 in ["1.4142135", "1.5"] {
            let g = parse(&graph(dims, sqrt2, false));
            let apart = parse(&graph(dims, sqrt2, true));
            let ins = inputs(&g, 3, -3.0, 3.0);
            check(&g, &ins);
            check(&apart, &ins);
            let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
            let plain = compile_cpu(&apart, &CpuOptions::default()).unwrap();
            let want = bits(&plain.run(&ins).unwrap()[0]);
            for threads in [1, 2] {
                exe.set_threads(threads).unwrap();
                assert_eq!(
                    bits(&exe.run(&ins).unwrap()[0]),
                    want,
                    "{dims:?} sqrt2={sqrt2} threads {threads}"
                );
            }
        }
    }
}
