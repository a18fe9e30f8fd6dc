//! Native helpers with a C ABI that generated code calls. Only tuned inner
//! kernels live here (the GEMM micro-kernel); loops, packing and epilogues
//! around them are generated. The code generator registers
//! [`symbols`] with its JIT linker.

/// `C = alpha * op(A) * op(B) + beta * C` in f32, for `A: m x k`,
/// `B: k x n`, `C: m x n`, each addressed by a row stride (`*_rs`) and a
/// column stride (`*_cs`) in elements, so transposes are just swapped
/// strides. With `beta == 0` the old `C` is not read (it may be garbage).
///
/// Wraps `matrixmultiply`'s f32 kernel (see docs/cpu-backend.md, "GEMM
/// micro-kernel choice", for the measured choice). Inside
/// [`with_threads`]`(p > 1, ..)` on a rayon pool, a call whose work pays
/// for it ([`gemm_tasks`]) is split into slices of C's rows or columns run
/// concurrently; each element is still computed by the same kernel with
/// the same summation order, so results are bitwise identical to one
/// thread.
///
/// # Safety
/// The pointers must address matrices of the given sizes and strides; `C`
/// must not overlap `A` or `B`.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: *const f32,
    a_rs: isize,
    a_cs: isize,
    b: *const f32,
    b_rs: isize,
    b_cs: isize,
    c: *mut f32,
    c_rs: isize,
    c_cs: isize,
    alpha: f32,
    beta: f32,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // With k = 0 the product is empty: only scale C, never reading it
        // when beta == 0.
        for i in 0..m as isize {
            for j in 0..n as isize {
                let p = c.offset(i * c_rs + j * c_cs);
                *p = if beta == 0.0 { 0.0 } else { beta * *p };
            }
        }
        return;
    }
    let tasks = gemm_tasks(m, n, k, THREADS.with(|t| t.get()));
    if tasks <= 1 {
        // matrixmultiply: C = alpha A B + beta C, C not read when beta == 0.
        matrixmultiply::sgemm(
            m, k, n, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, c_rs, c_cs,
        );
        return;
    }
    // Split the longer of C's dimensions into `tasks` slices, each a
    // multiple of SLICE_ALIGN (the kernel's register tile) except the last.
    let split_m = m >= n;
    let len = if split_m { m } else { n };
    let chunk = len.div_ceil(tasks).div_ceil(SLICE_ALIGN) * SLICE_ALIGN;
    let p = SendPtrs(a, b, c);
    let slice = |i: usize| {
        let p = &p;
        let lo = i * chunk;
        let hi = ((i + 1) * chunk).min(len);
        if lo >= hi {
            return;
        }
        // SAFETY: each slice addresses a disjoint part of C and reads
        // A/B inside the caller's matrices.
        unsafe {
            if split_m {
                matrixmultiply::sgemm(
                    hi - lo,
                    k,
                    n,
                    alpha,
                    p.0.offset(lo as isize * a_rs),
                    a_rs,
                    a_cs,
                    p.1,
                    b_rs,
                    b_cs,
                    beta,
                    p.2.offset(lo as isize * c_rs),
                    c_rs,
                    c_cs,
                );
            } else {
                matrixmultiply::sgemm(
                    m,
                    k,
                    hi - lo,
                    alpha,
                    p.0,
                    a_rs,
                    a_cs,
                    p.1.offset(lo as isize * b_cs),
                    b_rs,
                    b_cs,
                    beta,
                    p.2.offset(lo as isize * c_cs),
                    c_rs,
                    c_cs,
                );
            }
        }
    };
    let slices = len.div_ceil(chunk);
    super::spin::par_for(slices, &slice);
}

/// GEMM operand pointers, shared read-only (A, B) or by disjoint slices
/// (C) between the tasks of one split call.
struct SendPtrs(*const f32, *const f32, *mut f32);
// SAFETY: the tasks of one call touch disjoint parts of C and only read A
// and B, all of which outlive the scope.
unsafe impl Sync for SendPtrs {}

/// Slices of a split GEMM are multiples of this many rows/columns (the
/// micro-kernel's register tile is at most 16 x 32 wide in f32).
const SLICE_ALIGN: usize = 32;

/// Per-task overhead of a split, in multiply-accumulates: waking a pool
/// worker and joining it costs about 10 µs on this machine class (measured
/// with `cargo run --release -p dnnc-runtime --example gemm_bench`), which
/// is ~400k MACs at the single-thread GEMM rate of ~40-80 GMAC/s. A slice
/// must carry at least this many times more work than that overhead.
pub const TASK_OVERHEAD_MACS: u64 = 400_000;

