//! The packed GEMM on one shape, with B as a conv's input usually finds
//! it: out of L2 (an 8 MiB buffer is swept between runs; `SWEEP_MB=128`
//! sweeps 128 MiB, leaving B and C in memory as a batch-8 conv's input and
//! output often are), unless `WARM=1` (B read once just before each run;
//! `WARM_C=1`: C too). Prints the median of 41 runs; with
//! `HOT=N`, the mean of N back-to-back runs instead (everything cached).
//! `THREADS=T` splits each GEMM over T rayon threads as a kernel would
//! (rayon's hand-off costs tens of µs: small shapes read slower than in a
//! model, whose spinning pool hands off in µs). `REMOTE=1`: B is written by
//! another thread just before each run, as a split producer kernel leaves
//! it in the other core's cache. `GATHER=1`: B goes through the gathered
//! path (`dnnc_sgemm_packed_gather`, every panel packed from its rows), as
//! an implicit-im2col conv's does (`SEG=L`: in segments of L columns).
//! `LAYOUT=lanes` (or `auto`, [`Layout::choose`]) packs A for the lanes
//! kernel; `KERNEL=avx2` packs it for the AVX2 kernel on an AVX-512
//! machine (to compare the two). `EP=bias,clamp` runs the fused epilogue of a conv + bias +
//! Clip(0, 6) layer (`EP=bias` or `EP=clamp`: one part of it; `silu` or
//! `sigmoid` adds that activation).
//!
//! `STRIP_PANELS=P`: the gathered GEMM goes strip by strip up to P
//! AVX-512 row panels (see `pgemm::gathered_strips`).
//!
//! `FC=1`: a fully-connected layer's orientation: B is its input
//! (`n x k`, the batch rows) read by column stride and C its output
//! written transposed (`n x m`), A its weights (`SWEEP_MB=64` sweeps them
//! out of L3 between runs, as a model's other layers do).
//!
//! `BRS=S` and `CRS=S` set the row strides of B and C (at least N; e.g.
//! N rounded up to whole cache lines, to time unaligned rows against
//! aligned ones).
//!
//! `cargo run --release -p dnnc-runtime --example pgemm_shapes -- M N K`

use dnnc_runtime::cpu::pgemm::{
    dnnc_sgemm_packed, dnnc_sgemm_packed_gather, pack_a_for, pack_a_with, Epilogue, Gather, Kernel,
    Layout, ACT_NONE, ACT_SIGMOID, ACT_SILU,
};
use dnnc_runtime::cpu::AlignedBuf;
use std::time::Instant;

fn main() {
    let threads: usize = std::env::var("THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool");
    pool.install(|| dnnc_runtime::cpu::native::with_threads(threads, measure));
}

