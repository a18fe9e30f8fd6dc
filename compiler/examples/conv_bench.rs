//! Per-algorithm timing and error of single convolutions on the CPU
//! backend: ResNet-18's 3x3 layers by default (stride 1, pad 1, bias +
//! ReLU epilogue), one thread, best of several runs. Errors are against
//! the direct algorithm's output: max abs, and max abs relative to the
//! largest output magnitude.
//!
//! `cargo run --release -p dnnc-compiler --example conv_bench [-- HxWxC[xK] ...]`
//! (`K` is the kernel size, default 3).

use clap::ValueEnum;
use dnnc_compiler::codegen::cpu::{compile_cpu, conv_plan, ConvAlgo, CpuOptions};
use dnnc_ir::Tensor;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let layers: Vec<[usize; 4]> = if args.is_empty() {
        vec![
            [56, 56, 64, 3],
            [28, 28, 128, 3],
            [14, 14, 256, 3],
            [7, 7, 512, 3],
        ]
    } else {
        args.iter()
            .filter_map(|a| {
                let v: Vec<usize> = a.split('x').filter_map(|s| s.parse().ok()).collect();
                match v[..] {
                    [h, w, c] => Some([h, w, c, 3]),
                    [h, w, c, k] => Some([h, w, c, k]),
                    _ => None,
                }
            })
            .collect()
    };
    for [h, w, c, k] in layers {
        let p = k / 2;
        let src = format!(
            "graph l {{\ninput %x: f32[1,{c},{h},{w}]\nparam %w: f32[{c},{c},{k},{k}] = he(seed=1)\n\
             param %b: f32[{c}] = uniform(low=-0.1, high=0.1, seed=2)\n\
             %c = Conv2d(%x, %w, %b) {{strides=[1,1], pads=[{p},{p},{p},{p}], dilations=[1,1], group=1}}\n\
             %y = Relu(%c)\noutput %y\n}}\n"
        );
        let g = dnnc_ir::text::parse(&src, "l.dnn").expect("parse");
        let x = dnnc_ir::Init::Normal {
            mean: 0.0,
            std: 1.0,
            seed: 3,
        }
        .materialize(&g.value(g.inputs()[0]).ty)
        .expect("input");
        let ins = vec![("x".to_string(), Tensor::F32(x))];
        let gflop = 2.0 * (h * w * c * c * k * k) as f64 / 1e9;
        let mut reference: Option<Vec<f32>> = None;
        println!("{h}x{w}x{c}, {k}x{k} ({gflop:.2} GFLOP direct):");
        for &a in ConvAlgo::value_variants() {
            let opts = CpuOptions {
                conv_algo: Some(a),
                ..Default::default()
            };
            if conv_plan(&g, &opts)[0].algo != a {
                continue;
            }
            let exe = compile_cpu(&g, &opts).expect("compile");
            let out = exe.run(&ins).expect("run");
            let mut best = f64::MAX;
            let t0 = Instant::now();
            while t0.elapsed().as_secs_f64() < 1.0 {
                let t = Instant::now();
                exe.run(&ins).expect("run");
                best = best.min(t.elapsed().as_secs_f64());
            }
            let Tensor::F32(o) = &out[0] else { return };
            let o: Vec<f32> = o.iter().copied().collect();
            let err = match &reference {
                None => {
                    reference = Some(o.clone());
                    String::from("(reference)")
                }
                Some(r) => {
                    let scale = r.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let abs = r
                        .iter()
                        .zip(&o)
                        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                    format!("max abs err {abs:.2e}, rel to max|y| {:.2e}", abs / scale)
                }
            };
            println!(
                "  {:10} {:8.3} ms {:7.1} GFLOP/s-equiv  {err}",
                a.name(),
                best * 1e3,
                gflop / best
            );
        }
    }
}
