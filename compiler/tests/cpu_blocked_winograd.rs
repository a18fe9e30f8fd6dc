//! Winograd convs on channel-blocked data (`data=nchw8c`,
//! `algo=winograd2|winograd4`): the transforms read a block's rows into
//! eight padded planes and write its eight output planes back as blocked
//! rows with bias, residual and clamp (`dnnc_runtime::cpu::reblock`).
//!
//! Oracles: the interpreter on the plain graph, and the same conv in the
//! plain layout, which runs the same arithmetic (same padded planes, same
//! transforms and GEMMs, the epilogue in the same order), so the blocked
//! result must be bitwise the plain one. Over F(2x2) and F(4x4), padding
//! 0 and 1, maps from 5x5 to 112x112 (the generated and the native F(4x4)
//! output rows, phases, images sharing their GEMMs, bands of tile rows),
//! batch 1 to 8, and one, two and three threads.

mod cpu_common;

use cpu_common::{bits, check_with, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};

/// The fused ops after a conv `%c` producing `%y`, and the extra input
/// they read (a residual `%r` of the conv's shape).
#[derive(Clone, Copy, Debug)]
enum Ep {
    /// Bias and Relu.
    Relu,
    /// Bias, residual Add and Clip.
    ResidualClip,
    /// Relu on a conv without bias.
    ReluNoBias,
    /// Bias and Sigmoid (a generated epilogue after the blocked rows).
    Sigmoid,
}

impl Ep {
    fn bias(self) -> bool {
        !matches!(self, Ep::ReluNoBias)
    }
    fn residual(self) -> bool {
        matches!(self, Ep::ResidualClip)
    }
    /// Lines computing `%y` from `%c` (and `%r`).
    fn lines(self) -> &'static str {
        match self {
            Ep::Relu => "  %y = Relu(%c)",
            Ep::ResidualClip => "  %s = Add(%c, %r)\n  %y = Clip(%s) {min=-0.5, max=0.75}",
            Ep::ReluNoBias => "  %y = Relu(%c)",
            Ep::Sigmoid => "  %y = Sigmoid(%c)",
        }
    }
}

/// One 3x3 conv case: batch, input and output channels, map side,
/// Winograd tile, padding, epilogue.
#[derive(Clone, Copy, Debug)]
struct Case {
    n: usize,
    c: usize,
    m: usize,
    hw: usize,
    tile: usize,
    pad: usize,
    ep: Ep,
}

const CASES: &[Case] = &[
    Case {
        n: 1,
        c: 16,
        m: 32,
        hw: 14,
        tile: 4,
        pad: 1,
        ep: Ep::Relu,
    },
    Case {
        n: 1,
        c: 16,
        m: 32,
        hw: 14,
        tile: 2,
        pad: 1,
        ep: Ep::ResidualClip,
    },
    Case {
        n: 1,
        c: 24,
        m: 16,
        hw: 5,
        tile: 4,
        pad: 1,
        ep: Ep::ReluNoBias,
    },
    Case {
        n: 1,
        c: 8,
        m: 16,
        hw: 9,
        tile: 2,
        pad: 0,
        ep: Ep::Sigmoid,
    },
    // 14 tiles a row: the native F(4x4) output rows on AVX-512.
    Case {
        n: 1,
        c: 16,
        m: 16,
        hw: 56,
        tile: 4,
        pad: 1,
        ep: Ep::ResidualClip,
    },
    Case {
        n: 1,
        c: 16,
        m: 24,
        hw: 57,
        tile: 4,
        pad: 1,
        ep: Ep::Sigmoid,
    },
    Case {
        n: 2,
        c: 32,
        m: 32,
        hw: 28,
        tile: 4,
        pad: 1,
        ep: Ep::Relu,
    },
    Case {
        n: 8,
        c: 64,
        m: 64,
        hw: 7,
        tile: 4,
        pad: 1,
        ep: Ep::ResidualClip,
    },
    Case {
        n: 8,
        c: 32,
        m: 32,
        hw: 7,
        tile: 2,
        pad: 1,
        ep: Ep::Relu,
    },
    Case {
        n: 3,
        c: 16,
        m: 16,
        hw: 11,
        tile: 2,
        pad: 0,
        ep: Ep::ResidualClip,
    },
    // Large maps: bands of tile rows.
    Case {
        n: 1,
        c: 32,
        m: 32,
        hw: 112,
        tile: 4,
        pad: 1,
        ep: Ep::Relu,
    },
    Case {
        n: 2,
        c: 16,
        m: 16,
        hw: 96,
        tile: 2,
        pad: 1,
        ep: Ep::ResidualClip,
    },
];

