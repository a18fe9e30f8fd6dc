//! One minimal graph per rule, its IR before and after the pass as an
//! insta snapshot; every rule in the table must have one. Each graph's
//! interpreter outputs are compared before and after.

use super::{optimize, rules::rules, EGraphConfig};
use dnnc_ir::text::{parse, print};
use dnnc_ir::Tensor;

/// Runs the pass on `src`, checks that `rule` fired and the outputs did
/// not change, and returns the snapshot text.
fn rule_effect(rule: &str, src: &str) -> String {
    // The snapshots are the same on every machine: `weight-layouts` runs
    // only in its own test.
    let cfg = EGraphConfig {
        weight_layouts: rule == "weight-layouts",
        ..Default::default()
    };
    rule_effect_with(rule, src, &cfg)
}

/// [`rule_effect`] with the pass configured as `cfg`.
fn rule_effect_with(rule: &str, src: &str, cfg: &EGraphConfig) -> String {
    let g = parse(src, "rule.dnn").unwrap();
    let (out, stats) = optimize(&g, cfg).unwrap();
    dnnc_ir::verify(&out).unwrap();
    assert!(
        stats.fired.contains_key(rule),
        "{rule} did not fire: {:?}",
        stats.fired
    );
    assert!(stats.replaced, "{rule}: the graph was not replaced");
    same_outputs(&g, &out);
    format!(
        "{}--- egraph ({}) --->\n{}",
        print(&g),
        stats.lines()[2],
        print(&out)
    )
}

/// Seeded inputs for every graph input.
fn feeds(g: &dnnc_ir::Graph) -> Vec<(String, Tensor)> {
    g.inputs()
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let val = g.value(v);
            let init = dnnc_ir::Init::Normal {
                mean: 0.0,
                std: 1.0,
                seed: 17 + i as u64,
            };
            (
                val.name.clone(),
                Tensor::F32(init.materialize(&val.ty).unwrap()),
            )
        })
        .collect()
}

/// The interpreter gives `a` and `b` the same outputs (within 1e-5
/// relative).
pub(super) fn same_outputs(a: &dnnc_ir::Graph, b: &dnnc_ir::Graph) {
    let f = feeds(a);
    let x = dnnc_runtime::run(a, &f).unwrap();
    let y = dnnc_runtime::run(b, &f).unwrap();
    assert_eq!(x.len(), y.len());
    for (p, q) in x.iter().zip(&y) {
        assert_eq!(p.ty(), q.ty());
        let (p, q) = (p.as_f32().unwrap(), q.as_f32().unwrap());
        for (u, v) in p.iter().zip(q.iter()) {
            assert!(
                (u - v).abs() <= 1e-5 * u.abs().max(v.abs()) + 1e-6 || (u.is_nan() && v.is_nan()),
                "{u} vs {v}"
            );
        }
    }
}

#[test]
fn remove_identity() {
    insta::assert_snapshot!(rule_effect(
        "remove-identity",
        "graph t {
           input %x: f32[2,3]
           %a = Relu(%x)
           %b = Identity(%a)
           %c = Sigmoid(%b)
           output %c
         }"
    ));
}

#[test]
fn remove_dropout() {
    insta::assert_snapshot!(rule_effect(
        "remove-dropout",
        "graph t {
           input %x: f32[2,3]
           %a = Relu(%x)
           %b = Dropout(%a) {ratio=0.5}
           %c = Sigmoid(%b)
           output %c
         }"
    ));
}

#[test]
fn relu_idempotent() {
    insta::assert_snapshot!(rule_effect(
        "relu-idempotent",
        "graph t {
           input %x: f32[2,3]
           %a = Relu(%x)
           %b = Relu(%a)
           output %b
         }"
    ));
}

#[test]
fn double_negation() {
    insta::assert_snapshot!(rule_effect(
        "double-negation",
        "graph t {
           input %x: f32[2,3]
           %a = Tanh(%x)
           %b = Neg(%a)
           %c = Neg(%b)
           %d = Sigmoid(%c)
           output %d
         }"
    ));
}

