//! Elementwise code: one loop nest over an output domain that evaluates a
//! chain of elementwise nodes per point, with numpy broadcasting through
//! strides (stride 0 on broadcast axes), f32x4 inner loops with a scalar
//! tail, and adjacent axes coalesced first so contiguous tensors become one
//! flat loop. Contraction epilogues reuse it over the output tile.

use super::emit::Emit;
use super::math;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F32X4, I64, I8};
use cranelift_codegen::ir::{InstBuilder, Value};
use dnnc_ir::op::{Binary, Compare, Logical, Unary};
use dnnc_ir::{DType, Graph, NodeId, Op, ValueId};
use std::collections::HashMap;

/// A value during per-point evaluation. f32 data is always an f32x4
/// (lane 0 alone is meaningful in scalar code); i64 and bool are scalars.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ev {
    /// f32 lanes.
    F(Value),
    /// An i64 scalar.
    I(Value),
    /// A bool scalar (i8, 0 or 1).
    B(Value),
}

/// A buffer read or written over the domain.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Operand {
    /// Index into [`Emit::bufs`].
    pub arg: usize,
    /// Element type.
    pub dtype: DType,
    /// Element stride per domain axis (0 on broadcast axes).
    pub strides: Vec<i64>,
}

/// Row-major strides of `shape`.
pub(crate) fn contiguous(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for i in (0..shape.len()).rev() {
        s[i] = acc;
        acc *= shape[i] as i64;
    }
    s
}

/// Strides that read a tensor of `shape` broadcast (numpy, right-aligned)
/// over `domain`; `None` when it does not broadcast.
pub(crate) fn bcast_strides(shape: &[usize], domain: &[usize]) -> Option<Vec<i64>> {
    if shape.len() > domain.len() {
        return None;
    }
    let own = contiguous(shape);
    let lead = domain.len() - shape.len();
    let mut s = vec![0i64; domain.len()];
    for (i, &d) in shape.iter().enumerate() {
        let dd = domain[lead + i];
        if d == dd && d != 1 {
            s[lead + i] = own[i];
        } else if d != 1 {
            return None;
        }
    }
    Some(s)
}

/// A value read rather than computed: `(value, acc, Some((extra, scale)))`
/// is `acc + scale * extra` at each point.
pub(crate) type Preset = (ValueId, Operand, Option<(Operand, f32)>);

/// What to evaluate over the domain.
pub(crate) struct EwSpec<'g> {
    /// The graph the nodes belong to.
    pub g: &'g Graph,
    /// The full loop domain (the kernel's output shape).
    pub domain: Vec<usize>,
    /// Nodes evaluated per point, in order.
    pub nodes: Vec<NodeId>,
    /// Where each node operand that is not computed in the kernel comes
    /// from, keyed by (node, operand index).
    pub inputs: HashMap<(NodeId, usize), Operand>,
    /// Values computed before the loop nest (the contraction result):
    /// value = load(acc) + scale * load(extra).
    pub preset: Vec<Preset>,
    /// Values stored at every point.
    pub outputs: Vec<(ValueId, Operand)>,
}

impl EwSpec<'_> {
    /// Whether every value touched is f32, so the inner loop can be f32x4.
    fn all_f32(&self) -> bool {
        self.inputs.values().all(|o| o.dtype == DType::F32)
            && self.outputs.iter().all(|(_, o)| o.dtype == DType::F32)
            && self.nodes.iter().all(|&n| {
                self.g
                    .node(n)
                    .outputs
                    .iter()
                    .all(|&v| self.g.value(v).ty.dtype == DType::F32)
            })
    }
}

/// A sub-box of the domain: per axis an optional runtime start and a length.
pub(crate) struct SubDomain {
    /// Start index per axis (`None` = 0).
    pub starts: Vec<Option<Value>>,
    /// Length per axis.
    pub lens: Vec<usize>,
}

impl SubDomain {
    /// The whole domain.
    pub fn full(domain: &[usize]) -> Self {
        SubDomain {
            starts: vec![None; domain.len()],
            lens: domain.to_vec(),
        }
    }
}

