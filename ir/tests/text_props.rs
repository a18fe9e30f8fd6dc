//! Property tests: random graphs survive print -> parse -> print unchanged,
//! and `parse` never panics on random or mutated input.

use dnnc_ir::init::SplitMix64;
use dnnc_ir::op::{Binary, Conv2d, Gemm, PadMode, Pool2d, ReduceKind, Unary};
use dnnc_ir::text::{parse, print};
use dnnc_ir::{DType, Graph, Init, Op, Tensor, TensorType, ValueId};
use ndarray::ArrayD;
use proptest::prelude::*;

/// Float attribute values that stress printing: tiny, signed zero,
/// infinities, NaN, extremes, values without short decimal forms.
const ODD: &[f32] = &[
    1e-7,
    -0.0,
    0.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    0.1,
    1.0 / 3.0,
    1e30,
    -1e-30,
    f32::MIN_POSITIVE,
    1e-45,
    f32::MAX,
    -2.5,
];

/// Name parts: most need quoting or exercise the bare-name rules.
const PREFIXES: &[&str] = &[
    "v",
    "layer1.conv/",
    "a b",
    "q\"",
    "ü",
    "onnx::Conv_",
    "x:",
    "-",
    "tab\t",
    "back\\slash",
    "#",
    "",
    "new\nline",
    "5:f32",
    "%",
];
const SUFFIXES: &[&str] = &["", "", ":", "::", ":f32", ":0", "\"", " "];

/// Builds a random but valid graph from a list of (step kind, seed) pairs.
struct Builder {
    g: Graph,
    rng: SplitMix64,
    count: usize,
    f32s: Vec<ValueId>,
}

