//! Channel-blocked chains on the CPU backend (the default `CpuOptions`,
//! the `block-channels` pass): pointwise and depthwise convs on
//! `data=nchw8c` activations against the interpreter on the plain graph
//! (the oracle), over batch, stride, padding, kernel size, odd block
//! counts (24-channel panels), fused bias / Clip / residual epilogues and
//! sigmoid and SiLU (in the pointwise tiles' and depthwise rows'
//! registers), activations the kernels leave to the generic epilogue
//! (Tanh), squeeze-excitation blocks inside a blocked chain,
//! splits by filter panels (small maps) and by pixel groups (large ones),
//! dense window convs (5x5, 1x7, strided) on blocks;
//! two threads bitwise equal to one, and the plan really blocked.

mod cpu_common;

use cpu_common::{bits, check_with, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};

/// A stem pointwise conv, an inverted residual block (expand, depthwise
/// `k x k` with stride `s`, project), and `act` after the expansion.
fn chain(
    n: usize,
    (c, mid, hw): (usize, usize, usize),
    (k, s): (usize, usize),
    act: &str,
) -> String {
    let p = k / 2;
    let res = if s == 1 {
        "%y = Add(%q, %a)"
    } else {
        "%y = Clip(%q) {min=-1, max=1}"
    };
    format!(
        "  input %x: f32[{n},8,{hw},{hw}]
  param %w0: f32[{c},8,1,1] = he(seed=1)
  param %b0: f32[{c}] = uniform(low=-0.2, high=0.2, seed=2)
  param %w1: f32[{mid},{c},1,1] = he(seed=3)
  param %b1: f32[{mid}] = uniform(low=-0.2, high=0.2, seed=4)
  param %w2: f32[{mid},1,{k},{k}] = he(seed=5)
  param %b2: f32[{mid}] = uniform(low=-0.2, high=0.2, seed=6)
  param %w3: f32[{c},{mid},1,1] = he(seed=7)
  %a = Conv2d(%x, %w0, %b0)
  %e = Conv2d(%a, %w1, %b1)
{act}
  %d = Conv2d(%e2, %w2, %b2) {{pads=[{p},{p},{p},{p}], strides=[{s},{s}], group={mid}}}
  %d6 = Clip(%d) {{min=0, max=6}}
  %q = Conv2d(%d6, %w3)
  {res}
  output %y"
    )
}

const CLIP: &str = "  %e2 = Clip(%e) {min=0, max=6}";
const SIGMOID: &str = "  %e2 = Sigmoid(%e)";
const SILU: &str = "  %sg = Sigmoid(%e)\n  %e2 = Mul(%e, %sg)";
const TANH: &str = "  %e2 = Tanh(%e)";

/// `body` parsed, a seeded random input, the default build checked
/// against the interpreter, and that build compiled.
fn checked(
    body: &str,
    seed: u64,
) -> (
    dnnc_ir::Graph,
    Vec<(String, dnnc_ir::Tensor)>,
    dnnc_runtime::cpu::Executable,
) {
    let g = parse(body);
    let x = g.inputs()[0];
    let ins = vec![(
        g.value(x).name.clone(),
        rand_f32(&g.value(x).ty.shape, seed, -1.0, 1.0),
    )];
    let opts = CpuOptions::default();
    check_with(&g, &ins, 1e-4, 1e-5, &opts);
    let exe = compile_cpu(&g, &opts).expect("compile");
    (g, ins, exe)
}

fn run(body: &str) {
    let (_, ins, mut exe) = checked(body, 11);
    let blocked = exe
        .steps()
        .iter()
        .filter(|s| s.name.ends_with(".to_nchw8c"))
        .count();
    assert_eq!(blocked, 1, "one reorder into the blocked layout:\n{body}");
    two_threads_bitwise(&mut exe, &ins, body);
}

/// Runs `exe` at one thread and then at two, asserts the results are
/// bitwise equal (`what` names the case), and returns them.
fn two_threads_bitwise(
    exe: &mut dnnc_runtime::cpu::Executable,
    ins: &[(String, dnnc_ir::Tensor)],
    what: &str,
) -> Vec<u32> {
    exe.set_threads(1).expect("threads");
    let one = bits(&exe.run(ins).expect("run"));
    exe.set_threads(2).expect("threads");
    assert_eq!(
        one,
        bits(&exe.run(ins).expect("run")),
        "2 threads bitwise:\n{what}"
    );
    one
}

#[test]
fn blocked_chains_match_the_interpreter() {
    for (n, dims, taps, act) in [
        (1, (16, 48, 14), (3, 1), CLIP),
        (2, (24, 72, 9), (3, 2), CLIP),
        (1, (16, 96, 7), (5, 1), SIGMOID),
        (1, (40, 120, 10), (5, 2), SILU),
        (3, (8, 24, 5), (3, 1), CLIP),
        (1, (32, 64, 1), (3, 1), CLIP),
        // Stride 2 with whole interior groups of 4 pixels.
        (1, (16, 32, 24), (3, 2), CLIP),
        (2, (16, 48, 30), (5, 2), SILU),
        // Inputs beyond L2: pointwise convs split by pixel groups.
        (1, (16, 48, 70), (3, 1), CLIP),
    ] {
        run(&chain(n, dims, taps, act));
    }
}

