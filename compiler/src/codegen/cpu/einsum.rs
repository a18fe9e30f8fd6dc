//! Einsum. Two-operand equations whose letters are each a batch (both
//! operands and the result), row (first operand and result), column
//! (second operand and result) or contracted (both operands only) index
//! become batched `dnnc_sgemm` calls: operands not already laid out as
//! `[batch, M, K]` / `[batch, K, N]` (or their transposes) are packed by a
//! generated strided copy (stride 0 on broadcast axes), and a result whose
//! letter order is not `[batch, M, N]` is copied into place. Every other
//! equation (one or three+ operands, diagonals, letters summed within one
//! operand) is a generated loop nest over the whole index space.

use super::contraction::{acc_arg, epilogue, needs_acc_ws};
use super::elementwise::{self, contiguous, SubDomain};
use super::emit::Emit;
use super::extended::{sgemm, ws_bytes};
use super::group::Kernel;
use super::movement::strided_copy;
use super::KCtx;
use cranelift_codegen::ir::types::F32;
use cranelift_codegen::ir::InstBuilder;
use dnnc_ir::infer::einsum_sizes;
use dnnc_ir::op::EinsumSpec;
use dnnc_ir::{DType, Graph, Op};

/// The index space of one Einsum.
struct Space {
    spec: EinsumSpec,
    /// Every letter: the output's first, then the summed ones.
    all: Vec<u8>,
    /// Size of each letter of `all`.
    dims: Vec<usize>,
    /// `strides[k][j]`: element stride of operand `k` along letter `all[j]`
    /// (repeated letters add up, broadcast axes are 0).
    strides: Vec<Vec<i64>>,
}

/// The GEMM form: letter groups (positions in `Space::all`) and sizes.
struct GemmForm {
    batch: Vec<usize>,
    m: Vec<usize>,
    n: Vec<usize>,
    k: Vec<usize>,
    /// Total sizes.
    bt: usize,
    mt: usize,
    nt: usize,
    kt: usize,
}

fn space(g: &Graph, k: &Kernel) -> Result<Space, String> {
    let node = g.node(k.nodes[0]);
    let Op::Einsum { equation } = &node.op else {
        return Err("not an Einsum".into());
    };
    let spec = EinsumSpec::parse(equation)?;
    let shapes: Vec<&[usize]> = node
        .inputs
        .iter()
        .map(|&v| g.value(v).ty.shape.as_slice())
        .collect();
    let sizes = einsum_sizes(&spec, &shapes)?;
    let all = spec.all_indices();
    let dims: Vec<usize> = all
        .iter()
        .map(|&c| sizes.iter().find(|(l, _)| *l == c).map_or(1, |&(_, d)| d))
        .collect();
    let mut strides = vec![vec![0i64; all.len()]; shapes.len()];
    for (op, letters) in spec.inputs.iter().enumerate() {
        let s = shapes[op];
        let mut st = 1i64;
        for ax in (0..s.len()).rev() {
            if s[ax] != 1 {
                let j = all
                    .iter()
                    .position(|&c| c == letters[ax])
                    .ok_or("Einsum letter missing from the index space")?;
                strides[op][j] += st;
            }
            st *= s[ax] as i64;
        }
    }
    Ok(Space {
        spec,
        all,
        dims,
        strides,
    })
}

/// The GEMM form of a two-operand equation without diagonals or letters
/// summed inside one operand.
fn gemm_form(s: &Space) -> Option<GemmForm> {
    if s.spec.inputs.len() != 2 {
        return None;
    }
    let (a, b, out) = (&s.spec.inputs[0], &s.spec.inputs[1], &s.spec.output);
    let distinct = |l: &[u8]| l.iter().enumerate().all(|(i, c)| !l[..i].contains(c));
    if !distinct(a) || !distinct(b) {
        return None;
    }
    let pos = |c: u8| s.all.iter().position(|&x| x == c);
    let (mut batch, mut m, mut n, mut k) = (vec![], vec![], vec![], vec![]);
    for &c in out {
        let p = pos(c)?;
        match (a.contains(&c), b.contains(&c)) {
            (true, true) => batch.push(p),
            (true, false) => m.push(p),
            (false, true) => n.push(p),
            (false, false) => return None,
        }
    }
    for &c in a {
        if !out.contains(&c) {
            if !b.contains(&c) {
                return None;
            }
            k.push(pos(c)?);
        }
    }
    if b.iter().any(|c| !out.contains(c) && !a.contains(c)) {
        return None;
    }
    let prod = |v: &[usize]| v.iter().map(|&j| s.dims[j]).product::<usize>();
    Some(GemmForm {
        bt: prod(&batch),
        mt: prod(&m),
        nt: prod(&n),
        kt: prod(&k),
        batch,
        m,
        n,
        k,
    })
}

