//! Text and JSON renderings of an [`Analysis`], as shown by `dnnc analyze`.
//! Both are deterministic: fixed column order, widths computed from the
//! content, no hash-ordered data.

use super::{class_name, format_bytes, ActivationMemory, Analysis, NodeCost};
use dnnc_ir::OpClass;
use serde::Serialize;
use std::fmt::Write;

/// `416520` -> `"416,520"`.
pub fn format_thousands(n: u64) -> String {
    let digits = n.to_string();
    let groups: Vec<&str> = digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|g| std::str::from_utf8(g).expect("ascii digits"))
        .collect();
    groups.join(",")
}

/// One decimal, thousands separators: `9721.72` -> `"9,721.7"`.
fn format_f64(x: f64) -> String {
    let s = format!("{x:.1}");
    let (int, frac) = s.split_once('.').unwrap_or((&s, "0"));
    match int.parse::<u64>() {
        Ok(i) => format!("{}.{frac}", format_thousands(i)),
        Err(_) => s,
    }
}

fn format_shape(s: &[usize]) -> String {
    let dims: Vec<String> = s.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(","))
}

fn node_parallelism(n: &NodeCost) -> String {
    if n.work == 0 {
        "-".into()
    } else {
        format_f64(n.parallelism())
    }
}

const CLASSES: [OpClass; 5] = [
    OpClass::Contraction,
    OpClass::Reduction,
    OpClass::Elementwise,
    OpClass::DataMovement,
    OpClass::View,
];

