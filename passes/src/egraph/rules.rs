//! The rewrite rules, one row each: name, one-line doc, rewrite. Plain
//! ones are egg patterns over op names (a pattern's op matches that op
//! with any attributes); the ones that read attributes (permutations,
//! shapes) or weights (splat values) add a condition or a small applier.

use super::algos::{algorithm_variants, auto_conv, layout_choice, layout_variants, ConvVariants};
use super::analysis::{TensorAnalysis, TensorGraph};
use super::lang::TensorNode;
use super::merge::{
    contractions_to_merge, convs_to_merge, unary_of_a_piece, MergeKind, MergeShared, UnaryOverSplit,
};
use dnnc_ir::op::{Binary, DataLayout};
use dnnc_ir::{Op, OpClass};
use egg::{
    rewrite as rw, Applier, Id, Pattern, PatternAst, Rewrite, SearchMatches, Searcher, Subst,
    Symbol, Var,
};

/// One rule of the library.
pub struct Rule {
    /// The name `--stats` reports.
    pub name: &'static str,
    /// What it does, in one line.
    pub doc: &'static str,
    /// The rewrite.
    pub rewrite: Rewrite<TensorNode, TensorAnalysis>,
}

/// Every rule, in the order the table reads.
pub fn rules() -> Vec<Rule> {
    let x: Var = "?x".parse().expect("variable");
    let row = |name: &'static str, doc: &'static str, rewrite| Rule { name, doc, rewrite };
    vec![
        row(
            "remove-identity",
            "Identity(x) = x",
            rw!("remove-identity"; "(Identity ?x)" => "?x"),
        ),
        row(
            "remove-dropout",
            "Dropout(x) = x at inference",
            rw!("remove-dropout"; "(Dropout ?x)" => "?x"),
        ),
        row(
            "relu-idempotent",
            "Relu(Relu(x)) = Relu(x)",
            rw!("relu-idempotent"; "(Relu (Relu ?x))" => "(Relu ?x)"),
        ),
        row(
            "double-negation",
            "Neg(Neg(x)) = x",
            rw!("double-negation"; "(Neg (Neg ?x))" => "?x"),
        ),
        // x op c = x where every element of the constant c is the op's
        // identity and c does not broadcast x to a bigger shape.
        unit("add-zero", "x + 0 = x (zeros that do not broadcast x)", "(Add ?x ?c)", 0.0),
        unit("zero-add", "0 + x = x (zeros that do not broadcast x)", "(Add ?c ?x)", 0.0),
        unit("sub-zero", "x - 0 = x (zeros that do not broadcast x)", "(Sub ?x ?c)", 0.0),
        unit("mul-one", "x * 1 = x (ones that do not broadcast x)", "(Mul ?x ?c)", 1.0),
        unit("one-mul", "1 * x = x (ones that do not broadcast x)", "(Mul ?c ?x)", 1.0),
        unit("div-one", "x / 1 = x (ones that do not broadcast x)", "(Div ?x ?c)", 1.0),
        row(
            "transpose-compose",
            "Transpose(Transpose(x)) = one Transpose of the composed permutation, or x",
            Rewrite::new(
                "transpose-compose",
                "(Transpose (Transpose ?x))"
                    .parse::<Pattern<TensorNode>>()
                    .expect("pattern"),
                ComposeTransposes { x },
            )
            .expect("rule"),
        ),
        row(
            "fold-mul-into-conv",
            "Conv2d(x, w, b) * s = Conv2d(x, w * s, b * s) for a per-output-channel weights-only s",
            Rewrite::new("fold-mul-into-conv", Follows::conv("Mul"), FoldIntoConv).expect("rule"),
        ),
        row(
            "fold-add-into-conv",
            "Conv2d(x, w, b) + t = Conv2d(x, w, b + t) for a per-output-channel weights-only t",
            Rewrite::new("fold-add-into-conv", Follows::conv("Add"), FoldIntoConv).expect("rule"),
        ),
        row(
            "fold-batchnorm-into-conv",
            "BatchNorm(Conv2d(x, w, b)) = Conv2d(x, w * k, (b - mean) * k + bias), k = scale / sqrt(var + eps)",
            Rewrite::new("fold-batchnorm-into-conv", Follows::conv("BatchNormalization"), FoldIntoConv).expect("rule"),
        ),
        row(
            "fold-mul-into-gemm",
            "Gemm(a, b, c) * s = Gemm(a, b * s, c * s) for a weights-only b and per-output-column s",
            Rewrite::new("fold-mul-into-gemm", Follows::gemm("Mul"), FoldIntoGemm).expect("rule"),
        ),
        row(
            "fold-add-into-gemm",
            "Gemm(a, b, c) + t = Gemm(a, b, c + t) for a per-output-column weights-only t (beta 1)",
            Rewrite::new("fold-add-into-gemm", Follows::gemm("Add"), FoldIntoGemm).expect("rule"),
        ),
        row(
            "split-of-concat",
            "result i of Split(Concat(x0, .., xn)) along one axis = xi when the pieces are the parts",
            Rewrite::new("split-of-concat", SplitOfConcat, SplitOfConcat).expect("rule"),
        ),
        row(
            "concat-of-split",
            "Concat of every result of Split(x), in order, along its axis = x",
            Rewrite::new("concat-of-split", ConcatOfSplit { x }, ReshapeTo { x }).expect("rule"),
        ),
        row(
            "unary-over-concat",
            "an elementwise unary op of a Concat = the Concat of the op on each part",
            Rewrite::new("unary-over-concat", UnaryOverConcat, UnaryOverConcat).expect("rule"),
        ),
        row(
            "unary-over-split",
            "an elementwise unary op of result i of a Split = result i of the Split of the op",
            Rewrite::new("unary-over-split", ClassWhere::new("?u", unary_of_a_piece), UnaryOverSplit).expect("rule"),
        ),
        row(
            "conv-over-average-pool",
            "Conv2d_1x1(AveragePool(x), w, b) = AveragePool(Conv2d_1x1(x, w)) + b: both are linear, so the pool runs on the conv's output channels",
            Rewrite::new("conv-over-average-pool", ClassWhere::new("?conv", conv_of_pool_class), ConvOverPool).expect("rule"),
        ),
        row(
            "average-pool-over-conv",
            "AveragePool(Conv2d_1x1(x, w, b)) = Conv2d_1x1(AveragePool(x), w, b) with no padding counted: the conv runs on the pooled map",
            Rewrite::new("average-pool-over-conv", ClassWhere::new("?pool", pool_of_conv_class), PoolOverConv).expect("rule"),
        ),
        row(
            "merge-convs",
            "Conv2ds of one input with one stride = one Conv2d of the concatenated (smaller ones zero-padded) filters, then Split",
            Rewrite::new("merge-convs", ClassWhere::new("?shared", convs_to_merge), MergeShared(MergeKind::Conv)).expect("rule"),
        ),
        row(
            "merge-matmuls",
            "MatMuls or Gemms of one left operand = one of the column-concatenated weights, then Split",
            Rewrite::new("merge-matmuls", ClassWhere::new("?shared", contractions_to_merge), MergeShared(MergeKind::Contraction)).expect("rule"),
        ),
        row(
            "conv-algorithms",
            "Conv2d{algo=auto} = the Conv2d with each algorithm that can compute it",
            Rewrite::new("conv-algorithms", ClassWhere::new("?conv", auto_conv), ConvVariants(algorithm_variants)).expect("rule"),
        ),
        row(
            "weight-layouts",
            "Conv2d{algo=im2col|pointwise, layout=auto} with a constant filter = the Conv2d with layout=lanes (output channels as vector lanes; AVX-512 machines)",
            Rewrite::new("weight-layouts", ClassWhere::new("?conv", layout_choice), ConvVariants(layout_variants)).expect("rule"),
        ),
        row(
            "view-chain",
            "a view (Reshape, Flatten, Squeeze, Unsqueeze) of a view = one Reshape",
            Rewrite::new("view-chain", ViewOfView { x }, ReshapeTo { x }).expect("rule"),
        ),
        row(
            "view-noop",
            "a view that keeps its operand's shape = the operand",
            Rewrite::new("view-noop", NoopView { x }, ReshapeTo { x }).expect("rule"),
        ),
    ]
}