/// Activations the blocked kernels do not apply themselves run as the
/// generic epilogue after each row: Tanh after a pointwise conv and
/// after a depthwise conv.
#[test]
fn generic_epilogues_on_blocked_convs_match_the_interpreter() {
    for (n, dims, taps) in [(1, (16, 48, 14), (3, 1)), (2, (24, 72, 9), (3, 2))] {
        let body = chain(n, dims, taps, TANH);
        let clip = "  %d6 = Clip(%d) {min=0, max=6}";
        assert!(body.contains(clip));
        run(&body.replace(clip, "  %d6 = Tanh(%d)"));
    }
}

/// Sigmoid and SiLU after a depthwise conv run in the row kernel's
/// registers (no generic epilogue), on maps wide enough for border
/// pixels and narrow enough for zero-padded rows: against the
/// interpreter, two threads bitwise one.
#[test]
fn depthwise_activations_in_registers_match_the_interpreter() {
    let sigmoid = "  %d6 = Sigmoid(%d)";
    let silu = "  %ds = Sigmoid(%d)\n  %d6 = Mul(%d, %ds)";
    for (n, dims, taps, after_dw) in [
        (1, (16, 48, 14), (3, 1), sigmoid),
        (2, (24, 72, 9), (3, 2), silu),
        (1, (16, 48, 7), (5, 1), silu),
        (1, (16, 32, 40), (3, 1), silu),
        (2, (16, 40, 19), (5, 2), sigmoid),
    ] {
        let body = chain(n, dims, taps, SILU);
        let clip = "  %d6 = Clip(%d) {min=0, max=6}";
        run(&body.replace(clip, after_dw));
    }
}

/// A per-channel constant (`[1, C, 1, 1]`, broadcast over the batch)
/// multiplying a blocked map runs blocked, on its reordered copy (C
/// floats, reordered by a step of its own): against the interpreter, two
/// threads bitwise one, the map itself reordered only into the layout.
#[test]
fn channel_constants_run_blocked() {
    let body = chain(2, (16, 48, 10), (3, 1), CLIP);
    let clip = "  %d6 = Clip(%d) {min=0, max=6}";
    let scaled =
        "  param %cs: f32[1,48,1,1] = uniform(low=0.5, high=1.5, seed=21)\n  %d6 = Mul(%d, %cs)";
    let body = body.replace(clip, scaled);
    let (_, ins, mut exe) = checked(&body, 11);
    let mut into: Vec<&str> = exe
        .steps()
        .iter()
        .filter(|s| s.name.ends_with(".to_nchw8c"))
        .map(|s| s.name.as_str())
        .collect();
    into.sort();
    assert_eq!(into, ["cs.to_nchw8c", "x.to_nchw8c"], "{body}");
    let out: Vec<&str> = exe
        .steps()
        .iter()
        .filter(|s| s.name.ends_with(".planes"))
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        out,
        ["y.planes"],
        "only the output leaves the layout:\n{body}"
    );
    two_threads_bitwise(&mut exe, &ins, &body);
}

/// EfficientNet's block: expansion and depthwise conv with SiLU, then
/// squeeze-excitation (global pool, two small convs, sigmoid, a
/// per-image channel scale), projection and residual. The whole block
/// stays blocked: the pool is a mean over the blocked planes, the scale
/// multiplies the blocked map, and only the input, the pooled means and
/// the output are reordered (no map inside the block). Against the interpreter, two threads
/// bitwise one.
#[test]
fn squeeze_excitation_blocks_stay_blocked() {
    for (n, (c, mid, sq, hw), (k, s)) in [
        (2, (16, 64, 4, 12), (3, 1)),
        (1, (24, 96, 8, 9), (5, 1)),
        (2, (16, 48, 6, 14), (5, 2)),
    ] {
        let p = k / 2;
        let tail = if s == 1 {
            "%y = Add(%q, %a)"
        } else {
            "%y = Clip(%q) {min=-3, max=3}"
        };
        let body = format!(
            "  input %x: f32[{n},8,{hw},{hw}]
  param %w0: f32[{c},8,1,1] = he(seed=1)
  param %w1: f32[{mid},{c},1,1] = he(seed=3)
  param %b1: f32[{mid}] = uniform(low=-0.2, high=0.2, seed=4)
  param %w2: f32[{mid},1,{k},{k}] = he(seed=5)
  param %b2: f32[{mid}] = uniform(low=-0.2, high=0.2, seed=6)
  param %ws1: f32[{sq},{mid},1,1] = he(seed=7)
  param %bs1: f32[{sq}] = uniform(low=-0.2, high=0.2, seed=8)
  param %ws2: f32[{mid},{sq},1,1] = he(seed=9)
  param %bs2: f32[{mid}] = uniform(low=-0.2, high=0.2, seed=10)
  param %w3: f32[{c},{mid},1,1] = he(seed=11)
  %a = Conv2d(%x, %w0)
  %e = Conv2d(%a, %w1, %b1)
  %es = Sigmoid(%e)
  %e2 = Mul(%e, %es)
  %d = Conv2d(%e2, %w2, %b2) {{pads=[{p},{p},{p},{p}], strides=[{s},{s}], group={mid}}}
  %ds = Sigmoid(%d)
  %d2 = Mul(%d, %ds)
  %pool = GlobalAveragePool(%d2)
  %s1 = Conv2d(%pool, %ws1, %bs1)
  %s1s = Sigmoid(%s1)
  %s1a = Mul(%s1, %s1s)
  %s2 = Conv2d(%s1a, %ws2, %bs2)
  %sc = Sigmoid(%s2)
  %m = Mul(%d2, %sc)
  %q = Conv2d(%m, %w3)
  {tail}
  output %y"
        );
        let (_, ins, mut exe) = checked(&body, 13);
        let mut reorders: Vec<&str> = exe
            .steps()
            .iter()
            .filter(|st| st.op == "Transpose")
            .map(|st| st.name.as_str())
            .collect();
        reorders.sort();
        // A squeeze conv of whole blocks runs blocked too, reading the
        // means reordered back (C floats an image).
        let want: &[&str] = if sq % 8 == 0 {
            &["pool.planes", "pool.to_nchw8c", "x.to_nchw8c", "y.planes"]
        } else {
            &["pool.planes", "x.to_nchw8c", "y.planes"]
        };
        assert_eq!(reorders, want, "{body}");
        assert!(
            exe.steps().iter().all(|st| st.op != "GlobalAveragePool"),
            "{body}"
        );
        two_threads_bitwise(&mut exe, &ins, &body);
    }
}

