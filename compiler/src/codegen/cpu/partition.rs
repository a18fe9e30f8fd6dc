//! Partitioning by cost: how the CPU executable runs each kernel on a
//! given number of threads — as how many tasks, over which units of its
//! outermost independent loop, or its GEMMs split inside the call over
//! how many threads — and which independent kernels run concurrently.
//!
//! [`CalibratedCost`] makes those decisions from the calibrated cost
//! model (`dnnc_passes::cost`): each kernel's one-thread time predicted
//! from its Work-Depth work and the machine profile, split into the part
//! that divides over shares and the part that does not (the per-kernel
//! overhead, a conv's fitted fixed cost), plus the profile's measured
//! hand-off per extra share ([`MachineProfile::split_time`]). The runtime
//! asks it for every decision (`dnnc_runtime::cpu::CostModel`) and picks
//! the share count of least predicted time, departing from the plain
//! plan only for a predicted gain above the profile's median error; its
//! own Work-Depth rule remains for executables built without a model.
//!
//! [`report`] is the `partition` stage of `dnnc ir`: the decisions read
//! back from the compiled [`Executable`], so the dump shows exactly what
//! a run does.

use dnnc_ir::Graph;
use dnnc_passes::cost::MachineProfile;
use dnnc_runtime::cpu::{CostModel, Executable, Step};
use std::collections::HashMap;
use std::fmt::Write;

/// One kernel's one-thread prediction, split for [`CalibratedCost`]
/// (`tune::StepCosts::predict_parts`).
#[derive(Clone, Copy, Debug)]
struct StepEstimate {
    /// Seconds that do not divide over shares (the call, and for a GEMM
    /// kernel the work outside its splittable GEMMs).
    serial: f64,
    /// Seconds that do.
    parallel: f64,
    /// Bytes of activations the kernel reads and writes (every argument
    /// that is not a weight).
    bytes: f64,
    /// Units a kernel split divides (the largest extent of its phases; 1
    /// for a kernel that cannot split); 0 for a kernel whose GEMMs split
    /// inside the call, evenly.
    extent: usize,
}

/// The calibrated cost model as the runtime's partition oracle: per
/// kernel, its predicted time as `q` shares (module docs).
#[derive(Clone, Debug)]
pub struct CalibratedCost {
    steps: Vec<StepEstimate>,
    profile: MachineProfile,
}

impl CalibratedCost {
    /// The model for `exe`'s steps (compiled from `g`) on `profile`.
    pub fn new(g: &Graph, exe: &Executable, profile: &MachineProfile) -> Self {
        use dnnc_runtime::cpu::BufferKind;
        let costs = crate::tune::StepCosts::of(g);
        let steps = exe
            .steps()
            .iter()
            .map(|s| {
                let (fixed, body, _) = costs.predict_parts(s, profile);
                let bytes = s
                    .args
                    .iter()
                    .map(|&b| &exe.buffers()[b])
                    .filter(|b| !matches!(b.kind, BufferKind::Weight(_)))
                    .map(|b| b.bytes as f64)
                    .sum();
                if s.split_work > 0 {
                    let f = s.split_work.min(s.work) as f64 / s.work.max(1) as f64;
                    StepEstimate {
                        serial: fixed + body * (1.0 - f),
                        parallel: body * f,
                        bytes,
                        extent: 0,
                    }
                } else {
                    let extent = s.largest_extent();
                    StepEstimate {
                        serial: fixed,
                        parallel: body,
                        bytes,
                        extent: extent.max(1),
                    }
                }
            })
            .collect();
        CalibratedCost {
            steps,
            profile: profile.clone(),
        }
    }
}

impl CalibratedCost {
    /// Predicted seconds of step `j` as `q` shares (its tasks, or its
    /// GEMMs' threads): what `dnnc analyze --measure` prints next to the
    /// measured time.
    pub fn seconds(&self, j: usize, q: usize) -> f64 {
        self.steps.get(j).map_or(0.0, |e| {
            self.profile.split_time(e.serial, e.parallel, q, e.extent)
        })
    }
}