/// Merges adjacent axes that every operand walks contiguously and drops
/// length-1 axes. Returns the new lengths and each operand's strides.
fn coalesce(lens: &[usize], strides: &[Vec<i64>]) -> (Vec<usize>, Vec<Vec<i64>>) {
    let keep: Vec<usize> = (0..lens.len()).filter(|&i| lens[i] != 1).collect();
    let mut out_lens: Vec<usize> = Vec::new();
    let mut out_str: Vec<Vec<i64>> = vec![Vec::new(); strides.len()];
    for &ax in &keep {
        let can_merge = !out_lens.is_empty()
            && strides.iter().enumerate().all(|(k, s)| {
                let prev = *out_str[k].last().unwrap_or(&0);
                prev == s[ax] * lens[ax] as i64
            });
        if can_merge {
            let last = out_lens.len() - 1;
            out_lens[last] *= lens[ax];
            for (k, s) in strides.iter().enumerate() {
                let l = out_str[k].len() - 1;
                out_str[k][l] = s[ax];
            }
        } else {
            out_lens.push(lens[ax]);
            for (k, s) in strides.iter().enumerate() {
                out_str[k].push(s[ax]);
            }
        }
    }
    if out_lens.is_empty() {
        out_lens.push(1);
        for s in out_str.iter_mut() {
            s.push(0);
        }
    }
    (out_lens, out_str)
}

/// Emits the loop nest for `spec` over `sub` (the whole nest in every
/// task: for kernels that do not split, and epilogues inside tiles).
pub(crate) fn emit(e: &mut Emit<'_>, spec: &EwSpec<'_>, sub: &SubDomain) -> Result<(), String> {
    emit_nest(e, spec, sub, 0)
}

/// How many leading domain axes an elementwise kernel splits over: the
/// fewest whose product reaches 64 units (enough for any thread count to
/// balance), never the last axis (it stays the vectorised inner loop).
pub(crate) fn split_prefix(domain: &[usize]) -> usize {
    let mut units = 1usize;
    for (k, &d) in domain
        .iter()
        .enumerate()
        .take(domain.len().saturating_sub(1))
    {
        units *= d;
        if units >= 64 {
            return k + 1;
        }
    }
    domain.len().saturating_sub(1)
}

/// Emits `spec` over its whole domain as a kernel that splits across
/// tasks: the units are the flat indices of the first `prefix` domain
/// axes ([`Emit::task_range`] over their product), each running the rest
/// of the nest. With `prefix == 0` nothing splits.
pub(crate) fn emit_split(e: &mut Emit<'_>, spec: &EwSpec<'_>, prefix: usize) -> Result<(), String> {
    let sub = SubDomain::full(&spec.domain);
    emit_nest(e, spec, &sub, prefix.min(spec.domain.len()))
}

