//! Splits routed into an in-place Concat (`codegen::cpu`'s routed
//! Splits): a merged 1x1 conv (what the e-graph's branch merge and
//! `split-order` leave) whose last (first) part opens (closes) its
//! module's Concat, the other parts feeding Winograd convs, beside a
//! pool branch. The conv's result shares one buffer with the Concat, so
//! the Split has no code and copies nothing; the plane padding of the
//! whole group follows the Concat's. Each case against the interpreter,
//! bitwise against dense planes, and bitwise across threads with every
//! kernel split.

mod cpu_common;

use cpu_common::{bits, check_with, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, ConvAlgo, CpuOptions};
use dnnc_ir::{Graph, Tensor};
use dnnc_runtime::cpu::{BufferKind, Concurrency, Executable, KernelSplit};

/// An inception-like module on `n x 8 x s x s`: a merged 1x1 conv of
/// 24 channels split as `split` (names `p1` 8 for the Concat, `p2` 8 and
/// `p3` 8 for 3x3 convs), a 3x3/1 max pool and 1x1 conv, their Concat
/// in `cat` order, then a 1x1 conv (so the Concat is no graph output).
fn module(n: usize, s: usize, split: &[&str], cat: &[&str]) -> Graph {
    parse(&format!(
        "  input %x: f32[{n},8,{s},{s}]
  param %mw: f32[24,8,1,1] = he(seed=1)
  param %mb: f32[24] = uniform(low=-0.2, high=0.2, seed=2)
  %mc = Conv2d(%x, %mw, %mb)
  %m = Relu(%mc)
  {} = Split(%m) {{axis=1, split=[8,8,8]}}
  param %w2: f32[16,8,3,3] = he(seed=3)
  param %b2: f32[16] = uniform(low=-0.2, high=0.2, seed=4)
  %q2c = Conv2d(%p2, %w2, %b2) {{pads=[1,1,1,1]}}
  %q2 = Relu(%q2c)
  param %w3: f32[8,8,3,3] = he(seed=5)
  %q3c = Conv2d(%p3, %w3) {{pads=[1,1,1,1]}}
  %q3 = Relu(%q3c)
  %pool = MaxPool(%x) {{kernel=[3,3], pads=[1,1,1,1]}}
  param %w4: f32[8,8,1,1] = he(seed=6)
  %q4c = Conv2d(%pool, %w4)
  %q4 = Relu(%q4c)
  %cat = Concat({}) {{axis=1}}
  param %ow: f32[6,40,1,1] = he(seed=7)
  %y = Conv2d(%cat, %ow)
  output %y",
        split.join(", "),
        cat.join(", ")
    ))
}

/// The module's 3x3 convs as Winograd F(4x4), which read padded planes.
fn winograd() -> CpuOptions {
    CpuOptions {
        conv_algo_for: ["q2c", "q3c"]
            .iter()
            .map(|n| (n.to_string(), ConvAlgo::Winograd4))
            .collect(),
        ..Default::default()
    }
}

/// The buffer named `name` in `exe`.
fn buffer<'e>(exe: &'e Executable, name: &str) -> &'e dnnc_runtime::cpu::Buffer {
    exe.buffers()
        .iter()
        .find(|b| b.name == name)
        .unwrap_or_else(|| panic!("no buffer `{name}`"))
}

/// Checks the routed layout of `exe`: the merged conv's result and the
/// Concat alias one buffer, `p1` is the Concat's slice at `cat_at`
/// bytes, no step is the Split's, and the Concat's planes hold `plane`
/// floats.
fn assert_routed(exe: &Executable, g: &Graph, cat_at: usize, plane: usize) {
    let shared = exe
        .buffers()
        .iter()
        .position(|b| b.name == "cat (with %m)")
        .expect("a buffer shared by %m and %cat");
    let offset = |name: &str| match buffer(exe, name).kind {
        BufferKind::Alias { of, offset } => (of, offset),
        ref k => panic!("`{name}` is {k:?}, not a view"),
    };
    let (cat_of, cat_off) = offset("cat");
    let (m_of, m_off) = offset("m");
    assert_eq!((cat_of, m_of), (shared, shared));
    let (p1_of, p1_off) = offset("p1");
    assert_eq!(
        p1_of,
        exe.buffers().iter().position(|b| b.name == "m").unwrap()
    );
    assert_eq!(m_off + p1_off, cat_off + cat_at, "p1 is the Concat's slice");
    assert!(
        exe.steps().iter().all(|s| s.op != "Split"),
        "the Split copies nothing"
    );
    let v = g.value_by_name("cat").unwrap();
    let shape = &g.value(v).ty.shape;
    assert_eq!(buffer(exe, "cat").bytes, shape[0] * shape[1] * plane * 4);
}

