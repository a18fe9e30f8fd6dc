//! The ONNX backend conformance runner behind `dnnc onnx-test`: imports each
//! test's `model.onnx`, runs every `test_data_set_N` on the reference
//! interpreter or the compiled CPU backend ([`Backend`]) and compares the
//! outputs with the expected `output_K.pb`.
//!
//! # Layout
//!
//! A test folder holds `model.onnx` and one or more `test_data_set_N/`
//! folders with `input_K.pb` / `output_K.pb` TensorProtos. `input_K` binds
//! to the K-th graph input that is not an initializer (or to the input named
//! by the TensorProto's `name`, when it names one); `output_K` is the K-th
//! graph output. Omitted optional inputs are absent from the graph inputs,
//! so nothing special is needed for them. Input shapes are pinned from the
//! data before import, so models with symbolic dimensions run too.
//!
//! # Tolerance
//!
//! ONNX's backend runner compares with `numpy.testing.assert_allclose(out,
//! ref, rtol=1e-3, atol=1e-7)`. dnnc uses that rule, `|out - ref| <= atol +
//! rtol * |ref|` element-wise, with:
//!
//! - float32 outputs: rtol [`RTOL`] = 1e-3 and atol [`ATOL`] = 1e-7 first;
//!   an output that misses that but meets atol [`ATOL_F32`] = 1e-5 still
//!   passes and is marked `(atol 1e-5)`. Results near zero produced by
//!   cancellation (a difference of O(1) terms) carry f32 rounding of about
//!   1e-7 times the terms, which ONNX's numpy reference computes in float64
//!   and then rounds; 1e-5 absorbs that and nothing more.
//! - NaN matches NaN and infinities must match exactly (numpy's rule).
//! - int64 and bool outputs: exact equality. Shapes must match exactly and
//!   the output dtype must be the expected one.
//!
//! # Classification
//!
//! A test is *unsupported* (not a failure) when its graph inputs or outputs
//! are not float32/int64/bool tensors (DOUBLE, INT8..INT32, UINT*, FLOAT16,
//! BFLOAT16, FLOAT8*, STRING, or sequence/optional/map values stored as
//! SequenceProto/OptionalProto), when its opset is outside the importer's
//! range, or when the importer reports an unsupported node or attribute.
//! Operands dnnc needs at compile time (Reshape's shape, Reduce axes,
//! Pad's pads, Resize's sizes, Clip's bounds...) but that a test feeds as
//! graph inputs are bound to the test's values as initializers and the
//! import retried (when such an operand is computed from inputs rather
//! than fed directly, every INT64 input is bound): dnnc compiles static shapes, so it specialises a model on
//! such operands. The pass line lists them (`compile-time inputs: ...`).
//!
//! Everything else that does not match — an import error on a well-formed
//! model, a run-time error, a wrong shape or value — is a *failure*.

pub use crate::cli::Backend;
use crate::onnx::proto::{tensor_proto::DataType, type_proto, ModelProto, TensorProto};
use crate::onnx::{decode_tensor_proto, import_model_proto, OnnxError};
use dnnc_ir::Tensor;
use prost::Message;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

/// ONNX's relative tolerance.
pub const RTOL: f64 = 1e-3;
/// ONNX's absolute tolerance.
pub const ATOL: f64 = 1e-7;
/// The looser absolute tolerance accepted for float32 outputs (see the
/// module docs for why).
pub const ATOL_F32: f64 = 1e-5;

/// How one test ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every output of every data set matched.
    Pass {
        /// Largest absolute difference over all float outputs (0 if none).
        max_abs: f64,
        /// True when some output needed [`ATOL_F32`] rather than [`ATOL`].
        loose: bool,
        /// Graph inputs bound to the test's data at import because dnnc
        /// needs them at compile time (axes, pads, sizes...).
        specialised: Vec<String>,
    },
    /// Something did not match or did not run; `reason` says what.
    Fail {
        /// What went wrong, with the max error where values differ.
        reason: String,
    },
    /// The test uses a feature dnnc does not implement (not a failure).
    Unsupported {
        /// Which feature.
        reason: String,
    },
}

/// The result of one test folder.
#[derive(Clone, Debug, PartialEq)]
pub struct TestResult {
    /// The folder's name, e.g. `test_abs`.
    pub name: String,
    /// The folder.
    pub dir: PathBuf,
    /// What happened.
    pub outcome: Outcome,
}

