//! Per-point evaluation of elementwise ops: the WGSL expression of each
//! op the fusion pass chains (activations, arithmetic with broadcasting,
//! BatchNorm, comparisons, casts), used by elementwise kernels and by the
//! epilogues of contractions and reductions. Semantics follow the
//! interpreter (`dnnc_runtime::interp`), the oracle the GPU tests compare
//! with: e.g. Max/Min propagate a NaN in the first operand, Round is
//! half-to-even, Softplus and Sigmoid are the overflow-safe forms.

use super::wgsl::{broadcast_index, flit, wty, Loc};
use dnnc_ir::op::{Binary, Compare, Logical, Unary};
use dnnc_ir::{DType, Graph, NodeId, Op, ValueId};
use std::collections::HashMap;
use std::fmt::Write;

/// Helper functions every shader carries (WGSL has no erf, and its
/// `tanh`/`pow` are undefined or overflow where the interpreter's are
/// not).
pub(crate) const HELPERS: &str = "
fn d_erf(x: f32) -> f32 {
  let a = abs(x);
  if (a < 2.0) {
    let z = x * x;
    var t = x;
    var s = x;
    for (var n = 1; n < 40; n = n + 1) {
      t = -t * z / f32(n);
      s = s + t / f32(2 * n + 1);
    }
    return s * 1.1283791670955126;
  }
  var t = a;
  for (var n = 40; n >= 1; n = n - 1) {
    t = a + (f32(n) * 0.5) / t;
  }
  return sign(x) * (1.0 - exp(-a * a) / 1.7724538509055159 / t);
}
fn d_tanh(x: f32) -> f32 {
  let e = exp(-2.0 * abs(x));
  return sign(x) * (1.0 - e) / (1.0 + e);
}
fn d_sigmoid(x: f32) -> f32 {
  if (x >= 0.0) { return 1.0 / (1.0 + exp(-x)); }
  let e = exp(x);
  return e / (1.0 + e);
}
fn d_expm1(x: f32) -> f32 {
  if (abs(x) < 1e-3) { return x + 0.5 * x * x + x * x * x / 6.0; }
  return exp(x) - 1.0;
}
fn d_pow(x: f32, y: f32) -> f32 {
  if (y == 0.0) { return 1.0; }
  if (x == 0.0) { return select(bitcast<f32>(0x7f800000u), 0.0, y > 0.0); }
  let m = pow(abs(x), y);
  if (x > 0.0) { return m; }
  if (floor(y) != y) { return bitcast<f32>(0x7fc00000u); }
  let odd = (abs(y) < 16777216.0) && (i32(abs(y)) % 2 == 1);
  return select(m, -m, odd);
}
fn d_isnan(x: f32) -> bool {
  return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}
fn d_max(x: f32, y: f32) -> f32 { return select(y, x, d_isnan(x) || x > y); }
fn d_min(x: f32, y: f32) -> f32 { return select(y, x, d_isnan(x) || x < y); }
";

fn unary_f32(u: Unary, x: &str) -> String {
    match u {
        Unary::Relu => format!("select({x}, 0.0, {x} < 0.0)"),
        Unary::LeakyRelu { alpha } => format!("select({x}, {} * {x}, {x} < 0.0)", flit(alpha)),
        Unary::Sigmoid => format!("d_sigmoid({x})"),
        Unary::Tanh => format!("d_tanh({x})"),
        Unary::Clip { min, max } => {
            format!("min(max({x}, {}), {})", flit(min), flit(max))
        }
        Unary::HardSigmoid { alpha, beta } => {
            format!("clamp({} * {x} + {}, 0.0, 1.0)", flit(alpha), flit(beta))
        }
        Unary::HardSwish => format!("{x} * clamp({x} / 6.0 + 0.5, 0.0, 1.0)"),
        Unary::Elu { alpha } => format!("select({} * d_expm1({x}), {x}, {x} > 0.0)", flit(alpha)),
        Unary::Softplus => format!("max({x}, 0.0) + log(1.0 + exp(-abs({x})))"),
        Unary::Gelu { tanh_approx: false } => {
            format!("0.5 * {x} * (1.0 + d_erf({x} * 0.70710678118654752))")
        }
        Unary::Gelu { tanh_approx: true } => format!(
            "0.5 * {x} * (1.0 + d_tanh(0.79788456080286536 * ({x} + 0.044715 * {x} * {x} * {x})))"
        ),
        Unary::Sqrt => format!("sqrt({x})"),
        Unary::Exp => format!("exp({x})"),
        Unary::Log => format!("log({x})"),
        Unary::Neg => format!("-({x})"),
        Unary::Abs => format!("abs({x})"),
        Unary::Reciprocal => format!("1.0 / {x}"),
        Unary::Erf => format!("d_erf({x})"),
        Unary::Selu { alpha, gamma } => format!(
            "select({g} * {a} * d_expm1({x}), {g} * {x}, {x} > 0.0)",
            g = flit(gamma),
            a = flit(alpha)
        ),
        Unary::Sign => format!("select(select({x}, -1.0, {x} < 0.0), 1.0, {x} > 0.0)"),
        Unary::Floor => format!("floor({x})"),
        Unary::Ceil => format!("ceil({x})"),
        Unary::Round => format!("round({x})"),
        Unary::Sin => format!("sin({x})"),
        Unary::Cos => format!("cos({x})"),
    }
}

