//! `DNNC_CPU_ISA`, the instruction-set cap (`dnnc_ir::isa`): a bad value
//! is a usage error before anything runs, and every real model run by
//! `dnnc run` under `DNNC_CPU_ISA=avx2` (on an AVX-512 machine: the AVX2
//! kernels, the AVX2 peak loop, Cranelift without AVX-512 encodings, the
//! AVX2 cost-model class) still matches onnxruntime's `output.npy` within
//! the zoo's rule. The cap is read once per process, so each case is a
//! `dnnc` process of its own.

mod cpu_common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn dnnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dnnc"))
}

fn lenet() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lenet5.dnn")
}

/// `dnnc run [extra] examples/lenet5.dnn` under `DNNC_CPU_ISA=cap`.
fn run_lenet(cap: &str, extra: &[&str]) -> std::process::Output {
    dnnc()
        .env("DNNC_CPU_ISA", cap)
        .arg("run")
        .args(extra)
        .arg(lenet())
        .output()
        .expect("dnnc runs")
}

#[test]
fn a_bad_cap_is_a_usage_error_naming_the_variable() {
    for bad in ["sse9", "avx1024", "portable"] {
        let out = run_lenet(bad, &[]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("DNNC_CPU_ISA") && err.contains(bad) && err.contains("avx2"),
            "{bad}: {err}"
        );
        assert!(out.stdout.is_empty(), "{bad}: ran anyway");
    }
    for good in ["native", "AVX2", "avx512"] {
        let out = run_lenet(good, &[]);
        assert!(out.status.success(), "{good}: {out:?}");
    }
}

/// The profile names the loop its peak was measured with: the cap's
/// level, never above the CPU's.
#[test]
fn the_profile_names_the_capped_level() {
    let out = run_lenet("avx2", &["--profile"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let want = if dnnc_ir::isa::detected() >= dnnc_ir::isa::CpuIsa::Avx2 {
        "register-only loop on avx2"
    } else {
        "register-only loop on portable"
    };
    assert!(text.contains(want), "{text}");
}

#[test]
#[ignore = "release-mode numeric test on real models (CI runs it with --include-ignored)"]
fn zoo_models_match_onnxruntime_under_the_avx2_cap() {
    let Some(models) = cpu_common::shared_models() else {
        return;
    };
    if dnnc_ir::isa::detected() < dnnc_ir::isa::CpuIsa::Avx512 {
        eprintln!("note: this CPU has no AVX-512, so the cap changes nothing here");
    }
    let tmp = std::env::temp_dir().join(format!("dnnc-isa-cap-{}", std::process::id()));
    for dir in models {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let out_dir = tmp.join(&name);
        std::fs::create_dir_all(&out_dir).unwrap();
        for threads in ["1", "2"] {
            let out = dnnc()
                .env("DNNC_CPU_ISA", "avx2")
                .arg("run")
                .arg(dir.join("model.onnx"))
                .arg("--input")
                .arg(dir.join("input.npy"))
                .args(["--threads", threads, "--out"])
                .arg(&out_dir)
                .output()
                .expect("dnnc runs");
            assert!(out.status.success(), "{name}: {out:?}");
            let written: Vec<PathBuf> = std::fs::read_dir(&out_dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            assert_eq!(written.len(), 1, "{name}: one output expected");
            let got = dnnc_ir::tensor::read_npy(&written[0]).unwrap();
            let want = dnnc_ir::tensor::read_npy(&dir.join("output.npy")).unwrap();
            let err = cpu_common::assert_close(&name, &got, &want, 1e-3, 1e-4);
            println!("{name} (avx2 cap, {threads} threads): max abs err {err:.2e}");
            std::fs::remove_file(&written[0]).unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