impl fmt::Display for TestResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Pass {
                max_abs,
                loose,
                specialised,
            } => {
                write!(f, "pass {} (max abs err {max_abs:.3e}", self.name)?;
                if *loose {
                    write!(f, ", within atol {ATOL_F32:e} only")?;
                }
                if !specialised.is_empty() {
                    write!(f, ", compile-time inputs: {}", specialised.join(", "))?;
                }
                write!(f, ")")
            }
            Outcome::Fail { reason } => write!(f, "FAIL {}: {reason}", self.name),
            Outcome::Unsupported { reason } => write!(f, "unsupported {}: {reason}", self.name),
        }
    }
}

/// The results of a conformance run, in the order the tests ran.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// One entry per test folder.
    pub results: Vec<TestResult>,
}

impl Report {
    /// Number of passing tests.
    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Pass { .. }))
    }

    /// Number of failing tests.
    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Fail { .. }))
    }

    /// Number of tests using unsupported features.
    pub fn unsupported(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Unsupported { .. }))
    }

    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.results.iter().filter(|r| f(&r.outcome)).count()
    }

    /// The closing line: `N passed, N failed, N unsupported`.
    pub fn summary(&self) -> String {
        format!(
            "{} passed, {} failed, {} unsupported",
            self.passed(),
            self.failed(),
            self.unsupported()
        )
    }

    /// One line per test, then the summary line.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for r in &self.results {
            let _ = writeln!(s, "{r}");
        }
        let _ = writeln!(s, "{}", self.summary());
        s
    }

    /// Process exit status: 0 when nothing failed, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.failed() > 0)
    }
}

/// Why a conformance run could not start (a usage error).
#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    /// A path given on the command line is not a folder.
    #[error("`{0}` is not a directory")]
    NotADir(String),
    /// A folder holds no `model.onnx`, nor sub-folders that do.
    #[error("`{0}` contains no ONNX test (a folder with model.onnx, or a folder of such folders)")]
    NoTests(String),
    /// No path was given.
    #[error("no test directory given")]
    NoDirs,
    /// The GPU adapter asked for could not be opened: said once, not as
    /// a failure of every test.
    #[error("gpu backend: {0}")]
    Gpu(String),
}

