//! Per-node Work-Depth rules: one [`Cost`] per op from its operand and
//! result types alone (no weights are ever read).
//!
//! The rules are documented, with their derivations, in `docs/cost-model.md`.
//! They are kept free of graph plumbing so a later calibration pass can apply
//! them to hypothetical shapes (other batch sizes, other tilings).

use dnnc_ir::infer::norm_axis;
use dnnc_ir::op::{Op, ReduceKind};
use dnnc_ir::TensorType;
use serde::Serialize;

/// Work and depth of one computation in the W-D model: `work` counts
/// operations (a multiply-accumulate is one), `depth` counts the operations
/// on the longest dependency chain inside it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Cost {
    /// Operations performed (T_1 on one processor).
    pub work: u64,
    /// Length of the longest dependency chain (T_inf on unboundedly many).
    pub depth: u64,
}

impl Cost {
    /// The cost of something that computes nothing (sources, views).
    pub const ZERO: Cost = Cost { work: 0, depth: 0 };

    /// Shorthand constructor.
    pub const fn new(work: u64, depth: u64) -> Cost {
        Cost { work, depth }
    }

    /// Average parallelism `W / D`; a depth of 0 is taken as one step so the
    /// figure stays finite (and JSON-representable).
    pub fn parallelism(&self) -> f64 {
        self.work as f64 / self.depth.max(1) as f64
    }

    /// Sequential composition: works add, depths add.
    pub fn then(self, next: Cost) -> Cost {
        Cost::new(
            self.work.saturating_add(next.work),
            self.depth.saturating_add(next.depth),
        )
    }

    /// `(work, depth)` as a tuple.
    pub fn pair(&self) -> (u64, u64) {
        (self.work, self.depth)
    }
}

/// `ceil(log2 n)`, the depth of a balanced binary tree combining `n` values;
/// 0 for `n <= 1` (nothing to combine).
pub fn ceil_log2(n: u64) -> u64 {
    if n <= 1 {
        0
    } else {
        u64::from(64 - (n - 1).leading_zeros())
    }
}

/// Saturating product of dimensions, so absurd shapes cannot panic.
pub(crate) fn prod(xs: impl IntoIterator<Item = u64>) -> u64 {
    xs.into_iter().fold(1u64, |a, b| a.saturating_mul(b))
}

pub(crate) fn numel(t: &TensorType) -> u64 {
    prod(t.shape.iter().map(|&d| d as u64))
}

/// A tree reduction of `outputs` independent groups of `len` values each:
/// `outputs * (len - 1)` binary operations, depth `ceil(log2 len)`.
pub fn tree_reduction(outputs: u64, len: u64) -> Cost {
    Cost::new(
        outputs.saturating_mul(len.saturating_sub(1)),
        ceil_log2(len),
    )
}

/// A sum-type reduction followed by a division per output (means, averages).
pub fn mean_reduction(outputs: u64, len: u64) -> Cost {
    tree_reduction(outputs, len).then(Cost::new(outputs, 1))
}

/// A max-then-exp-then-sum softmax over rows of length `len`, decomposed into
/// dnnc's own ops: ReduceMax, Sub, Exp, ReduceSum, Div.
pub fn softmax(rows: u64, len: u64) -> Cost {
    let elems = rows.saturating_mul(len);
    let ew = Cost::new(elems, 1);
    tree_reduction(rows, len) // max
        .then(ew) // x - max
        .then(ew) // exp
        .then(tree_reduction(rows, len)) // sum
        .then(ew) // / sum
}

/// LogSoftmax as ReduceMax, Sub, Exp, ReduceSum, Log (per row), Sub:
/// `y = (x - max) - log(sum(exp(x - max)))`.
pub fn log_softmax(rows: u64, len: u64) -> Cost {
    let elems = rows.saturating_mul(len);
    let ew = Cost::new(elems, 1);
    tree_reduction(rows, len) // max
        .then(ew) // x - max
        .then(ew) // exp
        .then(tree_reduction(rows, len)) // sum
        .then(Cost::new(rows, 1)) // log of each row's sum
        .then(ew) // (x - max) - log
}