impl Builder {
    fn below(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n.max(1) as u64) as usize
    }

    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    fn coin(&mut self) -> bool {
        self.rng.next_u64() & 1 == 1
    }

    fn odd(&mut self) -> f32 {
        if self.below(4) == 0 {
            f32::from_bits(self.rng.next_u64() as u32)
        } else {
            ODD[self.below(ODD.len())]
        }
    }

    fn finite(&mut self) -> f32 {
        let v = self.odd();
        if v.is_finite() {
            v
        } else {
            0.5
        }
    }

    fn name(&mut self) -> String {
        self.count += 1;
        let p = PREFIXES[self.below(PREFIXES.len())];
        let s = SUFFIXES[self.below(SUFFIXES.len())];
        let mut n = format!("{p}{}{s}", self.count);
        while self.g.value_by_name(&n).is_some() {
            n.push('_');
        }
        n
    }

    fn pick(&mut self) -> ValueId {
        let i = self.below(self.f32s.len());
        self.f32s[i]
    }

    fn pick_rank(&mut self, rank: usize) -> Option<ValueId> {
        let c: Vec<ValueId> = self
            .f32s
            .iter()
            .copied()
            .filter(|&v| self.g.value(v).ty.rank() == rank)
            .collect();
        (!c.is_empty()).then(|| c[self.below(c.len())])
    }

    fn shape(&self, v: ValueId) -> Vec<usize> {
        self.g.value(v).ty.shape.clone()
    }

    fn init(&mut self) -> Init {
        match self.below(8) {
            0 => Init::Zeros,
            1 => Init::Ones,
            2 => Init::Constant(self.odd()),
            3 => Init::Uniform {
                low: self.odd(),
                high: self.odd(),
                seed: self.rng.next_u64(),
            },
            4 => Init::Normal {
                mean: self.odd(),
                std: self.odd(),
                seed: self.rng.next_u64(),
            },
            5 => Init::Xavier {
                seed: self.rng.next_u64(),
            },
            6 => Init::He {
                seed: self.rng.next_u64() % 100,
            },
            _ => Init::External(if self.coin() {
                String::new() // replaced by the value's own name below
            } else {
                format!("weights/{}\"x\"", self.count)
            }),
        }
    }

    /// A param or constant of the given f32 shape.
    fn leaf(&mut self, shape: Vec<usize>) -> ValueId {
        let name = self.name();
        let ty = TensorType::f32(shape.clone());
        if self.coin() {
            let mut init = self.init();
            if init == Init::External(String::new()) {
                init = Init::External(name.clone());
            }
            self.g.add_param(&name, ty, init).unwrap()
        } else {
            let data: Vec<f32> = (0..ty.numel()).map(|_| self.odd()).collect();
            let t = Tensor::F32(ArrayD::from_shape_vec(shape, data).unwrap());
            self.g.add_constant(&name, t).unwrap()
        }
    }

    fn add(&mut self, op: Op, inputs: &[ValueId]) {
        let names: Vec<String> = (0..op.num_outputs()).map(|_| self.name()).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        if let Ok(outs) = self.g.add_node(op, inputs, &refs) {
            for v in outs {
                if self.g.value(v).ty.dtype == DType::F32 {
                    self.f32s.push(v);
                }
            }
        }
    }

    fn step(&mut self, kind: u8) {
        let x = self.pick();
        let s = self.shape(x);
        match kind % 16 {
            0 => {
                let u = match self.below(17) {
                    0 => Unary::Relu,
                    1 => Unary::LeakyRelu { alpha: self.odd() },
                    2 => Unary::Sigmoid,
                    3 => Unary::Tanh,
                    4 => {
                        let (a, b) = (self.odd(), self.odd());
                        Unary::Clip {
                            min: if a > b { b } else { a },
                            max: if a > b { a } else { b },
                        }
                    }
                    5 => Unary::HardSigmoid {
                        alpha: self.odd(),
                        beta: self.odd(),
                    },
                    6 => Unary::HardSwish,
                    7 => Unary::Elu { alpha: self.odd() },
                    8 => Unary::Softplus,
                    9 => Unary::Gelu {
                        tanh_approx: self.coin(),
                    },
                    10 => Unary::Sqrt,
                    11 => Unary::Exp,
                    12 => Unary::Log,
                    13 => Unary::Neg,
                    14 => Unary::Abs,
                    15 => Unary::Reciprocal,
                    _ => Unary::Erf,
                };
                self.add(Op::Unary(u), &[x]);
            }
            1 | 2 => {
                // Broadcasting against a leaf: a suffix of x's shape with
                // some dims set to 1.
                let keep = self.below(s.len() + 1);
                let mut bs: Vec<usize> = s[s.len() - keep..].to_vec();
                for d in bs.iter_mut() {
                    if self.coin() {
                        *d = 1;
                    }
                }
                let y = if kind % 16 == 2 { x } else { self.leaf(bs) };
                let b = [
                    Binary::Add,
                    Binary::Sub,
                    Binary::Mul,
                    Binary::Div,
                    Binary::Pow,
                    Binary::Max,
                    Binary::Min,
                ][self.below(7)];
                if self.coin() {
                    self.add(Op::Binary(b), &[x, y]);
                } else {
                    self.add(Op::Binary(b), &[y, x]);
                }
            }
            3 => {
                let Some(x) = self.pick_rank(4) else { return };
                let s = self.shape(x);
                let c = s[1];
                let group = if self.coin() || c == 0 { 1 } else { c };
                let m = group * self.range(1, 2);
                let k = self.range(1, 3);
                let conv = Conv2d {
                    strides: [self.range(1, 2), self.range(1, 2)],
                    pads: [self.below(2), self.below(2), self.below(2), self.below(2)],
                    dilations: [self.range(1, 2), 1],
                    group,
                    ..Conv2d::default()
                };
                let w = self.leaf(vec![m, c / group, k, k]);
                if self.coin() {
                    let b = self.leaf(vec![m]);
                    self.add(Op::Conv2d(conv), &[x, w, b]);
                } else {
                    self.add(Op::Conv2d(conv), &[x, w]);
                }
            }
            4 => {
                let Some(x) = self.pick_rank(4) else { return };
                let k = [self.range(1, 3), self.range(1, 3)];
                let p = Pool2d {
                    kernel: k,
                    strides: [self.range(1, 2), self.range(1, 2)],
                    pads: [self.below(k[0]), self.below(k[1]), self.below(k[0]), 0],
                    dilations: [1, 1],
                    ceil_mode: self.coin(),
                    count_include_pad: false,
                    data: dnnc_ir::op::DataLayout::Nchw,
                };
                let op = match self.below(4) {
                    0 => Op::MaxPool(p),
                    1 => Op::AveragePool(Pool2d {
                        count_include_pad: self.coin(),
                        ..p
                    }),
                    2 => Op::GlobalAveragePool,
                    _ => Op::GlobalMaxPool,
                };
                self.add(op, &[x]);
            }
            5 => {
                let rank2 = self.pick_rank(2);
                if let (Some(x), true) = (rank2, self.coin()) {
                    let s = self.shape(x);
                    let (trans_a, trans_b) = (self.coin(), self.coin());
                    let (m, k) = if trans_a { (s[1], s[0]) } else { (s[0], s[1]) };
                    let n = self.range(1, 4);
                    let b = self.leaf(if trans_b { vec![n, k] } else { vec![k, n] });
                    let gemm = Op::Gemm(Gemm {
                        alpha: self.odd(),
                        beta: self.odd(),
                        trans_a,
                        trans_b,
                    });
                    if self.coin() {
                        let cs = if self.coin() { vec![n] } else { vec![m, n] };
                        let c = self.leaf(cs);
                        self.add(gemm, &[x, b, c]);
                    } else {
                        self.add(gemm, &[x, b]);
                    }
                } else if let Some(&k) = s.last() {
                    let n = self.range(1, 4);
                    let w = self.leaf(vec![k, n]);
                    self.add(Op::MatMul, &[x, w]);
                }
            }
            6 => {
                if s.is_empty() {
                    return;
                }
                let axis =
                    self.below(s.len()) as i64 - if self.coin() { s.len() as i64 } else { 0 };
                let n = self.range(1, 3);
                self.add(Op::Concat { axis }, &vec![x; n]);
            }
            7 => {
                let Some(ax) = (0..s.len()).find(|&i| s[i] >= 2) else {
                    return;
                };
                let first = self.range(1, s[ax] - 1);
                let mut split = vec![first, s[ax] - first];
                if self.coin() {
                    split.push(0);
                }
                self.add(
                    Op::Split {
                        axis: ax as i64,
                        split,
                    },
                    &[x],
                );
            }
            8 => {
                let op = match self.below(3) {
                    0 => Op::Reshape { shape: vec![-1] },
                    1 => Op::Reshape { shape: vec![0, -1] },
                    _ => Op::Flatten {
                        axis: self.below(s.len() + 1) as i64,
                    },
                };
                self.add(op, &[x]);
            }
            9 => {
                let mut perm: Vec<usize> = (0..s.len()).collect();
                for i in (1..perm.len()).rev() {
                    let j = self.below(i + 1);
                    perm.swap(i, j);
                }
                self.add(Op::Transpose { perm }, &[x]);
            }
            10 => {
                if s.is_empty() {
                    return;
                }
                let axis = self.below(s.len()) as i64;
                let ends = [i64::MAX, i64::MIN, -1, 2, 0][self.below(5)];
                let op = Op::Slice {
                    starts: vec![[0, -1, 1, i64::MIN][self.below(4)]],
                    ends: vec![ends],
                    axes: vec![axis],
                    steps: vec![[1, -1, 2, -3][self.below(4)]],
                };
                self.add(op, &[x]);
            }
            11 => {
                let pads: Vec<i64> = (0..2 * s.len()).map(|_| self.below(3) as i64).collect();
                let mode = [PadMode::Constant, PadMode::Reflect, PadMode::Edge][self.below(3)];
                let value = self.odd();
                self.add(Op::Pad { pads, mode, value }, &[x]);
            }
            12 => {
                let r = s.len() as i64;
                let op = match self.below(8) {
                    0 => Op::Softmax {
                        axis: self.below(s.len().max(1)) as i64 - r,
                    },
                    1 => Op::LogSoftmax {
                        axis: self.below(s.len().max(1)) as i64,
                    },
                    2 => Op::Reduce {
                        kind: [ReduceKind::Mean, ReduceKind::Sum, ReduceKind::Max][self.below(3)],
                        axes: if self.coin() {
                            vec![]
                        } else {
                            vec![self.below(s.len().max(1)) as i64]
                        },
                        keepdims: self.coin(),
                    },
                    3 => Op::Unsqueeze {
                        axes: vec![self.below(s.len() + 1) as i64],
                    },
                    4 => Op::Squeeze { axes: vec![] },
                    5 => Op::Identity,
                    6 => Op::Dropout { ratio: self.odd() },
                    _ => {
                        let mut shape: Vec<i64> = s.iter().map(|&d| d as i64).collect();
                        shape.insert(0, self.range(1, 2) as i64);
                        Op::Expand { shape }
                    }
                };
                self.add(op, &[x]);
            }
            13 => {
                if s.len() >= 2 {
                    let c = s[1];
                    let ps: Vec<ValueId> = (0..4).map(|_| self.leaf(vec![c])).collect();
                    let op = if s.len() == 4 && self.coin() {
                        Op::Lrn(dnnc_ir::op::Lrn {
                            size: self.range(1, 5),
                            alpha: self.odd(),
                            beta: self.odd(),
                            bias: self.odd(),
                        })
                    } else {
                        Op::BatchNormalization {
                            epsilon: self.finite(),
                        }
                    };
                    let ins: Vec<ValueId> = if matches!(op, Op::Lrn(_)) {
                        vec![x]
                    } else {
                        std::iter::once(x).chain(ps).collect()
                    };
                    self.add(op, &ins);
                }
            }
            14 => {
                // Constants of other dtypes; Gather with i64 indices.
                let name = self.name();
                let n = self.below(4);
                if self.coin() {
                    let data: Vec<i64> = (0..n)
                        .map(|_| [0, -1, i64::MAX, i64::MIN, 7][self.below(5)])
                        .collect();
                    let t = Tensor::I64(ArrayD::from_shape_vec(vec![n], data).unwrap());
                    let idx = self.g.add_constant(&name, t).unwrap();
                    if !s.is_empty() {
                        self.add(Op::Gather { axis: 0 }, &[x, idx]);
                    }
                } else {
                    let data: Vec<bool> = (0..n).map(|_| self.coin()).collect();
                    let t = Tensor::Bool(ArrayD::from_shape_vec(vec![n], data).unwrap());
                    self.g.add_constant(&name, t).unwrap();
                }
            }
            _ => {
                let name = self.name();
                let shape: Vec<usize> = (0..self.below(5)).map(|_| self.range(1, 4)).collect();
                let v = self.g.add_input(&name, TensorType::f32(shape)).unwrap();
                self.f32s.push(v);
            }
        }
    }
}

