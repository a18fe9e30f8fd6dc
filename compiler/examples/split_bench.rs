//! Interleaved A/B timing of splitting generated kernels across threads:
//! `cargo run --release -p dnnc-compiler --example split_bench -- MODEL.onnx [THREADS] [ITERS]`
//! (`input.npy` next to the model) compiles the model for one thread and
//! for `THREADS` threads with kernel splitting off (`KernelSplit::Never`,
//! only GEMMs and concurrent waves) and under the W-D rule (`Auto`), then
//! times one `run` of each in turn per iteration, so load from other
//! processes hits all of them alike. Prints medians and minimums in ms,
//! and the summed median time of the kernels the rule splits.

use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};
use dnnc_runtime::cpu::KernelSplit;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(model) = args.get(1) else {
        eprintln!("usage: split_bench MODEL.onnx [THREADS] [ITERS]");
        std::process::exit(2);
    };
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let iters: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(30);
    let path = std::path::Path::new(model);
    let g = dnnc_compiler::load_model(path).expect("model");
    let x = dnnc_ir::tensor::read_npy(&path.with_file_name("input.npy")).expect("input.npy");
    let ins = vec![(g.value(g.inputs()[0]).name.clone(), x)];
    let mut exes = Vec::new();
    let one = compile_cpu(&g, &CpuOptions::default()).expect("compile");
    exes.push(("1 thread".to_string(), one));
    for p in [KernelSplit::Never, KernelSplit::Auto] {
        let mut e = compile_cpu(&g, &CpuOptions::default()).expect("compile");
        e.set_threads(threads).expect("threads");
        e.set_kernel_split(p);
        exes.push((format!("{threads} threads, split {p:?}"), e));
    }
    // The steps the rule splits, by index.
    let split: Vec<usize> = exes[2]
        .1
        .step_tasks()
        .iter()
        .enumerate()
        .filter(|(_, &t)| t > 1)
        .map(|(j, _)| j)
        .collect();
    let mut times = vec![Vec::new(); exes.len()];
    let mut kernel = vec![Vec::new(); exes.len()];
    for i in 0..iters + 3 {
        for (k, (_, e)) in exes.iter().enumerate() {
            let t = Instant::now();
            e.run(&ins).expect("run");
            let el = t.elapsed().as_secs_f64() * 1e3;
            let (_, st) = e.run_profiled(&ins).expect("run");
            if i >= 3 {
                times[k].push(el);
                kernel[k].push(
                    split
                        .iter()
                        .map(|&j| st[j].2.as_secs_f64() * 1e3)
                        .sum::<f64>(),
                );
            }
        }
    }
    let med = |mut t: Vec<f64>| {
        t.sort_by(f64::total_cmp);
        (t[t.len() / 2], t[0])
    };
    for (((name, _), t), kt) in exes.iter().zip(times).zip(kernel) {
        let ((m, mn), (km, _)) = (med(t), med(kt));
        println!(
            "{name:<26} median {m:8.3} ms  min {mn:8.3} ms  the {} split kernels {km:7.3} ms",
            split.len()
        );
    }
}
