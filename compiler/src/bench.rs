//! `dnnc bench` and `dnnc run --profile`: latency statistics and
//! per-kernel profiles of the CPU backend, with throughput from the
//! Work-Depth analysis (GFLOP/s = 2 x contraction MACs / time).
//!
//! `dnnc bench` times what a caller sees: each iteration is one
//! `Executable::run` call, including the input validation and copy into
//! the arena and the read-back of the outputs into new tensors. It also
//! reports the per-run overhead beyond the kernels: the median run minus
//! the median sum of kernel times over as many profiled runs.

use crate::error::DnncError;
use dnnc_ir::{Graph, OpClass, Tensor};
use dnnc_passes::wd::{self, format_bytes};
use dnnc_runtime::cpu::{Concurrency, Executable, StepTimes};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// What `dnnc bench` measures.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Worker threads (cpu backend), at least 1.
    pub threads: usize,
    /// Untimed runs first.
    pub warmup: usize,
    /// Timed runs, at least 1.
    pub iters: usize,
    /// The cpu backend (else the interpreter, or the GPU when `gpu` is
    /// set).
    pub cpu: bool,
    /// The GPU backend on this adapter with these options.
    pub gpu: Option<(
        dnnc_runtime::gpu::AdapterChoice,
        crate::codegen::gpu::GpuOptions,
    )>,
    /// Code generator options (convolution algorithms) for the cpu backend.
    pub cpu_opts: crate::codegen::cpu::CpuOptions,
    /// How waves of independent kernels run (cpu backend, threads > 1).
    pub concurrency: Concurrency,
    /// Idle workers poll for split work (cpu backend, threads > 1; see
    /// `Executable::set_spinning`).
    pub spinning: bool,
    /// A second build to time against the first, one run of each per
    /// iteration in alternating order (`dnnc bench --optimize
    /// --against-unoptimized`): the model as loaded, with its options,
    /// when the first is the optimised one.
    pub against: Option<(Graph, crate::codegen::cpu::CpuOptions)>,
}

/// `dnnc bench --backend gpu`: compile time, then latency of whole runs
/// (input upload, every dispatch, output read-back), GFLOP/s, and the
/// planned arena.
fn bench_gpu(
    g: &Graph,
    feeds: &[(String, Tensor)],
    cfg: &BenchConfig,
    choice: &dnnc_runtime::gpu::AdapterChoice,
    opts: &crate::codegen::gpu::GpuOptions,
    macs: u64,
) -> Result<String, DnncError> {
    let mut text = String::new();
    let t0 = Instant::now();
    let exe = crate::codegen::gpu::compile_for_device(g, opts, choice)?;
    let compile = t0.elapsed();
    for _ in 0..cfg.warmup {
        exe.run(feeds)?;
    }
    let mut times = Vec::with_capacity(cfg.iters);
    for _ in 0..cfg.iters {
        let t = Instant::now();
        exe.run(feeds)?;
        times.push(t.elapsed().as_secs_f64());
    }
    let lat = Latency::of(&times);
    let gflops = 2.0 * macs as f64 / lat.median.max(1e-12) / 1e9;
    let p = exe.program();
    let _ = writeln!(
        text,
        "bench `{}` on gpu ({}, {} {}): {} warm-up + {} timed run{}",
        g.name,
        exe.adapter().name,
        exe.adapter().backend,
        exe.adapter().device_type,
        cfg.warmup,
        cfg.iters,
        if cfg.iters == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        text,
        "  latency      median {:.3} ms  min {:.3} ms  max {:.3} ms (upload, dispatches, read-back)",
        lat.median * 1e3,
        lat.min * 1e3,
        lat.max * 1e3
    );
    if let Some(line) = lat.spread_note() {
        let _ = writeln!(text, "{line}");
    }
    let _ = writeln!(
        text,
        "  throughput   {gflops:.1} GFLOP/s (2 x {} conv+FC MACs / median)",
        wd::format_thousands(macs)
    );
    let _ = writeln!(
        text,
        "  activations  arena {} ({} bytes), weights {}",
        format_bytes(p.arena_words * 4),
        p.arena_words * 4,
        format_bytes(p.weights.len() * 4)
    );
    let _ = writeln!(
        text,
        "  compile      {:.1} ms ({} kernels, {} shaders; pipelines built once)",
        compile.as_secs_f64() * 1e3,
        p.kernels.len(),
        p.stages().count()
    );
    Ok(text)
}

