//! The contractions the tiled GEMM does not cover, each written directly
//! from the interpreter's definition (`dnnc_runtime::kernels`), which the
//! GPU tests compare with:
//!
//! - ConvTranspose2d: one invocation per output element gathering the
//!   input pixels that the interpreter's scatter sends to it (source
//!   position integral and in range), bias, then the fused epilogue;
//! - Einsum: one invocation per output element looping over the
//!   contracted index space (diagonals and broadcast size-1 axes by the
//!   interpreter's per-index strides), then the epilogue;
//! - Recurrent (RNN, GRU, LSTM): `X·Wᵀ + Wb` for every step at once into
//!   scratch, then one stage (two for GRU with `linear_before_reset = 0`,
//!   whose candidate needs the whole `r ⊙ h` row) per time step computing
//!   every (direction, batch, unit) from the previous state. Stages run in
//!   order, so each step sees the previous one's state.

use super::point::Point;
use super::wgsl::{digits, flat_stage, flit, Loc};
use super::GCtx;
use dnnc_ir::infer::einsum_sizes;
use dnnc_ir::op::{CellKind, EinsumSpec, Recurrent, RnnActivation, RnnDirection};
use dnnc_ir::{Op, ValueId};
use dnnc_runtime::gpu::GpuStage;
use std::collections::HashMap;
use std::fmt::Write;

/// Whether this module lowers `op` (the contraction anchors the GEMM
/// lowering rejects).
pub(crate) fn supports(op: &Op) -> bool {
    matches!(
        op,
        Op::ConvTranspose2d(_) | Op::Einsum { .. } | Op::Recurrent(_)
    )
}

/// The stages of the kernel anchored by a ConvTranspose2d, Einsum or
/// Recurrent node.
pub(crate) fn lower(cx: &mut GCtx<'_>) -> Result<Vec<GpuStage>, String> {
    let anchor = cx.anchor();
    match &cx.g.node(anchor).op {
        Op::ConvTranspose2d(c) => conv_transpose(cx, c),
        Op::Einsum { equation } => einsum(cx, equation),
        Op::Recurrent(r) => recurrent(cx, r),
        other => Err(format!(
            "{} has no lowering in the extended GPU lowerings",
            other.name()
        )),
    }
}

/// The static shape of `v`.
fn shape_of(cx: &GCtx<'_>, v: ValueId) -> Vec<usize> {
    cx.g.value(v).ty.shape.clone()
}

/// One stage: per output element of the anchor, `acc` computed by
/// `compute` (which sees the digits `o0..`), then the epilogue and the
/// kernel's stores.
fn per_output(cx: &GCtx<'_>, compute: &str) -> Result<Vec<GpuStage>, String> {
    let anchor_out = cx.g.node(cx.anchor()).outputs[0];
    let out_shape = shape_of(cx, anchor_out);
    let items: usize = out_shape.iter().product();
    for &v in &cx.k.outputs {
        if cx.g.value(v).ty.shape.iter().product::<usize>() > items {
            return Err(format!(
                "fused result `%{}` is larger than the contraction's",
                cx.g.value(v).name
            ));
        }
    }
    let loc = cx.locf();
    let mut p = Point {
        g: cx.g,
        shape: &out_shape,
        prefix: "o",
        known: HashMap::from([(anchor_out, "acc".to_string())]),
    };
    let mut body = digits("gi", &out_shape, "o");
    body += compute;
    body += &p.eval(cx.epilogue(), &loc)?;
    body += &p.store_outputs(&cx.k.outputs, "gi", &loc)?;
    Ok(vec![flat_stage(
        &cx.label(""),
        items,
        cx.limits(),
        "",
        &body,
    )])
}

/// `s` as the four NCHW dims, or why not.
fn rank4(s: &[usize], what: &str) -> Result<[usize; 4], String> {
    <[usize; 4]>::try_from(s).map_err(|_| format!("{what} must have rank 4, found {s:?}"))
}