/// [`emit`], with the first `prefix` axes (of a full `sub`) as the task
/// units when `prefix > 0`.
fn emit_nest(
    e: &mut Emit<'_>,
    spec: &EwSpec<'_>,
    sub: &SubDomain,
    prefix: usize,
) -> Result<(), String> {
    // Every operand, in a fixed order: inputs, presets (acc, extra), outputs.
    let mut ops: Vec<Operand> = Vec::new();
    let mut keys: Vec<(NodeId, usize)> = spec.inputs.keys().copied().collect();
    keys.sort();
    let mut input_slot: HashMap<(NodeId, usize), usize> = HashMap::new();
    for k in &keys {
        let o = &spec.inputs[k];
        let slot = match ops.iter().position(|x| x == o) {
            Some(p) => p,
            None => {
                ops.push(o.clone());
                ops.len() - 1
            }
        };
        input_slot.insert(*k, slot);
    }
    let mut preset_slots = Vec::new();
    for (_, acc, extra) in &spec.preset {
        ops.push(acc.clone());
        let a = ops.len() - 1;
        let x = extra.as_ref().map(|(o, s)| {
            ops.push(o.clone());
            (ops.len() - 1, *s)
        });
        preset_slots.push((a, x));
    }
    let mut out_slots = Vec::new();
    for (_, o) in &spec.outputs {
        ops.push(o.clone());
        out_slots.push(ops.len() - 1);
    }
    // Base offsets from the sub-domain starts.
    let mut bases: Vec<Option<Value>> = Vec::with_capacity(ops.len());
    for o in &ops {
        let mut base: Option<Value> = None;
        for (ax, s) in sub.starts.iter().enumerate() {
            if let Some(s) = s {
                if o.strides[ax] != 0 {
                    let t = e.b.ins().imul_imm_s(*s, o.strides[ax]);
                    base = Some(match base {
                        Some(b) => e.b.ins().iadd(b, t),
                        None => t,
                    });
                }
            }
        }
        bases.push(base);
    }
    let all_strides: Vec<Vec<i64>> = ops.iter().map(|o| o.strides.clone()).collect();
    if prefix > 0 {
        if sub.lens.contains(&0) {
            return Ok(());
        }
        let units: usize = sub.lens[..prefix].iter().product();
        let (lo, hi) = e.task_range(units, "index tuples of the leading axes")?;
        let rest: Vec<Vec<i64>> = all_strides.iter().map(|s| s[prefix..].to_vec()).collect();
        let outer = contiguous(&sub.lens[..prefix]);
        let mut err = None;
        e.for_range(lo, hi, 1, |e, f| {
            // Per operand, the offset of unit `f`'s first element, pinned
            // to this point (`Emit::pin`): computed once per unit, not in
            // the element loops below.
            let idx: Vec<Value> = (0..prefix)
                .map(|d| {
                    let q = e.b.ins().udiv_imm_u(f, outer[d]);
                    if d == 0 {
                        q
                    } else {
                        e.b.ins().urem_imm_u(q, sub.lens[d] as i64)
                    }
                })
                .collect();
            let unit_bases: Vec<Option<Value>> = all_strides
                .iter()
                .zip(&bases)
                .map(|(s, &b)| {
                    if s[..prefix].iter().all(|&x| x == 0) {
                        b
                    } else {
                        let off = e.linear(b, &idx, &s[..prefix]);
                        Some(e.pin(off))
                    }
                })
                .collect();
            let (lens, strides) = coalesce(&sub.lens[prefix..], &rest);
            if let Err(m) = nest(
                e,
                spec,
                &ops,
                &input_slot,
                &preset_slots,
                &out_slots,
                &unit_bases,
                &lens,
                &strides,
            ) {
                err.get_or_insert(m);
            }
        });
        return err.map_or(Ok(()), Err);
    }
    let (lens, strides) = coalesce(&sub.lens, &all_strides);
    if lens.contains(&0) {
        return Ok(());
    }
    nest(
        e,
        spec,
        &ops,
        &input_slot,
        &preset_slots,
        &out_slots,
        &bases,
        &lens,
        &strides,
    )
}

/// The loop nest over coalesced `lens` (operand `k` at `bases[k]` plus
/// `strides[k]`), f32x4 along the innermost axis when every operand walks
/// it contiguously or broadcasts it.
#[allow(clippy::too_many_arguments)]
fn nest(
    e: &mut Emit<'_>,
    spec: &EwSpec<'_>,
    ops: &[Operand],
    input_slot: &HashMap<(NodeId, usize), usize>,
    preset_slots: &[(usize, Option<(usize, f32)>)],
    out_slots: &[usize],
    bases: &[Option<Value>],
    lens: &[usize],
    strides: &[Vec<i64>],
) -> Result<(), String> {
    let r = lens.len();
    let inner = lens[r - 1];
    let vector = spec.all_f32() && strides.iter().all(|s| matches!(s[r - 1], 0 | 1));
    let ctx = Ctx {
        spec,
        ops,
        input_slot,
        preset_slots,
        out_slots,
    };
    let mut err: Option<String> = None;
    e.for_nest(&lens[..r - 1], &mut |e, idx| {
        let offs: Vec<Value> = (0..ops.len())
            .map(|k| e.linear(bases[k], idx, &strides[k][..r - 1]))
            .collect();
        let inner_str: Vec<i64> = strides.iter().map(|s| s[r - 1]).collect();
        let at = |e: &mut Emit<'_>, j: Value| -> Vec<Value> {
            offs.iter()
                .zip(&inner_str)
                .map(|(&o, &s)| match s {
                    0 => o,
                    1 => e.b.ins().iadd(o, j),
                    s => {
                        let t = e.b.ins().imul_imm_s(j, s);
                        e.b.ins().iadd(o, t)
                    }
                })
                .collect()
        };
        let vec_end = if vector { inner / 4 * 4 } else { 0 };
        // Four vectors per iteration, evaluated side by side ([`points`]):
        // four independent chains of a transcendental's dependent
        // operations (SiLU's sigmoid: ~60 cycles from load to store) for
        // the core to overlap, which it does not across one chain after
        // another (an EfficientNet block's 1x1 conv + SiLU, 8x96x16x16:
        // 0.337 -> 0.314 ms with two vectors one after the other).
        let quad_end = vec_end / 16 * 16;
        if quad_end > 0 {
            let s = e.ci(0);
            let en = e.ci(quad_end as i64);
            e.for_range(s, en, 16, |e, j| {
                let o: Vec<Vec<Value>> = [0, 4, 8, 12]
                    .iter()
                    .map(|&d| {
                        let jd = e.b.ins().iadd_imm_s(j, d);
                        at(e, jd)
                    })
                    .collect();
                if let Err(m) = points(e, &ctx, &o, &inner_str, true) {
                    err.get_or_insert(m);
                }
            });
        }
        if vec_end > quad_end {
            let o: Vec<Vec<Value>> = (quad_end..vec_end)
                .step_by(4)
                .map(|d| {
                    let j = e.ci(d as i64);
                    at(e, j)
                })
                .collect();
            if let Err(m) = points(e, &ctx, &o, &inner_str, true) {
                err.get_or_insert(m);
            }
        }
        if vec_end < inner {
            let s = e.ci(vec_end as i64);
            let en = e.ci(inner as i64);
            e.for_range(s, en, 1, |e, j| {
                let o = at(e, j);
                if let Err(m) = point(e, &ctx, &o, &inner_str, false) {
                    err.get_or_insert(m);
                }
            });
        }
    });
    match err {
        Some(m) => Err(m),
        None => Ok(()),
    }
}