/// Cross-channel LRN, `y = x / (bias + alpha/size * sum_window x^2)^beta`,
/// decomposed as Mul (square), a windowed sum over the full `size` channels
/// (like padded pools), Mul (scale), Add (bias), Pow, Div.
pub fn lrn(elems: u64, size: u64) -> Cost {
    let ew = Cost::new(elems, 1);
    ew // x * x
        .then(tree_reduction(elems, size)) // windowed sum
        .then(ew) // * alpha/size
        .then(ew) // + bias
        .then(ew) // ^ beta
        .then(ew) // x / .
}

/// The cost of one node from its operand types `ins` and result types
/// `outs` (as inferred by `dnnc_ir::infer`). Conv2d here is the direct
/// algorithm; [`crate::wd::ConvShape`] costs the alternatives.
///
/// A node whose results are all empty costs nothing.
pub fn node_cost(op: &Op, ins: &[&TensorType], outs: &[&TensorType]) -> Cost {
    let out_elems: u64 = outs.iter().map(|t| numel(t)).fold(0, u64::saturating_add);
    if out_elems == 0 {
        return Cost::ZERO;
    }
    let elementwise = Cost::new(out_elems, 1);
    match op {
        Op::Input | Op::Param(_) | Op::Constant => Cost::ZERO,
        Op::Conv2d(_) => {
            // W = outputs * (Cin/g) * Kh * Kw, D over the whole reduction.
            let w = &ins[1].shape;
            let red = prod(w[1..].iter().map(|&d| d as u64));
            Cost::new(out_elems.saturating_mul(red), ceil_log2(red))
        }
        Op::Gemm(g) => {
            let a = &ins[0].shape;
            let k = if g.trans_a { a[0] } else { a[1] } as u64;
            Cost::new(out_elems.saturating_mul(k), ceil_log2(k))
        }
        Op::MatMul => {
            // Every output element (batch * M * N of them) is a K-long dot.
            let k = *ins[0].shape.last().unwrap_or(&1) as u64;
            Cost::new(out_elems.saturating_mul(k), ceil_log2(k))
        }
        Op::MaxPool(p) => tree_reduction(out_elems, (p.kernel[0] * p.kernel[1]) as u64),
        Op::AveragePool(p) => mean_reduction(out_elems, (p.kernel[0] * p.kernel[1]) as u64),
        Op::GlobalMaxPool => tree_reduction(out_elems, numel(ins[0]) / out_elems),
        Op::GlobalAveragePool => mean_reduction(out_elems, numel(ins[0]) / out_elems),
        Op::Reduce { kind, .. } => {
            let len = numel(ins[0]) / out_elems;
            match kind {
                ReduceKind::Max | ReduceKind::Sum => tree_reduction(out_elems, len),
                ReduceKind::Mean => mean_reduction(out_elems, len),
            }
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            let x = ins[0];
            let len = norm_axis(*axis, x.rank())
                .map(|a| x.shape[a] as u64)
                .unwrap_or(1)
                .max(1);
            let rows = out_elems / len;
            if matches!(op, Op::Softmax { .. }) {
                softmax(rows, len)
            } else {
                log_softmax(rows, len)
            }
        }
        Op::Lrn(l) => lrn(out_elems, l.size as u64),
        Op::BatchNormalization { .. } | Op::Unary(_) | Op::Binary(_) => elementwise,
        Op::Concat { .. }
        | Op::Split { .. }
        | Op::Slice { .. }
        | Op::Transpose { .. }
        | Op::Pad { .. }
        | Op::Gather { .. }
        | Op::Expand { .. } => elementwise,
        Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Identity
        | Op::Dropout { .. } => Cost::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_log2_edges() {
        let got: Vec<u64> = [0, 1, 2, 3, 4, 5, 8, 9, 25, 150, 400, 1 << 40]
            .into_iter()
            .map(ceil_log2)
            .collect();
        assert_eq!(got, vec![0, 0, 1, 2, 2, 3, 3, 4, 5, 8, 9, 40]);
        assert_eq!(ceil_log2(u64::MAX), 64);
    }

    #[test]
    fn softmax_is_its_decomposition() {
        // 2 rows of 10: max 18 + sub 20 + exp 20 + sum 18 + div 20.
        assert_eq!(softmax(2, 10), Cost::new(96, 4 + 1 + 1 + 4 + 1));
        // plus one log per row and one more depth level.
        assert_eq!(log_softmax(2, 10), Cost::new(98, 12));
        // size 5 window: 4 adds per element + 5 elementwise passes.
        assert_eq!(lrn(10, 5), Cost::new(90, 3 + 5));
    }
}
