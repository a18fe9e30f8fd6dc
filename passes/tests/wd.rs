//! Work-Depth analysis tests on graphs built through the Graph API.

use dnnc_ir::op::{Binary, Conv2d, Gemm, Pool2d, ReduceKind, Unary};
use dnnc_ir::{Graph, Init, Op, OpClass, TensorType, ValueId};
use dnnc_passes::wd::{analyze, render_json, render_table, ConvShape, Cost};

/// Small helper over [`Graph`] that names parameters after their layer.
struct B {
    g: Graph,
    n: usize,
}

impl B {
    fn new(name: &str) -> B {
        B {
            g: Graph::new(name),
            n: 0,
        }
    }

    fn input(&mut self, name: &str, shape: &[usize]) -> ValueId {
        self.g
            .add_input(name, TensorType::f32(shape.to_vec()))
            .unwrap()
    }

    fn param(&mut self, name: &str, shape: &[usize]) -> ValueId {
        self.g
            .add_param(name, TensorType::f32(shape.to_vec()), Init::Zeros)
            .unwrap()
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.n += 1;
        format!("{prefix}{}", self.n)
    }

    #[allow(clippy::too_many_arguments)]
    fn conv(
        &mut self,
        name: &str,
        x: ValueId,
        cout: usize,
        k: [usize; 2],
        stride: usize,
        pad: usize,
        group: usize,
        bias: bool,
    ) -> ValueId {
        let cin = self.g.value(x).ty.shape[1];
        let w = self.param(&format!("{name}.w"), &[cout, cin / group, k[0], k[1]]);
        let mut ins = vec![x, w];
        if bias {
            ins.push(self.param(&format!("{name}.b"), &[cout]));
        }
        let op = Op::Conv2d(Conv2d {
            strides: [stride, stride],
            pads: [pad; 4],
            group,
            ..Conv2d::default()
        });
        self.g.add(op, &ins, name).unwrap()
    }

    fn un(&mut self, name: &str, u: Unary, x: ValueId) -> ValueId {
        self.g.add(Op::Unary(u), &[x], name).unwrap()
    }

    fn relu(&mut self, x: ValueId) -> ValueId {
        let n = self.fresh("relu");
        self.un(&n, Unary::Relu, x)
    }

    fn pool(
        &mut self,
        name: &str,
        x: ValueId,
        max: bool,
        k: usize,
        s: usize,
        pad: usize,
    ) -> ValueId {
        let p = Pool2d {
            kernel: [k, k],
            strides: [s, s],
            pads: [pad; 4],
            dilations: [1, 1],
            ceil_mode: false,
            count_include_pad: false,
            data: dnnc_ir::op::DataLayout::Nchw,
        };
        let op = if max {
            Op::MaxPool(p)
        } else {
            Op::AveragePool(p)
        };
        self.g.add(op, &[x], name).unwrap()
    }

    fn fc(&mut self, name: &str, x: ValueId, out: usize) -> ValueId {
        let k = self.g.value(x).ty.shape[1];
        let w = self.param(&format!("{name}.w"), &[out, k]);
        let b = self.param(&format!("{name}.b"), &[out]);
        let op = Op::Gemm(Gemm {
            trans_b: true,
            ..Gemm::default()
        });
        self.g.add(op, &[x, w, b], name).unwrap()
    }

    fn bn(&mut self, x: ValueId) -> ValueId {
        let c = self.g.value(x).ty.shape[1];
        let name = self.fresh("bn");
        let ps: Vec<ValueId> = ["scale", "bias", "mean", "var"]
            .iter()
            .map(|p| self.param(&format!("{name}.{p}"), &[c]))
            .collect();
        let op = Op::BatchNormalization { epsilon: 1e-5 };
        self.g
            .add(op, &[x, ps[0], ps[1], ps[2], ps[3]], &name)
            .unwrap()
    }

    fn add(&mut self, a: ValueId, b: ValueId) -> ValueId {
        let n = self.fresh("add");
        self.g.add(Op::Binary(Binary::Add), &[a, b], &n).unwrap()
    }

    fn finish(mut self, out: ValueId) -> Graph {
        self.g.set_outputs(vec![out]);
        dnnc_ir::verify(&self.g).unwrap();
        self.g
    }
}

