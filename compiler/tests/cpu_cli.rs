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

/// `dnnc run MODEL ARGS --input INPUT --out OUT` (a one-output model):
/// the path of the `.npy` it wrote.
fn run_to_npy(model: &std::path::Path, args: &[&str], input: &PathBuf, out: &PathBuf) -> PathBuf {
    let o = dnnc()
        .arg("run")
        .arg(model)
        .args(args)
        .arg("--input")
        .arg(input)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read_dir(out)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
}

#[test]
fn run_backend_cpu_matches_interp() {
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/lenet5.dnn");
    let dir = tmp("lenet");
    let input = random_input(&dir, &[1, 1, 32, 32], 9);
    cpu_vs_interp("lenet5", &model, &input, &dir);
}

/// A seeded random `.npy` input of `shape` in `dir`.
fn random_input(dir: &std::path::Path, shape: &[usize], seed: u64) -> PathBuf {
    let x = cpu_common::rand_f32(shape, seed, -1.0, 1.0);
    let input = dir.join("x.npy");
    dnnc_ir::tensor::write_npy(&input, &x).unwrap();
    input
}

/// `dnnc run --backend cpu` matches `--backend interp` on `model`.
fn cpu_vs_interp(name: &str, model: &std::path::Path, input: &PathBuf, dir: &std::path::Path) {
    let mut outs = Vec::new();
    for backend in ["interp", "cpu"] {
        let f = run_to_npy(model, &["--backend", backend], input, &dir.join(backend));
        outs.push(dnnc_ir::tensor::read_npy(&f).unwrap());
    }
    cpu_common::assert_close(
        &format!("{name} cpu vs interp"),
        &outs[1],
        &outs[0],
        1e-4,
        1e-5,
    );
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

#[test]
fn run_folds_batchnorm_by_default_and_matches_interp() {
    // Conv -> BatchNormalization -> Relu: the default build folds the
    // BatchNorm into the conv (`--profile` lists Conv2d+Relu), and its
    // output matches the interpreter running the model as written.
    let dir = tmp("bn");
    let model = dir.join("bn.dnn");
    std::fs::write(
        &model,
        "graph bn {
  input %x: f32[2,3,8,8]
  param %w: f32[6,3,3,3] = he(seed=1)
  param %s: f32[6] = uniform(low=0.5, high=1.5, seed=2)
  param %b: f32[6] = uniform(low=-1, high=1, seed=3)
  param %m: f32[6] = uniform(low=-1, high=1, seed=4)
  param %v: f32[6] = uniform(low=0.5, high=2, seed=5)
  %c = Conv2d(%x, %w) {pads=[1,1,1,1]}
  %n = BatchNormalization(%c, %s, %b, %m, %v) {epsilon=0.00001}
  %y = Relu(%n)
  output %y
}
",
    )
    .unwrap();
    let input = random_input(&dir, &[2, 3, 8, 8], 6);
    cpu_vs_interp("folded BatchNorm", &model, &input, &dir);
    let o = dnnc()
        .args(["run", model.to_str().unwrap(), "--profile", "--input"])
        .arg(&input)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        text.contains("Conv2d+Relu") && !text.contains("BatchNormalization"),
        "{text}"
    );
}

#[test]
fn dump_asm_writes_each_kernels_machine_code() {
    // `DNNC_DUMP_ASM=DIR` writes one `.s` per kernel, including a kernel
    // compiled in emission order (the depthwise conv).
    let dir = tmp("asm");
    let model = dir.join("dw.dnn");
    std::fs::write(
        &model,
        "graph dw {\n  input %x: f32[1,4,9,9]\n  param %w: f32[4,1,3,3] = he(seed=1)\n  %c = Conv2d(%x, %w) {pads=[1,1,1,1], group=4}\n  %y = Relu(%c)\n  %z = Add(%y, %y)\n  output %z\n}\n",
    )
    .unwrap();
    let x = cpu_common::rand_f32(&[1, 4, 9, 9], 3, -1.0, 1.0);
    let input = dir.join("x.npy");
    dnnc_ir::tensor::write_npy(&input, &x).unwrap();
    let asm = dir.join("asm");
    let o = dnnc()
        .args(["run", model.to_str().unwrap(), "--input"])
        .arg(&input)
        .env("DNNC_DUMP_ASM", &asm)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut files: Vec<String> = std::fs::read_dir(&asm)
        .unwrap()
        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no kernel dumped");
    let mut saw_fma = false;
    for f in &files {
        assert!(f.ends_with(".s"), "{f}");
        let text = std::fs::read_to_string(asm.join(f)).unwrap();
        assert!(text.contains("ret"), "{f} has no return:\n{text}");
        saw_fma |= text.contains("vfmadd");
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("fma") {
        assert!(
            saw_fma,
            "the depthwise kernel's FMAs are missing from {files:?}"
        );
    }
    let _ = saw_fma;
}

/// `--partition rule|cost` on `dnnc run --threads 2` (the inception
/// block, whose heads may run concurrently and whose GEMMs split): the
/// same output bits either way, and as on one thread, matching the
/// interpreter; a profile with the rule is a usage error.
#[test]
fn run_partition_models_give_the_same_outputs() {
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/inception_block.dnn");
    let dir = tmp("partition");
    let x = cpu_common::rand_f32(&[1, 192, 28, 28], 5, -1.0, 1.0);
    let input = dir.join("x.npy");
    dnnc_ir::tensor::write_npy(&input, &x).unwrap();
    let mut outs = Vec::new();
    for (threads, partition) in [("1", "cost"), ("2", "cost"), ("2", "rule")] {
        let args = ["--threads", threads, "--partition", partition];
        let out = dir.join(format!("{threads}-{partition}"));
        outs.push(std::fs::read(run_to_npy(&model, &args, &input, &out)).unwrap());
    }
    assert!(outs.windows(2).all(|w| w[0] == w[1]));
    // ... and they are right: the interpreter's output, within tolerance.
    let f = run_to_npy(
        &model,
        &["--backend", "interp"],
        &input,
        &dir.join("interp"),
    );
    let oracle = dnnc_ir::tensor::read_npy(&f).unwrap();
    let out = std::fs::read_dir(dir.join("2-cost"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let got = dnnc_ir::tensor::read_npy(&out).unwrap();
    cpu_common::assert_close("inception block, 2 threads", &got, &oracle, 1e-4, 1e-4);
    let o = dnnc()
        .args(["bench", model.to_str().unwrap(), "--partition", "rule"])
        .args(["--partition-profile", "profile.json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--partition-profile needs --partition cost"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