/// Per-task overhead of a split when the workers spin between tasks
/// (`Executable::set_spinning`, the default): a hand-off is a cache-line
/// transfer and the spread in finishing times, ~1-2 µs, budgeted at 100k
/// MACs ([`handoff`]).
pub const TASK_OVERHEAD_MACS_SPIN: u64 = 100_000;

/// How many compute-bound MACs one MAC of a matrix-vector product costs
/// (memory-bound: ~17 GB/s streaming vs ~60 GMAC/s; see [`gemm_tasks`]).
pub const GEMV_MAC_WEIGHT: u64 = 16;

/// Hand-offs' worth of work ([`TASK_OVERHEAD_MACS`], or the spinning
/// pool's figure) each slice of a split GEMM keeps: 4, so the hand-off
/// stays under ~1/4 of the slice. (8 kept SqueezeNet's 192 x 169 x 48
/// expansions on one thread at two threads, where each then read the
/// half of its input the other core had written: 26 µs, split 18.)
pub const GEMM_SHARE_HANDOFFS: u64 = 4;

/// How many slices a GEMM of `m x n x k` gets on `threads` threads: its
/// Work-Depth work `W = m*n*k` (MACs; depth is `log k`, negligible) is
/// split into `p` tasks only while `W / p` stays at least
/// [`GEMM_SHARE_HANDOFFS`] times the hand-off, and never finer than one
/// register tile per slice. A
/// matrix-vector product (`n == 1` or `m == 1`) is bound by streaming its
/// matrix (each element used once, ~17 GB/s on one core here, i.e. ~4
/// GMAC/s against ~60 for a compute-bound GEMM), so its MACs count
/// [`GEMV_MAC_WEIGHT`] times: an FC layer at batch 1 (1000 x 1280) then
/// splits, and each thread streams its own rows.
pub fn gemm_tasks(m: usize, n: usize, k: usize, threads: usize) -> usize {
    gemm_tasks_with(m, n, k, threads, handoff())
}

/// [`gemm_tasks`] as it will decide inside a run whose workers spin (the
/// default: [`handoff`] is then [`TASK_OVERHEAD_MACS_SPIN`]), for the
/// code generator, which asks outside any run whether a kernel's GEMMs
/// will split. (Asked with the idle overhead it said "no" for 3.6M-MAC
/// GEMMs that then split at run time, and `dnnc ir --after partition`
/// showed them as unsplit.)
pub fn gemm_tasks_in_run(m: usize, n: usize, k: usize, threads: usize) -> usize {
    gemm_tasks_with(m, n, k, threads, TASK_OVERHEAD_MACS_SPIN)
}

/// [`gemm_tasks`] with `overhead` MACs per task.
fn gemm_tasks_with(m: usize, n: usize, k: usize, threads: usize, overhead: u64) -> usize {
    if threads <= 1 {
        return 1;
    }
    let by_work = (gemm_work(m, n, k) / (GEMM_SHARE_HANDOFFS * overhead)).max(1) as usize;
    let by_shape = m.max(n).div_ceil(SLICE_ALIGN);
    threads.min(by_work).min(by_shape).max(1)
}

/// A GEMM's work in MACs for the split rules, a matrix-vector product's
/// weighted by [`GEMV_MAC_WEIGHT`] (it streams its matrix from memory).
fn gemm_work(m: usize, n: usize, k: usize) -> u64 {
    let w = (m as u64).saturating_mul(n as u64).saturating_mul(k as u64);
    if n == 1 || m == 1 {
        w.saturating_mul(GEMV_MAC_WEIGHT)
    } else {
        w
    }
}

/// The tasks a GEMM split into `tasks` shares ([`gemm_tasks`]) runs as:
/// each share cut into [`task_chunks`] while every chunk keeps the work
/// and width a share must have.
pub fn gemm_chunks(m: usize, n: usize, k: usize, tasks: usize) -> usize {
    chunks_for_work(tasks, gemm_work(m, n, k), 8, m.max(n).div_ceil(SLICE_ALIGN))
}

/// [`cut_into_chunks`] for a split of `work` units over `extent` units
/// of its parallel axis: every chunk keeps `share` hand-offs' worth of
/// work ([`TASK_OVERHEAD_MACS_SPIN`] each), as a planned share must.
pub fn chunks_for_work(tasks: usize, work: u64, share: u64, extent: usize) -> usize {
    let by_work = (work / (share * TASK_OVERHEAD_MACS_SPIN)) as usize;
    cut_into_chunks(tasks, by_work.min(extent))
}

