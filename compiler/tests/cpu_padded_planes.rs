//! Activations stored with each `H x W` plane padded to whole cache lines
//! (`codegen::cpu::planes`): SqueezeNet-like fire modules (a pointwise
//! squeeze, pointwise and Winograd expansions into an in-place Concat, a
//! 3x3/2 max pool, a pointwise conv after it) on odd map sizes, a stem
//! whose absorbed max pool writes a padded result, and a batch of two.
//! Each against the interpreter, bitwise against the same graph with
//! dense planes (`dense_planes`), and bitwise across threads with every
//! kernel forced to split; the buffers are checked to be padded, so the
//! strided paths are the ones under test.

mod cpu_common;

use cpu_common::{bits, check_with, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, ConvAlgo, CpuOptions};
use dnnc_ir::{Graph, Tensor};
use dnnc_runtime::cpu::{Concurrency, Executable, KernelSplit};

/// Two fire modules on `n x c x s x s` (the second after a 3x3/2 ceil
/// pool), then a pointwise conv with Clip as the output.
fn fires(n: usize, c: usize, s: usize) -> Graph {
    let mut body = format!("  input %x: f32[{n},{c},{s},{s}]\n");
    let mut x = "%x".to_string();
    let mut cin = c;
    for f in 0..2 {
        let (sq, ex) = (4 + 4 * f, 8 + 8 * f);
        body += &format!(
            "  param %sw{f}: f32[{sq},{cin},1,1] = he(seed={})
  param %sb{f}: f32[{sq}] = uniform(low=-0.2, high=0.2, seed={})
  %sq{f}c = Conv2d({x}, %sw{f}, %sb{f})
  %sq{f} = Relu(%sq{f}c)
  param %aw{f}: f32[{ex},{sq},1,1] = he(seed={})
  param %ab{f}: f32[{ex}] = uniform(low=-0.2, high=0.2, seed={})
  %a{f}c = Conv2d(%sq{f}, %aw{f}, %ab{f})
  %a{f} = Relu(%a{f}c)
  param %bw{f}: f32[{ex},{sq},3,3] = he(seed={})
  param %bb{f}: f32[{ex}] = uniform(low=-0.2, high=0.2, seed={})
  %b{f}c = Conv2d(%sq{f}, %bw{f}, %bb{f}) {{pads=[1,1,1,1]}}
  %b{f} = Relu(%b{f}c)
  %cat{f} = Concat(%a{f}, %b{f}) {{axis=1}}
",
            10 * f + 1,
            10 * f + 2,
            10 * f + 3,
            10 * f + 4,
            10 * f + 5,
            10 * f + 6,
        );
        x = format!("%cat{f}");
        cin = 2 * ex;
        if f == 0 {
            body += "  %pool = MaxPool(%cat0) {kernel=[3,3], strides=[2,2], ceil_mode=1}\n";
            x = "%pool".to_string();
        }
    }
    body += &format!(
        "  param %ow: f32[6,{cin},1,1] = he(seed=40)
  %oc = Conv2d({x}, %ow)
  %y = Clip(%oc) {{min=0.0, max=6.0}}
  output %y"
    );
    parse(&body)
}

/// The fire modules' 3x3 expansions as Winograd F(4x4) (the default may
/// pick im2col on such small maps, which reads dense planes).
fn winograd() -> CpuOptions {
    CpuOptions {
        conv_algo_for: ["%b0c", "%b1c"]
            .iter()
            .map(|n| (n.trim_start_matches('%').to_string(), ConvAlgo::Winograd4))
            .collect(),
        ..Default::default()
    }
}

fn dense(opts: &CpuOptions) -> CpuOptions {
    CpuOptions {
        dense_planes: true,
        ..opts.clone()
    }
}

/// Floats per plane of value `name`'s buffer in `exe`.
fn plane_floats(exe: &Executable, g: &Graph, name: &str) -> usize {
    let v = g.value_by_name(name).expect("value");
    let s = &g.value(v).ty.shape;
    let b = exe
        .buffers()
        .iter()
        .find(|b| b.name == name)
        .expect("buffer");
    b.bytes / 4 / (s[0] * s[1])
}

/// Runs `g` against the interpreter and the dense build (bitwise), then
/// split over 2 and 3 threads (bitwise); returns the executable.
fn check_all(g: &Graph, x: &[(String, Tensor)], opts: &CpuOptions) -> Executable {
    check_with(g, x, 1e-4, 1e-5, opts);
    let mut exe = compile_cpu(g, opts).unwrap();
    let want = compile_cpu(g, &dense(opts)).unwrap().run(x).unwrap();
    let one = exe.run(x).unwrap();
    assert_eq!(bits(&one), bits(&want), "padded vs dense planes");
    exe.set_kernel_split(KernelSplit::Always);
    exe.set_concurrency(Concurrency::Never);
    for t in [2, 3] {
        exe.set_threads(t).unwrap();
        assert_eq!(bits(&exe.run(x).unwrap()), bits(&want), "{t} threads");
    }
    exe
}

