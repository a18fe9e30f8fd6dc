//! `dnnc tune` and `dnnc calibrate`: every applicable convolution
//! algorithm measured on every Conv2d of a model (the oracle the cost
//! model is judged by), the cost model's prediction next to each
//! measurement, and a fit of the model's rates to the measurements.
//!
//! Each algorithm is measured in its model: the whole model is compiled
//! with that algorithm forced on every other conv it applies to (then on
//! the others), the rest at their default, and profiled, so each conv
//! kernel runs with its fused epilogue and the cache state its default
//! neighbours leave, as in a real run.
//!
//! Each algorithm's builds are measured against the default build in the
//! same stretch of time: their runs alternate with its runs, a kernel's
//! figure is its median ratio to the same conv's default kernel in the
//! neighbouring run, times that default kernel's median over every run.
//! A machine whose speed swings for seconds at a time (the shared VMs
//! this project is measured on: 1.5x for the few seconds one algorithm's
//! builds ran) then moves all of an algorithm's figures together with the
//! reference, not against the other algorithms.

use crate::codegen::cpu::{compile_cpu, conv_plan, ConvAlgo, CpuOptions};
use crate::error::DnncError;
use clap::ValueEnum;
use dnnc_ir::{Graph, Op, Tensor};
use dnnc_passes::cost::MachineProfile;
use dnnc_passes::wd::conv::ConvShape;
use std::collections::BTreeMap;

/// One Conv2d's measurements.
#[derive(Clone, Debug)]
pub struct LayerTune {
    /// The conv's result name (the key of `--conv-algo-for`).
    pub node: String,
    /// Its geometry.
    pub shape: ConvShape,
    /// The algorithm the default heuristic gives it.
    pub heuristic: ConvAlgo,
    /// Median kernel seconds (fused epilogue included), by algorithm.
    pub measured: BTreeMap<ConvAlgo, f64>,
    /// The algorithms the optimiser may give it
    /// ([`dnnc_passes::ConvGeom::offers`]).
    pub offered: Vec<ConvAlgo>,
}

impl LayerTune {
    /// The fastest measured algorithm.
    pub fn best(&self) -> Option<(ConvAlgo, f64)> {
        self.measured
            .iter()
            .map(|(&a, &t)| (a, t))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The algorithm the optimiser gives this conv
    /// ([`dnnc_passes::egraph::algos::optimiser_choice`]: the heuristic's
    /// unless the model predicts another measured one clearly faster).
    pub fn optimiser_pick(&self, profile: &MachineProfile) -> ConvAlgo {
        let names: Vec<&str> = self
            .measured
            .keys()
            .filter(|a| self.offered.contains(a))
            .map(|a| a.name())
            .collect();
        let pick = dnnc_passes::egraph::algos::optimiser_choice(
            profile,
            &self.shape,
            self.heuristic.name(),
            names,
        );
        self.measured
            .keys()
            .copied()
            .find(|a| a.name() == pick)
            .unwrap_or(self.heuristic)
    }

    /// The algorithm `profile` predicts fastest among the measured ones.
    pub fn predicted_best(&self, profile: &MachineProfile) -> Option<ConvAlgo> {
        self.measured
            .keys()
            .filter_map(|&a| profile.predict_conv(a.name(), &self.shape).map(|p| (a, p)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(a, _)| a)
    }
}

/// Every conv of `g` with every applicable algorithm measured on
/// `threads` threads: each kernel's median ratio, over `runs` runs, to
/// the default build's kernel for the same conv in the run after it,
/// times that kernel's median (module docs).
pub fn measure(
    g: &Graph,
    feeds: &[(String, Tensor)],
    threads: usize,
    runs: usize,
) -> Result<Vec<LayerTune>, DnncError> {
    // The default build, except that each conv is a step of its own (a
    // fused expansion would time two convs as one).
    let default_opts = CpuOptions {
        unfused_blocks: true,
        ..Default::default()
    };
    let default_plan = conv_plan(g, &default_opts);
    let mut layers: Vec<LayerTune> = Vec::new();
    for c in &default_plan {
        let id = g.value_by_name(&c.node).map(|v| g.value(v).producer);
        let Some(id) = id else { continue };
        let node = g.node(id);
        let Op::Conv2d(p) = &node.op else { continue };
        let ty = |v: dnnc_ir::ValueId| &g.value(v).ty;
        let shape = ConvShape::from_types(
            p,
            ty(node.inputs[0]),
            ty(node.inputs[1]),
            ty(node.outputs[0]),
        );
        let offered = match dnnc_passes::ConvGeom::of_node(g, id) {
            Ok(geo) => ConvAlgo::value_variants()
                .iter()
                .copied()
                .filter(|a| geo.offers(a.to_ir()))
                .collect(),
            Err(_) => Vec::new(),
        };
        layers.push(LayerTune {
            node: c.node.clone(),
            shape,
            heuristic: c.algo,
            measured: BTreeMap::new(),
            offered,
        });
    }
    // The default build: every algorithm's runs alternate with its runs.
    let mut reference = Profiling::new(g, &default_opts, feeds, threads)?;
    // The step computing `node` in `exe`.
    let step_of = |exe: &dnnc_runtime::cpu::Executable, node: &str| {
        exe.steps()
            .iter()
            .position(|s| s.nodes.iter().any(|n| n == node))
    };
    // (layer, algorithm) -> ratios to the layer's default kernel, per run.
    let mut ratios: BTreeMap<(usize, ConvAlgo), Vec<f64>> = BTreeMap::new();
    for &algo in ConvAlgo::value_variants() {
        // The convs `algo` applies to, in plan order.
        let forced = CpuOptions {
            conv_algo: Some(algo),
            ..Default::default()
        };
        let fits: Vec<String> = conv_plan(g, &forced)
            .into_iter()
            .filter(|c| c.algo == algo && c.fallback.is_none())
            .map(|c| c.node)
            .collect();
        // Every other one of them at a time, the rest at their default
        // algorithm, so a measured kernel's neighbours are the ones it has
        // in the default build (forcing the direct loop on every conv
        // left the depthwise kernels after them 10-30% faster, their
        // inputs still in cache from the slow conv before).
        for parity in 0..2 {
            let honoured: Vec<&str> = fits
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 2 == parity)
                .map(|(_, n)| n.as_str())
                .collect();
            if honoured.is_empty() {
                continue;
            }
            let opts = CpuOptions {
                conv_algo_for: honoured.iter().map(|n| (n.to_string(), algo)).collect(),
                ..Default::default()
            };
            let mut build = Profiling::new(g, &opts, feeds, threads)?;
            // Each measured layer's kernel in this build and in the
            // reference.
            let pairs: Vec<(usize, usize, usize)> = layers
                .iter()
                .enumerate()
                .filter(|(_, l)| honoured.contains(&l.node.as_str()))
                .filter_map(|(i, l)| {
                    let mine = step_of(&build.exe, &l.node)?;
                    Some((i, mine, step_of(&reference.exe, &l.node)?))
                })
                .collect();
            for _ in 0..runs.max(1) {
                let mine = build.run(feeds)?;
                let theirs = reference.run(feeds)?;
                for &(i, m, r) in &pairs {
                    if theirs[r] > 0.0 {
                        ratios
                            .entry((i, algo))
                            .or_default()
                            .push(mine[m] / theirs[r]);
                    }
                }
            }
        }
    }
    let ref_medians = reference.medians();
    for ((i, algo), r) in ratios {
        let Some(s) = step_of(&reference.exe, &layers[i].node) else {
            continue;
        };
        layers[i].measured.insert(algo, median(r) * ref_medians[s]);
    }
    Ok(layers)
}

/// How well a profile predicts `layers`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quality {
    /// Layers with measurements.
    pub layers: usize,
    /// Layers whose predicted-fastest algorithm measures within 10% of
    /// the fastest.
    pub within_10: usize,
    /// Layers whose heuristic algorithm (the default build's) measures
    /// within 10% of the fastest, for comparison.
    pub heuristic_within_10: usize,
    /// Layers whose optimiser choice ([`LayerTune::optimiser_pick`], what
    /// `--optimize` builds) measures within 10% of the fastest.
    pub optimiser_within_10: usize,
    /// Layers where the optimiser overrides the heuristic.
    pub overrides: usize,
    /// Median |predicted - measured| / measured of the kernel each layer
    /// runs with the model's choice.
    pub chosen_error: f64,
    /// The same over every measured (layer, algorithm), the slow
    /// alternatives included.
    pub all_error: f64,
}

