//! `dnnc run --backend cpu` through the real binary: same outputs as the
//! interpreter, and cpu as the default backend.

mod cpu_common;

use std::path::PathBuf;
use std::process::Command;

fn dnnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dnnc"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dnnc-cpu-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn run_backend_cpu_matches_interp() {
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/lenet5.dnn");
    let dir = tmp("lenet");
    let x = cpu_common::rand_f32(&[1, 1, 32, 32], 9, -1.0, 1.0);
    let input = dir.join("x.npy");
    dnnc_ir::tensor::write_npy(&input, &x).unwrap();
    let mut outs = Vec::new();
    for backend in ["interp", "cpu"] {
        let out = dir.join(backend);
        let o = dnnc()
            .args([
                "run",
                model.to_str().unwrap(),
                "--backend",
                backend,
                "--input",
            ])
            .arg(&input)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let f = std::fs::read_dir(&out)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        outs.push(dnnc_ir::tensor::read_npy(&f).unwrap());
    }
    cpu_common::assert_close("lenet5 cpu vs interp", &outs[1], &outs[0], 1e-4, 1e-5);
}

#[test]
fn run_defaults_to_cpu_and_compiles_einsum() {
    // Einsum once had no lowering; `run` now defaults to the cpu backend
    // and matches `--backend interp`.
    let dir = tmp("einsum");
    let model = dir.join("e.dnn");
    std::fs::write(
        &model,
        "graph e {\n  input %a: f32[2,3]\n  param %b: f32[3,4] = ones\n  %prod = Einsum(%a, %b) {equation=\"ij,jk->ik\"}\n  output %prod\n}\n",
    )
    .unwrap();
    let x = cpu_common::rand_f32(&[2, 3], 1, -1.0, 1.0);
    let input = dir.join("a.npy");
    dnnc_ir::tensor::write_npy(&input, &x).unwrap();
    let mut outs = Vec::new();
    for backend in [None, Some("interp")] {
        let out = dir.join(backend.unwrap_or("default"));
        let mut cmd = dnnc();
        cmd.args(["run", model.to_str().unwrap(), "--input"])
            .arg(&input)
            .arg("--out")
            .arg(&out);
        if let Some(b) = backend {
            cmd.args(["--backend", b]);
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        outs.push(dnnc_ir::tensor::read_npy(&out.join("prod.npy")).unwrap());
    }
    cpu_common::assert_close("einsum cpu vs interp", &outs[0], &outs[1], 1e-4, 1e-5);
}
