//! Shared helpers of the CPU-backend differential tests: seeded data, and
//! running a graph on both the interpreter (the oracle) and the compiled
//! executable.
#![allow(dead_code)]

use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};
use dnnc_ir::{Graph, Tensor};
use ndarray::{ArrayD, IxDyn};
use std::path::PathBuf;

/// SplitMix64 stream for reproducible test data.
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
    /// Uniform integer in `[0, n)`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// An f32 tensor with uniform entries.
pub fn rand_f32(shape: &[usize], seed: u64, lo: f32, hi: f32) -> Tensor {
    let mut r = Rng(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| r.uniform(lo, hi)).collect();
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap())
}

/// An f32 tensor holding `v`.
pub fn f32_tensor(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap())
}

/// Largest absolute difference, after checking `|a - b| <= atol + rtol |b|`
/// elementwise (NaN matches NaN, infinities must match exactly).
pub fn assert_close(what: &str, got: &Tensor, want: &Tensor, rtol: f32, atol: f32) -> f32 {
    assert_eq!(got.ty(), want.ty(), "{what}: types differ");
    let mut max = 0.0f32;
    match (got, want) {
        (Tensor::F32(a), Tensor::F32(b)) => {
            for (i, (&x, &y)) in a.iter().zip(b.iter()).enumerate() {
                if x.is_nan() && y.is_nan() {
                    continue;
                }
                if x.is_infinite() || y.is_infinite() {
                    assert_eq!(x, y, "{what}: element {i}: got {x}, want {y}");
                    continue;
                }
                let d = (x - y).abs();
                assert!(
                    d <= atol + rtol * y.abs(),
                    "{what}: element {i}: got {x}, want {y} (|diff| {d})"
                );
                max = max.max(d);
            }
        }
        (a, b) => assert_eq!(a, b, "{what}: values differ"),
    }
    max
}

/// Compiles `g` for the CPU and checks every output against the
/// interpreter; returns the largest absolute error. The run's arena
/// starts with every float a NaN (`Executable::set_arena_fill`), so a
/// kernel that reads memory nothing wrote fails the check.
pub fn check_with(
    g: &Graph,
    inputs: &[(String, Tensor)],
    rtol: f32,
    atol: f32,
    opts: &CpuOptions,
) -> f32 {
    let want = dnnc_runtime::run(g, inputs).expect("interpreter");
    let mut exe = compile_cpu(g, opts).unwrap_or_else(|e| panic!("compile {}: {e}", g.name));
    exe.set_arena_fill(Some(0xFF));
    let got = exe.run(inputs).expect("cpu run");
    assert_eq!(got.len(), want.len());
    let mut max = 0.0f32;
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        max = max.max(assert_close(
            &format!("{} output {i}", g.name),
            a,
            b,
            rtol,
            atol,
        ));
    }
    max
}

/// [`check_with`] at rtol 1e-4, atol 1e-5 and default options.
pub fn check(g: &Graph, inputs: &[(String, Tensor)]) -> f32 {
    check_with(g, inputs, 1e-4, 1e-5, &CpuOptions::default())
}

/// Every model folder under `../shared/models` (sorted), or `None` after
/// printing why the calling test is skipped.
#[allow(dead_code)]
pub fn shared_models() -> Option<Vec<PathBuf>> {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = [
        base.join("../../shared/models"),
        base.join("../shared/models"),
    ]
    .into_iter()
    .find(|d| d.is_dir());
    let Some(dir) = dir else {
        println!("SKIPPED: ../shared/models not found");
        return None;
    };
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    v.sort();
    Some(v)
}

/// Parses a graph body (statements without the `graph t { }` wrapper).
#[allow(dead_code)]
pub fn parse(body: &str) -> Graph {
    let src = format!("graph t {{\n{body}\n}}\n");
    dnnc_ir::text::parse(&src, "t.dnn").unwrap_or_else(|e| panic!("{e:?}\n{src}"))
}

/// The bit patterns of every output element, for bitwise comparisons
/// (i64 and bool elements as their values).
#[allow(dead_code)]
pub fn bits(ts: &[Tensor]) -> Vec<u32> {
    ts.iter()
        .flat_map(|t| match t {
            Tensor::F32(a) => a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            Tensor::I64(a) => a.iter().map(|&x| x as u32).collect(),
            Tensor::Bool(a) => a.iter().map(|&x| x as u32).collect(),
        })
        .collect()
}

/// One random-test convolution: its geometry and the graph text around it.
pub struct ConvCase {
    /// Images, input channels, input height and width.
    pub nchw: [usize; 4],
    /// Output channels.
    pub m: usize,
    /// Groups.
    pub g: usize,
    /// Kernel height and width.
    pub k: [usize; 2],
    /// Strides.
    pub s: [usize; 2],
    /// Dilations.
    pub d: [usize; 2],
    /// Pads: top, left, bottom, right.
    pub pads: [usize; 4],
    /// With a bias operand.
    pub bias: bool,
    /// Seeds the weight (`seed`) and bias (`seed + 1000`) initialisers.
    pub seed: usize,
}

/// The fused epilogues the random conv tests draw from (`%c` the conv,
/// `%r` a residual operand, `%y` the result; empty: none).
pub const CONV_EPILOGUES: [&str; 4] = [
    "",
    "%y = Relu(%c)",
    "%y = Add(%c, %r)",
    "%s = Sigmoid(%c)\n%y = Mul(%s, %c)",
];