/// Depthwise convs with asymmetric padding (more on one side, none on
/// the other, as exporters of "same" padding write for stride 2) and
/// rectangular windows: border rows and columns on each side as the row
/// kernel finds them, against the interpreter, two threads bitwise one.
#[test]
fn asymmetric_padding_and_rectangular_windows() {
    for (hw, (kh, kw), stride, pads) in [
        (15, (3, 3), 2, "[0,0,1,1]"),
        (14, (3, 3), 2, "[1,1,0,0]"),
        (13, (5, 3), 1, "[1,2,3,0]"),
        (9, (1, 5), 1, "[0,0,0,4]"),
    ] {
        let body = format!(
            "  input %x: f32[2,8,{hw},{hw}]
  param %w0: f32[32,8,1,1] = he(seed=1)
  param %w1: f32[32,1,{kh},{kw}] = he(seed=2)
  param %b1: f32[32] = uniform(low=-0.2, high=0.2, seed=3)
  param %w2: f32[16,32,1,1] = he(seed=4)
  param %w3: f32[16,1,3,3] = he(seed=5)
  %a = Conv2d(%x, %w0)
  %d = Conv2d(%a, %w1, %b1) {{pads={pads}, strides=[{stride},{stride}], group=32}}
  %d6 = Clip(%d) {{min=0, max=6}}
  %p = Conv2d(%d6, %w2)
  %q = Conv2d(%p, %w3) {{pads=[1,1,1,1], group=16}}
  output %q"
        );
        run(&body);
    }
}

/// Dense window convs inside a region (`BlockedKernel::Window`) read and
/// write blocks, so a region (of three 1x1 convs) runs on through them
/// with one reorder in:
/// Inception's 5x5, 1x7 and 7x1, a stride-2 3x3 and a stride-2 1x1
/// projection, a 3x3 the heuristic would run as Winograd set to im2col,
/// one of 432 taps (in `k` blocks on AVX-512) with a residual, at batch 1
/// (7 rows: the filter shared into slices for the tasks) and 2. The
/// projection runs gathered (the input pixels under its output copied
/// into a dense blocked map for the pointwise conv's tiles, split as a
/// pointwise conv is), the others through the window kernel's rows.
#[test]
fn dense_window_convs_run_blocked() {
    for n in [1, 2] {
        let body = format!(
            "  input %x: f32[{n},8,15,15]
  param %w0: f32[48,8,1,1] = he(seed=1)
  param %w1: f32[48,48,5,5] = he(seed=2)
  param %b1: f32[48] = uniform(low=-0.2, high=0.2, seed=3)
  param %w2: f32[32,48,1,7] = he(seed=4)
  param %wc: f32[32,32,1,1] = he(seed=10)
  param %w3: f32[48,32,7,1] = he(seed=5)
  param %w4: f32[64,48,3,3] = he(seed=6)
  param %w5: f32[64,48,1,1] = he(seed=7)
  param %w6: f32[64,64,3,3] = he(seed=8)
  param %w7: f32[24,64,1,1] = he(seed=9)
  %a = Conv2d(%x, %w0)
  %b = Conv2d(%a, %w1, %b1) {{pads=[2,2,2,2]}}
  %b6 = Clip(%b) {{min=0, max=6}}
  %c = Conv2d(%b6, %w2) {{pads=[0,3,0,3]}}
  %c2 = Conv2d(%c, %wc)
  %d = Conv2d(%c2, %w3) {{pads=[3,0,3,0]}}
  %e = Conv2d(%d, %w4) {{pads=[1,1,1,1], strides=[2,2]}}
  %p = Conv2d(%d, %w5) {{strides=[2,2]}}
  %f = Conv2d(%e, %w6) {{pads=[1,1,1,1], algo=im2col}}
  %r = Add(%f, %p)
  %r6 = Relu(%r)
  %q = Conv2d(%r6, %w7)
  output %q"
        );
        run(&body);
        let (_, _, exe) = checked(&body, 11);
        let unit = |name: &str| {
            let step = exe.steps().iter().find(|s| s.name == name);
            step.map(|s| s.split_units.join(", ")).unwrap_or_default()
        };
        for window in ["b6", "c", "d", "e", "f"] {
            assert_eq!(unit(window), "rows x filter slices", "{window}: {body}");
        }
        // `r6` is the projection `p` with the residual add and Relu.
        let u = unit("r6");
        assert!(
            u == "filter panels" || u == "15-pixel groups",
            "the projection runs gathered, split {u:?}: {body}"
        );
    }
}

