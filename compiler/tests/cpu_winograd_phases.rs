//! Phased Winograd kernels (one image and group: input channels, then the
//! batched frequency GEMMs, then output channels): F(2x2) and F(4x4) with
//! pads 0 and 1, tile rows that are and are not whole groups of four
//! tiles, and a bias + residual + ReLU epilogue match the interpreter, and
//! run as 2, 3 and 5 tasks they give bitwise the result of one task.
//! Batches and grouped convs split over (image, group) pairs instead, and
//! images whose V and M outgrow the band size over bands of tile rows,
//! each task with its own workspaces: bitwise too, and they match as
//! well.

mod cpu_common;

use cpu_common::{bits, check_with, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, ConvAlgo, CpuOptions};
use dnnc_ir::{Graph, Tensor};
use dnnc_runtime::cpu::KernelSplit;

/// `Relu(Conv2d(x, w, b) + r)`, a 3x3 stride-1 conv on one image.
fn conv(c: usize, m: usize, h: usize, w: usize, pad: usize) -> Graph {
    conv_n(1, c, m, h, w, pad)
}

/// [`conv`] on `n` images.
fn conv_n(n: usize, c: usize, m: usize, h: usize, w: usize, pad: usize) -> Graph {
    let (oh, ow) = (h + 2 * pad - 2, w + 2 * pad - 2);
    let src = format!(
        "graph wino {{
  input %x: f32[{n},{c},{h},{w}]
  input %r: f32[{n},{m},{oh},{ow}]
  param %w: f32[{m},{c},3,3] = he(seed=7)
  param %b: f32[{m}] = uniform(low=-1, high=1, seed=8)
  %c = Conv2d(%x, %w, %b) {{strides=[1,1], pads=[{pad},{pad},{pad},{pad}], dilations=[1,1], group=1}}
  %s = Add(%c, %r)
  %y = Relu(%s)
  output %y
}}
"
    );
    dnnc_ir::text::parse(&src, "wino.dnn").unwrap_or_else(|e| panic!("{e:?}\n{src}"))
}

/// Compiles `g` with `algo` forced, checks it against the interpreter,
/// that the conv kernel is phased and ran with `algo`, then that 2, 3 and
/// 5 threads (every kernel split as far as it goes) give bitwise the
/// single-thread outputs with the conv kernel really split.
fn phased_equal(g: &Graph, ins: &[(String, Tensor)], algo: ConvAlgo) {
    split_equal(g, ins, algo, None)
}

/// [`phased_equal`] for a conv that runs in `bands` bands of tile rows
/// per image (`dnnc_passes::cost::winograd_bands`) instead of phases: its
/// kernel splits over images x bands.
fn banded_equal(g: &Graph, ins: &[(String, Tensor)], algo: ConvAlgo, bands: usize) {
    split_equal(g, ins, algo, Some(bands))
}

fn split_equal(g: &Graph, ins: &[(String, Tensor)], algo: ConvAlgo, bands: Option<usize>) {
    let opts = CpuOptions {
        conv_algo: Some(algo),
        ..Default::default()
    };
    check_with(g, ins, 2e-4, 2e-4, &opts);
    let mut exe = compile_cpu(g, &opts).unwrap();
    let want = format!("{algo:?}").to_lowercase();
    let k = exe
        .steps()
        .iter()
        .position(|s| s.op.starts_with("Conv2d"))
        .expect("a conv kernel");
    let st = &exe.steps()[k];
    assert_eq!(st.algo.as_deref(), Some(want.as_str()), "{}", g.name);
    let images = g.inputs().first().map_or(1, |&x| g.value(x).ty.shape[0]);
    match bands {
        None => assert!(
            !st.phase_splits.is_empty() && st.split > 1,
            "the Winograd kernel is not phased: split {}, phases {:?}",
            st.split,
            st.phase_splits
        ),
        Some(b) => assert!(
            st.phase_splits.is_empty() && st.split == images * b,
            "the Winograd kernel does not split over {images} x {b} bands: split {}, phases {:?}",
            st.split,
            st.phase_splits
        ),
    }
    split_bitwise(&mut exe, ins, k, algo, &g.name);
}

/// Runs step `k` of `exe` (a conv with `algo`) as 2, 3 and 5 tasks and
/// checks the outputs are bitwise those of one task.
fn split_bitwise(
    exe: &mut dnnc_runtime::cpu::Executable,
    ins: &[(String, Tensor)],
    k: usize,
    algo: ConvAlgo,
    name: &str,
) {
    exe.set_threads(1).unwrap();
    let one = exe.run(ins).unwrap();
    exe.set_kernel_split(KernelSplit::Always);
    for t in [2, 3, 5] {
        exe.set_threads(t).unwrap();
        let tasks = exe.step_tasks()[k];
        assert!(
            tasks > 1,
            "{algo:?} kernel ran as {tasks} task(s) on {t} threads"
        );
        let r = exe.run(ins).unwrap();
        let (a, b) = (bits(&one), bits(&r));
        assert_eq!(a.len(), b.len());
        let diff = a.iter().zip(&b).filter(|(x, y)| x != y).count();
        let first = a.iter().zip(&b).position(|(x, y)| x != y);
        assert_eq!(
            diff, 0,
            "{name} {algo:?} with {t} threads: {diff} elements differ, first at {first:?}"
        );
    }
}

