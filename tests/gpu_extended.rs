//! GPU differential tests for the extended contractions: ConvTranspose2d,
//! Einsum and the recurrent layers (RNN, GRU, LSTM), on small shapes,
//! against the reference interpreter. Like `gpu_ops.rs` they skip without
//! a wgpu adapter unless `DNNC_REQUIRE_GPU=1`.

use dnnc_integration::gpu_check;

const RTOL: f32 = 1e-4;
const ATOL: f32 = 1e-5;

fn check(test: &str, body: &str) {
    gpu_check(test, &format!("graph t {{\n{body}\n}}"), RTOL, ATOL);
}

#[test]
fn conv_transpose_stride_pads_output_padding_dilation_groups_bias_relu() {
    check(
        "conv_transpose_full",
        "  input %x: f32[2,4,3,3]
  param %w: f32[4,3,3,3] = he(seed=2)
  param %b: f32[6] = uniform(low=-1, high=1, seed=3)
  %y = ConvTranspose2d(%x, %w, %b) {strides=[2,2], pads=[1,0,0,1], dilations=[1,2], group=2, output_padding=[1,0]}
  %z = Relu(%y)
  output %z",
    );
}

#[test]
fn conv_transpose_depthwise_uneven_strides() {
    check(
        "conv_transpose_depthwise",
        "  input %x: f32[1,6,3,3]
  param %w: f32[6,1,4,4] = he(seed=2)
  param %b: f32[6] = uniform(low=-1, high=1, seed=3)
  %y = ConvTranspose2d(%x, %w, %b) {strides=[3,2], dilations=[1,2], group=6, output_padding=[2,1]}
  %z = Relu(%y)
  output %z",
    );
}

#[test]
fn conv_transpose_large_pads_no_bias_no_epilogue() {
    check(
        "conv_transpose_pads",
        "  input %x: f32[1,2,5,9]
  param %w: f32[2,2,5,5] = he(seed=2)
  %y = ConvTranspose2d(%x, %w) {strides=[2,1], pads=[2,2,2,2]}
  output %y",
    );
}

fn einsum(test: &str, eq: &str, shapes: &[&str], epilogue: bool) {
    let decls: String = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| format!("  input %x{i}: f32{s}\n"))
        .collect();
    let args: Vec<String> = (0..shapes.len()).map(|i| format!("%x{i}")).collect();
    let tail = if epilogue {
        "  %z = Tanh(%y)\n  output %z"
    } else {
        "  output %y"
    };
    check(
        test,
        &format!(
            "{decls}  %y = Einsum({}) {{equation=\"{eq}\"}}\n{tail}",
            args.join(", ")
        ),
    );
}

#[test]
fn einsum_matmul() {
    einsum("einsum_matmul", "ij,jk->ik", &["[5,7]", "[7,6]"], false);
    einsum("einsum_implicit", "ij,jk", &["[2,3]", "[3,4]"], true);
}

#[test]
fn einsum_batched_matmul_and_broadcast_batch() {
    einsum("einsum_bmm", "bij,bjk->bik", &["[2,4,5]", "[2,5,3]"], true);
    einsum(
        "einsum_bmm_bcast",
        "bij,bjk->bik",
        &["[1,3,4]", "[2,4,5]"],
        false,
    );
}

#[test]
fn einsum_transpose_contract() {
    einsum(
        "einsum_bij_bkj",
        "bij,bkj->bik",
        &["[3,4,5]", "[3,6,5]"],
        false,
    );
    einsum("einsum_permuted", "jb,bkj->kb", &["[5,3]", "[3,4,5]"], true);
    einsum("einsum_transpose", "ij->ji", &["[4,6]"], false);
}

#[test]
fn einsum_three_operands_diagonal_and_full_sum() {
    einsum(
        "einsum_three",
        "abc,cd,de->abe",
        &["[2,3,4]", "[4,5]", "[5,3]"],
        true,
    );
    einsum("einsum_diag", "ii->i", &["[5,5]"], false);
    einsum(
        "einsum_batch_diag",
        "bii,bi->b",
        &["[2,3,3]", "[2,3]"],
        false,
    );
    einsum("einsum_sum_all", "ij->", &["[4,6]"], false);
    einsum("einsum_outer", "i,j->ij", &["[5]", "[7]"], false);
}

/// `(seq, batch, input, hidden)` of the recurrent tests.
const SEQ: usize = 3;
const BATCH: usize = 2;
const INPUT: usize = 3;
const HID: usize = 4;

fn recurrent_decls(dirs: usize, gates: usize, lstm_extra: &str) -> String {
    format!(
        "  input %x: f32[{SEQ},{BATCH},{INPUT}]
  input %h0: f32[{dirs},{BATCH},{HID}]
  param %w: f32[{dirs},{gh},{INPUT}] = uniform(low=-0.6, high=0.6, seed=10)
  param %r: f32[{dirs},{gh},{HID}] = uniform(low=-0.6, high=0.6, seed=20)
  param %b: f32[{dirs},{gh2}] = uniform(low=-0.5, high=0.5, seed=30)
{lstm_extra}",
        gh = gates * HID,
        gh2 = 2 * gates * HID
    )
}