/// RegNet's blocks run blocked end to end: their grouped 3x3 convs of
/// eight channels a group (`BlockedKernel::Window`, each group one block
/// in and one out) at stride 2 with a strided 1x1 projection, and at
/// stride 1 with a squeeze-excitation scale and a residual; batch 1 (a
/// 5x5 map's rows: groups shared into slices for the tasks) and 2.
#[test]
fn grouped_convs_of_eight_channels_run_blocked() {
    for n in [1, 2] {
        let body = format!(
            "  input %x: f32[{n},8,10,10]
  param %w0: f32[24,8,1,1] = he(seed=1)
  param %wa: f32[40,24,1,1] = he(seed=2)
  param %ba: f32[40] = uniform(low=-0.2, high=0.2, seed=3)
  param %wb: f32[40,8,3,3] = he(seed=4)
  param %bb: f32[40] = uniform(low=-0.2, high=0.2, seed=5)
  param %wc: f32[40,40,1,1] = he(seed=6)
  param %wp: f32[40,24,1,1] = he(seed=7)
  param %wd: f32[40,40,1,1] = he(seed=8)
  param %we: f32[40,8,3,3] = he(seed=9)
  param %ws1: f32[10,40,1,1] = he(seed=10)
  param %ws2: f32[40,10,1,1] = he(seed=11)
  param %wf: f32[40,40,1,1] = he(seed=12)
  %a0 = Conv2d(%x, %w0)
  %a = Conv2d(%a0, %wa, %ba)
  %ar = Relu(%a)
  %b = Conv2d(%ar, %wb, %bb) {{pads=[1,1,1,1], strides=[2,2], group=5}}
  %br = Relu(%b)
  %c = Conv2d(%br, %wc)
  %p = Conv2d(%a0, %wp) {{strides=[2,2]}}
  %s = Add(%c, %p)
  %sr = Relu(%s)
  %d = Conv2d(%sr, %wd)
  %dr = Relu(%d)
  %e = Conv2d(%dr, %we) {{pads=[1,1,1,1], group=5}}
  %er = Relu(%e)
  %g = GlobalAveragePool(%er)
  %g1 = Conv2d(%g, %ws1)
  %g1r = Relu(%g1)
  %g2 = Conv2d(%g1r, %ws2)
  %gs = Sigmoid(%g2)
  %m = Mul(%er, %gs)
  %f = Conv2d(%m, %wf)
  %y = Add(%f, %sr)
  output %y"
        );
        let (_, ins, mut exe) = checked(&body, 11);
        // Reordered into blocks: the input and the squeeze-excitation
        // scale only, never a grouped conv's input or result.
        let reorders: Vec<&str> = exe
            .steps()
            .iter()
            .filter(|s| s.name.ends_with(".to_nchw8c"))
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(reorders, ["x.to_nchw8c", "gs.to_nchw8c"], "{body}");
        two_threads_bitwise(&mut exe, &ins, &body);
    }
}

/// Inverted residual blocks whose expansion is at least 1 MiB run as one
/// kernel: the expansion a ring of rows at a time, the depthwise rows,
/// each projected (with its residual at stride 1, its clamp at stride 2)
/// as it is computed. Against the interpreter, bitwise equal to the
/// unfused build (each pixel's arithmetic is the same) and at two
/// threads (a task starting mid-image recomputes its first tap rows) to
/// one; batch 2 restarts the ring per image. The expansion's activation
/// may be a clamp, a Sigmoid or a SiLU (EfficientNet's), applied in the
/// band kernel's registers; a Tanh keeps the block three kernels, as do
/// more input channels than twice the map's width (a batch-8 14x14 block
/// of 64: each expanded row would re-read more filter than it saves).
#[test]
fn fused_blocks_match_the_interpreter_and_the_unfused_build() {
    for (n, dims, taps, act, fused) in [
        (1, (16, 96, 56), (3, 1), CLIP, true),
        (2, (16, 48, 60), (3, 2), CLIP, true),
        (1, (16, 64, 66), (5, 1), CLIP, true),
        // Nine blocks: the expansion's first filter panel is 24 wide.
        (1, (24, 72, 62), (5, 2), CLIP, true),
        // A stride beyond the taps: rows between windows are never expanded.
        (1, (16, 96, 56), (1, 2), CLIP, true),
        (1, (16, 96, 56), (3, 1), SIGMOID, true),
        (2, (16, 48, 60), (5, 2), SILU, true),
        (1, (16, 96, 56), (3, 1), TANH, false),
        // Under 1 MiB expanded: two kernels.
        (1, (16, 48, 28), (3, 1), CLIP, false),
        // 1.6 MB expanded, but 64 channels in on 14x14 maps.
        (8, (64, 256, 14), (3, 1), SILU, false),
    ] {
        let body = chain(n, dims, taps, act);
        let (g, ins, mut exe) = checked(&body, 12);
        // The expansion `e` and the depthwise conv `d` in one kernel.
        let joint =
            |s: &dnnc_runtime::cpu::Step| ["e", "d"].iter().all(|v| s.nodes.iter().any(|n| n == v));
        let fused_steps = exe.steps().iter().filter(|s| joint(s)).count();
        assert_eq!(fused_steps, usize::from(fused), "{body}");
        let one = two_threads_bitwise(&mut exe, &ins, &body);
        let unfused = CpuOptions {
            unfused_blocks: true,
            ..Default::default()
        };
        let plain = compile_cpu(&g, &unfused).expect("compile");
        assert!(!plain.steps().iter().any(joint));
        assert_eq!(
            one,
            bits(&plain.run(&ins).expect("run")),
            "unfused:\n{body}"
        );
    }
}

