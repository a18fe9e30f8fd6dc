//! Memory planning and multi-threaded execution of the CPU backend:
//! in-place reuse still matches the interpreter, 2 threads give bitwise the
//! same results as 1 (GEMMs are split by output slices; independent
//! kernels run concurrently in waves), buffers of a concurrent wave never
//! share memory, and one executable runs from several threads at once.

mod cpu_common;

use cpu_common::{bits, check, check_with, parse, rand_f32, shared_models};
use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};
use dnnc_ir::{Graph, Tensor};
use dnnc_runtime::cpu::{Concurrency, Executable};
use std::path::PathBuf;

#[test]
fn elementwise_kernel_runs_in_place_and_matches() {
    // %c has two users that do not meet in one elementwise chain (one is
    // a pool), so the conv stands alone; the pool reads it, then the
    // Sigmoid+Mul chain reads it for the last time and may overwrite it.
    let g = parse(
        "  input %x: f32[1,8,16,16]
  param %w: f32[8,8,3,3] = he(seed=1)
  %c = Conv2d(%x, %w) {pads=[1,1,1,1]}
  %g = GlobalAveragePool(%c)
  %a = Sigmoid(%c)
  %y = Mul(%a, %g)
  output %y",
    );
    let x = vec![("x".to_string(), rand_f32(&[1, 8, 16, 16], 7, -2.0, 2.0))];
    check(&g, &x);
    let exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    let m = exe.memory();
    assert!(m.in_place >= 1, "{m:?}");
    assert!(m.planned < m.naive, "{m:?}");
    assert!(m.planned >= m.lower_bound || m.in_place > 0, "{m:?}");
}

#[test]
fn a_model_where_nothing_splits_runs_on_the_callers_thread() {
    let small = parse(
        "  input %x: f32[1,3,12,12]
  param %w: f32[4,3,3,3] = he(seed=1)
  %c = Conv2d(%x, %w)
  %y = Relu(%c)
  output %y",
    );
    let big = parse(
        "  input %x: f32[1,64,56,56]
  param %w: f32[64,64,3,3] = he(seed=1)
  %c = Conv2d(%x, %w) {pads=[1,1,1,1]}
  %y = Relu(%c)
  output %y",
    );
    for (g, shape, caller) in [(small, [1, 3, 12, 12], true), (big, [1, 64, 56, 56], false)] {
        let x = vec![("x".to_string(), rand_f32(&shape, 3, -1.0, 1.0))];
        let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
        let one = exe.run(&x).unwrap();
        exe.set_threads(2).unwrap();
        assert_eq!(exe.runs_on_caller(), caller, "{shape:?}");
        assert_eq!(bits(&one), bits(&exe.run(&x).unwrap()));
    }
}

#[test]
fn two_threads_are_bitwise_identical_to_one() {
    // Large enough that the GEMMs are split (64 x 3136 x 576 MACs).
    let g = parse(
        "  input %x: f32[1,64,56,56]
  param %w: f32[64,64,3,3] = he(seed=1)
  param %b: f32[64] = zeros
  param %w2: f32[96,64,1,1] = he(seed=2)
  %c = Conv2d(%x, %w, %b) {pads=[1,1,1,1]}
  %r = Relu(%c)
  %p = Conv2d(%r, %w2)
  output %p",
    );
    let x = vec![("x".to_string(), rand_f32(&[1, 64, 56, 56], 3, -1.0, 1.0))];
    // The 3x3 conv defaults to Winograd F(4x4): atol 1e-4
    // (docs/cpu-backend.md, "Convolution algorithms", for its measured
    // error).
    check_with(&g, &x, 1e-4, 1e-4, &CpuOptions::default());
    let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    let one = exe.run(&x).unwrap();
    exe.set_threads(2).unwrap();
    assert_eq!(exe.threads(), 2);
    let two = exe.run(&x).unwrap();
    assert_eq!(bits(&one), bits(&two));
    assert!(exe.set_threads(0).is_err());
}

/// The zoo models with 2 threads: bitwise equal to 1 thread, and the
/// planned arena is well below one buffer per value.
#[test]
#[ignore = "release-mode test on real models (CI runs it with --include-ignored)"]
fn zoo_models_threads_and_memory() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/models");
    let Ok(entries) = std::fs::read_dir(&root) else {
        println!("SKIPPED: {} not found", root.display());
        return;
    };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    dirs.sort();
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let Ok(g) = dnnc_compiler::onnx::import_onnx_file(dir.join("model.onnx")) else {
            continue;
        };
        let x = dnnc_ir::tensor::read_npy(&dir.join("input.npy")).unwrap();
        let ins = vec![(g.value(g.inputs()[0]).name.clone(), x)];
        let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
        let one = exe.run(&ins).unwrap();
        exe.set_threads(2).unwrap();
        let two = exe.run(&ins).unwrap();
        assert_eq!(bits(&one), bits(&two), "{name}");
        let m = exe.memory();
        println!(
            "{name}: activations planned {} B, naive {} B, bound {} B, {} in place",
            m.planned, m.naive, m.lower_bound, m.in_place
        );
        assert!(m.planned <= m.naive);
    }
}

