//! Operator fusion as an overlay: [`fuse`] groups IR nodes into kernels that
//! a backend compiles as one loop nest each, without changing the IR.
//!
//! Rules, after TVM's op patterns (classes from [`Op::class`]):
//! - a contraction (Conv2d, MatMul, Gemm, ...) or a reduction (pooling,
//!   softmax, reduce, normalisations) anchors a kernel and absorbs the chain
//!   of elementwise ops that follows it (bias Add, per-channel Mul/Add,
//!   activations, a residual Add of a same-shaped tensor computed
//!   elsewhere), as long as each absorbed op's result has the anchor's result
//!   type, and each value it extends has exactly one user and is not a graph
//!   output — or several users that all meet again at one elementwise node
//!   within a few single-user steps (SiLU's `x * sigmoid(x)`, GELU), which
//!   are absorbed together;
//! - a chain of elementwise ops not following an anchor fuses the same way
//!   into one elementwise kernel;
//! - views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) are
//!   single-node View kernels (zero-copy aliases), and data movement
//!   (Concat, Slice, Transpose, Pad, ...) stays one node per kernel.
//!
//! The executor relies on these invariants, checked by [`verify_kernels`]:
//! the kernels partition the non-source nodes; a kernel's intermediate
//! values are used only inside it; the kernel list is in topological order.

use dnnc_ir::{Graph, NodeId, Op, OpClass, ValueId};
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

/// What a kernel is built around; decides how a backend generates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelKind {
    /// Anchored by a Conv2d/MatMul/Gemm-like op, plus an elementwise epilogue.
    Contraction,
    /// A chain of elementwise ops, one loop over the result.
    Elementwise,
    /// Anchored by a pooling/softmax/reduce op, plus an elementwise epilogue.
    Reduction,
    /// One data-movement op (copies with re-indexing).
    DataMovement,
    /// One view op: the result aliases the operand's buffer.
    View,
}

impl KernelKind {
    /// The lower-case name used in dumps.
    pub fn name(self) -> &'static str {
        match self {
            KernelKind::Contraction => "contraction",
            KernelKind::Elementwise => "elementwise",
            KernelKind::Reduction => "reduction",
            KernelKind::DataMovement => "data-movement",
            KernelKind::View => "view",
        }
    }
}

/// One fused kernel: a set of IR nodes executed as a unit.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// The name of the kernel's last node's first result.
    pub name: String,
    /// What the kernel is built around.
    pub kind: KernelKind,
    /// The contraction or reduction the kernel is built around, if any.
    pub anchor: Option<NodeId>,
    /// Every IR node in the kernel, in topological order, anchor first.
    pub nodes: Vec<NodeId>,
    /// Values read from outside the kernel (activations, weights, constants),
    /// in order of first use.
    pub inputs: Vec<ValueId>,
    /// Values used outside the kernel (by other kernels or as graph outputs).
    pub outputs: Vec<ValueId>,
}

/// The kernel overlay of a graph. Sources (input/param/const) are not
/// kernels; kernels are in topological order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelGraph {
    /// The kernels, in an order in which they can execute.
    pub kernels: Vec<Kernel>,
}

impl KernelGraph {
    /// Index of the kernel containing `n`, if any.
    pub fn kernel_of(&self, n: NodeId) -> Option<usize> {
        self.kernels.iter().position(|k| k.nodes.contains(&n))
    }

    /// One line per kernel, `name [Op+Op] kind`, for tests and summaries.
    pub fn summary(&self, g: &Graph) -> String {
        self.kernels
            .iter()
            .map(|k| format!("{}\n", header(g, k)))
            .collect()
    }
}

/// A node's name (its first result's), tolerating result-less nodes.
fn label(g: &Graph, n: NodeId) -> String {
    g.node(n)
        .outputs
        .first()
        .map_or_else(|| "?".to_string(), |&v| g.value(v).name.clone())
}

fn header(g: &Graph, k: &Kernel) -> String {
    let ops: Vec<&str> = k.nodes.iter().map(|&n| g.node(n).op.name()).collect();
    format!("{} [{}] {}", k.name, ops.join("+"), k.kind.name())
}

