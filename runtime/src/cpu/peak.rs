//! The machine's f32 multiply-add peak, measured rather than assumed, so
//! `dnnc bench`'s "% of peak" means the same on every machine: the
//! project's figures come from both an AVX-512 Xeon (~235 GFLOP/s a core
//! with turbo) and a 2 GHz AVX2 EPYC (~32), and a constant for one of
//! them reads 5x off on the other.

use std::sync::OnceLock;
use std::time::Instant;

/// Independent accumulators in the measuring loop: more than the FMA
/// latency times the ports on every core measured (4 x 2 to 5 x 2).
const CHAINS: usize = 12;

/// Loop iterations per timed run (about 3 ms at 32 GFLOP/s, 0.4 at 240).
const ITERS: usize = 200_000;

/// Peak f32 throughput of one core in GFLOP/s: the best of several timed
/// runs of a register-only loop of independent fused multiply-adds on
/// the widest vectors the packed GEMM's kernel uses (AVX-512, else
/// AVX2+FMA, else scalar multiply-adds). Measured once per process (a few
/// milliseconds); an attainable ceiling, not the datasheet's, so a core
/// that turbos above its base clock is measured at its turbo.
pub fn gflops_per_core() -> f64 {
    static PEAK: OnceLock<f64> = OnceLock::new();
    *PEAK.get_or_init(|| {
        (0..7)
            .map(|_| {
                let t = Instant::now();
                let flops = fma_loop();
                flops / t.elapsed().as_secs_f64().max(1e-9) / 1e9
            })
            .fold(0.0, f64::max)
    })
}

/// Bytes the bandwidth measurement streams: well past the last-level
/// cache of every machine measured (32 MiB at most), so the reads come
/// from memory, as an in-model fully-connected layer's weights do once
/// the layers before it have swept the cache.
pub const STREAM_BYTES: usize = 128 << 20;

/// One core's sustained read bandwidth from memory in GB/s: the best of
/// several timed passes summing a buffer of [`STREAM_BYTES`] (written
/// once first, so the pages exist). Measured once per process (~0.1 s).
/// It is the roof of a kernel that streams more bytes than it has
/// arithmetic for, such as a batch-1 fully-connected layer (a
/// matrix-vector product reads each 4-byte weight for one
/// multiply-add): `dnnc run --profile` rates such kernels against it,
/// and `dnnc calibrate` writes it into the cost model's profile.
pub fn stream_gbs_per_core() -> f64 {
    static BW: OnceLock<f64> = OnceLock::new();
    *BW.get_or_init(|| {
        let words: Vec<u64> = (0..STREAM_BYTES / 8).map(|i| i as u64).collect();
        (0..5)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(stream_sum(std::hint::black_box(&words)));
                STREAM_BYTES as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e9
            })
            .fold(0.0, f64::max)
    })
}

/// Wrapping sums over independent lanes, which the compiler vectorises:
/// one add per 8 bytes is far below what a core can do, so the loads
/// set the pace.
fn stream_sum(words: &[u64]) -> u64 {
    let mut lanes = [0u64; 16];
    let chunks = words.chunks_exact(16);
    let rest: u64 = chunks.remainder().iter().fold(0, |a, &w| a.wrapping_add(w));
    for c in chunks {
        for (l, &w) in lanes.iter_mut().zip(c) {
            *l = l.wrapping_add(w);
        }
    }
    lanes.iter().fold(rest, |a, &l| a.wrapping_add(l))
}

/// Runs the loop on the widest vectors in use (`dnnc_ir::isa::cpu_isa`);
/// returns its FLOP count.
fn fma_loop() -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        use dnnc_ir::isa::{cpu_isa, CpuIsa};
        if cpu_isa() >= CpuIsa::Avx512 {
            // SAFETY: a level of AVX-512 is only in use when detected.
            unsafe { x86::avx512() };
            return (ITERS * CHAINS * 16 * 2) as f64;
        }
        if cpu_isa() >= CpuIsa::Avx2 {
            // SAFETY: a level of AVX2 is only in use when AVX2 and FMA
            // were detected.
            unsafe { x86::avx2() };
            return (ITERS * CHAINS * 8 * 2) as f64;
        }
    }
    let mut acc = [0.0f32; CHAINS];
    let (a, b) = (
        std::hint::black_box(0.999_f32),
        std::hint::black_box(1e-3_f32),
    );
    for _ in 0..ITERS {
        for x in acc.iter_mut() {
            *x = *x * a + b;
        }
    }
    std::hint::black_box(acc);
    (ITERS * CHAINS * 2) as f64
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{CHAINS, ITERS};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn avx512() {
        let a = _mm512_set1_ps(std::hint::black_box(0.999));
        let b = _mm512_set1_ps(std::hint::black_box(1e-3));
        let mut acc = [_mm512_setzero_ps(); CHAINS];
        for _ in 0..ITERS {
            for x in acc.iter_mut() {
                *x = _mm512_fmadd_ps(*x, a, b);
            }
        }
        std::hint::black_box(acc);
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn avx2() {
        let a = _mm256_set1_ps(std::hint::black_box(0.999));
        let b = _mm256_set1_ps(std::hint::black_box(1e-3));
        let mut acc = [_mm256_setzero_ps(); CHAINS];
        for _ in 0..ITERS {
            for x in acc.iter_mut() {
                *x = _mm256_fmadd_ps(*x, a, b);
            }
        }
        std::hint::black_box(acc);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_measured_peak_is_a_positive_finite_rate() {
        let p = super::gflops_per_core();
        assert!(p.is_finite() && p > 0.0, "{p}");
        // Measured once: the second call returns the same figure.
        assert_eq!(p, super::gflops_per_core());
    }

    #[test]
    fn the_measured_bandwidth_is_a_positive_finite_rate() {
        let b = super::stream_gbs_per_core();
        assert!(b.is_finite() && b > 0.0, "{b}");
        assert_eq!(b, super::stream_gbs_per_core());
    }

    #[test]
    fn the_stream_sum_reads_every_word() {
        // 16 lanes plus a remainder of 5: every word counted once.
        let words: Vec<u64> = (1..=37).collect();
        assert_eq!(super::stream_sum(&words), 37 * 38 / 2);
        assert_eq!(super::stream_sum(&[u64::MAX, 2]), 1);
    }
}