fn random_graph(seed: u64, steps: &[(u8, u64)]) -> Graph {
    let names = ["g", "my-net", "", "net 2", "_x9", "graph"];
    let mut b = Builder {
        g: Graph::new(names[(seed % names.len() as u64) as usize]),
        rng: SplitMix64::new(seed),
        count: 0,
        f32s: vec![],
    };
    let name = b.name();
    let shape = vec![b.range(1, 2), b.range(1, 4), b.range(2, 6), b.range(2, 6)];
    let x = b.g.add_input(&name, TensorType::f32(shape)).unwrap();
    b.f32s.push(x);
    for &(kind, s) in steps {
        b.rng = SplitMix64::new(s);
        b.step(kind);
    }
    let mut outs = vec![*b.f32s.last().unwrap()];
    let mut r = SplitMix64::new(seed ^ 0x55);
    for _ in 0..(r.next_u64() % 3) {
        let v = b.f32s[(r.next_u64() % b.f32s.len() as u64) as usize];
        outs.push(v);
    }
    b.g.set_outputs(outs);
    b.g
}

/// A model touching every statement form, the seed for mutations.
const SEED_TEXT: &str = r#"# seed
graph "seed net" {
  input %x: f32[1,2,4,4]
  param %w: f32[2,2,3,3] = he(seed=1)
  param %b: f32[2] = uniform(low=-0.1, high=0.1, seed=2)
  param %e: f32[2]
  const %k: i64[2] = [1, -1]
  const %m: bool[1] = [true]
  %c: f32[1,2,2,2] = Conv2d(%x, %w, %b) {strides=[1,1], pads=[0,0,0,0], dilations=[1,1], group=1}
  %"a b", %d = Split(%c) {axis=1, split=[1,1]}
  %r = Clip(%"a b") {min=-0.0, max=inf}
  %s = Add(%r, %d)
  %t = Reshape(%s) {shape=[1,-1]}
  %u = Gemm(%t, %t) {alpha=1e-7, transB=1}
  %p = Pad(%x) {pads=[0,0,1,1,0,0,1,1], mode=reflect}
  output %u, %p, %k
}
"#;