#[test]
fn add_zero() {
    insta::assert_snapshot!(rule_effect(
        "add-zero",
        "graph t {
           input %x: f32[2,3]
           param %z: f32[3] = zeros
           %a = Add(%x, %z)
           %b = Relu(%a)
           output %b
         }"
    ));
}

#[test]
fn zero_add() {
    insta::assert_snapshot!(rule_effect(
        "zero-add",
        "graph t {
           input %x: f32[2,3]
           const %z: f32[1] = [0.0]
           %a = Add(%z, %x)
           %b = Relu(%a)
           output %b
         }"
    ));
}

#[test]
fn sub_zero() {
    insta::assert_snapshot!(rule_effect(
        "sub-zero",
        "graph t {
           input %x: f32[2,3]
           param %z: f32[2,3] = constant(value=0.0)
           %a = Sub(%x, %z)
           %b = Relu(%a)
           output %b
         }"
    ));
}

#[test]
fn mul_one() {
    insta::assert_snapshot!(rule_effect(
        "mul-one",
        "graph t {
           input %x: f32[2,3]
           param %o: f32[3] = ones
           %a = Mul(%x, %o)
           %b = Relu(%a)
           output %b
         }"
    ));
}

#[test]
fn one_mul() {
    insta::assert_snapshot!(rule_effect(
        "one-mul",
        "graph t {
           input %x: f32[2,3]
           const %o: f32[1,1] = [1.0]
           %a = Mul(%o, %x)
           %b = Relu(%a)
           output %b
         }"
    ));
}

#[test]
fn div_one() {
    insta::assert_snapshot!(rule_effect(
        "div-one",
        "graph t {
           input %x: f32[2,3]
           param %o: f32[3] = ones
           %a = Div(%x, %o)
           %b = Relu(%a)
           output %b
         }"
    ));
}

#[test]
fn transpose_compose() {
    insta::assert_snapshot!(rule_effect(
        "transpose-compose",
        "graph t {
           input %x: f32[2,3,4]
           %a = Transpose(%x) {perm=[1,2,0]}
           %b = Transpose(%a) {perm=[2,0,1]}
           %c = Relu(%b)
           %d = Transpose(%c) {perm=[1,0,2]}
           %e = Transpose(%d) {perm=[0,2,1]}
           output %e
         }"
    ));
}

#[test]
fn view_chain() {
    insta::assert_snapshot!(rule_effect(
        "view-chain",
        "graph t {
           input %x: f32[2,3,4]
           %a = Reshape(%x) {shape=[6,4]}
           %b = Flatten(%a) {axis=0}
           %c = Relu(%b)
           output %c
         }"
    ));
}

#[test]
fn view_noop() {
    insta::assert_snapshot!(rule_effect(
        "view-noop",
        "graph t {
           input %x: f32[2,3,4]
           %a = Relu(%x)
           %b = Reshape(%a) {shape=[2,3,4]}
           %c = Sigmoid(%b)
           output %c
         }"
    ));
}

#[test]
fn split_of_concat() {
    insta::assert_snapshot!(rule_effect(
        "split-of-concat",
        "graph t {
           input %x: f32[1,2,4]
           input %y: f32[1,3,4]
           %c = Concat(%x, %y) {axis=1}
           %a, %b = Split(%c) {axis=1, split=[2,3]}
           %ra = Relu(%a)
           %sb = Sigmoid(%b)
           output %ra, %sb
         }"
    ));
}

#[test]
fn concat_of_split() {
    insta::assert_snapshot!(rule_effect(
        "concat-of-split",
        "graph t {
           input %x: f32[2,6]
           %a, %b = Split(%x) {axis=-1, split=[2,4]}
           %c = Concat(%a, %b) {axis=1}
           %r = Relu(%c)
           output %r
         }"
    ));
}

/// Distributing the outer Relu over the Concat lets `relu-idempotent`
/// remove it.
#[test]
fn unary_over_concat() {
    let effect = rule_effect(
        "unary-over-concat",
        "graph t {
           input %x: f32[2,3]
           input %y: f32[2,3]
           %a = Relu(%x)
           %b = Relu(%y)
           %c = Concat(%a, %b) {axis=0}
           %d = Relu(%c)
           output %d
         }",
    );
    assert!(effect.contains("relu-idempotent"), "{effect}");
    insta::assert_snapshot!(effect);
}