/// Expands the command-line folders into test folders: a folder with
/// `model.onnx` is one test; otherwise its sub-folders that have one are
/// the tests, sorted by name.
pub fn discover(dirs: &[PathBuf]) -> Result<Vec<PathBuf>, ConformanceError> {
    if dirs.is_empty() {
        return Err(ConformanceError::NoDirs);
    }
    let mut tests = vec![];
    for d in dirs {
        if !d.is_dir() {
            return Err(ConformanceError::NotADir(d.display().to_string()));
        }
        if d.join("model.onnx").is_file() {
            tests.push(d.clone());
            continue;
        }
        let mut sub: Vec<PathBuf> = std::fs::read_dir(d)
            .map_err(|_| ConformanceError::NotADir(d.display().to_string()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("model.onnx").is_file())
            .collect();
        if sub.is_empty() {
            return Err(ConformanceError::NoTests(d.display().to_string()));
        }
        sub.sort();
        tests.extend(sub);
    }
    Ok(tests)
}

/// Runs every test under `dirs` (see [`discover`]) on the interpreter,
/// calling `progress` after each one so a caller can stream lines.
pub fn run_dirs(
    dirs: &[PathBuf],
    progress: &mut dyn FnMut(&TestResult),
) -> Result<Report, ConformanceError> {
    run_dirs_on(dirs, Backend::Interp, progress)
}

/// [`run_dirs`] on a chosen backend, so the same expected-pass list can
/// hold for compiled code as for the interpreter.
pub fn run_dirs_on(
    dirs: &[PathBuf],
    backend: Backend,
    progress: &mut dyn FnMut(&TestResult),
) -> Result<Report, ConformanceError> {
    run_dirs_with(dirs, backend, false, progress)
}

/// [`run_dirs_on`], with `optimize`: each imported graph goes through the
/// optimisation pipeline (`dnnc_passes::Pipeline`, the e-graph included)
/// before it runs, so the conformance data checks the rewrites too.
pub fn run_dirs_with(
    dirs: &[PathBuf],
    backend: Backend,
    optimize: bool,
    progress: &mut dyn FnMut(&TestResult),
) -> Result<Report, ConformanceError> {
    run_dirs_on_adapter(dirs, backend, optimize, &Default::default(), progress)
}

/// [`run_dirs_with`] on the GPU adapter `adapter` when `backend` is
/// [`Backend::Gpu`] (`dnnc onnx-test --adapter`): adapters' shader
/// compilers differ (llvmpipe's GL once mirrored a reflect Pad that
/// lavapipe's Vulkan got right), so each is worth checking.
pub fn run_dirs_on_adapter(
    dirs: &[PathBuf],
    backend: Backend,
    optimize: bool,
    adapter: &dnnc_runtime::gpu::AdapterChoice,
    progress: &mut dyn FnMut(&TestResult),
) -> Result<Report, ConformanceError> {
    if backend == Backend::Gpu {
        shared_gpu(adapter).map_err(ConformanceError::Gpu)?;
    }
    let tests = discover(dirs)?;
    let mut report = Report::default();
    for t in tests {
        let r = run_test_at(&t, backend, optimize, adapter);
        progress(&r);
        report.results.push(r);
    }
    Ok(report)
}

/// Runs one test folder on the interpreter. Never panics: a panic inside
/// the importer or the interpreter is reported as a failure.
pub fn run_test(dir: &Path) -> TestResult {
    run_test_on(dir, Backend::Interp)
}

/// [`run_test`] on a chosen backend; on `Cpu` a graph the code generator
/// rejects is a failure (the interpreter is never a fallback).
pub fn run_test_on(dir: &Path, backend: Backend) -> TestResult {
    run_test_with(dir, backend, false)
}

/// [`run_test_on`], optimising the graph first when `optimize` (see
/// [`run_dirs_with`]).
pub fn run_test_with(dir: &Path, backend: Backend, optimize: bool) -> TestResult {
    run_test_at(dir, backend, optimize, &Default::default())
}

/// [`run_test_with`] on the GPU adapter `adapter` (see
/// [`run_dirs_on_adapter`]).
fn run_test_at(
    dir: &Path,
    backend: Backend,
    optimize: bool,
    adapter: &dnnc_runtime::gpu::AdapterChoice,
) -> TestResult {
    let name = dir
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string());
    let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        try_test(dir, backend, optimize, adapter)
    })) {
        Ok(Ok(o)) => o,
        Ok(Err(o)) => o,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Outcome::Fail {
                reason: format!("panicked: {msg}"),
            }
        }
    };
    TestResult {
        name,
        dir: dir.to_path_buf(),
        outcome,
    }
}

fn fail(reason: impl Into<String>) -> Outcome {
    Outcome::Fail {
        reason: reason.into(),
    }
}

fn unsupported(reason: impl Into<String>) -> Outcome {
    Outcome::Unsupported {
        reason: reason.into(),
    }
}

fn read(path: &Path) -> Result<Vec<u8>, Outcome> {
    std::fs::read(path).map_err(|e| fail(format!("cannot read `{}`: {e}", path.display())))
}

/// dnnc's run-time tensor dtypes, as ONNX codes.
fn dnnc_dtype(code: i32) -> bool {
    matches!(
        DataType::try_from(code),
        Ok(DataType::Float | DataType::Int64 | DataType::Bool)
    )
}

fn dtype_name(code: i32) -> String {
    DataType::try_from(code)
        .map(|d| d.as_str_name().to_string())
        .unwrap_or_else(|_| format!("data type {code}"))
}

