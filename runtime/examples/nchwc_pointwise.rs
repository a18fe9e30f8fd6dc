//! A pointwise conv two ways on the same data: the packed GEMM on
//! row-major (NCHW) activations, and the channel-blocked kernel
//! (`dnnc_conv1x1_nchw8c`) on `[C/8][pixels][8]` ones, one image after
//! another as a model at batch `IMGS` runs them (default 8). Between runs
//! a `SWEEP_MB` buffer (default 128 MiB) is written, leaving the
//! activations where a batch-8 model's usually are: in L3 or memory.
//! Prints both medians of 15 runs and their ratio, and checks that the
//! two agree.
//!
//! `cargo run --release -p dnnc-runtime --example nchwc_pointwise -- COUT PIXELS CIN`
//! (channel counts multiples of 8).

use dnnc_runtime::cpu::blocked::{dnnc_conv1x1_nchw8c, pack_filter, panel_count};
use dnnc_runtime::cpu::pgemm::{dnnc_sgemm_packed, pack_a_with, Kernel};
use dnnc_runtime::cpu::AlignedBuf;
use std::time::Instant;

fn floats(b: &mut AlignedBuf) -> &mut [f32] {
    let len = b.len() / 4;
    // SAFETY: the buffer is `len * 4` bytes, 64-byte aligned and zeroed.
    unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr() as *mut f32, len) }
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let dims: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("COUT PIXELS CIN as integers"))
        .collect();
    let [m, n, k] = dims[..] else {
        eprintln!("usage: nchwc_pointwise COUT PIXELS CIN");
        std::process::exit(2);
    };
    assert!(
        m % 8 == 0 && k % 8 == 0,
        "channel counts must be multiples of 8"
    );
    let imgs = env("IMGS", 8);
    let w: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7) % 13) as f32 * 0.1 - 0.6)
        .collect();
    let mut bbuf = AlignedBuf::zeroed(imgs * k * n * 4);
    let b = floats(&mut bbuf);
    for (i, v) in b.iter_mut().enumerate() {
        *v = ((i * 5) % 11) as f32 * 0.1 - 0.5;
    }
    // The same activations blocked: channel `c` of pixel `p` at
    // `[c / 8][p][c % 8]`.
    let mut xbuf = AlignedBuf::zeroed(imgs * k * n * 4);
    let x = floats(&mut xbuf);
    for img in 0..imgs {
        for c in 0..k {
            for p in 0..n {
                x[img * k * n + ((c / 8) * n + p) * 8 + c % 8] = b[img * k * n + c * n + p];
            }
        }
    }
    let packed_a = pack_a_with(Kernel::best(), m, k, &w, k, 1, 1.0);
    let packed_w = pack_filter(&w, m, k);
    let mut cbuf = AlignedBuf::zeroed(imgs * m * n * 4);
    let mut ybuf = AlignedBuf::zeroed(imgs * m * n * 4);
    let c = floats(&mut cbuf);
    let y = floats(&mut ybuf);
    let mut sweep = vec![0u8; env("SWEEP_MB", 128) << 20];
    let mut sweep_caches = || {
        for (i, v) in sweep.iter_mut().enumerate().step_by(64) {
            *v = v.wrapping_add(i as u8);
        }
    };
    let (mut t_gemm, mut t_blocked) = (Vec::new(), Vec::new());
    for _ in 0..15 {
        sweep_caches();
        let t = Instant::now();
        for img in 0..imgs {
            // SAFETY: `packed_a` packs the m x k filter; B (k x n) and C
            // (m x n) are image `img`'s row-major planes.
            let rc = unsafe {
                dnnc_sgemm_packed(
                    packed_a.as_ptr() as *const f32,
                    m,
                    n,
                    k,
                    b.as_ptr().add(img * k * n),
                    n as isize,
                    1,
                    c.as_mut_ptr().add(img * m * n),
                    n as isize,
                    1,
                    0,
                )
            };
            assert_eq!(rc, 0);
        }
        t_gemm.push(t.elapsed().as_secs_f64());
        sweep_caches();
        let t = Instant::now();
        // SAFETY: `packed_w` is `pack_filter`'s; x and y hold `imgs`
        // blocked images of k and m channels.
        let rc = unsafe {
            dnnc_conv1x1_nchw8c(
                packed_w.as_ptr(),
                k,
                m,
                x.as_ptr(),
                y.as_mut_ptr(),
                n,
                0,
                imgs * n,
                0,
                panel_count(m),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0);
        t_blocked.push(t.elapsed().as_secs_f64());
    }
    let mut worst = 0f32;
    for img in 0..imgs {
        for o in 0..m {
            for p in 0..n {
                let g = c[img * m * n + o * n + p];
                let v = y[img * m * n + ((o / 8) * n + p) * 8 + o % 8];
                worst = worst.max((g - v).abs() / g.abs().max(1.0));
            }
        }
    }
    // Two orders of summing `k` products: the bound grows as sqrt(k).
    let bound = 1e-5 * (k as f32 / 1024.0).max(1.0).sqrt();
    assert!(worst < bound, "the two disagree: relative error {worst:e}");
    let median = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let (g, bl) = (median(&mut t_gemm), median(&mut t_blocked));
    let flops = 2.0 * (m * n * k * imgs) as f64;
    println!(
        "{m}x{n}x{k} x{imgs}: packed GEMM {:.0} us {:.1} GFLOP/s | blocked {:.0} us {:.1} GFLOP/s | blocked/GEMM {:.3}",
        g * 1e6,
        flops / g / 1e9,
        bl * 1e6,
        flops / bl / 1e9,
        bl / g
    );
}
