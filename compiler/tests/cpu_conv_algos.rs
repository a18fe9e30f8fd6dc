//! Every convolution algorithm of the CPU backend (direct, im2col,
//! Winograd F(2x2) and F(4x4), FFT) against the interpreter on seeded
//! random shapes where it applies: channel counts, odd sizes, asymmetric
//! padding, groups, batch, bias and fused epilogues. Also checks that the
//! requested algorithm really ran (per [`conv_plan`]) and that forcing one
//! where it does not apply falls back visibly.

mod cpu_common;

use cpu_common::{check_with, rand_f32, Rng};
use dnnc_compiler::codegen::cpu::{conv_plan, ConvAlgo, CpuOptions};
use dnnc_ir::{Graph, Tensor};

/// A random conv graph with kernel `kh x kw`, stride 1, dilation 1.
fn random_conv(r: &mut Rng, round: usize, kh: usize, kw: usize) -> (Graph, Vec<(String, Tensor)>) {
    let g = [1, 1, 1, 2, 3][r.below(5)];
    let cg = 1 + r.below(12);
    let mg = 1 + r.below(12);
    let (c, m) = (cg * g, mg * g);
    let pads: Vec<usize> = (0..4).map(|_| r.below(3)).collect();
    let h = kh.saturating_sub(pads[0] + pads[2]).max(1) + r.below(14);
    let w = kw.saturating_sub(pads[1] + pads[3]).max(1) + r.below(14);
    let n = 1 + r.below(2);
    let bias = r.below(2) == 0;
    let epi = [
        "",
        "%y = Relu(%c)",
        "%y = Add(%c, %r)",
        "%s = Sigmoid(%c)\n%y = Mul(%s, %c)",
    ][r.below(4)];
    let oh = h + pads[0] + pads[2] - kh + 1;
    let ow = w + pads[1] + pads[3] - kw + 1;
    let mut body = format!(
        "input %x: f32[{n},{c},{h},{w}]\nparam %w: f32[{m},{cg},{kh},{kw}] = he(seed={round})\n"
    );
    if bias {
        body += &format!(
            "param %b: f32[{m}] = uniform(low=-1, high=1, seed={})\n",
            round + 1000
        );
    }
    if epi.contains("%r") {
        body += &format!("input %r: f32[{n},{m},{oh},{ow}]\n");
    }
    body += &format!(
        "%c = Conv2d(%x, %w{}) {{strides=[1,1], pads=[{},{},{},{}], dilations=[1,1], group={g}}}\n",
        if bias { ", %b" } else { "" },
        pads[0],
        pads[1],
        pads[2],
        pads[3]
    );
    let out = if epi.is_empty() { "%c" } else { "%y" };
    body += &format!("{epi}\noutput {out}");
    let src = format!("graph conv{round} {{\n{body}\n}}\n");
    let graph = dnnc_ir::text::parse(&src, "conv.dnn").unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    let mut ins = vec![(
        "x".to_string(),
        rand_f32(&[n, c, h, w], r.next_u64(), -1.0, 1.0),
    )];
    if epi.contains("%r") {
        ins.push((
            "r".to_string(),
            rand_f32(&[n, m, oh, ow], r.next_u64(), -1.0, 1.0),
        ));
    }
    (graph, ins)
}

fn forced(a: ConvAlgo) -> CpuOptions {
    CpuOptions {
        conv_algo: Some(a),
        ..Default::default()
    }
}

/// Checks `a` ran (no fallback) unless the conv is depthwise (Winograd
/// declines those), then compares with the interpreter.
fn check_algo(g: &Graph, ins: &[(String, Tensor)], a: ConvAlgo, tol: f32) -> f32 {
    let opts = forced(a);
    let plan = conv_plan(g, &opts);
    assert_eq!(plan.len(), 1);
    let depthwise_declined = plan[0]
        .fallback
        .as_deref()
        .is_some_and(|w| w.contains("depthwise"));
    assert!(
        plan[0].algo == a || depthwise_declined,
        "{}: {a:?} fell back: {:?}",
        g.name,
        plan[0].fallback
    );
    check_with(g, ins, tol, tol, &opts)
}

