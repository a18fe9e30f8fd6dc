//! Scratch files and a way to run the real `dnnc` binary, shared by the
//! CLI test files.

#![allow(dead_code)]

use ndarray::ArrayD;
use ndarray_npy::WriteNpyExt;
use std::path::PathBuf;
use std::process::{Command, Output};

/// A temporary directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("dnnc-cli-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    pub fn file(&self, name: &str, contents: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap();
        p
    }
    pub fn npy_f32(&self, name: &str, shape: &[usize]) -> PathBuf {
        let p = self.0.join(name);
        let a = ArrayD::<f32>::from_elem(shape.to_vec(), 0.5);
        a.write_npy(std::fs::File::create(&p).unwrap()).unwrap();
        p
    }
    pub fn npy_i64(&self, name: &str, shape: &[usize]) -> PathBuf {
        let p = self.0.join(name);
        let a = ArrayD::<i64>::from_elem(shape.to_vec(), 1);
        a.write_npy(std::fs::File::create(&p).unwrap()).unwrap();
        p
    }
    pub fn safetensors(&self, name: &str, tensors: &[(&str, Vec<usize>)]) -> PathBuf {
        use safetensors::tensor::TensorView;
        let bufs: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .iter()
            .map(|(n, s)| {
                let numel: usize = s.iter().product();
                let bytes: Vec<u8> = (0..numel).flat_map(|i| (i as f32).to_le_bytes()).collect();
                (n.to_string(), s.clone(), bytes)
            })
            .collect();
        let views: Vec<(String, TensorView)> = bufs
            .iter()
            .map(|(n, s, b)| {
                (
                    n.clone(),
                    TensorView::new(safetensors::Dtype::F32, s.clone(), b).unwrap(),
                )
            })
            .collect();
        let data = safetensors::tensor::serialize(views, None).unwrap();
        self.file(name, &data)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the `dnnc` binary with colour off.
pub fn dnnc(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dnnc"));
    for a in args {
        c.arg(a);
    }
    c.env("NO_COLOR", "1").output().expect("spawn dnnc")
}

/// Asserts exit code 2, no panic, and that stderr mentions every needle.
pub fn fails_with(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit code; stderr:\n{err}");
    assert!(!err.contains("panicked"), "panic:\n{err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}:\n{err}");
    }
}