/// Latency statistics of timed runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    /// Median (mean of the middle two for an even count), seconds.
    pub median: f64,
    /// Fastest run, seconds.
    pub min: f64,
    /// Slowest run, seconds.
    pub max: f64,
}

impl Latency {
    /// Statistics of `times` (seconds); all zero when empty.
    pub fn of(times: &[f64]) -> Latency {
        if times.is_empty() {
            return Latency {
                median: 0.0,
                min: 0.0,
                max: 0.0,
            };
        }
        let mut t = times.to_vec();
        t.sort_by(f64::total_cmp);
        let n = t.len();
        let median = if n % 2 == 1 {
            t[n / 2]
        } else {
            (t[n / 2 - 1] + t[n / 2]) / 2.0
        };
        Latency {
            median,
            min: t[0],
            max: t[n - 1],
        }
    }

    /// A line for the report when the median is over [`NOISY_SPREAD`]
    /// times the fastest run: the runs did not see the same machine (on
    /// a shared VM the same build read a median of 24.3 ms at two threads
    /// against a minimum of 12.0), so one median alone says little.
    pub fn spread_note(&self) -> Option<String> {
        (self.min > 0.0 && self.median > NOISY_SPREAD * self.min).then(|| {
            format!(
                "  spread       the median is {:.2}x the fastest run: other work on this machine slowed some runs; compare medians of alternating runs, or rerun",
                self.median / self.min
            )
        })
    }
}

/// How far above the fastest run a median may lie before the report says
/// the runs were disturbed: a quiet machine keeps it within ~10-20%.
pub const NOISY_SPREAD: f64 = 1.5;