/// Whether operand `op`, read along letter positions `order`, is dense
/// row-major in that order.
fn dense_in(s: &Space, op: usize, order: &[usize]) -> bool {
    if order.len() != s.spec.inputs[op].len() {
        return false;
    }
    let mut st = 1i64;
    for &j in order.iter().rev() {
        if s.dims[j] != 1 && s.strides[op][j] != st {
            return false;
        }
        st *= s.dims[j] as i64;
    }
    true
}

/// How a GEMM operand is read: `Some(transposed)` in place, `None` packed.
fn in_place(s: &Space, op: usize, batch: &[usize], rows: &[usize], cols: &[usize]) -> Option<bool> {
    let cat = |x: &[usize], y: &[usize]| [batch, x, y].concat();
    if dense_in(s, op, &cat(rows, cols)) {
        Some(false)
    } else if dense_in(s, op, &cat(cols, rows)) {
        Some(true)
    } else {
        None
    }
}

/// Workspaces: packed A, packed B, the `[batch, M, N]` result (each at
/// least one f32, used by the GEMM form only), then the accumulator when
/// needed.
pub(crate) fn workspaces(g: &Graph, k: &Kernel) -> Result<Vec<usize>, String> {
    let s = space(g, k)?;
    let mut ws = match gemm_form(&s) {
        Some(f) => vec![
            ws_bytes(f.bt * f.mt * f.kt * 4),
            ws_bytes(f.bt * f.kt * f.nt * 4),
            ws_bytes(f.bt * f.mt * f.nt * 4),
        ],
        None => vec![4, 4, 4],
    };
    if needs_acc_ws(g, k) {
        ws.push(g.value(g.node(k.nodes[0]).outputs[0]).ty.size_bytes());
    }
    Ok(ws)
}

