//! Per-kernel timing of a model on the CPU backend:
//! `cargo run --release -p dnnc-compiler --example cpu_profile -- MODEL.onnx INPUT.npy [CONV_ALGO]`
//! (`CONV_ALGO` forces a convolution algorithm where it applies, as
//! `dnnc run --conv-algo`).

use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(model), Some(input)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: cpu_profile MODEL.onnx INPUT.npy");
        std::process::exit(2);
    };
    let g = match dnnc_compiler::load_model(std::path::Path::new(model)) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let x = dnnc_ir::tensor::read_npy(std::path::Path::new(input)).expect("input");
    let conv_algo = args.get(3).map(|a| {
        <dnnc_compiler::codegen::cpu::ConvAlgo as clap::ValueEnum>::from_str(a, true)
            .expect("unknown conv algorithm")
    });
    let opts = CpuOptions {
        conv_algo,
        ..Default::default()
    };
    let exe = compile_cpu(&g, &opts).expect("compile");
    let ins = vec![(g.value(g.inputs()[0]).name.clone(), x)];
    exe.run(&ins).expect("run");
    let mut best: Option<Vec<(String, String, std::time::Duration)>> = None;
    for _ in 0..5 {
        let (_, t) = exe.run_profiled(&ins).expect("run");
        best = Some(match best {
            None => t,
            Some(b) => b
                .into_iter()
                .zip(t)
                .map(|(a, b)| if b.2 < a.2 { b } else { a })
                .collect(),
        });
    }
    let best = best.unwrap_or_default();
    let total: f64 = best.iter().map(|s| s.2.as_secs_f64()).sum();
    let mut sorted = best.clone();
    sorted.sort_by_key(|s| std::cmp::Reverse(s.2));
    for (name, op, t) in sorted.iter().take(25) {
        println!("{:8.3} ms  {op:30} {name}", t.as_secs_f64() * 1e3);
    }
    println!("total {:.2} ms over {} kernels", total * 1e3, best.len());
}