/// RegNet's block head: a stem, a 1x1 expansion `e` (with `act`), a
/// grouped 3x3 conv `b` of eight channels a group with stride `s` and
/// `pads`, `tail` after it (reading `%b`, defining `%t`), then a 1x1
/// conv.
fn grouped_chain(
    n: usize,
    (c, mid, hw): (usize, usize, usize),
    (s, pads): (usize, [usize; 4]),
    (act, tail): (&str, &str),
) -> String {
    let [pt, pl, pb, pr] = pads;
    format!(
        "  input %x: f32[{n},8,{hw},{hw}]
  param %w0: f32[{c},8,1,1] = he(seed=1)
  param %w1: f32[{mid},{c},1,1] = he(seed=3)
  param %b1: f32[{mid}] = uniform(low=-0.2, high=0.2, seed=4)
  param %w2: f32[{mid},8,3,3] = he(seed=5)
  param %b2: f32[{mid}] = uniform(low=-0.2, high=0.2, seed=6)
  param %wr: f32[{mid},{c},1,1] = he(seed=8)
  param %w3: f32[{c},{mid},1,1] = he(seed=7)
  %a = Conv2d(%x, %w0)
  %e = Conv2d(%a, %w1, %b1)
{act}
  %b = Conv2d(%e2, %w2, %b2) {{pads=[{pt},{pl},{pb},{pr}], strides=[{s},{s}], group={g}}}
{tail}
  %y = Conv2d(%t, %w3)
  output %y",
        g = mid / 8
    )
}

/// RegNet's 1x1 conv and the grouped 3x3 conv it feeds run as one kernel
/// where the expanded map is at least 1 MiB: the expansion a ring of
/// padded rows at a time, the grouped conv reading its windows there.
/// Against the interpreter, bitwise equal to the unfused build (the same
/// tiles in the same order) and at two threads (a task starting
/// mid-image expands its first window rows again) to one; batch 2
/// restarts the ring per image. Strides 1 and 2, padding on all sides or
/// only top and left, the conv's ReLU in registers, a residual added in
/// the conv's epilogue, a Tanh on the rows after it (the generic
/// epilogue), the fused build run on an arena of NaNs, more input
/// channels than twice the map's width (which a depthwise conv's
/// expansion may not have); under 1 MiB the two convs stay two kernels.
#[test]
fn fused_grouped_blocks_match_the_interpreter_and_the_unfused_build() {
    const RELU: &str = "  %e2 = Relu(%e)";
    const CONV_RELU: &str = "  %t = Relu(%b)";
    const RESIDUAL: &str = "  %r = Conv2d(%a, %wr) {strides=[2,2]}\n  %t = Add(%b, %r)";
    const TANH: &str = "  %t = Tanh(%b)";
    for (n, dims, window, ops, fused) in [
        (1, (16, 64, 64), (2, [1, 1, 1, 1]), (RELU, CONV_RELU), true),
        (2, (16, 48, 60), (1, [1, 1, 1, 1]), (RELU, CONV_RELU), true),
        (1, (24, 64, 66), (2, [1, 1, 0, 0]), (CLIP, CONV_RELU), true),
        (1, (16, 64, 64), (2, [1, 1, 1, 1]), (RELU, RESIDUAL), true),
        (2, (16, 48, 60), (1, [1, 1, 1, 1]), (RELU, TANH), true),
        // Under 1 MiB expanded: two kernels.
        (1, (16, 48, 32), (2, [1, 1, 1, 1]), (RELU, CONV_RELU), false),
        // 1.1 MB expanded from 48 channels in on 20x20 maps, which a
        // depthwise conv would refuse (more than twice the width).
        (8, (48, 88, 20), (1, [1, 1, 1, 1]), (RELU, CONV_RELU), true),
    ] {
        let body = grouped_chain(n, dims, window, ops);
        let (g, ins, mut exe) = checked(&body, 13);
        let joint =
            |s: &dnnc_runtime::cpu::Step| ["e", "b"].iter().all(|v| s.nodes.iter().any(|n| n == v));
        let fused_steps = exe.steps().iter().filter(|s| joint(s)).count();
        assert_eq!(fused_steps, usize::from(fused), "{body}");
        // Every float of the arena a NaN before the runs: the ring's
        // padding is the kernel's to clear.
        exe.set_arena_fill(Some(0xFF));
        let one = two_threads_bitwise(&mut exe, &ins, &body);
        let unfused = CpuOptions {
            unfused_blocks: true,
            ..Default::default()
        };
        let plain = compile_cpu(&g, &unfused).expect("compile");
        assert!(!plain.steps().iter().any(joint));
        assert_eq!(
            one,
            bits(&plain.run(&ins).expect("run")),
            "unfused:\n{body}"
        );
    }
}