fn measure() {
    let dims: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("M N K as integers"))
        .collect();
    let [m, n, k] = dims[..] else {
        eprintln!("usage: pgemm_shapes M N K");
        std::process::exit(2);
    };
    let warm = std::env::var_os("WARM").is_some();
    let warm_c = std::env::var_os("WARM_C").is_some();
    let remote = std::env::var_os("REMOTE").is_some();
    let gathered = std::env::var_os("GATHER").is_some();
    let fc = std::env::var_os("FC").is_some();
    let hot: usize = std::env::var("HOT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7) % 13) as f32 * 0.1 - 0.6)
        .collect();
    // B and C live where a model's activations do: in an `AlignedBuf`
    // (2 MiB aligned and on huge pages from 2 MiB on, as the arena).
    let stride = |v: &str| -> usize {
        std::env::var(v)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(n)
            .max(n)
    };
    let (brs, crs) = (stride("BRS"), stride("CRS"));
    let mut bbuf = AlignedBuf::zeroed(k * brs * 4);
    let b = floats(&mut bbuf);
    for (i, x) in b.iter_mut().enumerate() {
        *x = ((i * 5) % 11) as f32 * 0.1 - 0.5;
    }
    let b: &[f32] = b;
    let mut cbuf = AlignedBuf::zeroed(m * crs * 4);
    let c = floats(&mut cbuf);
    let (cbuf_ptr, cbuf_len) = (c.as_mut_ptr() as usize, c.len());
    let sweep_mb: usize = std::env::var("SWEEP_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let mut sweep = vec![0u8; sweep_mb << 20];
    let pa = match std::env::var("LAYOUT").as_deref() {
        Ok("lanes") => pack_a_for(Layout::Lanes, m, k, &a, k, 1, 1.0),
        Ok("auto") => pack_a_for(Layout::choose(m, n, k), m, k, &a, k, 1, 1.0),
        _ if std::env::var("KERNEL").as_deref() == Ok("avx2") => {
            pack_a_with(Kernel::Avx2, m, k, &a, k, 1, 1.0)
        }
        _ => pack_a_with(Kernel::best(), m, k, &a, k, 1, 1.0),
    };
    let flops = 2.0 * (m * n * k) as f64;
    let gather_rows: Vec<i64> = (0..k).map(|p| (p * n) as i64).collect();
    // `SEG=L`: the gathered rows in segments of L columns (as a conv's
    // output rows), laid end to end.
    let seg: usize = std::env::var("SEG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n.max(1));
    let gather = Gather {
        base: b.as_ptr(),
        row_off: gather_rows.as_ptr(),
        seg_len: seg,
        seg_step: seg as isize,
        strip_panels: std::env::var("STRIP_PANELS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(dnnc_runtime::cpu::pgemm::GATHER_STRIP_MAX_PANELS),
    };
    // `EP=bias,clamp`: the fused epilogue a conv + bias + Clip(0, 6) layer
    // runs (either part alone with `EP=bias` or `EP=clamp`).
    let ep_spec = std::env::var("EP").unwrap_or_default();
    let bias: Vec<f32> = (0..m).map(|i| (i % 7) as f32 * 0.01 - 0.03).collect();
    let clamp = ep_spec.contains("clamp");
    let epilogue = Epilogue {
        bias: if ep_spec.contains("bias") {
            bias.as_ptr()
        } else {
            std::ptr::null()
        },
        lo: if clamp { 0.0 } else { f32::NEG_INFINITY },
        hi: if clamp { 6.0 } else { f32::INFINITY },
        act: if ep_spec.contains("silu") {
            ACT_SILU
        } else if ep_spec.contains("sigmoid") {
            ACT_SIGMOID
        } else {
            ACT_NONE
        },
        ..Epilogue::NONE
    };
    let ep = if ep_spec.is_empty() {
        0
    } else {
        &epilogue as *const Epilogue as usize
    };
    let mut gemm = || {
        if gathered {
            // SAFETY: as below, B gathered from its own rows.
            let rc = unsafe {
                dnnc_sgemm_packed_gather(
                    pa.as_ptr() as *const f32,
                    m,
                    n,
                    k,
                    &gather,
                    c.as_mut_ptr(),
                    n as isize,
                    1,
                    0,
                )
            };
            assert_eq!(rc, 0);
            return;
        }
        // SAFETY: `pa` packs an m x k A; B is k x n and C m x n, row-major.
        let rc = unsafe {
            dnnc_sgemm_packed(
                pa.as_ptr() as *const f32,
                m,
                n,
                k,
                b.as_ptr(),
                if fc { 1 } else { brs as isize },
                if fc { k as isize } else { 1 },
                c.as_mut_ptr(),
                if fc { 1 } else { crs as isize },
                if fc { m as isize } else { 1 },
                ep,
            )
        };
        assert_eq!(rc, 0);
    };
    if hot > 0 {
        let t = Instant::now();
        for _ in 0..hot {
            gemm();
        }
        let per = t.elapsed().as_secs_f64() / hot as f64;
        println!(
            "{m}x{n}x{k} hot: {:.2} us, {:.1} GFLOP/s",
            per * 1e6,
            flops / per / 1e9
        );
        return;
    }
    let mut ts = Vec::new();
    for _ in 0..41 {
        for (i, x) in sweep.iter_mut().enumerate().step_by(64) {
            *x = x.wrapping_add(i as u8);
        }
        if warm {
            std::hint::black_box(b.iter().step_by(16).sum::<f32>());
        }
        if warm_c {
            let cp = cbuf_ptr as *mut f32;
            for i in (0..cbuf_len).step_by(16) {
                // SAFETY: `i` is inside C, which no GEMM is writing now.
                unsafe { cp.add(i).write_volatile(cp.add(i).read_volatile()) };
            }
        }
        if remote {
            let (bp, len) = (b.as_ptr() as usize, b.len());
            std::thread::scope(|sc| {
                sc.spawn(move || {
                    // SAFETY: the GEMM does not run while this thread
                    // rewrites B (same values) and the scope joins it.
                    let bw = unsafe { std::slice::from_raw_parts_mut(bp as *mut f32, len) };
                    for x in bw.iter_mut() {
                        *x = std::hint::black_box(*x);
                    }
                });
            });
        }
        let t = Instant::now();
        gemm();
        ts.push(t.elapsed().as_secs_f64());
    }
    ts.sort_by(|a, b| a.total_cmp(b));
    let med = ts[ts.len() / 2];
    println!(
        "{m}x{n}x{k}: median {:.1} us, {:.1} GFLOP/s",
        med * 1e6,
        flops / med / 1e9
    );
}

/// The buffer's bytes as floats (whole ones; the buffer is 64-byte
/// aligned and zeroed, so every element is a valid f32).
fn floats(buf: &mut AlignedBuf) -> &mut [f32] {
    let len = buf.len() / 4;
    // SAFETY: `len` floats fit in the buffer, which is aligned for f32
    // and borrowed mutably for the slice's lifetime.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut f32, len) }
}
