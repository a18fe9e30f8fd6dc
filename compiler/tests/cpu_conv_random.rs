//! Seeded random-shape differential test of Conv2d on the CPU backend:
//! random sizes, strides, pads, dilations, groups (including depthwise and
//! 1x1) and fused epilogues, on every applicable algorithm.

mod cpu_common;

use clap::ValueEnum;
use cpu_common::{check_with, ConvCase, Rng, CONV_EPILOGUES};
use dnnc_compiler::codegen::cpu::{ConvAlgo, CpuOptions};

#[test]
fn random_convolutions_match_the_interpreter() {
    let rounds: usize = std::env::var("CPU_CONV_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let mut r = Rng(2024);
    for round in 0..rounds {
        let groups = [1, 1, 2, 3][r.below(4)];
        let depthwise = r.below(5) == 0;
        let cg = if depthwise { 1 } else { 1 + r.below(4) };
        let c = cg * groups;
        let (g, mg) = if depthwise {
            (c.max(2), 1)
        } else {
            (groups, 1 + r.below(4))
        };
        let c = if depthwise { g } else { c };
        let m = mg * g;
        let (kh, kw) = (1 + r.below(4), 1 + r.below(4));
        let (sh, sw) = (1 + r.below(3), 1 + r.below(3));
        let (dh, dw) = (1 + r.below(2), 1 + r.below(2));
        let case = ConvCase::draw(&mut r, [c, m], g, ([kh, kw], [sh, sw], [dh, dw]), round);
        let epi = CONV_EPILOGUES[r.below(4)];
        let mut body = case.body(epi);
        let out = if epi.is_empty() { "%c" } else { "%y" };
        body += &format!("{epi}\noutput {out}");
        let src = format!("graph conv{round} {{\n{body}\n}}\n");
        let graph =
            dnnc_ir::text::parse(&src, "conv.dnn").unwrap_or_else(|e| panic!("{e:?}\n{src}"));
        let ins = case.inputs(&mut r, epi);
        let algos =
            std::iter::once(None).chain(ConvAlgo::value_variants().iter().copied().map(Some));
        for algo in algos {
            // Sums of up to a few hundred products: scale atol with K.
            check_with(
                &graph,
                &ins,
                1e-4,
                1e-4,
                &CpuOptions {
                    conv_algo: algo,
                    ..Default::default()
                },
            );
        }
    }
}