const SNIPPETS: &[&str] = &[
    "%",
    "\"",
    "[",
    "]",
    "{",
    "}",
    "(",
    ")",
    ",",
    "=",
    ":",
    "#",
    "\n",
    "-",
    "1e999",
    "0",
    "99999999999999999999",
    "-9223372036854775808",
    "9223372036854775807",
    "inf",
    "nan",
    "f32",
    "i64",
    "bool",
    "Relu",
    "Split",
    "output %x",
    "%y = ",
    "param",
    "const",
    "input",
    "graph",
    "é",
    "\\",
    "[[[[[[[[",
    "%x",
    "%c",
    "%u",
    "}}}",
    "= he(seed=1)",
    "4611686018427387904",
    " {axis=9223372036854775807}",
    "4294967296",
    "\u{feff}",
    "\r\n",
    "\t",
    "\0",
];

fn mutate(text: &str, muts: &[(u8, usize, usize)]) -> String {
    let mut cs: Vec<char> = text.chars().collect();
    for &(kind, a, b) in muts {
        let n = cs.len().max(1);
        let (i, j) = (a % n, b % n);
        let (lo, hi) = (i.min(j), i.max(j).min(i.min(j) + 12));
        match kind % 5 {
            0 if !cs.is_empty() => {
                cs.drain(lo..hi.min(cs.len()));
            }
            1 => {
                let snip = SNIPPETS[b % SNIPPETS.len()];
                let at = i.min(cs.len());
                cs.splice(at..at, snip.chars());
            }
            2 if !cs.is_empty() => {
                let piece: Vec<char> = cs[lo..hi.min(cs.len())].to_vec();
                let at = j.min(cs.len());
                cs.splice(at..at, piece);
            }
            3 if !cs.is_empty() => {
                let last = cs.len() - 1;
                cs.swap(i.min(last), j.min(last));
            }
            _ => cs.truncate(i),
        }
    }
    cs.into_iter().collect()
}