/// Groups the live non-source nodes of `g` into kernels (see the module
/// documentation for the rules). Leaves `g` unchanged.
pub fn fuse(g: &Graph) -> KernelGraph {
    let order = g.topo_order();
    let pos: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut assigned: HashSet<NodeId> = HashSet::new();
    let mut kernels = vec![];
    for &n in &order {
        let node = g.node(n);
        if assigned.contains(&n) {
            continue;
        }
        let (kind, anchor, absorbs) = match node.op.class() {
            OpClass::Source => continue,
            OpClass::Contraction => (KernelKind::Contraction, Some(n), true),
            OpClass::Reduction => (KernelKind::Reduction, Some(n), true),
            OpClass::Elementwise => (KernelKind::Elementwise, None, true),
            OpClass::DataMovement => (KernelKind::DataMovement, None, false),
            OpClass::View => (KernelKind::View, None, false),
        };
        assigned.insert(n);
        let mut nodes = vec![n];
        if absorbs && node.outputs.len() == 1 {
            let ty = &g.value(node.outputs[0]).ty;
            let mut cur = node.outputs[0];
            loop {
                let users = g.users(cur);
                if g.outputs().contains(&cur) {
                    break;
                }
                if users.len() != 1 {
                    // Several users that all meet again at one
                    // elementwise node (x * sigmoid(x)): absorb them all.
                    match diamond(g, cur, ty, (&assigned, &pos)) {
                        Some(ns) => {
                            let join = *ns.last().expect("a join");
                            assigned.extend(ns.iter().copied());
                            nodes.extend(ns);
                            cur = g.node(join).outputs[0];
                            continue;
                        }
                        None => break,
                    }
                }
                let u = users[0].0;
                let un = g.node(u);
                if assigned.contains(&u)
                    || un.op.class() != OpClass::Elementwise
                    || un.outputs.len() != 1
                    || &g.value(un.outputs[0]).ty != ty
                {
                    break;
                }
                assigned.insert(u);
                nodes.push(u);
                cur = un.outputs[0];
            }
        }
        kernels.push(make_kernel(g, kind, anchor, nodes));
    }
    // A kernel's last node depends on all of the kernel's inputs, and only
    // the last node's results leave a chain, so ordering kernels by their
    // last node's topological position is a topological kernel order.
    kernels.sort_by_key(|k| k.nodes.last().map_or(0, |n| pos[n]));
    KernelGraph { kernels }
}

/// Most nodes [`diamond`] follows from each user of a shared value.
const DIAMOND_WALK: usize = 8;

/// The nodes a chain at `cur` (results of type `ty`) absorbs when `cur`
/// is read several times by nodes that meet again at one node, the join:
/// SiLU's `x * sigmoid(x)`, GELU's `x * 0.5 * (1 + erf(x / sqrt 2))`,
/// `x * x`. From each user
/// the walk follows single-user results (at most [`DIAMOND_WALK`] nodes);
/// the join is the first node of the first walk that every walk reaches.
/// Every node before the join on each walk, and the join, must be an
/// unassigned elementwise node with one result of type `ty`; each such
/// node's only user is then the next on its walk, so nothing but the
/// join's result leaves the chain. Returns those nodes in topological
/// order, the join last.
fn diamond(
    g: &Graph,
    cur: ValueId,
    ty: &dnnc_ir::TensorType,
    (assigned, pos): (&HashSet<NodeId>, &HashMap<NodeId, usize>),
) -> Option<Vec<NodeId>> {
    let mut users: Vec<NodeId> = g.users(cur).iter().map(|&(u, _)| u).collect();
    users.sort();
    users.dedup();
    if users.is_empty() {
        return None;
    }
    let fits = |x: NodeId| {
        let xn = g.node(x);
        !assigned.contains(&x)
            && xn.op.class() == OpClass::Elementwise
            && xn.outputs.len() == 1
            && &g.value(xn.outputs[0]).ty == ty
    };
    let walks: Vec<Vec<NodeId>> = users
        .iter()
        .map(|&u| {
            let mut w = vec![u];
            let mut x = u;
            while w.len() < DIAMOND_WALK && g.node(x).outputs.len() == 1 {
                let v = g.node(x).outputs[0];
                let mut next: Vec<NodeId> = g.users(v).iter().map(|&(u, _)| u).collect();
                next.dedup();
                if next.len() != 1 || g.outputs().contains(&v) {
                    break;
                }
                x = next[0];
                w.push(x);
            }
            w
        })
        .collect();
    let join = walks[0]
        .iter()
        .copied()
        .find(|n| walks.iter().all(|w| w.contains(n)))?;
    let mut nodes = vec![];
    for w in &walks {
        for &x in w.iter().take_while(|&&x| x != join) {
            if !fits(x) {
                return None;
            }
            if !nodes.contains(&x) {
                nodes.push(x);
            }
        }
    }
    if !fits(join) {
        return None;
    }
    nodes.sort_by_key(|n| pos[n]);
    nodes.push(join);
    Some(nodes)
}

