//! Speed checks on real CNN shapes. Ignored by default (they are slow in
//! debug builds); run with
//! `cargo test --release -p dnnc-runtime --test perf -- --ignored --nocapture`.
//! They assert only correctness (shapes, finite softmax outputs); the
//! printed timings are informal — performance claims come from benchmarks.

mod common;
use common::*;
use dnnc_ir::op::{Binary, Conv2d, Gemm, Pool2d, Unary};
use dnnc_ir::{Graph, Init, Op, Tensor, TensorType, ValueId};
use dnnc_runtime::run;
use std::time::Instant;

/// Builds CNNs through the Graph API with seeded weights bound up front,
/// so timings measure execution rather than weight generation.
struct Net {
    g: Graph,
    n: usize,
}

impl Net {
    fn new(name: &str) -> (Net, ValueId) {
        let mut g = Graph::new(name);
        let x = g
            .add_input("image", TensorType::f32(vec![1, 3, 224, 224]))
            .unwrap();
        (Net { g, n: 0 }, x)
    }

    fn fresh(&mut self, p: &str) -> String {
        self.n += 1;
        format!("{p}{}", self.n)
    }

    fn param(&mut self, shape: Vec<usize>, init: Init) -> ValueId {
        let name = self.fresh("w");
        let v = self
            .g
            .add_param(&name, TensorType::f32(shape), init)
            .unwrap();
        let t = self.g.weight(v).unwrap().into_owned();
        self.g.weights.insert(name, t);
        v
    }

    fn shape(&self, v: ValueId) -> Vec<usize> {
        self.g.value(v).ty.shape.clone()
    }

    /// conv (no bias) + batch norm + optional activation.
    fn conv_bn(
        &mut self,
        x: ValueId,
        cout: usize,
        k: usize,
        s: usize,
        group: usize,
        act: Option<Unary>,
    ) -> ValueId {
        let cin = self.shape(x)[1];
        let seed = self.n as u64;
        let w = self.param(vec![cout, cin / group, k, k], Init::He { seed });
        let p = k / 2;
        let op = Op::Conv2d(Conv2d {
            strides: [s, s],
            pads: [p; 4],
            dilations: [1, 1],
            group,
            ..Conv2d::default()
        });
        let name = self.fresh("conv");
        let y = self.g.add(op, &[x, w], &name).unwrap();
        let scale = self.param(
            vec![cout],
            Init::Uniform {
                low: 0.5,
                high: 1.0,
                seed,
            },
        );
        let bias = self.param(
            vec![cout],
            Init::Uniform {
                low: -0.1,
                high: 0.1,
                seed,
            },
        );
        let mean = self.param(
            vec![cout],
            Init::Uniform {
                low: -0.1,
                high: 0.1,
                seed: seed + 1,
            },
        );
        let var = self.param(
            vec![cout],
            Init::Uniform {
                low: 0.5,
                high: 1.5,
                seed,
            },
        );
        let name = self.fresh("bn");
        let y = self
            .g
            .add(
                Op::BatchNormalization { epsilon: 1e-5 },
                &[y, scale, bias, mean, var],
                &name,
            )
            .unwrap();
        match act {
            Some(u) => self.unary(y, u),
            None => y,
        }
    }

    fn unary(&mut self, x: ValueId, u: Unary) -> ValueId {
        let name = self.fresh("act");
        self.g.add(Op::Unary(u), &[x], &name).unwrap()
    }

    fn add(&mut self, a: ValueId, b: ValueId) -> ValueId {
        let name = self.fresh("add");
        self.g.add(Op::Binary(Binary::Add), &[a, b], &name).unwrap()
    }

    /// Global pool, flatten, fully connected 1000, softmax.
    fn head(mut self, x: ValueId) -> Graph {
        let c = self.shape(x)[1];
        let p = self.g.add(Op::GlobalAveragePool, &[x], "gap").unwrap();
        let f = self.g.add(Op::Flatten { axis: 1 }, &[p], "flat").unwrap();
        let w = self.param(vec![1000, c], Init::Xavier { seed: 9 });
        let b = self.param(vec![1000], Init::Zeros);
        let gemm = Op::Gemm(Gemm {
            trans_b: true,
            ..Gemm::default()
        });
        let y = self.g.add(gemm, &[f, w, b], "fc").unwrap();
        let s = self.g.add(Op::Softmax { axis: 1 }, &[y], "prob").unwrap();
        self.g.set_outputs(vec![s]);
        self.g
    }
}