/// If the parser accepts a text, its canonical print must round-trip.
fn accepted_text_round_trips(src: &str) {
    if let Ok(g) = parse(src, "fuzz.dnn") {
        let text = print(&g);
        let again = parse(&text, "printed.dnn")
            .unwrap_or_else(|e| panic!("printed text does not parse: {e}\n{text}"));
        assert_eq!(print(&again), text);
    }
}

proptest! {
    #[test]
    fn print_parse_print_is_identity(
        seed in any::<u64>(),
        steps in prop::collection::vec((any::<u8>(), any::<u64>()), 0..14),
    ) {
        let g = random_graph(seed, &steps);
        let text = print(&g);
        let parsed = parse(&text, "random.dnn");
        prop_assert!(parsed.is_ok(), "{}\n{}", parsed.unwrap_err(), text);
        let g2 = parsed.unwrap();
        prop_assert_eq!(print(&g2), text);
        prop_assert_eq!(g2.node_count(), g.node_count());
        prop_assert_eq!(g2.outputs().len(), g.outputs().len());
        prop_assert!(dnnc_ir::verify(&g2).is_ok());
    }

    #[test]
    fn parse_never_panics_on_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let src = String::from_utf8_lossy(&bytes);
        accepted_text_round_trips(&src);
    }

    #[test]
    fn parse_never_panics_on_grammar_soup(
        parts in prop::collection::vec(0..SNIPPETS.len(), 0..60),
    ) {
        let mut src = String::from("graph g {\n");
        for p in parts {
            src.push_str(SNIPPETS[p]);
            src.push(' ');
        }
        accepted_text_round_trips(&src);
    }

    #[test]
    fn parse_never_panics_on_mutated_text(
        muts in prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 1..6),
    ) {
        accepted_text_round_trips(&mutate(SEED_TEXT, &muts));
    }
}

#[test]
fn seed_text_is_valid() {
    accepted_text_round_trips(SEED_TEXT);
    assert!(parse(SEED_TEXT, "seed.dnn").is_ok());
}

#[test]
fn every_prefix_of_valid_text_is_handled() {
    // Truncated files at every character boundary.
    let end = SEED_TEXT.trim_end().len();
    for (i, _) in SEED_TEXT.char_indices().take_while(|&(i, _)| i < end) {
        let e = parse(&SEED_TEXT[..i], "cut.dnn");
        assert!(e.is_err(), "prefix of {i} chars parsed");
    }
}

#[test]
fn deep_nesting_and_long_inputs_are_errors() {
    let deep = format!(
        "graph g {{\n  const %c: f32[1] = {}\n}}",
        "[".repeat(100_000)
    );
    assert!(parse(&deep, "deep.dnn").is_err());
    let long = format!("graph g {{\n  input %{}: f32[1]\n}}", "x".repeat(100_000));
    assert!(parse(&long, "long.dnn").is_err());
    let many = format!("graph g {{\n  input %x: f32[{}1]\n}}", "1,".repeat(50_000));
    assert!(parse(&many, "rank.dnn").is_err());
}
