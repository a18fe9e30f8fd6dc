//! Round trips of hand-written text: every op, multi-result nodes, quoted
//! names, constants of every dtype, every initializer, comments and forward
//! references. Each test checks the canonical print and that printing is a
//! fixed point of parse.

use dnnc_ir::text::{parse, print};
use dnnc_ir::{verify, DType, Graph, Init, Op, Tensor, TensorType};
use std::collections::BTreeSet;

/// Parses, verifies, and checks `print(parse(print(g))) == print(g)`.
fn canon(src: &str) -> (Graph, String) {
    let g = parse(src, "test.dnn").unwrap_or_else(|e| panic!("{e}"));
    verify(&g).unwrap_or_else(|e| panic!("{e:?}"));
    let text = print(&g);
    let again = parse(&text, "printed.dnn").unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print(&again), text, "printing is not a fixed point");
    (g, text)
}

const ALL_OPS: &str = r#"
# Every op of the IR at least once, with attributes mostly defaulted.
graph all_ops {
  input %x: f32[1,4,8,8]
  input %m: f32[2,3]
  input %idx: i64[2]
  param %w: f32[4,4,3,3] = he(seed=1)
  param %b: f32[4] = zeros
  %conv = Conv2d(%x, %w, %b) {pads=[1,1,1,1], algo=winograd4}
  param %dw: f32[4,1,3,3] = xavier(seed=9)
  %dwconv = Conv2d(%conv, %dw) {group=4, strides=[2,2], dilations=[2,2], pads=[2,2,2,2], algo=depthwise}
  param %mw: f32[3,5] = xavier(seed=2)
  %mm = MatMul(%m, %mw)
  param %gb: f32[5] = ones
  %gemm = Gemm(%m, %mw, %gb) {alpha=0.5}
  %maxp = MaxPool(%conv) {kernel=[2,2], strides=[2,2]}
  %avgp = AveragePool(%conv) {kernel=[3,3], pads=[1,1,1,1], count_include_pad=1, ceil_mode=1}
  %gap = GlobalAveragePool(%conv)
  %gmp = GlobalMaxPool(%conv)
  param %scale: f32[4] = constant(value=1.5)
  param %shift: f32[4] = uniform(low=-0.1, high=0.1, seed=3)
  param %mean: f32[4] = normal(mean=0.0, std=0.02, seed=4)
  param %var: f32[4] = external("bn.running_var")
  %bn = BatchNormalization(%conv, %scale, %shift, %mean, %var) {epsilon=1e-3}
  %lrn = LRN(%bn) {size=3}
  %relu = Relu(%lrn)
  %leaky = LeakyRelu(%relu) {alpha=0.1}
  %sig = Sigmoid(%leaky)
  %tanh = Tanh(%sig)
  %clip = Clip(%tanh) {min=0.0, max=6.0}
  %hsig = HardSigmoid(%clip)
  %hswish = HardSwish(%hsig)
  %elu = Elu(%hswish)
  %softplus = Softplus(%elu)
  %gelu = Gelu(%softplus) {approximate=tanh}
  %sqrt = Sqrt(%gelu)
  %exp = Exp(%sqrt)
  %log = Log(%exp)
  %neg = Neg(%log)
  %abs = Abs(%neg)
  %recip = Reciprocal(%abs)
  %erf = Erf(%recip)
  const %two: f32[] = [2]
  %add = Add(%erf, %conv)
  const %col: f32[4,1,1] = [1, 2.5, -3, 4e2]
  %sub = Sub(%add, %col)
  %mul = Mul(%sub, %two)
  %div = Div(%mul, %two)
  %pow = Pow(%div, %two)
  %max = Max(%pow, %conv)
  %min = Min(%max, %conv)
  %softmax = Softmax(%m) {axis=1}
  %logsoftmax = LogSoftmax(%m)
  %rmean = ReduceMean(%x) {axes=[2,3]}
  %rsum = ReduceSum(%x) {axes=[-1], keepdims=0}
  %rmax = ReduceMax(%x)
  %concat = Concat(%conv, %min) {axis=1}
  %s1, %s2 = Split(%concat) {axis=1, split=[3,5]}
  %slice = Slice(%x) {starts=[0,-1], ends=[2,9223372036854775807], axes=[1,3], steps=[1,-1]}
  %reshape = Reshape(%x) {shape=[1,-1]}
  %flatten = Flatten(%x)
  %transpose = Transpose(%m) {perm=[1,0]}
  %squeeze = Squeeze(%gap) {axes=[2,3]}
  %unsqueeze = Unsqueeze(%m) {axes=[0]}
  %pad = Pad(%x) {pads=[0,0,1,1,0,0,1,1], mode=reflect}
  %padc = Pad(%m) {pads=[1,0,0,2], value=-1.5}
  %gather = Gather(%m, %idx) {axis=1}
  %expand = Expand(%b) {shape=[2,4]}
  %identity = Identity(%expand)
  %dropout = Dropout(%identity) {ratio=0.25}
  const %ci: i64[2,2] = [1, -2, 9223372036854775807, -9223372036854775808]
  const %cb: bool[3] = [true, false, true]
  %selu = Selu(%x)
  %sign = Sign(%idx)
  %floor = Floor(%selu)
  %ceil = Ceil(%floor)
  %round = Round(%ceil)
  %sin = Sin(%round)
  %cos = Cos(%sin)
  param %tw: f32[4,2,3,3] = he(seed=5)
  %convt = ConvTranspose2d(%x, %tw) {strides=[2,2], pads=[1,1,1,1], output_padding=[1,1], group=2}
  param %ones4: f32[4] = ones
  %inorm = InstanceNormalization(%x, %ones4, %b) {epsilon=1e-3}
  param %ln_s: f32[8] = ones
  %lnorm = LayerNormalization(%x, %ln_s) {axis=-1}
  param %slope: f32[4,1,1] = constant(value=0.25)
  %prelu = PRelu(%x, %slope)
  %shape = Shape(%x) {start=1}
  %zeros = ConstantOfShape() {shape=[2,3]}
  %mask = ConstantOfShape() {shape=[2,1], value=true, dtype=bool}
  %seven = ConstantOfShape() {shape=[], value=7, dtype=i64}
  %rng = Range() {start=0, limit=5, delta=3, dtype=i64}
  %frng = Range() {start=0.5, limit=-1.0, delta=-0.5}
  %tile = Tile(%m) {repeats=[2,1]}
  %where = Where(%mask, %m, %zeros)
  %eq = Equal(%m, %zeros)
  %lt = Less(%idx, %rng)
  %gt = Greater(%m, %zeros)
  %not = Not(%eq)
  %or = Or(%gt, %mask)
  %and = And(%not, %or)
  %cast = Cast(%and) {to=f32}
  %einsum = Einsum(%m, %mw) {equation="ij,jk->ik"}
  %resize = Resize(%x) {sizes=[1,4,16,4], mode=linear, coordinate_transformation_mode=align_corners}
  input %seq: f32[3,2,5]
  param %rw: f32[2,6,5] = xavier(seed=6)
  param %rr: f32[2,6,6] = xavier(seed=7)
  param %rb: f32[2,12] = zeros
  param %rh: f32[2,2,6] = zeros
  %rnn_y, %rnn_h = RNN(%seq, %rw, %rr, %rb, %rh) {hidden_size=6, direction=bidirectional, activations="Relu,HardSigmoid(0.1;0.6)"}
  param %gw: f32[1,9,5] = xavier(seed=8)
  param %gr: f32[1,9,3] = xavier(seed=9)
  param %gbias: f32[1,18] = zeros
  param %gh: f32[1,2,3] = zeros
  %gru_y, %gru_h = GRU(%seq, %gw, %gr, %gbias, %gh) {hidden_size=3, linear_before_reset=1, clip=5.0}
  param %lw: f32[1,8,5] = xavier(seed=10)
  param %lr: f32[1,8,2] = xavier(seed=11)
  param %lb: f32[1,16] = zeros
  param %lh: f32[1,2,2] = zeros
  param %lp: f32[1,6] = zeros
  %lstm_y, %lstm_h, %lstm_c = LSTM(%seq, %lw, %lr, %lb, %lh, %lh, %lp) {hidden_size=2, direction=reverse}
  output %dwconv, %mm, %gemm, %maxp, %avgp, %gmp, %rmean, %rsum, %rmax, %s1, %s2
  output %slice, %reshape, %flatten, %transpose, %squeeze, %unsqueeze, %pad, %padc
  output %gather, %dropout, %softmax, %logsoftmax, %ci, %cb
  output %cos, %sign, %convt, %inorm, %lnorm, %prelu, %shape, %seven, %frng, %tile
  output %where, %lt, %cast, %einsum, %resize, %rnn_y, %rnn_h, %gru_y, %gru_h
  output %lstm_y, %lstm_h, %lstm_c
}
"#;

