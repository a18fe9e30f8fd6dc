//! GEMMs whose weight operand is packed at compile time
//! (`dnnc_sgemm_packed`) against the interpreter: Gemm with a weight B or A
//! under every transpose, alpha and batch; MatMul with a 2-D weight on
//! either side (batched other operand); im2col convs whose output rows
//! split into several chunks with a tail; all at 1 and 2 threads.

mod cpu_common;

use cpu_common::{check_with, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, ConvAlgo, CpuOptions};

fn run(src: &str, ins: &[(&str, Vec<usize>)], opts: &CpuOptions) {
    let g = dnnc_ir::text::parse(src, "t.dnn").unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    let ins: Vec<_> = ins
        .iter()
        .enumerate()
        .map(|(i, (n, s))| (n.to_string(), rand_f32(s, 77 + i as u64, -1.0, 1.0)))
        .collect();
    check_with(&g, &ins, 1e-4, 1e-4, opts);
    // Two threads: bitwise the same as one.
    let one = compile_cpu(&g, opts).unwrap().run(&ins).unwrap();
    let mut exe = compile_cpu(&g, opts).unwrap();
    exe.set_threads(2).unwrap();
    let two = exe.run(&ins).unwrap();
    assert_eq!(one, two, "{src}");
}

#[test]
fn gemm_with_weight_operand_matches() {
    let d = CpuOptions::default();
    for (ta, tb) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        for batch in [1usize, 3, 40] {
            let (m, k, n) = (batch, 37, 29);
            let sa = if ta == 1 { [k, m] } else { [m, k] };
            let sb = if tb == 1 { [n, k] } else { [k, n] };
            // Weight B (a fully-connected layer).
            let src = format!(
                "graph g {{\ninput %a: f32[{},{}]\nparam %w: f32[{},{}] = he(seed=3)\nparam %c: f32[{n}] = uniform(low=-1, high=1, seed=4)\n%y = Gemm(%a, %w, %c) {{alpha=0.5, beta=2.0, transA={ta}, transB={tb}}}\n%r = Relu(%y)\noutput %r\n}}\n",
                sa[0], sa[1], sb[0], sb[1]
            );
            run(&src, &[("a", sa.to_vec())], &d);
            // Weight A.
            let src = format!(
                "graph g {{\nparam %w: f32[{},{}] = he(seed=5)\ninput %b: f32[{},{}]\n%y = Gemm(%w, %b) {{alpha=1.5, transA={ta}, transB={tb}}}\noutput %y\n}}\n",
                sa[0], sa[1], sb[0], sb[1]
            );
            run(&src, &[("b", sb.to_vec())], &d);
        }
    }
}

#[test]
fn matmul_with_weight_operand_matches() {
    let d = CpuOptions::default();
    for a in ["[2,3,5,70]", "[5,70]", "[70]", "[1,70]"] {
        let src = format!(
            "graph g {{\ninput %a: f32{a}\nparam %w: f32[70,33] = he(seed=6)\n%y = MatMul(%a, %w)\noutput %y\n}}\n"
        );
        let shape: Vec<usize> = a
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .map(|s| s.parse().unwrap())
            .collect();
        run(&src, &[("a", shape)], &d);
    }
    for b in ["[2,3,70,9]", "[70,9]", "[70,1]"] {
        let src = format!(
            "graph g {{\nparam %w: f32[17,70] = he(seed=7)\ninput %b: f32{b}\n%y = MatMul(%w, %b)\noutput %y\n}}\n"
        );
        let shape: Vec<usize> = b
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .map(|s| s.parse().unwrap())
            .collect();
        run(&src, &[("b", shape)], &d);
    }
}

