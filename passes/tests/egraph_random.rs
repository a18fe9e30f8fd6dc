//! The e-graph optimiser on random graphs: convolutions, Gemm, BatchNorm,
//! elementwise chains, concats, splits, transposes, reshape chains,
//! identities, split/concat round trips, constant zeros and ones, average
//! pools before 1x1 convs, and
//! branches (two or three convs of one value, two Gemm heads of one
//! feature vector), so the rules have something to fire on: over the 300
//! graphs every rule but `zero-add`, `one-mul` and `div-one` fires, the
//! folds 29-60 times each, the merges hundreds of times, and the
//! extracted program keeps a merge in over a hundred graphs. Each
//! graph's interpreter outputs must be the same (rtol 1e-4) after the
//! `egraph` pass alone and after the whole pipeline, and the optimised IR
//! must verify.

use dnnc_ir::text::{parse, print};
use dnnc_ir::{Graph, Init, Tensor};
use dnnc_passes::egraph::{optimize, EGraphConfig};

/// xorshift64*: small, seeded, good enough to pick shapes and ops.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

struct Builder {
    rng: Rng,
    lines: Vec<String>,
    /// 4-D values and their shapes.
    vals: Vec<(String, Vec<usize>)>,
    n: usize,
}

fn dims(s: &[usize]) -> String {
    s.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl Builder {
    fn fresh(&mut self, base: &str) -> String {
        self.n += 1;
        format!("{base}{}", self.n)
    }

    fn param(&mut self, shape: &[usize], init: &str) -> String {
        let p = self.fresh("p");
        self.lines
            .push(format!("param %{p}: f32[{}] = {init}", dims(shape)));
        p
    }

    /// A recent value (later ones more likely).
    fn pick(&mut self) -> (String, Vec<usize>) {
        let n = self.vals.len();
        let i = n - 1 - self.rng.below(n.min(3));
        self.vals[i].clone()
    }

    fn push(&mut self, line: String, name: String, shape: Vec<usize>) {
        self.lines.push(line);
        self.vals.push((name, shape));
    }

    fn step(&mut self) {
        let (v, s) = self.pick();
        let seed = self.rng.below(1000);
        match self.rng.below(10) {
            0 => {
                let co = 2 + self.rng.below(3);
                let k = [1, 3][self.rng.below(2)];
                let w = self.param(&[co, s[1], k, k], &format!("he(seed={seed})"));
                let b = self.param(&[co], &format!("uniform(low=-0.5, high=0.5, seed={seed})"));
                // Half the 1x1 convs read an average pool, padding
                // counted or not (conv-over-average-pool).
                let v = if k == 1 && self.rng.below(2) == 0 {
                    let q = self.fresh("pool");
                    let counted = self.rng.below(2);
                    self.lines.push(format!(
                        "%{q} = AveragePool(%{v}) {{kernel=[3,3], strides=[1,1], pads=[1,1,1,1], count_include_pad={counted}}}"
                    ));
                    q
                } else {
                    v
                };
                let y = self.fresh("conv");
                let p = k / 2;
                let line = format!("%{y} = Conv2d(%{v}, %{w}, %{b}) {{pads=[{p},{p},{p},{p}]}}");
                if k == 1 && seed.is_multiple_of(3) {
                    // A third of the 1x1 convs feed an average pool that
                    // does not count padding (average-pool-over-conv).
                    self.lines.push(line);
                    let q = self.fresh("pool");
                    let pool = format!(
                        "%{q} = AveragePool(%{y}) {{kernel=[3,3], strides=[1,1], pads=[1,1,1,1], count_include_pad=0}}"
                    );
                    self.push(pool, q, vec![s[0], co, s[2], s[3]]);
                } else {
                    self.push(line, y, vec![s[0], co, s[2], s[3]]);
                }
            }
            1 => {
                let c = s[1];
                let sc = self.param(&[c], &format!("uniform(low=0.5, high=1.5, seed={seed})"));
                let bi = self.param(
                    &[c],
                    &format!("uniform(low=-0.5, high=0.5, seed={})", seed + 1),
                );
                let me = self.param(
                    &[c],
                    &format!("uniform(low=-0.5, high=0.5, seed={})", seed + 2),
                );
                let va = self.param(
                    &[c],
                    &format!("uniform(low=0.5, high=1.5, seed={})", seed + 3),
                );
                let y = self.fresh("bn");
                let line = format!(
                    "%{y} = BatchNormalization(%{v}, %{sc}, %{bi}, %{me}, %{va}) {{epsilon=0.00001}}"
                );
                self.push(line, y, s);
            }
            2 => {
                let op = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs"][self.rng.below(5)];
                let y = self.fresh("u");
                self.push(format!("%{y} = {op}(%{v})"), y.clone(), s.clone());
                if self.rng.below(2) == 0 {
                    // The same op again: Relu(Relu) and Neg(Neg) cancel.
                    let z = self.fresh("u");
                    self.push(format!("%{z} = {op}(%{y})"), z, s);
                }
            }
            3 => {
                let op = ["Add", "Mul", "Sub"][self.rng.below(3)];
                let other = match self.vals.iter().rev().find(|(n, t)| *t == s && *n != v) {
                    Some((n, _)) if self.rng.below(2) == 0 => n.clone(),
                    _ => {
                        let init = match (op, self.rng.below(3)) {
                            ("Mul", 0) => "ones".to_string(),
                            (_, 0) => "zeros".to_string(),
                            _ => format!("uniform(low=0.5, high=1.5, seed={seed})"),
                        };
                        self.param(&[s[1], 1, 1], &init)
                    }
                };
                let y = self.fresh("b");
                self.push(format!("%{y} = {op}(%{v}, %{other})"), y, s);
            }
            4 => {
                let y = self.fresh("id");
                let line = if self.rng.below(2) == 0 {
                    format!("%{y} = Identity(%{v})")
                } else {
                    format!("%{y} = Dropout(%{v}) {{ratio=0.25}}")
                };
                self.push(line, y, s);
            }
            5 => {
                // Two transposes; sometimes the second undoes the first.
                let mut p: Vec<usize> = (0..4).collect();
                for i in (1..4).rev() {
                    p.swap(i, self.rng.below(i + 1));
                }
                let a = self.fresh("t");
                let sa: Vec<usize> = p.iter().map(|&i| s[i]).collect();
                self.push(
                    format!("%{a} = Transpose(%{v}) {{perm=[{}]}}", dims(&p)),
                    a.clone(),
                    sa.clone(),
                );
                let q: Vec<usize> = if self.rng.below(2) == 0 {
                    (0..4)
                        .map(|i| p.iter().position(|&j| j == i).unwrap())
                        .collect()
                } else {
                    let mut q: Vec<usize> = (0..4).collect();
                    q.swap(1, 3);
                    q
                };
                let b = self.fresh("t");
                let sb: Vec<usize> = q.iter().map(|&i| sa[i]).collect();
                self.push(
                    format!("%{b} = Transpose(%{a}) {{perm=[{}]}}", dims(&q)),
                    b,
                    sb,
                );
            }
            6 => {
                let a = self.fresh("r");
                let n: usize = s.iter().product();
                self.lines
                    .push(format!("%{a} = Reshape(%{v}) {{shape=[1,{n}]}}"));
                let b = self.fresh("r");
                self.push(
                    format!("%{b} = Reshape(%{a}) {{shape=[{}]}}", dims(&s)),
                    b,
                    s,
                );
            }
            7 => {
                let other = self
                    .vals
                    .iter()
                    .rev()
                    .find(|(_, t)| t[0] == s[0] && t[2] == s[2] && t[3] == s[3])
                    .cloned();
                if let Some((o, t)) = other {
                    let y = self.fresh("cat");
                    let mut sy = s.clone();
                    sy[1] += t[1];
                    self.push(
                        format!("%{y} = Concat(%{v}, %{o}) {{axis=1}}"),
                        y.clone(),
                        sy,
                    );
                    if self.rng.below(2) == 0 {
                        // Split back into the parts (split-of-concat).
                        let (y0, y1) = (self.fresh("s"), self.fresh("s"));
                        self.lines.push(format!(
                            "%{y0}, %{y1} = Split(%{y}) {{axis=1, split=[{},{}]}}",
                            s[1], t[1]
                        ));
                        self.vals.push((y0, s.clone()));
                        self.vals.push((y1, t));
                    }
                }
            }
            8 => {
                // Branches: two or three convs of one value (1x1 and 3x3,
                // one stride), each maybe under a Relu, summed: what
                // merge-convs and unary-over-split take.
                let co = 2 + self.rng.below(3);
                let stride = 1 + self.rng.below(2);
                let branches = 2 + self.rng.below(2);
                let mut outs = Vec::new();
                for _ in 0..branches {
                    let k = [1, 3][self.rng.below(2)];
                    let seed = self.rng.below(1000);
                    let w = self.param(&[co, s[1], k, k], &format!("he(seed={seed})"));
                    let y = self.fresh("br");
                    let p = k / 2;
                    let bias = if self.rng.below(2) == 0 {
                        let b =
                            self.param(&[co], &format!("uniform(low=-0.5, high=0.5, seed={seed})"));
                        format!(", %{b}")
                    } else {
                        String::new()
                    };
                    self.lines.push(format!(
                        "%{y} = Conv2d(%{v}, %{w}{bias}) {{pads=[{p},{p},{p},{p}], strides=[{stride},{stride}]}}"
                    ));
                    let y = if self.rng.below(2) == 0 {
                        let r = self.fresh("u");
                        self.lines.push(format!("%{r} = Relu(%{y})"));
                        r
                    } else {
                        y
                    };
                    outs.push(y);
                }
                let shape = vec![s[0], co, s[2].div_ceil(stride), s[3].div_ceil(stride)];
                let mut acc = outs[0].clone();
                for o in &outs[1..] {
                    let y = self.fresh("b");
                    self.lines.push(format!("%{y} = Add(%{acc}, %{o})"));
                    acc = y;
                }
                self.vals.push((acc, shape));
            }
            _ => {
                if s[1] >= 2 {
                    let a = 1 + self.rng.below(s[1] - 1);
                    let (y0, y1) = (self.fresh("s"), self.fresh("s"));
                    self.lines.push(format!(
                        "%{y0}, %{y1} = Split(%{v}) {{axis=1, split=[{a},{}]}}",
                        s[1] - a
                    ));
                    let mut s0 = s.clone();
                    s0[1] = a;
                    let mut s1 = s.clone();
                    s1[1] -= a;
                    if self.rng.below(2) == 0 {
                        // Concat the pieces back (concat-of-split), under
                        // an activation (unary-over-concat).
                        let (c, r) = (self.fresh("cat"), self.fresh("u"));
                        self.lines
                            .push(format!("%{c} = Concat(%{y0}, %{y1}) {{axis=1}}"));
                        self.push(format!("%{r} = Relu(%{c})"), r, s.clone());
                    }
                    self.vals.push((y0, s0));
                    self.vals.push((y1, s1));
                }
            }
        }
    }
}

/// Random graph number `seed`, as text.
fn random_graph(seed: u64) -> String {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let shape = vec![1, 2 + rng.below(3), 3 + rng.below(4), 3 + rng.below(4)];
    let mut b = Builder {
        rng,
        lines: vec![format!("input %x: f32[{}]", dims(&shape))],
        vals: vec![("x".into(), shape)],
        n: 0,
    };
    let steps = 6 + b.rng.below(8);
    for _ in 0..steps {
        b.step();
    }
    let (last, s) = b.vals.last().cloned().unwrap();
    let mut outs = vec![last.clone()];
    if b.rng.below(2) == 0 {
        // A fully-connected head on the last value.
        let k: usize = s.iter().product::<usize>() / s[0];
        let f = b.fresh("flat");
        b.lines.push(format!("%{f} = Flatten(%{last}) {{axis=1}}"));
        let w = b.param(&[5, k], "he(seed=3)");
        let c = b.param(&[5], "zeros");
        let y = b.fresh("fc");
        b.lines
            .push(format!("%{y} = Gemm(%{f}, %{w}, %{c}) {{transB=1}}"));
        outs = vec![y];
        if b.rng.below(2) == 0 {
            // A second head on the same features (merge-matmuls).
            let w = b.param(&[3, k], "he(seed=4)");
            let c = b.param(&[3], "uniform(low=-0.5, high=0.5, seed=5)");
            let z = b.fresh("fc");
            b.lines
                .push(format!("%{z} = Gemm(%{f}, %{w}, %{c}) {{transB=1}}"));
            let r = b.fresh("u");
            b.lines.push(format!("%{r} = Sigmoid(%{z})"));
            outs.push(r);
        }
    }
    if b.vals.len() > 2 && b.rng.below(2) == 0 {
        let i = b.rng.below(b.vals.len() - 1) + 1;
        let extra = b.vals[i].0.clone();
        if !outs.contains(&extra) {
            outs.push(extra);
        }
    }
    let outs: Vec<String> = outs.iter().map(|o| format!("%{o}")).collect();
    format!(
        "graph random {{\n  {}\n  output {}\n}}\n",
        b.lines.join("\n  "),
        outs.join(", ")
    )
}

fn feeds(g: &Graph) -> Vec<(String, Tensor)> {
    g.inputs()
        .into_iter()
        .map(|v| {
            let val = g.value(v);
            let init = Init::Normal {
                mean: 0.0,
                std: 1.0,
                seed: 5,
            };
            (
                val.name.clone(),
                Tensor::F32(init.materialize(&val.ty).unwrap()),
            )
        })
        .collect()
}

fn assert_same(what: &str, a: &[Tensor], b: &[Tensor]) {
    assert_eq!(a.len(), b.len(), "{what}: output count");
    for (i, (p, q)) in a.iter().zip(b).enumerate() {
        assert_eq!(p.ty(), q.ty(), "{what}: output {i} type");
        for (u, v) in p.as_f32().unwrap().iter().zip(q.as_f32().unwrap().iter()) {
            let ok = (u - v).abs() <= 1e-4 * u.abs().max(v.abs()) + 1e-5;
            assert!(ok, "{what}: output {i}: {u} vs {v}");
        }
    }
}

#[test]
fn random_graphs_keep_their_outputs() {
    let mut fired = 0;
    let mut rules: std::collections::BTreeMap<String, usize> = Default::default();
    let mut merges_kept = 0;
    for seed in 0..300 {
        let src = random_graph(seed);
        let g = parse(&src, "random.dnn").unwrap_or_else(|e| panic!("seed {seed}: {e}\n{src}"));
        let f = feeds(&g);
        let want = dnnc_runtime::run(&g, &f).unwrap();
        let (opt, stats) = optimize(&g, &EGraphConfig::default())
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{src}"));
        dnnc_ir::verify(&opt).unwrap_or_else(|e| panic!("seed {seed}: {e:?}\n{}", print(&opt)));
        let got = dnnc_runtime::run(&opt, &f).unwrap();
        assert_same(
            &format!("seed {seed} egraph\n{src}\n{}", print(&opt)),
            &want,
            &got,
        );
        fired += stats.replaced as usize;
        for (r, n) in &stats.fired {
            *rules.entry(r.clone()).or_default() += n;
        }
        let splits = |g: &Graph| {
            g.topo_order()
                .into_iter()
                .filter(|&n| g.node(n).op.name() == "Split")
                .count()
        };
        merges_kept += (stats.replaced && splits(&opt) > splits(&g)) as usize;
        let mut piped = g.clone();
        dnnc_passes::Pipeline::default()
            .run(&mut piped)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{src}"));
        let got = dnnc_runtime::run(&piped, &f).unwrap();
        assert_same(&format!("seed {seed} pipeline\n{src}"), &want, &got);
    }
    // The generator plants identities, so most graphs change.
    assert!(fired >= 100, "only {fired} of 300 graphs were rewritten");
    // ... and branches and heads that merge.
    for r in [
        "merge-convs",
        "merge-matmuls",
        "unary-over-split",
        "conv-over-average-pool",
        "average-pool-over-conv",
    ] {
        assert!(rules.get(r).copied().unwrap_or(0) >= 5, "{r}: {rules:?}");
    }
    assert!(
        merges_kept >= 5,
        "merges kept in {merges_kept} graphs: {rules:?}"
    );
    eprintln!("rules fired over 300 graphs: {rules:?}; merges kept in {merges_kept}");
}
