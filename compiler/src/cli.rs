//! The `dnnc` command line: argument parsing and thin wrappers over the
//! library. Each subcommand returns its output as text so tests can call it
//! without spawning a process.

use crate::error::DnncError;
use crate::model::load_model;
use clap::{Parser, Subcommand, ValueEnum};
use dnnc_ir::tensor::{read_npy, read_safetensors, write_npy};
use dnnc_ir::{DType, Graph, Tensor};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// dnnc: a deep-learning graph compiler.
#[derive(Debug, Parser)]
#[command(name = "dnnc", version, about, long_about = None)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Execution backends selectable with `--backend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// The reference interpreter: slow, simple, the numeric oracle.
    Interp,
    /// Native code for this CPU (Cranelift JIT); an op it cannot compile
    /// is an error, never interpreted.
    Cpu,
    /// WGSL compute shaders run through wgpu on a GPU adapter (Vulkan,
    /// Metal, DX12, GL; `--adapter` picks one, `dnnc devices` lists them).
    Gpu,
}

/// `--conv-algo` and `--conv-algo-for` of `dnnc run` and `dnnc bench`
/// (cpu backend; see docs/cpu-backend.md, "Convolution algorithms").
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ConvArgs {
    /// Force this convolution algorithm wherever it applies (elsewhere the
    /// default is used and a note says why). `winograd` is `winograd4`.
    #[arg(long, value_enum, value_name = "ALGO")]
    pub conv_algo: Option<crate::codegen::cpu::ConvAlgo>,
    /// Force an algorithm on one Conv2d, by its result's name (repeatable;
    /// overrides --conv-algo for that node).
    #[arg(long, value_name = "NODE=ALGO")]
    pub conv_algo_for: Vec<String>,
    /// A tuning record from `dnnc tune --out`: each named Conv2d gets the
    /// algorithm measured fastest (--conv-algo-for overrides it).
    #[arg(long, value_name = "RECORD.json")]
    pub tuning: Option<PathBuf>,
    /// Run the optimisation pipeline (`dnnc ir --passes`: simplify,
    /// fold-batchnorm, egraph, fold-weights, split-order, select-conv-algo) before
    /// compiling; without
    /// it the model compiles as loaded.
    #[arg(long)]
    pub optimize: bool,
    /// What decides how kernels split across --threads threads and which
    /// independent kernels run concurrently (`dnnc ir --after partition`
    /// shows the decisions).
    #[arg(long, value_enum, value_name = "MODEL", default_value_t)]
    pub partition: PartitionArg,
    /// Machine profile for the calibrated partition (default: the
    /// built-in profile of this CPU's class, xeon-avx512, epyc-avx512,
    /// epyc-zen3 or epyc-avx2;
    /// `dnnc calibrate --out` writes one).
    #[arg(long, value_name = "PROFILE.json")]
    pub partition_profile: Option<PathBuf>,
    /// Keep every activation in NCHW on the cpu backend: no
    /// channel-blocked (`data=nchw8c`) chains of pointwise and depthwise
    /// convs (the `block-channels` pass), for comparison.
    #[arg(long)]
    pub nchw_only: bool,
    /// Keep max and average pools and channel Concats in NCHW on the cpu
    /// backend, out of the channel-blocked regions (which otherwise run
    /// GoogLeNet- and SqueezeNet-style models blocked from their stem
    /// pool to their global pool), for comparison.
    #[arg(long, conflicts_with = "nchw_only")]
    pub plain_pools: bool,
    /// Run the convs of each channel-blocked inverted residual block
    /// (expansion, depthwise, projection) as kernels of their own that
    /// write their whole results, instead of one kernel computing the
    /// block a row at a time, and a stem's max pool apart from its conv,
    /// for comparison.
    #[arg(long)]
    pub unfused_blocks: bool,
    /// Store every activation with dense planes on the cpu backend,
    /// instead of padding the H x W planes of conv chains to whole cache
    /// lines where H·W is not a multiple of 16, for comparison.
    #[arg(long)]
    pub dense_planes: bool,
}

/// `--partition` of `dnnc run`, `dnnc bench` and `dnnc ir --after
/// partition`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum PartitionArg {
    /// The calibrated cost model: each kernel's predicted time as 1..N
    /// shares, the least wins.
    #[default]
    Cost,
    /// The runtime's Work-Depth rule (work counts, fixed hand-off
    /// budgets), for comparison.
    Rule,
}

/// `--concurrency` of `dnnc run` and `dnnc bench`: how waves of
/// independent kernels run with `--threads` above 1 (see
/// docs/cpu-backend.md, "Threads and concurrent waves").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ConcurrencyArg {
    /// The Work-Depth rule decides per wave.
    #[default]
    Auto,
    /// Every wave of two or more kernels runs concurrently.
    Always,
    /// Kernels run one after another; only large GEMMs split.
    Never,
}

impl From<ConcurrencyArg> for dnnc_runtime::cpu::Concurrency {
    fn from(c: ConcurrencyArg) -> Self {
        match c {
            ConcurrencyArg::Auto => Self::Auto,
            ConcurrencyArg::Always => Self::Always,
            ConcurrencyArg::Never => Self::Never,
        }
    }
}