impl Quality {
    /// The share of layers within 10%.
    pub fn share(&self) -> f64 {
        if self.layers == 0 {
            0.0
        } else {
            self.within_10 as f64 / self.layers as f64
        }
    }

    /// One summary line.
    pub fn line(&self) -> String {
        format!(
            "{} conv layers: the model's choice is within 10% of the measured fastest for {} ({:.0}%; the heuristic's for {}; the optimiser's, which overrides the heuristic on {}, for {}); median |predicted - measured| / measured {:.0}% for the chosen kernels, {:.0}% over every algorithm measured",
            self.layers,
            self.within_10,
            self.share() * 100.0,
            self.heuristic_within_10,
            self.overrides,
            self.optimiser_within_10,
            self.chosen_error * 100.0,
            self.all_error * 100.0
        )
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// One build being profiled a run at a time, so that the runs of several
/// builds can alternate (see the module docs).
struct Profiling {
    exe: dnnc_runtime::cpu::Executable,
    /// Seconds per step, one entry per profiled run.
    samples: Vec<Vec<f64>>,
}

impl Profiling {
    /// `g` compiled under `opts` for `threads` threads and run once to
    /// warm up.
    fn new(
        g: &Graph,
        opts: &CpuOptions,
        feeds: &[(String, Tensor)],
        threads: usize,
    ) -> Result<Self, DnncError> {
        let mut exe = compile_cpu(g, opts)?;
        exe.set_threads(threads).map_err(DnncError::Usage)?;
        exe.run(feeds)?;
        let samples = vec![Vec::new(); exe.steps().len()];
        Ok(Profiling { exe, samples })
    }

    /// One profiled run: each step's seconds, also kept for
    /// [`Profiling::medians`].
    fn run(&mut self, feeds: &[(String, Tensor)]) -> Result<Vec<f64>, DnncError> {
        let (_, times) = self.exe.run_profiled(feeds)?;
        let secs: Vec<f64> = times.iter().map(|t| t.2.as_secs_f64()).collect();
        for (s, &t) in self.samples.iter_mut().zip(&secs) {
            s.push(t);
        }
        Ok(secs)
    }

    /// Each step's median seconds over the runs so far.
    fn medians(&self) -> Vec<f64> {
        self.samples.iter().cloned().map(median).collect()
    }
}

/// `g` compiled under `opts` for `threads` threads, run once to warm up,
/// then profiled `runs` times: the executable and each step's median
/// seconds.
fn profiled(
    g: &Graph,
    opts: &CpuOptions,
    feeds: &[(String, Tensor)],
    threads: usize,
    runs: usize,
) -> Result<(dnnc_runtime::cpu::Executable, Vec<f64>), DnncError> {
    let mut p = Profiling::new(g, opts, feeds, threads)?;
    for _ in 0..runs.max(1) {
        p.run(feeds)?;
    }
    let medians = p.medians();
    Ok((p.exe, medians))
}

/// The figures the cost model is judged by, over `layers`.
pub fn quality(layers: &[LayerTune], profile: &MachineProfile) -> Quality {
    let mut within = 0usize;
    let mut heuristic = 0usize;
    let mut optimiser = 0usize;
    let mut overrides = 0usize;
    let mut counted = 0usize;
    let (mut chosen, mut all) = (Vec::new(), Vec::new());
    for l in layers {
        let (Some((_, best)), Some(pick)) = (l.best(), l.predicted_best(profile)) else {
            continue;
        };
        counted += 1;
        if l.measured[&pick] <= 1.10 * best {
            within += 1;
        }
        if l.measured
            .get(&l.heuristic)
            .is_some_and(|&t| t <= 1.10 * best)
        {
            heuristic += 1;
        }
        let o = l.optimiser_pick(profile);
        overrides += (o != l.heuristic) as usize;
        if l.measured.get(&o).is_some_and(|&t| t <= 1.10 * best) {
            optimiser += 1;
        }
        for (&a, &t) in &l.measured {
            if let Some(p) = profile.predict_conv(a.name(), &l.shape) {
                let e = (p - t).abs() / t;
                all.push(e);
                if a == pick {
                    chosen.push(e);
                }
            }
        }
    }
    Quality {
        layers: counted,
        within_10: within,
        heuristic_within_10: heuristic,
        optimiser_within_10: optimiser,
        overrides,
        chosen_error: median(chosen),
        all_error: median(all),
    }
}

/// The per-layer table: measured ms per algorithm (`*` the fastest),
/// predicted ms per algorithm, the heuristic's and the model's choices,
/// then the two summary figures.
pub fn render(layers: &[LayerTune], profile: &MachineProfile) -> String {
    let algos = ConvAlgo::value_variants();
    let mut out = String::new();
    out.push_str("layer | shape | per algorithm: measured ms / predicted ms (* fastest) | heuristic | model | model within 10% | optimiser\n");
    for l in layers {
        let s = &l.shape;
        let shape = format!(
            "{}->{} {}x{} s{} g{} {}x{}",
            s.c_in, s.c_out, s.kh, s.kw, s.strides[0], s.group, s.h, s.w
        );
        let best = l.best();
        let cells: Vec<String> = algos
            .iter()
            .filter_map(|&a| {
                let t = l.measured.get(&a)?;
                let p = profile.predict_conv(a.name(), &l.shape);
                let star = if best.is_some_and(|(b, _)| b == a) {
                    "*"
                } else {
                    ""
                };
                Some(format!(
                    "{}{} {:.3}/{}",
                    star,
                    a.name(),
                    t * 1e3,
                    p.map_or("-".into(), |p| format!("{:.3}", p * 1e3))
                ))
            })
            .collect();
        let pick = l.predicted_best(profile);
        let ok = match (pick, best) {
            (Some(p), Some((_, b))) => {
                if l.measured[&p] <= 1.10 * b {
                    "yes"
                } else {
                    "no"
                }
            }
            _ => "-",
        };
        out.push_str(&format!(
            "{} | {} | {} | {} | {} | {} | {}\n",
            l.node,
            shape,
            cells.join("  "),
            l.heuristic.name(),
            pick.map_or("-", |p| p.name()),
            ok,
            l.optimiser_pick(profile).name()
        ));
    }
    out.push('\n');
    out.push_str(&quality(layers, profile).line());
    out.push('\n');
    out
}

/// The tuning record: each conv's measured-fastest algorithm, as JSON
/// `{"node": "algo", ...}` that `--tuning` reads back.
pub fn record(layers: &[LayerTune]) -> String {
    let m: BTreeMap<&str, &str> = layers
        .iter()
        .filter_map(|l| Some((l.node.as_str(), l.best()?.0.name())))
        .collect();
    serde_json::to_string_pretty(&m).expect("a map of strings serialises") + "\n"
}

/// Reads a tuning record into per-node algorithm choices; errors name the
/// file and the entry.
pub fn read_record(
    text: &str,
    origin: &str,
) -> Result<std::collections::HashMap<String, ConvAlgo>, DnncError> {
    let m: BTreeMap<String, String> = serde_json::from_str(text)
        .map_err(|e| DnncError::Usage(format!("tuning record {origin}: {e}")))?;
    m.into_iter()
        .map(|(node, a)| {
            let algo = ConvAlgo::from_str(&a, true).map_err(|_| {
                DnncError::Usage(format!(
                    "tuning record {origin}: `{node}`: unknown algorithm `{a}`"
                ))
            })?;
            Ok((node, algo))
        })
        .collect()
}

/// The conv layers `dnnc calibrate` measures, each on a graph input of
/// its own passed through a Relu kernel just before it, so the conv reads
/// its input from cache as it does in a model, where the kernel before
/// wrote it (read straight from the caller's tensors, the 1x1 convs that
/// read their input in place measured ~25% slower than in the zoo's
/// models, and the model over-predicted those in the models by as much).
/// Shapes from the families the zoo models use: 7x7 and 3x3 stride-2
/// stems, 1x1 of several widths and reductions (16 to 960 input
/// channels, so the per-output cost separates from the rate), 3x3 stride
/// 1 and 2 from 56x56 to 7x7 and on few input channels (down to
/// GoogLeNet's small 16-channel branches, which pin the Winograd kernels'
/// fixed costs: without them the fit on the EPYC charged F(4x4) 184 us a
/// kernel and the optimiser chose F(2x2) on five such layers, all slower),
/// 5x5, depthwise;
/// small enough that every algorithm runs on all of them in well under a
/// minute.
pub const CALIBRATION_MODEL: &str = "graph calibration {
  input %a: f32[1,3,112,112]
  param %w_s7: f32[32,3,7,7] = he(seed=1)
  %s7_in = Relu(%a)
  %s7 = Conv2d(%s7_in, %w_s7) {strides=[2,2], pads=[3,3,3,3]}
  param %w_s3: f32[32,3,3,3] = he(seed=2)
  %s3_in = Relu(%a)
  %s3 = Conv2d(%s3_in, %w_s3) {strides=[2,2], pads=[1,1,1,1]}
  input %b: f32[1,16,56,56]
  param %w_b3: f32[64,16,3,3] = he(seed=3)
  %b3_in = Relu(%b)
  %b3 = Conv2d(%b3_in, %w_b3) {pads=[1,1,1,1]}
  param %w_b1: f32[64,16,1,1] = he(seed=4)
  %b1_in = Relu(%b)
  %b1 = Conv2d(%b1_in, %w_b1) {}
  param %w_b3s: f32[32,16,3,3] = he(seed=5)
  %b3s_in = Relu(%b)
  %b3s = Conv2d(%b3s_in, %w_b3s) {strides=[2,2], pads=[1,1,1,1]}
  param %w_bd: f32[16,1,3,3] = he(seed=6)
  %bd_in = Relu(%b)
  %bd = Conv2d(%bd_in, %w_bd) {pads=[1,1,1,1], group=16}
  input %g: f32[1,64,56,56]
  param %w_g3: f32[64,64,3,3] = he(seed=7)
  %g3_in = Relu(%g)
  %g3 = Conv2d(%g3_in, %w_g3) {pads=[1,1,1,1]}
  param %w_g1: f32[256,64,1,1] = he(seed=8)
  %g1_in = Relu(%g)
  %g1 = Conv2d(%g1_in, %w_g1) {}
  param %w_gd: f32[64,1,3,3] = he(seed=9)
  %gd_in = Relu(%g)
  %gd = Conv2d(%gd_in, %w_gd) {strides=[2,2], pads=[1,1,1,1], group=64}
  input %c: f32[1,64,28,28]
  param %w_c3: f32[64,64,3,3] = he(seed=10)
  %c3_in = Relu(%c)
  %c3 = Conv2d(%c3_in, %w_c3) {pads=[1,1,1,1]}
  param %w_c1: f32[128,64,1,1] = he(seed=11)
  %c1_in = Relu(%c)
  %c1 = Conv2d(%c1_in, %w_c1) {}
  param %w_c3s: f32[128,64,3,3] = he(seed=12)
  %c3s_in = Relu(%c)
  %c3s = Conv2d(%c3s_in, %w_c3s) {strides=[2,2], pads=[1,1,1,1]}
  param %w_c5: f32[32,64,5,5] = he(seed=13)
  %c5_in = Relu(%c)
  %c5 = Conv2d(%c5_in, %w_c5) {pads=[2,2,2,2]}
  param %w_cd: f32[64,1,3,3] = he(seed=14)
  %cd_in = Relu(%c)
  %cd = Conv2d(%cd_in, %w_cd) {pads=[1,1,1,1], group=64}
  param %w_cds: f32[64,1,3,3] = he(seed=15)
  %cds_in = Relu(%c)
  %cds = Conv2d(%cds_in, %w_cds) {strides=[2,2], pads=[1,1,1,1], group=64}
  input %h: f32[1,32,27,27]
  param %w_h3: f32[128,32,3,3] = he(seed=16)
  %h3_in = Relu(%h)
  %h3 = Conv2d(%h3_in, %w_h3) {pads=[1,1,1,1]}
  param %w_h1: f32[128,32,1,1] = he(seed=17)
  %h1_in = Relu(%h)
  %h1 = Conv2d(%h1_in, %w_h1) {}
  input %d: f32[1,128,14,14]
  param %w_d3: f32[128,128,3,3] = he(seed=18)
  %d3_in = Relu(%d)
  %d3 = Conv2d(%d3_in, %w_d3) {pads=[1,1,1,1]}
  param %w_d1: f32[256,128,1,1] = he(seed=19)
  %d1_in = Relu(%d)
  %d1 = Conv2d(%d1_in, %w_d1) {}
  param %w_dd: f32[128,1,3,3] = he(seed=20)
  %dd_in = Relu(%d)
  %dd = Conv2d(%dd_in, %w_dd) {pads=[1,1,1,1], group=128}
  param %w_d5: f32[64,128,5,5] = he(seed=21)
  %d5_in = Relu(%d)
  %d5 = Conv2d(%d5_in, %w_d5) {pads=[2,2,2,2]}
  input %i: f32[1,256,14,14]
  param %w_i3: f32[256,256,3,3] = he(seed=22)
  %i3_in = Relu(%i)
  %i3 = Conv2d(%i3_in, %w_i3) {pads=[1,1,1,1]}
  input %e: f32[1,48,13,13]
  param %w_e3: f32[192,48,3,3] = he(seed=23)
  %e3_in = Relu(%e)
  %e3 = Conv2d(%e3_in, %w_e3) {pads=[1,1,1,1]}
  param %w_e1: f32[48,48,1,1] = he(seed=24)
  %e1_in = Relu(%e)
  %e1 = Conv2d(%e1_in, %w_e1) {}
  input %f: f32[1,256,7,7]
  param %w_f3: f32[256,256,3,3] = he(seed=25)
  %f3_in = Relu(%f)
  %f3 = Conv2d(%f3_in, %w_f3) {pads=[1,1,1,1]}
  param %w_f1: f32[512,256,1,1] = he(seed=26)
  %f1_in = Relu(%f)
  %f1 = Conv2d(%f1_in, %w_f1) {}
  param %w_fd: f32[256,1,3,3] = he(seed=27)
  %fd_in = Relu(%f)
  %fd = Conv2d(%fd_in, %w_fd) {pads=[1,1,1,1], group=256}
  input %j: f32[1,512,7,7]
  param %w_j3: f32[512,512,3,3] = he(seed=28)
  %j3_in = Relu(%j)
  %j3 = Conv2d(%j3_in, %w_j3) {pads=[1,1,1,1]}
  input %k: f32[1,576,14,14]
  param %w_k1: f32[96,576,1,1] = he(seed=29)
  %k1_in = Relu(%k)
  %k1 = Conv2d(%k1_in, %w_k1) {}
  input %l: f32[1,960,7,7]
  param %w_l1: f32[160,960,1,1] = he(seed=30)
  %l1_in = Relu(%l)
  %l1 = Conv2d(%l1_in, %w_l1) {}
  input %m: f32[1,512,14,14]
  param %w_m1: f32[128,512,1,1] = he(seed=31)
  %m1_in = Relu(%m)
  %m1 = Conv2d(%m1_in, %w_m1) {}
  input %n: f32[1,16,28,28]
  param %w_n3: f32[32,16,3,3] = he(seed=32)
  %n3_in = Relu(%n)
  %n3 = Conv2d(%n3_in, %w_n3) {pads=[1,1,1,1]}
  input %o: f32[1,16,14,14]
  param %w_o3: f32[48,16,3,3] = he(seed=33)
  %o3_in = Relu(%o)
  %o3 = Conv2d(%o3_in, %w_o3) {pads=[1,1,1,1]}
  output %s7, %s3, %b3, %b1, %b3s, %bd, %g3, %g1, %gd, %c3, %c1, %c3s, %c5, %cd, %cds, %h3, %h1, %d3, %d1, %dd, %d5, %i3, %e3, %e1, %f3, %f1, %fd, %j3, %k1, %l1, %m1, %n3, %o3
}
";

/// The non-convolution kernels `dnnc calibrate` measures for the loop
/// rates of the kernel classes, each on graph inputs of its own so
/// nothing fuses across them: the zoo's pools (stride-2 stems, GoogLeNet's
/// stride-1 branch pool, global pools, ShuffleNet's ReduceMean), a
/// residual Add+Relu and standalone activations, and copies (channel
/// shuffles, a Concat whose parts cannot be views, a strided Slice).
pub const LOOP_CALIBRATION_MODEL: &str = "graph loops {
  input %a: f32[1,64,112,112]
  %pa = MaxPool(%a) {kernel=[3,3], strides=[2,2], pads=[1,1,1,1]}
  input %b: f32[1,96,111,111]
  %pb = MaxPool(%b) {kernel=[3,3], strides=[2,2], ceil_mode=1}
  input %c: f32[1,192,28,28]
  %pc = MaxPool(%c) {kernel=[3,3], strides=[1,1], pads=[1,1,1,1]}
  input %d: f32[1,512,7,7]
  %pd = GlobalAveragePool(%d)
  input %e: f32[1,1024,7,7]
  %pe = ReduceMean(%e) {axes=[2,3], keepdims=0}
  input %f: f32[1,64,56,56]
  input %g: f32[1,64,56,56]
  %af = Add(%f, %g)
  %rf = Relu(%af)
  input %h: f32[1,256,28,28]
  %sh = Sigmoid(%h)
  input %i: f32[1,96,112,112]
  %ci = Clip(%i) {min=0.0, max=6.0}
  input %j: f32[1,2,58,28,28]
  %tj = Transpose(%j) {perm=[0,2,1,3,4]}
  input %k: f32[1,2,116,14,14]
  %tk = Transpose(%k) {perm=[0,2,1,3,4]}
  input %l: f32[1,232,7,7]
  input %m: f32[1,232,7,7]
  %cl = Concat(%l, %m) {axis=1}
  input %n: f32[1,64,56,56]
  %sn = Slice(%n) {starts=[0], ends=[56], axes=[3], steps=[2]}
  output %pa, %pb, %pc, %pd, %pe, %rf, %sh, %ci, %tj, %tk, %cl, %sn
}
";