#[test]
fn chunked_im2col_and_pointwise_match() {
    // 5x5/s2 on 3 channels: K = 75, 126 output rows of 123 run in chunks
    // of 8 rows plus a tail of 6; a grouped dilated conv (chunks of 3 rows
    // plus 1); a grouped pointwise conv; an im2col conv with 49 columns.
    let cases = [
        (
            "[1,3,251,245]",
            "[16,3,5,5]",
            "strides=[2,2], pads=[2,2,2,2], dilations=[1,1], group=1",
            ConvAlgo::Im2col,
        ),
        (
            "[2,4,37,300]",
            "[6,2,3,3]",
            "strides=[1,1], pads=[1,0,1,0], dilations=[1,2], group=2",
            ConvAlgo::Im2col,
        ),
        (
            "[1,6,19,23]",
            "[9,2,1,1]",
            "strides=[1,1], pads=[0,0,0,0], dilations=[1,1], group=3",
            ConvAlgo::Pointwise,
        ),
        (
            "[1,64,7,7]",
            "[40,64,3,3]",
            "strides=[1,1], pads=[1,1,1,1], dilations=[1,1], group=1",
            ConvAlgo::Im2col,
        ),
    ];
    for (x, w, attrs, algo) in cases {
        let src = format!(
            "graph g {{\ninput %x: f32{x}\nparam %w: f32{w} = he(seed=8)\nparam %b: f32[{}] = uniform(low=-1, high=1, seed=9)\n%c = Conv2d(%x, %w, %b) {{{attrs}}}\n%y = Relu(%c)\noutput %y\n}}\n",
            w.trim_matches('[').split(',').next().unwrap()
        );
        let shape: Vec<usize> = x
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .map(|s| s.parse().unwrap())
            .collect();
        let opts = CpuOptions {
            conv_algo: Some(algo),
            ..Default::default()
        };
        run(&src, &[("x", shape)], &opts);
    }
}

fn dims(s: &str) -> Vec<usize> {
    s.trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect()
}

/// Epilogues the packed GEMM applies as it stores (bias, residual Add,
/// Relu/Clip, in the orders models use) and near misses that keep the
/// generated pass, on im2col (chunked, grouped) and pointwise convs.
#[test]
fn conv_fused_epilogues_match() {
    // (input, filter, attrs, output shape, algorithm)
    let convs = [
        (
            "[1,3,61,45]",
            "[16,3,5,5]",
            "strides=[2,2], pads=[2,2,2,2], dilations=[1,1], group=1",
            "[1,16,31,23]",
            ConvAlgo::Im2col,
        ),
        (
            "[2,4,37,300]",
            "[6,2,3,3]",
            "strides=[1,1], pads=[1,1,1,1], dilations=[1,1], group=2",
            "[2,6,37,300]",
            ConvAlgo::Im2col,
        ),
        (
            "[1,16,19,23]",
            "[30,16,1,1]",
            "strides=[1,1], pads=[0,0,0,0], dilations=[1,1], group=1",
            "[1,30,19,23]",
            ConvAlgo::Pointwise,
        ),
        (
            "[2,6,9,7]",
            "[9,2,1,1]",
            "strides=[1,1], pads=[0,0,0,0], dilations=[1,1], group=3",
            "[2,9,9,7]",
            ConvAlgo::Pointwise,
        ),
    ];
    // (epilogue after `%c`, its result, output list, with bias)
    let tails = [
        ("%y = Relu(%c)", "%y", true),
        ("%y = Clip(%c) {min=0, max=6}", "%y", true),
        ("%y = Clip(%c) {min=-0.25, max=0.5}", "%y", false),
        ("%s = Add(%c, %r)\n%y = Relu(%s)", "%y", true),
        ("%s = Add(%r, %c)\n%y = Relu(%s)", "%y", false),
        ("%y = Add(%r, %c)", "%y", true),
        ("%y = Relu(%c)", "%y, %c", true),
        ("%t = Relu(%c)\n%y = Add(%t, %r)", "%y", true),
        ("", "%c", true),
    ];
    for (x, w, attrs, out, algo) in convs {
        let wd = dims(w);
        for (tail, outs, bias) in tails {
            let (bparam, barg) = if bias {
                (
                    format!(
                        "param %b: f32[{}] = uniform(low=-1, high=1, seed=9)\n",
                        wd[0]
                    ),
                    ", %b",
                )
            } else {
                (String::new(), "")
            };
            let rin = if tail.contains("%r") {
                format!("input %r: f32{out}\n")
            } else {
                String::new()
            };
            let src = format!(
                "graph g {{\ninput %x: f32{x}\n{rin}param %w: f32{w} = he(seed=8)\n{bparam}%c = Conv2d(%x, %w{barg}) {{{attrs}}}\n{tail}\noutput {outs}\n}}\n"
            );
            let mut ins = vec![("x", dims(x))];
            if !rin.is_empty() {
                ins.push(("r", dims(out)));
            }
            let opts = CpuOptions {
                conv_algo: Some(algo),
                ..Default::default()
            };
            run(&src, &ins, &opts);
        }
    }
}