fn acts(a: &str, dirs: usize) -> String {
    if dirs == 2 {
        format!("{a},{a}")
    } else {
        a.to_string()
    }
}

#[test]
fn rnn_forward_reverse_bidirectional() {
    for (dir, dirs, a, clip) in [
        ("forward", 1, "Tanh", ""),
        ("reverse", 1, "Relu", ", clip=2.5"),
        ("bidirectional", 2, "HardSigmoid(0.3;0.4)", ""),
    ] {
        check(
            &format!("rnn_{dir}"),
            &format!(
                "{}  %y, %yh = RNN(%x, %w, %r, %b, %h0) {{hidden_size={HID}, direction={dir}, activations=\"{}\"{clip}}}\n  output %y, %yh",
                recurrent_decls(dirs, 1, ""),
                acts(a, dirs)
            ),
        );
    }
}

#[test]
fn rnn_bidirectional_mixed_activations() {
    check(
        "rnn_bidirectional_mixed",
        &format!(
            "{}  %y, %yh = RNN(%x, %w, %r, %b, %h0) {{hidden_size={HID}, direction=bidirectional, activations=\"Tanh,Relu\"}}\n  output %y, %yh",
            recurrent_decls(2, 1, "")
        ),
    );
}

#[test]
fn gru_both_linear_before_reset() {
    for lbr in [0, 1] {
        for (dir, dirs, a, clip) in [
            ("forward", 1, "Sigmoid,Tanh", ""),
            ("bidirectional", 2, "HardSigmoid,Relu", ", clip=1.5"),
        ] {
            check(
                &format!("gru_{dir}_lbr{lbr}"),
                &format!(
                    "{}  %y, %yh = GRU(%x, %w, %r, %b, %h0) {{hidden_size={HID}, direction={dir}, linear_before_reset={lbr}, activations=\"{}\"{clip}}}\n  %z = Relu(%yh)\n  output %y, %z",
                    recurrent_decls(dirs, 3, ""),
                    acts(a, dirs)
                ),
            );
        }
    }
}

#[test]
fn lstm_forward_bidirectional_peepholes_input_forget() {
    for (dir, dirs) in [("forward", 1), ("bidirectional", 2), ("reverse", 1)] {
        for (forget, peep, a, clip) in [
            (0, true, "Sigmoid,Tanh,Tanh", ""),
            (1, true, "Sigmoid,Tanh,Tanh", ", clip=2.0"),
            (0, false, "HardSigmoid,Tanh,Relu", ""),
        ] {
            let extra = format!(
                "  input %c0: f32[{dirs},{BATCH},{HID}]\n  param %p: f32[{dirs},{}] = uniform(low=-0.5, high=0.5, seed=40)\n",
                3 * HID
            );
            let p_arg = if peep { ", %p" } else { "" };
            check(
                &format!("lstm_{dir}_forget{forget}_peep{peep}"),
                &format!(
                    "{}  %y, %yh, %yc = LSTM(%x, %w, %r, %b, %h0, %c0{p_arg}) {{hidden_size={HID}, direction={dir}, input_forget={forget}, activations=\"{}\"{clip}}}\n  output %y, %yh, %yc",
                    recurrent_decls(dirs, 4, &extra),
                    acts(a, dirs)
                ),
            );
        }
    }
}

/// The kernels' shapes, without a device: the Relu is fused into the
/// ConvTranspose2d and Einsum shaders, and a recurrent layer is one
/// projection stage plus one stage per step (two for GRU with
/// `linear_before_reset = 0`).
#[test]
fn kernels_fuse_epilogues_and_stage_recurrences() {
    let compile = |body: &str| {
        let g = dnnc_compiler::model::load_model_str(&format!("graph t {{\n{body}\n}}"), "t.dnn")
            .expect("parse");
        dnnc_compiler::codegen::gpu::compile_gpu(&g, &Default::default()).expect("compile")
    };
    let p = compile(
        "  input %x: f32[1,2,3,3]
  param %w: f32[2,2,3,3] = he(seed=2)
  %y = ConvTranspose2d(%x, %w) {strides=[2,2]}
  %z = Relu(%y)
  output %z",
    );
    let ops: Vec<&str> = p.kernels.iter().map(|k| k.op.as_str()).collect();
    assert_eq!(ops, ["ConvTranspose2d+Relu"]);
    let p = compile(
        "  input %a: f32[2,3]
  input %b: f32[3,4]
  %y = Einsum(%a, %b) {equation=\"ij,jk->ik\"}
  %z = Relu(%y)
  output %z",
    );
    let ops: Vec<&str> = p.kernels.iter().map(|k| k.op.as_str()).collect();
    assert_eq!(ops, ["Einsum+Relu"]);
    for (lbr, per_step) in [(0, 2), (1, 1)] {
        let p = compile(&format!(
            "{}  %y, %yh = GRU(%x, %w, %r, %b, %h0) {{hidden_size={HID}, direction=bidirectional, linear_before_reset={lbr}}}\n  output %y, %yh",
            recurrent_decls(2, 3, "")
        ));
        assert_eq!(p.stages().count(), 1 + per_step * SEQ, "GRU lbr={lbr}");
    }
}
