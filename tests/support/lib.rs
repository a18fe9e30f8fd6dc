//! Shared helpers for dnnc's workspace-level integration tests: locating the
//! read-only reference material in `../shared` and comparing tensors.

#![warn(missing_docs)]

use std::path::{Path, PathBuf};

/// The workspace root (this package's manifest directory).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The reference material directory: `$DNNC_SHARED` if set, else the
/// `shared/` folder beside the checkout. `None` when absent, so tests can
/// skip with a message instead of passing silently.
pub fn shared_dir() -> Option<PathBuf> {
    let p = std::env::var_os("DNNC_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("..").join("shared"));
    p.is_dir().then_some(p)
}

/// Returns the shared directory or prints why the calling test is skipped.
/// Use as `let Some(shared) = dnnc_integration::shared_or_skip("name") else { return };`.
pub fn shared_or_skip(test: &str) -> Option<PathBuf> {
    let d = shared_dir();
    if d.is_none() {
        eprintln!(
            "SKIPPED {test}: reference material not found (set DNNC_SHARED or place shared/ beside the checkout)"
        );
    }
    d
}

/// The model zoo: the folders under `shared/models/` that hold a
/// `model.onnx`, sorted by name. `None` (with the skip printed by
/// [`shared_or_skip`]) when the reference material is absent; an empty
/// list is left to the caller to judge.
pub fn zoo_models(test: &str) -> Option<Vec<PathBuf>> {
    let shared = shared_or_skip(test)?;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(shared.join("models"))
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.join("model.onnx").is_file())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    Some(dirs)
}

/// Worst absolute and relative deviation of `actual` from `expected`, and
/// whether every element satisfies `|a - e| <= atol + rtol * |e|` (numpy's
/// `allclose` rule).
pub fn allclose(actual: &[f32], expected: &[f32], rtol: f32, atol: f32) -> (bool, f32, f32) {
    assert_eq!(actual.len(), expected.len(), "length mismatch");
    let mut ok = true;
    let (mut max_abs, mut max_rel) = (0f32, 0f32);
    for (&a, &e) in actual.iter().zip(expected) {
        let d = (a - e).abs();
        if d.is_nan() || d > atol + rtol * e.abs() {
            ok = false;
        }
        max_abs = max_abs.max(d);
        if e != 0.0 {
            max_rel = max_rel.max(d / e.abs());
        }
    }
    (ok, max_abs, max_rel)
}

/// Path of a bundled example model.
pub fn example(name: &str) -> PathBuf {
    workspace_root().join("examples").join(name)
}

/// Every bundled `.dnn` example, sorted by name.
pub fn examples() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(workspace_root().join("examples"))
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "dnn"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// File stem as a string, for snapshot names.
pub fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Opens the default GPU adapter, or prints why the calling test is
/// skipped. With `DNNC_REQUIRE_GPU=1` (CI) a missing adapter fails the
/// test instead, so GPU tests can never pass by skipping.
pub fn gpu_or_skip(test: &str) -> Option<std::sync::Arc<dnnc_runtime::gpu::GpuDevice>> {
    match dnnc_runtime::gpu::GpuDevice::open(&dnnc_runtime::gpu::AdapterChoice::Default) {
        Ok(d) => Some(d),
        Err(e) if std::env::var("DNNC_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("{test}: DNNC_REQUIRE_GPU=1 but no GPU is usable: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED {test}: no GPU adapter ({e})");
            None
        }
    }
}

/// Every adapter wgpu finds, opened (lavapipe's Vulkan and llvmpipe's GL
/// on CI: their shader compilers differ, and GL once got a mirror index
/// wrong that Vulkan got right), or none with the reason printed as for
/// [`gpu_or_skip`].
pub fn every_gpu_or_skip(test: &str) -> Vec<std::sync::Arc<dnnc_runtime::gpu::GpuDevice>> {
    use dnnc_runtime::gpu::{adapters, AdapterChoice, GpuDevice};
    let found = adapters();
    if found.is_empty() {
        return gpu_or_skip(test).into_iter().collect();
    }
    found
        .iter()
        .map(|a| {
            GpuDevice::open(&AdapterChoice::Index(a.index))
                .unwrap_or_else(|e| panic!("{test}: adapter {} failed to open: {e}", a.name))
        })
        .collect()
}