/// Every pair of distinct buffers touched by one concurrent wave, one of
/// them written, lies in disjoint arena bytes (two steps may read
/// overlapping bytes: a view of a slice and the whole it is cut from);
/// returns how many concurrent waves were checked.
fn assert_concurrent_waves_disjoint(exe: &Executable) -> usize {
    let mut checked = 0;
    for w in exe.waves().iter().filter(|w| w.concurrent) {
        checked += 1;
        let mut ranges: Vec<(usize, std::ops::Range<usize>, bool)> = Vec::new();
        for &j in &w.steps {
            let step = &exe.steps()[j];
            for (a, &b) in step.args.iter().enumerate() {
                if let Some(r) = exe.arena_range(b) {
                    // No declared writes: every argument may be written.
                    let written = step.writes.is_empty() || step.writes.contains(&a);
                    ranges.push((j, r, written));
                }
            }
        }
        for (i, (sj, r, rw)) in ranges.iter().enumerate() {
            for (tj, t, tw) in &ranges[..i] {
                // Buffers of the same step may alias (a view of its input);
                // buffers of different steps must not share a byte that
                // one of them writes.
                if sj != tj && r != t && (*rw || *tw) {
                    assert!(
                        r.end <= t.start || t.end <= r.start,
                        "steps {sj} and {tj} of a concurrent wave overlap: {r:?} {t:?}"
                    );
                }
            }
        }
    }
    checked
}

fn inception_block() -> Graph {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/inception_block.dnn");
    let src = std::fs::read_to_string(&path).unwrap();
    dnnc_ir::text::parse(&src, "inception_block.dnn").unwrap_or_else(|e| panic!("{e:?}"))
}

#[test]
fn inception_branches_run_concurrently_and_bitwise_identical() {
    let g = inception_block();
    let x = vec![(
        "input".to_string(),
        rand_f32(&[1, 192, 28, 28], 11, -1.0, 1.0),
    )];
    check_with(&g, &x, 1e-4, 1e-4, &CpuOptions::default());
    let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    let one = exe.run(&x).unwrap();
    let seq_mem = exe.memory();
    exe.set_threads(2).unwrap();
    // The four branch heads read only the input: one wave of four.
    let widest = exe.waves().iter().map(|w| w.steps.len()).max().unwrap();
    assert!(widest >= 4, "{:?}", exe.waves());
    for policy in [Concurrency::Always, Concurrency::Auto, Concurrency::Never] {
        exe.set_concurrency(policy);
        match policy {
            Concurrency::Always => assert!(exe.has_concurrency()),
            Concurrency::Never => assert!(!exe.has_concurrency()),
            Concurrency::Auto => {}
        }
        let two = exe.run(&x).unwrap();
        assert_eq!(bits(&one), bits(&two), "{policy:?}");
        // The same with sleeping workers woken by rayon instead of hot
        // spinning ones (the default).
        assert!(exe.spinning());
        exe.set_spinning(false).unwrap();
        let woken = exe.run(&x).unwrap();
        exe.set_spinning(true).unwrap();
        assert_eq!(bits(&one), bits(&woken), "{policy:?} without spinning");
        let m = exe.memory();
        assert!(m.planned >= m.lower_bound, "{m:?}");
    }
    exe.set_concurrency(Concurrency::Always);
    assert!(assert_concurrent_waves_disjoint(&exe) >= 2);
    // Concurrent waves keep more buffers live at once, never fewer.
    assert!(exe.memory().lower_bound >= seq_mem.lower_bound);
    let (r, times) = exe.run_profiled(&x).unwrap();
    assert_eq!(bits(&one), bits(&r));
    assert_eq!(times.len(), exe.num_steps());
}

#[test]
fn one_executable_runs_from_several_threads_at_once() {
    let g = inception_block();
    let xs: Vec<Vec<(String, Tensor)>> = (0..3)
        .map(|i| {
            vec![(
                "input".to_string(),
                rand_f32(&[1, 192, 28, 28], 20 + i, -1.0, 1.0),
            )]
        })
        .collect();
    let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    let want: Vec<Vec<u32>> = xs.iter().map(|x| bits(&exe.run(x).unwrap())).collect();
    exe.set_threads(2).unwrap();
    exe.set_concurrency(Concurrency::Always);
    // One run at a time owns the spinning workers (on by default); the
    // others fall back to rayon.
    let exe = &exe;
    std::thread::scope(|s| {
        for (x, w) in xs.iter().zip(&want) {
            s.spawn(move || {
                for _ in 0..3 {
                    assert_eq!(&bits(&exe.run(x).unwrap()), w);
                }
            });
        }
    });
}