impl Case {
    fn oh(&self) -> usize {
        self.hw + 2 * self.pad - 2
    }

    /// The conv's parameters and (in the plain graph) its input and
    /// residual declarations.
    fn params(&self) -> String {
        let Case { c, m, .. } = *self;
        let mut s = format!("  param %w: f32[{m},{c},3,3] = he(seed=3)\n");
        if self.ep.bias() {
            s += &format!("  param %b: f32[{m}] = uniform(low=-0.3, high=0.3, seed=4)\n");
        }
        s
    }

    fn conv(&self, x: &str, data: &str) -> String {
        let p = self.pad;
        let bias = if self.ep.bias() { ", %b" } else { "" };
        let algo = if self.tile == 2 {
            "winograd2"
        } else {
            "winograd4"
        };
        format!("  %c = Conv2d({x}, %w{bias}) {{pads=[{p},{p},{p},{p}], algo={algo}{data}}}\n")
    }

    fn inputs_decl(&self) -> String {
        let Case { n, c, m, hw, .. } = *self;
        let oh = self.oh();
        let mut s = format!("  input %x: f32[{n},{c},{hw},{hw}]\n");
        if self.ep.residual() {
            s += &format!("  input %rp: f32[{n},{m},{oh},{oh}]\n");
        }
        s
    }

    /// The conv in the plain layout.
    fn plain(&self) -> String {
        let mut s = self.inputs_decl() + &self.params();
        if self.ep.residual() {
            s += "  %r = Relu(%rp)\n";
        }
        s += &self.conv("%x", "");
        s + self.ep.lines() + "\n  output %y"
    }

    /// The same conv written on blocked data: reorders into the layout,
    /// the conv and its epilogue on `[N, C/8, H, W, 8]`, a reorder out.
    fn blocked(&self) -> String {
        let Case { n, c, m, hw, .. } = *self;
        let oh = self.oh();
        let mut s = self.inputs_decl() + &self.params();
        s += &format!(
            "  %xb = Reshape(%x) {{shape=[{n},{},8,{hw},{hw}]}}\n  %xt = Transpose(%xb) {{perm=[0,1,3,4,2]}}\n",
            c / 8
        );
        if self.ep.residual() {
            s += &format!(
                "  %rb = Reshape(%rp) {{shape=[{n},{},8,{oh},{oh}]}}\n  %rt = Transpose(%rb) {{perm=[0,1,3,4,2]}}\n  %r = Relu(%rt)\n",
                m / 8
            );
        }
        s += &self.conv("%xt", ", data=nchw8c");
        s += self.ep.lines();
        s += &format!(
            "\n  %yt = Transpose(%y) {{perm=[0,1,4,2,3]}}\n  %yo = Reshape(%yt) {{shape=[{n},{m},{oh},{oh}]}}\n  output %yo"
        );
        s
    }

    fn inputs(&self, g: &dnnc_ir::Graph) -> Vec<(String, dnnc_ir::Tensor)> {
        g.inputs()
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                (
                    g.value(v).name.clone(),
                    rand_f32(&g.value(v).ty.shape, 17 + i as u64, -1.0, 1.0),
                )
            })
            .collect()
    }
}

/// `g` after the `block-channels` pass (as the CPU backend runs it by
/// default), printed: what the tests look for the blocked ops in.
fn blocked_text(g: &dnnc_ir::Graph) -> String {
    let mut relaid = g.clone();
    dnnc_passes::block_channels::block_channels(&mut relaid).expect("block-channels");
    dnnc_ir::text::print(&relaid)
}

/// Runs `g` at 1, 2 and 3 threads, asserts the three are bitwise equal,
/// and returns the bits.
fn at_every_thread_count(
    g: &dnnc_ir::Graph,
    ins: &[(String, dnnc_ir::Tensor)],
    what: &str,
) -> Vec<u32> {
    let mut exe =
        compile_cpu(g, &CpuOptions::default()).unwrap_or_else(|e| panic!("compile {what}: {e}"));
    let one = bits(&exe.run(ins).expect("run"));
    for t in [2, 3] {
        exe.set_threads(t).expect("threads");
        assert_eq!(
            one,
            bits(&exe.run(ins).expect("run")),
            "{t} threads bitwise: {what}"
        );
    }
    one
}

