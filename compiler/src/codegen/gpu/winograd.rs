//! Winograd F(2x2,3x3) convolution on the GPU (Lavin & Gray): three
//! stages in one kernel.
//!
//! 1. Input transform: each 4x4 input patch `d` of a 2x2 output tile
//!    becomes `V = Bᵀ d B`, stored as 16 matrices `V[ξ]` of `C x T`
//!    (channels by tiles) in scratch.
//! 2. 16 independent GEMMs `M[ξ] = U[ξ] · V[ξ]` (`Co x C` by `C x T`),
//!    the tiled GEMM template with the batch on grid z. `U = G g Gᵀ` is
//!    the filter transformed at compile time and stored with the weights.
//! 3. Output transform: `Y = Aᵀ M A` per tile and output channel, then the
//!    bias and the fused epilogue on each of the 2x2 outputs in range.
//!
//! The multiply count drops from 36 to 16 per tile and channel pair; the
//! transforms are elementwise stages of depth 1.

use super::contraction::{gemm_stages, ConvGeom, Gemm};
use super::point::Point;
use super::wgsl::{digits, flat_stage, Loc};
use super::GCtx;
use dnnc_ir::{Tensor, ValueId};
use dnnc_runtime::gpu::GpuStage;
use std::collections::HashMap;
use std::fmt::Write;

/// `G g Gᵀ` for one 3x3 filter `g` (row-major), as 16 values.
fn filter_transform(g: &[f32]) -> [f32; 16] {
    const G: [[f32; 3]; 4] = [
        [1.0, 0.0, 0.0],
        [0.5, 0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.0, 0.0, 1.0],
    ];
    let mut t = [[0f32; 3]; 4];
    for i in 0..4 {
        for j in 0..3 {
            t[i][j] = (0..3).map(|k| G[i][k] * g[k * 3 + j]).sum();
        }
    }
    let mut u = [0f32; 16];
    for i in 0..4 {
        for j in 0..4 {
            u[i * 4 + j] = (0..3).map(|k| t[i][k] * G[j][k]).sum();
        }
    }
    u
}

