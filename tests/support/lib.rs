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
