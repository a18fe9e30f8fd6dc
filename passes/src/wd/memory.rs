//! Peak activation memory implied by the kernel order: every value a
//! kernel writes (or a graph output) is a temporary live from the kernel
//! that writes it to the last kernel that reads it (views extend the
//! value they alias), placed by [`dnnc_ir::memplan::plan`] — the same
//! planner the CPU backend's runtime uses, so analysis does not depend on
//! the runtime.

use crate::fusion::{self, KernelKind};
use dnnc_ir::memplan::{self, Interval};
use dnnc_ir::{Graph, ValueId};
use serde::Serialize;
use std::collections::HashMap;

/// Buffer alignment the planner rounds sizes to (the CPU runtime's).
pub const ACTIVATION_ALIGN: usize = 64;

/// Activation bytes of a graph under the fusion pass's kernel order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ActivationMemory {
    /// The planned arena: peak activation bytes with liveness-based reuse.
    pub planned: usize,
    /// One buffer per value (no reuse).
    pub naive: usize,
    /// The most bytes live at one kernel: no placement can use less.
    pub lower_bound: usize,
    /// Kernel results (temporaries) placed.
    pub values: usize,
}

/// Plans the activation memory of `g` from its value sizes and kernel
/// order (the fusion pass's kernels; workspaces such as im2col columns are
/// backend-specific and not counted). In-place reuse is not assumed.
pub fn activation_memory(g: &Graph) -> ActivationMemory {
    let kg = fusion::fuse(g);
    let n = kg.kernels.len();
    // root[v]: the value whose buffer `v` lives in (views alias).
    let mut root: HashMap<ValueId, ValueId> = HashMap::new();
    let mut index: HashMap<ValueId, usize> = HashMap::new();
    let mut iv: Vec<Interval> = Vec::new();
    for (k, kernel) in kg.kernels.iter().enumerate() {
        for &v in &kernel.inputs {
            let r = root.get(&v).copied().unwrap_or(v);
            if let Some(&i) = index.get(&r) {
                iv[i].last = iv[i].last.max(k);
            }
        }
        for &v in &kernel.outputs {
            if kernel.kind == KernelKind::View {
                // A view of its (single) operand's buffer.
                if let Some(&x) = kernel.inputs.first() {
                    let r = root.get(&x).copied().unwrap_or(x);
                    root.insert(v, r);
                    continue;
                }
            }
            index.insert(v, iv.len());
            iv.push(Interval {
                bytes: g.value(v).ty.size_bytes(),
                first: k,
                last: k,
                reuse: None,
            });
        }
    }
    for &v in g.outputs() {
        let r = root.get(&v).copied().unwrap_or(v);
        if let Some(&i) = index.get(&r) {
            iv[i].last = n;
        }
    }
    let p = memplan::plan(&iv, ACTIVATION_ALIGN);
    ActivationMemory {
        planned: p.total_bytes,
        naive: memplan::naive_bytes(&iv, ACTIVATION_ALIGN),
        lower_bound: memplan::lower_bound(&iv, ACTIVATION_ALIGN),
        values: iv.len(),
    }
}

/// `1536` -> `"1.5 KiB"`, `6422528` -> `"6.1 MiB"`.
pub fn format_bytes(b: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dnnc_ir::{Op, TensorType};

    #[test]
    fn chain_reuses_memory() {
        // Three softmaxes (reductions: one kernel each): the first
        // result is dead once the second is written.
        let mut g = Graph::new("chain");
        let x = g.add_input("x", TensorType::f32(vec![1, 1024])).unwrap();
        let s1 = g.add(Op::Softmax { axis: 1 }, &[x], "s1").unwrap();
        let s2 = g.add(Op::Softmax { axis: 1 }, &[s1], "s2").unwrap();
        let s3 = g.add(Op::Softmax { axis: 1 }, &[s2], "s3").unwrap();
        g.set_outputs(vec![s3]);
        let m = activation_memory(&g);
        assert_eq!(m.values, 3);
        assert_eq!(m.naive, 3 * 4096);
        assert_eq!(m.planned, 2 * 4096);
        assert_eq!(m.lower_bound, 2 * 4096);
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(100), "100 B");
    }
}