/// ConvTranspose2d as a gather: output `(n, m, oy, ox)` takes input
/// `(iy, ix)` through tap `(i, j)` when `iy * stride + i * dilation -
/// pad = oy` (likewise for x).
fn conv_transpose(
    cx: &GCtx<'_>,
    c: &dnnc_ir::op::ConvTranspose2d,
) -> Result<Vec<GpuStage>, String> {
    let node = cx.g.node(cx.anchor());
    let [_, cin, h, wd] = rank4(&shape_of(cx, node.inputs[0]), "input")?;
    let [_, mg, kh, kw] = rank4(&shape_of(cx, node.inputs[1]), "weight")?;
    let [_, m, _, _] = rank4(&shape_of(cx, node.outputs[0]), "result")?;
    if c.group == 0 || cin % c.group != 0 || m != mg * c.group || c.strides.contains(&0) {
        return Err("inconsistent ConvTranspose2d channels or strides".into());
    }
    let cg = cin / c.group;
    let x = cx.loc(node.inputs[0])?;
    let w = cx.loc(node.inputs[1])?;
    let b = node.inputs.get(2).map(|&v| cx.loc(v)).transpose()?;
    let (sh, sw) = (c.strides[0], c.strides[1]);
    let (dh, dw) = (c.dilations[0], c.dilations[1]);
    let (pt, pl) = (c.pads[0], c.pads[1]);
    let mut s = String::new();
    let _ = write!(
        s,
        "  let grp = o1 / {mg}u;
  let mi = o1 % {mg}u;
  let oy = i32(o2);
  let ox = i32(o3);
  var acc: f32 = 0.0;
  for (var c: u32 = 0u; c < {cg}u; c = c + 1u) {{
    let ci = grp * {cg}u + c;
    for (var i: u32 = 0u; i < {kh}u; i = i + 1u) {{
      let ty = oy + {pt}i - i32(i) * {dh}i;
      if (ty < 0i || ty % {sh}i != 0i) {{ continue; }}
      let iy = ty / {sh}i;
      if (iy >= {h}i) {{ continue; }}
      for (var j: u32 = 0u; j < {kw}u; j = j + 1u) {{
        let tx = ox + {pl}i - i32(j) * {dw}i;
        if (tx < 0i || tx % {sw}i != 0i) {{ continue; }}
        let ix = tx / {sw}i;
        if (ix >= {wd}i) {{ continue; }}
        acc = acc + {xv} * {wv};
      }}
    }}
  }}
",
        xv = x.load(&format!(
            "((o0 * {cin}u + ci) * {h}u + u32(iy)) * {wd}u + u32(ix)"
        )),
        wv = w.load(&format!("((ci * {mg}u + mi) * {kh}u + i) * {kw}u + j")),
    );
    if let Some(b) = b {
        let _ = writeln!(s, "  acc = acc + {};", b.load("o1"));
    }
    per_output(cx, &s)
}

/// Einsum by direct summation: nested loops over the contracted indices,
/// each operand addressed by the interpreter's per-index strides.
fn einsum(cx: &GCtx<'_>, equation: &str) -> Result<Vec<GpuStage>, String> {
    let node = cx.g.node(cx.anchor());
    let spec = EinsumSpec::parse(equation)?;
    let shapes: Vec<Vec<usize>> = node.inputs.iter().map(|&v| shape_of(cx, v)).collect();
    let shape_refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
    let sizes = einsum_sizes(&spec, &shape_refs)?;
    let all = spec.all_indices();
    let dims: Vec<usize> = all
        .iter()
        .map(|&c| sizes.iter().find(|(l, _)| *l == c).map_or(1, |&(_, d)| d))
        .collect();
    let n_out = spec.output.len();
    let var = |j: usize| {
        if j < n_out {
            format!("o{j}")
        } else {
            format!("s{j}")
        }
    };
    let mut product = Vec::new();
    for (k, letters) in spec.inputs.iter().enumerate() {
        let s = &shapes[k];
        if letters.len() != s.len() {
            return Err(format!(
                "Einsum operand {k} has rank {} but {} indices",
                s.len(),
                letters.len()
            ));
        }
        let mut stride = vec![0usize; all.len()];
        let mut st = 1usize;
        for ax in (0..s.len()).rev() {
            if s[ax] != 1 {
                let j = all.iter().position(|&c| c == letters[ax]).unwrap_or(0);
                stride[j] += st;
            }
            st *= s[ax];
        }
        let terms: Vec<String> = stride
            .iter()
            .enumerate()
            .filter(|&(_, &st)| st != 0)
            .map(|(j, &st)| {
                if st == 1 {
                    var(j)
                } else {
                    format!("{} * {st}u", var(j))
                }
            })
            .collect();
        let idx = if terms.is_empty() {
            "0u".to_string()
        } else {
            terms.join(" + ")
        };
        product.push(cx.loc(node.inputs[k])?.load(&idx));
    }
    let mut s = String::from("  var acc: f32 = 0.0;\n");
    for (j, &d) in dims.iter().enumerate().skip(n_out) {
        let _ = writeln!(
            s,
            "  for (var s{j}: u32 = 0u; s{j} < {d}u; s{j} = s{j} + 1u) {{"
        );
    }
    let _ = writeln!(s, "  acc = acc + {};", product.join(" * "));
    for _ in n_out..dims.len() {
        s.push_str("  }\n");
    }
    per_output(cx, &s)
}