/// The rule `lhs => ?x` for an op whose operand `?c` is its identity
/// element `v` (every element equal to it) and does not broadcast `?x`.
fn unit(name: &'static str, doc: &'static str, lhs: &str, v: f32) -> Rule {
    let lhs: Pattern<TensorNode> = lhs.parse().expect("pattern");
    let rhs: Pattern<TensorNode> = "?x".parse().expect("pattern");
    let applier = egg::ConditionalApplier {
        condition: keeps_type_with_splat("?x", "?c", v),
        applier: rhs,
    };
    Rule {
        name,
        doc,
        rewrite: Rewrite::new(name, lhs, applier).expect("rule"),
    }
}

/// `?x`'s type is the matched class's, and every element of `?c` is `v`.
fn keeps_type_with_splat(
    x: &'static str,
    c: &'static str,
    v: f32,
) -> impl Fn(&mut TensorGraph, Id, &Subst) -> bool {
    let (x, c): (Var, Var) = (x.parse().expect("var"), c.parse().expect("var"));
    move |eg, id, s| {
        let ty = eg[id].data.ty().cloned();
        ty.is_some() && eg[s[x]].data.ty() == ty.as_ref() && eg[s[c]].data.splat == Some(v)
    }
}

/// Merges every class of `ids` whose types are `eclass`'s into it; the
/// changed class, if any merge changed something (an applier's result).
pub(super) fn merge(
    eg: &mut TensorGraph,
    eclass: Id,
    ids: impl IntoIterator<Item = Id>,
    rule: Symbol,
) -> Vec<Id> {
    let mut changed = false;
    for id in ids {
        if eg[id].data.types == eg[eclass].data.types && eg.union_trusted(eclass, id, rule) {
            changed = true;
        }
    }
    if changed {
        vec![eclass]
    } else {
        vec![]
    }
}