/// GoogLeNet, SqueezeNet and ShuffleNet with every wave of independent
/// kernels run concurrently (and with the W-D rule): bitwise equal to one
/// thread, with disjoint memory inside each concurrent wave.
#[test]
#[ignore = "release-mode test on real models (CI runs it with --include-ignored)"]
fn zoo_models_concurrent_waves_bitwise_identical() {
    let Some(dirs) = shared_models() else {
        return;
    };
    let wanted = ["googlenet", "squeezenet1_1", "shufflenet_v2_x1_0"];
    let mut seen = 0;
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        if !wanted.contains(&name.as_str()) {
            continue;
        }
        seen += 1;
        let g = dnnc_compiler::onnx::import_onnx_file(dir.join("model.onnx")).unwrap();
        let x = dnnc_ir::tensor::read_npy(&dir.join("input.npy")).unwrap();
        let ins = vec![(g.value(g.inputs()[0]).name.clone(), x)];
        let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
        let one = exe.run(&ins).unwrap();
        exe.set_threads(2).unwrap();
        for policy in [Concurrency::Always, Concurrency::Auto] {
            exe.set_concurrency(policy);
            let two = exe.run(&ins).unwrap();
            assert_eq!(bits(&one), bits(&two), "{name} {policy:?}");
        }
        exe.set_concurrency(Concurrency::Always);
        assert!(exe.has_concurrency(), "{name}");
        let waves = assert_concurrent_waves_disjoint(&exe);
        println!("{name}: {waves} concurrent waves, {:?}", exe.memory());
    }
    assert_eq!(seen, wanted.len(), "models missing");
}

/// The calibrated cost model decides the partition (the default), and
/// its profile's figures move the decisions: hand-offs priced at a second
/// split nothing and run no wave concurrently; free splits split every
/// kernel that can; dear splits but free wave hand-offs and no error
/// margin run the inception heads side by side. Every plan gives bitwise
/// the one-thread result.
#[test]
fn the_calibrated_model_decides_the_partition_and_results_do_not_change() {
    use dnnc_compiler::codegen::cpu::PartitionModel;
    use dnnc_passes::cost::MachineProfile;
    let g = inception_block();
    let x = vec![(
        "input".to_string(),
        rand_f32(&[1, 192, 28, 28], 11, -1.0, 1.0),
    )];
    // The interpreter is the oracle for the one-thread result every plan
    // below must reproduce bit for bit.
    check_with(&g, &x, 1e-4, 1e-4, &CpuOptions::default());
    let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    let one = exe.run(&x).unwrap();
    exe.set_threads(2).unwrap();
    assert!(
        exe.cost_model().source().contains("calibrated cost model"),
        "{}",
        exe.cost_model().source()
    );
    assert_eq!(bits(&one), bits(&exe.run(&x).unwrap()));
    let with = |handoff: f64, wave_handoff: f64, error: f64| {
        let p = MachineProfile {
            handoff,
            wave_handoff,
            error,
            ..Default::default()
        };
        let opts = CpuOptions {
            partition: PartitionModel::Calibrated(Some(p)),
            ..Default::default()
        };
        let mut exe = compile_cpu(&g, &opts).unwrap();
        exe.set_threads(2).unwrap();
        exe
    };
    let dear = with(1.0, 1.0, 0.15);
    assert!(
        dear.step_tasks().iter().all(|&t| t == 1),
        "{:?}",
        dear.step_tasks()
    );
    let gemm_threads = |e: &Executable| -> Vec<usize> {
        e.steps()
            .iter()
            .zip(e.step_gemm_threads())
            .filter(|(s, _)| s.split_work > 0)
            .map(|(_, &q)| q)
            .collect()
    };
    assert!(!gemm_threads(&dear).is_empty());
    assert!(gemm_threads(&dear).iter().all(|&q| q == 1));
    assert!(!dear.has_concurrency());
    assert_eq!(bits(&one), bits(&dear.run(&x).unwrap()));
    let apart = with(1.0, 0.0, 0.0);
    assert!(apart.has_concurrency(), "{:?}", apart.waves());
    assert_eq!(bits(&one), bits(&apart.run(&x).unwrap()));
    let free_seq = with(0.0, 1.0, 0.15);
    assert!(!free_seq.has_concurrency());
    assert!(gemm_threads(&free_seq).iter().all(|&q| q == 2));
    assert!(free_seq.step_tasks().contains(&2));
    assert_eq!(bits(&one), bits(&free_seq.run(&x).unwrap()));
    // With the runtime's own rule the run is the same too.
    let opts = CpuOptions {
        partition: PartitionModel::RuntimeRule,
        ..Default::default()
    };
    let mut rule = compile_cpu(&g, &opts).unwrap();
    rule.set_threads(2).unwrap();
    assert!(rule.cost_model().source().contains("Work-Depth rule"));
    assert_eq!(bits(&one), bits(&rule.run(&x).unwrap()));
    // Without spinning workers the rule decides whatever was given: the
    // calibrated hand-offs are those of hot workers.
    let mut sleepy = with(0.0, 0.0, 0.0);
    sleepy.set_spinning(false).unwrap();
    assert!(sleepy.cost_model().source().contains("Work-Depth rule"));
}