/// The analysis as a fixed-width table: one row per computational node
/// (name, op, output shape, W, D, W/D, `*` on the critical path), an aligned
/// sub-row of algorithm figures `W/D` under each Conv2d, then the totals and
/// Brent's bounds for `procs` processors.
pub fn render_table(a: &Analysis, procs: usize) -> String {
    let rows: Vec<[String; 7]> = a
        .nodes
        .iter()
        .map(|n| {
            [
                n.name.clone(),
                n.op.clone(),
                format_shape(&n.shape),
                format_thousands(n.work),
                n.depth.to_string(),
                node_parallelism(n),
                if n.critical { "*" } else { "" }.to_string(),
            ]
        })
        .collect();
    let header = ["node", "op", "output", "W", "D", "W/D", "crit"];
    let right = [false, false, false, true, true, true, false];
    let mut width = header.map(str::len);
    for r in &rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String; 7]| -> String {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let pad = width[i] - cell.chars().count();
            s.push_str("  ");
            if right[i] {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                if i + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
        }
        s.trim_end().to_string()
    };

    // Conv algorithm cells, aligned across all conv rows.
    let algo_cells = |n: &NodeCost| -> Option<Vec<String>> {
        n.conv.as_ref().map(|c| {
            c.all()
                .iter()
                .map(|(name, alg)| match alg.cost {
                    Some(cost) => format!("{name} {}/{}", format_thousands(cost.work), cost.depth),
                    None => format!("{name} n/a"),
                })
                .collect()
        })
    };
    let mut algo_width = [0usize; 5];
    for n in &a.nodes {
        if let Some(cells) = algo_cells(n) {
            for (w, c) in algo_width.iter_mut().zip(&cells) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let indent = 2 + width[0] + 2;

    let mut out = String::new();
    let nodes = a.nodes.len();
    let convs = a.nodes.iter().filter(|n| n.conv.is_some()).count();
    let _ = writeln!(
        out,
        "W-D analysis of `{}`: {nodes} node{} ({convs} conv), p = {procs}",
        a.graph,
        if nodes == 1 { "" } else { "s" }
    );
    if convs > 0 {
        let _ = writeln!(
            out,
            "(conv rows list each algorithm as W/D; fft uses c = {})",
            a.fft_c
        );
    }
    out.push('\n');
    out.push_str(&line(&header.map(String::from)));
    out.push('\n');
    for (n, r) in a.nodes.iter().zip(&rows) {
        out.push_str(&line(r));
        out.push('\n');
        if let (Some(cells), Some(c)) = (algo_cells(n), &n.conv) {
            let mut s = " ".repeat(indent);
            for (i, cell) in cells.iter().enumerate() {
                s.push_str(cell);
                s.push_str(&" ".repeat(algo_width[i] - cell.chars().count() + 2));
            }
            let mut reasons: Vec<&str> = vec![];
            for (_, alg) in c.all() {
                if let Some(r) = alg.reason.as_deref() {
                    if !reasons.contains(&r) {
                        reasons.push(r);
                    }
                }
            }
            if !reasons.is_empty() {
                let _ = write!(s, "(n/a: {})", reasons.join("; "));
            } else {
                let (best, _) = c.least_work();
                let _ = write!(s, "least W: {best}");
            }
            out.push_str(s.trim_end());
            out.push('\n');
        }
    }

    let (lo, hi) = a.brent(procs);
    let w = a.work.max(1) as f64;
    let cw = a.contraction_work();
    let totals: Vec<(String, String, String)> = vec![
        ("W".into(), format_thousands(a.work), "total work".into()),
        (
            "D".into(),
            format_thousands(a.depth),
            "critical-path depth".into(),
        ),
        (
            "W/D".into(),
            format_f64(a.parallelism()),
            "average parallelism".into(),
        ),
        (
            "conv+FC W".into(),
            format_thousands(cw),
            format!("contractions, {:.1}% of W", 100.0 * cw as f64 / w),
        ),
    ];
    let mut totals = totals;
    if let Some(m) = &a.memory {
        totals.push((
            "activations".into(),
            format_bytes(m.planned),
            format!(
                "peak, planned (naive {}, live-set bound {}, {} values)",
                format_bytes(m.naive),
                format_bytes(m.lower_bound),
                m.values
            ),
        ));
    }
    let lw = totals.iter().map(|t| t.0.len()).max().unwrap_or(0);
    let vw = totals.iter().map(|t| t.1.len()).max().unwrap_or(0);
    out.push_str("\ntotals\n");
    for (label, value, note) in &totals {
        let _ = writeln!(out, "  {label:<lw$}  {value:>vw$}  {note}");
    }
    let by_class: Vec<String> = CLASSES
        .iter()
        .filter(|&&c| a.nodes.iter().any(|n| n.class == c))
        .map(|&c| format!("{} {}", class_name(c), format_thousands(a.work_of(c))))
        .collect();
    if !by_class.is_empty() {
        let _ = writeln!(out, "  W by class: {}", by_class.join(", "));
    }
    let _ = writeln!(
        out,
        "  Brent, p = {}: {} <= T_p <= {}  (max(W/p, D) and W/p + D)",
        procs.max(1),
        format_f64(lo),
        format_f64(hi)
    );
    out
}

#[derive(Serialize)]
struct Brent {
    p: usize,
    lower: f64,
    upper: f64,
}

#[derive(Serialize)]
struct Report<'a> {
    graph: &'a str,
    work: u64,
    depth: u64,
    parallelism: f64,
    contraction_work: u64,
    brent: Brent,
    fft_c: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    activation_memory: Option<ActivationMemory>,
    nodes: &'a [NodeCost],
}

/// The analysis as pretty-printed JSON: totals, parallelism, conv+FC work,
/// Brent's bounds for `procs` processors, then every node with its conv
/// algorithm figures (`null` cost plus a `reason` where not applicable).
pub fn render_json(a: &Analysis, procs: usize) -> String {
    let (lower, upper) = a.brent(procs);
    let report = Report {
        graph: &a.graph,
        work: a.work,
        depth: a.depth,
        parallelism: a.parallelism(),
        contraction_work: a.contraction_work(),
        brent: Brent {
            p: procs.max(1),
            lower,
            upper,
        },
        fft_c: a.fft_c,
        activation_memory: a.memory,
        nodes: &a.nodes,
    };
    serde_json::to_string_pretty(&report).expect("analysis serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands() {
        assert_eq!(format_thousands(0), "0");
        assert_eq!(format_thousands(999), "999");
        assert_eq!(format_thousands(1000), "1,000");
        assert_eq!(format_thousands(416_520), "416,520");
        assert_eq!(format_thousands(1_814_073_344), "1,814,073,344");
        assert_eq!(format_f64(9721.7272), "9,721.7");
        assert_eq!(format_f64(0.04), "0.0");
    }
}