/// LeNet-5 as PyTorch exports it to ONNX.
fn lenet5() -> Graph {
    let mut b = B::new("lenet5");
    let x = b.input("input", &[1, 1, 32, 32]);
    let c1 = b.conv("conv1", x, 6, [5, 5], 1, 0, 1, true);
    let r1 = b.un("relu1", Unary::Relu, c1);
    let p1 = b.pool("pool1", r1, true, 2, 2, 0);
    let c2 = b.conv("conv2", p1, 16, [5, 5], 1, 0, 1, true);
    let r2 = b.un("relu2", Unary::Relu, c2);
    let p2 = b.pool("pool2", r2, true, 2, 2, 0);
    let f = b.g.add(Op::Flatten { axis: 1 }, &[p2], "flatten").unwrap();
    let f1 = b.fc("fc1", f, 120);
    let r3 = b.un("relu3", Unary::Relu, f1);
    let f2 = b.fc("fc2", r3, 84);
    let r4 = b.un("relu4", Unary::Relu, f2);
    let f3 = b.fc("fc3", r4, 10);
    b.finish(f3)
}

fn wd(a: &dnnc_passes::Analysis, name: &str) -> (u64, u64) {
    a.node(name)
        .unwrap_or_else(|| panic!("no node {name}"))
        .cost()
        .pair()
}

#[test]
fn lenet5_figures() {
    let a = analyze(&lenet5());
    assert_eq!(a.contraction_work(), 416_520);
    assert_eq!(wd(&a, "conv1"), (117_600, 5)); // 6*28*28 * 25, ceil(log2 25)
    assert_eq!(wd(&a, "conv2"), (240_000, 8)); // 16*10*10 * 150, ceil(log2 150)
    assert_eq!(wd(&a, "fc1"), (48_000, 9));
    assert_eq!(wd(&a, "fc2"), (10_080, 7));
    assert_eq!(wd(&a, "fc3"), (840, 7));
    // Max pools: 3 comparisons per output, depth ceil(log2 4) = 2.
    assert_eq!(wd(&a, "pool1"), (6 * 14 * 14 * 3, 2));
    assert_eq!(wd(&a, "pool2"), (16 * 5 * 5 * 3, 2));
    assert_eq!(wd(&a, "relu1"), (4_704, 1));
    assert_eq!(wd(&a, "flatten"), (0, 0));
    // 5+1+2 + 8+1+2 + 0 + 9+1 + 7+1 + 7
    assert_eq!(a.depth, 44);
    assert_eq!(a.work, 416_520 + 4_704 + 3_528 + 1_600 + 1_200 + 120 + 84);
    assert_eq!(a.work, 427_756);
    assert!((a.parallelism() - 427_756.0 / 44.0).abs() < 1e-9);
    // A chain: every computational node is critical, sources are not listed.
    assert_eq!(a.nodes.len(), 12);
    assert!(a.nodes.iter().all(|n| n.critical));
    assert_eq!(a.work_of(OpClass::Reduction), 3_528 + 1_200);
    // LeNet's convs are 5x5, stride 1: every algorithm applies.
    let c1 = a.node("conv1").unwrap().conv.as_ref().unwrap();
    assert!(c1.all().iter().all(|(_, alg)| alg.cost.is_some()));
    assert_eq!(c1.direct.work_depth(), Some((117_600, 5)));
    assert_eq!(c1.im2col.work_depth(), Some((117_600, 5)));
}

#[test]
fn lenet5_table_snapshot() {
    let a = analyze(&lenet5());
    insta::assert_snapshot!("lenet5_table", render_table(&a, 4));
}

#[test]
fn lenet5_json_has_totals_and_brent() {
    let a = analyze(&lenet5());
    let v: serde_json::Value = serde_json::from_str(&render_json(&a, 4)).unwrap();
    assert_eq!(v["work"], 427_756);
    assert_eq!(v["depth"], 44);
    assert_eq!(v["contraction_work"], 416_520);
    assert_eq!(v["brent"]["p"], 4);
    assert_eq!(v["brent"]["lower"], 106_939.0);
    assert_eq!(v["brent"]["upper"], 106_983.0);
    assert_eq!(v["nodes"][0]["name"], "conv1");
    assert_eq!(v["nodes"][0]["class"], "contraction");
    assert_eq!(v["nodes"][0]["conv"]["direct"]["cost"]["work"], 117_600);
    assert_eq!(v["nodes"][1]["conv"], serde_json::Value::Null);
    // Deterministic.
    assert_eq!(render_json(&a, 4), render_json(&analyze(&lenet5()), 4));
}

