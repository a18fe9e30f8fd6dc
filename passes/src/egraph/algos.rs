//! Algorithm alternatives as e-nodes: a Conv2d that leaves its algorithm
//! to the backend (`algo=auto`) is equal to the same Conv2d with each
//! algorithm that can compute it (`ConvGeom::unfit` says which), so
//! extraction chooses the algorithm by the cost model, together with
//! every other rewrite (a merged conv gets its own choice).
//!
//! The cost model's median error per kernel is about 20% (the figure
//! `dnnc tune` reports), and the heuristic's choice is within 10% of the
//! measured best on more layers than the model's. So the model overrides
//! the heuristic only where it predicts a clear gain: an algorithm other
//! than the heuristic's is priced [`OVERRIDE_MARGIN`] above its
//! prediction ([`crate::egraph::cost`]).

use super::analysis::{TensorAnalysis, TensorGraph};
use super::lang::TensorNode;
use super::rules::merge;
use crate::conv_algo::ConvGeom;
use dnnc_ir::op::{Conv2d, ConvAlgo, WeightLayout};
use dnnc_ir::Op;
use egg::{Applier, Id, Language, PatternAst, Subst, Symbol};

/// How much faster than the heuristic's choice the model must predict an
/// algorithm to be before extraction takes it: the model's median
/// per-kernel error.
pub const OVERRIDE_MARGIN: f64 = 0.2;

/// The algorithms a Conv2d may be given explicitly: the GEMM-based ones.
/// The direct loop (for a conv that is not depthwise) is 20-50x slower
/// than them wherever `dnnc tune` measured it, and the model's FFT
/// figures are its least reliable (3x3 layers predicted ~40% fast, its
/// fixed cost not fitted by `dnnc calibrate` on this machine class), so
/// the heuristic alone chooses those two (FFT for large kernels with few
/// channels).
pub(crate) const CHOICES: [ConvAlgo; 5] = [
    ConvAlgo::Im2col,
    ConvAlgo::Pointwise,
    ConvAlgo::Depthwise,
    ConvAlgo::Winograd2,
    ConvAlgo::Winograd4,
];

/// Whether extraction may give a conv algorithm `name` of its own
/// accord: im2col, pointwise, depthwise, Winograd F(2x2) or F(4x4).
pub fn offered(name: &str) -> bool {
    CHOICES.iter().any(|a| a.name() == name)
}

/// What extraction charges a conv of `shape` computed with `algo` when
/// the heuristic would take `heuristic`: the profile's prediction, and
/// [`OVERRIDE_MARGIN`] more for another algorithm than the heuristic's.
pub fn extraction_price(
    profile: &crate::cost::MachineProfile,
    shape: &crate::wd::conv::ConvShape,
    algo: &str,
    heuristic: &str,
) -> Option<f64> {
    let t = profile.predict_conv(algo, shape)?;
    Some(if algo == heuristic {
        t
    } else {
        t * (1.0 + OVERRIDE_MARGIN)
    })
}

/// [`extraction_price`] for a conv whose packed filter is laid out as
/// `layout`: a chosen layout scales the time by its micro-kernel work
/// relative to `panels` ([`crate::cost::layout_factor`]) and, as a
/// departure from the backend's own choice, pays [`OVERRIDE_MARGIN`]
/// too; `auto` is priced as `panels`.
pub fn layout_price(
    profile: &crate::cost::MachineProfile,
    shape: &crate::wd::conv::ConvShape,
    (algo, heuristic): (&str, &str),
    layout: WeightLayout,
) -> Option<f64> {
    let t = extraction_price(profile, shape, algo, heuristic)?;
    if layout == WeightLayout::Auto {
        return Some(t);
    }
    let f = crate::cost::layout_factor(layout, algo, shape)?;
    Some(t * f * (1.0 + OVERRIDE_MARGIN))
}

/// The algorithm extraction gives a conv of `shape` among `candidates`
/// (the heuristic's choice and the [`offered`] ones that apply): the one
/// with the lowest [`extraction_price`], the heuristic's on a tie. `dnnc
/// tune` judges the optimiser by this choice.
pub fn optimiser_choice<'a>(
    profile: &crate::cost::MachineProfile,
    shape: &crate::wd::conv::ConvShape,
    heuristic: &'a str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> &'a str {
    let mut best = (
        heuristic,
        extraction_price(profile, shape, heuristic, heuristic).unwrap_or(f64::INFINITY),
    );
    for a in candidates {
        if !offered(a) {
            continue;
        }
        if let Some(t) = extraction_price(profile, shape, a, heuristic) {
            if t < best.1 {
                best = (a, t);
            }
        }
    }
    best.0
}