#[test]
fn three_by_three_on_every_algorithm() {
    let rounds: usize = std::env::var("CPU_CONV_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let mut r = Rng(77);
    let mut worst = [0f32; 5];
    for round in 0..rounds {
        let (g, ins) = random_conv(&mut r, round, 3, 3);
        let algos = [
            ConvAlgo::Direct,
            ConvAlgo::Im2col,
            ConvAlgo::Winograd2,
            ConvAlgo::Winograd4,
            ConvAlgo::Fft,
        ];
        for (k, a) in algos.into_iter().enumerate() {
            let e = check_algo(&g, &ins, a, 2e-4);
            worst[k] = worst[k].max(e);
        }
    }
    println!("max abs error direct/im2col/F2/F4/fft: {worst:?}");
}

#[test]
fn larger_kernels_on_fft_and_direct() {
    let mut r = Rng(5);
    for (round, (kh, kw)) in [
        (5, 5),
        (7, 7),
        (3, 5),
        (5, 1),
        (1, 1),
        (4, 4),
        (7, 7),
        (5, 5),
    ]
    .into_iter()
    .enumerate()
    {
        let (g, ins) = random_conv(&mut r, round, kh, kw);
        for a in [ConvAlgo::Fft, ConvAlgo::Direct, ConvAlgo::Im2col] {
            check_algo(&g, &ins, a, 2e-4);
        }
    }
}

#[test]
fn forcing_an_inapplicable_algorithm_falls_back_and_says_why() {
    let src = "graph s2 {\ninput %x: f32[1,8,9,9]\nparam %w: f32[8,8,3,3] = he(seed=1)\n\
               %c = Conv2d(%x, %w) {strides=[2,2], pads=[1,1,1,1], dilations=[1,1], group=1}\n\
               param %w2: f32[8,8,3,3] = he(seed=2)\n\
               %d = Conv2d(%c, %w2) {strides=[1,1], pads=[1,1,1,1], dilations=[1,1], group=1}\n\
               output %d\n}\n";
    let g = dnnc_ir::text::parse(src, "s2.dnn").unwrap();
    let ins = vec![("x".to_string(), rand_f32(&[1, 8, 9, 9], 3, -1.0, 1.0))];
    for a in [ConvAlgo::Winograd2, ConvAlgo::Winograd4, ConvAlgo::Fft] {
        let plan = conv_plan(&g, &forced(a));
        assert_eq!(plan[0].node, "c");
        assert_eq!(plan[0].requested, Some(a));
        assert_ne!(plan[0].algo, a);
        assert!(plan[0].fallback.as_deref().unwrap().contains("stride 2x2"));
        assert_eq!((plan[1].algo, plan[1].fallback.clone()), (a, None));
        check_with(&g, &ins, 2e-4, 2e-4, &forced(a));
    }
    // Per-node choices win over the global one.
    let mut opts = forced(ConvAlgo::Direct);
    opts.conv_algo_for.insert("d".into(), ConvAlgo::Winograd2);
    let plan = conv_plan(&g, &opts);
    assert_eq!(plan[0].algo, ConvAlgo::Direct);
    assert_eq!(plan[1].algo, ConvAlgo::Winograd2);
    check_with(&g, &ins, 2e-4, 2e-4, &opts);
}

#[test]
fn default_heuristic_picks_by_shape() {
    let src = "graph h {\ninput %x: f32[1,32,14,14]\n\
               param %a: f32[32,32,3,3] = he(seed=1)\n\
               %p = Conv2d(%x, %a) {strides=[1,1], pads=[1,1,1,1], dilations=[1,1], group=1}\n\
               param %b: f32[32,32,1,1] = he(seed=2)\n\
               %q = Conv2d(%p, %b) {strides=[1,1], pads=[0,0,0,0], dilations=[1,1], group=1}\n\
               param %c: f32[32,1,3,3] = he(seed=3)\n\
               %r = Conv2d(%q, %c) {strides=[1,1], pads=[1,1,1,1], dilations=[1,1], group=32}\n\
               param %d: f32[8,32,3,3] = he(seed=4)\n\
               %s = Conv2d(%r, %d) {strides=[2,2], pads=[1,1,1,1], dilations=[1,1], group=1}\n\
               output %s\n}\n";
    let g = dnnc_ir::text::parse(src, "h.dnn").unwrap();
    let algos: Vec<ConvAlgo> = conv_plan(&g, &CpuOptions::default())
        .iter()
        .map(|c| c.algo)
        .collect();
    // The 3x3 on 14x14 has 16 tiles of 4x4: F(4x4).
    assert_eq!(
        algos,
        [
            ConvAlgo::Winograd4,
            ConvAlgo::Pointwise,
            ConvAlgo::Depthwise,
            ConvAlgo::Im2col
        ]
    );
    let ins = vec![("x".to_string(), rand_f32(&[1, 32, 14, 14], 9, -1.0, 1.0))];
    check_with(&g, &ins, 2e-4, 2e-4, &CpuOptions::default());
}

#[test]
fn cli_reports_fallbacks_and_rejects_unknown_nodes() {
    let dir = std::env::temp_dir().join(format!("dnnc-conv-algos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("m.dnn");
    std::fs::write(
        &model,
        "graph m {\ninput %x: f32[1,8,9,9]\nparam %w: f32[8,8,3,3] = he(seed=1)\n\
         %c = Conv2d(%x, %w) {strides=[2,2], pads=[1,1,1,1]}\n\
         param %w2: f32[8,8,3,3] = he(seed=2)\n\
         %d = Conv2d(%c, %w2) {pads=[1,1,1,1]}\noutput %d\n}\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_dnnc");
    let m = model.to_str().unwrap();
    let o = std::process::Command::new(bin)
        .args([
            "run",
            m,
            "--conv-algo",
            "winograd",
            "--conv-algo-for",
            "d=fft",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(
            "note: conv %c: winograd4 does not apply (stride 2x2 (needs 1)); using im2col"
        ),
        "{err}"
    );
    assert!(!err.contains("conv %d"), "{err}");
    for bad in ["nope=fft", "d=fast", "d"] {
        let o = std::process::Command::new(bin)
            .args(["run", m, "--conv-algo-for", bad])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two 3x3 stride-1 convs on 8 channels (Winograd and FFT apply) and a
/// stride-2 one (they do not), with `algo` attributes set from the text.
fn attributed(a: &str, b: &str, c: &str) -> Graph {
    let src = format!(
        "graph attr {{\ninput %x: f32[1,8,9,9]\nparam %w: f32[8,8,3,3] = he(seed=1)\n\
         %a = Conv2d(%x, %w) {{pads=[1,1,1,1], algo={a}}}\n\
         %b = Conv2d(%a, %w) {{pads=[1,1,1,1], algo={b}}}\n\
         %c = Conv2d(%b, %w) {{strides=[2,2], pads=[1,1,1,1], algo={c}}}\n\
         output %c\n}}\n"
    );
    dnnc_ir::text::parse(&src, "attr.dnn").unwrap_or_else(|e| panic!("{e:?}"))
}

#[test]
fn node_attribute_forces_the_algorithm() {
    let g = attributed("direct", "fft", "winograd4");
    let plan = conv_plan(&g, &CpuOptions::default());
    let got: Vec<_> = plan
        .iter()
        .map(|c| (c.node.as_str(), c.requested, c.algo))
        .collect();
    assert_eq!(
        got[..2],
        [
            ("a", Some(ConvAlgo::Direct), ConvAlgo::Direct),
            ("b", Some(ConvAlgo::Fft), ConvAlgo::Fft)
        ]
    );
    // An inapplicable attribute falls back to the heuristic, with the note.
    assert_eq!(plan[2].requested, Some(ConvAlgo::Winograd4));
    assert_eq!(plan[2].algo, ConvAlgo::Im2col);
    assert!(plan[2].fallback.as_deref().unwrap().contains("stride 2x2"));
    // `auto` leaves it to the heuristic: 9x9 has too few 4x4 tiles but
    // 25 of 2x2 (>= 16) for the stride-1 convs, the stride-2 one im2col.
    let auto = attributed("auto", "auto", "auto");
    let algos: Vec<_> = conv_plan(&auto, &CpuOptions::default())
        .iter()
        .map(|c| (c.requested, c.algo))
        .collect();
    assert_eq!(
        algos,
        [
            (None, ConvAlgo::Winograd2),
            (None, ConvAlgo::Winograd2),
            (None, ConvAlgo::Im2col)
        ]
    );
    let ins = vec![("x".to_string(), rand_f32(&[1, 8, 9, 9], 5, -1.0, 1.0))];
    check_with(&g, &ins, 2e-4, 2e-4, &CpuOptions::default());
}

#[test]
fn cli_options_take_precedence_over_the_node_attribute() {
    let g = attributed("direct", "fft", "direct");
    // --conv-algo beats the attribute.
    let plan = conv_plan(&g, &forced(ConvAlgo::Winograd2));
    assert_eq!(plan[0].algo, ConvAlgo::Winograd2);
    assert_eq!(plan[1].algo, ConvAlgo::Winograd2);
    // ...and where it does not apply, the attribute (not the heuristic)
    // is the fallback.
    assert_eq!(plan[2].requested, Some(ConvAlgo::Winograd2));
    assert_eq!(plan[2].algo, ConvAlgo::Direct);
    assert!(plan[2].fallback.is_some());
    // --conv-algo-for beats --conv-algo and the attribute.
    let mut opts = forced(ConvAlgo::Winograd2);
    opts.conv_algo_for.insert("b".into(), ConvAlgo::Im2col);
    let algos: Vec<_> = conv_plan(&g, &opts).iter().map(|c| c.algo).collect();
    assert_eq!(
        algos,
        [ConvAlgo::Winograd2, ConvAlgo::Im2col, ConvAlgo::Direct]
    );
}

/// Batches whose images share their Winograd frequency GEMMs (the
/// transformed filter outweighs the per-image transforms: 48-96
/// channels on small maps) against the interpreter, F(2x2) and F(4x4),
/// with bias, residual and Relu fused, on maps that leave partial and
/// overhanging tiles; 1, 2 and 3 threads give bitwise the same result.
#[test]
fn winograd_batches_sharing_their_gemms() {
    use dnnc_compiler::codegen::cpu::compile_cpu;
    for (n, h, w, pads, c, m) in [
        (3, 5, 6, [1, 1, 1, 1], 64, 48),
        (4, 7, 7, [1, 1, 1, 1], 96, 96),
        (4, 4, 9, [0, 2, 1, 0], 64, 48),
    ] {
        let oh = h + pads[0] + pads[2] - 2;
        let ow = w + pads[1] + pads[3] - 2;
        let src = format!(
            "graph shared {{
  input %x: f32[{n},{c},{h},{w}]
  param %w: f32[{m},{c},3,3] = he(seed=5)
  param %b: f32[{m}] = uniform(low=-1, high=1, seed=6)
  input %r: f32[{n},{m},{oh},{ow}]
  %c = Conv2d(%x, %w, %b) {{pads=[{},{},{},{}]}}
  %a = Add(%c, %r)
  %y = Relu(%a)
  output %y
}}",
            pads[0], pads[1], pads[2], pads[3]
        );
        let g = dnnc_ir::text::parse(&src, "shared.dnn").unwrap();
        let ins = vec![
            ("x".to_string(), rand_f32(&[n, c, h, w], 11, -1.0, 1.0)),
            ("r".to_string(), rand_f32(&[n, m, oh, ow], 12, -1.0, 1.0)),
        ];
        for a in [ConvAlgo::Winograd2, ConvAlgo::Winograd4] {
            let tile = if a == ConvAlgo::Winograd2 { 2 } else { 4 };
            let conv = g
                .topo_order()
                .into_iter()
                .find(|&id| g.node(id).op.name() == "Conv2d")
                .unwrap();
            let shape = dnnc_passes::ConvGeom::of_node(&g, conv).unwrap().shape();
            assert!(
                dnnc_passes::cost::winograd_shares_gemms(&shape, tile),
                "{n}x{h}x{w} {a:?} should share its GEMMs"
            );
            check_algo(&g, &ins, a, 2e-4);
            let mut exe = compile_cpu(&g, &forced(a)).unwrap();
            let one = exe.run(&ins).unwrap();
            for t in [2, 3] {
                exe.set_threads(t).unwrap();
                let more = exe.run(&ins).unwrap();
                let bits = |v: &[Tensor]| -> Vec<u32> {
                    v[0].as_f32().unwrap().iter().map(|x| x.to_bits()).collect()
                };
                assert_eq!(bits(&one), bits(&more), "{n}x{h}x{w} {a:?} at {t} threads");
            }
        }
    }
}