fn make_kernel(g: &Graph, kind: KernelKind, anchor: Option<NodeId>, nodes: Vec<NodeId>) -> Kernel {
    let set: HashSet<NodeId> = nodes.iter().copied().collect();
    let mut inputs = vec![];
    let mut outputs = vec![];
    for &n in &nodes {
        for &v in &g.node(n).inputs {
            if !set.contains(&g.value(v).producer) && !inputs.contains(&v) {
                inputs.push(v);
            }
        }
        for &v in &g.node(n).outputs {
            let outside = g.users(v).iter().any(|(u, _)| !set.contains(u));
            if outside || g.outputs().contains(&v) {
                outputs.push(v);
            }
        }
    }
    Kernel {
        name: nodes.last().map_or_else(String::new, |&n| label(g, n)),
        kind,
        anchor,
        nodes,
        inputs,
        outputs,
    }
}

/// Checks the invariants the executor relies on; returns every violation.
/// - the kernels partition the live non-source nodes;
/// - each kernel's nodes are in dependency order, anchor first;
/// - `inputs` and `outputs` are exactly the values crossing the boundary,
///   so intermediate values are used only inside the kernel;
/// - every kernel reads only sources and earlier kernels' outputs.
pub fn verify_kernels(g: &Graph, kg: &KernelGraph) -> Result<(), Vec<String>> {
    let mut errs = vec![];
    let mut owner: HashMap<NodeId, usize> = HashMap::new();
    for (i, k) in kg.kernels.iter().enumerate() {
        for &n in &k.nodes {
            if !g.dag().contains_node(n) {
                errs.push(format!("kernel {}: contains a removed node", k.name));
            } else if g.node(n).op.class() == OpClass::Source {
                errs.push(format!(
                    "kernel {}: contains source %{}",
                    k.name,
                    label(g, n)
                ));
            } else if let Some(j) = owner.insert(n, i) {
                errs.push(format!(
                    "node %{} is in kernels {} and {}",
                    label(g, n),
                    kg.kernels[j].name,
                    k.name
                ));
            }
        }
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    for n in g.topo_order() {
        if g.node(n).op.class() != OpClass::Source && !owner.contains_key(&n) {
            errs.push(format!("node %{} is in no kernel", label(g, n)));
        }
    }
    let mut available: HashSet<ValueId> = HashSet::new();
    for (i, k) in kg.kernels.iter().enumerate() {
        let Some(&first) = k.nodes.first() else {
            errs.push(format!("kernel {i} is empty"));
            continue;
        };
        if let Some(a) = k.anchor {
            if a != first {
                errs.push(format!(
                    "kernel {}: the anchor is not the first node",
                    k.name
                ));
            }
        }
        let expect = make_kernel(g, k.kind, k.anchor, k.nodes.clone());
        if expect.inputs != k.inputs {
            errs.push(format!(
                "kernel {}: inputs are not the values read from outside",
                k.name
            ));
        }
        if expect.outputs != k.outputs {
            errs.push(format!(
                "kernel {}: outputs are not the values used outside",
                k.name
            ));
        }
        let mut inside: HashSet<ValueId> = HashSet::new();
        for &n in &k.nodes {
            for &v in &g.node(n).inputs {
                let p = g.value(v).producer;
                let ok = if owner.get(&p) == Some(&i) {
                    inside.contains(&v)
                } else {
                    g.node(p).op.class() == OpClass::Source || available.contains(&v)
                };
                if !ok {
                    errs.push(format!(
                        "kernel {}: %{} reads %{} before it is computed",
                        k.name,
                        label(g, n),
                        g.value(v).name
                    ));
                }
            }
            inside.extend(g.node(n).outputs.iter().copied());
        }
        available.extend(k.outputs.iter().copied());
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// The canonical IR text with each kernel's statements grouped and preceded
/// by a comment `# kernel NAME [Op+Op] kind`; each kernel's parameters and
/// constants are printed just before its first statement that uses them.
/// Comments are ignored by the parser, so the dump parses back to the same
/// graph (statements reordered, still in a topological order).
pub fn print_kernels(g: &Graph, kg: &KernelGraph) -> String {
    let text = dnnc_ir::text::print(g);
    let lines: Vec<&str> = text.lines().collect();
    let order = g.topo_order();
    // `print` writes a header, then one line per node in `topo_order`.
    if lines.len() < order.len() + 2 {
        return text;
    }
    let stmt: HashMap<NodeId, &str> = order
        .iter()
        .copied()
        .zip(lines[1..].iter().copied())
        .collect();
    let mut printed: HashSet<NodeId> = HashSet::new();
    let mut out = String::new();
    let mut emit = |out: &mut String, n: NodeId| {
        if printed.insert(n) {
            out.push_str(stmt[&n]);
            out.push('\n');
        }
    };
    let _ = writeln!(out, "{}", lines[0]);
    for &n in &order {
        if matches!(g.node(n).op, Op::Input) {
            emit(&mut out, n);
        }
    }
    for k in &kg.kernels {
        let _ = writeln!(out, "  # kernel {}", header(g, k));
        for &n in &k.nodes {
            for &v in &g.node(n).inputs {
                let p = g.value(v).producer;
                if g.node(p).op.class() == OpClass::Source {
                    emit(&mut out, p);
                }
            }
            emit(&mut out, n);
        }
    }
    // Unused sources, and anything the overlay missed (an invalid overlay).
    for &n in &order {
        emit(&mut out, n);
    }
    for l in &lines[order.len() + 1..] {
        let _ = writeln!(out, "{l}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Pipeline;
    use dnnc_ir::text::{parse, print};

    fn example(name: &str) -> Graph {
        let path = format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"));
        parse(&std::fs::read_to_string(&path).unwrap(), name).unwrap()
    }

    /// Fuses after the default pipeline, checks the invariants and that the
    /// grouped dump parses back to the same graph; returns summary + dump.
    fn fused_dump(mut g: Graph) -> String {
        let r = Pipeline::default().run(&mut g).unwrap();
        let kg = r.kernels.unwrap();
        verify_kernels(&g, &kg).unwrap();
        let dump = print_kernels(&g, &kg);
        let stripped: String = dump
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        let back = parse(&dump, "dump.dnn").unwrap();
        assert_eq!(print(&back), stripped, "the dump reprints as itself");
        let mut a: Vec<String> = print(&g).lines().map(String::from).collect();
        let mut b: Vec<String> = stripped.lines().map(String::from).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b, "the dump has the graph's statements");
        format!("{}\n{dump}", kg.summary(&g))
    }

    #[test]
    fn lenet5() {
        insta::assert_snapshot!(fused_dump(example("lenet5.dnn")));
    }

    #[test]
    fn inception_block() {
        insta::assert_snapshot!(fused_dump(example("inception_block.dnn")));
    }

    #[test]
    fn resnet_basic_block_after_fold_batchnorm() {
        let mut src = String::from("graph basic_block {\n  input %x: f32[1,4,8,8]\n");
        for (i, conv) in ["conv1", "conv2"].iter().enumerate() {
            let s = 10 * i;
            let _ = write!(
                src,
                "  param %{conv}.w: f32[4,4,3,3] = he(seed={})
  param %bn{n}.g: f32[4] = uniform(low=0.5, high=1.5, seed={})
  param %bn{n}.b: f32[4] = uniform(low=-0.5, high=0.5, seed={})
  param %bn{n}.m: f32[4] = uniform(low=-0.5, high=0.5, seed={})
  param %bn{n}.v: f32[4] = uniform(low=0.5, high=1.5, seed={})
",
                s + 1,
                s + 2,
                s + 3,
                s + 4,
                s + 5,
                n = i + 1
            );
        }
        src.push_str(
            "  %conv1 = Conv2d(%x, %conv1.w) {pads=[1,1,1,1]}
  %bn1 = BatchNormalization(%conv1, %bn1.g, %bn1.b, %bn1.m, %bn1.v)
  %relu1 = Relu(%bn1)
  %conv2 = Conv2d(%relu1, %conv2.w) {pads=[1,1,1,1]}
  %bn2 = BatchNormalization(%conv2, %bn2.g, %bn2.b, %bn2.m, %bn2.v)
  %add = Add(%bn2, %x)
  %out = Relu(%add)
  output %out
}
",
        );
        let g = parse(&src, "block.dnn").unwrap();
        let before = print(&g);
        insta::assert_snapshot!(format!("{before}--- pipeline --->\n{}", fused_dump(g)));
    }

    #[test]
    fn chains_stop_at_shared_values_outputs_and_shape_changes() {
        let g = parse(
            "graph t {
               input %x: f32[2,3]
               input %b: f32[3]
               param %w: f32[3,3] = ones
               %mm = MatMul(%x, %w)
               %a = Add(%mm, %b)
               %r = Relu(%a)
               %t = Tanh(%r)
               %e = Exp(%r)
               %s = Add(%t, %e)
               %big = Add(%s, %x)
               %sig = Sigmoid(%big)
               %red = ReduceSum(%sig) {axes=[1], keepdims=true}
               %neg = Neg(%red)
               %f = Flatten(%neg)
               %c = Concat(%f, %f) {axis=0}
               output %c, %sig
             }",
            "t.dnn",
        )
        .unwrap();
        let kg = fuse(&g);
        verify_kernels(&g, &kg).unwrap();
        // %r's two users meet again at %s: the diamond joins the chain.
        insta::assert_snapshot!(kg.summary(&g), @r"
        sig [MatMul+Add+Relu+Tanh+Exp+Add+Add+Sigmoid] contraction
        neg [ReduceSum+Neg] reduction
        f [Flatten] view
        c [Concat] data-movement
        ");
        // A third user of %r that never meets the others (a graph output)
        // stops the chain at %r; %e, read by two kernels, is a kernel's
        // result.
        let g = parse(
            "graph t {
               input %x: f32[2,3]
               input %b: f32[3]
               param %w: f32[3,3] = ones
               %mm = MatMul(%x, %w)
               %a = Add(%mm, %b)
               %r = Relu(%a)
               %t = Tanh(%r)
               %e = Exp(%r)
               %n = Neg(%r)
               %s = Add(%t, %e)
               %q = Mul(%e, %x)
               output %s, %n, %q
             }",
            "t.dnn",
        )
        .unwrap();
        let kg = fuse(&g);
        verify_kernels(&g, &kg).unwrap();
        insta::assert_snapshot!(kg.summary(&g), @r"
        r [MatMul+Add+Relu] contraction
        e [Exp] elementwise
        n [Neg] elementwise
        s [Tanh+Add] elementwise
        q [Mul] elementwise
        ");
    }

    #[test]
    fn silu_and_gelu_diamonds_fuse_into_the_conv() {
        let g = parse(
            "graph t {
               input %x: f32[1,4,6,6]
               param %w: f32[8,4,1,1] = ones
               param %v: f32[8,8,1,1] = ones
               const %k: f32[] = [1.4142135]
               const %one: f32[] = [1]
               const %half: f32[] = [0.5]
               %c = Conv2d(%x, %w)
               %s = Sigmoid(%c)
               %y = Mul(%c, %s)
               %d = Conv2d(%y, %v)
               %h = Div(%d, %k)
               %e = Erf(%h)
               %a = Add(%e, %one)
               %m = Mul(%d, %a)
               %g = Mul(%m, %half)
               %q = Mul(%g, %g)
               output %q
             }",
            "t.dnn",
        )
        .unwrap();
        let kg = fuse(&g);
        verify_kernels(&g, &kg).unwrap();
        insta::assert_snapshot!(kg.summary(&g), @r"
        y [Conv2d+Sigmoid+Mul] contraction
        q [Conv2d+Div+Erf+Add+Mul+Mul+Mul] contraction
        ");
        // A result nobody reads ends the chain (no users to meet).
        let g = parse(
            "graph t {
               input %x: f32[1,4,6,6]
               param %w: f32[8,4,1,1] = ones
               %c = Conv2d(%x, %w)
               %r = Relu(%c)
               %y = Sigmoid(%x)
               output %y
             }",
            "t.dnn",
        )
        .unwrap();
        let kg = fuse(&g);
        verify_kernels(&g, &kg).unwrap();
        insta::assert_snapshot!(kg.summary(&g), @r"
        r [Conv2d+Relu] contraction
        y [Sigmoid] elementwise
        ");
    }

    #[test]
    fn every_example_fuses_validly() {
        for name in [
            "lenet5.dnn",
            "alexnet.dnn",
            "inception_block.dnn",
            "resnet18.dnn",
            "resnet50.dnn",
            "densenet_block.dnn",
        ] {
            let g = example(name);
            let kg = fuse(&g);
            verify_kernels(&g, &kg).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            let dump = print_kernels(&g, &kg);
            parse(&dump, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn verify_kernels_reports_broken_overlays() {
        let g = example("lenet5.dnn");
        let kg = fuse(&g);
        let mut missing = kg.clone();
        missing.kernels.remove(0);
        assert!(verify_kernels(&g, &missing).is_err());
        let mut reversed = kg.clone();
        reversed.kernels.reverse();
        let errs = verify_kernels(&g, &reversed).unwrap_err();
        assert!(
            errs.iter().any(|e| e.contains("before it is computed")),
            "{errs:?}"
        );
        let mut split = kg;
        let k = &mut split.kernels[0];
        let relu = k.nodes.pop().unwrap();
        k.outputs = vec![g.node(relu).inputs[0]];
        split.kernels.insert(
            1,
            make_kernel(&g, KernelKind::Elementwise, None, vec![relu]),
        );
        verify_kernels(&g, &split).unwrap();
        split.kernels[0].outputs.clear();
        assert!(verify_kernels(&g, &split).is_err());
    }
}