/// dnnc's subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a model and write or summarise its outputs.
    Run {
        /// Model file (.dnn text model).
        model: PathBuf,
        /// Input tensor: NAME=FILE.npy, or just FILE.npy for a single-input model.
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Safetensors file whose tensors bind parameters by name.
        #[arg(long, value_name = "FILE.safetensors")]
        weights: Option<PathBuf>,
        /// Directory to write `<output name>.npy` files into.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Execution backend (native code by default; `interp` is the
        /// reference interpreter).
        #[arg(long, value_enum, default_value_t = Backend::Cpu)]
        backend: Backend,
        /// GPU adapter for --backend gpu: an index or a name substring
        /// (`dnnc devices` lists them; default: the high-performance one).
        #[arg(long, value_name = "NAME|INDEX")]
        adapter: Option<String>,
        /// Threads for the cpu backend (at least 1).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = threads_arg)]
        threads: usize,
        /// Print per-kernel times (cpu backend): share of the total, the
        /// ops fused, conv algorithm and GFLOP/s; with --threads above 1
        /// also the waves of independent kernels and whether each runs
        /// concurrently.
        #[arg(long)]
        profile: bool,
        /// How waves of independent kernels run with --threads above 1.
        #[arg(long, value_enum, default_value_t = ConcurrencyArg::Auto)]
        concurrency: ConcurrencyArg,
        /// With --threads above 1, let idle workers sleep between split
        /// kernels instead of polling for ~300 µs (slower on a quiet
        /// machine, kinder to an oversubscribed one).
        #[arg(long)]
        no_spin: bool,
        /// Convolution algorithm choices.
        #[command(flatten)]
        conv: ConvArgs,
    },
    /// Time a model as a caller sees it — one `Executable::run` per
    /// iteration, input binding and output read-back included: median, min
    /// and max latency, GFLOP/s and % of peak, the per-run overhead beyond
    /// the kernels, peak activation bytes and compile time.
    Bench {
        /// Model file (.dnn text model or .onnx).
        model: PathBuf,
        /// Input tensor: NAME=FILE.npy, or just FILE.npy for a single-input
        /// model (default: seeded random data).
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Safetensors file whose tensors bind parameters by name.
        #[arg(long, value_name = "FILE.safetensors")]
        weights: Option<PathBuf>,
        /// Threads (at least 1).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = threads_arg)]
        threads: usize,
        /// Untimed runs before timing.
        #[arg(long, value_name = "N", default_value_t = 3)]
        warmup: usize,
        /// Timed runs (at least 1).
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = iters_arg)]
        iters: usize,
        /// Execution backend.
        #[arg(long, value_enum, default_value_t = Backend::Cpu)]
        backend: Backend,
        /// GPU adapter for --backend gpu: an index or a name substring
        /// (`dnnc devices` lists them; default: the high-performance one).
        #[arg(long, value_name = "NAME|INDEX")]
        adapter: Option<String>,
        /// How waves of independent kernels run with --threads above 1.
        #[arg(long, value_enum, default_value_t = ConcurrencyArg::Auto)]
        concurrency: ConcurrencyArg,
        /// With --threads above 1, let idle workers sleep between split
        /// kernels instead of polling for ~300 µs (slower on a quiet
        /// machine, kinder to an oversubscribed one).
        #[arg(long)]
        no_spin: bool,
        /// With --optimize: also compile the model as loaded and time
        /// the two builds in this process, a run of each per iteration in
        /// alternating order, reporting both latencies and the median
        /// per-iteration ratio (a host whose speed drifts slows both alike).
        #[arg(long)]
        against_unoptimized: bool,
        /// Convolution algorithm choices.
        #[command(flatten)]
        conv: ConvArgs,
    },
    /// Print the Work-Depth analysis: per-node W, D and conv algorithm costs.
    Analyze {
        /// Model file.
        model: PathBuf,
        /// Emit JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Processor count for Brent's bounds (default: available cores).
        #[arg(long, value_name = "P")]
        procs: Option<usize>,
        /// Also compile the model, run it on P threads (`--procs`, default
        /// 1 here) and print each kernel's predicted time (the cost
        /// model) next to its measured median.
        #[arg(long, conflicts_with = "json")]
        measure: bool,
        /// Machine profile for --measure's predictions (default: the
        /// built-in profile of this CPU's class).
        #[arg(long, value_name = "PROFILE.json", requires = "measure")]
        cost_profile: Option<PathBuf>,
    },
    /// Print the canonical text IR (unoptimised unless --after is given).
    Ir {
        /// Model file.
        model: PathBuf,
        /// List the optimisation pipeline's passes, in order, and exit.
        #[arg(long, conflicts_with = "after")]
        passes: bool,
        /// List the egraph pass's rewrite rules, a line each, and exit.
        #[arg(long, conflicts_with_all = ["after", "passes"])]
        rules: bool,
        /// Run the pipeline up to and including PASS and print the result
        /// (for `fusion`, the IR grouped into kernels; `block-channels`,
        /// after the whole pipeline, the IR with the CPU backend's
        /// channel-blocked chains; `partition`, after the whole pipeline,
        /// how the CPU executable runs each kernel on --threads threads).
        #[arg(long, value_name = "PASS")]
        after: Option<String>,
        /// With --after partition: the thread count to partition for.
        #[arg(long, value_name = "N", default_value_t = 1, requires = "after")]
        threads: usize,
        /// With --after partition: what decides the partition, as for
        /// `dnnc run`.
        #[arg(
            long,
            value_enum,
            value_name = "MODEL",
            default_value_t,
            requires = "after"
        )]
        partition: PartitionArg,
        /// With --after partition and --partition cost: the machine
        /// profile (default: the built-in profile of this CPU's class).
        #[arg(long, value_name = "PROFILE.json", requires = "after")]
        partition_profile: Option<PathBuf>,
        /// With --after: append each pass's statistics as `#` comment
        /// lines (for `egraph`: iterations, e-nodes, e-classes, time, stop
        /// reason, rules fired, predicted time before and after).
        #[arg(long, requires = "after")]
        stats: bool,
        /// The egraph pass's e-node budget.
        #[arg(long, value_name = "N")]
        egraph_nodes: Option<usize>,
        /// The egraph pass's iteration budget.
        #[arg(long, value_name = "N")]
        egraph_iters: Option<usize>,
        /// The egraph pass's time budget in milliseconds.
        #[arg(long, value_name = "MS")]
        egraph_ms: Option<u64>,
        /// Emit generated code instead of IR: `wgsl` prints (or with
        /// --out writes, one `.wgsl` file per kernel stage) the GPU
        /// backend's validated compute shaders for the graph (after
        /// --after PASS when given).
        #[arg(long, value_name = "FORMAT", value_parser = ["wgsl"], conflicts_with_all = ["passes", "rules"])]
        emit: Option<String>,
        /// With --emit: the directory to write the files into.
        #[arg(long, value_name = "DIR", requires = "emit")]
        out: Option<PathBuf>,
        /// With --emit wgsl: size workgroups and tiles for this adapter's
        /// limits (default: WebGPU's guaranteed minimums, valid anywhere).
        #[arg(long, value_name = "NAME|INDEX", requires = "emit")]
        adapter: Option<String>,
    },
    /// Measure every applicable convolution algorithm on every Conv2d of
    /// MODEL (each kernel with its fused epilogue, in its model) and
    /// print measured and predicted times per layer, the heuristic's and
    /// the cost model's choices, and how often the model's choice is
    /// within 10% of the fastest.
    Tune {
        /// Model files (.dnn text model or .onnx); with several, each
        /// table and then the figures over all of their layers.
        #[arg(required = true, num_args = 1..)]
        models: Vec<PathBuf>,
        /// Input tensor: NAME=FILE.npy, or just FILE.npy (one model only;
        /// default: seeded random data).
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Threads (at least 1).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = threads_arg)]
        threads: usize,
        /// Profiled runs per algorithm; each kernel reports its median.
        #[arg(long, value_name = "N", default_value_t = 10, value_parser = iters_arg)]
        runs: usize,
        /// Machine profile for the predictions (default: the built-in
        /// profile of this CPU's class, xeon-avx512, epyc-avx512,
        /// epyc-zen3 or epyc-avx2).
        #[arg(long, value_name = "PROFILE.json")]
        cost_profile: Option<PathBuf>,
        /// Write the tuning record (each conv's fastest algorithm) here;
        /// `dnnc run/bench --tuning FILE` compiles with it.
        #[arg(long, value_name = "RECORD.json")]
        out: Option<PathBuf>,
    },
    /// Measure the cost model's machine profile on this machine (a fixed
    /// set of conv layers, every algorithm) and print it as JSON, or
    /// write it with --out.
    Calibrate {
        /// Threads (at least 1).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = threads_arg)]
        threads: usize,
        /// Profiled runs per algorithm.
        #[arg(long, value_name = "N", default_value_t = 10, value_parser = iters_arg)]
        runs: usize,
        /// Write the profile here instead of printing it.
        #[arg(long, value_name = "PROFILE.json")]
        out: Option<PathBuf>,
    },
    /// List the GPU adapters wgpu finds (index, name, API, type, driver,
    /// compute limits), for `--adapter`.
    Devices,
    /// Print the graph in Graphviz dot format.
    Dot {
        /// Model file.
        model: PathBuf,
    },
    /// Run ONNX backend conformance tests on a backend: one line per
    /// test, then `N passed, N failed, N unsupported`. Exit status 1 when a
    /// test failed (unsupported ones do not count).
    OnnxTest {
        /// Execution backend, as for `run`.
        #[arg(long, value_enum, default_value_t = Backend::Cpu)]
        backend: Backend,
        /// Run the optimisation pipeline (the e-graph included) on each
        /// imported graph first.
        #[arg(long)]
        optimize: bool,
        /// GPU adapter for --backend gpu: an index or a name substring
        /// (`dnnc devices` lists them; default: the high-performance one).
        #[arg(long, value_name = "NAME|INDEX")]
        adapter: Option<String>,
        /// Test folders (with model.onnx and test_data_set_N/), or folders
        /// of test folders such as onnx's `backend/test/data/node`.
        #[arg(required = true, value_name = "DIR")]
        dirs: Vec<PathBuf>,
    },
}

