//! The `partition` stage of `dnnc ir`: the fused IR with, per kernel, how
//! the CPU executable runs it on a given number of threads — as how many
//! tasks, over which units of its outermost independent loop, or its
//! GEMMs split inside the call — and which independent kernels run
//! concurrently. These are the decisions the runtime makes with its
//! Work-Depth rule (`dnnc_runtime::cpu` schedule docs), read back from
//! the compiled [`Executable`], so the dump shows exactly what a run
//! does.

use dnnc_ir::Graph;
use dnnc_runtime::cpu::Executable;
use std::collections::HashMap;
use std::fmt::Write;

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
        return format!(
            "its GEMMs split inside the call, up to {} slices (along the larger of the output's rows and columns; {} of its {} Work-Depth units are GEMM)",
            exe.threads(),
            s.split_work,
            s.work
        );
    }
    if s.phase_splits.is_empty() {
        return match (tasks, s.split) {
            (t, e) if t > 1 => format!("{t} tasks over its {e} {}", unit(0)),
            (_, e) if e > 1 => format!(
                "one task ({e} {} to share, too little work ({} units) to split)",
                unit(0),
                s.work
            ),
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
    let _ = writeln!(
        out,
        "# partition for {} thread(s): per kernel its tasks, per wave whether its kernels run concurrently (the runtime's Work-Depth rule)",
        exe.threads()
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
            None => "no code: a view, or built in place by its producers".to_string(),
        };
        let _ = writeln!(out, "  #   partition: {text}");
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
            "# wave {w}: {} independent kernels {} (estimates, Work-Depth units: one after another {}, concurrently {}): {}",
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