/// Blocked convs the types or the backend reject say why, naming the node.
#[test]
fn bad_blocked_convs_are_clear_errors() {
    // (input, filter, attributes, what the error says)
    for (x, w, attrs, want) in [
        (
            "1,16,8,8",
            "16,16,1,1",
            "data=nchw8c",
            "must be [N, C/8, H, W, 8]",
        ),
        (
            "1,2,8,8,8",
            "12,16,1,1",
            "data=nchw8c",
            "blocks of 8, found 12",
        ),
        (
            "1,2,8,8,8",
            "16,16,1,1",
            "data=nchw9c",
            "`nchw9c` is not one of nchw, nchw8c",
        ),
    ] {
        let src = format!(
            "graph t {{\n  input %x: f32[{x}]\n  param %w: f32[{w}] = he(seed=1)\n  %c = Conv2d(%x, %w) {{{attrs}}}\n  output %c\n}}\n"
        );
        let msg = match dnnc_ir::text::parse(&src, "t.dnn") {
            Ok(_) => panic!("accepted:\n{src}"),
            Err(e) => format!("{e}"),
        };
        assert!(msg.contains(want), "{msg}");
    }
    // Well typed, but no blocked kernel: a dilated depthwise conv.
    let g = parse(
        "  input %x: f32[1,2,8,8,8]
  param %w: f32[16,1,3,3] = he(seed=1)
  %c = Conv2d(%x, %w) {data=nchw8c, group=16, dilations=[2,2], pads=[2,2,2,2]}
  output %c",
    );
    let msg = match compile_cpu(&g, &CpuOptions::default()) {
        Ok(_) => panic!("a dilated blocked depthwise conv compiled"),
        Err(e) => e.to_string(),
    };
    assert!(
        msg.contains("%c") && msg.contains("undilated depthwise"),
        "{msg}"
    );
    // A grouped conv that is neither depthwise nor of 8 channels in and
    // out per group (here 8 in, 16 out) has no blocked kernel: refused
    // (naming the conv), never lowered as something else.
    let g = parse(
        "  input %x: f32[1,2,8,8,8]
  param %w: f32[32,8,3,3] = he(seed=1)
  %c = Conv2d(%x, %w) {data=nchw8c, pads=[1,1,1,1], group=2}
  output %c",
    );
    let msg = match compile_cpu(&g, &CpuOptions::default()) {
        Ok(_) => panic!("a blocked grouped conv compiled"),
        Err(e) => e.to_string(),
    };
    assert!(msg.contains("%c") && msg.contains("of one group"), "{msg}");
    // A dense 5x5 conv on blocked data runs as the implicit GEMM only:
    // with `algo=fft` it is refused, never lowered as something else.
    let g = parse(
        "  input %x: f32[1,2,8,8,8]
  param %w: f32[16,16,5,5] = he(seed=1)
  %c = Conv2d(%x, %w) {data=nchw8c, pads=[2,2,2,2], algo=fft}
  output %c",
    );
    let msg = match compile_cpu(&g, &CpuOptions::default()) {
        Ok(_) => panic!("a blocked FFT conv compiled"),
        Err(e) => e.to_string(),
    };
    assert!(
        msg.contains("%c") && msg.contains("implicit GEMM only"),
        "{msg}"
    );
    // A window taller than the row kernel takes: refused when compiled,
    // not when run.
    let g = parse(
        "  input %x: f32[1,2,40,8,8]
  param %w: f32[16,1,33,1] = he(seed=1)
  %c = Conv2d(%x, %w) {data=nchw8c, group=16, pads=[16,0,16,0]}
  output %c",
    );
    let msg = match compile_cpu(&g, &CpuOptions::default()) {
        Ok(_) => panic!("a 33-row blocked depthwise conv compiled"),
        Err(e) => e.to_string(),
    };
    assert!(
        msg.contains("%c") && msg.contains("at most 32 rows"),
        "{msg}"
    );
}