impl CostModel for CalibratedCost {
    fn source(&self) -> String {
        format!(
            "the calibrated cost model (profile: {})",
            self.profile.machine
        )
    }

    fn unit(&self) -> &'static str {
        "µs"
    }

    /// Microseconds of step `j` as `q` shares
    /// ([`MachineProfile::split_time`]).
    fn time(&self, j: usize, _s: &Step, q: usize) -> f64 {
        self.steps.get(j).map_or(0.0, |e| {
            1e6 * self.profile.split_time(e.serial, e.parallel, q, e.extent)
        })
    }

    fn handoff(&self) -> f64 {
        self.profile.wave_handoff * 1e6
    }

    fn margin(&self) -> f64 {
        self.profile.error
    }

    /// [`CalibratedCost::time`] plus moving half the kernel's activations
    /// between cores at the profile's bandwidth: the kernels around a
    /// concurrent wave split their data over every core, and a kernel of
    /// the wave reads and writes all of its own on one.
    fn wave_time(&self, j: usize, s: &Step, q: usize) -> f64 {
        let moved = self
            .steps
            .get(j)
            .map_or(0.0, |e| e.bytes / 2.0 / self.profile.bandwidth);
        self.time(j, s, q) + moved * 1e6
    }
}

/// The partition line of step `j` of `exe`, given the wave it is in.
fn describe(exe: &Executable, j: usize, wave: Option<(usize, usize)>) -> String {
    let s = &exe.steps()[j];
    let tasks = exe.step_tasks().get(j).copied().unwrap_or(1);
    let unit = |i: usize| s.split_units.get(i).map_or("units", String::as_str);
    if let Some((w, k)) = wave {
        let gemm = if s.split_work > 0 {
            ", its GEMMs on the threads the wave gives it"
        } else {
            ""
        };
        return format!("one task, concurrently with {k} other kernel(s) of wave {w}{gemm}");
    }
    if s.split_work > 0 {
        let q = exe.step_gemm_threads().get(j).copied().unwrap_or(1);
        if q <= 1 {
            return format!(
                "one thread: its GEMMs do not split ({} of its {} Work-Depth units are GEMM)",
                s.split_work, s.work
            );
        }
        return format!(
            "its GEMMs split inside the call, up to {q} slices (along the larger of the output's rows and columns; {} of its {} Work-Depth units are GEMM)",
            s.split_work,
            s.work
        );
    }
    if s.phase_splits.is_empty() {
        return match (tasks, s.split) {
            (t, e) if t > 1 => format!("{t} tasks over its {e} {}", unit(0)),
            (_, e) if e > 1 => {
                let model = exe.cost_model();
                let q = exe.threads().min(e);
                format!(
                    "one task ({e} {} to share; estimated {:.1} {unit} whole, {:.1} as {q} tasks)",
                    unit(0),
                    model.time(j, s, 1),
                    model.time(j, s, q),
                    unit = model.unit(),
                )
            }
            _ => "one task (the kernel does not split)".to_string(),
        };
    }
    let phase = |t: usize, e: usize, u: &str| {
        if e <= 1 {
            u.to_string()
        } else {
            format!("{} task(s) over its {e} {u}", t.min(e))
        }
    };
    let mut phases = vec![phase(tasks, s.split, unit(0))];
    for (i, &e) in s.phase_splits.iter().enumerate() {
        phases.push(phase(tasks, e, unit(i + 1)));
    }
    format!("phases: {}", phases.join("; "))
}

/// How value `name` is stored when its buffer holds padded planes (the
/// CPU backend's `planes`): its plane stride against `H·W`.
fn padded_planes(g: &Graph, exe: &Executable, name: &str) -> Option<String> {
    let ty = &g.value(g.value_by_name(name)?).ty;
    let [n, c, h, w] = ty.shape[..] else {
        return None;
    };
    let buf = exe.buffers().iter().find(|b| b.name == name)?;
    let stride = buf.bytes / 4 / (n * c).max(1);
    (buf.bytes != ty.size_bytes()).then(|| {
        format!(
            "stored with each {h}x{w} plane padded to {stride} floats, so every row of its GEMMs starts on a cache line"
        )
    })
}