/// A Split whose pieces are not the Concat's parts is left alone.
#[test]
fn mismatched_split_of_concat_does_not_fire() {
    let g = parse(
        "graph t {
           input %x: f32[1,2,4]
           input %y: f32[1,3,4]
           %c = Concat(%x, %y) {axis=1}
           %a, %b = Split(%c) {axis=1, split=[3,2]}
           %d, %e = Split(%c) {axis=2, split=[2,2]}
           output %a, %b, %d, %e
         }",
        "t.dnn",
    )
    .unwrap();
    let (_, stats) = optimize(&g, &EGraphConfig::default()).unwrap();
    assert!(
        !stats.fired.contains_key("split-of-concat"),
        "{:?}",
        stats.fired
    );
}

#[test]
fn fold_mul_into_conv() {
    insta::assert_snapshot!(rule_effect(
        "fold-mul-into-conv",
        "graph t {
           input %x: f32[1,3,6,6]
           param %w: f32[4,3,3,3] = he(seed=1)
           param %b: f32[4] = uniform(low=-1, high=1, seed=2)
           param %s: f32[4,1,1] = uniform(low=0.5, high=1.5, seed=3)
           %c = Conv2d(%x, %w, %b) {pads=[1,1,1,1]}
           %m = Mul(%c, %s)
           %r = Relu(%m)
           output %r
         }"
    ));
}

#[test]
fn fold_add_into_conv() {
    insta::assert_snapshot!(rule_effect(
        "fold-add-into-conv",
        "graph t {
           input %x: f32[1,3,6,6]
           param %w: f32[4,3,3,3] = he(seed=1)
           param %t: f32[1,4,1,1] = uniform(low=-1, high=1, seed=3)
           %c = Conv2d(%x, %w) {pads=[1,1,1,1]}
           %a = Add(%c, %t)
           %r = Relu(%a)
           output %r
         }"
    ));
}

#[test]
fn fold_batchnorm_into_conv() {
    insta::assert_snapshot!(rule_effect(
        "fold-batchnorm-into-conv",
        "graph t {
           input %x: f32[1,3,6,6]
           param %w: f32[4,3,3,3] = he(seed=1)
           param %b: f32[4] = uniform(low=-1, high=1, seed=2)
           param %g: f32[4] = uniform(low=0.5, high=1.5, seed=3)
           param %be: f32[4] = uniform(low=-1, high=1, seed=4)
           param %mu: f32[4] = uniform(low=-1, high=1, seed=5)
           param %va: f32[4] = uniform(low=0.5, high=1.5, seed=6)
           %c = Conv2d(%x, %w, %b) {pads=[1,1,1,1]}
           %n = BatchNormalization(%c, %g, %be, %mu, %va) {epsilon=0.001}
           %r = Relu(%n)
           output %r
         }"
    ));
}

#[test]
fn fold_mul_into_gemm() {
    insta::assert_snapshot!(rule_effect(
        "fold-mul-into-gemm",
        "graph t {
           input %x: f32[2,6]
           param %w: f32[5,6] = he(seed=1)
           param %b: f32[5] = uniform(low=-1, high=1, seed=2)
           param %s: f32[5] = uniform(low=0.5, high=1.5, seed=3)
           %g = Gemm(%x, %w, %b) {transB=1}
           %m = Mul(%g, %s)
           %r = Relu(%m)
           output %r
         }"
    ));
}

#[test]
fn fold_add_into_gemm() {
    insta::assert_snapshot!(rule_effect(
        "fold-add-into-gemm",
        "graph t {
           input %x: f32[2,6]
           param %w: f32[6,5] = he(seed=1)
           param %t: f32[1,5] = uniform(low=-1, high=1, seed=3)
           %g = Gemm(%x, %w) {alpha=0.5, beta=0.0}
           %a = Add(%g, %t)
           %r = Relu(%a)
           output %r
         }"
    ));
}