/// A substitution binding one variable.
pub(super) fn bind(v: Var, id: Id) -> Subst {
    let mut s = Subst::with_capacity(1);
    s.insert(v, id);
    s
}

/// The matches of a searcher in `eclass`, if any.
pub(super) fn found(eclass: Id, substs: Vec<Subst>) -> Option<SearchMatches<'static, TensorNode>> {
    (!substs.is_empty()).then_some(SearchMatches {
        eclass,
        substs,
        ast: None,
    })
}

/// One match in `eclass` binding `v` to the class itself, when `hit`
/// (for searchers whose applier reads the matched nodes from the class).
fn found_any(
    eclass: Id,
    hit: bool,
    v: Var,
    eg: &TensorGraph,
) -> Option<SearchMatches<'static, TensorNode>> {
    found(
        eclass,
        if hit {
            vec![bind(v, eg.find(eclass))]
        } else {
            vec![]
        },
    )
}

/// Matches every e-class `hit` accepts, binding `var` to the class
/// itself: the searcher of the rules whose applier reads the matched
/// nodes from the class (merges, algorithm alternatives,
/// unary-over-split).
pub(super) struct ClassWhere {
    var: Var,
    hit: fn(&TensorGraph, Id) -> bool,
}

impl ClassWhere {
    fn new(var: &str, hit: fn(&TensorGraph, Id) -> bool) -> Self {
        ClassWhere {
            var: var.parse().expect("var"),
            hit,
        }
    }
}

impl Searcher<TensorNode, TensorAnalysis> for ClassWhere {
    fn search_eclass_with_limit(
        &self,
        eg: &TensorGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, TensorNode>> {
        found_any(eclass, limit > 0 && (self.hit)(eg, eclass), self.var, eg)
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.var]
    }
}

fn is_view(n: &TensorNode) -> bool {
    n.ir_op().is_some_and(|o| o.class() == OpClass::View) && n.children().len() == 1
}

use egg::Language;

/// Matches a view whose operand is a view: `?x` the inner view's operand.
struct ViewOfView {
    x: Var,
}

impl Searcher<TensorNode, TensorAnalysis> for ViewOfView {
    fn search_eclass_with_limit(
        &self,
        eg: &TensorGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, TensorNode>> {
        let mut substs = Vec::new();
        for outer in eg[eclass].iter().filter(|n| is_view(n)) {
            for inner in eg[outer.children()[0]].iter().filter(|n| is_view(n)) {
                let s = bind(self.x, eg.find(inner.children()[0]));
                if !substs.contains(&s) && substs.len() < limit {
                    substs.push(s);
                }
            }
        }
        found(eclass, substs)
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.x]
    }
}

/// Matches a view whose result type is its operand's: `?x` the operand.
struct NoopView {
    x: Var,
}

impl Searcher<TensorNode, TensorAnalysis> for NoopView {
    fn search_eclass_with_limit(
        &self,
        eg: &TensorGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, TensorNode>> {
        let ty = eg[eclass].data.ty()?;
        let substs: Vec<Subst> = eg[eclass]
            .iter()
            .filter(|n| is_view(n))
            .map(|n| eg.find(n.children()[0]))
            .filter(|&c| eg[c].data.ty() == Some(ty) && c != eg.find(eclass))
            .take(limit)
            .map(|c| bind(self.x, c))
            .collect();
        found(eclass, substs)
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.x]
    }
}

/// The matched class equals `?x` reshaped to the class's (static) shape:
/// `?x` itself when the shapes agree.
struct ReshapeTo {
    x: Var,
}

impl Applier<TensorNode, TensorAnalysis> for ReshapeTo {
    fn apply_one(
        &self,
        eg: &mut TensorGraph,
        eclass: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<TensorNode>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let x = subst[self.x];
        let (Some(want), Some(have)) = (eg[eclass].data.ty().cloned(), eg[x].data.ty().cloned())
        else {
            return vec![];
        };
        let id = if want == have {
            x
        } else {
            let shape = want.shape.iter().map(|&d| d as i64).collect();
            eg.add(TensorNode::op(Op::Reshape { shape }, vec![x]))
        };
        merge(eg, eclass, [id], rule)
    }
}

/// Transpose(p)(Transpose(q)(x)) = Transpose(q∘p)(x): output axis `i`
/// reads inner axis `p[i]`, which reads `x`'s axis `q[p[i]]`.
struct ComposeTransposes {
    x: Var,
}