#[test]
fn blocked_winograd_matches_the_interpreter_and_the_plain_layout() {
    for case in CASES {
        let what = format!("{case:?}");
        let blocked = parse(&case.blocked());
        let plain = parse(&case.plain());
        let ins = case.inputs(&plain);
        // Against the interpreter's direct conv at the Winograd bound
        // (the model check's tolerance; docs/cpu-backend.md, "Convolution
        // algorithms", Accuracy); the interpreter runs the blocked graph's
        // reorders and conv as written.
        check_with(&blocked, &ins, 1e-3, 1e-4, &CpuOptions::default());
        check_with(&plain, &ins, 1e-3, 1e-4, &CpuOptions::default());
        let b = at_every_thread_count(&blocked, &ins, &what);
        let p = at_every_thread_count(&plain, &ins, &what);
        assert!(b == p, "blocked bitwise the plain layout: {what}");
    }
}

/// Two bottleneck blocks (pointwise, 3x3, pointwise with a residual)
/// after a pointwise stem, which the `block-channels` pass puts in one
/// blocked region, Winograd included.
#[test]
fn bottleneck_chains_run_blocked_with_their_winograd_convs() {
    for (n, c, mid, hw, algo) in [
        (1, 32, 24, 14, "winograd4"),
        (2, 32, 24, 10, "winograd2"),
        (8, 64, 32, 7, "winograd4"),
    ] {
        let block = |i: usize, x: &str| {
            format!(
                "  param %w1_{i}: f32[{mid},{c},1,1] = he(seed={})
  param %b1_{i}: f32[{mid}] = uniform(low=-0.2, high=0.2, seed={})
  param %w2_{i}: f32[{mid},{mid},3,3] = he(seed={})
  param %b2_{i}: f32[{mid}] = uniform(low=-0.2, high=0.2, seed={})
  param %w3_{i}: f32[{c},{mid},1,1] = he(seed={})
  %e_{i} = Conv2d({x}, %w1_{i}, %b1_{i})
  %er_{i} = Relu(%e_{i})
  %d_{i} = Conv2d(%er_{i}, %w2_{i}, %b2_{i}) {{pads=[1,1,1,1], algo={algo}}}
  %dr_{i} = Relu(%d_{i})
  %q_{i} = Conv2d(%dr_{i}, %w3_{i})
  %s_{i} = Add(%q_{i}, {x})
  %y_{i} = Relu(%s_{i})
",
                10 * i + 1,
                10 * i + 2,
                10 * i + 3,
                10 * i + 4,
                10 * i + 5
            )
        };
        let body = format!(
            "  input %x: f32[{n},8,{hw},{hw}]
  param %w0: f32[{c},8,1,1] = he(seed=100)
  %a = Conv2d(%x, %w0)
  %ar = Relu(%a)
{}{}  output %y_2",
            block(1, "%ar"),
            block(2, "%y_1")
        );
        let g = parse(&body);
        let text = blocked_text(&g);
        assert_eq!(
            text.matches(&format!("algo={algo}, data=nchw8c")).count(),
            2,
            "both 3x3 convs run blocked:\n{text}"
        );
        let ins = vec![("x".to_string(), rand_f32(&[n, 8, hw, hw], 5, -1.0, 1.0))];
        check_with(&g, &ins, 1e-3, 1e-4, &CpuOptions::default());
        at_every_thread_count(&g, &ins, &body);
    }
}

/// A blocked Winograd conv reading a pointwise result of 1 MiB or more
/// (which a blocked depthwise conv would compute row by row inside its
/// own kernel) gets that result from its own kernel: it compiled to an
/// error ("has no buffer") when the fused-expansion rule took the
/// Winograd conv for a depthwise one.
#[test]
fn winograd_convs_after_big_pointwise_results_compile_and_match() {
    let body = "  input %x: f32[1,8,64,64]
  param %w0: f32[32,8,1,1] = he(seed=1)
  param %w1: f32[64,32,1,1] = he(seed=2)
  param %w2: f32[64,64,3,3] = he(seed=3)
  param %b2: f32[64] = uniform(low=-0.2, high=0.2, seed=5)
  param %w3: f32[32,64,1,1] = he(seed=4)
  %a = Conv2d(%x, %w0)
  %ar = Relu(%a)
  %e = Conv2d(%ar, %w1)
  %er = Relu(%e)
  %d = Conv2d(%er, %w2, %b2) {pads=[1,1,1,1], algo=winograd4}
  %dr = Relu(%d)
  %q = Conv2d(%dr, %w3)
  %p = GlobalAveragePool(%q)
  output %p";
    let g = parse(body);
    let text = blocked_text(&g);
    assert!(
        text.contains("algo=winograd4, data=nchw8c"),
        "the 3x3 conv runs blocked:\n{text}"
    );
    let ins = vec![("x".to_string(), rand_f32(&[1, 8, 64, 64], 7, -1.0, 1.0))];
    check_with(&g, &ins, 1e-3, 1e-4, &CpuOptions::default());
    at_every_thread_count(&g, &ins, body);
}