/// The folded weight expressions become parameters in `fold-weights`:
/// BatchNorm, a per-channel Mul and Add after a conv leave one Conv2d
/// (and the Relu) with the same outputs.
#[test]
fn folded_expressions_become_parameters() {
    let g = parse(
        "graph t {
           input %x: f32[1,3,6,6]
           param %w: f32[4,3,3,3] = he(seed=1)
           param %g: f32[4] = uniform(low=0.5, high=1.5, seed=3)
           param %be: f32[4] = uniform(low=-1, high=1, seed=4)
           param %mu: f32[4] = uniform(low=-1, high=1, seed=5)
           param %va: f32[4] = uniform(low=0.5, high=1.5, seed=6)
           param %s: f32[4,1,1] = uniform(low=0.5, high=1.5, seed=7)
           param %t: f32[4,1,1] = uniform(low=-1, high=1, seed=8)
           %c = Conv2d(%x, %w) {pads=[1,1,1,1]}
           %n = BatchNormalization(%c, %g, %be, %mu, %va) {epsilon=0.001}
           %m = Mul(%n, %s)
           %a = Add(%m, %t)
           %r = Relu(%a)
           output %r
         }",
        "t.dnn",
    )
    .unwrap();
    let (mut out, stats) = optimize(&g, &EGraphConfig::default()).unwrap();
    assert!(stats.replaced, "{:?}", stats.fired);
    crate::pipeline::Pass::run(&crate::fold_weights::FoldWeights, &mut out).unwrap();
    dnnc_ir::verify(&out).unwrap();
    let ops: Vec<&str> = out
        .topo_order()
        .into_iter()
        .map(|n| out.node(n).op.name())
        .filter(|n| !matches!(*n, "input" | "param" | "const"))
        .collect();
    assert_eq!(ops, ["Conv2d", "Relu"], "{}", print(&out));
    same_outputs(&g, &out);
}

/// A Mul by a `[C]` operand scales columns, not channels, and an input
/// operand is not a weight: neither folds.
#[test]
fn non_channel_or_non_weight_operands_do_not_fold() {
    let g = parse(
        "graph t {
           input %x: f32[1,3,4,4]
           input %y: f32[4,1,1]
           param %w: f32[4,3,1,1] = he(seed=1)
           param %s: f32[4] = uniform(low=0.5, high=1.5, seed=3)
           %c = Conv2d(%x, %w) {}
           %m = Mul(%c, %s)
           %n = Mul(%c, %y)
           output %m, %n
         }",
        "t.dnn",
    )
    .unwrap();
    let (_, stats) = optimize(&g, &EGraphConfig::default()).unwrap();
    assert!(
        !stats.fired.contains_key("fold-mul-into-conv"),
        "{:?}",
        stats.fired
    );
}

/// Three 1x1 convs of one input (an inception module's branch heads),
/// each with its Relu: one conv of 40 channels, one Relu, one Split.
#[test]
fn merge_convs() {
    insta::assert_snapshot!(rule_effect(
        "merge-convs",
        "graph t {
           input %x: f32[1,8,12,12]
           param %w1: f32[16,8,1,1] = he(seed=1)
           param %b1: f32[16] = uniform(low=-1, high=1, seed=2)
           param %w2: f32[16,8,1,1] = he(seed=3)
           param %b2: f32[16] = uniform(low=-1, high=1, seed=4)
           param %w3: f32[8,8,1,1] = he(seed=5)
           param %b3: f32[8] = uniform(low=-1, high=1, seed=6)
           param %k: f32[8,16,3,3] = he(seed=7)
           %c1 = Conv2d(%x, %w1, %b1)
           %r1 = Relu(%c1)
           %c2 = Conv2d(%x, %w2, %b2)
           %r2 = Relu(%c2)
           %c3 = Conv2d(%x, %w3, %b3)
           %r3 = Relu(%c3)
           %d = Conv2d(%r2, %k) {pads=[1,1,1,1]}
           output %r1, %d, %r3
         }"
    ));
}