/// Warm runs `dnnc run --profile` times; each kernel reports its median,
/// so one noisy run on a shared machine does not decide the table.
const PROFILE_RUNS: usize = 10;

/// Runs `exe` `runs` times with per-step timing and returns the last run's
/// outputs with each step's median time.
fn profile_median(
    exe: &dnnc_runtime::cpu::Executable,
    feeds: &[(String, dnnc_ir::Tensor)],
    runs: usize,
) -> Result<(Vec<dnnc_ir::Tensor>, dnnc_runtime::cpu::StepTimes), DnncError> {
    let (mut out, mut times) = exe.run_profiled(feeds)?;
    let mut samples: Vec<Vec<std::time::Duration>> = times.iter().map(|t| vec![t.2]).collect();
    for _ in 1..runs {
        let (o, t) = exe.run_profiled(feeds)?;
        out = o;
        for (s, t) in samples.iter_mut().zip(&t) {
            s.push(t.2);
        }
    }
    for (t, mut s) in times.iter_mut().zip(samples) {
        s.sort();
        t.2 = s[s.len() / 2];
    }
    Ok((out, times))
}

fn threads_arg(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn iters_arg(s: &str) -> Result<usize, String> {
    threads_arg(s)
}

/// Runs a parsed command line, returning what it prints on stdout.
/// Progress notes go to `notes` (stderr in the binary).
pub fn execute(cli: Cli, notes: &mut dyn FnMut(&str)) -> Result<String, DnncError> {
    execute_with_status(cli, notes).map(|(text, _)| text)
}

/// Like [`execute`], also returning the process exit status for commands
/// whose success is not all-or-nothing (`onnx-test` exits 1 when a test
/// failed yet still prints its report).
pub fn execute_with_status(
    cli: Cli,
    notes: &mut dyn FnMut(&str),
) -> Result<(String, i32), DnncError> {
    // An instruction-set cap that cannot be honoured is a usage error
    // before anything runs (the kernels would silently ignore it).
    dnnc_ir::isa::cap_from_env().map_err(DnncError::Usage)?;
    let mut status = 0;
    let text = execute_command(cli, notes, &mut status)?;
    Ok((text, status))
}

fn execute_command(
    cli: Cli,
    notes: &mut dyn FnMut(&str),
    status: &mut i32,
) -> Result<String, DnncError> {
    match cli.command {
        Command::Run {
            model,
            inputs,
            weights,
            out,
            backend,
            adapter,
            threads,
            profile,
            concurrency,
            no_spin,
            conv,
        } => {
            if backend != Backend::Cpu && threads != 1 {
                return Err(DnncError::Usage("--threads needs --backend cpu".into()));
            }
            if backend == Backend::Interp && profile {
                return Err(DnncError::Usage(
                    "--profile needs --backend cpu or gpu".into(),
                ));
            }
            check_adapter_arg(backend, &adapter)?;
            let mut g = load_model(&model)?;
            if let Some(w) = weights {
                bind_weights_file(&mut g, &w, notes)?;
            }
            g.check_weights_bound()?;
            optimize_if(&mut g, &conv, backend)?;
            let feeds = gather_inputs(&g, &inputs, notes)?;
            let mut report = String::new();
            let results = match backend {
                Backend::Interp => dnnc_runtime::run(&g, &feeds)?,
                Backend::Gpu => {
                    let exe = compile_for_gpu(&g, &conv, adapter.as_deref())?;
                    notes(&format!(
                        "note: running on GPU adapter {}",
                        exe.adapter().name
                    ));
                    if profile {
                        // Warm runs, each kernel's median GPU time.
                        exe.run(&feeds)?;
                        let mut samples = vec![Vec::new(); exe.program().kernels.len()];
                        let mut out = Vec::new();
                        for _ in 0..PROFILE_RUNS {
                            let (o, t) = exe.run_profiled(&feeds)?;
                            for (s, d) in samples.iter_mut().zip(t) {
                                s.push(d);
                            }
                            out = o;
                        }
                        let times: Vec<std::time::Duration> = samples
                            .into_iter()
                            .map(|mut s| {
                                s.sort();
                                s[s.len() / 2]
                            })
                            .collect();
                        report = crate::bench::render_gpu_profile(&g, &exe, &times);
                        out
                    } else {
                        exe.run(&feeds)?
                    }
                }
                Backend::Cpu => {
                    let opts = cpu_options(&g, &conv, notes)?;
                    let mut exe = compile_for_cpu(&g, &opts, threads)?;
                    exe.set_concurrency(concurrency.into());
                    exe.set_spinning(!no_spin).map_err(DnncError::Usage)?;
                    if profile {
                        // The first runs pay page faults and cold caches;
                        // profile warm ones, each kernel's median time.
                        exe.run(&feeds)?;
                        exe.run(&feeds)?;
                        let (r, times) = profile_median(&exe, &feeds, PROFILE_RUNS)?;
                        report = crate::bench::render_profile(&g, &exe, &times);
                        r
                    } else {
                        exe.run(&feeds)?
                    }
                }
            };
            let mut text = String::new();
            for (&v, t) in g.outputs().iter().zip(&results) {
                let name = &g.value(v).name;
                text.push_str(&summarize(name, t));
                if let Some(dir) = &out {
                    std::fs::create_dir_all(dir).map_err(|source| DnncError::Io {
                        action: "create directory",
                        path: dir.display().to_string(),
                        source,
                    })?;
                    let path = dir.join(format!("{}.npy", file_stem_for(name)));
                    write_npy(&path, t)?;
                    let _ = writeln!(text, "  wrote {}", path.display());
                }
            }
            text.push_str(&report);
            Ok(text)
        }
        Command::Bench {
            model,
            inputs,
            weights,
            threads,
            warmup,
            iters,
            backend,
            adapter,
            concurrency,
            no_spin,
            against_unoptimized,
            conv,
        } => {
            if backend != Backend::Cpu && threads != 1 {
                return Err(DnncError::Usage("--threads needs --backend cpu".into()));
            }
            if against_unoptimized && (!conv.optimize || backend != Backend::Cpu) {
                return Err(DnncError::Usage(
                    "--against-unoptimized needs --optimize and --backend cpu".into(),
                ));
            }
            check_adapter_arg(backend, &adapter)?;
            let mut g = load_model(&model)?;
            if let Some(w) = weights {
                bind_weights_file(&mut g, &w, notes)?;
            }
            g.check_weights_bound()?;
            let against = if against_unoptimized {
                let mut loaded = g.clone();
                let plain = ConvArgs {
                    optimize: false,
                    ..conv.clone()
                };
                optimize_if(&mut loaded, &plain, backend)?;
                let opts = cpu_options(&loaded, &plain, notes)?;
                Some((loaded, opts))
            } else {
                None
            };
            optimize_if(&mut g, &conv, backend)?;
            let feeds = gather_inputs(&g, &inputs, notes)?;
            let cfg = crate::bench::BenchConfig {
                threads,
                warmup,
                iters,
                cpu: backend == Backend::Cpu,
                gpu: match backend {
                    Backend::Gpu => Some((
                        adapter
                            .as_deref()
                            .map(dnnc_runtime::gpu::AdapterChoice::parse)
                            .unwrap_or_default(),
                        gpu_options(&conv),
                    )),
                    _ => None,
                },
                concurrency: concurrency.into(),
                spinning: !no_spin,
                against,
                cpu_opts: if backend == Backend::Cpu {
                    cpu_options(&g, &conv, notes)?
                } else {
                    Default::default()
                },
            };
            crate::bench::bench(&g, &feeds, &cfg)
        }
        Command::Analyze {
            model,
            json,
            procs,
            measure,
            cost_profile,
        } => {
            let asked = procs;
            let procs = match procs {
                Some(0) => return Err(DnncError::Usage("--procs must be at least 1".into())),
                Some(p) => p,
                None => std::thread::available_parallelism().map_or(1, |n| n.get()),
            };
            let profile = read_cost_profile(cost_profile.as_deref())?;
            let g = load_model(&model)?;
            let mut a = dnnc_passes::wd::analyze(&g);
            a.memory = Some(dnnc_passes::wd::activation_memory(&g));
            let mut text = if json {
                dnnc_passes::wd::render_json(&a, procs)
            } else {
                dnnc_passes::wd::render_table(&a, procs)
            };
            if measure {
                g.check_weights_bound()?;
                let feeds = gather_inputs(&g, &[], notes)?;
                let threads = asked.unwrap_or(1);
                // The kernels of the default build `dnnc run` compiles.
                let mut built = g.clone();
                dnnc_passes::Pipeline::baseline().run(&mut built)?;
                let k = crate::tune::kernel_times(&built, &feeds, threads, 10, &profile)?;
                text.push('\n');
                text.push_str(&crate::tune::render_kernel_times(&k, threads));
            }
            Ok(text)
        }
        Command::Ir {
            model: _,
            rules: true,
            ..
        } => {
            let rules = dnnc_passes::egraph::rules::rules();
            let width = rules.iter().map(|r| r.name.len()).max().unwrap_or(0);
            Ok(rules
                .iter()
                .map(|r| format!("{:width$}  {}\n", r.name, r.doc))
                .collect())
        }
        Command::Ir {
            model,
            passes,
            rules: _,
            after,
            stats,
            threads,
            partition,
            partition_profile,
            egraph_nodes,
            egraph_iters,
            egraph_ms,
            emit,
            out,
            adapter,
        } => {
            if threads == 0 {
                return Err(DnncError::Usage("--threads must be at least 1".into()));
            }
            let d = dnnc_passes::egraph::EGraphConfig::default();
            let cfg = dnnc_passes::egraph::EGraphConfig {
                profile: Default::default(),
                node_limit: egraph_nodes.unwrap_or(d.node_limit),
                iter_limit: egraph_iters.unwrap_or(d.iter_limit),
                time_limit: egraph_ms.map_or(d.time_limit, std::time::Duration::from_millis),
                ..d
            };
            // Budgets are checked before the model loads.
            cfg.validate()?;
            let pipeline = dnnc_passes::Pipeline::with_egraph(cfg);
            if emit.is_some() {
                return emit_wgsl(
                    &model,
                    pipeline,
                    after.as_deref(),
                    out.as_deref(),
                    adapter.as_deref(),
                    notes,
                );
            }
            let partition = partition_model(partition, partition_profile.as_deref())?;
            ir_command(
                &model,
                pipeline,
                (passes, stats, threads),
                (after.as_deref(), partition),
                notes,
            )
        }
        Command::Tune {
            models,
            inputs,
            threads,
            runs,
            cost_profile,
            out,
        } => {
            if models.len() > 1 && !inputs.is_empty() {
                return Err(DnncError::Usage(
                    "--input applies to one model; tune several with seeded random inputs".into(),
                ));
            }
            let profile = read_cost_profile(cost_profile.as_deref())?;
            notes(&format!(
                "note: predictions by the profile of {}",
                profile.machine
            ));
            let mut text = String::new();
            let mut all = Vec::new();
            for model in &models {
                let mut g = load_model(model)?;
                g.check_weights_bound()?;
                // The convs of the default build `dnnc run` compiles.
                dnnc_passes::Pipeline::baseline().run(&mut g)?;
                let feeds = gather_inputs(&g, &inputs, notes)?;
                let layers = crate::tune::measure(&g, &feeds, threads, runs)?;
                if models.len() > 1 {
                    text.push_str(&format!("# {}\n", model.display()));
                }
                text.push_str(&crate::tune::render(&layers, &profile));
                all.extend(layers);
            }
            if models.len() > 1 {
                text.push_str(&format!(
                    "\nall {} models: {}\n",
                    models.len(),
                    crate::tune::quality(&all, &profile).line()
                ));
            }
            if let Some(path) = out {
                write_text(&path, &crate::tune::record(&all))?;
            }
            Ok(text)
        }
        Command::Devices => {
            let list = dnnc_runtime::gpu::adapters();
            if list.is_empty() {
                return Err(
                    dnnc_runtime::gpu::GpuError::NoAdapter("0 adapters enumerated".into()).into(),
                );
            }
            Ok(list.iter().map(|a| format!("{a}\n")).collect())
        }
        Command::Calibrate { threads, runs, out } => {
            let base = dnnc_passes::cost::MachineProfile::default();
            let crate::tune::Calibration {
                profile: p,
                layers,
                handoffs,
            } = crate::tune::calibrate(&base, threads, runs)?;
            notes(&format!(
                "note: fitted on {}",
                crate::tune::quality(&layers, &p).line()
            ));
            notes(&format!(
                "note: memory bandwidth measured on one core: {:.1} GB/s (a {} MiB stream)",
                p.bandwidth / 1e9,
                dnnc_runtime::cpu::peak::STREAM_BYTES >> 20
            ));
            notes(&match handoffs {
                Some((split, wave)) => format!(
                    "note: hand-offs measured on 2 threads: {:.2} us per split share, {:.2} us per wave kernel",
                    split * 1e6,
                    wave * 1e6
                ),
                None => "note: hand-offs not measured (one CPU, or no kernel split): the built-in profile's figures are kept".into(),
            });
            match out {
                Some(path) => {
                    write_text(&path, &p.to_json())?;
                    Ok(String::new())
                }
                None => Ok(p.to_json()),
            }
        }
        Command::Dot { model } => Ok(dnnc_ir::dot::to_dot(&load_model(&model)?)),
        Command::OnnxTest {
            backend,
            optimize,
            adapter,
            dirs,
        } => {
            check_adapter_arg(backend, &adapter)?;
            let choice = adapter
                .as_deref()
                .map(dnnc_runtime::gpu::AdapterChoice::parse)
                .unwrap_or_default();
            let report = crate::conformance::run_dirs_on_adapter(
                &dirs,
                backend,
                optimize,
                &choice,
                &mut |_| {},
            )
            .map_err(|e| DnncError::Usage(e.to_string()))?;
            *status = report.exit_code();
            Ok(report.render())
        }
    }
}

/// Runs the optimisation pipeline on `g` when `--optimize` asks for it,
/// else the baseline passes every compiled build gets
/// (`Pipeline::baseline`: BatchNorm folding; its notes on folds skipped
/// are dropped). The interpreter runs the model as written: the pipeline
/// is for the compiled backends.
fn optimize_if(g: &mut Graph, conv: &ConvArgs, backend: Backend) -> Result<(), DnncError> {
    if backend == Backend::Interp {
        if conv.optimize {
            return Err(DnncError::Usage(
                "--optimize needs --backend cpu or gpu".into(),
            ));
        }
        return Ok(());
    }
    if !conv.optimize {
        dnnc_passes::Pipeline::baseline().run(g)?;
        return Ok(());
    }
    let mut p = dnnc_passes::Pipeline::default();
    p.verify = true;
    p.run(g)?;
    Ok(())
}

/// The partition model `--partition` and `--partition-profile` ask for.
fn partition_model(
    arg: PartitionArg,
    profile: Option<&Path>,
) -> Result<crate::codegen::cpu::PartitionModel, DnncError> {
    use crate::codegen::cpu::PartitionModel;
    Ok(match (arg, profile) {
        (PartitionArg::Rule, Some(_)) => {
            return Err(DnncError::Usage(
                "--partition-profile needs --partition cost".into(),
            ))
        }
        (PartitionArg::Rule, None) => PartitionModel::RuntimeRule,
        (PartitionArg::Cost, None) => PartitionModel::Calibrated(None),
        (PartitionArg::Cost, Some(p)) => {
            PartitionModel::Calibrated(Some(read_cost_profile(Some(p))?))
        }
    })
}

/// The cost model's machine profile: the file given, else the built-in
/// profile of this CPU's class.
fn read_cost_profile(path: Option<&Path>) -> Result<dnnc_passes::cost::MachineProfile, DnncError> {
    let Some(path) = path else {
        return Ok(dnnc_passes::cost::MachineProfile::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| DnncError::Io {
        action: "read",
        path: path.display().to_string(),
        source,
    })?;
    dnnc_passes::cost::MachineProfile::from_json(&text, &path.display().to_string())
        .map_err(|e| DnncError::Usage(e.to_string()))
}

/// Writes `text` to `path`.
fn write_text(path: &Path, text: &str) -> Result<(), DnncError> {
    std::fs::write(path, text).map_err(|source| DnncError::Io {
        action: "write",
        path: path.display().to_string(),
        source,
    })
}

/// `--adapter` is for the GPU backend only.
fn check_adapter_arg(backend: Backend, adapter: &Option<String>) -> Result<(), DnncError> {
    if adapter.is_some() && backend != Backend::Gpu {
        return Err(DnncError::Usage("--adapter needs --backend gpu".into()));
    }
    Ok(())
}

/// GPU code generator options from `--conv-algo`: a Winograd algorithm
/// forces Winograd F(2x2,3x3) wherever it applies, any other algorithm
/// turns it off; per-node choices are the CPU backend's.
pub fn gpu_options(conv: &ConvArgs) -> crate::codegen::gpu::GpuOptions {
    use crate::codegen::cpu::ConvAlgo;
    crate::codegen::gpu::GpuOptions {
        winograd: conv
            .conv_algo
            .map(|a| matches!(a, ConvAlgo::Winograd2 | ConvAlgo::Winograd4)),
        ..Default::default()
    }
}

/// Opens the GPU adapter (`--adapter`, else the default) and compiles `g`
/// for its limits.
pub fn compile_for_gpu(
    g: &Graph,
    conv: &ConvArgs,
    adapter: Option<&str>,
) -> Result<dnnc_runtime::gpu::GpuExecutable, DnncError> {
    let choice = adapter
        .map(dnnc_runtime::gpu::AdapterChoice::parse)
        .unwrap_or_default();
    crate::codegen::gpu::compile_for_device(g, &gpu_options(conv), &choice)
}

/// `dnnc ir --emit wgsl`: the GPU backend's shaders for the graph (after
/// `--after PASS` when given), printed or written one file per stage.
fn emit_wgsl(
    model: &Path,
    mut pipeline: dnnc_passes::Pipeline,
    after: Option<&str>,
    out: Option<&Path>,
    adapter: Option<&str>,
    notes: &mut dyn FnMut(&str),
) -> Result<String, DnncError> {
    let mut g = load_model(model)?;
    if let Some(after) = after {
        if !pipeline.names().contains(&after) {
            return Err(dnnc_passes::PassError::UnknownPass {
                name: after.to_string(),
                valid: pipeline.names().iter().map(|s| s.to_string()).collect(),
            }
            .into());
        }
        pipeline.verify = true;
        pipeline.run_until(&mut g, after)?;
    }
    g.check_weights_bound()?;
    let mut opts = crate::codegen::gpu::GpuOptions::default();
    if let Some(a) = adapter {
        let dev = dnnc_runtime::gpu::GpuDevice::open(&dnnc_runtime::gpu::AdapterChoice::parse(a))?;
        notes(&format!(
            "note: shaders sized for GPU adapter {}",
            dev.adapter().name
        ));
        opts.limits = dev.limits();
    }
    let program = crate::codegen::gpu::compile_gpu(&g, &opts)?;
    let files = crate::codegen::gpu::wgsl_files(&program);
    let mut text = String::new();
    match out {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|source| DnncError::Io {
                action: "create directory",
                path: dir.display().to_string(),
                source,
            })?;
            for (name, src) in &files {
                write_text(&dir.join(name), src)?;
            }
            let _ = writeln!(
                text,
                "wrote {} shaders ({} kernels, each validated by naga) to {}",
                files.len(),
                program.kernels.len(),
                dir.display()
            );
        }
        None => {
            for (name, src) in &files {
                let _ = writeln!(text, "// ---- {name} ----\n{src}");
            }
        }
    }
    Ok(text)
}