#[test]
fn every_op_round_trips() {
    let (g, text) = canon(ALL_OPS);
    let used: BTreeSet<&str> = g
        .topo_order()
        .into_iter()
        .map(|n| g.node(n).op.name())
        .collect();
    for op in dnnc_ir::op::OP_NAMES {
        assert!(used.contains(op), "{op} is not exercised");
    }
    assert_eq!(g.outputs().len(), 47);
    insta::assert_snapshot!("all_ops_canonical", text);
}

#[test]
fn canonical_text_is_reproduced_exactly() {
    let src = "graph tiny {
  input %x: f32[1,3,8,8]
  param %w: f32[4,3,3,3] = he(seed=1)
  const %s: i64[2] = [1, -1]
  %y: f32[1,4,6,6] = Conv2d(%x, %w) {strides=[1,1], pads=[0,0,0,0], dilations=[1,1], group=1, algo=auto}
  %a: f32[1,2,6,6], %b: f32[1,2,6,6] = Split(%y) {axis=1, split=[2,2]}
  %r: f32[1,2,6,6] = Relu(%a)
  output %r, %b, %s
}
";
    let (_, text) = canon(src);
    assert_eq!(text, src);
}

#[test]
fn multi_output_split_binds_each_result() {
    let (g, _) = canon(
        "graph s {
  input %x: f32[6,4]
  %a, %b, %c = Split(%x) {split=[1,2,3]}
  %z = Concat(%c, %a, %b)
  output %z, %b
}",
    );
    let b = g.value_by_name("b").unwrap();
    assert_eq!(g.value(b).ty, TensorType::f32(vec![2, 4]));
    assert_eq!(g.value(b).output_index, 1);
    let z = g.value_by_name("z").unwrap();
    assert_eq!(g.value(z).ty, TensorType::f32(vec![6, 4]));
    assert_eq!(g.outputs(), &[z, b]);
}