/// The WGSL expression of activation `a` at `x`, as the interpreter's
/// `act`.
fn activation(a: RnnActivation, x: &str) -> String {
    match a {
        RnnActivation::Relu => format!("max({x}, 0.0)"),
        RnnActivation::Tanh => format!("d_tanh({x})"),
        RnnActivation::Sigmoid => format!("d_sigmoid({x})"),
        RnnActivation::HardSigmoid { alpha, beta } => {
            format!("clamp({} * {x} + {}, 0.0, 1.0)", flit(alpha), flit(beta))
        }
    }
}

/// Helper functions of a recurrent layer's step shaders: `rnn_act{a}(d, x)`
/// (activation slot `a` of direction `d`) and `rnn_clip(x)`.
fn recurrent_decls(r: &Recurrent, dirs: usize) -> String {
    let per = r.cell.activations_per_direction();
    let mut s = String::new();
    for a in 0..per {
        let _ = writeln!(s, "fn rnn_act{a}(d: u32, x: f32) -> f32 {{");
        for d in 1..dirs {
            let _ = writeln!(
                s,
                "  if (d == {d}u) {{ return {}; }}",
                activation(r.activations[d * per + a], "x")
            );
        }
        let _ = writeln!(s, "  return {};\n}}", activation(r.activations[a], "x"));
    }
    if r.clip.is_finite() {
        let _ = writeln!(
            s,
            "fn rnn_clip(x: f32) -> f32 {{ return select(clamp(x, {lo}, {hi}), x, d_isnan(x)); }}",
            lo = flit(-r.clip),
            hi = flit(r.clip)
        );
    } else {
        s.push_str("fn rnn_clip(x: f32) -> f32 { return x; }\n");
    }
    s
}

