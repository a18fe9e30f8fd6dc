//! GEMM micro-kernel comparison behind the CPU backend's choice (see
//! docs/cpu-backend.md, "GEMM micro-kernel choice"): single-threaded
//! f32 GFLOP/s of the `matrixmultiply` (through `dnnc_sgemm`) and the
//! `gemm` crate.
//! `cargo run --release -p dnnc-runtime --example gemm_bench`.
//! Also the packed-weight kernel (`pgemm`), on this machine's best kernel
//! and on the AVX2 path, over the CNN layer shapes the backend runs, and
//! the best kernel with its fused epilogue (bias + residual + Relu, the
//! ResNet block tail) against the same GEMM followed by a separate pass.
//! On AVX-512, `Avx512` runs column blocks of <= 16 on the narrow `14 x 16`
//! kernel and `Avx512-masked` on the masked wide `14 x 32` one.

use dnnc_runtime::cpu::native::dnnc_sgemm;
use dnnc_runtime::cpu::pgemm::{dnnc_sgemm_packed, pack_a_with, set_narrow, Epilogue, Kernel};
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
        (512, 49, 4608, "512x49x4608 (ResNet layer4 3x3 im2col)"),
        (512, 16, 512, "512x16x512 (ResNet layer4 Winograd F(2x2))"),
        (256, 49, 256, "256x49x256 (ResNet layer3 Winograd F(2x2))"),
        (64, 12544, 147, "64x12544x147 (ResNet stem 7x7 im2col)"),
        (64, 512, 147, "64x512x147 (ResNet stem, one 512 chunk)"),
        (144, 3136, 24, "144x3136x24 (MobileNet-V2 1x1 expand)"),
        (24, 3136, 144, "24x3136x144 (MobileNet-V2 1x1 project)"),
        (960, 49, 160, "960x49x160 (MobileNet-V2 1x1, 7x7)"),
        (1280, 49, 320, "1280x49x320 (MobileNet-V2 last 1x1)"),
        (64, 3136, 64, "64x3136x64 (GoogLeNet 1x1)"),
        (96, 12544, 16, "96x12544x16 (MobileNet-V2 1x1, 112x112)"),
        (1000, 1, 512, "1000x1x512 (ResNet FC, GEMV)"),
        (1000, 1, 1280, "1000x1x1280 (MobileNet-V2 FC, GEMV)"),
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
        let mut packed = Vec::new();
        let variants = [
            (Kernel::best(), true, ""),
            (Kernel::Avx512, false, "-masked"),
            (Kernel::Avx2, true, ""),
        ];
        for (i, (kern, narrow, tag)) in variants.into_iter().enumerate() {
            if !kern.supported() || (i == 2 && Kernel::best() == Kernel::Avx2) {
                continue;
            }
            set_narrow(narrow);
            let pa = pack_a_with(kern, m, k, &a, k, 1, 1.0);
            let tp = best_of(reps, || unsafe {
                let rc = dnnc_sgemm_packed(
                    pa.as_ptr() as *const f32,
                    m,
                    n,
                    k,
                    b.as_ptr(),
                    n as isize,
                    1,
                    c.as_mut_ptr(),
                    n as isize,
                    1,
                    0,
                );
                assert_eq!(rc, 0);
            });
            packed.push(format!("{kern:?}{tag} {:6.1}", flops / tp / 1e9));
        }
        set_narrow(true);
        // Fused epilogue vs GEMM + separate bias/residual/Relu pass (ms).
        let pa = pack_a_with(Kernel::best(), m, k, &a, k, 1, 1.0);
        let bias: Vec<f32> = (0..m).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
        let res: Vec<f32> = (0..m * n).map(|i| (i % 5) as f32 * 0.1 - 0.2).collect();
        let ep = Epilogue {
            bias: bias.as_ptr(),
            res: res.as_ptr(),
            res_rs: n as isize,
            res_cs: 1,
            lo: 0.0,
            ..Epilogue::NONE
        };
        let call = |c: &mut [f32], mode: usize| unsafe {
            let rc = dnnc_sgemm_packed(
                pa.as_ptr() as *const f32,
                m,
                n,
                k,
                b.as_ptr(),
                n as isize,
                1,
                c.as_mut_ptr(),
                n as isize,
                1,
                mode,
            );
            assert_eq!(rc, 0);
        };
        let tf = best_of(reps, || call(&mut c, &ep as *const Epilogue as usize));
        let ts = best_of(reps, || {
            call(&mut c, 0);
            for (i, row) in c.chunks_exact_mut(n).enumerate() {
                let rrow = &res[i * n..(i + 1) * n];
                for (v, r) in row.iter_mut().zip(rrow) {
                    let x = *v + bias[i] + r;
                    *v = if x < 0.0 { 0.0 } else { x };
                }
            }
        });
        let epi = format!(
            "epilogue fused {:.3} ms vs separate {:.3} ms",
            tf * 1e3,
            ts * 1e3
        );
        println!(
            "{label:42} matrixmultiply {:6.1}  gemm {:6.1}  packed {} GFLOP/s  {epi}",
            flops / tg / 1e9,
            flops / tm / 1e9,
            packed.join("  ")
        );
    }
}