/// Transposes that swap two axes with contiguous runs go in 4 x 4 tiles:
/// shapes with and without leftover rows and columns, with outer axes,
/// and the blocked layout's reorders, against the interpreter (a copy:
/// bitwise).
#[test]
fn tiled_transposes_match_the_interpreter() {
    for (shape, perm) in [
        (vec![5, 7], vec![1, 0]),
        (vec![8, 12], vec![1, 0]),
        (vec![3, 9, 6], vec![0, 2, 1]),
        (vec![2, 3, 8, 13], vec![0, 1, 3, 2]),
        (vec![1, 4, 8, 7, 7], vec![0, 1, 3, 4, 2]),
        (vec![2, 2, 5, 5, 8], vec![0, 1, 4, 2, 3]),
    ] {
        let dims = |s: &[usize]| {
            s.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let body = format!(
            "  input %x: f32[{}]\n  %y = Transpose(%x) {{perm=[{}]}}\n  output %y",
            dims(&shape),
            dims(&perm)
        );
        let g = parse(&body);
        let ins = vec![("x".to_string(), rand_f32(&shape, 3, -1.0, 1.0))];
        let want = dnnc_runtime::run(&g, &ins).expect("interpreter");
        let mut exe = compile_cpu(&g, &CpuOptions::default()).expect("compile");
        assert_eq!(bits(&exe.run(&ins).expect("run")), bits(&want), "{body}");
        exe.set_threads(2).expect("threads");
        assert_eq!(bits(&exe.run(&ins).expect("run")), bits(&want), "{body}");
    }
}

/// A conv whose filter arrives at run time has no blocked kernel (they
/// take their filter packed): the pass leaves it plain and the graph
/// compiles and matches the interpreter; written blocked by hand, it is a
/// clear error.
#[test]
fn runtime_filters_stay_plain() {
    let g = parse(
        "  input %x: f32[1,8,8,8]
  input %w2: f32[32,1,3,3]
  param %w1: f32[32,8,1,1] = he(seed=1)
  param %w3: f32[32,32,1,1] = he(seed=3)
  param %w4: f32[32,1,3,3] = he(seed=4)
  param %w5: f32[16,32,1,1] = he(seed=5)
  %a = Conv2d(%x, %w1)
  %b = Conv2d(%a, %w2) {pads=[1,1,1,1], group=32}
  %c = Conv2d(%b, %w3)
  %d = Conv2d(%c, %w4) {pads=[1,1,1,1], group=32}
  %e = Conv2d(%d, %w5)
  output %e",
    );
    let ins = vec![
        ("x".to_string(), rand_f32(&[1, 8, 8, 8], 1, -1.0, 1.0)),
        ("w2".to_string(), rand_f32(&[32, 1, 3, 3], 2, -1.0, 1.0)),
    ];
    check_with(&g, &ins, 1e-4, 1e-5, &CpuOptions::default());
    let g = parse(
        "  input %x: f32[1,2,8,8,8]
  input %w: f32[16,1,3,3]
  %c = Conv2d(%x, %w) {data=nchw8c, group=16, pads=[1,1,1,1]}
  output %c",
    );
    let msg = match compile_cpu(&g, &CpuOptions::default()) {
        Ok(_) => panic!("a blocked conv with a run-time filter compiled"),
        Err(e) => e.to_string(),
    };
    assert!(
        msg.contains("%c") && msg.contains("filter known at compile time"),
        "{msg}"
    );
}

/// A stem (`cin` channels, `k x k`, stride `s`) with `act`, then an
/// inverted residual block on its blocked result.
fn stem_chain(
    n: usize,
    (cin, c, hw): (usize, usize, usize),
    (k, s): (usize, usize),
    act: &str,
) -> String {
    let p = k / 2;
    let mid = c * 3;
    format!(
        "  input %x: f32[{n},{cin},{hw},{hw}]
  param %w0: f32[{c},{cin},{k},{k}] = he(seed=1)
  param %b0: f32[{c}] = uniform(low=-0.2, high=0.2, seed=2)
  param %w1: f32[{mid},{c},1,1] = he(seed=3)
  param %w2: f32[{mid},1,3,3] = he(seed=5)
  param %w3: f32[{c},{mid},1,1] = he(seed=7)
  %e = Conv2d(%x, %w0, %b0) {{pads=[{p},{p},{p},{p}], strides=[{s},{s}]}}
{act}
  %m = Conv2d(%e2, %w1)
  %d = Conv2d(%m, %w2) {{pads=[1,1,1,1], group={mid}}}
  %q = Conv2d(%d, %w3)
  %y = Add(%q, %e2)
  output %y"
    )
}

/// A stem of fewer than 8 channels feeding a blocked chain writes its
/// result blocked itself (`data=nchw_to_nchw8c`, the runtime's window
/// kernel): no reorder into the layout, against the interpreter, two
/// threads bitwise equal to one. Strides 1 and 2, windows 1x1 to 7x7 (the
/// padding reaching every side), odd block counts (a 24-wide panel),
/// batch 2, with Clip, SiLU, Relu and Neg after it.
#[test]
fn stems_write_the_blocked_layout_directly() {
    for (n, dims, taps, act) in [
        (1, (3, 32, 29), (3, 2), "  %e2 = Clip(%e) {min=0, max=6}"),
        (2, (3, 24, 17), (3, 1), SILU),
        (1, (1, 8, 12), (5, 1), "  %e2 = Relu(%e)"),
        (1, (4, 16, 23), (7, 2), "  %e2 = Neg(%e)"),
        (1, (2, 40, 9), (1, 1), "  %e2 = Clip(%e) {min=-1, max=1}"),
    ] {
        let body = stem_chain(n, dims, taps, act);
        let (g, ins, mut exe) = checked(&body, 13);
        let mut b = g.clone();
        dnnc_passes::block_channels::block_channels(&mut b).expect("block-channels");
        let text = dnnc_ir::text::print(&b);
        assert!(text.contains("data=nchw_to_nchw8c"), "{text}");
        assert!(
            exe.steps().iter().all(|s| !s.name.ends_with(".to_nchw8c")),
            "a reorder into the layout:\n{body}"
        );
        two_threads_bitwise(&mut exe, &ins, &body);
    }
}

/// Convs the kernel into the blocked layout does not compute say why,
/// naming the node; a stem whose result plain ops read stays plain.
#[test]
fn bad_convs_into_the_blocked_layout_are_clear_errors() {
    for (x, w, attrs, want) in [
        (
            "1,8,8,8",
            "16,8,3,3",
            "pads=[1,1,1,1]",
            "fewer than 8 channels",
        ),
        ("1,4,8,8", "16,2,3,3", "group=2", "ungrouped"),
        ("1,3,8,8", "16,3,3,3", "dilations=[2,2]", "undilated"),
    ] {
        let g = parse(&format!(
            "  input %x: f32[{x}]\n  param %w: f32[{w}] = he(seed=1)\n  %c = Conv2d(%x, %w) {{data=nchw_to_nchw8c, {attrs}}}\n  output %c"
        ));
        let msg = match compile_cpu(&g, &CpuOptions::default()) {
            Ok(_) => panic!("compiled: {x} {w} {attrs}"),
            Err(e) => e.to_string(),
        };
        assert!(msg.contains("%c") && msg.contains(want), "{msg}");
    }
    // The input of a data=nchw_to_nchw8c conv is plain.
    let src = "graph t {\n  input %x: f32[1,1,8,8,8]\n  param %w: f32[16,8,1,1] = he(seed=1)\n  %c = Conv2d(%x, %w) {data=nchw_to_nchw8c}\n  output %c\n}\n";
    let msg = dnnc_ir::text::parse(src, "t.dnn")
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("input must have rank 4"), "{msg}");
    // A stem feeding a max pool (ResNet's) is no region entry.
    let g = parse(
        "  input %x: f32[1,3,16,16]
  param %w: f32[16,3,3,3] = he(seed=1)
  %c = Conv2d(%x, %w) {pads=[1,1,1,1]}
  %p = MaxPool(%c) {kernel=[2,2], strides=[2,2]}
  output %p",
    );
    let mut b = g.clone();
    dnnc_passes::block_channels::block_channels(&mut b).expect("block-channels");
    assert!(!dnnc_ir::text::print(&b).contains("nchw8c"));
}

