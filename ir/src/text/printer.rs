//! Canonical printing. Everything the parser would otherwise default (result
//! types, attributes) is written out, so a printed graph never depends on
//! defaults and `print(parse(print(g))) == print(g)`.

use super::lexer::is_name_char;
use crate::attr::fmt_f32;
use crate::graph::{Graph, ValueId};
use crate::init::{quote, Init};
use crate::op::Op;
use crate::tensor::Tensor;
use std::fmt::Write;

/// A value name as written after `%`: bare when the lexer reads it back as
/// one name, quoted otherwise.
pub(crate) fn value_name(name: &str) -> String {
    let bare = !name.is_empty() && name.chars().all(is_name_char) && !name.ends_with(':');
    if bare {
        name.to_string()
    } else {
        quote(name)
    }
}

/// The graph name: an identifier, or a quoted string.
fn graph_name(name: &str) -> String {
    let mut cs = name.chars();
    let ident = cs
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ident {
        name.to_string()
    } else {
        quote(name)
    }
}

/// The initializer as written after `param ... =`; `None` when it is the
/// default (`external` of the value's own name), which is written as no
/// initializer at all.
fn init_text(init: &Init, value: &str) -> Option<String> {
    let f = |v: f32| fmt_f32(v);
    Some(match init {
        Init::Zeros => "zeros".into(),
        Init::Ones => "ones".into(),
        Init::Constant(v) => format!("constant(value={})", f(*v)),
        Init::Uniform { low, high, seed } => {
            format!("uniform(low={}, high={}, seed={seed})", f(*low), f(*high))
        }
        Init::Normal { mean, std, seed } => {
            format!("normal(mean={}, std={}, seed={seed})", f(*mean), f(*std))
        }
        Init::Xavier { seed } => format!("xavier(seed={seed})"),
        Init::He { seed } => format!("he(seed={seed})"),
        Init::External(name) if name == value => return None,
        Init::External(name) => format!("external({})", quote(name)),
    })
}

fn literal(t: Option<&Tensor>) -> String {
    fn join<T>(it: impl Iterator<Item = T>, f: impl Fn(T) -> String) -> String {
        it.map(f).collect::<Vec<_>>().join(", ")
    }
    let body = match t {
        Some(Tensor::F32(a)) => join(a.iter(), |v| fmt_f32(*v)),
        Some(Tensor::I64(a)) => join(a.iter(), |v| v.to_string()),
        Some(Tensor::Bool(a)) => join(a.iter(), |v| v.to_string()),
        // A constant without data is a broken graph; print what we can.
        None => String::new(),
    };
    format!("[{body}]")
}

fn typed(g: &Graph, v: ValueId) -> String {
    let val = g.value(v);
    format!("%{}: {}", value_name(&val.name), val.ty)
}

/// Prints `g` in canonical text form: one statement per line in
/// [`Graph::topo_order`], every result type and attribute written out.
pub fn print(g: &Graph) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "graph {} {{", graph_name(&g.name));
    for n in g.topo_order() {
        let node = g.node(n);
        out.push_str("  ");
        // Source ops always have exactly one result; computational ops are
        // printed from their result list, which the Graph API lets be empty.
        let first = node.outputs.first().copied();
        match (&node.op, first) {
            (Op::Input | Op::Param(_) | Op::Constant, None) => {}
            (Op::Input, Some(first)) => {
                let _ = write!(out, "input {}", typed(g, first));
            }
            (Op::Param(init), Some(first)) => {
                let _ = write!(out, "param {}", typed(g, first));
                if let Some(i) = init_text(init, &g.value(first).name) {
                    let _ = write!(out, " = {i}");
                }
            }
            (Op::Constant, Some(first)) => {
                let _ = write!(
                    out,
                    "const {} = {}",
                    typed(g, first),
                    literal(g.weights.get(&g.value(first).name))
                );
            }
            (op, _) => {
                let results: Vec<String> = node.outputs.iter().map(|&v| typed(g, v)).collect();
                let args: Vec<String> = node
                    .inputs
                    .iter()
                    .map(|&v| format!("%{}", value_name(&g.value(v).name)))
                    .collect();
                let _ = write!(
                    out,
                    "{} = {}({})",
                    results.join(", "),
                    op.name(),
                    args.join(", ")
                );
                let attrs = op.attrs();
                if !attrs.is_empty() {
                    let a: Vec<String> = attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    let _ = write!(out, " {{{}}}", a.join(", "));
                }
            }
        }
        out.push('\n');
    }
    if !g.outputs().is_empty() {
        let outs: Vec<String> = g
            .outputs()
            .iter()
            .map(|&v| format!("%{}", value_name(&g.value(v).name)))
            .collect();
        let _ = writeln!(out, "  output {}", outs.join(", "));
    }
    out.push_str("}\n");
    out
}
