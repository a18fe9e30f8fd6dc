//! W-D rules of the extended op set, hand-computed from their definitions
//! in docs/cost-model.md.

use dnnc_ir::op::{
    CellKind, ConvTranspose2d, CoordMode, NearestMode, Recurrent, Resize, ResizeMode, RnnDirection,
};
use dnnc_ir::{infer::infer, Op, TensorType};
use dnnc_passes::wd::{node_cost, Cost};

fn t(s: &[usize]) -> TensorType {
    TensorType::f32(s.to_vec())
}

/// Cost of `op` on inputs of the given shapes, results inferred.
fn cost(op: &Op, ins: &[TensorType]) -> Cost {
    let refs: Vec<&TensorType> = ins.iter().collect();
    let outs = infer(op, &refs).unwrap();
    let orefs: Vec<&TensorType> = outs.iter().collect();
    node_cost(op, &refs, &orefs)
}

#[test]
fn conv_transpose_counts_scatter_macs() {
    // x [1,4,5,5] (100 pixels), w [4,3,3,3] in 2 groups: each input pixel
    // meets 3*3*3 = 27 taps -> 2700 MACs; an output sums (4/2)*3*3 = 18
    // terms at most -> depth 5.
    let op = Op::ConvTranspose2d(ConvTranspose2d {
        group: 2,
        strides: [2, 2],
        ..ConvTranspose2d::default()
    });
    assert_eq!(
        cost(&op, &[t(&[1, 4, 5, 5]), t(&[4, 3, 3, 3])]),
        Cost::new(2700, 5)
    );
}

#[test]
fn einsum_counts_the_index_space() {
    // bij,bjk->bik with b=2, i=3, j=4, k=5: 120 MACs, sum over j=4 (depth
    // 2) after one product level (2 operands: depth 1).
    let op = Op::Einsum {
        equation: "bij,bjk->bik".into(),
    };
    assert_eq!(
        cost(&op, &[t(&[2, 3, 4]), t(&[2, 4, 5])]),
        Cost::new(120, 3)
    );
    // A transpose-only equation: one operation per element, no sum.
    let op = Op::Einsum {
        equation: "ij->ji".into(),
    };
    assert_eq!(cost(&op, &[t(&[3, 4])]), Cost::new(12, 0));
}

#[test]
fn recurrent_depth_grows_with_sequence() {
    let lstm = |seq: usize| {
        let op = Op::Recurrent(Recurrent {
            cell: CellKind::Lstm {
                input_forget: false,
            },
            hidden_size: 4,
            direction: RnnDirection::Forward,
            activations: CellKind::Lstm {
                input_forget: false,
            }
            .default_activations()
            .to_vec(),
            clip: f32::INFINITY,
        });
        let h = t(&[1, 2, 4]);
        cost(
            &op,
            &[
                t(&[seq, 2, 3]),
                t(&[1, 16, 3]),
                t(&[1, 16, 4]),
                t(&[1, 32]),
                h.clone(),
                h,
            ],
        )
    };
    // Per step: 2*4*4*(3+4) = 224 MACs + 2*4*9 = 72 elementwise; depth
    // ceil(log2 7) + 5 = 8.
    assert_eq!(lstm(1), Cost::new(296, 8));
    assert_eq!(lstm(5), Cost::new(5 * 296, 40));
}

#[test]
fn norms_resize_and_elementwise_additions() {
    // InstanceNorm on [1,2,2,2]: rows 2, len 4 (see normalization(2, 4)).
    let op = Op::InstanceNormalization { epsilon: 1e-5 };
    assert_eq!(
        cost(&op, &[t(&[1, 2, 2, 2]), t(&[2]), t(&[2])]),
        Cost::new(60, 13)
    );
    let op = Op::LayerNormalization {
        axis: -1,
        epsilon: 1e-5,
    };
    assert_eq!(cost(&op, &[t(&[2, 4]), t(&[4])]), Cost::new(60, 13));
    // Bilinear 2x2 -> 4x4: two resized axes, 4 taps per output.
    let rs = |mode| {
        Op::Resize(Resize {
            sizes: vec![1, 1, 4, 4],
            scales: vec![],
            mode,
            coord: CoordMode::HalfPixel,
            nearest: NearestMode::RoundPreferFloor,
        })
    };
    assert_eq!(
        cost(&rs(ResizeMode::Linear), &[t(&[1, 1, 2, 2])]),
        Cost::new(64, 2)
    );
    assert_eq!(
        cost(&rs(ResizeMode::Nearest), &[t(&[1, 1, 2, 2])]),
        Cost::new(16, 1)
    );
    assert_eq!(cost(&Op::PRelu, &[t(&[2, 3]), t(&[3])]), Cost::new(6, 1));
}