#[test]
fn quoted_names_round_trip() {
    let src = r#"graph "my net-2" {
  input %"input 0": f32[2]
  input %"tab\tand\"quote\\": f32[2]
  input %"ends:": f32[2]
  input %"": f32[2]
  input %"ünï#code": f32[2]
  %onnx::Add_3:0 = Add(%"input 0", %"tab\tand\"quote\\")
  %/layer1/relu-1.out = Relu(%onnx::Add_3:0)
  %"x y" = Add(%"ends:", %"")
  %"z" = Add(%"x y", %"ünï#code")
  output %/layer1/relu-1.out, %z
}"#;
    let (g, text) = canon(src);
    assert_eq!(g.name, "my net-2");
    for n in [
        "input 0",
        "tab\tand\"quote\\",
        "ends:",
        "",
        "ünï#code",
        "onnx::Add_3:0",
        "x y",
        "z",
    ] {
        assert!(g.value_by_name(n).is_some(), "{n:?}");
    }
    assert!(text.starts_with("graph \"my net-2\" {\n"));
    assert!(
        text.contains("input %\"tab\\tand\\\"quote\\\\\": f32[2]"),
        "{text}"
    );
    assert!(text.contains("input %\"ends:\": f32[2]"), "{text}");
    assert!(text.contains("input %\"\": f32[2]"), "{text}");
    // Names that need no quotes are printed bare even if written quoted.
    assert!(
        text.contains("%z: f32[2] = Add(%\"x y\", %\"ünï#code\")"),
        "{text}"
    );
    assert!(text.contains("%onnx::Add_3:0: f32[2] = Add("), "{text}");
}

#[test]
fn type_may_follow_a_colon_without_space() {
    let (g, _) = canon("graph g {\n  input %x:f32[2]\n  %a:b:f32[2] = Relu(%x)\n  output %a:b\n}");
    assert!(g.value_by_name("a:b").is_some());
}