/// Compiles for the cpu backend with `threads` worker threads.
pub fn compile_for_cpu(
    g: &Graph,
    opts: &crate::codegen::cpu::CpuOptions,
    threads: usize,
) -> Result<dnnc_runtime::cpu::Executable, DnncError> {
    let mut exe = crate::codegen::cpu::compile_cpu(g, opts)?;
    exe.set_threads(threads).map_err(DnncError::Usage)?;
    Ok(exe)
}

/// `dnnc ir`: the pipeline's pass list, the IR after a pass, or the
/// unoptimised IR. An unknown pass name is checked before the model loads.
/// The stage after the pipeline that `dnnc ir --after` also shows: how
/// the CPU executable runs each kernel (`codegen::cpu::partition`).
const PARTITION: &str = "partition";
const BLOCK_CHANNELS: &str = "block-channels";
const BLOCK_CHANNELS_DOC: &str = "(cpu backend, after the pipeline) chains of pointwise and depthwise convs stored channel-blocked (data=nchw8c), as the cpu backend compiles them unless --nchw-only";
const PARTITION_DOC: &str = "(cpu backend, after the pipeline) each kernel's tasks or GEMM threads on --threads threads and which independent kernels run concurrently, as --partition's model decides them";

fn ir_command(
    model: &Path,
    mut pipeline: dnnc_passes::Pipeline,
    (passes, with_stats, threads): (bool, bool, usize),
    (after, partition_by): (Option<&str>, crate::codegen::cpu::PartitionModel),
    notes: &mut dyn FnMut(&str),
) -> Result<String, DnncError> {
    if passes {
        let mut text = pipeline.describe();
        let width = pipeline.names().iter().map(|n| n.len()).max().unwrap_or(0);
        let width = width.max(BLOCK_CHANNELS.len());
        text.push_str(&format!("{BLOCK_CHANNELS:width$}  {BLOCK_CHANNELS_DOC}\n"));
        text.push_str(&format!("{PARTITION:width$}  {PARTITION_DOC}\n"));
        return Ok(text);
    }
    let Some(after) = after else {
        return Ok(dnnc_ir::text::print(&load_model(model)?));
    };
    let partition = after == PARTITION;
    let blocked = after == BLOCK_CHANNELS;
    if !partition && !blocked && !pipeline.names().contains(&after) {
        let mut valid: Vec<String> = pipeline.names().iter().map(|s| s.to_string()).collect();
        valid.push(BLOCK_CHANNELS.to_string());
        valid.push(PARTITION.to_string());
        return Err(dnnc_passes::PassError::UnknownPass {
            name: after.to_string(),
            valid,
        }
        .into());
    }
    let mut g = load_model(model)?;
    pipeline.verify = true;
    let last = if partition || blocked {
        "fusion"
    } else {
        after
    };
    let mut result = pipeline.run_until(&mut g, last)?;
    if blocked {
        let stats = dnnc_passes::block_channels::block_channels(&mut g)
            .map_err(|e| dnnc_passes::PassError::graph(BLOCK_CHANNELS, e))?;
        result.stats.push((BLOCK_CHANNELS, stats));
    }
    let mut text = match &result.kernels {
        _ if partition => {
            let profile = match &partition_by {
                crate::codegen::cpu::PartitionModel::Calibrated(Some(p)) => p.clone(),
                _ => Default::default(),
            };
            let opts = crate::codegen::cpu::CpuOptions {
                partition: partition_by,
                ..Default::default()
            };
            let mut exe = crate::codegen::cpu::compile_cpu(&g, &opts)?;
            exe.set_threads(threads).map_err(DnncError::Usage)?;
            crate::codegen::cpu::partition::report(&g, &exe, &profile)
        }
        Some(kg) if after == "fusion" => dnnc_passes::print_kernels(&g, kg),
        _ if blocked => dnnc_ir::text::print(&g),
        _ => dnnc_ir::text::print(&g),
    };
    for (pass, stats) in &result.stats {
        if with_stats {
            text.push_str(&format!("# {pass}: {} rewrites\n", stats.rewrites));
            for n in &stats.notes {
                text.push_str(&format!("# {pass}: {n}\n"));
            }
        } else {
            for n in &stats.notes {
                notes(&format!("note: {pass}: {n}"));
            }
        }
    }
    Ok(text)
}