fn unary_i32(u: Unary, x: &str) -> Option<String> {
    Some(match u {
        Unary::Relu => format!("max({x}, 0i)"),
        Unary::Neg => format!("-({x})"),
        Unary::Abs => format!("abs({x})"),
        Unary::Sign => format!("sign({x})"),
        _ => return None,
    })
}

fn binary(b: Binary, d: DType, x: &str, y: &str) -> Option<String> {
    Some(match (b, d) {
        (Binary::Add, _) => format!("{x} + {y}"),
        (Binary::Sub, _) => format!("{x} - {y}"),
        (Binary::Mul, _) => format!("{x} * {y}"),
        (Binary::Div, _) => format!("{x} / {y}"),
        (Binary::Pow, DType::F32) => format!("d_pow({x}, {y})"),
        (Binary::Max, DType::F32) => format!("d_max({x}, {y})"),
        (Binary::Min, DType::F32) => format!("d_min({x}, {y})"),
        (Binary::Max, DType::I64) => format!("max({x}, {y})"),
        (Binary::Min, DType::I64) => format!("min({x}, {y})"),
        _ => return None,
    })
}

/// The point evaluator's state: WGSL variable names of values already
/// computed at this point, and how to load the others.
pub(crate) struct Point<'a> {
    /// The graph.
    pub g: &'a Graph,
    /// Shape of the iteration space; the point's digits are `{prefix}0..`.
    pub shape: &'a [usize],
    /// Digit prefix.
    pub prefix: &'a str,
    /// Values already in WGSL variables.
    pub known: HashMap<ValueId, String>,
}

