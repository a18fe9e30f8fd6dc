//! Interleaved A/B timing of how waves of independent kernels run:
//! `cargo run --release -p dnnc-compiler --example concurrency_bench -- MODEL.onnx [THREADS] [ITERS]`
//! (`input.npy` next to the model, else a fixed pseudo-random input)
//! compiles the model once per policy (never, auto, always) and one
//! thread, then times one `run` of each in turn per iteration, so load
//! from other processes hits all of them alike. Prints medians and
//! minimums in ms.

use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};
use dnnc_runtime::cpu::Concurrency;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(model) = args.get(1) else {
        eprintln!("usage: concurrency_bench MODEL.onnx [THREADS] [ITERS]");
        std::process::exit(2);
    };
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let iters: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(30);
    let g = dnnc_compiler::load_model(std::path::Path::new(model)).expect("model");
    let ty = g.value(g.inputs()[0]).ty.clone();
    let x = dnnc_ir::tensor::read_npy(&std::path::Path::new(model).with_file_name("input.npy"))
        .unwrap_or_else(|_| {
            // No input.npy: a fixed pseudo-random input of the declared shape.
            let n = ty.numel();
            let v: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            dnnc_ir::Tensor::F32(ndarray::ArrayD::from_shape_vec(ty.shape.clone(), v).unwrap())
        });
    let ins = vec![(g.value(g.inputs()[0]).name.clone(), x)];
    let mut exes = Vec::new();
    let one = compile_cpu(&g, &CpuOptions::default()).expect("compile");
    exes.push(("1 thread".to_string(), one));
    for p in [Concurrency::Never, Concurrency::Auto, Concurrency::Always] {
        let mut e = compile_cpu(&g, &CpuOptions::default()).expect("compile");
        e.set_threads(threads).expect("threads");
        e.set_concurrency(p);
        exes.push((format!("{threads} threads, {p:?}"), e));
    }
    let mut times = vec![Vec::new(); exes.len()];
    for i in 0..iters + 3 {
        for (k, (_, e)) in exes.iter().enumerate() {
            let t = Instant::now();
            e.run(&ins).expect("run");
            if i >= 3 {
                times[k].push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    for ((name, e), mut t) in exes.iter().zip(times) {
        t.sort_by(f64::total_cmp);
        println!(
            "{name:<22} median {:8.3} ms  min {:8.3} ms  ({} concurrent waves, arena {} B)",
            t[t.len() / 2],
            t[0],
            e.waves().iter().filter(|w| w.concurrent).count(),
            e.memory().planned
        );
    }
}