/// Compiles the `.dnn` text `src` for the GPU (with `opts`, its limits set
/// from the device except `busy_groups`), runs it and the reference interpreter on the same
/// seeded inputs, and asserts every output matches (f32 by numpy's
/// `allclose(rtol, atol)`, i64/bool exactly), on every adapter. Skips
/// without one (see [`gpu_or_skip`]).
pub fn gpu_check_with(
    test: &str,
    src: &str,
    opts: dnnc_compiler::codegen::gpu::GpuOptions,
    rtol: f32,
    atol: f32,
) {
    gpu_check_on_adapters(test, src, opts, rtol, atol, true)
}

/// [`gpu_check`] on the default adapter alone, for work too large for
/// llvmpipe's GL: a 1000 x 40 x 1030 GEMM took it 95 s, lavapipe's
/// Vulkan 0.5 s.
pub fn gpu_check_default_adapter(test: &str, src: &str, rtol: f32, atol: f32) {
    gpu_check_on_adapters(test, src, Default::default(), rtol, atol, false)
}

fn gpu_check_on_adapters(
    test: &str,
    src: &str,
    opts: dnnc_compiler::codegen::gpu::GpuOptions,
    rtol: f32,
    atol: f32,
    every_adapter: bool,
) {
    let g = dnnc_compiler::model::load_model_str(src, "test.dnn")
        .unwrap_or_else(|e| panic!("{test}: {e:?}"));
    let feeds = dnnc_compiler::cli::gather_inputs(&g, &[], &mut |_| {}).expect("inputs");
    let want = dnnc_runtime::interp::run(&g, &feeds).expect("interpreter");
    let devices = if every_adapter {
        every_gpu_or_skip(test)
    } else {
        gpu_or_skip(test).into_iter().collect()
    };
    for dev in devices {
        let on = format!(
            "{test} on {} ({})",
            dev.adapter().name,
            dev.adapter().backend
        );
        gpu_check_on(&on, dev, &g, &feeds, &want, opts.clone(), rtol, atol);
    }
}

/// [`gpu_check_with`]'s comparison on one device.
#[allow(clippy::too_many_arguments)]
fn gpu_check_on(
    test: &str,
    dev: std::sync::Arc<dnnc_runtime::gpu::GpuDevice>,
    g: &dnnc_ir::Graph,
    feeds: &[(String, dnnc_ir::Tensor)],
    want: &[dnnc_ir::Tensor],
    mut opts: dnnc_compiler::codegen::gpu::GpuOptions,
    rtol: f32,
    atol: f32,
) {
    use dnnc_ir::Tensor;
    // The device's limits, but tiles sized as `opts` says for occupancy
    // (default: a GPU's 64 busy workgroups), so a software adapter runs
    // the tilings a GPU would (split-K, small tiles) and tests check them.
    opts.limits = dnnc_runtime::gpu::GpuLimits {
        busy_groups: opts.limits.busy_groups,
        ..dev.limits()
    };
    let prog = dnnc_compiler::codegen::gpu::compile_gpu(g, &opts)
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    let exe =
        dnnc_runtime::gpu::GpuExecutable::new(dev, prog).unwrap_or_else(|e| panic!("{test}: {e}"));
    let got = exe.run(feeds).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert_eq!(got.len(), want.len());
    for (i, (a, e)) in got.iter().zip(want).enumerate() {
        assert_eq!(a.ty(), e.ty(), "{test}: output {i} type");
        match (a, e) {
            (Tensor::F32(a), Tensor::F32(e)) => {
                let a: Vec<f32> = a.iter().copied().collect();
                let e: Vec<f32> = e.iter().copied().collect();
                let (ok, abs, rel) = allclose(&a, &e, rtol, atol);
                assert!(
                    ok,
                    "{test}: output {i} differs from the interpreter: max abs {abs:e}, max rel {rel:e}"
                );
            }
            _ => assert_eq!(a, e, "{test}: output {i}"),
        }
    }
}

/// [`gpu_check_with`] with the default options.
pub fn gpu_check(test: &str, src: &str, rtol: f32, atol: f32) {
    gpu_check_with(test, src, Default::default(), rtol, atol)
}