/// A bottleneck on blocked data whose last pointwise conv fuses `Add(q,
/// r)` and Relu: where the residual `r` dies at that conv, the planner
/// writes the result over it (the one temp in place), not where `r` is
/// read afterwards, and either way the build matches the interpreter,
/// two threads bitwise one. A conv whose residual is its own input
/// (`Add(Conv(r), r)`) must not: its tiles read every input channel of
/// a pixel after earlier panels wrote theirs.
#[test]
fn a_dying_residual_takes_the_blocked_conv_result_in_place() {
    let body = |tail: &str| {
        format!(
            "  input %x: f32[2,16,10,10]
  param %w0: f32[64,16,1,1] = he(seed=1)
  param %b0: f32[64] = uniform(low=-0.2, high=0.2, seed=2)
  param %w1: f32[32,64,1,1] = he(seed=3)
  param %b1: f32[32] = uniform(low=-0.2, high=0.2, seed=4)
  param %w2: f32[64,32,1,1] = he(seed=5)
  param %b2: f32[64] = uniform(low=-0.2, high=0.2, seed=6)
  param %w3: f32[8,64,1,1] = he(seed=7)
  param %w4: f32[64,64,1,1] = he(seed=8)
  %a = Conv2d(%x, %w0, %b0)
  %ar = Relu(%a)
  %e = Conv2d(%ar, %w1, %b1)
  %er = Relu(%e)
  %q = Conv2d(%er, %w2, %b2)
  %s = Add(%q, %ar)
  %y = Relu(%s)
{tail}"
        )
    };
    let dies = body("  %z = Conv2d(%y, %w3)\n  output %z");
    // The residual read once more after the fused conv.
    let lives = body("  %z = Conv2d(%y, %w3)\n  %u = Conv2d(%ar, %w3)\n  output %z, %u");
    // A residual that is the conv's own input.
    let own =
        body("  %p = Conv2d(%y, %w4)\n  %t = Add(%p, %y)\n  %z = Conv2d(%t, %w3)\n  output %z");
    let mut in_place = Vec::new();
    for b in [&dies, &lives, &own] {
        let (_, ins, mut exe) = checked(b, 12);
        assert!(
            exe.steps().iter().any(|s| s.name.ends_with(".to_nchw8c")),
            "not blocked:\n{b}"
        );
        exe.set_threads(1).expect("threads");
        in_place.push(exe.memory().in_place);
        two_threads_bitwise(&mut exe, &ins, b);
    }
    // One temp in place where the residual dies, none where it lives on,
    // and in the third graph only the first residual conv's (its second
    // reads its own input as the residual).
    assert_eq!(in_place, [1, 0, 1]);
}

/// Strided 1x1 convs inside a region run gathered: with a bias (read as
/// the residual of the stride-2 3x3 beside it), and with a Tanh (an
/// activation the kernel does not apply, so the conv runs a row at a
/// time with the generic epilogue after each); batches 1 and 3. Against
/// the interpreter, two threads bitwise one. (The residual fused into a
/// gathered conv: `dense_window_convs_run_blocked`.)
#[test]
fn strided_projections_run_gathered() {
    for n in [1, 3] {
        let body = format!(
            "  input %x: f32[{n},8,14,14]
  param %w0: f32[32,8,1,1] = he(seed=1)
  param %wp: f32[64,32,1,1] = he(seed=2)
  param %bp: f32[64] = uniform(low=-0.2, high=0.2, seed=3)
  param %w1: f32[64,32,3,3] = he(seed=4)
  param %wq: f32[48,32,1,1] = he(seed=5)
  param %w2: f32[16,64,1,1] = he(seed=6)
  param %w3: f32[16,48,1,1] = he(seed=7)
  %a = Conv2d(%x, %w0)
  %ar = Relu(%a)
  %b = Conv2d(%ar, %w1) {{pads=[1,1,1,1], strides=[2,2]}}
  %p = Conv2d(%ar, %wp, %bp) {{strides=[2,2]}}
  %s = Add(%b, %p)
  %sr = Relu(%s)
  %q = Conv2d(%ar, %wq) {{strides=[2,2]}}
  %qt = Tanh(%q)
  %o1 = Conv2d(%sr, %w2)
  %o2 = Conv2d(%qt, %w3)
  output %o1, %o2"
        );
        let (_, ins, mut exe) = checked(&body, 5);
        let unit = |name: &str| {
            let step = exe
                .steps()
                .iter()
                .find(|s| s.nodes.iter().any(|n| n == name));
            step.map(|s| s.split_units.join(", ")).unwrap_or_default()
        };
        let u = unit("p");
        assert!(
            u == "filter panels" || u == "15-pixel groups",
            "the projection runs gathered, split {u:?}: {body}"
        );
        assert_eq!(unit("q"), "rows", "a row at a time: {body}");
        assert_eq!(unit("b"), "rows x filter slices", "{body}");
        two_threads_bitwise(&mut exe, &ins, &body);
    }
}