/// `tasks` planned shares (more than one) cut into [`task_chunks`] each,
/// at most `limit` in all (what the split's work and extent allow), never
/// fewer than planned, and always a multiple of `tasks`: equal chunks
/// spread over the threads evenly only then (three over two threads left
/// one thread two of them, so the split took 2/3 of the whole kernel's
/// time, not 1/2: SqueezeNet's 64 x 3025 x 16 expansions at two threads).
/// 0 or 1 share stays as it is.
pub fn cut_into_chunks(tasks: usize, limit: usize) -> usize {
    if tasks <= 1 {
        return tasks;
    }
    let per_share = ((tasks * task_chunks()).min(limit) / tasks).max(1);
    tasks * per_share
}

/// Into how many tasks each thread's share of a split is cut (4; the
/// `DNNC_TASK_CHUNKS` environment variable overrides it, 1 to 16, for
/// measurements). The spin pool gives every thread a contiguous home
/// range of tasks and lets a thread that is done take the last task of
/// another's range, so a core the host stalls holds a split up by one
/// chunk, not by its whole share.
pub fn task_chunks() -> usize {
    static F: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *F.get_or_init(|| {
        std::env::var("DNNC_TASK_CHUNKS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(TASK_CHUNKS)
            .clamp(1, 16)
    })
}

/// Default of [`task_chunks`].
pub const TASK_CHUNKS: usize = 4;

thread_local! {
    static THREADS: std::cell::Cell<usize> = const { std::cell::Cell::new(1) };
}

/// The per-task overhead (MACs) native splits on this thread assume:
/// [`TASK_OVERHEAD_MACS_SPIN`] while this thread owns a run of hot
/// spinning workers (`spin::par_for` then hands tasks to them), else
/// [`TASK_OVERHEAD_MACS`].
pub fn handoff() -> u64 {
    if super::spin::owns_pool() {
        TASK_OVERHEAD_MACS_SPIN
    } else {
        TASK_OVERHEAD_MACS
    }
}

/// How many tasks native helpers on this thread may split work into (set
/// by [`with_threads`]); shared with the packed GEMM.
pub(crate) fn threads() -> usize {
    THREADS.with(|t| t.get())
}

/// Runs `f` with native helpers on this thread allowed to split work into
/// `threads` tasks on the current rayon pool (call it inside
/// `ThreadPool::install`). Restores the previous setting afterwards.
pub fn with_threads<R>(threads: usize, f: impl FnOnce() -> R) -> R {
    let old = THREADS.with(|t| t.replace(threads.max(1)));
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            THREADS.with(|t| t.set(self.0));
        }
    }
    let _restore = Restore(old);
    f()
}