#[test]
fn constants_of_every_dtype() {
    let (g, text) = canon(
        "graph c {
  const %f: f32[2,3] = [1, -0.0, 1e-7, inf, -inf, 3.4028235e38]
  const %n: f32[1] = [nan]
  const %scalar: f32[] = [0.5]
  const %empty: i64[0] = []
  const %i: i64[3] = [0, -9223372036854775808, 9223372036854775807]
  const %b: bool[2,1] = [false, true]
  output %f, %n, %scalar, %empty, %i, %b
}",
    );
    let f = g.weights.get("f").unwrap().as_f32().unwrap();
    assert_eq!(f.shape(), &[2, 3]);
    let fv: Vec<f32> = f.iter().copied().collect();
    assert_eq!(fv[0], 1.0);
    assert!(fv[1] == 0.0 && fv[1].is_sign_negative());
    assert_eq!(fv[2], 1e-7);
    assert_eq!(fv[3], f32::INFINITY);
    assert_eq!(fv[4], f32::NEG_INFINITY);
    assert_eq!(fv[5], f32::MAX);
    assert!(g.weights.get("n").unwrap().as_f32().unwrap()[[0]].is_nan());
    assert_eq!(g.weights.get("scalar").unwrap().shape(), &[] as &[usize]);
    assert_eq!(g.weights.get("empty").unwrap().numel(), 0);
    let i = g.weights.get("i").unwrap().as_i64().unwrap();
    assert_eq!(
        i.iter().copied().collect::<Vec<_>>(),
        vec![0, i64::MIN, i64::MAX]
    );
    let b = g.weights.get("b").unwrap();
    assert_eq!(b.dtype(), DType::Bool);
    assert_eq!(
        b.as_bool().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![false, true]
    );
    assert!(
        text.contains("const %f: f32[2,3] = [1.0, -0.0, 1e-7, inf, -inf, 3.4028235e38]"),
        "{text}"
    );
    assert!(text.contains("const %n: f32[1] = [nan]"), "{text}");
    assert!(text.contains("const %empty: i64[0] = []"), "{text}");
    assert!(
        text.contains("const %b: bool[2,1] = [false, true]"),
        "{text}"
    );
}

#[test]
fn every_initializer_kind() {
    let (g, text) = canon(
        r#"graph inits {
  param %z: f32[2] = zeros
  param %o: f32[2] = ones()
  param %c: f32[2] = constant(value=-3)
  param %u: f32[2] = uniform(seed=18446744073709551615, high=1e-7, low=-inf)
  param %n: f32[2] = normal(mean=0.5, std=2.0, seed=0)
  param %x: f32[2,2] = xavier(seed=5)
  param %h: f32[2,2] = he(seed=6)
  param %e: f32[2] = external("model.fc.weight")
  param %self: f32[2]
  param %same: f32[2] = external("same")
  output %z, %o, %c, %u, %n, %x, %h, %e, %self, %same
}"#,
    );
    let init = |name: &str| match &g.node(g.value(g.value_by_name(name).unwrap()).producer).op {
        Op::Param(i) => i.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(init("z"), Init::Zeros);
    assert_eq!(init("o"), Init::Ones);
    assert_eq!(init("c"), Init::Constant(-3.0));
    assert_eq!(
        init("u"),
        Init::Uniform {
            low: f32::NEG_INFINITY,
            high: 1e-7,
            seed: u64::MAX
        }
    );
    assert_eq!(
        init("n"),
        Init::Normal {
            mean: 0.5,
            std: 2.0,
            seed: 0
        }
    );
    assert_eq!(init("x"), Init::Xavier { seed: 5 });
    assert_eq!(init("h"), Init::He { seed: 6 });
    assert_eq!(init("e"), Init::External("model.fc.weight".into()));
    assert_eq!(init("self"), Init::External("self".into()));
    assert_eq!(init("same"), Init::External("same".into()));
    insta::assert_snapshot!("initializers_canonical", text);
}

#[test]
fn comments_whitespace_and_defaults() {
    let (_, text) = canon(
        "# leading comment\n\n\
         graph   commented{# after brace\n\
         input %x :f32 [ 1 , 2 ]   # trailing\n\
         \t%y=LeakyRelu( %x ){}#no attrs given\n\
         # between\n\
         output %y # done\n\
         }  # after\n",
    );
    assert_eq!(
        text,
        "graph commented {\n  input %x: f32[1,2]\n  %y: f32[1,2] = LeakyRelu(%x) {alpha=0.01}\n  output %y\n}\n"
    );
}

#[test]
fn forward_references_are_ordered_by_dependency() {
    let (g, text) = canon(
        "graph fwd {
  output %out
  %out = Add(%a, %b)
  %b = Relu(%a)
  %unrelated = Sigmoid(%x)
  %a = Neg(%x)
  input %x: f32[3]
  output %unrelated
}",
    );
    assert_eq!(
        text,
        "graph fwd {
  input %x: f32[3]
  %unrelated: f32[3] = Sigmoid(%x)
  %a: f32[3] = Neg(%x)
  %b: f32[3] = Relu(%a)
  %out: f32[3] = Add(%a, %b)
  output %out, %unrelated
}
"
    );
    assert_eq!(g.outputs().len(), 2);
}