/// CPU-backend options from `--conv-algo` and `--conv-algo-for`: unknown
/// node names and algorithms are usage errors; a forced algorithm that does
/// not apply to a conv is a note naming the node, the reason and the
/// algorithm used instead.
pub fn cpu_options(
    g: &Graph,
    conv: &ConvArgs,
    notes: &mut dyn FnMut(&str),
) -> Result<crate::codegen::cpu::CpuOptions, DnncError> {
    use crate::codegen::cpu::{conv_plan, ConvAlgo, CpuOptions};
    let mut opts = CpuOptions {
        conv_algo: conv.conv_algo,
        partition: partition_model(conv.partition, conv.partition_profile.as_deref())?,
        nchw_only: conv.nchw_only,
        plain_pools: conv.plain_pools,
        unfused_blocks: conv.unfused_blocks,
        dense_planes: conv.dense_planes,
        ..Default::default()
    };
    let plan = conv_plan(g, &opts);
    if let Some(path) = &conv.tuning {
        let text = std::fs::read_to_string(path).map_err(|source| DnncError::Io {
            action: "read",
            path: path.display().to_string(),
            source,
        })?;
        let origin = path.display().to_string();
        for (node, algo) in crate::tune::read_record(&text, &origin)? {
            if !plan.iter().any(|c| c.node == node) {
                return Err(DnncError::Usage(format!(
                    "tuning record {origin}: the model has no Conv2d named `{node}`"
                )));
            }
            opts.conv_algo_for.insert(node, algo);
        }
    }
    for arg in &conv.conv_algo_for {
        let Some((node, algo)) = arg.split_once('=') else {
            return Err(DnncError::Usage(format!(
                "--conv-algo-for {arg}: expected NODE=ALGO"
            )));
        };
        let algo = <ConvAlgo as ValueEnum>::from_str(algo, true).map_err(|_| {
            let names: Vec<&str> = ConvAlgo::value_variants()
                .iter()
                .map(|a| a.name())
                .collect();
            DnncError::Usage(format!(
                "--conv-algo-for {arg}: unknown algorithm `{algo}` (one of {})",
                names.join(", ")
            ))
        })?;
        let node = node.trim_start_matches('%');
        if !plan.iter().any(|c| c.node == node) {
            return Err(DnncError::Usage(format!(
                "--conv-algo-for {arg}: the model has no Conv2d named `{node}`"
            )));
        }
        opts.conv_algo_for.insert(node.to_string(), algo);
    }
    for c in conv_plan(g, &opts) {
        if let (Some(r), Some(why)) = (c.requested, &c.fallback) {
            notes(&format!(
                "note: conv %{}: {} does not apply ({why}); using {}",
                c.node,
                r.name(),
                c.algo.name()
            ));
        }
    }
    Ok(opts)
}