/// Name and address of every native helper, for the JIT's symbol table.
pub fn symbols() -> Vec<(&'static str, *const u8)> {
    vec![
        ("dnnc_sgemm", dnnc_sgemm as *const u8),
        (
            "dnnc_sgemm_packed",
            super::pgemm::dnnc_sgemm_packed as *const u8,
        ),
        (
            "dnnc_sgemm_packed_gather",
            super::pgemm::dnnc_sgemm_packed_gather as *const u8,
        ),
        (
            "dnnc_sgemm_packed_batch",
            super::pgemm::dnnc_sgemm_packed_batch as *const u8,
        ),
        (
            "dnnc_conv1x1_nchw8c",
            super::blocked::dnnc_conv1x1_nchw8c as *const u8,
        ),
        (
            "dnnc_conv1x1_nchw8c_band",
            super::blocked::dnnc_conv1x1_nchw8c_band as *const u8,
        ),
        (
            "dnnc_conv_group8",
            super::group8::dnnc_conv_group8 as *const u8,
        ),
        ("dnnc_conv_dw8", super::dw8::dnnc_conv_dw8 as *const u8),
        (
            "dnnc_max_pool_3x3s2",
            super::maxpool::dnnc_max_pool_3x3s2 as *const u8,
        ),
        (
            "dnnc_max_pool_3x3s1",
            super::maxpool::dnnc_max_pool_3x3s1 as *const u8,
        ),
        (
            "dnnc_winograd4_out_row",
            super::wino::dnnc_winograd4_out_row as *const u8,
        ),
        (
            "dnnc_winograd4_in_row",
            super::wino::dnnc_winograd4_in_row as *const u8,
        ),
        (
            "dnnc_dw_row_nchw8c",
            super::dwrow::dnnc_dw_row_nchw8c as *const u8,
        ),
        ("dnnc_dw_nchw8c", super::dwrow::dnnc_dw_nchw8c as *const u8),
        (
            "dnnc_conv_into_nchw8c",
            super::blocked::dnnc_conv_into_nchw8c as *const u8,
        ),
        (
            "dnnc_conv_gather_nchw8c",
            super::blocked::dnnc_conv_gather_nchw8c as *const u8,
        ),
        (
            "dnnc_conv_group_ring_nchw8c",
            super::blocked::dnnc_conv_group_ring_nchw8c as *const u8,
        ),
        (
            "dnnc_unblock_rows",
            super::reblock::dnnc_unblock_rows as *const u8,
        ),
        (
            "dnnc_block_rows",
            super::reblock::dnnc_block_rows as *const u8,
        ),
        (
            "dnnc_pool_nchw8c",
            super::blocked_pool::dnnc_pool_nchw8c as *const u8,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_vector_products_split_by_the_bytes_they_stream() {
        // An FC layer at batch 1: 1.3M MACs, too few to split as compute,
        // but 5 MB of weights to stream.
        assert_eq!(gemm_tasks(1000, 1, 1280, 2), 2);
        assert_eq!(gemm_tasks(1, 1000, 1280, 2), 2);
        // The same MACs as a compute-bound GEMM stay whole.
        assert_eq!(gemm_tasks(100, 10, 1280, 2), 1);
        // A small GEMV stays whole.
        assert_eq!(gemm_tasks(100, 1, 64, 2), 1);
    }

    /// A GEMM's shares are cut into chunks that keep the work (100k MACs
    /// x 8) and the width (32 columns) a share must have.
    #[test]
    fn gemm_shares_are_cut_into_chunks_that_keep_work_and_width() {
        let c = task_chunks();
        assert_eq!(gemm_chunks(64, 3136, 576, 1), 1);
        assert_eq!(gemm_chunks(64, 3136, 576, 2), 2 * c);
        // 64 columns hold two 32-wide chunks at most.
        assert_eq!(gemm_chunks(16, 64, 4096, 2), 2);
        // 1.6M MACs hold two chunks of 800k.
        assert_eq!(gemm_chunks(64, 100, 250, 2), 2);
        // 3.1M MACs would hold three: two, so each thread gets one.
        assert_eq!(gemm_chunks(64, 3025, 16, 2), 2);
        // Seven 32-wide columns strips would hold seven: six.
        assert_eq!(gemm_chunks(16, 224, 4096, 2), 6.min(2 * c));
    }

    #[test]
    fn hot_workers_split_smaller_gemms() {
        // ShuffleNet's 58x58 pointwise convs at 28x28: 2.6M MACs.
        assert_eq!(gemm_tasks(58, 784, 58, 2), 1);
        let pool = super::super::spin::SpinPool::new(1).unwrap();
        pool.run(|| assert_eq!(gemm_tasks(58, 784, 58, 2), 2));
        assert_eq!(gemm_tasks(58, 784, 58, 2), 1);
        // SqueezeNet's 192 x 169 x 48 expansions (1.6M MACs) split on
        // hot workers; half of that work does not.
        pool.run(|| assert_eq!(gemm_tasks(192, 169, 48, 2), 2));
        pool.run(|| assert_eq!(gemm_tasks(96, 169, 48, 2), 1));
    }

    #[test]
    fn split_gemm_is_bitwise_identical() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for &(m, n, k) in &[
            (64usize, 3136usize, 576usize),
            (300, 170, 129),
            (37, 1000, 300),
        ] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7) % 13) as f32 * 0.13 - 0.6)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|i| ((i * 5) % 11) as f32 * 0.7 - 0.5)
                .collect();
            let run = |threads: usize| {
                let mut c = vec![0.25f32; m * n];
                pool.install(|| {
                    with_threads(threads, || unsafe {
                        assert!(threads == 1 || gemm_tasks(m, n, k, threads) > 1);
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
                            1.5,
                            0.5,
                        )
                    })
                });
                c
            };
            let one = run(1);
            let two = run(2);
            assert!(one
                .iter()
                .zip(&two)
                .all(|(x, y)| x.to_bits() == y.to_bits()));
        }
    }

    #[test]
    fn sgemm_matches_naive_with_transposes_and_beta() {
        let (m, n, k) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.5 - 2.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 1.0).collect();
        let mut c = vec![1.0f32; m * n];
        // A stored transposed (k x m): row stride 1, column stride m.
        let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
        unsafe {
            dnnc_sgemm(
                m,
                n,
                k,
                at.as_ptr(),
                1,
                m as isize,
                b.as_ptr(),
                n as isize,
                1,
                c.as_mut_ptr(),
                n as isize,
                1,
                2.0,
                0.5,
            );
        }
        for i in 0..m {
            for j in 0..n {
                let s: f32 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
                assert!((c[i * n + j] - (2.0 * s + 0.5)).abs() < 1e-4);
            }
        }
    }
}