#[test]
fn attribute_spellings_are_normalised() {
    // Ints widen to floats, `true`/`false` are 0/1, single ints are lists.
    let (_, text) = canon(
        "graph a {
  input %x: f32[2,3]
  param %w: f32[4,3] = zeros
  %g = Gemm(%x, %w) {alpha=2, transB=true}
  %c = Clip(%g) {min=-inf}
  %p = Pad(%c) {pads=[0,1,0,1], mode=edge, value=-0.0}
  %u = Unsqueeze(%p) {axes=0}
  output %u
}",
    );
    assert!(
        text.contains("{alpha=2.0, beta=1.0, transA=0, transB=1}"),
        "{text}"
    );
    assert!(text.contains("Clip(%g) {min=-inf, max=inf}"), "{text}");
    assert!(
        text.contains("{pads=[0,1,0,1], mode=edge, value=-0.0}"),
        "{text}"
    );
    assert!(text.contains("Unsqueeze(%p) {axes=[0]}"), "{text}");
}

#[test]
fn graph_built_in_code_prints_canonically() {
    let mut g = Graph::new("api");
    let x = g.add_input("x", TensorType::f32(vec![1, 4])).unwrap();
    let c = g
        .add_constant(
            "k",
            Tensor::F32(
                ndarray::ArrayD::from_shape_vec(vec![4], vec![0.1, -0.0, 1e-7, 3.0]).unwrap(),
            ),
        )
        .unwrap();
    let y = g
        .add(Op::Binary(dnnc_ir::op::Binary::Mul), &[x, c], "y z")
        .unwrap();
    g.set_outputs(vec![y]);
    let text = print(&g);
    assert_eq!(
        text,
        "graph api {
  input %x: f32[1,4]
  const %k: f32[4] = [0.1, -0.0, 1e-7, 3.0]
  %\"y z\": f32[1,4] = Mul(%x, %k)
  output %\"y z\"
}
"
    );
    assert_eq!(print(&parse(&text, "api.dnn").unwrap()), text);
}

#[test]
fn graph_api_rejects_a_resultless_split() {
    // Every node has at least one result, so node names are always defined.
    let mut g = Graph::new("odd");
    let x = g.add_input("x", TensorType::f32(vec![0, 2])).unwrap();
    let e = g
        .add_node(
            Op::Split {
                axis: 0,
                split: vec![],
            },
            &[x],
            &[],
        )
        .unwrap_err();
    assert!(e.to_string().contains("Split"), "{e}");
}

#[test]
fn a_weight_created_late_is_ordered_before_its_reader() {
    // A pass that folds a filter creates its parameter after everything
    // else; the node reading it must keep its place in the order.
    let mut g = parse(
        "graph late {
          input %x: f32[1,4]
          %a = Relu(%x)
          %b = Sigmoid(%x)
          output %a, %b
        }",
        "late.dnn",
    )
    .unwrap();
    let a = g.value_by_name("a").unwrap();
    let k = g
        .add_param("k", TensorType::f32(vec![4]), Init::External("k".into()))
        .unwrap();
    let relu = g.value(a).producer;
    g.rewrite_node(
        relu,
        Op::Binary(dnnc_ir::op::Binary::Add),
        &[g.inputs()[0], k],
    )
    .unwrap();
    let order: Vec<String> = g
        .topo_order()
        .into_iter()
        .map(|n| g.node_name(n).to_string())
        .collect();
    assert_eq!(order, ["x", "k", "a", "b"]);
}

#[test]
fn permuting_a_splits_results_keeps_their_identity() {
    let mut g = parse(
        "graph parts {
          input %x: f32[1,6]
          %p, %q, %r = Split(%x) {axis=1, split=[1,2,3]}
          %s = Relu(%q)
          output %p, %s, %r
        }",
        "parts.dnn",
    )
    .unwrap();
    let q = g.value_by_name("q").unwrap();
    let split = g.value(q).producer;
    let op = |split: Vec<usize>| Op::Split { axis: 1, split };
    let e = g
        .permute_results(split, op(vec![3, 1, 2]), &[2, 0, 0])
        .unwrap_err();
    assert!(e.to_string().contains("no permutation"), "{e}");
    let e = g
        .permute_results(split, op(vec![1, 2, 3]), &[2, 0, 1])
        .unwrap_err();
    assert!(e.to_string().contains("given order"), "{e}");
    g.permute_results(split, op(vec![3, 1, 2]), &[2, 0, 1])
        .unwrap();
    verify(&g).unwrap();
    assert_eq!(g.value(q).output_index, 2);
    let text = print(&g);
    assert!(
        text.contains(
            "%r: f32[1,3], %p: f32[1,1], %q: f32[1,2] = Split(%x) {axis=1, split=[3,1,2]}"
        ),
        "{text}"
    );
    assert!(text.contains("%s: f32[1,2] = Relu(%q)"), "{text}");
    assert_eq!(print(&parse(&text, "again.dnn").unwrap()), text);
}