fn inputs(c: usize, m: usize, h: usize, w: usize, pad: usize) -> Vec<(String, Tensor)> {
    inputs_n(1, c, m, h, w, pad)
}

fn inputs_n(n: usize, c: usize, m: usize, h: usize, w: usize, pad: usize) -> Vec<(String, Tensor)> {
    let (oh, ow) = (h + 2 * pad - 2, w + 2 * pad - 2);
    vec![
        ("x".to_string(), rand_f32(&[n, c, h, w], 11, -2.0, 2.0)),
        ("r".to_string(), rand_f32(&[n, m, oh, ow], 12, -1.0, 1.0)),
    ]
}

/// The Winograd bands `g`'s conv runs in with tile `m`.
fn bands_of(g: &Graph, m: usize) -> usize {
    let conv = g
        .topo_order()
        .into_iter()
        .find(|&id| g.node(id).op.name() == "Conv2d")
        .unwrap();
    let shape = dnnc_passes::ConvGeom::of_node(g, conv).unwrap().shape();
    dnnc_passes::cost::winograd_bands(&shape, m) as usize
}

#[test]
fn winograd_phases_split_bitwise_and_match_the_interpreter() {
    // (c, m, h, w, pad): 4x4 tile rows of 4, 3, 5 and 8 tiles, 2x2 rows
    // of 7, 8, 2 and 4 tiles; channel counts not multiples of the tasks;
    // the last one large enough that tasks of a phase overlap in time.
    let shapes = [
        (5, 7, 16, 16, 1),
        (6, 9, 13, 11, 1),
        (7, 5, 20, 22, 0),
        (3, 11, 30, 9, 0),
        (24, 32, 40, 38, 1),
    ];
    for algo in [ConvAlgo::Winograd2, ConvAlgo::Winograd4] {
        let tile = if algo == ConvAlgo::Winograd2 { 2 } else { 4 };
        for &(c, m, h, w, pad) in &shapes {
            let g = conv(c, m, h, w, pad);
            match bands_of(&g, tile) {
                1 => phased_equal(&g, &inputs(c, m, h, w, pad), algo),
                b => banded_equal(&g, &inputs(c, m, h, w, pad), algo, b),
            }
        }
    }
}

/// Images whose V and M outgrow the band size run in bands of tile rows
/// (few input channels on large maps: SqueezeNet's fire modules' 16 ->
/// 64 on 55x55), F(2x2) and F(4x4): bands of unequal height, a partial
/// last tile row, the residual epilogue's edge strips band by band, and
/// two images (units = images x bands).
#[test]
fn winograd_bands_split_bitwise_and_match_the_interpreter() {
    // (n, c, m, h, w, pad)
    let shapes = [
        (1, 16, 64, 55, 55, 1),
        (1, 8, 40, 51, 53, 0),
        (2, 12, 36, 61, 38, 1),
    ];
    for algo in [ConvAlgo::Winograd2, ConvAlgo::Winograd4] {
        let tile = if algo == ConvAlgo::Winograd2 { 2 } else { 4 };
        for &(n, c, m, h, w, pad) in &shapes {
            let g = conv_n(n, c, m, h, w, pad);
            let bands = bands_of(&g, tile);
            assert!(
                bands >= 2 && bands.is_multiple_of(2),
                "{n}x{c}x{h}x{w} {algo:?}: {bands} bands"
            );
            banded_equal(&g, &inputs_n(n, c, m, h, w, pad), algo, bands);
        }
    }
}

#[test]
fn batched_and_grouped_winograd_splits_over_images_and_groups() {
    // 2 images, 2 groups of 3 -> 4 channels, 4x4 tile rows of 3 tiles.
    let src = "graph wino_batch {
  input %x: f32[2,6,11,10]
  input %r: f32[2,8,11,10]
  param %w: f32[8,3,3,3] = he(seed=5)
  param %b: f32[8] = uniform(low=-1, high=1, seed=6)
  %c = Conv2d(%x, %w, %b) {strides=[1,1], pads=[1,1,1,1], dilations=[1,1], group=2}
  %s = Add(%c, %r)
  %y = Relu(%s)
  output %y
}
";
    let g = dnnc_ir::text::parse(src, "wino.dnn").unwrap();
    let ins = vec![
        ("x".to_string(), rand_f32(&[2, 6, 11, 10], 21, -2.0, 2.0)),
        ("r".to_string(), rand_f32(&[2, 8, 11, 10], 22, -1.0, 1.0)),
    ];
    for algo in [ConvAlgo::Winograd2, ConvAlgo::Winograd4] {
        let opts = CpuOptions {
            conv_algo: Some(algo),
            ..Default::default()
        };
        check_with(&g, &ins, 2e-4, 2e-4, &opts);
        let mut exe = compile_cpu(&g, &opts).unwrap();
        let k = exe
            .steps()
            .iter()
            .position(|s| s.op.starts_with("Conv2d"))
            .expect("a conv kernel");
        let st = &exe.steps()[k];
        let want = format!("{algo:?}").to_lowercase();
        assert_eq!(st.algo.as_deref(), Some(want.as_str()));
        assert!(
            st.phase_splits.is_empty() && st.split == 4,
            "split {}, phases {:?}",
            st.split,
            st.phase_splits
        );
        split_bitwise(&mut exe, &ins, k, algo, &g.name);
    }
}
