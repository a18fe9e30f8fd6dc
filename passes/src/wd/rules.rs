//! Per-node Work-Depth rules: one [`Cost`] per op from its operand and
//! result types alone (no weights are ever read).
//!
//! The rules are documented, with their derivations, in `docs/cost-model.md`.
//! They are kept free of graph plumbing so a later calibration pass can apply
//! them to hypothetical shapes (other batch sizes, other tilings).

use dnnc_ir::infer::norm_axis;
use dnnc_ir::op::{CellKind, EinsumSpec, Op, Recurrent, ReduceKind, ResizeMode};
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
        Op::ConvTranspose2d(c) => {
            // Scatter form: every input pixel meets every tap of its
            // group's (M/g) x kH x kW kernels once.
            let w = &ins[1].shape;
            let taps = prod(w[1..].iter().map(|&d| d as u64));
            let red = prod([(w[0] / c.group.max(1)) as u64, w[2] as u64, w[3] as u64]);
            Cost::new(numel(ins[0]).saturating_mul(taps), ceil_log2(red))
        }
        Op::Einsum { equation } => einsum(equation, ins),
        Op::Recurrent(r) => recurrent(r, ins),
        Op::InstanceNormalization { .. } | Op::LayerNormalization { .. } => {
            let x = ins[0];
            let len = match op {
                Op::LayerNormalization { axis, .. } => norm_axis(*axis, x.rank())
                    .map(|a| prod(x.shape[a..].iter().map(|&d| d as u64)))
                    .unwrap_or(1),
                _ => prod(x.shape[2.min(x.rank())..].iter().map(|&d| d as u64)),
            }
            .max(1);
            normalization(out_elems / len, len)
        }
        Op::Resize(r) => {
            let x = ins[0];
            let k = x.shape.iter().zip(&r.sizes).filter(|(a, b)| a != b).count() as u32;
            match r.mode {
                ResizeMode::Nearest => elementwise,
                // 2^k weighted taps summed per output.
                ResizeMode::Linear => {
                    Cost::new(out_elems.saturating_mul(1u64 << k.min(63)), u64::from(k))
                }
            }
        }
        Op::PRelu
        | Op::Where
        | Op::Compare(_)
        | Op::Not
        | Op::Logical(_)
        | Op::Cast { .. }
        | Op::Range(_)
        | Op::Shape { .. }
        | Op::ConstantOfShape { .. }
        | Op::Tile { .. } => elementwise,
    }
}

/// Normalisation of `rows` groups of `len` values (InstanceNorm,
/// LayerNorm), decomposed into dnnc-style ops: mean, `x - mean`, square,
/// mean (the variance), `+ eps` and `sqrt` per row, divide, scale, shift.
pub fn normalization(rows: u64, len: u64) -> Cost {
    let elems = rows.saturating_mul(len);
    let ew = Cost::new(elems, 1);
    let per_row = Cost::new(rows, 1);
    mean_reduction(rows, len)
        .then(ew) // x - mean
        .then(ew) // square
        .then(mean_reduction(rows, len)) // variance
        .then(per_row) // + eps
        .then(per_row) // sqrt
        .then(ew) // divide
        .then(ew) // * scale
        .then(ew) // + bias
}

/// Einsum: one multiply-accumulate per point of the full index space per
/// extra operand (at least one), depth a product tree over the operands
/// plus a sum tree over the contracted indices.
fn einsum(equation: &str, ins: &[&TensorType]) -> Cost {
    let Ok(spec) = EinsumSpec::parse(equation) else {
        return Cost::ZERO;
    };
    let shapes: Vec<&[usize]> = ins.iter().map(|t| t.shape.as_slice()).collect();
    let Ok(sizes) = dnnc_ir::infer::einsum_sizes(&spec, &shapes) else {
        return Cost::ZERO;
    };
    let space = prod(sizes.iter().map(|&(_, d)| d as u64));
    let contracted = prod(
        sizes
            .iter()
            .filter(|(c, _)| !spec.output.contains(c))
            .map(|&(_, d)| d as u64),
    );
    let per_point = (ins.len() as u64).saturating_sub(1).max(1);
    Cost::new(
        space.saturating_mul(per_point),
        ceil_log2(ins.len() as u64) + ceil_log2(contracted),
    )
}

/// RNN / GRU / LSTM: per direction and step, the gate products
/// `[x, h] . [W; R]^T` (`batch * G * hid * (in + hid)` MACs) plus a fixed
/// number of elementwise operations per hidden unit; the steps are
/// sequential, so depth grows linearly with the sequence length while the
/// directions run in parallel.
pub fn recurrent(r: &Recurrent, ins: &[&TensorType]) -> Cost {
    let Some(x) = ins.first() else {
        return Cost::ZERO;
    };
    let (seq, batch, input) = match x.shape[..] {
        [s, b, i] => (s as u64, b as u64, i as u64),
        _ => return Cost::ZERO,
    };
    let (h, g) = (r.hidden_size as u64, r.cell.gates() as u64);
    let dirs = r.direction.count() as u64;
    let red = input.saturating_add(h);
    let macs = prod([batch, g, h, red]);
    // (elementwise ops per hidden unit, extra depth per step)
    let (ew, step_depth) = match r.cell {
        // activation
        CellKind::Rnn => (1, 1),
        // z, r, h activations; r * h; (1 - z) * h~ + z * h (3 ops); the
        // candidate's recurrent product waits for r.
        CellKind::Gru { .. } => (7, 1 + 1 + ceil_log2(h) + 1 + 2),
        // i, o, f, c activations; C = f * C + i * c (3 ops); h(C); o * h(C).
        CellKind::Lstm { .. } => (9, 1 + 2 + 1 + 1),
    };
    let per_step = Cost::new(
        macs.saturating_add(prod([batch, h, ew])),
        ceil_log2(red).saturating_add(step_depth),
    );
    Cost::new(
        prod([per_step.work, seq, dirs]),
        per_step.depth.saturating_mul(seq),
    )
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
        // 2 rows of 4: two means (2*3 + 2 each), 5 passes over 8, 2 per row.
        assert_eq!(normalization(2, 4), Cost::new(16 + 40 + 4, 3 + 3 + 5 + 2));
    }
}