fn resnet(bottleneck: bool, blocks: [usize; 4]) -> Graph {
    let (mut n, x) = Net::new(if bottleneck { "resnet50" } else { "resnet18" });
    let relu = Some(Unary::Relu);
    let y = n.conv_bn(x, 64, 7, 2, 1, relu);
    let pool = Op::MaxPool(Pool2d {
        kernel: [3, 3],
        strides: [2, 2],
        pads: [1; 4],
        dilations: [1, 1],
        ceil_mode: false,
        count_include_pad: false,
        data: dnnc_ir::op::DataLayout::Nchw,
    });
    let mut y = n.g.add(pool, &[y], "pool").unwrap();
    let expansion = if bottleneck { 4 } else { 1 };
    for (stage, &count) in blocks.iter().enumerate() {
        let width = 64 << stage;
        for b in 0..count {
            let s = if stage > 0 && b == 0 { 2 } else { 1 };
            let cin = n.shape(y)[1];
            let out_c = width * expansion;
            let shortcut = if s != 1 || cin != out_c {
                n.conv_bn(y, out_c, 1, s, 1, None)
            } else {
                y
            };
            let z = if bottleneck {
                let z = n.conv_bn(y, width, 1, 1, 1, relu);
                let z = n.conv_bn(z, width, 3, s, 1, relu);
                n.conv_bn(z, out_c, 1, 1, 1, None)
            } else {
                let z = n.conv_bn(y, width, 3, s, 1, relu);
                n.conv_bn(z, width, 3, 1, 1, None)
            };
            let sum = n.add(z, shortcut);
            y = n.unary(sum, Unary::Relu);
        }
    }
    n.head(y)
}

fn mobilenet_v2() -> Graph {
    let (mut n, x) = Net::new("mobilenet_v2");
    let relu6 = Some(Unary::Clip { min: 0.0, max: 6.0 });
    let mut y = n.conv_bn(x, 32, 3, 2, 1, relu6);
    for (t, c, reps, s) in [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ] {
        for r in 0..reps {
            let stride = if r == 0 { s } else { 1 };
            let cin = n.shape(y)[1];
            let hidden = cin * t;
            let mut z = y;
            if t != 1 {
                z = n.conv_bn(z, hidden, 1, 1, 1, relu6);
            }
            z = n.conv_bn(z, hidden, 3, stride, hidden, relu6);
            z = n.conv_bn(z, c, 1, 1, 1, None);
            y = if stride == 1 && cin == c {
                n.add(z, y)
            } else {
                z
            };
        }
    }
    let y = n.conv_bn(y, 1280, 1, 1, 1, relu6);
    n.head(y)
}

fn image() -> Vec<(String, Tensor)> {
    let data: Vec<f32> = (0..3 * 224 * 224)
        .map(|k| ((k * 7919) % 255) as f32 / 255.0 - 0.5)
        .collect();
    vec![("image".to_string(), f(&[1, 3, 224, 224], &data))]
}

/// Runs `g` a few times; returns the best wall time in seconds.
fn time_model(g: &Graph, reps: usize) -> f64 {
    let feeds = image();
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        let out = run(g, &feeds).unwrap();
        best = best.min(t.elapsed().as_secs_f64());
        let p = out[0].as_f32().unwrap();
        assert_eq!(p.shape(), &[1, 1000]);
        let total: f32 = p.iter().sum();
        assert!(
            p.iter().all(|v| v.is_finite()) && (total - 1.0).abs() < 1e-3,
            "sum {total}"
        );
    }
    best
}

#[test]
#[ignore = "slow in debug builds; prints informal timings"]
fn conv_3x3_64ch_56x56_speed() {
    let op = Op::Conv2d(Conv2d {
        pads: [1; 4],
        ..Conv2d::default()
    });
    let x = iota(&[1, 64, 56, 56], 0.0);
    let w = f(&[64, 64, 3, 3], &vec![0.01; 64 * 64 * 9]);
    let mut g = Graph::new("conv");
    let xi = g.add_input("x", x.ty()).unwrap();
    let wc = g.add_constant("w", w).unwrap();
    let y = g.add(op, &[xi, wc], "y").unwrap();
    g.set_outputs(vec![y]);
    let feeds = [("x".to_string(), x)];
    let mut best = f64::INFINITY;
    for _ in 0..10 {
        let t = Instant::now();
        run(&g, &feeds).unwrap();
        best = best.min(t.elapsed().as_secs_f64());
    }
    let gflop = 2.0 * 64.0 * 64.0 * 9.0 * 56.0 * 56.0 / 1e9;
    println!(
        "conv 1x64x56x56 -> 64, 3x3: {:.2} ms ({:.1} GFLOP/s)",
        best * 1e3,
        gflop / best
    );
}

#[test]
#[ignore = "slow in debug builds; prints informal timings"]
fn resnet18_speed() {
    let g = resnet(false, [2, 2, 2, 2]);
    let t = time_model(&g, 3);
    println!("resnet-18 224x224: {:.3} s", t);
}

#[test]
#[ignore = "slow in debug builds; prints informal timings"]
fn resnet50_speed() {
    let g = resnet(true, [3, 4, 6, 3]);
    let t = time_model(&g, 2);
    println!("resnet-50 224x224: {:.3} s", t);
}

#[test]
#[ignore = "slow in debug builds; prints informal timings"]
fn mobilenet_v2_speed() {
    let g = mobilenet_v2();
    let t = time_model(&g, 3);
    println!("mobilenet-v2 224x224: {:.3} s", t);
}
