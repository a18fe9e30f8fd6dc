//! Graphviz rendering, for looking at a model's structure (`dnnc dot`).

use crate::graph::Graph;
use crate::op::{Op, OpClass};
use std::fmt::Write;

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Renders the graph as a Graphviz `digraph`: one box per op (sources as
/// ellipses, parameters and constants grey), edges labelled with the value
/// name and type, graph outputs as double octagons.
pub fn to_dot(g: &Graph) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph \"{}\" {{", esc(&g.name));
    let _ = writeln!(s, "  rankdir=TB;");
    let _ = writeln!(s, "  node [fontname=\"Helvetica\", fontsize=10];");
    let _ = writeln!(s, "  edge [fontname=\"Helvetica\", fontsize=8];");
    let order = g.topo_order();
    for &n in &order {
        let node = g.node(n);
        let name = esc(g.node_name(n));
        let id = n.index();
        let (shape, style) = match (&node.op, node.op.class()) {
            (Op::Input, _) => ("ellipse", "solid"),
            (_, OpClass::Source) => ("ellipse", "filled"),
            (_, OpClass::Contraction) => ("box", "bold"),
            _ => ("box", "rounded"),
        };
        let label = match node.op.class() {
            OpClass::Source => format!("{}\\n{}", name, g.value(node.outputs[0]).ty),
            _ => format!("{}\\n{}", node.op.name(), name),
        };
        let _ = writeln!(
            s,
            "  n{id} [label=\"{label}\", shape={shape}, style={style}{}];",
            if style == "filled" {
                ", fillcolor=\"#e8e8e8\""
            } else {
                ""
            }
        );
    }
    for &n in &order {
        for &v in &g.node(n).inputs {
            let val = g.value(v);
            let _ = writeln!(
                s,
                "  n{} -> n{} [label=\"{}\"];",
                val.producer.index(),
                n.index(),
                esc(&val.ty.to_string())
            );
        }
    }
    for (i, &o) in g.outputs().iter().enumerate() {
        let val = g.value(o);
        let _ = writeln!(
            s,
            "  out{i} [label=\"output\\n{}\\n{}\", shape=doubleoctagon];",
            esc(&val.name),
            val.ty
        );
        let _ = writeln!(s, "  n{} -> out{i};", val.producer.index());
    }
    s.push_str("}\n");
    s
}