/// Small loop kernels (5-20 µs on one core), where the cost of a split
/// beyond dividing the work shows: [`measure_handoff`] runs each whole
/// and as two tasks. Sizes of the zoo's late layers: ShuffleNet-V2's
/// channel shuffles and ResNet's global pool on 7x7 maps, residual adds
/// and activations on 14x14 and 28x28 ones, a pool on 28x28.
pub const HANDOFF_CALIBRATION_MODEL: &str = "graph handoff {
  input %a: f32[1,2,232,7,7]
  %ta = Transpose(%a) {perm=[0,2,1,3,4]}
  input %b: f32[1,512,7,7]
  %pb = GlobalAveragePool(%b)
  input %c: f32[1,96,14,14]
  input %d: f32[1,96,14,14]
  %ac = Add(%c, %d)
  %rc = Relu(%ac)
  input %e: f32[1,128,28,28]
  %ce = Clip(%e) {min=0.0, max=6.0}
  input %f: f32[1,64,28,28]
  %pf = MaxPool(%f) {kernel=[3,3], strides=[2,2], pads=[1,1,1,1]}
  input %g: f32[1,2,116,14,14]
  %tg = Transpose(%g) {perm=[0,2,1,3,4]}
  output %ta, %pb, %rc, %ce, %pf, %tg
}
";