/// Times `g` on `feeds` and renders the report `dnnc bench` prints.
pub fn bench(
    g: &Graph,
    feeds: &[(String, Tensor)],
    cfg: &BenchConfig,
) -> Result<String, DnncError> {
    if cfg.threads == 0 || cfg.iters == 0 {
        return Err(DnncError::Usage(
            "--threads and --iters must be at least 1".into(),
        ));
    }
    let analysis = wd::analyze(g);
    let macs = analysis.contraction_work();
    let mut text = String::new();
    if let Some((choice, opts)) = &cfg.gpu {
        return bench_gpu(g, feeds, cfg, choice, opts, macs);
    }
    let t0 = Instant::now();
    let exe = if cfg.cpu {
        let mut e = crate::cli::compile_for_cpu(g, &cfg.cpu_opts, cfg.threads)?;
        e.set_concurrency(cfg.concurrency);
        e.set_spinning(cfg.spinning).map_err(DnncError::Usage)?;
        Some(e)
    } else {
        None
    };
    let compile = t0.elapsed();
    let run_once = || -> Result<(), DnncError> {
        match &exe {
            Some(e) => e.run(feeds).map(drop)?,
            None => dnnc_runtime::run(g, feeds).map(drop)?,
        }
        Ok(())
    };
    if let (Some(e), Some(against)) = (&exe, &cfg.against) {
        // Each build compiled twice, in the order a b b a: which of two
        // executables of one program was compiled first moved their
        // paired ratio by up to 2% on the Intel Xeon (GoogLeNet, one
        // thread: 0.983-0.993 for the same program compiled twice), so
        // each build is timed half the time as the earlier compile and
        // half as the later one.
        let compile = |g: &Graph, opts: &crate::codegen::cpu::CpuOptions| {
            let mut x = crate::cli::compile_for_cpu(g, opts, cfg.threads)?;
            x.set_concurrency(cfg.concurrency);
            x.set_spinning(cfg.spinning).map_err(DnncError::Usage)?;
            Ok::<_, DnncError>(x)
        };
        let b_early = compile(&against.0, &against.1)?;
        let b_late = compile(&against.0, &against.1)?;
        let a_late = compile(g, &cfg.cpu_opts)?;
        let loaded_macs = wd::analyze(&against.0).contraction_work();
        return bench_paired(
            g,
            feeds,
            cfg,
            [(e, &b_late), (&a_late, &b_early)],
            (macs, loaded_macs),
        );
    }
    for _ in 0..cfg.warmup {
        run_once()?;
    }
    let mut times = Vec::with_capacity(cfg.iters);
    for _ in 0..cfg.iters {
        let t = Instant::now();
        run_once()?;
        times.push(t.elapsed().as_secs_f64());
    }
    let lat = Latency::of(&times);
    let gflops = 2.0 * macs as f64 / lat.median.max(1e-12) / 1e9;
    let per_core = dnnc_runtime::cpu::peak::gflops_per_core();
    let peak = per_core * cfg.threads as f64;
    let _ = writeln!(
        text,
        "bench `{}` on {}, {} thread{}: {} warm-up + {} timed run{}",
        g.name,
        if cfg.cpu { "cpu" } else { "interp" },
        cfg.threads,
        if cfg.threads == 1 { "" } else { "s" },
        cfg.warmup,
        cfg.iters,
        if cfg.iters == 1 { "" } else { "s" }
    );
    let ms = |s: f64| s * 1e3;
    let _ = writeln!(
        text,
        "  latency      median {:.3} ms  min {:.3} ms  max {:.3} ms",
        ms(lat.median),
        ms(lat.min),
        ms(lat.max)
    );
    if let Some(line) = lat.spread_note() {
        let _ = writeln!(text, "{line}");
    }
    let _ = writeln!(
        text,
        "  throughput   {gflops:.1} GFLOP/s (2 x {} conv+FC MACs / median), {:.1}% of peak {peak:.1} GFLOP/s ({} x {per_core:.1} per core, measured: register-only FMA loop on {})",
        wd::format_thousands(macs),
        100.0 * gflops / peak,
        cfg.threads,
        dnnc_ir::isa::cpu_isa().name()
    );
    if let Some(e) = &exe {
        // Per-run overhead: the same number of profiled runs, each summing
        // its kernels' times.
        let mut kernels = Vec::with_capacity(cfg.iters);
        for _ in 0..cfg.iters {
            let (_, t) = e.run_profiled(feeds)?;
            kernels.push(t.iter().map(|s| s.2.as_secs_f64()).sum::<f64>());
        }
        let k = Latency::of(&kernels).median;
        if e.has_concurrency() {
            let _ = writeln!(
                text,
                "  kernels      {:.3} ms summed over {} kernels (median; concurrent waves overlap, so the sum exceeds the run)",
                ms(k),
                e.num_steps()
            );
        } else {
            let _ = writeln!(
                text,
                "  overhead     {:.1} us per run beyond the kernels (median run {:.1} us - median kernel sum {:.1} us)",
                (lat.median - k) * 1e6,
                lat.median * 1e6,
                k * 1e6
            );
        }
        let multi = e.waves().iter().filter(|w| w.steps.len() > 1).count();
        if cfg.threads > 1 {
            let _ = writeln!(
                text,
                "  waves        {} of {} waves of independent kernels run concurrently ({:?}; `dnnc run --profile --threads N` lists them)",
                e.waves().iter().filter(|w| w.concurrent).count(),
                multi,
                cfg.concurrency
            );
            let gemms = e
                .steps()
                .iter()
                .zip(e.step_gemm_threads())
                .filter(|(s, &q)| s.split_work > 0 && q > 1)
                .count();
            let _ = writeln!(
                text,
                "  partition    {} kernels split into tasks, {} split their GEMMs, decided by {} (`dnnc ir MODEL --after partition --threads N` shows each)",
                e.step_tasks().iter().filter(|&&t| t > 1).count(),
                gemms,
                e.cost_model().source()
            );
        }
        let m = e.memory();
        let _ = writeln!(
            text,
            "  activations  peak {} planned ({} bytes; naive {}, live-set bound {}, {} in place)",
            format_bytes(m.planned),
            m.planned,
            format_bytes(m.naive),
            format_bytes(m.lower_bound),
            m.in_place
        );
        let _ = writeln!(
            text,
            "  compile      {:.1} ms ({} kernels)",
            compile.as_secs_f64() * 1e3,
            e.num_steps()
        );
    }
    Ok(text)
}