/// The attributes of `g`'s first Conv2d.
fn first_conv(g: &dnnc_ir::Graph) -> dnnc_ir::op::Conv2d {
    g.topo_order()
        .into_iter()
        .find_map(|n| match &g.node(n).op {
            Op::Conv2d(c) => Some(c.clone()),
            _ => None,
        })
        .expect("a Conv2d")
}

/// Conv2d's `algo` attribute: every spelling survives a round trip, the
/// default is `auto` and is printed, and an unknown algorithm is rejected.
#[test]
fn conv_algo_attribute_round_trips() {
    use dnnc_ir::op::ConvAlgo;
    for a in ConvAlgo::ALL {
        let attr = if a == ConvAlgo::Auto {
            String::new()
        } else {
            format!(" {{algo={}}}", a.name())
        };
        let src = format!(
            "graph g {{\n  input %x: f32[1,3,8,8]\n  param %w: f32[4,3,3,3] = he(seed=1)\n  %y = Conv2d(%x, %w){attr}\n  output %y\n}}\n"
        );
        let (g, text) = canon(&src);
        let conv = first_conv(&g);
        assert_eq!(conv.algo, a);
        assert!(
            text.contains(&format!("algo={}", a.name())),
            "{a:?} not printed:\n{text}"
        );
    }
    let bad = "graph g {\n  input %x: f32[1,3,8,8]\n  param %w: f32[4,3,3,3] = he(seed=1)\n  %y = Conv2d(%x, %w) {algo=magic}\n  output %y\n}\n";
    let err = parse(bad, "bad.dnn").unwrap_err().to_string();
    assert!(err.contains("magic") && err.contains("winograd4"), "{err}");
}

/// Conv2d's `layout` attribute: a chosen layout survives a round trip and
/// is printed, `auto` (the default) is not printed, and an unknown layout
/// is rejected naming the valid ones.
#[test]
fn conv_layout_attribute_round_trips() {
    use dnnc_ir::op::WeightLayout;
    for l in WeightLayout::ALL {
        let src = format!(
            "graph g {{\n  input %x: f32[1,3,8,8]\n  param %w: f32[4,3,1,1] = he(seed=1)\n  %y = Conv2d(%x, %w) {{algo=pointwise, layout={}}}\n  output %y\n}}\n",
            l.name()
        );
        let (g, text) = canon(&src);
        let conv = first_conv(&g);
        assert_eq!(conv.layout, l);
        assert_eq!(text.contains("layout="), l != WeightLayout::Auto, "{text}");
    }
    let bad = "graph g {\n  input %x: f32[1,3,8,8]\n  param %w: f32[4,3,1,1] = he(seed=1)\n  %y = Conv2d(%x, %w) {layout=nhwc}\n  output %y\n}\n";
    let err = parse(bad, "bad.dnn").unwrap_err().to_string();
    assert!(err.contains("nhwc") && err.contains("lanes"), "{err}");
}

/// A channel-blocked pool prints its layout and reads back the same; a
/// pool refuses the conv-only `nchw_to_nchw8c`, naming the attribute.
#[test]
fn blocked_pools_round_trip() {
    let (g, text) = canon(
        "graph p {
  input %x: f32[1,2,9,9,8]
  %m = MaxPool(%x) {kernel=[3,3], strides=[2,2], ceil_mode=1, data=nchw8c}
  %a = AveragePool(%m) {kernel=[2,2], strides=[2,2], data=nchw8c}
  output %a
}",
    );
    assert!(text.contains("ceil_mode=1, data=nchw8c}"), "{text}");
    assert_eq!(g.value(g.outputs()[0]).ty.shape, vec![1, 2, 2, 2, 8]);
    let bad = parse(
        "graph p {
  input %x: f32[1,8,9,9]
  %m = MaxPool(%x) {kernel=[3,3], data=nchw_to_nchw8c}
  output %m
}",
        "bad.dnn",
    )
    .unwrap_err();
    assert!(bad.to_string().contains("data"), "{bad}");
}
