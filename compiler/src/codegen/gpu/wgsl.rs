//! WGSL text building blocks shared by every GPU lowering: where a value
//! lives ([`Loc`]), typed loads and stores, the common header, and the
//! grid arithmetic of a one-invocation-per-item shader.

use dnnc_ir::DType;
use dnnc_runtime::gpu::{GpuLimits, GpuStage};
use std::fmt::Write;

/// Which storage buffer a value lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Buf {
    /// `wts`, binding 0 (read-only): weights and constants.
    Weights,
    /// `act`, binding 1: the activation arena.
    Arena,
}

/// A value's place: buffer, word offset, element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    /// Buffer.
    pub buf: Buf,
    /// Word offset of element 0.
    pub offset: usize,
    /// Element type.
    pub dtype: DType,
}

/// The WGSL type a dtype computes in (`i64` runs as `i32`).
pub(crate) fn wty(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::I64 => "i32",
        DType::Bool => "bool",
    }
}

impl Loc {
    fn array(&self) -> &'static str {
        match self.buf {
            Buf::Weights => "wts",
            Buf::Arena => "act",
        }
    }

    /// The word at element index `idx` (a `u32` expression).
    pub fn word(&self, idx: &str) -> String {
        if self.offset == 0 {
            format!("{}[{idx}]", self.array())
        } else {
            format!("{}[{}u + ({idx})]", self.array(), self.offset)
        }
    }

    /// The element at `idx`, typed.
    pub fn load(&self, idx: &str) -> String {
        let w = self.word(idx);
        match self.dtype {
            DType::F32 => format!("bitcast<f32>({w})"),
            DType::I64 => format!("bitcast<i32>({w})"),
            DType::Bool => format!("({w} != 0u)"),
        }
    }

    /// A statement storing `val` (of this dtype) at `idx`.
    pub fn store(&self, idx: &str, val: &str) -> String {
        let w = self.word(idx);
        match self.dtype {
            DType::F32 | DType::I64 => format!("{w} = bitcast<u32>({val});"),
            DType::Bool => format!("{w} = select(0u, 1u, {val});"),
        }
    }
}

/// The bindings every shader declares (the runtime binds one group for
/// the whole program), and the helpers the point evaluator calls.
pub(crate) const HEADER: &str = "\
@group(0) @binding(0) var<storage, read> wts: array<u32>;
@group(0) @binding(1) var<storage, read_write> act: array<u32>;
";

/// Invocations per workgroup for one-item-per-invocation shaders.
pub(crate) fn flat_workgroup(l: &GpuLimits) -> u32 {
    256.min(l.max_invocations).min(l.max_size_x).max(1)
}

/// The grid for `groups` workgroups: `[x, y, 1]` with x within the
/// per-dimension limit.
pub(crate) fn grid(groups: usize, l: &GpuLimits) -> [u32; 3] {
    let max = l.max_groups_per_dim.max(1) as usize;
    let x = groups.clamp(1, max);
    let y = groups.div_ceil(x).max(1);
    [x as u32, y as u32, 1]
}

/// A shader running `body` once per item `gi` in `0..items`, with `decls`
/// (helper functions, `var<workgroup>`) before the entry point.
pub(crate) fn flat_stage(
    label: &str,
    items: usize,
    l: &GpuLimits,
    decls: &str,
    body: &str,
) -> GpuStage {
    let wg = flat_workgroup(l);
    let groups = items.div_ceil(wg as usize);
    let workgroups = grid(groups, l);
    let item = format!("(wid.y * {gx}u + wid.x) * {wg}u + lid", gx = workgroups[0]);
    stage(label, wg, workgroups, ("gi", &item, items), decls, body)
}

/// A shader with one workgroup of `wg` invocations per item `row` in
/// `0..rows`; `body` sees `row` and `lid`.
pub(crate) fn row_stage(
    label: &str,
    rows: usize,
    wg: u32,
    l: &GpuLimits,
    decls: &str,
    body: &str,
) -> GpuStage {
    let workgroups = grid(rows, l);
    let item = format!("wid.y * {gx}u + wid.x", gx = workgroups[0]);
    stage(label, wg, workgroups, ("row", &item, rows), decls, body)
}

/// The shader of [`flat_stage`] and [`row_stage`]: the header, helpers
/// and `decls`, then an entry point of `wg` invocations per workgroup
/// that binds `item = (name, expr, count)`'s `name` to `expr`, returns
/// when it is not below `count`, and runs `body`; dispatched over
/// `workgroups` (none when `count` is 0).
fn stage(
    label: &str,
    wg: u32,
    workgroups: [u32; 3],
    item: (&str, &str, usize),
    decls: &str,
    body: &str,
) -> GpuStage {
    let (name, expr, count) = item;
    let mut s = String::new();
    s.push_str(HEADER);
    s.push_str(crate::codegen::gpu::point::HELPERS);
    s.push_str(decls);
    let _ = write!(
        s,
        "\n@compute @workgroup_size({wg})\n\
         fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{\n\
         \x20 let {name} = {expr};\n\
         \x20 if ({name} >= {count}u) {{ return; }}\n{body}}}\n",
    );
    GpuStage {
        label: label.to_string(),
        wgsl: s,
        workgroups: if count == 0 { [0, 1, 1] } else { workgroups },
    }
}

/// Statements splitting the linear index `lin` into the digits `i0..`
/// of `shape` (row-major), each a `u32` named `{prefix}{axis}`.
pub(crate) fn digits(lin: &str, shape: &[usize], prefix: &str) -> String {
    let mut s = String::new();
    let r = shape.len();
    if r == 0 {
        return s;
    }
    let _ = writeln!(s, "  var {prefix}rem: u32 = {lin};");
    for a in (0..r).rev() {
        if a == 0 {
            let _ = writeln!(s, "  let {prefix}{a}: u32 = {prefix}rem;");
        } else {
            let _ = writeln!(
                s,
                "  let {prefix}{a}: u32 = {prefix}rem % {d}u; {prefix}rem = {prefix}rem / {d}u;",
                d = shape[a].max(1)
            );
        }
    }
    s
}

/// Row-major strides of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1usize; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        st[a] = st[a + 1] * shape[a + 1];
    }
    st
}

/// The `u32` linear index of the element of a value of shape `vshape`
/// that broadcasts to the point `{prefix}0..` of `shape` (numpy rules:
/// axes aligned on the right, size-1 axes read index 0).
pub(crate) fn broadcast_index(shape: &[usize], vshape: &[usize], prefix: &str) -> String {
    let r = shape.len();
    let rv = vshape.len();
    let st = strides(vshape);
    let mut terms = Vec::new();
    for (j, &d) in vshape.iter().enumerate() {
        if d == 1 || r + j < rv {
            continue;
        }
        let axis = r + j - rv;
        if st[j] == 1 {
            terms.push(format!("{prefix}{axis}"));
        } else {
            terms.push(format!("{prefix}{axis} * {}u", st[j]));
        }
    }
    if terms.is_empty() {
        "0u".to_string()
    } else {
        terms.join(" + ")
    }
}

/// An `f32` literal WGSL accepts (finite values; infinities and NaN by
/// bit pattern).
pub(crate) fn flit(x: f32) -> String {
    if x.is_finite() {
        let s = format!("{x:?}");
        if s.contains('.') || s.contains('e') {
            format!("f32({s})")
        } else {
            format!("f32({s}.0)")
        }
    } else {
        format!("bitcast<f32>({}u)", x.to_bits())
    }
}