/// Gemm with a weight operand and bias (beta 1) then Relu or a residual
/// Add, fused into the packed GEMM; beta != 1 and a full-matrix C keep the
/// generated pass.
#[test]
fn gemm_fused_epilogues_match() {
    let d = CpuOptions::default();
    for batch in [1usize, 5, 40] {
        let (k, n) = (70, 33);
        for (c, beta, tail) in [
            (format!("[{n}]"), "1.0", "%y = Relu(%g)"),
            (
                format!("[1,{n}]"),
                "1.0",
                "%y = Clip(%g) {min=-0.5, max=0.5}",
            ),
            (format!("[{n}]"), "1.0", "%s = Add(%g, %r)\n%y = Relu(%s)"),
            (format!("[{n}]"), "0.5", "%y = Relu(%g)"),
            (format!("[{batch},{n}]"), "1.0", "%y = Relu(%g)"),
        ] {
            let rin = if tail.contains("%r") {
                format!("input %r: f32[{batch},{n}]\n")
            } else {
                String::new()
            };
            // Weight B (a fully-connected layer, transposed as in ONNX).
            let src = format!(
                "graph g {{\ninput %a: f32[{batch},{k}]\n{rin}param %w: f32[{n},{k}] = he(seed=3)\nparam %c: f32{c} = uniform(low=-1, high=1, seed=4)\n%g = Gemm(%a, %w, %c) {{alpha=1.0, beta={beta}, transB=1}}\n{tail}\noutput %y\n}}\n"
            );
            let mut ins = vec![("a", vec![batch, k])];
            if !rin.is_empty() {
                ins.push(("r", vec![batch, n]));
            }
            run(&src, &ins, &d);
        }
        // Weight A with a per-row C `[m, 1]`.
        let m = 29;
        let src = format!(
            "graph g {{\nparam %w: f32[{m},{k}] = he(seed=5)\ninput %b: f32[{k},{batch}]\nparam %c: f32[{m},1] = uniform(low=-1, high=1, seed=4)\n%g = Gemm(%w, %b, %c)\n%y = Relu(%g)\noutput %y\n}}\n"
        );
        run(&src, &[("b", vec![k, batch])], &d);
    }
}

/// A pointwise conv on 1x1 maps at batch 2 to 9 (a squeeze-excitation
/// conv, a conv after a global pool) is one GEMM whose columns are the
/// images: with bias and Relu, with a residual and Sigmoid, with a
/// clamp, and with channel counts that leave partial tiles; against the
/// interpreter, at 1 and 2 threads.
#[test]
fn pointwise_convs_on_one_pixel_maps_batch_as_one_gemm() {
    let d = CpuOptions::default();
    for (n, c, m) in [(2, 16, 8), (8, 110, 440), (9, 37, 23)] {
        let src = format!(
            "graph g {{\ninput %x: f32[{n},{c},1,1]\ninput %r: f32[{n},{m},1,1]\nparam %w: f32[{m},{c},1,1] = he(seed=3)\nparam %b: f32[{m}] = uniform(low=-1, high=1, seed=4)\n%y = Conv2d(%x, %w, %b)\n%yr = Relu(%y)\n%z = Conv2d(%x, %w)\n%za = Add(%z, %r)\n%zs = Sigmoid(%za)\n%q = Conv2d(%x, %w, %b)\n%qc = Clip(%q) {{min=-0.5, max=0.5}}\noutput %yr\noutput %zs\noutput %qc\n}}\n"
        );
        run(
            &src,
            &[("x", vec![n, c, 1, 1]), ("r", vec![n, m, 1, 1])],
            &d,
        );
    }
}