#[test]
fn brent_bounds() {
    let a = analyze(&lenet5());
    let (w, d) = (427_756.0, 44.0);
    assert_eq!(a.brent(1), (w, w + d));
    assert_eq!(a.brent(4), (w / 4.0, w / 4.0 + d));
    // Far more processors than parallelism: the depth dominates the lower bound.
    assert_eq!(a.brent(1 << 20), (d, w / (1 << 20) as f64 + d));
    assert_eq!(a.brent(0), a.brent(1));
    for p in [1, 2, 3, 7, 64, 100_000] {
        let (lo, hi) = a.brent(p);
        assert!(lo <= hi && lo >= d && lo >= w / p as f64);
    }
}

/// x -> {long: relu, relu, relu ; short: conv 3x3} -> add.
#[test]
fn diamond_depth_is_max_of_branches() {
    let mut b = B::new("diamond");
    let x = b.input("x", &[1, 4, 8, 8]);
    // Branch A: a 3x3 conv, depth ceil(log2 36) = 6.
    let c = b.conv("conv", x, 4, [3, 3], 1, 1, 1, false);
    // Branch B: three elementwise ops, depth 3.
    let mut y = x;
    for _ in 0..3 {
        y = b.relu(y);
    }
    let s = b.add(c, y);
    let g = b.finish(s);
    let a = analyze(&g);
    assert_eq!(a.depth, 6 + 1, "max(6, 3) + add, not 6 + 3 + 1");
    assert_eq!(a.work, 4 * 64 * 36 + 3 * 256 + 256);
    assert_eq!(a.critical_path(), vec!["conv", "add4"]);

    // Make the elementwise branch the longer one: 7 relus (7 > 6).
    let mut b = B::new("diamond2");
    let x = b.input("x", &[1, 4, 8, 8]);
    let c = b.conv("conv", x, 4, [3, 3], 1, 1, 1, false);
    let mut y = x;
    for _ in 0..7 {
        y = b.relu(y);
    }
    let s = b.add(c, y);
    let a = analyze(&b.finish(s));
    assert_eq!(a.depth, 7 + 1);
    assert!(!a.node("conv").unwrap().critical);
    assert_eq!(a.critical_path().len(), 8);
}

/// 1x2x6x6 input, pad 1 (padded 8x8), 3x3 kernel, 3 outputs, 1x3x6x6 out.
fn small_conv(group: usize) -> ConvShape {
    let mut b = B::new("small");
    let x = b.input("x", &[1, 2 * group, 6, 6]);
    let c = b.conv("conv", x, 3 * group, [3, 3], 1, 1, group, true);
    let a = analyze(&b.finish(c));
    a.node("conv").unwrap().conv.as_ref().unwrap().shape.clone()
}