impl Applier<TensorNode, TensorAnalysis> for ComposeTransposes {
    fn apply_one(
        &self,
        eg: &mut TensorGraph,
        eclass: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<TensorNode>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let x = eg.find(subst[self.x]);
        let mut perms = Vec::new();
        for outer in eg[eclass].iter() {
            let Some(Op::Transpose { perm: p }) = outer.ir_op() else {
                continue;
            };
            for inner in eg[outer.children()[0]].iter() {
                if let Some(Op::Transpose { perm: q }) = inner.ir_op() {
                    if eg.find(inner.children()[0]) == x && p.len() == q.len() {
                        perms.push(p.iter().map(|&i| q[i]).collect::<Vec<usize>>());
                    }
                }
            }
        }
        let ids: Vec<Id> = perms
            .into_iter()
            .map(|perm| {
                if perm.iter().enumerate().all(|(i, &a)| i == a) {
                    x
                } else {
                    eg.add(TensorNode::op(Op::Transpose { perm }, vec![x]))
                }
            })
            .collect();
        merge(eg, eclass, ids, rule)
    }
}

/// The axis of a Concat or Split node, normalised against the rank of its
/// (first) operand.
fn axis_of(eg: &TensorGraph, n: &TensorNode) -> Option<usize> {
    let axis = match n.ir_op()? {
        Op::Concat { axis } | Op::Split { axis, .. } => *axis,
        _ => return None,
    };
    let rank = eg[*n.children().first()?].data.ty()?.rank();
    dnnc_ir::infer::norm_axis(axis, rank).ok()
}

/// Matches `Get(i, Split(Concat(parts)))` whose split sizes are the
/// parts' sizes along the same axis; applies by merging the projection's
/// class with part `i`'s. (Searcher and applier in one: the match is the
/// pair of classes.)
struct SplitOfConcat;

/// `?get` and `?part`: the classes the rule merges.
fn pair_vars() -> (Var, Var) {
    ("?get".parse().expect("var"), "?part".parse().expect("var"))
}