/// Why the graph's inputs/outputs are outside what dnnc runs, if they are.
fn io_unsupported(model: &ModelProto) -> Option<String> {
    let g = model.graph.as_ref()?;
    let inits: std::collections::HashSet<&str> = g.initializer.iter().map(|t| t.name()).collect();
    let ios = g
        .input
        .iter()
        .filter(|v| !inits.contains(v.name()))
        .map(|v| ("input", v))
        .chain(g.output.iter().map(|v| ("output", v)));
    for (kind, v) in ios {
        match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(type_proto::Value::TensorType(tt)) => {
                let code = tt.elem_type.unwrap_or(0);
                if !dnnc_dtype(code) {
                    return Some(format!(
                        "graph {kind} `{}` is {}; dnnc computes in FLOAT, INT64 and BOOL",
                        v.name(),
                        dtype_name(code)
                    ));
                }
            }
            Some(type_proto::Value::SequenceType(_)) => {
                return Some(format!(
                "graph {kind} `{}` is a sequence (SequenceProto test data); dnnc has tensors only",
                v.name()
            ))
            }
            Some(type_proto::Value::OptionalType(_)) => {
                return Some(format!(
                "graph {kind} `{}` is an optional (OptionalProto test data); dnnc has tensors only",
                v.name()
            ))
            }
            Some(type_proto::Value::MapType(_)) => {
                return Some(format!(
                    "graph {kind} `{}` is a map; dnnc has tensors only",
                    v.name()
                ))
            }
            _ => {
                return Some(format!(
                    "graph {kind} `{}` has no tensor type; dnnc has dense tensors only",
                    v.name()
                ))
            }
        }
    }
    None
}

/// `prefix_K.pb` files of a data set, ordered by K.
fn numbered(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>, Outcome> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| fail(format!("cannot list `{}`: {e}", dir.display())))?;
    let mut v: Vec<(u64, PathBuf)> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let f = p.file_name()?.to_str()?;
            let k = f.strip_prefix(prefix)?.strip_suffix(".pb")?.parse().ok()?;
            Some((k, p))
        })
        .collect();
    v.sort();
    for (i, (k, p)) in v.iter().enumerate() {
        if *k != i as u64 {
            return Err(fail(format!(
                "`{}`: {prefix}N.pb files are not numbered 0, 1, 2...",
                p.display()
            )));
        }
    }
    Ok(v.into_iter().map(|(_, p)| p).collect())
}

/// The test-data set folders, ordered by N.
fn data_sets(dir: &Path) -> Result<Vec<PathBuf>, Outcome> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| fail(format!("cannot list `{}`: {e}", dir.display())))?;
    let mut v: Vec<(u64, PathBuf)> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .filter_map(|p| {
            let k = p
                .file_name()?
                .to_str()?
                .strip_prefix("test_data_set_")?
                .parse()
                .ok()?;
            Some((k, p))
        })
        .collect();
    v.sort();
    Ok(v.into_iter().map(|(_, p)| p).collect())
}

fn read_tensor(path: &Path) -> Result<(TensorProto, Tensor), Outcome> {
    let bytes = read(path)?;
    let tp = TensorProto::decode(bytes.as_slice()).map_err(|e| {
        fail(format!(
            "`{}` is not a TensorProto ({e}); SequenceProto/OptionalProto data is not supported",
            path.display()
        ))
    })?;
    match decode_tensor_proto(&tp, &path.display().to_string()) {
        Ok(Some(t)) => Ok((tp, t)),
        Ok(None) => Err(unsupported(format!(
            "`{}` holds {} data",
            path.display(),
            dtype_name(tp.data_type.unwrap_or(0))
        ))),
        Err(e) => Err(fail(format!("`{}`: {e}", path.display()))),
    }
}

/// Pins graph input `idx`'s shape to `dims` (the data's), so symbolic
/// dimensions import.
fn pin_shape(model: &mut ModelProto, name: &str, dims: &[i64]) {
    use crate::onnx::proto::{tensor_shape_proto::dimension::Value as Dim, TensorShapeProto};
    let Some(g) = model.graph.as_mut() else {
        return;
    };
    let Some(vi) = g.input.iter_mut().find(|v| v.name() == name) else {
        return;
    };
    if let Some(type_proto::Value::TensorType(tt)) =
        vi.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        let mut shape = TensorShapeProto::default();
        for &d in dims {
            shape
                .dim
                .push(crate::onnx::proto::tensor_shape_proto::Dimension {
                    value: Some(Dim::DimValue(d)),
                    ..Default::default()
                });
        }
        tt.shape = Some(shape);
    }
}

fn import_outcome(e: OnnxError) -> Outcome {
    match e {
        OnnxError::Unsupported(nodes) => unsupported(
            nodes
                .iter()
                .map(|n| format!("{} ({}): {}", n.node, n.op_type, n.reason))
                .collect::<Vec<_>>()
                .join("; "),
        ),
        e @ (OnnxError::Opset { .. } | OnnxError::InputType { .. }) => unsupported(e.to_string()),
        e => fail(format!("import failed: {e}")),
    }
}