/// What [`calibrate`] measured: the fitted profile, the layers it was
/// fitted on, and the hand-offs when they were measured (`None` on one
/// CPU, where the profile keeps `base`'s), so a caller can say which
/// figures are this machine's.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The profile fitted on this machine.
    pub profile: MachineProfile,
    /// The calibration layers with every algorithm's measured time.
    pub layers: Vec<LayerTune>,
    /// The measured `(handoff, wave_handoff)` in seconds, when measured.
    pub handoffs: Option<(f64, f64)>,
}

/// Measures [`CALIBRATION_MODEL`] and fits `base`'s rates to it, then
/// [`LOOP_CALIBRATION_MODEL`] for the loop rates of the kernel classes
/// and [`HANDOFF_CALIBRATION_MODEL`] for the partition's hand-offs.
pub fn calibrate(
    base: &MachineProfile,
    threads: usize,
    runs: usize,
) -> Result<Calibration, DnncError> {
    let g = crate::model::load_model_str(CALIBRATION_MODEL, "calibration.dnn")?;
    let feeds = crate::cli::gather_inputs(&g, &[], &mut |_| {})?;
    let layers = measure(&g, &feeds, threads, runs)?;
    let mut p = dnnc_passes::cost::fit(base, &samples(&layers));
    p.error = quality(&layers, &p).chosen_error.clamp(0.0, 0.9);
    let g = crate::model::load_model_str(LOOP_CALIBRATION_MODEL, "loops.dnn")?;
    let feeds = crate::cli::gather_inputs(&g, &[], &mut |_| {})?;
    let (exe, medians) = profiled(&g, &CpuOptions::default(), &feeds, threads, runs)?;
    let costs = StepCosts::of(&g);
    let samples: Vec<(dnnc_ir::OpClass, u64, f64)> = exe
        .steps()
        .iter()
        .zip(&medians)
        .filter_map(|(s, &t)| {
            let (class, work) = costs.class_and_work(s)?;
            Some((class, work, t))
        })
        .collect();
    p.class_rates = dnnc_passes::cost::fit_loops(&p, &samples);
    let hg = crate::model::load_model_str(HANDOFF_CALIBRATION_MODEL, "handoff.dnn")?;
    let hfeeds = crate::cli::gather_inputs(&hg, &[], &mut |_| {})?;
    let handoffs = measure_handoff(&hg, &hfeeds, runs)?;
    if let Some((split, wave)) = handoffs {
        p.handoff = split;
        p.wave_handoff = wave;
    }
    // Measured, not assumed: the rate at which a kernel streams what its
    // caches do not hold (a batch-1 fully-connected layer's weights).
    p.bandwidth = dnnc_runtime::cpu::peak::stream_gbs_per_core() * 1e9;
    p.threads = threads;
    p.machine = machine_name();
    Ok(Calibration {
        profile: p,
        layers,
        handoffs,
    })
}