struct Ctx<'a, 'g> {
    spec: &'a EwSpec<'g>,
    ops: &'a [Operand],
    input_slot: &'a HashMap<(NodeId, usize), usize>,
    preset_slots: &'a [(usize, Option<(usize, f32)>)],
    out_slots: &'a [usize],
}

/// Loads operand `k` at element offset `off`.
fn load(e: &mut Emit<'_>, o: &Operand, off: Value, inner_stride: i64, vector: bool) -> Ev {
    let base = e.bufs[o.arg];
    match o.dtype {
        DType::F32 => {
            if vector && inner_stride == 1 {
                Ev::F(e.load_v(base, off))
            } else {
                let s = e.load_f32(base, off);
                Ev::F(e.splat(s))
            }
        }
        DType::I64 => Ev::I(e.load_ty(I64, base, off)),
        DType::Bool => Ev::B(e.load_ty(I8, base, off)),
    }
}

fn store(e: &mut Emit<'_>, o: &Operand, off: Value, inner_stride: i64, vector: bool, v: Ev) {
    let base = e.bufs[o.arg];
    match v {
        Ev::F(x) => {
            if vector && inner_stride == 1 {
                e.store_v(x, base, off)
            } else {
                let s = e.lane0(x);
                e.store_f32(s, base, off)
            }
        }
        Ev::I(x) | Ev::B(x) => e.store_ty(x, base, off),
    }
}

/// Evaluates every node at one point (four lanes when `vector`).
fn point(
    e: &mut Emit<'_>,
    c: &Ctx<'_, '_>,
    offs: &[Value],
    inner: &[i64],
    vector: bool,
) -> Result<(), String> {
    points(e, c, &[offs.to_vec()], inner, vector)
}