impl Searcher<TensorNode, TensorAnalysis> for SplitOfConcat {
    fn search_eclass_with_limit(
        &self,
        eg: &TensorGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, TensorNode>> {
        let (gv, pv) = pair_vars();
        let mut substs = Vec::new();
        for get in eg[eclass].iter() {
            let TensorNode::Get(i, [t]) = get else {
                continue;
            };
            for split in eg[*t].iter() {
                let Some(Op::Split { split: sizes, .. }) = split.ir_op() else {
                    continue;
                };
                let Some(ax) = axis_of(eg, split) else {
                    continue;
                };
                for cat in eg[split.children()[0]].iter() {
                    if !matches!(cat.ir_op(), Some(Op::Concat { .. }))
                        || axis_of(eg, cat) != Some(ax)
                    {
                        continue;
                    }
                    let parts: Option<Vec<usize>> = cat
                        .children()
                        .iter()
                        .map(|&c| eg[c].data.ty().and_then(|t| t.shape.get(ax).copied()))
                        .collect();
                    if parts.as_deref() == Some(&sizes[..])
                        && *i < sizes.len()
                        && substs.len() < limit
                    {
                        let mut s = Subst::with_capacity(2);
                        s.insert(gv, eg.find(eclass));
                        s.insert(pv, eg.find(cat.children()[*i]));
                        substs.push(s);
                    }
                }
            }
        }
        found(eclass, substs)
    }

    fn vars(&self) -> Vec<Var> {
        let (g, p) = pair_vars();
        vec![g, p]
    }
}

impl Applier<TensorNode, TensorAnalysis> for SplitOfConcat {
    fn apply_one(
        &self,
        eg: &mut TensorGraph,
        _eclass: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<TensorNode>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let (gv, pv) = pair_vars();
        merge(eg, subst[gv], [subst[pv]], rule)
    }
}

/// Matches `Concat(Get(0, s), .., Get(n-1, s))` of every result of one
/// Split `s` of `?x`, in order, along the Split's axis.
struct ConcatOfSplit {
    x: Var,
}

impl Searcher<TensorNode, TensorAnalysis> for ConcatOfSplit {
    fn search_eclass_with_limit(
        &self,
        eg: &TensorGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, TensorNode>> {
        let mut substs = Vec::new();
        for cat in eg[eclass].iter() {
            if !matches!(cat.ir_op(), Some(Op::Concat { .. })) {
                continue;
            }
            let Some(ax) = axis_of(eg, cat) else { continue };
            // Part k must hold Get(k, s) for one split s of every part.
            let Some(first) = cat.children().first() else {
                continue;
            };
            for g0 in eg[*first].iter() {
                let TensorNode::Get(0, [s]) = g0 else {
                    continue;
                };
                let s = eg.find(*s);
                let all = cat.children().iter().enumerate().all(|(k, &c)| {
                    eg[c].iter().any(
                        |n| matches!(n, TensorNode::Get(i, [t]) if *i == k && eg.find(*t) == s),
                    )
                });
                for split in eg[s].iter() {
                    let Some(Op::Split { split: sizes, .. }) = split.ir_op() else {
                        continue;
                    };
                    if all
                        && sizes.len() == cat.children().len()
                        && axis_of(eg, split) == Some(ax)
                        && substs.len() < limit
                    {
                        substs.push(bind(self.x, eg.find(split.children()[0])));
                    }
                }
            }
        }
        found(eclass, substs)
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.x]
    }
}

/// Matches an elementwise unary op (Relu, Sigmoid, Clip, ...) of a
/// Concat; applies by adding the Concat of the op on each part.
struct UnaryOverConcat;

fn unary_var() -> Var {
    "?u".parse().expect("var")
}

impl Searcher<TensorNode, TensorAnalysis> for UnaryOverConcat {
    fn search_eclass_with_limit(
        &self,
        eg: &TensorGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, TensorNode>> {
        let hit = eg[eclass].iter().any(|n| {
            matches!(n.ir_op(), Some(Op::Unary(_)))
                && n.children().len() == 1
                && eg[n.children()[0]]
                    .iter()
                    .any(|c| matches!(c.ir_op(), Some(Op::Concat { .. })))
        });
        found_any(eclass, hit && limit > 0, unary_var(), eg)
    }

    fn vars(&self) -> Vec<Var> {
        vec![unary_var()]
    }
}

impl Applier<TensorNode, TensorAnalysis> for UnaryOverConcat {
    fn apply_one(
        &self,
        eg: &mut TensorGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<TensorNode>>,
        rule: Symbol,
    ) -> Vec<Id> {
        // (unary op, concat op, parts) of every match, collected before
        // the e-graph changes.
        let mut found: Vec<(Op, Op, Vec<Id>)> = Vec::new();
        for n in eg[eclass].iter() {
            let Some(u @ Op::Unary(_)) = n.ir_op() else {
                continue;
            };
            for cat in eg[n.children()[0]].iter() {
                if let Some(c @ Op::Concat { .. }) = cat.ir_op() {
                    found.push((u.clone(), c.clone(), cat.children().to_vec()));
                }
            }
        }
        let mut ids = Vec::new();
        for (u, c, parts) in found {
            let mapped: Vec<Id> = parts
                .into_iter()
                .map(|p| eg.add(TensorNode::op(u.clone(), vec![p])))
                .collect();
            ids.push(eg.add(TensorNode::op(c, mapped)));
        }
        merge(eg, eclass, ids, rule)
    }
}

/// `?conv`: the class a [`Follows`] match binds (the matched op's own).
fn conv_var() -> Var {
    "?conv".parse().expect("var")
}

/// Whether `t` holds one value per output channel of a conv result
/// `[N, m, H, W]` for op `op`: BatchNormalization's `[m]` operands are
/// per channel by definition; an elementwise operand must broadcast along
/// the channel axis, `[m,1,1]` or `[1,m,1,1]` (a `[m]` would scale
/// columns).
fn per_channel(op: &str, t: &dnnc_ir::TensorType, m: usize) -> bool {
    match (op, &t.shape[..]) {
        ("BatchNormalization", [a]) => *a == m,
        ("BatchNormalization", _) => false,
        (_, [a, 1, 1] | [1, a, 1, 1]) => *a == m,
        _ => false,
    }
}

/// Folds the matched per-channel op into the conv's weights: the new
/// filter and bias are weights-only expressions (computed once by
/// `fold-weights`), so the conv with them costs what the conv alone did.
struct FoldIntoConv;

impl Applier<TensorNode, TensorAnalysis> for FoldIntoConv {
    fn apply_one(
        &self,
        eg: &mut TensorGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<TensorNode>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let Some(m) = eg[eclass].data.ty().and_then(|t| t.shape.get(1).copied()) else {
            return vec![];
        };
        // (op, its per-channel operands, the conv op, the conv's operands).
        let mut found: Vec<(Op, Vec<Id>, Op, Vec<Id>)> = Vec::new();
        for n in eg[eclass].iter() {
            let Some(op) = n.ir_op() else { continue };
            if !matches!(
                op,
                Op::Binary(Binary::Mul | Binary::Add) | Op::BatchNormalization { .. }
            ) {
                continue;
            }
            for c in eg[n.children()[0]].iter() {
                if let Some(cop @ Op::Conv2d(cp)) = c.ir_op() {
                    // Per-channel operands broadcast over NCHW only.
                    if cp.data != DataLayout::Nchw {
                        continue;
                    }
                    found.push((
                        op.clone(),
                        n.children()[1..].to_vec(),
                        cop.clone(),
                        c.children().to_vec(),
                    ));
                }
            }
        }
        let mi = m as i64;
        let mut folded = Vec::new();
        for (op, params, cop, cargs) in found {
            let name = op.name();
            if params.iter().any(|&p| {
                !eg[p].data.weights_only
                    || !eg[p].data.ty().is_some_and(|t| per_channel(name, t, m))
            }) {
                continue;
            }
            let add =
                |eg: &mut TensorGraph, op: Op, args: Vec<Id>| eg.add(TensorNode::op(op, args));
            let flat = |eg: &mut TensorGraph, v: Id| {
                eg.add(TensorNode::op(Op::Reshape { shape: vec![mi] }, vec![v]))
            };
            let (x, w) = (cargs[0], cargs[1]);
            let w_rank = eg[w].data.ty().map_or(4, |t| t.rank());
            let mut col = vec![mi];
            col.resize(w_rank, 1);
            let column = |eg: &mut TensorGraph, v: Id| {
                eg.add(TensorNode::op(Op::Reshape { shape: col.clone() }, vec![v]))
            };
            let bias = cargs.get(2).copied();
            let (w2, b2) = match op {
                Op::Binary(Binary::Mul) => {
                    let s = flat(eg, params[0]);
                    let sc = column(eg, s);
                    let w2 = add(eg, Op::Binary(Binary::Mul), vec![w, sc]);
                    let b2 = bias.map(|b| add(eg, Op::Binary(Binary::Mul), vec![b, s]));
                    (w2, b2)
                }
                Op::Binary(Binary::Add) => {
                    let t = flat(eg, params[0]);
                    let b2 = match bias {
                        Some(b) => add(eg, Op::Binary(Binary::Add), vec![b, t]),
                        None => t,
                    };
                    (w, Some(b2))
                }
                Op::BatchNormalization { epsilon } => {
                    if params.len() != 4 {
                        continue;
                    }
                    let [scale, shift, mean, var] =
                        [params[0], params[1], params[2], params[3]].map(|p| flat(eg, p));
                    let eps = add(
                        eg,
                        Op::ConstantOfShape {
                            shape: vec![m],
                            value: dnnc_ir::op::Scalar::F32(epsilon),
                        },
                        vec![],
                    );
                    let ve = add(eg, Op::Binary(Binary::Add), vec![var, eps]);
                    let sd = add(eg, Op::Unary(dnnc_ir::op::Unary::Sqrt), vec![ve]);
                    let k = add(eg, Op::Binary(Binary::Div), vec![scale, sd]);
                    let kc = column(eg, k);
                    let w2 = add(eg, Op::Binary(Binary::Mul), vec![w, kc]);
                    let centred = match bias {
                        Some(b) => add(eg, Op::Binary(Binary::Sub), vec![b, mean]),
                        None => add(eg, Op::Unary(dnnc_ir::op::Unary::Neg), vec![mean]),
                    };
                    let scaled = add(eg, Op::Binary(Binary::Mul), vec![centred, k]);
                    (
                        w2,
                        Some(add(eg, Op::Binary(Binary::Add), vec![scaled, shift])),
                    )
                }
                _ => continue,
            };
            let mut args = vec![x, w2];
            args.extend(b2);
            folded.push(add(eg, cop, args));
        }
        merge(eg, eclass, folded, rule)
    }
}

/// Whether `t` holds one value per output column of a Gemm result
/// `[M, n]`: `[n]` or `[1, n]`.
fn per_column(t: &dnnc_ir::TensorType, n: usize) -> bool {
    matches!(t.shape[..], [a] | [1, a] if a == n)
}

/// Matches an op named `op` (Mul, Add, BatchNormalization) whose first
/// operand's class holds a node `producer` accepts, of the same type, and
/// whose other operands are weights-only with types `operand` accepts
/// (given the op name and the result's axis-1 extent: channels of a conv,
/// columns of a Gemm). The applier reads the matched nodes from the class.
struct Follows {
    op: &'static str,
    producer: fn(&TensorGraph, &TensorNode) -> bool,
    operand: fn(&str, &dnnc_ir::TensorType, usize) -> bool,
}

impl Follows {
    /// `op` after a Conv2d, with per-output-channel operands.
    fn conv(op: &'static str) -> Self {
        Follows {
            op,
            producer: |_, n| matches!(n.ir_op(), Some(Op::Conv2d(p)) if p.data == DataLayout::Nchw),
            operand: per_channel,
        }
    }