#[test]
fn conv_algorithms_hand_computed() {
    let s = small_conv(1);
    assert_eq!((s.h_out, s.w_out, s.padded()), (6, 6, (8, 8)));
    // Direct: 3*6*6 outputs * 2*9 MACs; depth ceil(log2 18) = 5.
    assert_eq!(s.direct(), Cost::new(1_944, 5));
    assert_eq!(s.im2col(), s.direct());
    // FFT: HW = 64, log2 = 6, c = 2.5:
    //   2.5*64*6 * (3*2 + 1*2 + 1*3) = 960 * 11 = 10,560, + 64*1*2*3 = 384.
    //   D = 2*6 + ceil(log2 2) = 13.
    assert_eq!(s.fft().unwrap(), Cost::new(10_944, 13));
    assert_eq!(s.fft_with(1.0).unwrap(), Cost::new(64 * 6 * 11 + 384, 13));
    // F(2x2,3x3): alpha 4, P = 3*3 = 9 tiles.
    //   filter 6 pairs * (9*4 + 16*3 = 84) = 504
    //   input  9*2 * 2*64 = 2,304
    //   gemm   16 * 3*2*9 = 864
    //   output 3*9 * (16*2 + 4*4 = 48) = 1,296           => 4,968
    //   D = max(2*2, 2*2) + 1 + 2*2 = 9.
    assert_eq!(s.winograd(2).unwrap(), Cost::new(4_968, 9));
    // F(4x4,3x3): alpha 6, P = 2*2 = 4 tiles.
    //   filter 6 * (9*6 + 36*3 = 162) = 972
    //   input  4*2 * 2*216 = 3,456
    //   gemm   36 * 6*4 = 864
    //   output 3*4 * (36*4 + 16*6 = 240) = 2,880          => 8,172
    //   D = max(2*2, 2*3) + 1 + 2*3 = 13.
    assert_eq!(s.winograd(4).unwrap(), Cost::new(8_172, 13));
}

#[test]
fn grouped_conv_is_per_group_times_g() {
    let one = small_conv(1);
    let two = small_conv(2);
    assert_eq!(two.cin_per_group(), 2);
    assert_eq!(two.direct(), Cost::new(2 * 1_944, 5));
    assert_eq!(two.fft().unwrap(), Cost::new(2 * 10_944, 13));
    assert_eq!(two.winograd(2).unwrap(), Cost::new(2 * 4_968, 9));
    assert_eq!(
        two.winograd(4).unwrap().work,
        2 * one.winograd(4).unwrap().work
    );
}

#[test]
fn resnet_layer_worked_example() {
    // The worked example of docs/cost-model.md: 3x3, 64->64, 56x56, pad 1.
    let mut b = B::new("layer");
    let x = b.input("x", &[1, 64, 56, 56]);
    let c = b.conv("conv", x, 64, [3, 3], 1, 1, 1, false);
    let a = analyze(&b.finish(c));
    let algos = a.node("conv").unwrap().conv.clone().unwrap();
    assert_eq!(algos.direct.work_depth(), Some((115_605_504, 10)));
    assert_eq!(algos.winograd2.work_depth(), Some((60_555_264, 14)));
    assert_eq!(algos.winograd4.work_depth(), Some((37_994_496, 18)));
    assert_eq!(algos.fft.work_depth(), Some((429_974_903, 30)));
    assert_eq!(algos.least_work().0, "wino4");
    // The row quoted in docs/cost-model.md.
    let table = render_table(&a, 8);
    assert!(table.contains(
        "  conv  Conv2d  [1,64,56,56]  115,605,504  10  11,560,550.4  *\n        direct 115,605,504/10  im2col 115,605,504/10  fft 429,974,903/30  wino2 60,555,264/14  wino4 37,994,496/18  least W: wino4\n"
    ), "{table}");
    assert!(table.starts_with("W-D analysis of `layer`: 1 node (1 conv), p = 8\n"));
}

#[test]
fn not_applicable_cases() {
    let mut b = B::new("na");
    let x = b.input("x", &[1, 4, 16, 16]);
    b.conv("stride2", x, 8, [3, 3], 2, 1, 1, false);
    b.conv("k5", x, 8, [5, 5], 1, 2, 1, false);
    b.conv("k1x3", x, 8, [1, 3], 1, 0, 1, false);
    let w = b.param("dil.w", &[8, 4, 3, 3]);
    let op = Op::Conv2d(Conv2d {
        dilations: [2, 2],
        ..Conv2d::default()
    });
    b.g.add(op, &[x, w], "dil").unwrap();
    let a = analyze(&b.g);
    let algos = |n: &str| a.node(n).unwrap().conv.clone().unwrap();

    let s = algos("stride2");
    assert_eq!(s.direct.work_depth(), Some((8 * 8 * 8 * 36, 6)));
    for alg in [&s.fft, &s.winograd2, &s.winograd4] {
        assert_eq!(alg.cost, None);
        assert_eq!(alg.reason.as_deref(), Some("stride 2x2"));
    }
    // 5x5 is square, stride 1, dilation 1: Winograd F(2x2,5x5) applies.
    let k = algos("k5");
    assert!(k.winograd2.cost.is_some() && k.winograd4.cost.is_some() && k.fft.cost.is_some());
    // alpha = 6, P = 64 tiles, Ci = 4, Co = 8:
    let wg = 8 * 4 * (25 * 6 + 36 * 5);
    let wd_ = 64 * 4 * 2 * 216;
    let gemm = 36 * 8 * 4 * 64;
    let wy = 8 * 64 * (36 * 2 + 4 * 6);
    assert_eq!(
        k.winograd2.work_depth(),
        Some((wg + wd_ + gemm + wy, 6 + 2 + 6))
    );
    let r = algos("k1x3");
    assert_eq!(
        r.winograd2.reason.as_deref(),
        Some("kernel 1x3 is not square")
    );
    assert!(r.fft.cost.is_some());
    let d = algos("dil");
    assert_eq!(d.fft.reason.as_deref(), Some("dilation 2x2"));
    assert_eq!(d.winograd4.reason.as_deref(), Some("dilation 2x2"));
    let table = render_table(&a, 2);
    assert!(table.contains("(n/a: stride 2x2)"), "{table}");
}