/// Loads a safetensors file and binds its tensors to parameters by name.
pub fn bind_weights_file(
    g: &mut Graph,
    path: &Path,
    notes: &mut dyn FnMut(&str),
) -> Result<(), DnncError> {
    let tensors = read_safetensors(path)?;
    let unused = g.bind_weights(tensors)?;
    if !unused.is_empty() {
        notes(&format!(
            "note: {} tensor(s) in `{}` match no parameter and were ignored: {}",
            unused.len(),
            path.display(),
            unused.join(", ")
        ));
    }
    Ok(())
}

/// Resolves `--input` arguments to named tensors. With none given, every
/// graph input gets seeded random normal data (seed 0) so a model can be
/// smoke-run without data files.
pub fn gather_inputs(
    g: &Graph,
    args: &[String],
    notes: &mut dyn FnMut(&str),
) -> Result<Vec<(String, Tensor)>, DnncError> {
    let graph_inputs: Vec<String> = g
        .inputs()
        .iter()
        .map(|&v| g.value(v).name.clone())
        .collect();
    if args.is_empty() {
        let mut feeds = vec![];
        for (i, &v) in g.inputs().iter().enumerate() {
            let val = g.value(v);
            let t = random_input(&val.ty, i as u64);
            notes(&format!(
                "note: no --input given; feeding %{} seeded random normal data {}",
                val.name, val.ty
            ));
            feeds.push((val.name.clone(), t));
        }
        return Ok(feeds);
    }
    let mut feeds: Vec<(String, Tensor)> = vec![];
    for arg in args {
        let (name, file) = match arg.split_once('=') {
            Some((n, f)) if graph_inputs.iter().any(|gi| gi == n) => (n.to_string(), f),
            Some((n, _)) if graph_inputs.len() != 1 => {
                return Err(DnncError::Usage(format!(
                    "--input {arg}: the model has no input named `{n}`; its inputs are: {}",
                    graph_inputs.join(", ")
                )))
            }
            _ if graph_inputs.len() == 1 => (graph_inputs[0].clone(), arg.as_str()),
            _ => {
                return Err(DnncError::Usage(format!(
                "--input {arg}: the model has {} inputs ({}); name them with --input NAME=FILE.npy",
                graph_inputs.len(),
                graph_inputs.join(", ")
            )))
            }
        };
        if feeds.iter().any(|(n, _)| *n == name) {
            return Err(DnncError::Usage(format!(
                "input `{name}` is given more than once"
            )));
        }
        let t = read_npy(Path::new(file))?;
        feeds.push((name, t));
    }
    Ok(feeds)
}