/// A residual from a conv outside the region (dilated: no blocked
/// kernel) is reordered into the blocked layout for its Add.
#[test]
fn plain_residuals_reordered_into_a_region_match_the_interpreter() {
    let body = "  input %x: f32[2,8,12,12]
  param %wa: f32[32,8,1,1] = he(seed=1)
  param %wb: f32[32,32,3,3] = he(seed=2)
  param %bb: f32[32] = uniform(low=-0.2, high=0.2, seed=8)
  param %wc: f32[64,32,1,1] = he(seed=3)
  param %ws: f32[64,8,3,3] = he(seed=4)
  param %wd: f32[64,64,1,1] = he(seed=5)
  param %we: f32[64,64,1,1] = he(seed=6)
  param %wf: f32[64,64,1,1] = he(seed=7)
  %a = Conv2d(%x, %wa)
  %ar = Relu(%a)
  %b = Conv2d(%ar, %wb, %bb) {pads=[1,1,1,1], algo=winograd4}
  %br = Relu(%b)
  %c = Conv2d(%br, %wc)
  %s = Conv2d(%x, %ws) {pads=[2,2,2,2], dilations=[2,2], algo=im2col}
  %y = Add(%c, %s)
  %yr = Relu(%y)
  %d = Conv2d(%yr, %wd)
  %e = Conv2d(%d, %we)
  %f = Conv2d(%e, %wf)
  %p = GlobalAveragePool(%f)
  output %p";
    let g = parse(body);
    let text = blocked_text(&g);
    assert!(
        text.contains("%s.to_nchw8c"),
        "the residual is reordered in:\n{text}"
    );
    let ins = vec![("x".to_string(), rand_f32(&[2, 8, 12, 12], 9, -1.0, 1.0))];
    check_with(&g, &ins, 1e-3, 1e-4, &CpuOptions::default());
    at_every_thread_count(&g, &ins, body);
}

/// An inception module as `--optimize` leaves it (the branch convs that
/// read the module's input merged into one, a channel Split handing out
/// the parts, one of them straight to the Concat) runs blocked end to
/// end, the Split's parts views of the merged result, and matches the
/// interpreter, bitwise the same at 1-3 threads; so does the build with
/// pools and Concats kept plain (whose pointwise GEMMs add the bias last,
/// so the two differ in rounding).
#[test]
fn merged_branches_split_blocked_match_the_interpreter() {
    for (n, hw) in [(1, 14), (2, 7)] {
        let body = format!(
            "  input %x: f32[{n},16,{hw},{hw}]
  param %w0: f32[32,16,1,1] = he(seed=1)
  param %b0: f32[32] = uniform(low=-0.2, high=0.2, seed=6)
  param %wm: f32[56,32,1,1] = he(seed=2)
  param %bm: f32[56] = uniform(low=-0.2, high=0.2, seed=7)
  param %w2: f32[32,24,3,3] = he(seed=3)
  param %w3: f32[16,16,3,3] = he(seed=4)
  param %w4: f32[16,32,1,1] = he(seed=5)
  %s = Conv2d(%x, %w0, %b0)
  %sr = Relu(%s)
  %m = Conv2d(%sr, %wm, %bm)
  %mr = Relu(%m)
  %b2, %b3, %b1 = Split(%mr) {{axis=1, split=[24,16,16]}}
  %c2 = Conv2d(%b2, %w2) {{pads=[1,1,1,1], algo=winograd4}}
  %c3 = Conv2d(%b3, %w3) {{pads=[1,1,1,1], algo=winograd2}}
  %p = MaxPool(%sr) {{kernel=[3,3], strides=[1,1], pads=[1,1,1,1]}}
  %c4 = Conv2d(%p, %w4)
  %y = Concat(%b1, %c2, %c3, %c4) {{axis=1}}
  %g = GlobalAveragePool(%y)
  output %g"
        );
        let g = parse(&body);
        let text = blocked_text(&g);
        assert!(
            text.contains("= Split(%mr) {axis=1, split=[3,2,2]}"),
            "the Split runs blocked:\n{text}"
        );
        let ins = vec![("x".to_string(), rand_f32(&[n, 16, hw, hw], 3, -1.0, 1.0))];
        check_with(&g, &ins, 1e-3, 1e-4, &CpuOptions::default());
        at_every_thread_count(&g, &ins, &body);
        let plain_pools = CpuOptions {
            plain_pools: true,
            ..Default::default()
        };
        check_with(&g, &ins, 1e-3, 1e-4, &plain_pools);
    }
}