/// A 1x1 and a 3x3 conv of one small input: the 1x1 filter zero-padded
/// to 3x3 (its padding grown by one) saves a kernel's fixed cost, and the
/// 1x1 conv without a bias gets a zero one.
#[test]
fn merge_convs_of_different_kernel_sizes() {
    let out = rule_effect(
        "merge-convs",
        "graph t {
           input %x: f32[1,4,6,6]
           param %w1: f32[4,4,1,1] = he(seed=1)
           param %w3: f32[4,4,3,3] = he(seed=2)
           param %b3: f32[4] = uniform(low=-1, high=1, seed=3)
           %a = Conv2d(%x, %w1)
           %b = Conv2d(%x, %w3, %b3) {pads=[1,1,1,1]}
           %y = Add(%a, %b)
           output %y
         }",
    );
    assert!(out.contains("Pad("), "{out}");
    insta::assert_snapshot!(out);
}

/// Two Gemm heads of one feature vector: one Gemm of the concatenated
/// (transposed) weights and biases, then Split.
#[test]
fn merge_matmuls() {
    insta::assert_snapshot!(rule_effect(
        "merge-matmuls",
        "graph t {
           input %x: f32[1,32]
           param %w1: f32[16,32] = he(seed=1)
           param %b1: f32[16] = uniform(low=-1, high=1, seed=2)
           param %w2: f32[48,32] = he(seed=3)
           param %b2: f32[48] = uniform(low=-1, high=1, seed=4)
           %a = Gemm(%x, %w1, %b1) {transB=1}
           %b = Gemm(%x, %w2, %b2) {transB=1}
           %sa = Sigmoid(%a)
           output %sa, %b
         }"
    ));
}

/// A Relu of each piece of a Split is one Relu before it.
#[test]
fn unary_over_split() {
    insta::assert_snapshot!(rule_effect(
        "unary-over-split",
        "graph t {
           input %x: f32[1,32,4,4]
           %a, %b = Split(%x) {axis=1, split=[16,16]}
           %ra = Relu(%a)
           %rb = Relu(%b)
           %y = Sub(%ra, %rb)
           output %y
         }"
    ));
}

/// What merges do not take: convs of different strides, grouped convs,
/// convs whose filter is an input, a conv and the BatchNorm of it (a
/// fold's rewrite, not a second branch). None of these fires the rule.
#[test]
fn unmergeable_convs_stay_apart() {
    for src in [
        "graph t {
           input %x: f32[1,8,8,8]
           param %w1: f32[8,8,1,1] = he(seed=1)
           param %w2: f32[8,8,1,1] = he(seed=2)
           %a = Conv2d(%x, %w1)
           %b = Conv2d(%x, %w2) {strides=[2,2]}
           output %a, %b
         }",
        "graph t {
           input %x: f32[1,8,8,8]
           param %w1: f32[8,4,1,1] = he(seed=1)
           param %w2: f32[8,4,1,1] = he(seed=2)
           %a = Conv2d(%x, %w1) {group=2}
           %b = Conv2d(%x, %w2) {group=2}
           output %a, %b
         }",
        "graph t {
           input %x: f32[1,8,8,8]
           input %w1: f32[8,8,1,1]
           param %w2: f32[8,8,1,1] = he(seed=2)
           %a = Conv2d(%x, %w1)
           %b = Conv2d(%x, %w2)
           output %a, %b
         }",
        "graph t {
           input %x: f32[1,8,8,8]
           param %w: f32[8,8,1,1] = he(seed=1)
           param %g: f32[8] = uniform(low=0.5, high=1.5, seed=3)
           param %be: f32[8] = uniform(low=-1, high=1, seed=4)
           param %mu: f32[8] = uniform(low=-1, high=1, seed=5)
           param %va: f32[8] = uniform(low=0.5, high=1.5, seed=6)
           %c = Conv2d(%x, %w)
           %n = BatchNormalization(%c, %g, %be, %mu, %va) {epsilon=0.001}
           output %n
         }",
    ] {
        let g = parse(src, "t.dnn").unwrap();
        let (out, stats) = optimize(&g, &EGraphConfig::default()).unwrap();
        assert!(
            !stats.fired.contains_key("merge-convs"),
            "{src}\n{:?}",
            stats.fired
        );
        same_outputs(&g, &out);
    }
}