/// One pair of runs timed: `first` then `second`, seconds each.
fn time_pair(
    (first, second): (&Executable, &Executable),
    feeds: &[(String, Tensor)],
) -> Result<(f64, f64), DnncError> {
    let t = Instant::now();
    first.run(feeds)?;
    let a = t.elapsed().as_secs_f64();
    let t = Instant::now();
    second.run(feeds)?;
    Ok((a, t.elapsed().as_secs_f64()))
}

/// `dnnc bench --optimize --against-unoptimized`: the optimised build
/// `a` and the model as loaded `b` timed in one process, a run of each
/// per iteration in alternating order (a b, b a, ...), so a machine whose
/// speed drifts (a shared host: bursts of seconds at 0.6x) slows both
/// alike; reports each one's latency and the median of the per-iteration
/// ratios `a / b`. `pairs` holds each build's two compiles, the earlier
/// of one against the later of the other, used in turn. On zoo models
/// whose two builds are one program, separate `dnnc bench` runs read
/// ratios of 0.78-1.24 within one `bench/compare_ort.sh` run, the paired
/// ones 0.989-1.007.
fn bench_paired(
    g: &Graph,
    feeds: &[(String, Tensor)],
    cfg: &BenchConfig,
    pairs: [(&Executable, &Executable); 2],
    (macs_a, macs_b): (u64, u64),
) -> Result<String, DnncError> {
    for &pair in &pairs {
        for _ in 0..cfg.warmup {
            time_pair(pair, feeds)?;
        }
    }
    let (a, b) = pairs[0];
    let (mut ta, mut tb, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..cfg.iters {
        let (a, b) = pairs[(i / 2) % 2];
        let (x, y) = if i % 2 == 0 {
            time_pair((a, b), feeds)?
        } else {
            let (y, x) = time_pair((b, a), feeds)?;
            (x, y)
        };
        ta.push(x);
        tb.push(y);
        ratios.push(x / y.max(1e-12));
    }
    let (la, lb, r) = (Latency::of(&ta), Latency::of(&tb), Latency::of(&ratios));
    let ms = |s: f64| s * 1e3;
    let gflops = |l: &Latency, macs: u64| 2.0 * macs as f64 / l.median.max(1e-12) / 1e9;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "bench `{}` on cpu, {} thread{}: optimised against as loaded, {} warm-up + {} timed pair{} (one run of each, alternating which goes first)",
        g.name,
        cfg.threads,
        if cfg.threads == 1 { "" } else { "s" },
        cfg.warmup,
        cfg.iters,
        if cfg.iters == 1 { "" } else { "s" }
    );
    for (name, l, e, macs) in [("optimised", &la, a, macs_a), ("as loaded", &lb, b, macs_b)] {
        let _ = writeln!(
            text,
            "  {name:<10} median {:.3} ms  min {:.3} ms  max {:.3} ms  {:.1} GFLOP/s  {} kernels",
            ms(l.median),
            ms(l.min),
            ms(l.max),
            gflops(l, macs),
            e.num_steps()
        );
    }
    let _ = writeln!(
        text,
        "  ratio      optimised / as loaded: median {:.3} over the pairs (min {:.3}, max {:.3}); medians' ratio {:.3}",
        r.median,
        r.min,
        r.max,
        la.median / lb.median.max(1e-12)
    );
    Ok(text)
}