/// By default pools and Concats join the blocked regions, so GoogLeNet
/// and SqueezeNet run blocked from their stem pool to their global pool
/// (max pools `data=nchw8c`, channel Concats of blocks); with them kept
/// plain (`CpuOptions::plain_pools`) the regions end at each module's
/// Concat. Either way every zoo model matches onnxruntime's output within
/// rtol 1e-3, atol 1e-4 at 1 and 2 threads.
#[test]
#[ignore = "release-mode numeric test on real models (CI runs it with --include-ignored)"]
fn zoo_models_match_onnxruntime_with_pools_blocked_and_plain() {
    let Some(models) = cpu_common::shared_models() else {
        return;
    };
    let mut blocked_pools = 0;
    for dir in models {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let g = dnnc_compiler::onnx::import_onnx_file(dir.join("model.onnx"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let text = blocked_text(&g);
        if text.contains("MaxPool") && text.contains("ceil_mode=1, data=nchw8c") {
            blocked_pools += 1;
        }
        let x = dnnc_ir::tensor::read_npy(&dir.join("input.npy")).unwrap();
        let want = dnnc_ir::tensor::read_npy(&dir.join("output.npy")).unwrap();
        let ins = vec![(g.value(g.inputs()[0]).name.clone(), x)];
        for plain_pools in [false, true] {
            let opts = CpuOptions {
                plain_pools,
                ..Default::default()
            };
            let mut exe = compile_cpu(&g, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            for threads in [1, 2] {
                exe.set_threads(threads).unwrap();
                let got = exe
                    .run(&ins)
                    .unwrap_or_else(|e| panic!("{name} {threads}T: {e}"));
                let what = format!("{name} plain pools {plain_pools} {threads}T");
                let err = cpu_common::assert_close(&what, &got[0], &want, 1e-3, 1e-4);
                println!("{what:40} max abs err {err:.2e}");
            }
        }
    }
    assert!(
        blocked_pools >= 2,
        "GoogLeNet's and SqueezeNet's max pools run blocked"
    );
}

/// A dense 3x3 conv written on blocked data with `algo=auto` runs as the
/// heuristic's Winograd (as the pass resolves it) and matches the
/// interpreter.
#[test]
fn blocked_auto_3x3_convs_run_as_winograd() {
    let body = "  input %x: f32[1,2,12,12,8]
  param %w: f32[16,16,3,3] = he(seed=1)
  param %b: f32[16] = uniform(low=-0.2, high=0.2, seed=2)
  %c = Conv2d(%x, %w, %b) {data=nchw8c, pads=[1,1,1,1]}
  %y = Relu(%c)
  output %y";
    let g = parse(body);
    let ins = vec![("x".to_string(), rand_f32(&[1, 2, 12, 12, 8], 3, -1.0, 1.0))];
    check_with(&g, &ins, 1e-3, 1e-4, &CpuOptions::default());
    let conv = g
        .topo_order()
        .into_iter()
        .find(|&n| matches!(g.node(n).op, dnnc_ir::Op::Conv2d(_)))
        .expect("a conv");
    let geom = dnnc_passes::ConvGeom::of_node(&g, conv).unwrap();
    assert!(dnnc_passes::block_channels::winograd_algo(&geom).is_some());
}

/// The GPU backend runs NCHW only: a channel-blocked pool or conv is a
/// clear error naming the layout, not a wrong answer.
#[test]
fn the_gpu_backend_refuses_blocked_layouts() {
    use dnnc_compiler::codegen::gpu::{compile_gpu, GpuOptions};
    for body in [
        "  input %x: f32[1,2,8,8,8]
  %p = MaxPool(%x) {kernel=[3,3], strides=[2,2], data=nchw8c}
  output %p",
        "  input %x: f32[1,2,8,8,8]
  param %w: f32[16,16,3,3] = he(seed=1)
  %c = Conv2d(%x, %w) {pads=[1,1,1,1], algo=winograd4, data=nchw8c}
  output %c",
    ] {
        let g = parse(body);
        let msg = match compile_gpu(&g, &GpuOptions::default()) {
            Ok(_) => panic!("compiled for the gpu:\n{body}"),
            Err(e) => e.to_string(),
        };
        assert!(msg.contains("data=nchw8c is a CPU layout"), "{msg}");
    }
}