fn try_test(
    dir: &Path,
    backend: Backend,
    optimize: bool,
    adapter: &dnnc_runtime::gpu::AdapterChoice,
) -> Result<Outcome, Outcome> {
    let bytes = read(&dir.join("model.onnx"))?;
    let model = ModelProto::decode(bytes.as_slice())
        .map_err(|e| fail(format!("model.onnx is not a ModelProto: {e}")))?;
    if let Some(why) = io_unsupported(&model) {
        return Ok(unsupported(why));
    }
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| fail("model.onnx has no graph"))?;
    let inits: std::collections::HashSet<&str> =
        graph.initializer.iter().map(|t| t.name()).collect();
    let inputs: Vec<String> = graph
        .input
        .iter()
        .filter(|v| !inits.contains(v.name()))
        .map(|v| v.name().to_string())
        .collect();
    let sets = data_sets(dir)?;
    if sets.is_empty() {
        return Err(fail("no test_data_set_N folder"));
    }
    let (mut max_abs, mut loose) = (0f64, false);
    let mut specialised: Vec<String> = vec![];
    for set in &sets {
        let set_name = set
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let in_files = numbered(set, "input_")?;
        let out_files = numbered(set, "output_")?;
        if in_files.len() > inputs.len() {
            return Err(fail(format!(
                "{set_name}: {} input files for {} graph inputs",
                in_files.len(),
                inputs.len()
            )));
        }
        let mut feeds: Vec<(String, Tensor)> = vec![];
        let mut protos: Vec<TensorProto> = vec![];
        let mut pinned = model.clone();
        for (k, f) in in_files.iter().enumerate() {
            let (tp, t) = read_tensor(f)?;
            let name = match tp.name() {
                n if !n.is_empty() && inputs.iter().any(|i| i == n) => n.to_string(),
                _ => inputs[k].clone(),
            };
            if feeds.iter().any(|(n, _)| *n == name) {
                return Err(fail(format!("{set_name}: input `{name}` is given twice")));
            }
            pin_shape(&mut pinned, &name, &tp.dims);
            feeds.push((name, t));
            protos.push(tp);
        }
        let file = dir.join("model.onnx").display().to_string();
        let g = loop {
            match import_model_proto(&pinned, &file) {
                Ok(g) => break g,
                Err(OnnxError::Unsupported(nodes)) => {
                    // Operands dnnc needs at compile time (axes, pads,
                    // sizes...) fed as graph inputs: bind the test's values.
                    let needed: Vec<String> = nodes
                        .iter()
                        .filter_map(|n| needs_constant(&n.reason))
                        .collect();
                    let mut wanted: Vec<String> = needed
                        .iter()
                        .filter(|n| feeds.iter().any(|(f, _)| f == *n))
                        .cloned()
                        .collect();
                    if wanted.is_empty() && !needed.is_empty() {
                        // Computed from inputs (e.g. pads from a shape
                        // input): bind the integer inputs, which are the
                        // shape-like ones.
                        wanted = feeds
                            .iter()
                            .filter(|(_, t)| t.dtype() == dnnc_ir::DType::I64)
                            .map(|(f, _)| f.clone())
                            .collect();
                    }
                    if wanted.is_empty() {
                        return Err(import_outcome(OnnxError::Unsupported(nodes)));
                    }
                    for name in wanted {
                        let k = feeds.iter().position(|(f, _)| *f == name).unwrap_or(0);
                        feeds.remove(k);
                        let mut tp = protos.remove(k);
                        tp.name = Some(name.clone());
                        if let Some(g) = pinned.graph.as_mut() {
                            g.initializer.push(tp);
                        }
                        if !specialised.contains(&name) {
                            specialised.push(name);
                        }
                    }
                }
                Err(e) => return Err(import_outcome(e)),
            }
        };
        if let Err(errs) = dnnc_ir::verify(&g) {
            let msg: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
            return Err(fail(format!(
                "the imported graph does not verify: {}",
                msg.join("; ")
            )));
        }
        if out_files.len() != g.outputs().len() {
            return Err(fail(format!(
                "{set_name}: {} expected outputs but the graph has {}",
                out_files.len(),
                g.outputs().len()
            )));
        }
        let mut g = g;
        if optimize {
            dnnc_passes::Pipeline::default()
                .run(&mut g)
                .map_err(|e| fail(format!("optimisation pipeline: {e}")))?;
        }
        let results = match backend {
            Backend::Interp => dnnc_runtime::run(&g, &feeds)
                .map_err(|e| fail(format!("{set_name}: run failed: {e}")))?,
            Backend::Cpu => {
                let opts = crate::codegen::cpu::CpuOptions::default();
                let exe = crate::codegen::cpu::compile_cpu(&g, &opts)
                    .map_err(|e| fail(format!("cpu backend: {e}")))?;
                exe.run(&feeds)
                    .map_err(|e| fail(format!("{set_name}: run failed: {e}")))?
            }
            Backend::Gpu => {
                let dev = shared_gpu(adapter).map_err(|e| fail(format!("gpu backend: {e}")))?;
                let opts = crate::codegen::gpu::GpuOptions {
                    limits: dev.limits(),
                    ..Default::default()
                };
                let program = crate::codegen::gpu::compile_gpu(&g, &opts)
                    .map_err(|e| fail(format!("gpu backend: {e}")))?;
                let exe = dnnc_runtime::gpu::GpuExecutable::new(dev, program)
                    .map_err(|e| fail(format!("gpu backend: {e}")))?;
                exe.run(&feeds)
                    .map_err(|e| fail(format!("{set_name}: run failed: {e}")))?
            }
        };
        for (k, (f, got)) in out_files.iter().zip(&results).enumerate() {
            let (_, want) = read_tensor(f)?;
            let out_name = g.value(g.outputs()[k]).name.clone();
            match compare(got, &want) {
                Ok(c) => {
                    max_abs = max_abs.max(c.max_abs);
                    loose |= c.loose;
                }
                Err(why) => {
                    return Err(fail(format!("{set_name}: output {k} `{out_name}`: {why}")))
                }
            }
        }
    }
    Ok(Outcome::Pass {
        max_abs,
        loose,
        specialised,
    })
}