/// The per-kernel table `dnnc run --profile` prints: time, share of the
/// total, GFLOP/s (2 x the W-D work of the kernel's contraction nodes /
/// time), conv algorithm and the ops fused, slowest first.
pub fn render_profile(g: &Graph, exe: &Executable, times: &StepTimes) -> String {
    let analysis = wd::analyze(g);
    let macs = contraction_macs(&analysis);
    let nodes: HashMap<&str, &wd::NodeCost> = analysis
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n))
        .collect();
    let total: Duration = times.iter().map(|t| t.2).sum();
    let total_s = total.as_secs_f64().max(1e-12);
    let mut rows: Vec<(usize, Duration)> = times.iter().map(|t| t.2).enumerate().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let per_core = dnnc_runtime::cpu::peak::gflops_per_core();
    let bw_core = dnnc_runtime::cpu::peak::stream_gbs_per_core();
    let mut cells: Vec<[String; 9]> = Vec::new();
    let mut all_macs = 0u64;
    for (i, d) in rows {
        let Some(step) = exe.steps().get(i) else {
            continue;
        };
        let w: u64 = step.nodes.iter().filter_map(|n| macs.get(n)).sum();
        all_macs += w;
        let [ms, share, rate] = time_cells(d.as_secs_f64(), total_s, w);
        let tasks = exe.step_tasks().get(i).copied().unwrap_or(1);
        let gemm_threads = exe.step_gemm_threads().get(i).copied().unwrap_or(1);
        let cores = tasks.max(gemm_threads).max(1) as f64;
        let roof = Roof {
            gflops: per_core * cores,
            gbs: bw_core * cores,
        };
        cells.push([
            step.name.clone(),
            ms,
            share,
            rate,
            peak_share(d.as_secs_f64(), w, roof.gflops),
            roof.share(
                d.as_secs_f64(),
                algorithm_work(step.algo.as_deref(), &step.nodes, &nodes).unwrap_or(w),
                kernel_bytes(g, &step.nodes),
            ),
            // Tasks the kernel ran as, of its split extent (units).
            match (tasks, step.split) {
                (t, e) if e > 1 => format!("{t}/{e}"),
                (t, _) => t.to_string(),
            },
            step.algo.clone().unwrap_or_else(|| "-".into()),
            step.op.clone(),
        ]);
    }
    let header = [
        "kernel",
        "ms",
        "share",
        "GFLOP/s",
        "%peak",
        "%roof",
        "tasks",
        "algo",
        "ops fused",
    ];
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nprofile of `{}` (cpu, {} thread{}): {} kernels, {:.3} ms in kernels, {:.1} GFLOP/s overall",
        g.name,
        exe.threads(),
        if exe.threads() == 1 { "" } else { "s" },
        times.len(),
        total_s * 1e3,
        2.0 * all_macs as f64 / total_s / 1e9
    );
    let _ = writeln!(
        out,
        "  %peak: the kernel's GFLOP/s against the measured FMA peak of the cores it ran on ({per_core:.1} GFLOP/s a core, register-only loop on {}; a GEMM splitting across q threads or a kernel running as T tasks counts max(q, T) cores)",
        dnnc_ir::isa::cpu_isa().name()
    );
    let _ = writeln!(
        out,
        "  %roof: the kernel's time against its roofline, max(flops / peak, bytes / bandwidth) on those cores, where flops are those of the algorithm that ran (Winograd's transforms and frequency products, a multiply-add each) and bytes are the tensors it reads from and writes to outside itself, once each, and the bandwidth one core's measured stream from memory ({bw_core:.1} GB/s a core); a kernel whose bytes take longer than its flops is bound by memory (a batch-1 fully-connected layer), and one above 100% found its data in cache"
    );
    if exe.has_concurrency() {
        out.push_str(
            "  (kernels of concurrent waves ran at the same time: their times overlap, and the sum exceeds the run's wall time)\n",
        );
    }
    out.push_str(&table(
        &header,
        &[false, true, true, true, true, true, true, false, false],
        &cells,
    ));
    if exe.threads() > 1 {
        let _ = writeln!(
            out,
            "  tasks T/E: the kernel ran as T tasks of its E independent units; T = min(threads, E, W / {}) for a kernel running alone, 1 in concurrent waves and for GEMM kernels (their GEMMs split inside dnnc_sgemm)",
            4 * exe.task_overhead()
        );
        out.push_str(&render_waves(exe));
    }
    out
}

/// Rows of cells under `header`, columns padded to their widest cell
/// (right-aligned where `right` says), two spaces before each.
fn table<const N: usize>(header: &[&str; N], right: &[bool; N], cells: &[[String; N]]) -> String {
    let mut width = header.map(str::len);
    for r in cells {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |r: &[String]| {
        let mut s = String::new();
        for (i, c) in r.iter().enumerate() {
            let pad = " ".repeat(width[i] - c.chars().count());
            s.push_str("  ");
            if right[i] {
                s.push_str(&pad);
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&pad);
            }
        }
        s.trim_end().to_string()
    };
    let mut out = line(&header.map(String::from));
    out.push('\n');
    for r in cells {
        out.push_str(&line(r));
        out.push('\n');
    }
    out
}