/// Lowers an Einsum kernel.
pub(crate) fn lower(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<(), String> {
    let s = space(c.g, c.k)?;
    let acc = acc_arg(c)?;
    match gemm_form(&s) {
        Some(f) => lower_gemm(e, c, &s, &f, acc)?,
        None => lower_loops(e, c, &s, acc)?,
    }
    if let Some(spec) = epilogue(c, acc, None)? {
        let sub = SubDomain::full(&spec.domain);
        elementwise::emit(e, &spec, &sub)?;
    }
    Ok(())
}

fn lower_gemm(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    s: &Space,
    f: &GemmForm,
    acc: usize,
) -> Result<(), String> {
    let node = c.g.node(c.k.nodes[0]);
    let ws = |i: usize| c.ws.get(i).copied().ok_or("missing Einsum workspace");
    let (pa, pb, pc) = (e.bufs[ws(0)?], e.bufs[ws(1)?], e.bufs[ws(2)?]);
    let (xa, xb) = (
        e.bufs[c.arg(node.inputs[0])?],
        e.bufs[c.arg(node.inputs[1])?],
    );
    let y = e.bufs[acc];
    let dims_of = |v: &[usize]| v.iter().map(|&j| s.dims[j]).collect::<Vec<usize>>();
    let strides_of =
        |op: usize, v: &[usize]| v.iter().map(|&j| s.strides[op][j]).collect::<Vec<i64>>();
    // Operand A as [batch, M, K].
    let (a, a_str) = match in_place(s, 0, &f.batch, &f.m, &f.k) {
        Some(false) => (xa, (f.kt as i64, 1)),
        Some(true) => (xa, (1, f.mt as i64)),
        None => {
            let order = [f.batch.as_slice(), &f.m, &f.k].concat();
            let d = dims_of(&order);
            strided_copy(
                e,
                &d,
                pa,
                0,
                &contiguous(&d),
                xa,
                0,
                &strides_of(0, &order),
                DType::F32,
            );
            (pa, (f.kt as i64, 1))
        }
    };
    // Operand B as [batch, K, N].
    let (b, b_str) = match in_place(s, 1, &f.batch, &f.k, &f.n) {
        Some(false) => (xb, (f.nt as i64, 1)),
        Some(true) => (xb, (1, f.kt as i64)),
        None => {
            let order = [f.batch.as_slice(), &f.k, &f.n].concat();
            let d = dims_of(&order);
            strided_copy(
                e,
                &d,
                pb,
                0,
                &contiguous(&d),
                xb,
                0,
                &strides_of(1, &order),
                DType::F32,
            );
            (pb, (f.nt as i64, 1))
        }
    };
    // The result straight into the output when its order is [batch, M, N].
    let natural = [f.batch.as_slice(), &f.m, &f.n].concat();
    let direct = natural.iter().copied().eq(0..s.spec.output.len());
    let cbuf = if direct { y } else { pc };
    let (mk, kn, mn) = (f.mt * f.kt, f.kt * f.nt, f.mt * f.nt);
    e.for_n(f.bt, |e, bi| {
        let oa = e.b.ins().imul_imm_s(bi, mk as i64);
        let ob = e.b.ins().imul_imm_s(bi, kn as i64);
        let oc = e.b.ins().imul_imm_s(bi, mn as i64);
        let (ap, bp, cp) = (e.addr(a, oa, 4), e.addr(b, ob, 4), e.addr(cbuf, oc, 4));
        sgemm(
            e,
            (f.mt, f.nt, f.kt),
            ap,
            a_str,
            bp,
            b_str,
            cp,
            (f.nt as i64, 1),
            (1.0, 0.0),
        );
    });
    if !direct {
        // y[out order] = pc[natural order]: walk pc's dims, scatter into y.
        let out_dims = s.dims[..s.spec.output.len()].to_vec();
        let ystr = contiguous(&out_dims);
        let d = dims_of(&natural);
        let dst: Vec<i64> = natural.iter().map(|&j| ystr[j]).collect();
        strided_copy(e, &d, y, 0, &dst, pc, 0, &contiguous(&d), DType::F32);
    }
    Ok(())
}

/// The generic form: `y[o] = sum_s prod_k x_k[o, s]` as a loop nest.
fn lower_loops(e: &mut Emit<'_>, c: &KCtx<'_>, s: &Space, acc: usize) -> Result<(), String> {
    let node = c.g.node(c.k.nodes[0]);
    let xs: Vec<_> = node
        .inputs
        .iter()
        .map(|&v| c.arg(v).map(|a| e.bufs[a]))
        .collect::<Result<_, _>>()?;
    let y = e.bufs[acc];
    let n_out = s.spec.output.len();
    let out_dims = s.dims[..n_out].to_vec();
    let sum_dims = s.dims[n_out..].to_vec();
    let ystr = contiguous(&out_dims);
    e.for_nest(&out_dims, &mut |e, oidx| {
        let zero = e.cf(0.0);
        let sum = e.var(F32, zero);
        let bases: Vec<_> = (0..xs.len())
            .map(|k| e.linear(None, oidx, &s.strides[k][..n_out]))
            .collect();
        e.for_nest(&sum_dims, &mut |e, sidx| {
            let mut p = None;
            for (k, &x) in xs.iter().enumerate() {
                let off = e.linear(Some(bases[k]), sidx, &s.strides[k][n_out..]);
                let v = e.load_f32(x, off);
                p = Some(match p {
                    Some(q) => e.b.ins().fmul(q, v),
                    None => v,
                });
            }
            if let Some(p) = p {
                let a = e.b.use_var(sum);
                let r = e.b.ins().fadd(a, p);
                e.b.def_var(sum, r);
            }
        });
        let r = e.b.use_var(sum);
        let yo = e.linear(None, oidx, &ystr);
        e.store_f32(r, y, yo);
    });
    Ok(())
}
