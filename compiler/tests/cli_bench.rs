//! `dnnc bench`, `dnnc run --threads/--profile` and the activation line of
//! `dnnc analyze` through the real binary: bad input exits 2 with a clear
//! message; good input prints the expected fields (never timing values).

mod cli_common;

use cli_common::{dnnc, fails_with, Scratch};
use std::process::Output;

const GOOD: &str = r#"graph tiny {
  input %x: f32[1,2,8,8]
  param %w: f32[3,2,3,3] = he(seed=1)
  param %b: f32[3] = zeros
  %c = Conv2d(%x, %w, %b) {pads=[1,1,1,1]}
  %r = Relu(%c)
  output %r
}
"#;

fn succeeds(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `dnnc bench` of [`GOOD`] on its input in scratch directory `dir`,
/// with `extra` arguments; its output, the run having succeeded.
fn bench_good(dir: &str, extra: &[&str]) -> String {
    let s = Scratch::new(dir);
    let m = s.file("m.dnn", GOOD.as_bytes());
    let x = s.npy_f32("x.npy", &[1, 2, 8, 8]);
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"bench", &m, &"--input", &x];
    for a in extra {
        args.push(a);
    }
    succeeds(&dnnc(&args))
}

#[test]
fn bench_prints_every_figure() {
    let out = bench_good("ok", &["--threads", "2", "--warmup", "0", "--iters", "3"]);
    for needle in [
        "2 threads",
        "median",
        "min",
        "max",
        "GFLOP/s",
        "% of peak",
        "measured: register-only FMA loop",
        "activations",
        "compile",
        "decided by the calibrated cost model",
    ] {
        assert!(out.contains(needle), "{needle}:\n{out}");
    }
}

#[test]
fn bench_against_unoptimized_times_both_builds_in_pairs() {
    let out = bench_good(
        "pairs",
        &[
            "--optimize",
            "--against-unoptimized",
            "--warmup",
            "1",
            "--iters",
            "4",
        ],
    );
    for needle in [
        "optimised against as loaded, 1 warm-up + 4 timed pairs",
        "alternating which goes first",
        "  optimised  median",
        "  as loaded  median",
        "optimised / as loaded: median",
        "over the pairs",
        "medians' ratio",
    ] {
        assert!(out.contains(needle), "{needle}:\n{out}");
    }
}

#[test]
fn run_with_threads_and_profile() {
    let s = Scratch::new("prof");
    let m = s.file("m.dnn", GOOD.as_bytes());
    let one = succeeds(&dnnc(&[&"run", &m, &"--backend", &"cpu"]));
    let two = succeeds(&dnnc(&[
        &"run",
        &m,
        &"--backend",
        &"cpu",
        &"--threads",
        &"2",
    ]));
    assert_eq!(one, two);
    let prof = succeeds(&dnnc(&[&"run", &m, &"--backend", &"cpu", &"--profile"]));
    for needle in [
        "profile of",
        "share",
        "GFLOP/s",
        "%peak",
        "%roof",
        "GB/s a core",
        "im2col",
        "Conv2d+Relu",
    ] {
        assert!(prof.contains(needle), "{needle}:\n{prof}");
    }
}

/// The `%peak` and `%roof` cells of kernel `name`'s row in a profile.
fn shares(prof: &str, name: &str) -> (f64, f64) {
    let row = prof
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name}:\n{prof}"));
    let pct: Vec<f64> = row
        .split_whitespace()
        .filter_map(|c| c.strip_suffix('%')?.parse().ok())
        .collect();
    // share, %peak, %roof
    assert_eq!(pct.len(), 3, "{row}");
    (pct[1], pct[2])
}

/// A batch-1 fully-connected layer moves 4 bytes per multiply-add, so its
/// roof is the memory stream and its `%roof` well above its `%peak` (by
/// 2 x peak / bandwidth, whatever the times); a conv with 9 x 64
/// multiply-adds per output is bound by its flops, so the two agree.
/// Ratios within one report, so no timing enters.
#[test]
fn the_profile_rates_a_matrix_vector_product_against_memory() {
    let s = Scratch::new("roof");
    let m = s.file(
        "m.dnn",
        br#"graph fc {
  input %x: f32[1,64,14,14]
  param %w: f32[64,64,3,3] = he(seed=1)
  %c = Conv2d(%x, %w) {pads=[1,1,1,1], algo=im2col}
  %r = Relu(%c)
  %f = Flatten(%r)
  param %v: f32[12544,256] = he(seed=2)
  %y = MatMul(%f, %v)
  output %y
}
"#,
    );
    let prof = succeeds(&dnnc(&[&"run", &m, &"--profile"]));
    let (peak, roof) = shares(&prof, "y");
    assert!(roof > 2.0 * peak.max(1.0), "{prof}");
    let (peak, roof) = shares(&prof, "r");
    assert_eq!(peak, roof, "{prof}");
}

#[test]
fn analyze_reports_peak_activations() {
    let s = Scratch::new("an");
    let m = s.file("m.dnn", GOOD.as_bytes());
    let out = succeeds(&dnnc(&[&"analyze", &m]));
    assert!(out.contains("activations"), "{out}");
    let json = succeeds(&dnnc(&[&"analyze", &m, &"--json"]));
    assert!(json.contains("\"activation_memory\""), "{json}");
}

#[test]
fn bad_bench_and_thread_arguments_exit_2() {
    let s = Scratch::new("bad");
    let m = s.file("m.dnn", GOOD.as_bytes());
    let wrong = s.npy_f32("wrong.npy", &[1, 3, 8, 8]);
    fails_with(
        &dnnc(&[&"bench", &m, &"--threads", &"0"]),
        &["--threads", "at least 1"],
    );
    fails_with(
        &dnnc(&[&"bench", &m, &"--iters", &"0"]),
        &["--iters", "at least 1"],
    );
    fails_with(&dnnc(&[&"bench", &m, &"--threads", &"two"]), &["--threads"]);
    fails_with(
        &dnnc(&[&"run", &m, &"--plain-pools", &"--nchw-only"]),
        &["--plain-pools", "cannot be used with", "--nchw-only"],
    );
    fails_with(
        &dnnc(&[&"run", &m, &"--backend", &"cpu", &"--threads", &"0"]),
        &["--threads", "at least 1"],
    );
    fails_with(
        &dnnc(&[&"bench", &s.0.join("missing.dnn")]),
        &["missing.dnn"],
    );
    fails_with(&dnnc(&[&"bench", &m, &"--input", &wrong]), &["x"]);
    fails_with(
        &dnnc(&[&"bench", &m, &"--input", &s.0.join("nope.npy")]),
        &["nope.npy"],
    );
    fails_with(
        &dnnc(&[&"run", &m, &"--backend", &"interp", &"--threads", &"2"]),
        &["--backend cpu"],
    );
    for extra in [&[][..], &["--backend", "interp"][..]] {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&"bench", &m, &"--against-unoptimized"];
        if !extra.is_empty() {
            args.push(&"--optimize");
        }
        for a in extra {
            args.push(a);
        }
        fails_with(
            &dnnc(&args),
            &["--against-unoptimized", "--optimize", "--backend cpu"],
        );
    }
}