/// A profile row's time cells: milliseconds, share of `total_s`, and
/// GFLOP/s of `macs` multiply-adds (`-` without any).
fn time_cells(s: f64, total_s: f64, macs: u64) -> [String; 3] {
    [
        format!("{:.3}", s * 1e3),
        format!("{:.1}%", 100.0 * s / total_s),
        if macs > 0 && s > 0.0 {
            format!("{:.1}", 2.0 * macs as f64 / s / 1e9)
        } else {
            "-".into()
        },
    ]
}

/// A kernel's arithmetic rate as a share of `peak_gflops` (the cores it
/// ran on): "-" for kernels without multiply-adds. The issue's bar for
/// 1x1 and FC layers is read off this column.
fn peak_share(s: f64, macs: u64, peak_gflops: f64) -> String {
    if macs > 0 && s > 0.0 && peak_gflops > 0.0 {
        format!("{:.0}%", 100.0 * 2.0 * macs as f64 / s / 1e9 / peak_gflops)
    } else {
        "-".into()
    }
}

/// What a kernel's cores can do: the FMA peak and the memory stream,
/// each the per-core figure times the cores it ran on.
struct Roof {
    gflops: f64,
    gbs: f64,
}

impl Roof {
    /// A kernel's roofline time (its flops at the peak or its bytes at
    /// the bandwidth, whichever takes longer) as a share of the time it
    /// took: how close it came to what the machine allows for its
    /// arithmetic intensity. "-" without a time or anything counted.
    fn share(&self, s: f64, macs: u64, bytes: u64) -> String {
        let flops_s = 2.0 * macs as f64 / (self.gflops * 1e9);
        let bytes_s = bytes as f64 / (self.gbs * 1e9);
        let ideal = flops_s.max(bytes_s);
        if s > 0.0 && ideal.is_finite() && ideal > 0.0 {
            format!("{:.0}%", 100.0 * ideal / s)
        } else {
            "-".into()
        }
    }
}

/// Bytes a kernel made of graph nodes `nodes` (by name) must move at
/// least: every value it reads that is computed outside it (activations,
/// weights) and every value it computes that is read outside it or is a
/// graph output, each counted once. Names the graph does not hold (a
/// layout reorder the backend adds) count nothing, so such a kernel's
/// share reads "-".
fn kernel_bytes(g: &Graph, nodes: &[String]) -> u64 {
    use std::collections::HashSet;
    let ids: HashSet<_> = nodes
        .iter()
        .filter_map(|n| g.value_by_name(n))
        .map(|v| g.value(v).producer)
        .collect();
    let mut moved = HashSet::new();
    for &id in &ids {
        let node = g.node(id);
        for &v in &node.inputs {
            if !ids.contains(&g.value(v).producer) {
                moved.insert(v);
            }
        }
        for &v in &node.outputs {
            let outside = g.users(v).iter().any(|(u, _)| !ids.contains(u));
            if outside || g.outputs().contains(&v) {
                moved.insert(v);
            }
        }
    }
    moved
        .into_iter()
        .map(|v| g.value(v).ty.size_bytes() as u64)
        .sum()
}

/// The multiply-adds a kernel's convolutions do by the algorithm that
/// ran (`dnnc_passes::cost::conv_work`: Winograd's frequency GEMMs and
/// transforms, without the filter transforms done at compile time, a unit
/// counted as one multiply-add), its other contractions' as they are;
/// `None` where no conv of it has a known algorithm, so the caller keeps
/// the direct count.
fn algorithm_work(
    algo: Option<&str>,
    kernel: &[String],
    nodes: &HashMap<&str, &wd::NodeCost>,
) -> Option<u64> {
    let algo = algo?;
    let mut any = false;
    let mut work = 0u64;
    for n in kernel.iter().filter_map(|n| nodes.get(n.as_str())) {
        if n.class != OpClass::Contraction {
            continue;
        }
        let by_algo = n.conv.as_ref().and_then(|c| {
            let algo = crate::tune::conv_algo_in_kernel(algo, &c.shape);
            dnnc_passes::cost::conv_work(algo, &c.shape)
        });
        any |= by_algo.is_some();
        work += by_algo.unwrap_or(n.work);
    }
    any.then_some(work)
}

/// Contraction multiply-adds per node name (Conv2d, MatMul, Gemm, ...),
/// for GFLOP/s columns.
fn contraction_macs(analysis: &wd::Analysis) -> HashMap<String, u64> {
    analysis
        .nodes
        .iter()
        .filter(|n| n.class == OpClass::Contraction)
        .map(|n| (n.name.clone(), n.work))
        .collect()
}

