//! `dnnc ir --passes` and `dnnc ir --after PASS` through the real binary:
//! the pass list, dumps after each pass, and exit code 2 with the valid
//! names for an unknown pass.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

fn dnnc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dnnc"))
        .args(args)
        .output()
        .expect("run dnnc")
}

/// `text` written as `m.dnn` in a fresh directory of its own (named by
/// `tag` and this process): the directory, to remove, and the model.
fn temp_model(tag: &str, text: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("dnnc-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("m.dnn");
    std::fs::write(&model, text).unwrap();
    (dir, model)
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn passes_lists_the_pipeline_in_order() {
    let lenet = example("lenet5.dnn");
    let out = stdout(&dnnc(&["ir", lenet.to_str().unwrap(), "--passes"]));
    let names: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "simplify",
            "fold-batchnorm",
            "egraph",
            "fold-weights",
            "split-order",
            "select-conv-algo",
            "fusion",
            "block-channels",
            "partition"
        ],
        "{out}"
    );
    assert!(
        out.lines().all(|l| l.split_whitespace().count() > 2),
        "{out}"
    );
}

/// `--after block-channels`: the IR the cpu backend compiles, a chain of
/// pointwise and depthwise convs stored `data=nchw8c` between one reorder
/// in and one out, and the pass's counts with `--stats`.
#[test]
fn after_block_channels_prints_the_blocked_ir() {
    let text = "graph m {
  input %x: f32[1,8,8,8]
  param %w1: f32[32,8,1,1] = he(seed=1)
  param %w2: f32[32,1,3,3] = he(seed=2)
  param %w3: f32[32,32,1,1] = he(seed=3)
  param %w4: f32[8,32,1,1] = he(seed=4)
  %a = Conv2d(%x, %w1)
  %b = Conv2d(%a, %w2) {pads=[1,1,1,1], group=32}
  %c = Conv2d(%b, %w3)
  %d = Conv2d(%c, %w4)
  output %d
}";
    let (dir, model) = temp_model("after-block", text);
    let o = dnnc(&[
        "ir",
        model.to_str().unwrap(),
        "--after",
        "block-channels",
        "--stats",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    let out = stdout(&o);
    assert_eq!(out.matches("data=nchw8c").count(), 4, "{out}");
    assert_eq!(out.matches("= Transpose(").count(), 2, "{out}");
    assert!(out.contains("f32[1,4,8,8,8] = Conv2d("), "{out}");
    assert!(out.contains("# block-channels: "), "{out}");
}

#[test]
fn unknown_pass_exits_2_listing_valid_names() {
    let lenet = example("lenet5.dnn");
    let o = dnnc(&["ir", lenet.to_str().unwrap(), "--after", "fuse"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown pass `fuse`; the passes are: simplify, fold-batchnorm, egraph, fold-weights, split-order, select-conv-algo, fusion, block-channels, partition"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

/// `--after partition`: the fused dump with a `partition:` line per
/// kernel (what the 2-thread executable does with it) and a line per wave
/// of independent kernels; every added line is a comment, so it parses
/// back to the graph `--after fusion` prints.
#[test]
fn after_partition_shows_each_kernels_tasks_and_the_waves() {
    let block = example("inception_block.dnn");
    let block = block.to_str().unwrap();
    let fused = stdout(&dnnc(&["ir", block, "--after", "fusion"]));
    // The partition dump on 2 threads, with extra arguments.
    let two = |extra: &[&str]| {
        let mut args = vec!["ir", block, "--after", "partition", "--threads", "2"];
        args.extend_from_slice(extra);
        stdout(&dnnc(&args))
    };
    let out = two(&[]);
    let kernels = out
        .lines()
        .filter(|l| l.trim_start().starts_with("# kernel "))
        .count();
    let parts = out
        .lines()
        .filter(|l| l.trim_start().starts_with("#   partition: "))
        .count();
    assert!(kernels >= 5 && parts == kernels, "{out}");
    // Each kernel with code carries the cost model's prediction.
    assert!(
        out.lines()
            .filter(|l| l.contains("#   partition: ") && !l.contains("no code"))
            .all(|l| l.contains(" ms on one thread")),
        "{out}"
    );
    assert!(
        out.starts_with("# partition for 2 thread(s)")
            && out
                .lines()
                .next()
                .unwrap()
                .contains("decided by the calibrated cost model"),
        "{out}"
    );
    // The max pool shares its 192 planes out; the merged 1x1 convs'
    // GEMM splits inside the call; the Concat is built in place.
    assert!(
        out.contains("#   partition: 2 tasks over its 192 output planes"),
        "{out}"
    );
    assert!(
        out.contains("#   partition: its GEMMs split inside the call, up to 2 slices"),
        "{out}"
    );
    assert!(
        out.contains("#   partition: no code of its own: a view, or built in place"),
        "{out}"
    );
    assert!(out.contains("# wave 0: 2 independent kernels"), "{out}");
    let a = dnnc_ir::text::parse(&out, "partition.dnn").expect("the dump parses");
    let b = dnnc_ir::text::parse(&fused, "fusion.dnn").unwrap();
    assert_eq!(dnnc_ir::text::print(&a), dnnc_ir::text::print(&b));
    // One thread: nothing splits.
    let one = stdout(&dnnc(&["ir", block, "--after", "partition"]));
    assert!(one.starts_with("# partition for 1 thread(s)"), "{one}");
    assert!(!one.contains("2 tasks"), "{one}");
    // The runtime's own rule, on request; its decisions here are the
    // same.
    let rule = two(&["--partition", "rule"]);
    assert!(
        rule.lines()
            .next()
            .unwrap()
            .contains("the runtime's Work-Depth rule"),
        "{rule}"
    );
    assert!(rule.contains("#   partition: 2 tasks over its 192 output planes"));
    // A profile that prices each extra share at a second: nothing splits.
    // Its own directory: the projection test's `temp_model("partition",
    // ..)` removes `dnnc-partition-PID` while this one may still use it.
    let dir = std::env::temp_dir().join(format!("dnnc-partition-profiles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut p: serde_json::Value =
        serde_json::from_str(&dnnc_passes::cost::MachineProfile::default().to_json()).unwrap();
    p["handoff"] = serde_json::json!(1.0);
    p["wave_handoff"] = serde_json::json!(1.0);
    let dear = dir.join("dear.json");
    std::fs::write(&dear, p.to_string()).unwrap();
    let d = two(&["--partition-profile", dear.to_str().unwrap()]);
    assert!(
        !d.contains("partition: 2 tasks") && !d.contains("independent kernels run concurrently"),
        "{d}"
    );
    assert!(d.contains("to share; estimated "), "{d}");
    assert!(
        d.contains("#   partition: one thread: its GEMMs do not split"),
        "{d}"
    );
    // Bad combinations and files are errors naming the problem.
    let o = dnnc(&[
        "ir",
        block,
        "--after",
        "partition",
        "--partition",
        "rule",
        "--partition-profile",
        dear.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--partition-profile needs --partition cost")
    );
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"handoff\": ").unwrap();
    let o = dnnc(&[
        "ir",
        block,
        "--after",
        "partition",
        "--partition-profile",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("machine profile") && err.contains("bad.json"),
        "{err}"
    );
    let o = dnnc(&["ir", block, "--after", "partition", "--partition", "guess"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("guess"));
    let _ = std::fs::remove_dir_all(&dir);
    let o = dnnc(&["ir", block, "--after", "partition", "--threads", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--threads must be at least 1"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `dnnc ir MODEL --after partition --threads T` of a temporary model,
/// whose directory is then removed.
fn partition_dump(dir: &Path, model: &Path, threads: &str) -> String {
    let out = stdout(&dnnc(&[
        "ir",
        model.to_str().unwrap(),
        "--after",
        "partition",
        "--threads",
        threads,
    ]));
    std::fs::remove_dir_all(dir).ok();
    out
}

/// A kernel absorbed into another (here a stem conv whose max pool
/// computes it band by band) names the kernel that computes it.
#[test]
fn after_partition_names_the_kernel_an_absorbed_one_runs_in() {
    let (dir, model) = temp_model(
        "absorbed",
        "graph stem {
  input %x: f32[1,3,224,224]
  param %w: f32[64,3,3,3] = he(seed=1)
  param %b: f32[64] = uniform(low=-0.05, high=0.05, seed=2)
  %c = Conv2d(%x, %w, %b) {strides=[2,2]}
  %r = Relu(%c)
  %p = MaxPool(%r) {kernel=[3,3], strides=[2,2], ceil_mode=1}
  output %p
}
",
    );
    let out = partition_dump(&dir, &model, "2");
    assert!(
        out.contains("# kernel r [Conv2d+Relu] contraction\n  #   partition: no code of its own: computed inside kernel p [Conv2d+Relu+MaxPool]"),
        "{out}"
    );
    assert!(out.contains("bands of pool rows"), "{out}");
}

#[test]
fn after_partition_marks_values_stored_with_padded_planes() {
    let (dir, model) = temp_model(
        "planes",
        "graph chain {
  input %x: f32[1,16,55,55]
  param %w1: f32[32,16,1,1] = he(seed=1)
  %c1 = Conv2d(%x, %w1)
  %r1 = Relu(%c1)
  param %w2: f32[16,32,1,1] = he(seed=2)
  %c2 = Conv2d(%r1, %w2)
  %r2 = Relu(%c2)
  output %r2
}
",
    );
    let padded = partition_dump(&dir, &model, "1");
    assert!(
        padded.contains("# kernel r1 [Conv2d+Relu] contraction\n  #   partition: ")
            && padded
                .contains("\n  #   planes: stored with each 55x55 plane padded to 3040 floats"),
        "{padded}"
    );
    // The graph's output keeps dense planes.
    assert_eq!(padded.matches("#   planes:").count(), 1, "{padded}");
}

#[test]
fn after_prints_the_ir_at_that_point() {
    let lenet = example("lenet5.dnn");
    let lenet = lenet.to_str().unwrap();
    let plain = stdout(&dnnc(&["ir", lenet]));
    assert!(!plain.contains("# kernel"));
    // LeNet-5 has nothing to simplify or fold.
    assert_eq!(stdout(&dnnc(&["ir", lenet, "--after", "simplify"])), plain);
    assert_eq!(
        stdout(&dnnc(&["ir", lenet, "--after", "fold-batchnorm"])),
        plain
    );
    let fused = stdout(&dnnc(&["ir", lenet, "--after", "fusion"]));
    assert!(
        fused.contains("  # kernel relu1 [Conv2d+Relu] contraction\n"),
        "{fused}"
    );
    assert_eq!(fused.matches("# kernel").count(), 8, "{fused}");
}

#[test]
fn fold_batchnorm_removes_every_batchnorm_of_resnet18() {
    let r = example("resnet18.dnn");
    let r = r.to_str().unwrap();
    assert!(stdout(&dnnc(&["ir", r])).contains("BatchNormalization"));
    let folded = stdout(&dnnc(&["ir", r, "--after", "fold-batchnorm"]));
    assert!(!folded.contains("BatchNormalization"), "{folded}");
    assert!(folded.contains("param %conv1.weight.fold: f32[64,3,7,7]\n"));
}

#[test]
fn passes_conflicts_with_after() {
    let lenet = example("lenet5.dnn");
    let o = dnnc(&[
        "ir",
        lenet.to_str().unwrap(),
        "--passes",
        "--after",
        "fusion",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn after_select_conv_algo_shows_each_decision() {
    let r = example("resnet18.dnn");
    let r = r.to_str().unwrap();
    let plain = stdout(&dnnc(&["ir", r]));
    assert_eq!(plain.matches("algo=auto").count(), 20, "{plain}");
    let chosen = stdout(&dnnc(&["ir", r, "--after", "select-conv-algo"]));
    assert!(!chosen.contains("algo=auto"), "{chosen}");
    assert!(chosen.contains("algo=winograd4"), "{chosen}");
    assert!(chosen.contains("algo=pointwise") || chosen.contains("algo=im2col"));
}

/// `--after egraph --stats` appends the saturation run's statistics as
/// comment lines, and the dump still parses; rewrites show in the rules
/// fired and the estimated time.
#[test]
fn egraph_stats_are_comment_lines() {
    let (dir, model) = temp_model(
        "egraph-stats",
        "graph m {\n  input %x: f32[2,3]\n  %a = Identity(%x)\n  %b = Relu(%a)\n  %c = Relu(%b)\n  output %c\n}\n",
    );
    let out = stdout(&dnnc(&[
        "ir",
        model.to_str().unwrap(),
        "--after",
        "egraph",
        "--stats",
    ]));
    let stats: Vec<&str> = out.lines().filter(|l| l.starts_with("# egraph:")).collect();
    assert!(
        stats.iter().any(|l| l.contains("iterations")
            && l.contains("e-nodes")
            && l.contains("e-classes")
            && l.contains("stopped: saturated")),
        "{out}"
    );
    assert!(
        stats.iter().any(|l| l.contains("relu-idempotent x1")),
        "{out}"
    );
    assert!(
        stats
            .iter()
            .any(|l| l.contains("estimated time") && l.contains("extracted program kept")),
        "{out}"
    );
    let g = dnnc_ir::text::parse(&out, "dump.dnn").expect("the dump with its stats parses");
    assert_eq!(g.node_count(), 2, "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Zero budgets for the egraph pass are usage errors naming the budget.
#[test]
fn zero_egraph_budgets_exit_2() {
    let lenet = example("lenet5.dnn");
    for flag in ["--egraph-nodes", "--egraph-iters", "--egraph-ms"] {
        let o = dnnc(&[
            "ir",
            lenet.to_str().unwrap(),
            "--after",
            "egraph",
            flag,
            "0",
        ]);
        assert_eq!(o.status.code(), Some(2), "{flag}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("pass `egraph`") && err.contains("budget"),
            "{flag}: {err}"
        );
        assert!(o.stdout.is_empty());
    }
}

/// `--rules` lists every rewrite rule of the egraph pass with its doc.
#[test]
fn rules_lists_the_rule_table() {
    let lenet = example("lenet5.dnn");
    let out = stdout(&dnnc(&["ir", lenet.to_str().unwrap(), "--rules"]));
    let names: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let want: Vec<&str> = dnnc_passes::egraph::rules::rules()
        .iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, want, "{out}");
    assert!(
        out.lines().all(|l| l.split_whitespace().count() > 2),
        "{out}"
    );
}

/// A 1x1 conv of 3.6M multiply-adds (MobileNet-V2's 144 -> 32 projection
/// on 28x28) splits its GEMM at run time by the packed GEMM's own rule
/// with spinning workers (W/p >= 8 x 100k MACs), so `--after partition`
/// must show it split too; it showed "one task (the kernel does not
/// split)" when the code generator priced a task at the idle pool's 400k.
#[test]
fn after_partition_shows_the_gemm_split_the_run_makes() {
    let (dir, model) = temp_model(
        "partition",
        "graph projection {\n\
           input %x: f32[1,144,28,28]\n\
           param %w: f32[32,144,1,1] = he(seed=1)\n\
           %y: f32[1,32,28,28] = Conv2d(%x, %w) {strides=[1,1], pads=[0,0,0,0], dilations=[1,1], group=1}\n\
           output %y\n\
         }\n",
    );
    let out = stdout(&dnnc(&[
        "ir",
        model.to_str().unwrap(),
        "--after",
        "partition",
        "--threads",
        "2",
    ]));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.contains("#   partition: its GEMMs split inside the call, up to 2 slices"),
        "{out}"
    );
    assert!(!out.contains("does not split"), "{out}");
}
