//! A depthwise conv whose only reader is a 1x1 conv runs band by band
//! inside that conv's kernel (`group::absorb_depthwise`, MobileNet-V2's
//! inverted-residual blocks): the kernel's ops start with the depthwise
//! conv's, its algorithm reads `depthwise+pointwise`, and the outputs
//! match the interpreter and are bitwise those of the two separate
//! kernels (`CpuOptions::separate_depthwise`) at 1, 2 and 3 threads.
//! Where the pattern does not hold (the depthwise result is read twice, a
//! small map, a forced algorithm) the depthwise conv keeps its own kernel.

mod cpu_common;

use cpu_common::{bits, check_with, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, ConvAlgo, CpuOptions};

/// A depthwise conv of `%x: f32[1,c,h,w]` (3x3, `stride`, pads 1; `dw_ep`
/// statements from `%d`, the conv's result, ending in `%da`, or none),
/// then a 1x1 conv of `%da` (or `%d`) to `m` channels (`pw_bias`: with a bias), then `tail`
/// (statements from `%p`, ending in `output` lines).
fn body(
    (c, h, w): (usize, usize, usize),
    stride: usize,
    (dw_bias, dw_ep): (bool, &str),
    (m, pw_bias): (usize, bool),
    tail: &str,
) -> String {
    let db = if dw_bias { ", %db" } else { "" };
    let pb = if pw_bias { ", %pb" } else { "" };
    let src = if dw_ep.is_empty() { "d" } else { "da" };
    format!(
        "  input %x: f32[1,{c},{h},{w}]
  param %dw: f32[{c},1,3,3] = he(seed=1)
  param %db: f32[{c}] = uniform(low=-0.5, high=0.5, seed=2)
  param %pw: f32[{m},{c},1,1] = he(seed=3)
  param %pb: f32[{m}] = uniform(low=-0.5, high=0.5, seed=4)
  %d = Conv2d(%x, %dw{db}) {{strides=[{stride},{stride}], pads=[1,1,1,1], dilations=[1,1], group={c}}}
{dw_ep}
  %p = Conv2d(%{src}, %pw{pb})
{tail}"
    )
}

/// The kernels' `(ops, algorithm)` of `body` compiled with default
/// options, after checking the outputs against the interpreter and
/// bitwise against the separate kernels at 1, 2 and 3 threads.
fn run(body: &str) -> Vec<(String, String)> {
    let g = parse(body);
    let ins: Vec<_> = g
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let val = g.value(v);
            (
                val.name.clone(),
                rand_f32(&val.ty.shape, 11 + i as u64, -2.0, 2.0),
            )
        })
        .collect();
    let opts = CpuOptions::default();
    check_with(&g, &ins, 1e-4, 1e-5, &opts);
    let separate = CpuOptions {
        separate_depthwise: true,
        ..Default::default()
    };
    let want = bits(
        &compile_cpu(&g, &separate)
            .expect("compile")
            .run(&ins)
            .expect("run"),
    );
    let mut exe = compile_cpu(&g, &opts).expect("compile");
    for t in 1..=3 {
        exe.set_threads(t).expect("threads");
        let got = bits(&exe.run(&ins).expect("run"));
        assert_eq!(got, want, "{t} thread(s) differ from the separate kernels");
    }
    exe.steps()
        .iter()
        .map(|s| (s.op.clone(), s.algo.clone().unwrap_or_default()))
        .collect()
}

const CLIP: (bool, &str) = (true, "  %da = Clip(%d) {min=0, max=6}");

#[test]
fn a_depthwise_conv_read_only_by_a_pointwise_conv_runs_in_its_bands() {
    let banded = |ops: &[(String, String)], label: &str| {
        assert!(
            ops.iter()
                .any(|(o, a)| o == label && a == "depthwise+pointwise"),
            "{label}: {ops:?}"
        );
    };
    // Stride 1 (the input plane read in place), a residual Add: the
    // projection of an inverted-residual block. 1.15 MB depthwise result.
    let ops = run(&body(
        (36, 64, 128),
        1,
        CLIP,
        (24, true),
        "  input %r: f32[1,24,64,128]\n  %y = Add(%p, %r)\n  output %y",
    ));
    banded(&ops, "Conv2d+Clip+Conv2d+Add");
    // Stride 2 (rows copied into a padded plane), a Relu after the 1x1
    // conv; 1.2 MB depthwise result over 112-wide rows.
    let ops = run(&body(
        (48, 112, 224),
        2,
        CLIP,
        (16, true),
        "  %y = Relu(%p)\n  output %y",
    ));
    banded(&ops, "Conv2d+Clip+Conv2d+Relu");
    // Nothing fused on either side: no biases, no activations.
    let ops = run(&body(
        (32, 64, 128),
        1,
        (false, ""),
        (20, false),
        "  output %p",
    ));
    assert!(
        ops.iter().any(|(_, a)| a == "depthwise+pointwise"),
        "{ops:?}"
    );
}

#[test]
fn a_depthwise_conv_read_elsewhere_small_or_forced_keeps_its_kernel() {
    let separate = |ops: &[(String, String)]| {
        assert!(
            ops.iter().all(|(_, a)| !a.contains('+')) && ops.iter().any(|(_, a)| a == "depthwise"),
            "{ops:?}"
        );
    };
    // The depthwise result is also an output.
    separate(&run(&body(
        (36, 64, 128),
        1,
        CLIP,
        (24, true),
        "  output %p\n  output %da",
    )));
    // A map whose depthwise result stays in cache anyway (0.3 MB).
    separate(&run(&body(
        (96, 28, 28),
        1,
        CLIP,
        (32, true),
        "  output %p",
    )));
    // The 1x1 conv forced to im2col.
    let g = parse(&body((36, 64, 128), 1, CLIP, (24, true), "  output %p"));
    let p = g.outputs()[0];
    let opts = CpuOptions {
        conv_algo_for: [(g.value(p).name.clone(), ConvAlgo::Im2col)].into(),
        ..Default::default()
    };
    let exe = compile_cpu(&g, &opts).expect("compile");
    assert!(
        exe.steps()
            .iter()
            .all(|s| !s.algo.as_deref().unwrap_or("").contains('+')),
        "{:?}",
        exe.steps().iter().map(|s| &s.algo).collect::<Vec<_>>()
    );
}
