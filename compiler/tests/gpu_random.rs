//! Seeded random-shape differential tests of the GPU backend against the
//! interpreter: convolutions (sizes, strides, pads, dilations, groups,
//! depthwise, 1x1, bias, fused epilogues; implicit GEMM, Winograd forced
//! on and off), pools, and batched MatMuls whose shapes reach the GEMM's
//! tile edges and split-K. Runs on any wgpu adapter (lavapipe in CI);
//! skips with a message without one unless `DNNC_REQUIRE_GPU=1`.

mod cpu_common;

use cpu_common::{assert_close, rand_f32, ConvCase, Rng, CONV_EPILOGUES};
use dnnc_compiler::codegen::gpu::{compile_gpu, GpuOptions};
use dnnc_runtime::gpu::{AdapterChoice, GpuDevice, GpuExecutable};
use std::sync::Arc;

fn device(test: &str) -> Option<Arc<GpuDevice>> {
    match GpuDevice::open(&AdapterChoice::Default) {
        Ok(d) => Some(d),
        Err(e) if std::env::var("DNNC_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("{test}: DNNC_REQUIRE_GPU=1 but no GPU is usable: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED {test}: no GPU adapter ({e})");
            None
        }
    }
}

/// Runs `src` on the GPU with `opts` and on the interpreter; compares.
/// Returns the stage labels, so callers can check which paths ran.
fn check(
    dev: &Arc<GpuDevice>,
    src: &str,
    ins: &[(String, dnnc_ir::Tensor)],
    winograd: Option<bool>,
    atol: f32,
) -> Vec<String> {
    let g = dnnc_ir::text::parse(src, "t.dnn").unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    let want = dnnc_runtime::interp::run(&g, ins).expect("interpreter");
    // Tiles sized as for a GPU (64 busy workgroups), whatever the
    // adapter: lavapipe's own figure would rarely pick split-K or the
    // small tiles, and those are the paths a GPU runs.
    let opts = GpuOptions {
        limits: dnnc_runtime::gpu::GpuLimits {
            busy_groups: 64,
            ..dev.limits()
        },
        winograd,
    };
    let p = compile_gpu(&g, &opts).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let labels = p.stages().map(|s| s.label.clone()).collect();
    let exe = GpuExecutable::new(dev.clone(), p).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let got = exe.run(ins).unwrap_or_else(|e| panic!("{e}\n{src}"));
    for (a, e) in got.iter().zip(&want) {
        assert_close(&format!("{src}\nwinograd {winograd:?}"), a, e, 1e-4, atol);
    }
    labels
}

#[test]
fn random_convolutions_and_pools_match_the_interpreter() {
    let Some(dev) = device("random_convolutions_and_pools_match_the_interpreter") else {
        return;
    };
    let mut r = Rng(7);
    let mut wino = 0;
    for round in 0..40 {
        // One round in four has Winograd's shape (3x3, stride 1,
        // ungrouped); the rest are anything.
        let wino_shape = r.below(4) == 0;
        let groups = if wino_shape {
            1
        } else {
            [1, 1, 2, 3][r.below(4)]
        };
        let depthwise = !wino_shape && r.below(5) == 0;
        let cg = if depthwise { 1 } else { 1 + r.below(6) };
        let (g, mg) = if depthwise {
            (2 + r.below(4), 1)
        } else {
            (groups, 1 + r.below(5))
        };
        let c = cg * g;
        let m = mg * g;
        let (kh, kw) = if wino_shape {
            (3, 3)
        } else {
            (1 + r.below(4), 1 + r.below(4))
        };
        let (sh, sw) = if wino_shape {
            (1, 1)
        } else {
            (1 + r.below(3), 1 + r.below(3))
        };
        let (dh, dw) = if wino_shape {
            (1, 1)
        } else {
            (1 + r.below(2), 1 + r.below(2))
        };
        let case = ConvCase::draw(&mut r, [c, m], g, ([kh, kw], [sh, sw], [dh, dw]), round);
        let (oh, ow) = case.out_hw();
        let epi = CONV_EPILOGUES[r.below(4)];
        let mut body = case.body(epi);
        let out = if epi.is_empty() { "%c" } else { "%y" };
        // A pool after the conv: max or average, its own window.
        let (pk, ps) = (1 + r.below(3), 1 + r.below(2));
        let pool = if oh >= pk && ow >= pk {
            let kind = ["MaxPool", "AveragePool"][r.below(2)];
            format!(
                "%q = {kind}({out}) {{kernel=[{pk},{pk}], strides=[{ps},{ps}], ceil_mode={}}}\n",
                r.below(2)
            )
        } else {
            String::new()
        };
        body += &format!(
            "{epi}\n{pool}output {out}{}",
            if pool.is_empty() { "" } else { ", %q" }
        );
        let src = format!("graph conv{round} {{\n{body}\n}}\n");
        let ins = case.inputs(&mut r, epi);
        for winograd in [None, Some(true)] {
            let labels = check(&dev, &src, &ins, winograd, 1e-4);
            wino += labels
                .iter()
                .filter(|l| l.contains("winograd-gemm"))
                .count();
        }
    }
    assert!(wino > 0, "no round ran Winograd");
}

#[test]
fn random_matmuls_match_the_interpreter() {
    let Some(dev) = device("random_matmuls_match_the_interpreter") else {
        return;
    };
    let mut r = Rng(11);
    let mut split = 0;
    for round in 0..24 {
        let m = 1 + r.below(80);
        let n = 1 + r.below(80);
        // Long reductions now and then, for split-K.
        let k = if r.below(3) == 0 {
            256 + r.below(900)
        } else {
            1 + r.below(70)
        };
        let b = 1 + r.below(3);
        let src = format!(
            "graph mm{round} {{\n  input %a: f32[{b},{m},{k}]\n  input %b: f32[{k},{n}]\n  %y = MatMul(%a, %b)\n  %z = Tanh(%y)\n  output %z\n}}\n"
        );
        let ins = vec![
            (
                "a".to_string(),
                rand_f32(&[b, m, k], r.next_u64(), -1.0, 1.0),
            ),
            ("b".to_string(), rand_f32(&[k, n], r.next_u64(), -1.0, 1.0)),
        ];
        let labels = check(&dev, &src, &ins, None, 1e-4);
        split += labels.iter().filter(|l| l.ends_with("split-k")).count();
    }
    assert!(split > 0, "no round split its reduction");
}