/// The geometry of a Conv2d e-node, when its operand types are known.
pub fn geometry(eg: &TensorGraph, n: &TensorNode) -> Option<ConvGeom> {
    let Some(Op::Conv2d(p)) = n.ir_op() else {
        return None;
    };
    let x = eg[*n.children().first()?].data.ty()?;
    let w = eg[*n.children().get(1)?].data.ty()?;
    let ins: Vec<&dnnc_ir::TensorType> = n
        .children()
        .iter()
        .map(|&c| eg[c].data.ty())
        .collect::<Option<_>>()?;
    let y = dnnc_ir::infer::infer(n.ir_op()?, &ins).ok()?;
    let const_w = eg[n.children()[1]].data.weights_only;
    ConvGeom::from_shapes(p, &x.shape, &w.shape, &y.first()?.shape, const_w).ok()
}

/// `(attributes, operands, algorithms that apply)` of every `algo=auto`
/// Conv2d in `eclass`.
fn alternatives(eg: &TensorGraph, eclass: Id) -> Vec<(Conv2d, Vec<Id>, Vec<ConvAlgo>)> {
    let mut out = Vec::new();
    for n in eg[eclass].iter() {
        let Some(Op::Conv2d(p)) = n.ir_op() else {
            continue;
        };
        if p.algo != ConvAlgo::Auto {
            continue;
        }
        let Some(geo) = geometry(eg, n) else { continue };
        let fits: Vec<ConvAlgo> = CHOICES.into_iter().filter(|&a| geo.offers(a)).collect();
        out.push((p.clone(), n.children().to_vec(), fits));
    }
    out
}

/// Whether this machine's CPU backend can lay packed filters out as
/// `lanes` (its AVX-512 micro-kernel): the default of
/// [`super::EGraphConfig::weight_layouts`].
pub fn lanes_supported() -> bool {
    dnnc_ir::isa::cpu_isa() == dnnc_ir::isa::CpuIsa::Avx512
}

/// `(attributes, operands)` of every Conv2d in `eclass` whose algorithm
/// runs on a packed filter (explicit `im2col` or `pointwise`, a filter
/// known at compile time) and whose layout is left to the backend.
fn layout_free(eg: &TensorGraph, eclass: Id) -> Vec<(Conv2d, Vec<Id>)> {
    let mut out = Vec::new();
    for n in eg[eclass].iter() {
        let Some(Op::Conv2d(p)) = n.ir_op() else {
            continue;
        };
        let packed = matches!(p.algo, ConvAlgo::Im2col | ConvAlgo::Pointwise);
        if !packed || p.layout != WeightLayout::Auto {
            continue;
        }
        let Some(&w) = n.children().get(1) else {
            continue;
        };
        if eg[w].data.weights_only && geometry(eg, n).is_some_and(|g| g.unfit(p.algo).is_none()) {
            out.push((p.clone(), n.children().to_vec()));
        }
    }
    out
}

/// Whether class `c` holds a packed-filter Conv2d with its layout left
/// to the backend (`weight-layouts`'s match; the rule runs only where
/// [`super::EGraphConfig::weight_layouts`] says the machine has a
/// choice).
pub fn layout_choice(eg: &TensorGraph, c: Id) -> bool {
    !layout_free(eg, c).is_empty()
}

/// The `weight-layouts` variants of class `c`: each packed-filter
/// Conv2d of `layout=auto` with `layout=lanes` (`panels` is what the cost
/// model prices `auto` as, so it adds no choice).
pub fn layout_variants(eg: &TensorGraph, c: Id) -> Vec<(Conv2d, Vec<Id>)> {
    layout_free(eg, c)
        .into_iter()
        .map(|(mut p, args)| {
            p.layout = WeightLayout::Lanes;
            (p, args)
        })
        .collect()
}

/// The `conv-algorithms` variants of class `c`: each `algo=auto` Conv2d
/// with every algorithm that applies.
pub fn algorithm_variants(eg: &TensorGraph, c: Id) -> Vec<(Conv2d, Vec<Id>)> {
    alternatives(eg, c)
        .into_iter()
        .flat_map(|(p, args, fits)| {
            fits.into_iter().map(move |a| {
                let mut q = p.clone();
                q.algo = a;
                (q, args.clone())
            })
        })
        .collect()
}

/// An applier adding, to the matched class, the Conv2d variants its
/// function lists for it (`conv-algorithms` with
/// [`algorithm_variants`], `weight-layouts` with [`layout_variants`]).
pub struct ConvVariants(pub VariantsOf);

/// Lists a class's Conv2d variants: `(attributes, operands)` each.
pub type VariantsOf = fn(&TensorGraph, Id) -> Vec<(Conv2d, Vec<Id>)>;

impl Applier<TensorNode, TensorAnalysis> for ConvVariants {
    fn apply_one(
        &self,
        eg: &mut TensorGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<TensorNode>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let ids: Vec<Id> = (self.0)(eg, eclass)
            .into_iter()
            .map(|(p, args)| eg.add(TensorNode::op(Op::Conv2d(p), args)))
            .collect();
        merge(eg, eclass, ids, rule)
    }
}

/// Whether class `c` holds an `algo=auto` Conv2d (`conv-algorithms`'s
/// match).
pub fn auto_conv(eg: &TensorGraph, c: Id) -> bool {
    !alternatives(eg, c).is_empty()
}
