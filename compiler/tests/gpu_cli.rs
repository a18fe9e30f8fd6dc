//! The GPU backend through the real binary: `run`/`bench --backend gpu`,
//! `devices`, `ir --emit wgsl`, and their usage errors.

use std::path::PathBuf;
use std::process::Command;

fn dnnc() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dnnc"));
    c.env(
        "XDG_RUNTIME_DIR",
        std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into()),
    );
    c
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dnnc-gpu-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Whether a GPU adapter exists; otherwise prints why the test is skipped
/// (or fails when `DNNC_REQUIRE_GPU=1`).
fn gpu_present(test: &str) -> bool {
    let o = dnnc().arg("devices").output().unwrap();
    if o.status.success() {
        return true;
    }
    let why = String::from_utf8_lossy(&o.stderr).to_string();
    if std::env::var("DNNC_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("{test}: DNNC_REQUIRE_GPU=1 but `dnnc devices` failed: {why}");
    }
    eprintln!("SKIPPED {test}: no GPU adapter ({why})");
    false
}

const MODEL: &str = "graph t {
  input %x: f32[1,3,8,8]
  param %w: f32[4,3,3,3] = he(seed=1)
  %c = Conv2d(%x, %w) {pads=[1,1,1,1]}
  %y = Relu(%c)
  output %y
}";

fn model(dir: &std::path::Path) -> PathBuf {
    let p = dir.join("m.dnn");
    std::fs::write(&p, MODEL).unwrap();
    p
}

#[test]
fn emit_wgsl_writes_one_validated_shader_per_kernel_stage() {
    // No device needed: shaders are generated for WebGPU's minimum limits.
    let dir = tmp("emit");
    let m = model(&dir);
    let out = dir.join("wgsl");
    let o = dnnc()
        .args(["ir", m.to_str().unwrap(), "--emit", "wgsl", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("validated by naga"), "{stdout}");
    let files: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
    assert_eq!(files.len(), 1, "one fused kernel (conv + relu)");
    let src = std::fs::read_to_string(files[0].as_ref().unwrap().path()).unwrap();
    assert!(src.contains("@compute"), "{src}");
    assert!(
        src.contains("var<workgroup>"),
        "the conv is a tiled GEMM: {src}"
    );
    // Printed form.
    let o = dnnc()
        .args(["ir", m.to_str().unwrap(), "--emit", "wgsl"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("// ---- 000_y.wgsl ----"));
}

#[test]
fn gpu_usage_errors_are_clear() {
    let dir = tmp("usage");
    let m = model(&dir);
    let cases: [(&[&str], &str); 7] = [
        (&["run", "--adapter", "0"], "--adapter needs --backend gpu"),
        (
            &["onnx-test", "--adapter", "0"],
            "--adapter needs --backend gpu",
        ),
        (
            &[
                "onnx-test",
                "--backend",
                "gpu",
                "--adapter",
                "no-such-adapter",
            ],
            "gpu backend: no GPU adapter",
        ),
        (
            &["run", "--backend", "gpu", "--threads", "2"],
            "--threads needs --backend cpu",
        ),
        (
            &["run", "--backend", "interp", "--profile"],
            "--profile needs --backend cpu or gpu",
        ),
        (
            &["bench", "--backend", "gpu", "--threads", "2"],
            "--threads needs --backend cpu",
        ),
        (&["ir", "--emit", "spirv"], "invalid value 'spirv'"),
    ];
    for (args, want) in cases {
        let o = dnnc()
            .arg(args[0])
            .arg(&m)
            .args(&args[1..])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn run_and_bench_on_the_gpu() {
    if !gpu_present("run_and_bench_on_the_gpu") {
        return;
    }
    let dir = tmp("run");
    let m = model(&dir);
    let o = dnnc().arg("devices").output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("0: "));
    let mut outs = Vec::new();
    for backend in ["interp", "gpu"] {
        let out = dir.join(backend);
        let o = dnnc()
            .arg("run")
            .arg(&m)
            .args(["--backend", backend, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        outs.push(dnnc_ir::tensor::read_npy(&out.join("y.npy")).unwrap());
    }
    let (a, b) = (outs[1].as_f32().unwrap(), outs[0].as_f32().unwrap());
    for (x, y) in a.iter().zip(b.iter()) {
        assert!((x - y).abs() <= 1e-5 + 1e-4 * y.abs(), "{x} vs {y}");
    }
    // Per-kernel GPU times where the adapter has timestamp queries
    // (lavapipe does).
    let devices =
        String::from_utf8_lossy(&dnnc().arg("devices").output().unwrap().stdout).to_string();
    if devices
        .lines()
        .next()
        .is_some_and(|l| l.ends_with(", timestamp queries"))
    {
        let o = dnnc()
            .arg("run")
            .arg(&m)
            .args(["--backend", "gpu", "--profile", "--adapter", "0"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(
            s.contains("profile of `t` (gpu,") && s.contains("1 kernels"),
            "{s}"
        );
        assert!(s.contains("implicit-gemm  Conv2d+Relu"), "{s}");
    }
    let o = dnnc()
        .arg("bench")
        .arg(&m)
        .args(["--backend", "gpu", "--iters", "3", "--adapter", "0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.contains("on gpu (") && s.contains("latency"), "{s}");
    let o = dnnc()
        .arg("run")
        .arg(&m)
        .args(["--backend", "gpu", "--adapter", "no-such-gpu"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no GPU adapter matches `no-such-gpu`"));
}