/// Evaluates every node at each point of `offs` (one offset per operand
/// each), a node at a time across the points, a sigmoid a step at a time
/// across them ([`math::sigmoid_n`]): each point's bits are those of
/// [`point`], with independent chains side by side for the core.
fn points(
    e: &mut Emit<'_>,
    c: &Ctx<'_, '_>,
    offs: &[Vec<Value>],
    inner: &[i64],
    vector: bool,
) -> Result<(), String> {
    let np = offs.len();
    let mut vals: HashMap<ValueId, Vec<Ev>> = HashMap::new();
    let mut loaded: HashMap<usize, Vec<Ev>> = HashMap::new();
    for ((v, _, _), &(a, x)) in c.spec.preset.iter().zip(c.preset_slots) {
        let mut vs = Vec::with_capacity(np);
        for o in offs {
            let acc = load(e, &c.ops[a], o[a], inner[a], vector);
            vs.push(match (acc, x) {
                (Ev::F(acc), Some((xs, scale))) => {
                    let Ev::F(ex) = load(e, &c.ops[xs], o[xs], inner[xs], vector) else {
                        return Err("contraction bias must be f32".into());
                    };
                    let ex = if scale == 1.0 {
                        ex
                    } else {
                        let s = e.vf(scale);
                        e.b.ins().fmul(ex, s)
                    };
                    Ev::F(e.b.ins().fadd(acc, ex))
                }
                (acc, _) => acc,
            });
        }
        vals.insert(*v, vs);
    }
    for &n in &c.spec.nodes {
        let node = c.spec.g.node(n);
        let mut args: Vec<Vec<Ev>> = Vec::with_capacity(node.inputs.len());
        for (k, v) in node.inputs.iter().enumerate() {
            let a = match vals.get(v) {
                Some(a) => a.clone(),
                None => {
                    let slot = *c
                        .input_slot
                        .get(&(n, k))
                        .ok_or_else(|| format!("operand {k} has no source in the kernel"))?;
                    match loaded.get(&slot) {
                        Some(a) => a.clone(),
                        None => {
                            let a: Vec<Ev> = offs
                                .iter()
                                .map(|o| load(e, &c.ops[slot], o[slot], inner[slot], vector))
                                .collect();
                            loaded.insert(slot, a.clone());
                            a
                        }
                    }
                }
            };
            args.push(a);
        }
        let floats: Option<Vec<Value>> = match (&node.op, args.as_slice()) {
            (Op::Unary(Unary::Sigmoid), [xs]) if np > 1 => xs
                .iter()
                .map(|x| match x {
                    Ev::F(x) => Some(*x),
                    _ => None,
                })
                .collect(),
            _ => None,
        };
        let out: Vec<Ev> = match floats {
            Some(xs) => math::sigmoid_n(e, &xs).into_iter().map(Ev::F).collect(),
            None => (0..np)
                .map(|i| {
                    let a: Vec<Ev> = args.iter().map(|a| a[i]).collect();
                    eval(e, &node.op, &a)
                })
                .collect::<Result<_, _>>()?,
        };
        let Some(&v) = node.outputs.first() else {
            return Err("elementwise node has no result".into());
        };
        vals.insert(v, out);
    }
    for ((v, _), &slot) in c.spec.outputs.iter().zip(c.out_slots) {
        let vs = vals
            .get(v)
            .ok_or_else(|| format!("output `%{}` is not computed", c.spec.g.value(*v).name))?;
        for (o, &val) in offs.iter().zip(vs) {
            store(e, &c.ops[slot], o[slot], inner[slot], vector, val);
        }
    }
    Ok(())
}

fn f(a: Ev) -> Result<Value, String> {
    match a {
        Ev::F(v) => Ok(v),
        _ => Err("operand must be f32".into()),
    }
}