/// `dnnc run --backend gpu --profile`: each kernel's GPU time (timestamp
/// queries around its compute pass, median of the runs given), share,
/// GFLOP/s, shader count, convolution algorithm and fused ops, slowest
/// first.
pub fn render_gpu_profile(
    g: &Graph,
    exe: &dnnc_runtime::gpu::GpuExecutable,
    times: &[Duration],
) -> String {
    let macs = contraction_macs(&wd::analyze(g));
    let kernels = &exe.program().kernels;
    let total_s = times
        .iter()
        .map(Duration::as_secs_f64)
        .sum::<f64>()
        .max(1e-12);
    let mut rows: Vec<usize> = (0..kernels.len().min(times.len())).collect();
    rows.sort_by(|&a, &b| times[b].cmp(&times[a]).then(a.cmp(&b)));
    let mut all_macs = 0u64;
    let mut cells = Vec::new();
    for i in rows {
        let k = &kernels[i];
        let w: u64 = k.nodes.iter().filter_map(|n| macs.get(n)).sum();
        all_macs += w;
        let [ms, share, rate] = time_cells(times[i].as_secs_f64(), total_s, w);
        cells.push([
            k.name.clone(),
            ms,
            share,
            rate,
            k.stages.len().to_string(),
            k.algo.clone().unwrap_or_else(|| "-".into()),
            k.op.clone(),
        ]);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nprofile of `{}` (gpu, {}): {} kernels, {:.3} ms in kernels, {:.1} GFLOP/s overall",
        g.name,
        exe.adapter().name,
        cells.len(),
        total_s * 1e3,
        2.0 * all_macs as f64 / total_s / 1e9
    );
    out.push_str(&table(
        &[
            "kernel",
            "ms",
            "share",
            "GFLOP/s",
            "shaders",
            "algo",
            "ops fused",
        ],
        &[false, true, true, true, true, false, false],
        &cells,
    ));
    out
}