/// The fused IR of `g` (as `dnnc ir --after fusion` prints it), each
/// kernel followed by a `#   partition:` line for `exe` (compiled from
/// `g`, set to its thread count) with the cost model's one-thread
/// prediction for it on `profile`'s machine, then a line per wave of
/// independent kernels with the runtime's estimates. The dump still
/// parses: every added line is a comment.
pub fn report(g: &Graph, exe: &Executable, profile: &dnnc_passes::cost::MachineProfile) -> String {
    let costs = crate::tune::StepCosts::of(g);
    let kg = dnnc_passes::fusion::fuse(g);
    let fused = dnnc_passes::print_kernels(g, &kg);
    let by_name: HashMap<&str, usize> = exe
        .steps()
        .iter()
        .enumerate()
        .map(|(j, s)| (s.name.as_str(), j))
        .collect();
    let mut wave_of: HashMap<usize, (usize, usize)> = HashMap::new();
    for (w, wave) in exe.waves().iter().enumerate() {
        if wave.concurrent {
            for &j in &wave.steps {
                wave_of.insert(j, (w, wave.steps.len() - 1));
            }
        }
    }
    let mut out = String::new();
    let model = exe.cost_model();
    let _ = writeln!(
        out,
        "# partition for {} thread(s): per kernel its tasks or GEMM threads, per wave whether its kernels run concurrently, decided by {} (estimates in {})",
        exe.threads(),
        model.source(),
        model.unit()
    );
    let mut shown = vec![false; exe.steps().len()];
    for line in fused.lines() {
        out.push_str(line);
        out.push('\n');
        let Some(rest) = line.trim_start().strip_prefix("# kernel ") else {
            continue;
        };
        let name = rest.split(" [").next().unwrap_or(rest);
        let text = match by_name.get(name) {
            Some(&j) => {
                shown[j] = true;
                let (t, _) = costs.predict(&exe.steps()[j], profile);
                format!(
                    "{}; predicted {:.3} ms on one thread",
                    describe(exe, j, wave_of.get(&j).copied()),
                    t * 1e3
                )
            }
            // Absorbed into another kernel (a prologue, an expansion, a
            // depthwise conv with its projection, a conv with its pool):
            // that kernel's step lists this one's nodes.
            None => match exe
                .steps()
                .iter()
                .find(|s| s.nodes.iter().any(|n| n == name))
            {
                Some(s) => format!(
                    "no code of its own: computed inside kernel {} [{}]",
                    s.name, s.op
                ),
                None => {
                    "no code of its own: a view, or built in place by its producers".to_string()
                }
            },
        };
        let _ = writeln!(out, "  #   partition: {text}");
        if let Some(line) = padded_planes(g, exe, name) {
            let _ = writeln!(out, "  #   planes: {line}");
        }
    }
    for (j, s) in exe.steps().iter().enumerate() {
        if !shown[j] {
            let _ = writeln!(
                out,
                "# step {} [{}]: {}",
                s.name,
                s.op,
                describe(exe, j, wave_of.get(&j).copied())
            );
        }
    }
    for (w, wave) in exe.waves().iter().enumerate() {
        if wave.steps.len() < 2 {
            continue;
        }
        let names: Vec<&str> = wave
            .steps
            .iter()
            .map(|&j| exe.steps()[j].name.as_str())
            .collect();
        let _ = writeln!(
            out,
            "# wave {w}: {} independent kernels {} (estimates: one after another {:.1}, concurrently {:.1}): {}",
            wave.steps.len(),
            if wave.concurrent {
                format!(
                    "run concurrently, {} thread(s) each",
                    wave.threads_per_step
                )
            } else {
                "run one after another".to_string()
            },
            wave.est_sequential,
            wave.est_concurrent,
            names.join(", ")
        );
    }
    out
}