/// The hand-off cost per extra share of a split kernel
/// ([`MachineProfile::handoff`]), measured on the loop kernels of `g`
/// ([`HANDOFF_CALIBRATION_MODEL`])
/// with two threads and polling workers: each kernel that splits, run
/// whole (`t1`) and as two tasks (`t2`), costs `t2 - t1 / 2` more than a
/// perfect split; the median over the kernels. `None` on a machine with
/// one CPU, where nothing splits.
pub fn measure_handoff(
    g: &Graph,
    feeds: &[(String, Tensor)],
    runs: usize,
) -> Result<Option<(f64, f64)>, DnncError> {
    use dnnc_runtime::cpu::KernelSplit;
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return Ok(None);
    }
    let opts = CpuOptions {
        partition: crate::codegen::cpu::PartitionModel::RuntimeRule,
        ..Default::default()
    };
    let mut exe = compile_cpu(g, &opts)?;
    exe.set_threads(2).map_err(DnncError::Usage)?;
    exe.set_concurrency(dnnc_runtime::cpu::Concurrency::Never);
    let medians = |exe: &mut dnnc_runtime::cpu::Executable, split| {
        exe.set_kernel_split(split);
        exe.run(feeds)?;
        let mut samples: Vec<Vec<f64>> = Vec::new();
        for _ in 0..runs.max(1) * 3 {
            let (_, times) = exe.run_profiled(feeds)?;
            samples.resize(times.len(), Vec::new());
            for (s, t) in samples.iter_mut().zip(&times) {
                s.push(t.2.as_secs_f64());
            }
        }
        Ok::<_, DnncError>(samples.into_iter().map(median).collect::<Vec<f64>>())
    };
    let whole = medians(&mut exe, KernelSplit::Never)?;
    let split = medians(&mut exe, KernelSplit::Always)?;
    let extra: Vec<f64> = exe
        .step_tasks()
        .iter()
        .zip(whole.iter().zip(&split))
        .filter(|(&t, _)| t == 2)
        .map(|(_, (&t1, &t2))| (t2 - t1 / 2.0).max(0.0))
        .collect();
    if extra.is_empty() {
        return Ok(None);
    }
    // The same kernels as one concurrent wave, one thread each, against
    // the makespan their one-thread times allow (longest first on two
    // workers) and the run's own overhead (sequential runs' time beyond
    // their kernels): what is left is the wave's hand-offs.
    exe.set_kernel_split(KernelSplit::Never);
    let run_time = |exe: &mut dnnc_runtime::cpu::Executable, c| {
        exe.set_concurrency(c);
        exe.run(feeds)?;
        let mut t = Vec::new();
        for _ in 0..runs.max(1) * 3 {
            let t0 = std::time::Instant::now();
            exe.run(feeds)?;
            t.push(t0.elapsed().as_secs_f64());
        }
        Ok::<_, DnncError>(median(t))
    };
    use dnnc_runtime::cpu::Concurrency;
    let sequential = run_time(&mut exe, Concurrency::Never)?;
    let concurrent = run_time(&mut exe, Concurrency::Always)?;
    let overhead = (sequential - whole.iter().sum::<f64>()).max(0.0);
    let mut sorted = whole.clone();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let mut load = [0f64; 2];
    for t in sorted {
        let i = if load[0] <= load[1] { 0 } else { 1 };
        load[i] += t;
    }
    let makespan = load[0].max(load[1]);
    let k = whole.len().max(2) as f64;
    let wave = ((concurrent - overhead - makespan) / (k - 1.0)).max(0.0);
    Ok(Some((median(extra), wave)))
}