/// The value of `op` on `args` at one point.
pub(crate) fn eval(e: &mut Emit<'_>, op: &Op, args: &[Ev]) -> Result<Ev, String> {
    let arg = |i: usize| -> Result<Ev, String> {
        args.get(i)
            .copied()
            .ok_or_else(|| format!("operand {i} is missing"))
    };
    Ok(match op {
        Op::Unary(u) => match arg(0)? {
            Ev::F(x) => Ev::F(unary(e, *u, x)?),
            Ev::I(x) => Ev::I(match u {
                Unary::Relu => {
                    let z = e.ci(0);
                    e.b.ins().smax(x, z)
                }
                Unary::Neg => e.b.ins().ineg(x),
                Unary::Abs => e.b.ins().iabs(x),
                Unary::Sign => {
                    let z = e.ci(0);
                    let p = e.b.ins().icmp(IntCC::SignedGreaterThan, x, z);
                    let n = e.b.ins().icmp(IntCC::SignedLessThan, x, z);
                    let p = e.b.ins().uextend(I64, p);
                    let n = e.b.ins().uextend(I64, n);
                    e.b.ins().isub(p, n)
                }
                _ => return Err(format!("{} is not defined on i64", op.name())),
            }),
            Ev::B(_) => return Err(format!("{} is not defined on bool", op.name())),
        },
        Op::Binary(bop) => match (arg(0)?, arg(1)?) {
            (Ev::F(a), Ev::F(b)) => Ev::F(match bop {
                Binary::Add => e.b.ins().fadd(a, b),
                Binary::Sub => e.b.ins().fsub(a, b),
                Binary::Mul => e.b.ins().fmul(a, b),
                Binary::Div => e.b.ins().fdiv(a, b),
                Binary::Pow => math::pow(e, a, b),
                Binary::Max => e.b.ins().fmax(a, b),
                Binary::Min => e.b.ins().fmin(a, b),
            }),
            (Ev::I(a), Ev::I(b)) => Ev::I(match bop {
                Binary::Add => e.b.ins().iadd(a, b),
                Binary::Sub => e.b.ins().isub(a, b),
                Binary::Mul => e.b.ins().imul(a, b),
                Binary::Div => {
                    let z = e.ci(0);
                    let is_zero = e.b.ins().icmp(IntCC::Equal, b, z);
                    e.fail_if(is_zero, 1);
                    // i64::MIN / -1 wraps (Cranelift would trap).
                    let m1 = e.ci(-1);
                    let is_m1 = e.b.ins().icmp(IntCC::Equal, b, m1);
                    let one = e.ci(1);
                    let d = e.b.ins().select(is_m1, one, b);
                    let q = e.b.ins().sdiv(a, d);
                    let na = e.b.ins().ineg(a);
                    e.b.ins().select(is_m1, na, q)
                }
                Binary::Max => e.b.ins().smax(a, b),
                Binary::Min => e.b.ins().smin(a, b),
                Binary::Pow => return Err("Pow is only defined on f32".into()),
            }),
            _ => return Err("operand dtypes differ or are unsupported".into()),
        },
        Op::PRelu => {
            let (x, s) = (f(arg(0)?)?, f(arg(1)?)?);
            let z = e.vf(0.0);
            let xs = e.b.ins().fmul(x, s);
            Ev::F(e.fsel(FloatCC::LessThan, x, z, xs, x))
        }
        Op::BatchNormalization { epsilon } => {
            let x = f(arg(0)?)?;
            let (sc, bi, mean, var) = (f(arg(1)?)?, f(arg(2)?)?, f(arg(3)?)?, f(arg(4)?)?);
            let eps = e.vf(*epsilon);
            let ve = e.b.ins().fadd(var, eps);
            let sd = e.b.ins().sqrt(ve);
            let a = e.b.ins().fdiv(sc, sd);
            let ma = e.b.ins().fmul(mean, a);
            let bb = e.b.ins().fsub(bi, ma);
            let xa = e.b.ins().fmul(x, a);
            Ev::F(e.b.ins().fadd(xa, bb))
        }
        Op::Compare(cmp) => {
            let r = match (arg(0)?, arg(1)?) {
                (Ev::F(a), Ev::F(b)) => {
                    let (a, b) = (e.lane0(a), e.lane0(b));
                    let cc = match cmp {
                        Compare::Equal => FloatCC::Equal,
                        Compare::Less => FloatCC::LessThan,
                        Compare::Greater => FloatCC::GreaterThan,
                    };
                    e.b.ins().fcmp(cc, a, b)
                }
                (Ev::I(a), Ev::I(b)) | (Ev::B(a), Ev::B(b)) => {
                    let cc = match cmp {
                        Compare::Equal => IntCC::Equal,
                        Compare::Less => IntCC::SignedLessThan,
                        Compare::Greater => IntCC::SignedGreaterThan,
                    };
                    e.b.ins().icmp(cc, a, b)
                }
                _ => return Err("operand dtypes differ".into()),
            };
            Ev::B(r)
        }
        Op::Not => match arg(0)? {
            Ev::B(x) => Ev::B(e.b.ins().bxor_imm_u(x, 1)),
            _ => return Err("operand must be bool".into()),
        },
        Op::Logical(l) => match (arg(0)?, arg(1)?) {
            (Ev::B(a), Ev::B(b)) => Ev::B(match l {
                Logical::And => e.b.ins().band(a, b),
                Logical::Or => e.b.ins().bor(a, b),
            }),
            _ => return Err("operands must be bool".into()),
        },
        Op::Where => {
            let Ev::B(c) = arg(0)? else {
                return Err("condition must be bool".into());
            };
            match (arg(1)?, arg(2)?) {
                (Ev::F(x), Ev::F(y)) => Ev::F(e.b.ins().select(c, x, y)),
                (Ev::I(x), Ev::I(y)) => Ev::I(e.b.ins().select(c, x, y)),
                (Ev::B(x), Ev::B(y)) => Ev::B(e.b.ins().select(c, x, y)),
                _ => return Err("branches have different dtypes".into()),
            }
        }
        Op::Cast { to } => {
            let x = arg(0)?;
            match (x, to) {
                (Ev::F(_), DType::F32) | (Ev::I(_), DType::I64) | (Ev::B(_), DType::Bool) => x,
                (Ev::F(v), DType::I64) => {
                    let s = e.lane0(v);
                    Ev::I(e.b.ins().fcvt_to_sint_sat(I64, s))
                }
                (Ev::F(v), DType::Bool) => {
                    let s = e.lane0(v);
                    let z = e.cf(0.0);
                    Ev::B(e.b.ins().fcmp(FloatCC::NotEqual, s, z))
                }
                (Ev::I(v), DType::F32) => {
                    let s = e.b.ins().fcvt_from_sint(F32, v);
                    Ev::F(e.splat(s))
                }
                (Ev::I(v), DType::Bool) => Ev::B(e.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0)),
                (Ev::B(v), DType::F32) => {
                    let one = e.cf(1.0);
                    let z = e.cf(0.0);
                    let s = e.b.ins().select(v, one, z);
                    Ev::F(e.splat(s))
                }
                (Ev::B(v), DType::I64) => Ev::I(e.b.ins().uextend(I64, v)),
            }
        }
        other => return Err(format!("{} is not an elementwise op", other.name())),
    })
}