/// Against the interpreter, bitwise against dense planes, and bitwise
/// over 2 and 3 threads with every kernel split.
fn check_all(g: &Graph, x: &[(String, Tensor)], opts: &CpuOptions) -> Executable {
    check_with(g, x, 1e-4, 1e-5, opts);
    let dense = CpuOptions {
        dense_planes: true,
        ..opts.clone()
    };
    let want = compile_cpu(g, &dense).unwrap().run(x).unwrap();
    let mut exe = compile_cpu(g, opts).unwrap();
    assert_eq!(bits(&exe.run(x).unwrap()), bits(&want), "padded vs dense");
    exe.set_kernel_split(KernelSplit::Always);
    exe.set_concurrency(Concurrency::Never);
    for t in [2, 3] {
        exe.set_threads(t).unwrap();
        assert_eq!(bits(&exe.run(x).unwrap()), bits(&want), "{t} threads");
    }
    exe.set_concurrency(Concurrency::Always);
    exe.set_threads(2).unwrap();
    assert_eq!(bits(&exe.run(x).unwrap()), bits(&want), "concurrent waves");
    exe
}

#[test]
fn a_part_opening_the_concat_is_written_there_by_the_merged_conv() {
    // 14x14 planes are padded to 208 floats, 16x16 ones are whole lines.
    for (s, plane, seed) in [(14usize, 208usize, 1u64), (16, 256, 2), (9, 96, 3)] {
        let g = module(1, s, &["%p2", "%p3", "%p1"], &["%p1", "%q2", "%q3", "%q4"]);
        let x = vec![("x".to_string(), rand_f32(&[1, 8, s, s], seed, -2.0, 2.0))];
        let exe = check_all(&g, &x, &winograd());
        assert_routed(&exe, &g, 0, plane);
        // The other parts lie before the Concat.
        assert_eq!(
            buffer(&exe, "cat (with %m)").bytes,
            (16 + 40) * plane * 4,
            "{s}x{s}"
        );
    }
}

#[test]
fn a_part_closing_the_concat_is_written_there_by_the_merged_conv() {
    let s = 14;
    let g = module(1, s, &["%p1", "%p2", "%p3"], &["%q2", "%q3", "%q4", "%p1"]);
    let x = vec![("x".to_string(), rand_f32(&[1, 8, s, s], 4, -2.0, 2.0))];
    let exe = check_all(&g, &x, &winograd());
    assert_routed(&exe, &g, 32 * 208 * 4, 208);
    // The other parts lie after the Concat.
    assert_eq!(buffer(&exe, "cat (with %m)").bytes, (32 + 24) * 208 * 4);
}

#[test]
fn splits_that_cannot_be_routed_still_copy_or_view() {
    let s = 14;
    let x = vec![("x".to_string(), rand_f32(&[1, 8, s, s], 5, -2.0, 2.0))];
    // The Concat's part sits in the middle of the Split: copied.
    let g = module(1, s, &["%p2", "%p1", "%p3"], &["%p1", "%q2", "%q3", "%q4"]);
    let exe = check_all(&g, &x, &winograd());
    assert!(exe.buffers().iter().all(|b| b.name != "cat (with %m)"));
    assert!(exe.steps().iter().any(|s| s.op == "Split"));
    // A batch of two: channel slices are not contiguous, so the Split
    // copies and the Concat is not built in place.
    let g = module(2, s, &["%p2", "%p3", "%p1"], &["%p1", "%q2", "%q3", "%q4"]);
    let x = vec![("x".to_string(), rand_f32(&[2, 8, s, s], 6, -2.0, 2.0))];
    let exe = check_all(&g, &x, &winograd());
    assert!(exe.buffers().iter().all(|b| b.name != "cat (with %m)"));
}

#[test]
fn one_split_is_routed_into_a_concat_that_two_could_take() {
    // p1 opens the Concat from one merged conv, r2 closes it from
    // another: only one is routed, the other's part is copied.
    let s = 14;
    let g = parse(&format!(
        "  input %x: f32[1,8,{s},{s}]
  param %mw: f32[16,8,1,1] = he(seed=1)
  %mc = Conv2d(%x, %mw)
  %m = Relu(%mc)
  %p2, %p1 = Split(%m) {{axis=1, split=[8,8]}}
  param %nw: f32[16,8,1,1] = he(seed=2)
  %nc = Conv2d(%x, %nw)
  %n = Relu(%nc)
  %r2, %r1 = Split(%n) {{axis=1, split=[8,8]}}
  param %w2: f32[8,8,3,3] = he(seed=3)
  %q2c = Conv2d(%p2, %w2) {{pads=[1,1,1,1]}}
  %q2 = Relu(%q2c)
  param %w3: f32[8,8,3,3] = he(seed=4)
  %q3c = Conv2d(%r1, %w3) {{pads=[1,1,1,1]}}
  %q3 = Relu(%q3c)
  %cat = Concat(%p1, %q2, %q3, %r2) {{axis=1}}
  param %ow: f32[6,32,1,1] = he(seed=5)
  %y = Conv2d(%cat, %ow)
  output %y"
    ));
    let opts = CpuOptions {
        conv_algo_for: ["q2c", "q3c"]
            .iter()
            .map(|n| (n.to_string(), ConvAlgo::Winograd4))
            .collect(),
        ..Default::default()
    };
    let x = vec![("x".to_string(), rand_f32(&[1, 8, s, s], 7, -2.0, 2.0))];
    let exe = check_all(&g, &x, &opts);
    let shared: Vec<&str> = exe
        .buffers()
        .iter()
        .filter(|b| b.name.starts_with("cat (with"))
        .map(|b| b.name.as_str())
        .collect();
    assert_eq!(shared.len(), 1, "{shared:?}");
    assert_eq!(exe.steps().iter().filter(|s| s.op == "Split").count(), 1);
}