fn random_input(ty: &dnnc_ir::TensorType, seed: u64) -> Tensor {
    match ty.dtype {
        DType::F32 => Tensor::F32(
            dnnc_ir::Init::Normal {
                mean: 0.0,
                std: 1.0,
                seed,
            }
            .materialize(ty)
            .expect("seeded init has data"),
        ),
        DType::I64 => Tensor::I64(ndarray::ArrayD::zeros(ty.shape.clone())),
        DType::Bool => Tensor::Bool(ndarray::ArrayD::from_elem(ty.shape.clone(), false)),
    }
}

/// A file name for a value: characters that are unsafe in paths become `_`.
pub fn file_stem_for(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("_{s}")
    } else {
        s
    }
}

/// One-paragraph summary of an output tensor: type, range, mean, argmax and
/// leading values.
pub fn summarize(name: &str, t: &Tensor) -> String {
    let mut s = String::new();
    let _ = write!(s, "%{name}: {}", t.ty());
    match t {
        Tensor::F32(a) if !a.is_empty() => {
            let n = a.len() as f64;
            let mean = a.iter().map(|&x| x as f64).sum::<f64>() / n;
            let std = (a.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
            let (mut lo, mut hi, mut arg) = (f32::INFINITY, f32::NEG_INFINITY, 0);
            for (i, &x) in a.iter().enumerate() {
                lo = lo.min(x);
                if x > hi {
                    hi = x;
                    arg = i;
                }
            }
            let _ = writeln!(
                s,
                "  min {lo:.6} max {hi:.6} mean {mean:.6} std {std:.6} argmax {arg}"
            );
            let head: Vec<String> = a.iter().take(8).map(|x| format!("{x:.6}")).collect();
            let more = if a.len() > 8 { ", ..." } else { "" };
            let _ = writeln!(s, "  [{}{more}]", head.join(", "));
        }
        Tensor::I64(a) => {
            let head: Vec<String> = a.iter().take(8).map(|x| x.to_string()).collect();
            let _ = writeln!(
                s,
                "  [{}{}]",
                head.join(", "),
                if a.len() > 8 { ", ..." } else { "" }
            );
        }
        Tensor::Bool(a) => {
            let head: Vec<String> = a.iter().take(8).map(|x| x.to_string()).collect();
            let _ = writeln!(
                s,
                "  [{}{}]",
                head.join(", "),
                if a.len() > 8 { ", ..." } else { "" }
            );
        }
        _ => s.push('\n'),
    }
    s
}