impl ConvCase {
    /// A case with the given channels `[c, m]`, groups, kernel, strides
    /// and dilations, drawing from `r` (in this order) its pads (0-2
    /// each), input height and width (the dilated kernel plus 0-8), batch
    /// (1-2) and whether it has a bias; `seed` seeds its weights.
    pub fn draw(
        r: &mut Rng,
        [c, m]: [usize; 2],
        g: usize,
        (k, s, d): ([usize; 2], [usize; 2], [usize; 2]),
        seed: usize,
    ) -> ConvCase {
        let pads: Vec<usize> = (0..4).map(|_| r.below(3)).collect();
        let (h, w) = (
            (k[0] - 1) * d[0] + 1 + r.below(9),
            (k[1] - 1) * d[1] + 1 + r.below(9),
        );
        let n = 1 + r.below(2);
        let bias = r.below(2) == 0;
        ConvCase {
            nchw: [n, c, h, w],
            m,
            g,
            k,
            s,
            d,
            pads: [pads[0], pads[1], pads[2], pads[3]],
            bias,
            seed,
        }
    }

    /// Output height and width.
    pub fn out_hw(&self) -> (usize, usize) {
        let [_, _, h, w] = self.nchw;
        let [kh, kw] = self.k;
        let [dh, dw] = self.d;
        (
            (h + self.pads[0] + self.pads[2] - (kh - 1) * dh - 1) / self.s[0] + 1,
            (w + self.pads[1] + self.pads[3] - (kw - 1) * dw - 1) / self.s[1] + 1,
        )
    }

    /// Seeded data for `%x`, and for `%r` when `epi` reads it (uniform in
    /// `[-1, 1)`, drawn from `r` in that order).
    pub fn inputs(&self, r: &mut Rng, epi: &str) -> Vec<(String, Tensor)> {
        let [n, c, h, w] = self.nchw;
        let mut ins = vec![(
            "x".to_string(),
            rand_f32(&[n, c, h, w], r.next_u64(), -1.0, 1.0),
        )];
        if epi.contains("%r") {
            let (oh, ow) = self.out_hw();
            ins.push((
                "r".to_string(),
                rand_f32(&[n, self.m, oh, ow], r.next_u64(), -1.0, 1.0),
            ));
        }
        ins
    }

    /// Graph-body lines: input `%x`, weight `%w`, the bias `%b` if any,
    /// input `%r` of the result's shape when `epi` reads it, and the conv
    /// as `%c`.
    pub fn body(&self, epi: &str) -> String {
        let [n, c, h, w] = self.nchw;
        let (m, g, seed) = (self.m, self.g, self.seed);
        let [kh, kw] = self.k;
        let mut body = format!(
            "input %x: f32[{n},{c},{h},{w}]\nparam %w: f32[{m},{},{kh},{kw}] = he(seed={seed})\n",
            c / g
        );
        if self.bias {
            body += &format!(
                "param %b: f32[{m}] = uniform(low=-1, high=1, seed={})\n",
                seed + 1000
            );
        }
        if epi.contains("%r") {
            let (oh, ow) = self.out_hw();
            body += &format!("input %r: f32[{n},{m},{oh},{ow}]\n");
        }
        let p = self.pads;
        body += &format!(
            "%c = Conv2d(%x, %w{}) {{strides=[{},{}], pads=[{},{},{},{}], dilations=[{},{}], group={g}}}\n",
            if self.bias { ", %b" } else { "" },
            self.s[0],
            self.s[1],
            p[0],
            p[1],
            p[2],
            p[3],
            self.d[0],
            self.d[1]
        );
        body
    }
}

/// Runs single-input graph `g` on a random input (`seed`, in [-1, 1])
/// against the interpreter (rtol 1e-4, atol 1e-5), then checks two
/// threads give bitwise one thread's result.
#[allow(dead_code)]
pub fn check_one_input_and_threads(g: &Graph, seed: u64, opts: &CpuOptions) {
    let x = g.inputs()[0];
    let ins = vec![(
        g.value(x).name.clone(),
        rand_f32(&g.value(x).ty.shape, seed, -1.0, 1.0),
    )];
    check_with(g, &ins, 1e-4, 1e-5, opts);
    let mut exe = compile_cpu(g, opts).expect("compile");
    let one = bits(&exe.run(&ins).expect("run"));
    exe.set_threads(2).expect("threads");
    assert_eq!(bits(&exe.run(&ins).expect("run")), one, "2 threads vs 1");
}

/// Uniform random values in [-2, 2) for every input of `g` (input `i`
/// from seed `seed + i`).
#[allow(dead_code)]
pub fn random_inputs(g: &Graph, seed: u64) -> Vec<(String, Tensor)> {
    g.inputs()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let val = g.value(v);
            (
                val.name.clone(),
                rand_f32(&val.ty.shape, seed + i as u64, -2.0, 2.0),
            )
        })
        .collect()
}

/// Compiles the graph `body` with `opts`, checks it against the
/// interpreter on [`random_inputs`] (rtol 1e-4, atol 1e-5) and at 2
/// threads bitwise against 1: the kernel (step) labels, and the outputs'
/// bits in order.
#[allow(dead_code)]
pub fn checked_steps(body: &str, opts: &CpuOptions, seed: u64) -> (Vec<String>, Vec<u32>) {
    let g = parse(body);
    let ins = random_inputs(&g, seed);
    check_with(&g, &ins, 1e-4, 1e-5, opts);
    let mut exe = compile_cpu(&g, opts).expect("compile");
    let one = bits(&exe.run(&ins).expect("run"));
    exe.set_threads(2).expect("threads");
    let two = bits(&exe.run(&ins).expect("run"));
    assert_eq!(one, two, "2 threads differ from 1");
    (exe.steps().iter().map(|s| s.op.clone()).collect(), one)
}