/// A merge the cost model rejects: a 1x1 stride-2 downsample and a 3x3
/// stride-2 conv of one 64-channel input (ResNet's block entry) would
/// run the 1x1's work nine times over. The rule fires; the graph keeps
/// two convs.
#[test]
fn a_merge_that_costs_more_is_not_extracted() {
    let g = parse(
        "graph t {
           input %x: f32[1,64,28,28]
           param %w1: f32[128,64,1,1] = he(seed=1)
           param %w3: f32[128,64,3,3] = he(seed=2)
           %a = Conv2d(%x, %w1) {strides=[2,2]}
           %b = Conv2d(%x, %w3) {strides=[2,2], pads=[1,1,1,1]}
           %y = Add(%a, %b)
           output %y
         }",
        "t.dnn",
    )
    .unwrap();
    let (out, stats) = optimize(&g, &EGraphConfig::default()).unwrap();
    assert!(stats.fired.contains_key("merge-convs"), "{:?}", stats.fired);
    let convs = out
        .topo_order()
        .into_iter()
        .filter(|&n| out.node(n).op.name() == "Conv2d")
        .count();
    assert_eq!(convs, 2, "{}", print(&out));
}

/// A 3x3 conv of 32 to 128 channels on a 7x7 map (GoogLeNet's inception
/// 5a), where the heuristic takes Winograd F(2x2): extraction follows the
/// profile. With the built-in one (im2col and F(2x2) measure alike
/// there, 0.033 and 0.032 ms by `dnnc tune`) it keeps the heuristic's
/// choice; with a profile whose im2col runs four times as fast and has
/// no fixed cost of its own, the model predicts im2col more than the
/// override margin faster and extraction records `algo=im2col`.
#[test]
fn conv_algorithms() {
    let src = "graph t {
           input %x: f32[1,32,7,7]
           param %w: f32[128,32,3,3] = he(seed=1)
           param %b: f32[128] = uniform(low=-1, high=1, seed=2)
           %c = Conv2d(%x, %w, %b) {pads=[1,1,1,1]}
           %r = Relu(%c)
           output %r
         }";
    let g = parse(src, "rule.dnn").unwrap();
    let (kept, _) = optimize(&g, &EGraphConfig::default()).unwrap();
    assert!(print(&kept).contains("algo=auto}"), "{}", print(&kept));
    let mut profile = crate::cost::MachineProfile::default();
    *profile.rates.get_mut("im2col").unwrap() *= 4.0;
    profile.fixed.insert("im2col".into(), profile.overhead);
    let cfg = EGraphConfig {
        weight_layouts: false,
        profile: std::sync::Arc::new(profile),
        ..Default::default()
    };
    let out = rule_effect_with("conv-algorithms", src, &cfg);
    assert!(
        out.ends_with("algo=im2col}\n  %r: f32[1,128,7,7] = Relu(%c)\n  output %r\n}\n"),
        "{out}"
    );
    insta::assert_snapshot!(out);
}

/// A 1x1 conv of 384 to 64 channels on a 7x7 map: in panels its 49
/// pixels fill 64 lanes, in lanes its 64 channels fill two 32-lane tiles
/// exactly, ~22% less micro-kernel work, so on an AVX-512 machine
/// extraction records `layout=lanes`; the same conv on a 56x56 map gains
/// nothing from lanes and keeps the backend's choice.
#[test]
fn weight_layouts() {
    if !super::algos::lanes_supported() {
        eprintln!(
            "SKIPPED weight_layouts: the lanes layout needs AVX-512F, which this machine lacks"
        );
        return;
    }
    let out = rule_effect(
        "weight-layouts",
        "graph t {
           input %x: f32[1,384,7,7]
           param %w: f32[64,384,1,1] = he(seed=1)
           %c = Conv2d(%x, %w)
           input %z: f32[1,64,56,56]
           param %w2: f32[64,64,1,1] = he(seed=2)
           %d = Conv2d(%z, %w2)
           output %c, %d
         }",
    );
    let after = out.split("--->").nth(1).unwrap();
    assert!(after.contains("algo=pointwise, layout=lanes}"), "{out}");
    assert!(
        after
            .lines()
            .any(|l| l.contains("%d: ") && !l.contains("layout=")),
        "{out}"
    );
    insta::assert_snapshot!(out);
}