#[test]
fn reductions_softmax_and_movement() {
    let mut b = B::new("misc");
    let x = b.input("x", &[2, 3, 4, 4]);
    let ap = b.pool("avg", x, false, 3, 1, 1); // padded: full 3x3 window
    let gap = b.g.add(Op::GlobalAveragePool, &[ap], "gap").unwrap();
    let gmp = b.g.add(Op::GlobalMaxPool, &[x], "gmp").unwrap();
    let cat = b.g.add(Op::Concat { axis: 1 }, &[gap, gmp], "cat").unwrap();
    let fl = b.g.add(Op::Flatten { axis: 1 }, &[cat], "flat").unwrap();
    let sm = b.g.add(Op::Softmax { axis: -1 }, &[fl], "softmax").unwrap();
    let lsm =
        b.g.add(Op::LogSoftmax { axis: 1 }, &[fl], "logsoftmax")
            .unwrap();
    let red = |kind| Op::Reduce {
        kind,
        axes: vec![2, 3],
        keepdims: false,
    };
    let rs = b.g.add(red(ReduceKind::Sum), &[x], "rsum").unwrap();
    let rm = b.g.add(red(ReduceKind::Mean), &[x], "rmean").unwrap();
    let rx = b.g.add(red(ReduceKind::Max), &[x], "rmax").unwrap();
    let tr =
        b.g.add(Op::Transpose { perm: vec![1, 0] }, &[rx], "tr")
            .unwrap();
    let lrn =
        b.g.add(
            Op::Lrn(dnnc_ir::op::Lrn {
                size: 5,
                alpha: 1e-4,
                beta: 0.75,
                bias: 1.0,
            }),
            &[x],
            "lrn",
        )
        .unwrap();
    let split =
        b.g.add_node(
            Op::Split {
                axis: 1,
                split: vec![1, 2],
            },
            &[x],
            &["s0", "s1"],
        )
        .unwrap();
    let a = analyze(&b.g);
    let _ = (sm, lsm, rs, rm, tr, lrn, split);
    // AveragePool 3x3 pad 1 stride 1: 96 outputs, 8 adds + 1 div each.
    assert_eq!(wd(&a, "avg"), (96 * 8 + 96, 4 + 1));
    // GlobalAveragePool over 16: 6 outputs * 15 adds + 6 divs.
    assert_eq!(wd(&a, "gap"), (6 * 15 + 6, 4 + 1));
    assert_eq!(wd(&a, "gmp"), (6 * 15, 4));
    assert_eq!(wd(&a, "cat"), (12, 1));
    assert_eq!(wd(&a, "flat"), (0, 0));
    // Softmax over 2 rows of 6: 2*(2*5) + 3*12; D = 2*3 + 3.
    assert_eq!(wd(&a, "softmax"), (20 + 36, 9));
    assert_eq!(wd(&a, "logsoftmax"), (20 + 36 + 2, 10));
    assert_eq!(wd(&a, "rsum"), (6 * 15, 4));
    assert_eq!(wd(&a, "rmean"), (6 * 15 + 6, 5));
    assert_eq!(wd(&a, "rmax"), (6 * 15, 4));
    assert_eq!(wd(&a, "tr"), (6, 1));
    assert_eq!(wd(&a, "lrn"), (96 * 4 + 5 * 96, 3 + 5));
    // Split copies every output, not just the first.
    assert_eq!(wd(&a, "s0"), (96, 1));
    assert_eq!(a.node("s0").unwrap().shape, vec![2, 1, 4, 4]);
    // The longest chain: avg(5) gap(5) cat(1) flat(0) logsoftmax(10).
    assert_eq!(a.depth, 21);
}

