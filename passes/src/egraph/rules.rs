//! The rewrite rules, one row each: name, one-line doc, rewrite. Plain
//! ones are egg patterns over op names (a pattern's op matches that op
//! with any attributes); the ones that read attributes (permutations,
//! shapes) or weights (splat values) add a condition or a small applier.

use super::analysis::{TensorAnalysis, TensorGraph};
use super::lang::TensorNode;
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
        unit("add-zero", "x + 0 = x", "(Add ?x ?c)", 0.0),
        unit("zero-add", "0 + x = x", "(Add ?c ?x)", 0.0),
        unit("sub-zero", "x - 0 = x", "(Sub ?x ?c)", 0.0),
        unit("mul-one", "x * 1 = x", "(Mul ?x ?c)", 1.0),
        unit("one-mul", "1 * x = x", "(Mul ?c ?x)", 1.0),
        unit("div-one", "x / 1 = x", "(Div ?x ?c)", 1.0),
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
                let mut s = Subst::with_capacity(1);
                s.insert(self.x, eg.find(inner.children()[0]));
                if !substs.contains(&s) && substs.len() < limit {
                    substs.push(s);
                }
            }
        }
        (!substs.is_empty()).then_some(SearchMatches {
            eclass,
            substs,
            ast: None,
        })
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
            .map(|c| {
                let mut s = Subst::with_capacity(1);
                s.insert(self.x, c);
                s
            })
            .collect();
        (!substs.is_empty()).then_some(SearchMatches {
            eclass,
            substs,
            ast: None,
        })
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
        if eg.union_trusted(eclass, id, rule) {
            vec![eclass]
        } else {
            vec![]
        }
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
        let mut changed = vec![];
        for perm in perms {
            let id = if perm.iter().enumerate().all(|(i, &a)| i == a) {
                x
            } else {
                eg.add(TensorNode::op(Op::Transpose { perm }, vec![x]))
            };
            if eg.union_trusted(eclass, id, rule) {
                changed.push(eclass);
            }
        }
        changed
    }
}