/// A unary f32 op on f32x4 lanes.
pub(crate) fn unary(e: &mut Emit<'_>, u: Unary, x: Value) -> Result<Value, String> {
    let _ = F32X4;
    Ok(match u {
        Unary::Relu => {
            let z = e.vf(0.0);
            e.fsel(FloatCC::LessThan, x, z, z, x)
        }
        Unary::LeakyRelu { alpha } => {
            let z = e.vf(0.0);
            let a = e.vf(alpha);
            let ax = e.b.ins().fmul(x, a);
            e.fsel(FloatCC::LessThan, x, z, ax, x)
        }
        Unary::Sigmoid => math::sigmoid(e, x),
        Unary::Tanh => math::tanh(e, x),
        Unary::Clip { min, max } => {
            let lo = e.vf(min);
            let hi = e.vf(max);
            // min(max(x, lo), hi) (the IR guarantees lo <= hi): both
            // selects keep a NaN `x`, and each is the form x86 lowers to
            // one `maxps`/`minps`.
            let y = e.fsel(FloatCC::LessThan, x, lo, lo, x);
            e.fsel(FloatCC::LessThan, hi, y, hi, y)
        }
        Unary::HardSigmoid { alpha, beta } => {
            let a = e.vf(alpha);
            let b = e.vf(beta);
            let t = e.b.ins().fmul(x, a);
            let t = e.b.ins().fadd(t, b);
            clamp01(e, t)
        }
        Unary::HardSwish => {
            let a = e.vf(1.0 / 6.0);
            let b = e.vf(0.5);
            let t = e.b.ins().fmul(x, a);
            let t = e.b.ins().fadd(t, b);
            let t = clamp01(e, t);
            e.b.ins().fmul(x, t)
        }
        Unary::Elu { alpha } => {
            let m = math::expm1(e, x);
            let a = e.vf(alpha);
            let m = e.b.ins().fmul(m, a);
            let z = e.vf(0.0);
            e.fsel(FloatCC::GreaterThan, x, z, x, m)
        }
        Unary::Selu { alpha, gamma } => {
            let m = math::expm1(e, x);
            let a = e.vf(alpha * gamma);
            let m = e.b.ins().fmul(m, a);
            let gm = e.vf(gamma);
            let gx = e.b.ins().fmul(x, gm);
            let z = e.vf(0.0);
            e.fsel(FloatCC::GreaterThan, x, z, gx, m)
        }
        Unary::Softplus => {
            let ax = e.b.ins().fabs(x);
            let n = e.b.ins().fneg(ax);
            let ex = math::exp(e, n);
            let one = e.vf(1.0);
            let t = e.b.ins().fadd(ex, one);
            let l = math::log(e, t);
            let z = e.vf(0.0);
            let m = e.b.ins().fmax(x, z);
            e.b.ins().fadd(m, l)
        }
        Unary::Gelu { tanh_approx: false } => {
            let c = e.vf(std::f32::consts::FRAC_1_SQRT_2);
            let t = e.b.ins().fmul(x, c);
            let r = math::erf(e, t);
            let one = e.vf(1.0);
            let r = e.b.ins().fadd(r, one);
            let h = e.vf(0.5);
            let hx = e.b.ins().fmul(x, h);
            e.b.ins().fmul(hx, r)
        }
        Unary::Gelu { tanh_approx: true } => {
            let c = e.vf((2.0 / std::f32::consts::PI).sqrt());
            let k = e.vf(0.044_715);
            let x3 = e.b.ins().fmul(x, x);
            let x3 = e.b.ins().fmul(x3, x);
            let t = e.b.ins().fmul(x3, k);
            let t = e.b.ins().fadd(t, x);
            let t = e.b.ins().fmul(t, c);
            let r = math::tanh(e, t);
            let one = e.vf(1.0);
            let r = e.b.ins().fadd(r, one);
            let h = e.vf(0.5);
            let hx = e.b.ins().fmul(x, h);
            e.b.ins().fmul(hx, r)
        }
        Unary::Sqrt => e.b.ins().sqrt(x),
        Unary::Exp => math::exp(e, x),
        Unary::Log => math::log(e, x),
        Unary::Neg => e.b.ins().fneg(x),
        Unary::Abs => e.b.ins().fabs(x),
        Unary::Reciprocal => {
            let one = e.vf(1.0);
            e.b.ins().fdiv(one, x)
        }
        Unary::Erf => math::erf(e, x),
        Unary::Sign => {
            let z = e.vf(0.0);
            let one = e.vf(1.0);
            let m1 = e.vf(-1.0);
            let y = e.fsel(FloatCC::GreaterThan, x, z, one, x);
            e.fsel(FloatCC::LessThan, x, z, m1, y)
        }
        Unary::Floor => e.b.ins().floor(x),
        Unary::Ceil => e.b.ins().ceil(x),
        Unary::Round => e.b.ins().nearest(x),
        Unary::Sin => math::sincos(e, x, false),
        Unary::Cos => math::sincos(e, x, true),
        #[allow(unreachable_patterns)]
        other => return Err(format!("{other:?} has no CPU lowering yet")),
    })
}