/// The GPU adapter `choice` names, opened once per process: the
/// conformance suite compiles hundreds of small graphs.
fn shared_gpu(
    choice: &dnnc_runtime::gpu::AdapterChoice,
) -> Result<std::sync::Arc<dnnc_runtime::gpu::GpuDevice>, String> {
    type Opened = (
        dnnc_runtime::gpu::AdapterChoice,
        Result<std::sync::Arc<dnnc_runtime::gpu::GpuDevice>, String>,
    );
    static DEVS: std::sync::Mutex<Vec<Opened>> = std::sync::Mutex::new(Vec::new());
    let mut devs = DEVS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, d)) = devs.iter().find(|(c, _)| c == choice) {
        return d.clone();
    }
    let d = dnnc_runtime::gpu::GpuDevice::open(choice).map_err(|e| e.to_string());
    devs.push((choice.clone(), d.clone()));
    d
}

/// The graph value an importer "must be a constant" reason names: the
/// reason reads "input I (what, `NAME`) must be a constant ...".
fn needs_constant(reason: &str) -> Option<String> {
    let end = reason.find("`) must be a constant")?;
    let start = reason[..end].rfind('`')? + 1;
    Some(reason[start..end].to_string())
}

/// A successful comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Compared {
    /// Largest absolute difference (0 for exact dtypes).
    pub max_abs: f64,
    /// True when [`ATOL_F32`] was needed.
    pub loose: bool,
}