#[test]
fn matmul_counts_batches() {
    let mut b = B::new("mm");
    let x = b.input("x", &[5, 2, 3]);
    let w = b.param("w", &[3, 4]);
    let y = b.g.add(Op::MatMul, &[x, w], "y").unwrap();
    let v = b.input("v", &[3]);
    let z = b.g.add(Op::MatMul, &[v, w], "z").unwrap();
    let _ = (y, z);
    let a = analyze(&b.g);
    assert_eq!(wd(&a, "y"), (5 * 2 * 4 * 3, 2));
    assert_eq!(wd(&a, "z"), (4 * 3, 2));
}

fn bottleneck_or_basic(
    b: &mut B,
    x: ValueId,
    mid: usize,
    out: usize,
    stride: usize,
    bottleneck: bool,
) -> ValueId {
    let cin = b.g.value(x).ty.shape[1];
    let mut y = x;
    let convs: Vec<(usize, usize, usize, usize)> = if bottleneck {
        vec![(mid, 1, 1, 0), (mid, 3, stride, 1), (out, 1, 1, 0)]
    } else {
        vec![(out, 3, stride, 1), (out, 3, 1, 1)]
    };
    let last = convs.len() - 1;
    for (i, &(c, k, s, p)) in convs.iter().enumerate() {
        let n = b.fresh("conv");
        y = b.conv(&n, y, c, [k, k], s, p, 1, false);
        y = b.bn(y);
        if i < last {
            y = b.relu(y);
        }
    }
    let short = if stride != 1 || cin != out {
        let n = b.fresh("down");
        let d = b.conv(&n, x, out, [1, 1], stride, 0, 1, false);
        b.bn(d)
    } else {
        x
    };
    let s = b.add(y, short);
    b.relu(s)
}

fn resnet(blocks: [usize; 4], bottleneck: bool) -> Graph {
    let mut b = B::new(if bottleneck { "resnet50" } else { "resnet18" });
    let x = b.input("x", &[1, 3, 224, 224]);
    let mut y = b.conv("conv1", x, 64, [7, 7], 2, 3, 1, false);
    y = b.bn(y);
    y = b.relu(y);
    y = b.pool("maxpool", y, true, 3, 2, 1);
    let expand = if bottleneck { 4 } else { 1 };
    for (stage, &n) in blocks.iter().enumerate() {
        let mid = 64 << stage;
        for i in 0..n {
            let stride = if stage > 0 && i == 0 { 2 } else { 1 };
            y = bottleneck_or_basic(&mut b, y, mid, mid * expand, stride, bottleneck);
        }
    }
    y = b.g.add(Op::GlobalAveragePool, &[y], "gap").unwrap();
    y = b.g.add(Op::Flatten { axis: 1 }, &[y], "flatten").unwrap();
    y = b.fc("fc", y, 1000);
    b.finish(y)
}

#[test]
fn resnet18_macs() {
    let a = analyze(&resnet([2, 2, 2, 2], false));
    assert_eq!(a.contraction_work(), 1_814_073_344);
    assert!(a.depth > 0 && a.work > a.contraction_work());
}

#[test]
fn resnet50_is_fast() {
    let g = resnet([3, 4, 6, 3], true);
    let t = std::time::Instant::now();
    let a = analyze(&g);
    let took = t.elapsed();
    let _ = render_table(&a, 16);
    assert!(g.node_count() > 400);
    assert_eq!(a.contraction_work(), 4_089_184_256);
    assert!(took.as_millis() < 500, "analyze took {took:?}");
}