fn clamp01(e: &mut Emit<'_>, t: Value) -> Value {
    let z = e.vf(0.0);
    let one = e.vf(1.0);
    let t = e.b.ins().fmax(t, z);
    e.b.ins().fmin(t, one)
}

/// Builds the spec that evaluates `nodes` (elementwise, in order) over
/// `domain`: operands not computed by `nodes` or `preset` come from the
/// kernel arguments in `arg_of`, broadcast over the domain (BatchNorm's
/// parameters along axis 1); `outputs` are stored.
pub(crate) fn spec_for<'g>(
    g: &'g Graph,
    domain: &[usize],
    nodes: &[NodeId],
    arg_of: &HashMap<ValueId, usize>,
    preset: Vec<Preset>,
    outputs: &[ValueId],
) -> Result<EwSpec<'g>, String> {
    let mut computed: Vec<ValueId> = preset.iter().map(|(v, _, _)| *v).collect();
    let mut inputs = HashMap::new();
    for &n in nodes {
        let node = g.node(n);
        if !super::group::per_point(&node.op) {
            return Err(format!("{} is not an elementwise op", node.op.name()));
        }
        for (k, &v) in node.inputs.iter().enumerate() {
            if computed.contains(&v) {
                continue;
            }
            let ty = &g.value(v).ty;
            let eff: Vec<usize> = match node.op {
                Op::BatchNormalization { .. } if k >= 1 => {
                    let xr = g.value(node.inputs[0]).ty.rank();
                    let mut s = ty.shape.clone();
                    s.extend(std::iter::repeat_n(1, xr.saturating_sub(2)));
                    s
                }
                _ => ty.shape.clone(),
            };
            let strides = bcast_strides(&eff, domain).ok_or_else(|| {
                format!(
                    "operand `%{}` {:?} does not broadcast to {:?}",
                    g.value(v).name,
                    ty.shape,
                    domain
                )
            })?;
            let arg = *arg_of
                .get(&v)
                .ok_or_else(|| format!("operand `%{}` has no buffer", g.value(v).name))?;
            inputs.insert(
                (n, k),
                Operand {
                    arg,
                    dtype: ty.dtype,
                    strides,
                },
            );
        }
        computed.extend(node.outputs.iter().copied());
    }
    let mut outs = Vec::new();
    for &v in outputs {
        let ty = &g.value(v).ty;
        let strides = bcast_strides(&ty.shape, domain).ok_or_else(|| {
            format!(
                "result `%{}` {:?} does not fit the loop domain {:?}",
                g.value(v).name,
                ty.shape,
                domain
            )
        })?;
        let arg = *arg_of
            .get(&v)
            .ok_or_else(|| format!("result `%{}` has no buffer", g.value(v).name))?;
        outs.push((
            v,
            Operand {
                arg,
                dtype: ty.dtype,
                strides,
            },
        ));
    }
    Ok(EwSpec {
        g,
        domain: domain.to_vec(),
        nodes: nodes.to_vec(),
        inputs,
        preset,
        outputs: outs,
    })
}