/// Every measurement of `layers` as a fitting sample `(algorithm,
/// shape, seconds)` for [`dnnc_passes::cost::fit`].
pub fn samples(layers: &[LayerTune]) -> Vec<(String, ConvShape, f64)> {
    layers
        .iter()
        .flat_map(|l| {
            l.measured
                .iter()
                .map(|(a, &t)| (a.name().to_string(), l.shape.clone(), t))
        })
        .collect()
}

/// The CPU model this process runs on, from `/proc/cpuinfo`.
fn machine_name() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!(
        "{model}, {} CPUs, measured by dnnc calibrate",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    )
}

pub use dnnc_passes::cost::LOOP_RATE;

/// The Work-Depth figures of a graph's nodes by name, to price the
/// compiled steps that fuse them ([`StepCosts::predict`]).
pub struct StepCosts {
    nodes: std::collections::HashMap<String, dnnc_passes::wd::NodeCost>,
}

impl StepCosts {
    /// The figures of every node of `g`.
    pub fn of(g: &Graph) -> Self {
        let analysis = dnnc_passes::wd::analyze(g);
        StepCosts {
            nodes: analysis
                .nodes
                .into_iter()
                .map(|n| (n.name.clone(), n))
                .collect(),
        }
    }

    /// The class of a step that is one generated loop (a reduction if it
    /// holds one, else data movement if it holds a copy, else
    /// elementwise) and its Work-Depth work; `None` for a contraction or
    /// a step without known nodes.
    pub fn class_and_work(
        &self,
        step: &dnnc_runtime::cpu::Step,
    ) -> Option<(dnnc_ir::OpClass, u64)> {
        use dnnc_ir::OpClass;
        let nodes: Vec<&dnnc_passes::wd::NodeCost> = step
            .nodes
            .iter()
            .filter_map(|n| self.nodes.get(n.as_str()))
            .collect();
        if nodes.is_empty() || nodes.iter().any(|n| n.class == OpClass::Contraction) {
            return None;
        }
        let has = |c| nodes.iter().any(|n| n.class == c);
        let class = if has(OpClass::Reduction) {
            OpClass::Reduction
        } else if has(OpClass::DataMovement) {
            OpClass::DataMovement
        } else {
            OpClass::Elementwise
        };
        Some((class, nodes.iter().map(|n| n.work).sum()))
    }