#[test]
fn fire_modules_on_padded_planes_match_the_interpreter_and_dense_planes() {
    for (s, seed) in [(15usize, 1u64), (13, 2), (27, 3)] {
        let g = fires(1, 6, s);
        let x = vec![("x".to_string(), rand_f32(&[1, 6, s, s], seed, -2.0, 2.0))];
        let exe = check_all(&g, &x, &winograd());
        let p = (s * s).next_multiple_of(16);
        for v in ["sq0", "a0", "b0", "cat0"] {
            assert_eq!(plane_floats(&exe, &g, v), p, "{v} at {s}x{s}");
        }
        // The pool's ceil-mode size: its last window starts inside.
        let q = (s - 3).div_ceil(2) + 1;
        let q = if (q - 1) * 2 >= s { q - 1 } else { q };
        let pq = (q * q).next_multiple_of(16);
        for v in ["pool", "sq1", "a1", "b1", "cat1"] {
            assert_eq!(plane_floats(&exe, &g, v), pq, "{v} at {q}x{q}");
        }
        // The graph's output keeps dense planes.
        assert_eq!(plane_floats(&exe, &g, "y"), q * q);
        let flat = compile_cpu(&g, &dense(&winograd())).unwrap();
        assert_eq!(plane_floats(&flat, &g, "cat0"), s * s);
    }
}

#[test]
fn a_batch_of_two_on_padded_planes() {
    // No in-place Concat at batch 2 (its parts are no contiguous blocks),
    // so the expansions keep dense planes for the Concat's kernel; the
    // squeezes and the pool's input and output still pad.
    let g = fires(2, 5, 15);
    let x = vec![("x".to_string(), rand_f32(&[2, 5, 15, 15], 7, -2.0, 2.0))];
    let exe = check_all(&g, &x, &winograd());
    assert_eq!(plane_floats(&exe, &g, "sq0"), 240);
    assert_eq!(plane_floats(&exe, &g, "a0"), 225);
    assert_eq!(plane_floats(&exe, &g, "pool"), 64);
}

#[test]
fn a_pooled_stem_writes_padded_planes() {
    // SqueezeNet's stem on a smaller image: the absorbed pool writes its
    // 39x37 result padded to 1456 floats a plane, which a squeeze reads.
    let g = parse(
        "  input %x: f32[1,3,160,150]
  param %w: f32[64,3,3,3] = he(seed=51)
  param %b: f32[64] = uniform(low=-0.5, high=0.5, seed=52)
  %c = Conv2d(%x, %w, %b) {strides=[2,2]}
  %r = Relu(%c)
  %p = MaxPool(%r) {kernel=[3,3], strides=[2,2], ceil_mode=1}
  param %sw: f32[16,64,1,1] = he(seed=53)
  %s = Conv2d(%p, %sw)
  %y = Relu(%s)
  output %y",
    );
    let x = vec![("x".to_string(), rand_f32(&[1, 3, 160, 150], 8, -2.0, 2.0))];
    let exe = check_all(&g, &x, &CpuOptions::default());
    assert!(exe.steps().iter().any(|s| s.op.ends_with("+MaxPool")));
    assert_eq!(plane_floats(&exe, &g, "p"), 1456);
}

/// A NaN reaching a max pool on padded planes: the native kernel reports
/// the plane and the exact code recomputes it through the planes'
/// strides. (No Winograd here: its tiles spread a NaN to neighbours a
/// direct conv would not reach.)
#[test]
fn nans_in_padded_planes_reach_the_output_as_with_dense_planes() {
    let g = parse(
        "  input %x: f32[1,6,15,15]
  param %w: f32[8,6,1,1] = he(seed=61)
  %c = Conv2d(%x, %w)
  %r = Relu(%c)
  %p = MaxPool(%r) {kernel=[3,3], strides=[2,2], ceil_mode=1}
  param %w2: f32[4,8,1,1] = he(seed=62)
  %y = Conv2d(%p, %w2)
  output %y",
    );
    let mut x = rand_f32(&[1, 6, 15, 15], 9, -2.0, 2.0);
    if let Tensor::F32(a) = &mut x {
        a[[0, 2, 7, 14]] = f32::NAN;
    }
    let x = vec![("x".to_string(), x)];
    let exe = check_all(&g, &x, &CpuOptions::default());
    assert_eq!(plane_floats(&exe, &g, "r"), 240);
    let got = exe.run(&x).unwrap();
    let Tensor::F32(y) = &got[0] else {
        panic!("f32 output")
    };
    assert!(y.iter().any(|v| v.is_nan()), "no NaN reached the output");
}