/// The three stages of a Winograd convolution of `gmt` with `filter`.
pub(crate) fn lower(
    cx: &mut GCtx<'_>,
    gmt: &ConvGeom,
    filter: &Tensor,
    lx: Loc,
    lb: Option<Loc>,
    out: ValueId,
) -> Result<Vec<GpuStage>, String> {
    let Tensor::F32(f) = filter else {
        return Err("Winograd needs an f32 filter".into());
    };
    let f: Vec<f32> = f.iter().copied().collect();
    let ConvGeom {
        n,
        c,
        h,
        w,
        co,
        oh,
        ow,
        p,
        ..
    } = *gmt;
    let (th, tw) = (oh.div_ceil(2), ow.div_ceil(2));
    let tiles = n * th * tw;
    // U[ξ][co][ci].
    let mut u = vec![0u32; 16 * co * c];
    for o in 0..co {
        for i in 0..c {
            let t = filter_transform(&f[(o * c + i) * 9..(o * c + i) * 9 + 9]);
            for (xi, v) in t.iter().enumerate() {
                u[(xi * co + o) * c + i] = v.to_bits();
            }
        }
    }
    let lu = cx.add_weights(&u);
    let lv = cx.scratch(16 * c * tiles);
    let lm = cx.scratch(16 * co * tiles);

    // Stage 1: V = Bᵀ d B per (channel, tile).
    let mut body = String::new();
    let _ = writeln!(
        body,
        "  let t = gi % {tiles}u; let ci = gi / {tiles}u;\n\
         \x20 let img = t / {thw}u; let tr = t % {thw}u; let ty = tr / {tw}u; let tx = tr % {tw}u;\n\
         \x20 var d: array<f32, 16>;\n\
         \x20 for (var r = 0u; r < 4u; r = r + 1u) {{\n\
         \x20   let iy = i32(ty * 2u + r) - {ph}i;\n\
         \x20   for (var q = 0u; q < 4u; q = q + 1u) {{\n\
         \x20     let ix = i32(tx * 2u + q) - {pw}i;\n\
         \x20     var v = 0.0;\n\
         \x20     if (iy >= 0i && ix >= 0i && iy < {h}i && ix < {w}i) {{ v = {x}; }}\n\
         \x20     d[r * 4u + q] = v;\n\
         \x20   }}\n\
         \x20 }}\n\
         \x20 var e: array<f32, 16>;\n\
         \x20 for (var q = 0u; q < 4u; q = q + 1u) {{\n\
         \x20   e[q] = d[q] - d[8u + q];\n\
         \x20   e[4u + q] = d[4u + q] + d[8u + q];\n\
         \x20   e[8u + q] = d[8u + q] - d[4u + q];\n\
         \x20   e[12u + q] = d[4u + q] - d[12u + q];\n\
         \x20 }}\n\
         \x20 for (var r = 0u; r < 4u; r = r + 1u) {{\n\
         \x20   let v0 = e[r * 4u] - e[r * 4u + 2u];\n\
         \x20   let v1 = e[r * 4u + 1u] + e[r * 4u + 2u];\n\
         \x20   let v2 = e[r * 4u + 2u] - e[r * 4u + 1u];\n\
         \x20   let v3 = e[r * 4u + 1u] - e[r * 4u + 3u];\n\
         \x20   {s0}\n   {s1}\n   {s2}\n   {s3}\n\
         \x20 }}",
        thw = th * tw,
        ph = p[0],
        pw = p[1],
        x = lx.load(&format!("((img * {c}u + ci) * {h}u + u32(iy)) * {w}u + u32(ix)")),
        s0 = lv.store(&format!("((r * 4u) * {c}u + ci) * {tiles}u + t"), "v0"),
        s1 = lv.store(&format!("((r * 4u + 1u) * {c}u + ci) * {tiles}u + t"), "v1"),
        s2 = lv.store(&format!("((r * 4u + 2u) * {c}u + ci) * {tiles}u + t"), "v2"),
        s3 = lv.store(&format!("((r * 4u + 3u) * {c}u + ci) * {tiles}u + t"), "v3"),
    );
    let mut stages = vec![flat_stage(
        &cx.label("winograd-input"),
        c * tiles,
        cx.limits(),
        "",
        &body,
    )];

    // Stage 2: 16 GEMMs.
    let a = lu.load(&format!("(bb * {co}u + gm) * {c}u + gk"));
    let b = lv.load(&format!("(bb * {c}u + gk) * {tiles}u + gn"));
    let store = format!(
        "      {}\n",
        lm.store(&format!("(bb * {co}u + gm) * {tiles}u + gn"), "acc")
    );
    stages.extend(gemm_stages(
        cx,
        "winograd-gemm",
        &Gemm {
            m: co,
            n: tiles,
            k: c,
            batch: 16,
            a: &a,
            b: &b,
            store: &store,
            prologue: "",
            decls: "",
        },
    ));

    // Stage 3: Y = Aᵀ M A, bias, epilogue.
    let shape = cx.g.value(out).ty.shape.clone();
    let loc = cx.locf();
    let mut body = String::new();
    let _ = writeln!(
        body,
        "  let t = gi % {tiles}u; let o = gi / {tiles}u;\n\
         \x20 let img = t / {thw}u; let tr = t % {thw}u; let ty = tr / {tw}u; let tx = tr % {tw}u;\n\
         \x20 var m: array<f32, 16>;\n\
         \x20 for (var xi = 0u; xi < 16u; xi = xi + 1u) {{ m[xi] = {ml}; }}\n\
         \x20 var r: array<f32, 8>;\n\
         \x20 for (var q = 0u; q < 4u; q = q + 1u) {{\n\
         \x20   r[q] = m[q] + m[4u + q] + m[8u + q];\n\
         \x20   r[4u + q] = m[4u + q] - m[8u + q] - m[12u + q];\n\
         \x20 }}\n\
         \x20 var y: array<f32, 4>;\n\
         \x20 for (var i = 0u; i < 2u; i = i + 1u) {{\n\
         \x20   y[i * 2u] = r[i * 4u] + r[i * 4u + 1u] + r[i * 4u + 2u];\n\
         \x20   y[i * 2u + 1u] = r[i * 4u + 1u] - r[i * 4u + 2u] - r[i * 4u + 3u];\n\
         \x20 }}",
        thw = th * tw,
        ml = lm.load(&format!("(xi * {co}u + o) * {tiles}u + t")),
    );
    let mut per_output = String::new();
    let _ = writeln!(
        per_output,
        "    let oy = ty * 2u + i / 2u; let ox = tx * 2u + i % 2u;\n\
         \x20   if (oy < {oh}u && ox < {ow}u) {{\n\
         \x20   let acc = y[i]{bias};\n\
         \x20   let oi = ((img * {co}u + o) * {oh}u + oy) * {ow}u + ox;",
        bias = lb
            .map(|l| format!(" + {}", l.load("o")))
            .unwrap_or_default(),
    );
    let mut pt = Point {
        g: cx.g,
        shape: &shape,
        prefix: "o",
        known: HashMap::from([(out, "acc".to_string())]),
    };
    per_output += &digits("oi", &shape, "o");
    per_output += &pt.eval(cx.epilogue(), &loc)?;
    per_output += &pt.store_outputs(&cx.k.outputs, "oi", &loc)?;
    let _ = write!(
        body,
        "  for (var i = 0u; i < 4u; i = i + 1u) {{\n{per_output}    }}\n  }}\n"
    );
    stages.push(flat_stage(
        &cx.label("winograd-output"),
        co * tiles,
        cx.limits(),
        "",
        &body,
    ));
    Ok(stages)
}

#[cfg(test)]
mod tests {
    use super::filter_transform;

    #[test]
    fn filter_transform_of_a_delta_is_g_column_products() {
        // g = centre tap 1: U = G[:,1] G[:,1]ᵀ.
        let mut g = [0f32; 9];
        g[4] = 1.0;
        let u = filter_transform(&g);
        let c = [0.0, 0.5, -0.5, 0.0];
        for i in 0..4 {
            for j in 0..4 {
                assert_eq!(u[i * 4 + j], c[i] * c[j]);
            }
        }
    }
}