/// Where the model's predicted gain is under the margin (ResNet-18's
/// 256-channel 14x14 convs: F(4x4) predicted ~15% faster than the
/// heuristic's F(2x2), measured ~15% slower), the heuristic stands: the
/// rule fires and the conv keeps `algo=auto`.
#[test]
fn a_small_predicted_gain_keeps_the_heuristic() {
    let g = parse(
        "graph t {
           input %x: f32[1,256,14,14]
           param %w: f32[256,256,3,3] = he(seed=1)
           %c = Conv2d(%x, %w) {pads=[1,1,1,1]}
           output %c
         }",
        "t.dnn",
    )
    .unwrap();
    let (out, stats) = optimize(&g, &EGraphConfig::default()).unwrap();
    assert!(
        stats.fired.contains_key("conv-algorithms"),
        "{:?}",
        stats.fired
    );
    assert!(print(&out).contains("algo=auto"), "{}", print(&out));
}

/// A grouped conv of 8-channel groups (RegNetY-400MF's 3x3 convs, here
/// 64 channels in 8 groups on 28x28 at batch 8), which the heuristic
/// sends to the grouped-8 kernel (`direct`): the cost model has no
/// figures for that kernel (it prices `direct` as the generic loop), so
/// extraction offers no alternative and the conv keeps `algo=auto`.
/// Offered them, it took Winograd (RegNetY-400MF at batch 8: 1.08 of the
/// default build). The same conv with 16-channel groups is offered the
/// GEMM-based algorithms as before.
#[test]
fn the_grouped8_kernel_keeps_its_convs() {
    let conv = |groups: usize| {
        let g = parse(
            &format!(
                "graph t {{
                   input %x: f32[8,64,28,28]
                   param %w: f32[64,{},3,3] = he(seed=1)
                   %c = Conv2d(%x, %w) {{pads=[1,1,1,1], group={groups}}}
                   output %c
                 }}",
                64 / groups
            ),
            "t.dnn",
        )
        .unwrap();
        let id = g
            .topo_order()
            .into_iter()
            .find(|&n| matches!(g.node(n).op, dnnc_ir::Op::Conv2d(_)))
            .unwrap();
        let geo = crate::ConvGeom::of_node(&g, id).unwrap();
        (g, geo)
    };
    let (g8, geo) = conv(8);
    assert!(geo.grouped8());
    assert_eq!(geo.default_algo(), dnnc_ir::op::ConvAlgo::Direct);
    assert!(super::algos::CHOICES.iter().all(|&a| !geo.offers(a)));
    let (out, _) = optimize(&g8, &EGraphConfig::default()).unwrap();
    assert!(
        print(&out).contains("group=8, algo=auto}"),
        "{}",
        print(&out)
    );
    let (_, geo) = conv(4);
    assert!(!geo.grouped8());
    assert!(super::algos::CHOICES.iter().any(|&a| geo.offers(a)));
}

/// Every rule in the table has a snapshot test above (a rule added
/// without one fails here).
#[test]
fn every_rule_has_a_snapshot() {
    let src = include_str!("tests.rs");
    for r in rules() {
        let test = format!("fn {}()", r.name.replace('-', "_"));
        assert!(src.contains(&test), "rule {} has no test `{test}`", r.name);
        assert!(!r.doc.is_empty());
    }
}

/// Zeros or ones that broadcast `x` to a bigger shape are not dropped.
#[test]
fn broadcasting_identities_do_not_fire() {
    let g = parse(
        "graph t {
           input %x: f32[3]
           param %z: f32[2,3] = zeros
           param %o: f32[2,1] = ones
           %a = Add(%x, %z)
           %b = Mul(%o, %x)
           %c = Add(%a, %b)
           output %c
         }",
        "t.dnn",
    )
    .unwrap();
    let (out, stats) = optimize(&g, &EGraphConfig::default()).unwrap();
    assert!(stats.fired.is_empty(), "{:?}", stats.fired);
    assert!(!stats.replaced);
    assert_eq!(print(&out), print(&g));
}

/// An output that becomes equal to another output or to an input keeps
/// its name.
#[test]
fn outputs_keep_their_names() {
    let g = parse(
        "graph t {
           input %x: f32[2,3]
           %a = Identity(%x)
           %b = Relu(%x)
           %c = Identity(%b)
           output %a, %b, %c
         }",
        "t.dnn",
    )
    .unwrap();
    let (out, _) = optimize(&g, &EGraphConfig::default()).unwrap();
    dnnc_ir::verify(&out).unwrap();
    let names: Vec<&str> = out
        .outputs()
        .iter()
        .map(|&v| out.value(v).name.as_str())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    same_outputs(&g, &out);
}