/// A recurrent layer: the input projection of all steps, then the steps
/// in order (both directions of a step in one stage). The hidden state
/// alternates between two scratch buffers (every unit reads the whole
/// previous row); the LSTM cell state is per unit, so updated in place.
fn recurrent(cx: &mut GCtx<'_>, r: &Recurrent) -> Result<Vec<GpuStage>, String> {
    if !cx.epilogue().is_empty() {
        return Err("a recurrent layer takes no fused epilogue".into());
    }
    let node = cx.g.node(cx.anchor());
    let lstm = matches!(r.cell, CellKind::Lstm { .. });
    let xs = shape_of(cx, node.inputs[0]);
    let &[seq, batch, input] = xs.as_slice() else {
        return Err(format!("X must have rank 3, found {xs:?}"));
    };
    let (dirs, h, g) = (r.direction.count(), r.hidden_size, r.cell.gates());
    let per = r.cell.activations_per_direction();
    if r.activations.len() != dirs * per {
        return Err(format!(
            "{} activations given; {} needed",
            r.activations.len(),
            dirs * per
        ));
    }
    let need = if lstm { 6 } else { 5 };
    if node.inputs.len() < need {
        return Err(format!("takes {need} inputs, found {}", node.inputs.len()));
    }
    let gh = g * h;
    let x = cx.loc(node.inputs[0])?;
    let w = cx.loc(node.inputs[1])?;
    let rw = cx.loc(node.inputs[2])?;
    let bias = cx.loc(node.inputs[3])?;
    let h0 = cx.loc(node.inputs[4])?;
    let c0 = if lstm {
        Some(cx.loc(node.inputs[5])?)
    } else {
        None
    };
    let peep = if lstm {
        node.inputs.get(6).map(|&v| cx.loc(v)).transpose()?
    } else {
        None
    };
    // Results the kernel must write (a result nobody reads may lack one).
    let result = |i: usize| -> Result<Option<Loc>, String> {
        match node.outputs.get(i) {
            Some(v) if cx.k.outputs.contains(v) => cx.loc(*v).map(Some),
            _ => Ok(None),
        }
    };
    let (y, yh, yc) = (result(0)?, result(1)?, result(2)?);
    let state = dirs * batch * h;
    let limits = *cx.limits();

    if seq == 0 {
        // No step: the final states are the initial ones.
        let mut body = String::new();
        if let Some(yh) = yh {
            body += &format!("  {}\n", yh.store("gi", &h0.load("gi")));
        }
        if let (Some(yc), Some(c0)) = (yc, c0) {
            body += &format!("  {}\n", yc.store("gi", &c0.load("gi")));
        }
        return Ok(vec![flat_stage(
            &cx.label("init"),
            state,
            &limits,
            "",
            &body,
        )]);
    }

    let xw = cx.scratch(dirs * seq * batch * gh);
    let hbuf = [cx.scratch(state), cx.scratch(state)];
    let cbuf = cx.scratch(if lstm { state } else { 0 });
    let gru_split = matches!(
        r.cell,
        CellKind::Gru {
            linear_before_reset: false
        }
    );
    let (zbuf, rhbuf) = if gru_split {
        (cx.scratch(state), cx.scratch(state))
    } else {
        (cbuf, cbuf)
    };

    let mut stages = Vec::new();
    // X·Wᵀ + Wb for every (direction, step, batch row, gate unit).
    let mut body = digits("gi", &[dirs, seq, batch, gh], "i");
    let _ = write!(
        body,
        "  var acc: f32 = {wb};
  for (var m: u32 = 0u; m < {input}u; m = m + 1u) {{
    acc = acc + {xv} * {wv};
  }}
  {st}
",
        wb = bias.load(&format!("i0 * {}u + i3", 2 * gh)),
        xv = x.load(&format!("(i1 * {batch}u + i2) * {input}u + m")),
        wv = w.load(&format!("(i0 * {gh}u + i3) * {input}u + m")),
        st = xw.store("gi", "acc"),
    );
    stages.push(flat_stage(
        &cx.label("xw"),
        dirs * seq * batch * gh,
        &limits,
        "",
        &body,
    ));

    let decls = recurrent_decls(r, dirs);
    for step in 0..seq {
        let last = step + 1 == seq;
        let t = match r.direction {
            RnnDirection::Forward => format!("{step}u"),
            RnnDirection::Reverse => format!("{}u", seq - 1 - step),
            RnnDirection::Bidirectional => {
                format!("select({step}u, {}u, d == 1u)", seq - 1 - step)
            }
        };
        let prev_h = |idx: &str| {
            if step == 0 {
                h0.load(idx)
            } else {
                hbuf[step % 2].load(idx)
            }
        };
        let next_h = hbuf[(step + 1) % 2];
        let mut head = digits("gi", &[dirs, batch, h], "u");
        let _ = write!(
            head,
            "  let d = u0;
  let k = u2;
  let t: u32 = {t};
  let st = (d * {batch}u + u1) * {h}u;
  let xb = ((d * {seq}u + t) * {batch}u + u1) * {gh}u;
  let hp = {hp};
",
            hp = prev_h("st + k"),
        );
        // `hr{gate}`: Rb + (row of `src`) · R[d, gate*h + k].
        let dot = |gate: usize, src: &dyn Fn(&str) -> String| {
            format!(
                "  var hr{gate}: f32 = {rb};
  for (var m: u32 = 0u; m < {h}u; m = m + 1u) {{
    hr{gate} = hr{gate} + {hv} * {rv};
  }}
",
                rb = bias.load(&format!("d * {}u + {}u + k", 2 * gh, gh + gate * h)),
                hv = src("st + m"),
                rv = rw.load(&format!("(d * {gh}u + {}u + k) * {h}u + m", gate * h)),
            )
        };
        let xwg = |gate: usize| xw.load(&format!("xb + {}u + k", gate * h));
        // Stores of the new hidden state `hn` (and cell state `ct`).
        let mut tail = format!("  {}\n", next_h.store("st + k", "hn"));
        if let Some(y) = y {
            let _ = writeln!(
                tail,
                "  {}",
                y.store(
                    &format!("((t * {dirs}u + d) * {batch}u + u1) * {h}u + k"),
                    "hn"
                )
            );
        }
        if last {
            if let Some(yh) = yh {
                let _ = writeln!(tail, "  {}", yh.store("st + k", "hn"));
            }
        }
        let mut body = head.clone();
        match r.cell {
            CellKind::Rnn => {
                body += &dot(0, &prev_h);
                let _ = writeln!(body, "  let hn = rnn_act0(d, rnn_clip({} + hr0));", xwg(0));
            }
            CellKind::Gru {
                linear_before_reset,
            } => {
                body += &dot(0, &prev_h);
                body += &dot(1, &prev_h);
                let _ = write!(
                    body,
                    "  let z = rnn_act0(d, rnn_clip({} + hr0));
  let r = rnn_act0(d, rnn_clip({} + hr1));
",
                    xwg(0),
                    xwg(1)
                );
                if linear_before_reset {
                    body += &dot(2, &prev_h);
                    let _ = writeln!(
                        body,
                        "  let ht = rnn_act1(d, rnn_clip({} + r * hr2));\n  let hn = (1.0 - z) * ht + z * hp;",
                        xwg(2)
                    );
                } else {
                    // Stage A: z and r ⊙ h for every unit; stage B (below)
                    // the candidate from the whole r ⊙ h row.
                    let _ = writeln!(
                        body,
                        "  {}\n  {}",
                        zbuf.store("st + k", "z"),
                        rhbuf.store("st + k", "r * hp")
                    );
                    stages.push(flat_stage(
                        &cx.label(&format!("step{step}.zr")),
                        state,
                        &limits,
                        &decls,
                        &body,
                    ));
                    body = head.clone();
                    body += &dot(2, &|i: &str| rhbuf.load(i));
                    let _ = writeln!(
                        body,
                        "  let z = {};\n  let ht = rnn_act1(d, rnn_clip({} + hr2));\n  let hn = (1.0 - z) * ht + z * hp;",
                        zbuf.load("st + k"),
                        xwg(2)
                    );
                }
            }
            CellKind::Lstm { input_forget } => {
                for gate in 0..4 {
                    body += &dot(gate, &prev_h);
                }
                let cp = match (step, c0) {
                    (0, Some(c0)) => c0.load("st + k"),
                    _ => cbuf.load("st + k"),
                };
                let pterm = |gate: usize, c: &str| match peep {
                    Some(p) => format!(
                        " + {} * {c}",
                        p.load(&format!("d * {}u + {}u + k", 3 * h, gate * h))
                    ),
                    None => String::new(),
                };
                let f = if input_forget {
                    "1.0 - i".to_string()
                } else {
                    format!("rnn_act0(d, rnn_clip({} + hr2{}))", xwg(2), pterm(2, "cp"))
                };
                let _ = write!(
                    body,
                    "  let cp = {cp};
  let i = rnn_act0(d, rnn_clip({x0} + hr0{p0}));
  let f = {f};
  let cc = rnn_act1(d, rnn_clip({x3} + hr3));
  let ct = f * cp + i * cc;
  let og = rnn_act0(d, rnn_clip({x1} + hr1{p1}));
  let hn = og * rnn_act2(d, ct);
  {cst}
",
                    x0 = xwg(0),
                    x1 = xwg(1),
                    x3 = xwg(3),
                    p0 = pterm(0, "cp"),
                    p1 = pterm(1, "ct"),
                    cst = cbuf.store("st + k", "ct"),
                );
                if last {
                    if let Some(yc) = yc {
                        let _ = writeln!(tail, "  {}", yc.store("st + k", "ct"));
                    }
                }
            }
        }
        body += &tail;
        stages.push(flat_stage(
            &cx.label(&format!("step{step}")),
            state,
            &limits,
            &decls,
            &body,
        ));
    }
    Ok(stages)
}