    /// One thread's predicted seconds of `step`, and whether it holds a
    /// contraction: convolutions priced by `profile` (their algorithm's
    /// rate and fixed cost), Gemm/MatMul at the im2col GEMM rate or
    /// streaming their weights at its bandwidth, whichever is slower, an
    /// epilogue fused into either at nothing, everything else at
    /// [`LOOP_RATE`] per Work-Depth unit, plus the profile's per-kernel
    /// overhead.
    pub fn predict(&self, step: &dnnc_runtime::cpu::Step, profile: &MachineProfile) -> (f64, bool) {
        let (fixed, work, contraction) = self.predict_parts(step, profile);
        (fixed + work, contraction)
    }

    /// [`StepCosts::predict`] in parts: the seconds that do not depend on
    /// the kernel's size (the profile's per-kernel overhead and each
    /// convolution's fixed cost, which a split does not divide), the
    /// seconds of its work, and whether it holds a contraction.
    pub fn predict_parts(
        &self,
        step: &dnnc_runtime::cpu::Step,
        profile: &MachineProfile,
    ) -> (f64, f64, bool) {
        let mut fixed = profile.overhead;
        let mut work = 0.0;
        let contraction = step.nodes.iter().any(|n| {
            self.nodes
                .get(n.as_str())
                .is_some_and(|nc| nc.class == dnnc_ir::OpClass::Contraction)
        });
        for n in &step.nodes {
            let Some(nc) = self.nodes.get(n.as_str()) else {
                continue;
            };
            // An epilogue fused into a contraction runs in its registers
            // as it stores: no loop of its own.
            if contraction && nc.class == dnnc_ir::OpClass::Elementwise {
                continue;
            }
            let conv = nc.conv.as_ref().and_then(|c| {
                let algo = conv_algo_in_kernel(step.algo.as_deref()?, &c.shape);
                let t = profile.predict_conv(algo, &c.shape)?;
                Some((profile.conv_fixed(algo, &c.shape), t))
            });
            match conv {
                Some((f, t)) => {
                    fixed += f;
                    work += t - f;
                }
                None if nc.class == dnnc_ir::OpClass::Contraction => {
                    // A MatMul/Gemm: its arithmetic, or streaming its
                    // weights (K·N floats: work / M, M the result's rows)
                    // when that is slower, as for an FC layer at batch 1.
                    let rows: usize = nc.shape.iter().rev().skip(1).product();
                    let weights = 4.0 * nc.work as f64 / rows.max(1) as f64;
                    let rate = profile.rates.get("im2col").copied().unwrap_or(LOOP_RATE);
                    work += (nc.work as f64 / rate).max(weights / profile.bandwidth);
                }
                None => work += nc.work as f64 / profile.loop_rate(nc.class),
            }
        }
        (fixed, work, contraction)
    }
}