    /// `op` after a Gemm whose B is weights-only, with per-output-column
    /// operands.
    fn gemm(op: &'static str) -> Self {
        Follows {
            op,
            producer: |eg, n| {
                matches!(n.ir_op(), Some(Op::Gemm(_))) && eg[n.children()[1]].data.weights_only
            },
            operand: |_, t, n| per_column(t, n),
        }
    }
}

impl Searcher<TensorNode, TensorAnalysis> for Follows {
    fn search_eclass_with_limit(
        &self,
        eg: &TensorGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, TensorNode>> {
        let ty = eg[eclass].data.ty()?;
        let m = *ty.shape.get(1)?;
        let hit = eg[eclass].iter().any(|n| {
            n.op_name() == Some(self.op)
                && n.children().len() >= 2
                && n.children()[1..].iter().all(|&c| {
                    eg[c].data.weights_only
                        && eg[c]
                            .data
                            .ty()
                            .is_some_and(|t| (self.operand)(self.op, t, m))
                })
                && eg[n.children()[0]].iter().any(|p| (self.producer)(eg, p))
                && eg[n.children()[0]].data.ty() == Some(ty)
        });
        found_any(eclass, hit && limit > 0, conv_var(), eg)
    }

    fn vars(&self) -> Vec<Var> {
        vec![conv_var()]
    }
}

/// Folds the matched per-column Mul or Add into the Gemm's B and C.
struct FoldIntoGemm;

impl Applier<TensorNode, TensorAnalysis> for FoldIntoGemm {
    fn apply_one(
        &self,
        eg: &mut TensorGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<TensorNode>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let Some(n) = eg[eclass].data.ty().and_then(|t| t.shape.get(1).copied()) else {
            return vec![];
        };
        // (Mul or Add, its operand, the Gemm's attributes, its operands).
        let mut found: Vec<(Binary, Id, dnnc_ir::op::Gemm, Vec<Id>)> = Vec::new();
        for m in eg[eclass].iter() {
            let Some(Op::Binary(b @ (Binary::Mul | Binary::Add))) = m.ir_op() else {
                continue;
            };
            if m.children().len() != 2 {
                continue;
            }
            for g in eg[m.children()[0]].iter() {
                if let Some(Op::Gemm(p)) = g.ir_op() {
                    found.push((*b, m.children()[1], p.clone(), g.children().to_vec()));
                }
            }
        }
        let ni = n as i64;
        let mut folded = Vec::new();
        for (b, s, p, args) in found {
            let (a, bw) = (args[0], args[1]);
            if !eg[s].data.weights_only
                || !eg[bw].data.weights_only
                || !eg[s].data.ty().is_some_and(|t| per_column(t, n))
            {
                continue;
            }
            let add =
                |eg: &mut TensorGraph, op: Op, args: Vec<Id>| eg.add(TensorNode::op(op, args));
            let flat = add(eg, Op::Reshape { shape: vec![ni] }, vec![s]);
            let c = args.get(2).copied();
            let (gemm, new_args) = match b {
                Binary::Mul => {
                    // op(B)'s columns are B's rows when B is transposed.
                    let sb = if p.trans_b {
                        add(eg, Op::Reshape { shape: vec![ni, 1] }, vec![flat])
                    } else {
                        flat
                    };
                    let b2 = add(eg, Op::Binary(Binary::Mul), vec![bw, sb]);
                    let mut v = vec![a, b2];
                    v.extend(c.map(|c| add(eg, Op::Binary(Binary::Mul), vec![c, flat])));
                    (p.clone(), v)
                }
                Binary::Add => match c {
                    Some(c) if p.beta == 1.0 => {
                        let c2 = add(eg, Op::Binary(Binary::Add), vec![c, flat]);
                        (p.clone(), vec![a, bw, c2])
                    }
                    Some(_) => continue,
                    None => {
                        let mut q = p.clone();
                        q.beta = 1.0;
                        (q, vec![a, bw, flat])
                    }
                },
                _ => continue,
            };
            folded.push(add(eg, Op::Gemm(gemm), new_args));
        }
        merge(eg, eclass, folded, rule)
    }
}

/// A 1x1, stride-1, unpadded, ungrouped Conv2d with a weights-only
/// filter (and bias) whose input is an AveragePool: `(conv attributes,
/// pool attributes, the pool's input, filter, bias)`.
type ConvOfPool = (dnnc_ir::op::Conv2d, dnnc_ir::op::Pool2d, Id, Id, Option<Id>);

/// `n` as a [`ConvOfPool`], if it is one. Any average pool qualifies:
/// each of its outputs is a fixed combination of its inputs (divisors
/// included, with or without padding), so it commutes with the per-pixel
/// linear map `w`; the bias, constant per channel, is added after the
/// pool, where an average with padding counted would have scaled it.
fn conv_of_pool(eg: &TensorGraph, n: &TensorNode) -> Option<ConvOfPool> {
    let (p, src, w, b) = plain_1x1_conv(eg, n)?;
    eg[src]
        .iter()
        .find_map(|m| match (m.ir_op(), m.children()) {
            (Some(Op::AveragePool(q)), &[x]) => Some((p.clone(), q.clone(), x, w, b)),
            _ => None,
        })
}

/// `n` as a 1x1 conv both pool rules commute, `(conv, x, w, b)`: one
/// group, stride 1, no padding, NCHW, a weights-only filter (and bias).
fn plain_1x1_conv(
    eg: &TensorGraph,
    n: &TensorNode,
) -> Option<(dnnc_ir::op::Conv2d, Id, Id, Option<Id>)> {
    let Some(Op::Conv2d(p)) = n.ir_op() else {
        return None;
    };
    if p.group != 1 || p.strides != [1, 1] || p.pads != [0; 4] || p.data != DataLayout::Nchw {
        return None;
    }
    let ch = n.children();
    let (&x, &w) = (ch.first()?, ch.get(1)?);
    let one_by_one = eg[w]
        .data
        .ty()
        .is_some_and(|t| t.rank() == 4 && t.shape[2] == 1 && t.shape[3] == 1);
    if ch.len() > 3 || !one_by_one || !ch[1..].iter().all(|&c| eg[c].data.weights_only) {
        return None;
    }
    Some((p.clone(), x, w, ch.get(2).copied()))
}

/// Whether class `c` holds a [`ConvOfPool`] (`conv-over-average-pool`'s
/// match).
fn conv_of_pool_class(eg: &TensorGraph, c: Id) -> bool {
    eg[c].iter().any(|n| conv_of_pool(eg, n).is_some())
}

/// An average pool of a 1x1 conv as `(pool, conv, x, w, b)`: the pool
/// divides each window's sum by its count of input taps (no padding, or
/// padding not counted), so the bias, the same in every tap, comes
/// through the average unchanged, and the per-pixel linear map `w`
/// commutes with it.
type PoolOfConv = (dnnc_ir::op::Pool2d, dnnc_ir::op::Conv2d, Id, Id, Option<Id>);

/// `n` as a [`PoolOfConv`], if it is one.
fn pool_of_conv(eg: &TensorGraph, n: &TensorNode) -> Option<PoolOfConv> {
    let Some(Op::AveragePool(q)) = n.ir_op() else {
        return None;
    };
    if q.pads != [0; 4] && q.count_include_pad {
        return None;
    }
    let &[src] = n.children() else {
        return None;
    };
    eg[src]
        .iter()
        .find_map(|m| plain_1x1_conv(eg, m).map(|(p, x, w, b)| (q.clone(), p, x, w, b)))
}

/// Whether class `c` holds a [`PoolOfConv`] (`average-pool-over-conv`'s
/// match).
fn pool_of_conv_class(eg: &TensorGraph, c: Id) -> bool {
    eg[c].iter().any(|n| pool_of_conv(eg, n).is_some())
}

/// Adds `Conv2d(AveragePool(x), w, b)` for each [`PoolOfConv`] of the
/// class: the conv then multiplies the pooled map (DenseNet's
/// transitions: 2x2 pools, a quarter of the conv's work), the pool
/// averaging its `C` input channels instead of its `M` outputs.
/// Extraction keeps it where the cost model finds it cheaper.
struct PoolOverConv;

impl Applier<TensorNode, TensorAnalysis> for PoolOverConv {
    fn apply_one(
        &self,
        eg: &mut TensorGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<TensorNode>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let found: Vec<PoolOfConv> = eg[eclass]
            .iter()
            .filter_map(|n| pool_of_conv(eg, n))
            .collect();
        let mut ids = Vec::new();
        for (q, p, x, w, b) in found {
            let pool = eg.add(TensorNode::op(Op::AveragePool(q), vec![x]));
            let mut ch = vec![pool, w];
            ch.extend(b);
            ids.push(eg.add(TensorNode::op(Op::Conv2d(p), ch)));
        }
        merge(eg, eclass, ids, rule)
    }
}

/// Adds `AveragePool(Conv2d(x, w)) + b` for each [`ConvOfPool`] of the
/// class: the pool then averages the conv's `M` output channels instead
/// of its `C` input channels (Inception-v3's pool branches: 768 -> 192),
/// and the bias, reshaped to `[M, 1, 1]`, fuses into the pool's epilogue.
/// Extraction keeps it where the cost model finds it cheaper.
struct ConvOverPool;

impl Applier<TensorNode, TensorAnalysis> for ConvOverPool {
    fn apply_one(
        &self,
        eg: &mut TensorGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<TensorNode>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let found: Vec<ConvOfPool> = eg[eclass]
            .iter()
            .filter_map(|n| conv_of_pool(eg, n))
            .collect();
        let mut ids = Vec::new();
        for (p, q, x, w, b) in found {
            let m = eg[w].data.ty().map_or(0, |t| t.shape[0]);
            let conv = eg.add(TensorNode::op(Op::Conv2d(p), vec![x, w]));
            let pool = eg.add(TensorNode::op(Op::AveragePool(q), vec![conv]));
            ids.push(match b {
                Some(b) => {
                    let shape = vec![m as i64, 1, 1];
                    let b = eg.add(TensorNode::op(Op::Reshape { shape }, vec![b]));
                    eg.add(TensorNode::op(Op::Binary(Binary::Add), vec![pool, b]))
                }
                None => pool,
            });
        }
        merge(eg, eclass, ids, rule)
    }
}
