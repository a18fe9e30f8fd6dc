//! GEMM micro-kernel comparison behind the CPU backend's choice (see
//! ARCHITECTURE.md, "CPU backend"): single-threaded f32 GFLOP/s of the
//! `matrixmultiply` (through `dnnc_sgemm`) and the `gemm` crate.
//! `cargo run --release -p dnnc-runtime --example gemm_bench`.

use dnnc_runtime::cpu::native::dnnc_sgemm;
use std::time::Instant;

fn best_of<F: FnMut()>(reps: usize, mut f: F) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

fn main() {
    let shapes = [
        (512usize, 512usize, 512usize, "512x512x512"),
        (
            3136,
            64,
            576,
            "3136x64x576 (ResNet conv, pixels x channels)",
        ),
        (
            64,
            3136,
            576,
            "64x3136x576 (ResNet conv, channels x pixels)",
        ),
        (128, 784, 1152, "128x784x1152 (ResNet layer2 conv)"),
    ];
    for (m, n, k, label) in shapes {
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7) % 13) as f32 * 0.1 - 0.6)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 5) % 11) as f32 * 0.1 - 0.5)
            .collect();
        let mut c = vec![0.0f32; m * n];
        let flops = 2.0 * (m * n * k) as f64;
        let reps = 10;
        let tg = best_of(reps, || unsafe {
            dnnc_sgemm(
                m,
                n,
                k,
                a.as_ptr(),
                k as isize,
                1,
                b.as_ptr(),
                n as isize,
                1,
                c.as_mut_ptr(),
                n as isize,
                1,
                1.0,
                0.0,
            )
        });
        // The gemm crate's convention: dst = alpha * dst + beta * lhs * rhs,
        // column strides before row strides.
        let tm = best_of(reps, || unsafe {
            gemm_f32::gemm::f32::get_gemm_fn()(
                m,
                n,
                k,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                k as isize,
                b.as_ptr(),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm_common::Parallelism::None,
            )
        });
        println!(
            "{label:48} matrixmultiply (dnnc_sgemm) {:6.1} GFLOP/s   gemm {:6.1} GFLOP/s",
            flops / tg / 1e9,
            flops / tm / 1e9
        );
    }
}