/// The algorithm a conv of shape `s` runs by inside a kernel labelled
/// `algo`: a depthwise kernel's fused expansion is a pointwise conv.
pub(crate) fn conv_algo_in_kernel<'a>(algo: &'a str, s: &ConvShape) -> &'a str {
    if algo == "depthwise" && s.group == 1 && s.kh * s.kw == 1 {
        "pointwise"
    } else {
        algo
    }
}

/// One kernel's predicted and measured time.
#[derive(Clone, Debug)]
pub struct KernelTime {
    /// Kernel name.
    pub name: String,
    /// Its ops, `+`-joined.
    pub ops: String,
    /// Its conv algorithm, if it has one.
    pub algo: Option<String>,
    /// Predicted seconds.
    pub predicted: f64,
    /// Measured seconds (median).
    pub measured: f64,
}

/// Every kernel of `g` compiled with the default build on `threads`
/// threads: the cost model's prediction next to its median measured time
/// over `runs` profiled runs. Convolutions are priced by `profile`
/// (their algorithm's rate and fixed cost), Gemm/MatMul at the im2col
/// GEMM rate, an epilogue fused into either at nothing, everything else
/// at its class's loop rate; with several threads each kernel is priced
/// as the shares the partition ran it as (its tasks, or its GEMMs'
/// threads), by the same calibrated model that chose them
/// ([`crate::codegen::cpu::partition::CalibratedCost`]), on `profile`.
pub fn kernel_times(
    g: &Graph,
    feeds: &[(String, Tensor)],
    threads: usize,
    runs: usize,
    profile: &MachineProfile,
) -> Result<Vec<KernelTime>, DnncError> {
    let opts = CpuOptions {
        partition: crate::codegen::cpu::PartitionModel::Calibrated(Some(profile.clone())),
        ..Default::default()
    };
    let (exe, medians) = profiled(g, &opts, feeds, threads, runs)?;
    let model = crate::codegen::cpu::partition::CalibratedCost::new(g, &exe, profile);
    // The shares each step ran as: its tasks, or its GEMMs' threads (in
    // a concurrent wave, the wave's threads per step).
    let mut shares: Vec<usize> = exe
        .steps()
        .iter()
        .zip(exe.step_tasks().iter().zip(exe.step_gemm_threads()))
        .map(|(s, (&t, &q))| {
            if t > 1 {
                t
            } else if s.split_work > 0 {
                q
            } else {
                1
            }
        })
        .collect();
    for w in exe.waves().iter().filter(|w| w.concurrent) {
        for &j in &w.steps {
            if exe.steps()[j].split_work == 0 {
                shares[j] = 1;
            }
        }
    }
    let mut out = Vec::new();
    for (j, (step, &measured)) in exe.steps().iter().zip(&medians).enumerate() {
        out.push(KernelTime {
            name: step.name.clone(),
            ops: step.op.clone(),
            algo: step.algo.clone(),
            predicted: model.seconds(j, shares[j]),
            measured,
        });
    }
    Ok(out)
}

/// The predicted-vs-measured table of [`kernel_times`], slowest measured
/// first, and the summary: median |predicted - measured| / measured over
/// the kernels, and the sums.
pub fn render_kernel_times(k: &[KernelTime], threads: usize) -> String {
    let mut rows: Vec<&KernelTime> = k.iter().collect();
    rows.sort_by(|a, b| b.measured.total_cmp(&a.measured));
    let mut out = format!(
        "predicted vs measured kernel time, {threads} thread{}\n  {:>10} {:>10} {:>7}  kernel [ops] algo\n",
        if threads == 1 { "" } else { "s" },
        "pred ms",
        "meas ms",
        "error"
    );
    let mut errs = Vec::new();
    for r in &rows {
        let e = (r.predicted - r.measured) / r.measured.max(1e-12);
        errs.push(e.abs());
        out.push_str(&format!(
            "  {:>10.4} {:>10.4} {:>+6.0}%  {} [{}] {}\n",
            r.predicted * 1e3,
            r.measured * 1e3,
            e * 100.0,
            r.name,
            r.ops,
            r.algo.as_deref().unwrap_or("-")
        ));
    }
    let (p, m): (f64, f64) = (
        k.iter().map(|r| r.predicted).sum(),
        k.iter().map(|r| r.measured).sum(),
    );
    out.push_str(&format!(
        "{} kernels: median |predicted - measured| / measured {:.0}%; sum predicted {:.3} ms, measured {:.3} ms\n",
        k.len(),
        median(errs) * 100.0,
        p * 1e3,
        m * 1e3
    ));
    out
}