#[test]
fn zero_budgets_are_rejected() {
    let g = parse("graph t {\n input %x: f32[1]\n output %x\n}", "t.dnn").unwrap();
    for cfg in [
        EGraphConfig {
            node_limit: 0,
            ..Default::default()
        },
        EGraphConfig {
            iter_limit: 0,
            ..Default::default()
        },
        EGraphConfig {
            time_limit: std::time::Duration::ZERO,
            ..Default::default()
        },
    ] {
        let e = optimize(&g, &cfg).unwrap_err().to_string();
        assert!(e.contains("egraph") && e.contains("budget"), "{e}");
    }
}

#[test]
fn conv_over_average_pool() {
    // Padding counted in the divisor: the bias must go after the pool.
    insta::assert_snapshot!(rule_effect(
        "conv-over-average-pool",
        "graph t {
           input %x: f32[1,16,5,5]
           param %w: f32[4,16,1,1] = he(seed=1)
           param %b: f32[4] = uniform(low=-1, high=1, seed=2)
           %p = AveragePool(%x) {kernel=[3,3], strides=[1,1], pads=[1,1,1,1], count_include_pad=1}
           %c = Conv2d(%p, %w, %b) {}
           %r = Relu(%c)
           output %r
         }"
    ));
}

/// Without padding counted, and without a bias, the rewrite keeps the
/// outputs too; a conv with more outputs than inputs keeps its place
/// (the pool would average more channels).
#[test]
fn conv_over_average_pool_variants() {
    let g = "graph t {
           input %x: f32[1,16,6,6]
           param %w: f32[4,16,1,1] = he(seed=1)
           %p = AveragePool(%x) {kernel=[3,3], strides=[1,1], pads=[1,1,1,1]}
           %c = Conv2d(%p, %w) {}
           output %c
         }";
    rule_effect("conv-over-average-pool", g);
    let wide =
        dnnc_ir::text::parse(&g.replace("f32[4,16,1,1]", "f32[64,16,1,1]"), "wide.dnn").unwrap();
    let (out, _) = optimize(&wide, &EGraphConfig::default()).unwrap();
    let text = print(&out);
    let pool = text.find("AveragePool(%x)");
    assert!(pool.is_some(), "{text}");
}

#[test]
fn average_pool_over_conv() {
    // DenseNet's transition: the 2x2 pool of a 1x1 conv runs first, so
    // the conv multiplies a quarter of the pixels; the bias comes through
    // the average unchanged.
    insta::assert_snapshot!(rule_effect(
        "average-pool-over-conv",
        "graph t {
           input %x: f32[1,16,8,8]
           param %w: f32[8,16,1,1] = he(seed=1)
           param %b: f32[8] = uniform(low=-1, high=1, seed=2)
           %c = Conv2d(%x, %w, %b) {}
           %p = AveragePool(%c) {kernel=[2,2], strides=[2,2]}
           %r = Relu(%p)
           output %r
         }"
    ));
}

/// A pool that counts padding in its divisor would scale the bias at the
/// border: the rule leaves it alone.
#[test]
fn average_pool_counting_padding_stays_after_the_conv() {
    let g = parse(
        "graph t {
           input %x: f32[1,16,6,6]
           param %w: f32[8,16,1,1] = he(seed=1)
           param %b: f32[8] = uniform(low=-1, high=1, seed=2)
           %c = Conv2d(%x, %w, %b) {}
           %p = AveragePool(%c) {kernel=[3,3], strides=[1,1], pads=[1,1,1,1], count_include_pad=1}
           output %p
         }",
        "padded.dnn",
    )
    .unwrap();
    let (out, stats) = optimize(&g, &EGraphConfig::default()).unwrap();
    assert!(
        !stats.fired.contains_key("average-pool-over-conv"),
        "{:?}",
        stats.fired
    );
    same_outputs(&g, &out);
}