/// Compares an output with its reference under the module's tolerance rule;
/// `Err` says how they differ (shape, dtype, or the max error and where).
pub fn compare(got: &Tensor, want: &Tensor) -> Result<Compared, String> {
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?} but expected {:?}",
            got.shape(),
            want.shape()
        ));
    }
    match (got, want) {
        (Tensor::F32(a), Tensor::F32(e)) => {
            let (mut max_abs, mut worst) = (0f64, None);
            let (mut bad_strict, mut bad_loose) = (0usize, 0usize);
            for (i, (&a, &e)) in a.iter().zip(e.iter()).enumerate() {
                let (a, e) = (a as f64, e as f64);
                if a.is_nan() && e.is_nan() {
                    continue;
                }
                if e.is_infinite() || a.is_infinite() {
                    if a != e {
                        bad_strict += 1;
                        bad_loose += 1;
                        worst.get_or_insert((i, a, e));
                    }
                    continue;
                }
                let d = (a - e).abs();
                if d.is_nan() {
                    bad_strict += 1;
                    bad_loose += 1;
                    worst.get_or_insert((i, a, e));
                    continue;
                }
                if d > ATOL + RTOL * e.abs() {
                    bad_strict += 1;
                }
                if d > ATOL_F32 + RTOL * e.abs() {
                    bad_loose += 1;
                }
                if d > max_abs {
                    max_abs = d;
                    if bad_loose > 0 || worst.is_none() {
                        worst = Some((i, a, e));
                    }
                }
            }
            if bad_loose == 0 {
                return Ok(Compared {
                    max_abs,
                    loose: bad_strict > 0,
                });
            }
            let (i, a, e) = worst.unwrap_or((0, f64::NAN, f64::NAN));
            Err(format!(
                "max abs err {max_abs:.3e}; {bad_loose} of {} elements outside rtol {RTOL:e} + atol {ATOL_F32:e} (e.g. flat index {i}: got {a}, expected {e})",
                got.numel()
            ))
        }
        (Tensor::I64(a), Tensor::I64(e)) => exact(a.iter().zip(e.iter()), a.len()),
        (Tensor::Bool(a), Tensor::Bool(e)) => exact(a.iter().zip(e.iter()), a.len()),
        _ => Err(format!(
            "dtype {} but expected {}",
            got.dtype(),
            want.dtype()
        )),
    }
}

fn exact<'a, T: PartialEq + fmt::Debug + 'a>(
    pairs: impl Iterator<Item = (&'a T, &'a T)>,
    n: usize,
) -> Result<Compared, String> {
    let mut bad = 0;
    let mut first = None;
    for (i, (a, e)) in pairs.enumerate() {
        if a != e {
            bad += 1;
            first.get_or_insert(format!("flat index {i}: got {a:?}, expected {e:?}"));
        }
    }
    match first {
        None => Ok(Compared {
            max_abs: 0.0,
            loose: false,
        }),
        Some(f) => Err(format!("{bad} of {n} elements differ (e.g. {f})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{ArrayD, IxDyn};

    fn f(v: &[f32]) -> Tensor {
        Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap())
    }

    #[test]
    fn tolerance_rule() {
        assert!(!compare(&f(&[1.0, 2.0]), &f(&[1.0, 2.0])).unwrap().loose);
        // Relative 1e-3 of 1000 is 1.
        assert!(compare(&f(&[1000.9]), &f(&[1000.0])).is_ok());
        assert!(compare(&f(&[1002.0]), &f(&[1000.0])).is_err());
        // Near zero: 5e-6 passes only under the float32 atol.
        let c = compare(&f(&[5e-6]), &f(&[0.0])).unwrap();
        assert!(c.loose);
        assert!(compare(&f(&[5e-5]), &f(&[0.0])).is_err());
        assert!(compare(&f(&[f32::NAN]), &f(&[f32::NAN])).is_ok());
        assert!(compare(&f(&[f32::NAN]), &f(&[0.0])).is_err());
        assert!(compare(&f(&[f32::INFINITY]), &f(&[f32::INFINITY])).is_ok());
        assert!(compare(&f(&[f32::INFINITY]), &f(&[f32::NEG_INFINITY])).is_err());
        assert!(compare(&f(&[1.0]), &f(&[1.0, 2.0])).is_err());
        let i = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[1]), vec![1]).unwrap());
        assert!(compare(&f(&[1.0]), &i).unwrap_err().contains("dtype"));
        assert!(compare(&i, &i).is_ok());
    }

    #[test]
    fn summary_line_format() {
        let mut r = Report::default();
        r.results.push(TestResult {
            name: "t".into(),
            dir: "t".into(),
            outcome: Outcome::Unsupported { reason: "x".into() },
        });
        assert_eq!(
            needs_constant("input 1 (axes, `ax`) must be a constant (an initializer...)"),
            Some("ax".into())
        );
        assert_eq!(r.summary(), "0 passed, 0 failed, 1 unsupported");
        assert_eq!(r.exit_code(), 0);
    }
}