/// The waves of independent kernels with the W-D estimates and decision
/// (`dnnc run --profile --threads N`); single-kernel waves are left out.
pub fn render_waves(exe: &Executable) -> String {
    let mut out = String::new();
    let multi: Vec<(usize, &dnnc_runtime::cpu::Wave)> = exe
        .waves()
        .iter()
        .enumerate()
        .filter(|(_, w)| w.steps.len() > 1)
        .collect();
    let _ = writeln!(
        out,
        "\nwaves of independent kernels ({} thread{}, --concurrency {}): {} of {} with several kernels run concurrently",
        exe.threads(),
        if exe.threads() == 1 { "" } else { "s" },
        format!("{:?}", exe.concurrency()).to_lowercase(),
        multi.iter().filter(|(_, w)| w.concurrent).count(),
        multi.len()
    );
    let model = exe.cost_model();
    let _ = writeln!(
        out,
        "  rule: concurrent iff T_conc < T_seq, estimated by {} in {}",
        model.source(),
        model.unit()
    );
    for (i, w) in multi {
        let names: Vec<&str> = w
            .steps
            .iter()
            .filter_map(|&j| exe.steps().get(j).map(|s| s.name.as_str()))
            .collect();
        let _ = writeln!(
            out,
            "  wave {i:>3}  {:<28}  T_seq {:>12.1}  T_conc {:>12.1}  {}",
            if w.concurrent {
                format!("concurrent, {} thread(s) each", w.threads_per_step)
            } else {
                "sequential".to_string()
            },
            w.est_sequential,
            w.est_concurrent,
            names.join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_stats() {
        let l = Latency::of(&[3.0, 1.0, 2.0]);
        assert_eq!((l.median, l.min, l.max), (2.0, 1.0, 3.0));
        let l = Latency::of(&[4.0, 1.0, 2.0, 3.0]);
        assert_eq!(l.median, 2.5);
        assert_eq!(Latency::of(&[]).median, 0.0);
    }

    #[test]
    fn peak_share_is_the_rate_over_the_cores_peak() {
        // 2 x 1e9 MACs in 0.1 s is 20 GFLOP/s: half of a 40 GFLOP/s peak.
        assert_eq!(peak_share(0.1, 1_000_000_000, 40.0), "50%");
        assert_eq!(peak_share(0.1, 0, 40.0), "-");
        assert_eq!(peak_share(0.0, 5, 40.0), "-");
    }

    #[test]
    fn the_roof_is_the_slower_of_flops_and_bytes() {
        let roof = Roof {
            gflops: 100.0,
            gbs: 20.0,
        };
        // Memory-bound: 2 MFLOP take 20 us at the peak, 4 MB take 200 us
        // at the bandwidth; in 400 us the kernel is at half its roof.
        assert_eq!(roof.share(400e-6, 1_000_000, 4_000_000), "50%");
        // Compute-bound: 2 GFLOP take 20 ms, 1 kB nothing to speak of.
        assert_eq!(roof.share(40e-3, 1_000_000_000, 1000), "50%");
        // Faster than the memory roof: its data came from cache.
        assert_eq!(roof.share(100e-6, 0, 4_000_000), "200%");
        assert_eq!(roof.share(0.0, 5, 5), "-");
        assert_eq!(roof.share(1.0, 0, 0), "-");
    }

    fn model(text: &str) -> Graph {
        crate::model::load_model_str(text, "m.dnn").unwrap()
    }

    #[test]
    fn a_kernel_moves_what_crosses_its_boundary_once() {
        let g = model(
            "graph g {
  input %x: f32[2,64]
  param %w: f32[64,1000] = he(seed=1)
  %y = MatMul(%x, %w)
  %r = Relu(%y)
  %s = Add(%r, %r)
  output %s
}",
        );
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (x, w, y) = (2 * 64 * 4, 64 * 1000 * 4, 2 * 1000 * 4);
        // MatMul + Relu: x and w in, r out; y stays inside.
        assert_eq!(kernel_bytes(&g, &names(&["y", "r"])), x + w + y);
        // MatMul alone: y leaves it for the Relu.
        assert_eq!(kernel_bytes(&g, &names(&["y"])), x + w + y);
        // Add reads r twice but moves it once, and writes the output.
        assert_eq!(kernel_bytes(&g, &names(&["s"])), 2 * y);
        // The whole graph: its input, weights and output.
        assert_eq!(kernel_bytes(&g, &names(&["y", "r", "s"])), x + w + y);
        // A name the graph does not hold counts nothing.
        assert_eq!(kernel_bytes(&g, &names(&["y.to_nchw8c"])), 0);
    }

    #[test]
    fn a_conv_kernel_counts_the_work_of_its_algorithm() {
        let g = model(
            "graph g {
  input %x: f32[1,64,56,56]
  param %w: f32[64,64,3,3] = he(seed=1)
  %c = Conv2d(%x, %w) {pads=[1,1,1,1]}
  %r = Relu(%c)
  output %r
}",
        );
        let a = wd::analyze(&g);
        let nodes: HashMap<&str, &wd::NodeCost> =
            a.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let kernel = vec!["c".to_string(), "r".to_string()];
        let direct = 64 * 64 * 9 * 56 * 56;
        assert_eq!(
            algorithm_work(Some("im2col"), &kernel, &nodes),
            Some(direct)
        );
        let shape = &nodes["c"].conv.as_ref().unwrap().shape;
        let wino = dnnc_passes::cost::conv_work("winograd4", shape).unwrap();
        assert!(wino < direct / 2, "{wino} {direct}");
        assert_eq!(
            algorithm_work(Some("winograd4"), &kernel, &nodes),
            Some(wino)
        );
        // No algorithm (a Gemm, a pool): the caller keeps its own count.
        assert_eq!(algorithm_work(None, &kernel, &nodes), None);
        assert_eq!(
            algorithm_work(Some("im2col"), &["r".to_string()], &nodes),
            None
        );
    }

    #[test]
    fn a_median_far_above_the_fastest_run_is_reported() {
        assert_eq!(Latency::of(&[1.0, 1.1, 1.2]).spread_note(), None);
        let l = Latency::of(&[1.0, 2.0, 2.1]);
        let note = l.spread_note().unwrap();
        assert!(
            note.contains("the median is 2.00x the fastest run"),
            "{note}"
        );
        assert_eq!(Latency::of(&[]).spread_note(), None);
    }
}