impl Point<'_> {
    /// The WGSL expression of `v` at this point: a known variable, or a
    /// broadcast load from its buffer.
    fn operand(
        &self,
        v: ValueId,
        loc: &dyn Fn(ValueId) -> Result<Loc, String>,
    ) -> Result<String, String> {
        if let Some(n) = self.known.get(&v) {
            return Ok(n.clone());
        }
        let l = loc(v)?;
        let idx = broadcast_index(self.shape, &self.g.value(v).ty.shape, self.prefix);
        Ok(l.load(&idx))
    }

    /// Statements computing `nodes` (in order) at this point; each result
    /// becomes a known variable.
    pub fn eval(
        &mut self,
        nodes: &[NodeId],
        loc: &dyn Fn(ValueId) -> Result<Loc, String>,
    ) -> Result<String, String> {
        let mut s = String::new();
        for &n in nodes {
            let node = self.g.node(n);
            let out = node.outputs[0];
            let dt = self.g.value(out).ty.dtype;
            let in_dt = |i: usize| self.g.value(node.inputs[i]).ty.dtype;
            let mut args = Vec::new();
            for (i, &v) in node.inputs.iter().enumerate() {
                if matches!(node.op, Op::BatchNormalization { .. }) && i > 0 {
                    // Per-channel operands of shape [C]: indexed by axis 1.
                    let l = loc(v)?;
                    args.push(l.load(&format!("{}1", self.prefix)));
                } else {
                    args.push(self.operand(v, loc)?);
                }
            }
            let a = |i: usize| -> Result<&str, String> {
                args.get(i)
                    .map(|x| x.as_str())
                    .ok_or_else(|| format!("{} operand {i} is missing", node.op.name()))
            };
            let unsupported = || format!("{} on {dt} has no GPU lowering", node.op.name());
            let e = match &node.op {
                Op::Unary(u) => match in_dt(0) {
                    DType::F32 => unary_f32(*u, a(0)?),
                    DType::I64 => unary_i32(*u, a(0)?).ok_or_else(unsupported)?,
                    DType::Bool => return Err(unsupported()),
                },
                Op::Binary(b) => binary(*b, in_dt(0), a(0)?, a(1)?).ok_or_else(unsupported)?,
                Op::PRelu => format!("select({x}, {x} * {s}, {x} < 0.0)", x = a(0)?, s = a(1)?),
                Op::BatchNormalization { epsilon } => format!(
                    "{sc} * ({x} - {m}) / sqrt({var} + {eps}) + {b}",
                    x = a(0)?,
                    sc = a(1)?,
                    b = a(2)?,
                    m = a(3)?,
                    var = a(4)?,
                    eps = flit(*epsilon)
                ),
                Op::Where => format!("select({}, {}, {})", a(2)?, a(1)?, a(0)?),
                Op::Compare(c) => {
                    let o = match c {
                        Compare::Equal => "==",
                        Compare::Less => "<",
                        Compare::Greater => ">",
                    };
                    format!("{} {o} {}", a(0)?, a(1)?)
                }
                Op::Not => format!("!{}", a(0)?),
                Op::Logical(l) => match l {
                    Logical::And => format!("{} && {}", a(0)?, a(1)?),
                    Logical::Or => format!("{} || {}", a(0)?, a(1)?),
                },
                Op::Cast { to } => {
                    let x = a(0)?;
                    match (in_dt(0), to) {
                        (f, t) if f == *t => x.to_string(),
                        (DType::F32, DType::I64) => format!("i32({x})"),
                        (DType::F32, DType::Bool) => format!("{x} != 0.0"),
                        (DType::I64, DType::F32) => format!("f32({x})"),
                        (DType::I64, DType::Bool) => format!("{x} != 0i"),
                        (DType::Bool, DType::F32) => format!("select(0.0, 1.0, {x})"),
                        (DType::Bool, _) => format!("select(0i, 1i, {x})"),
                        _ => return Err(unsupported()),
                    }
                }
                other => return Err(format!("{} is not an elementwise op", other.name())),
            };
            let var = format!("v{}", n.index());
            let _ = writeln!(s, "  let {var}: {} = {e};", wty(dt));
            self.known.insert(out, var);
        }
        Ok(s)
    }

    /// Statements storing each of `outputs` at this point (its own index
    /// of the point; outputs have the iteration shape).
    pub fn store_outputs(
        &self,
        outputs: &[ValueId],
        lin: &str,
        loc: &dyn Fn(ValueId) -> Result<Loc, String>,
    ) -> Result<String, String> {
        let mut s = String::new();
        for &v in outputs {
            let var = self.known.get(&v).ok_or_else(|| {
                format!("`%{}` is not computed by this kernel", self.g.value(v).name)
            })?;
            let l = loc(v)?;
            let vshape = &self.g.value(v).ty.shape;
            if vshape.iter().product::<usize>() == self.shape.iter().product::<usize>() {
                let _ = writeln!(s, "  {}", l.store(lin, var));
            } else {
                // A smaller (broadcast) result: only the points whose
                // broadcast axes are 0 write it.
                let r = self.shape.len();
                let rv = vshape.len();
                let mut conds = Vec::new();
                for a in 0..r {
                    let own = (a + rv).checked_sub(r).map(|j| vshape[j]).unwrap_or(1);
                    if own == 1 && self.shape[a] != 1 {
                        conds.push(format!("{}{a} == 0u", self.prefix));
                    }
                }
                let idx = broadcast_index(self.shape, vshape, self.prefix);
                let _ = writeln!(
                    s,
                    "  if ({}) {{ {} }}",
                    if conds.is_empty() {
                        "true".to_string()
                    } else {
                        conds.join(" && ")
                    },
                    l.store(&idx, var)
                );
            }
        }
        Ok(s)
    }
}
