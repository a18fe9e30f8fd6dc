//! Op kernels of the reference interpreter. Each kernel re-validates the
//! shapes it relies on, so a malformed graph yields an error message rather
//! than a panic; the interpreter attaches the node's name to it.

mod conv;
mod convt;
mod einsum;
mod elementwise;
mod generate;
mod linalg;
mod logic;
mod movement;
mod norm;
mod pool;
mod reduce;
mod resize;
pub use resize::axis_taps as resize_axis_taps;
mod rnn;

use dnnc_ir::{Op, Tensor};
use ndarray::{ArrayD, CowArray, IxDyn};
use std::borrow::Cow;

/// A kernel failure, in words for the user; the caller names the node.
pub(crate) type KResult<T> = Result<T, String>;

/// Element types every data-movement op handles.
pub(crate) trait Elem: Copy + Default + PartialEq + std::fmt::Debug + 'static {
    /// The Pad fill value, given as f32 in the IR, in this type.
    fn from_f32(v: f32) -> Self;
}

impl Elem for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Elem for i64 {
    fn from_f32(v: f32) -> Self {
        v as i64
    }
}

impl Elem for bool {
    fn from_f32(v: f32) -> Self {
        v != 0.0
    }
}

/// Applies a dtype-generic expression to a borrowed tensor, rewrapping the
/// result in the same dtype. `$body` may use `?`.
macro_rules! map_dtype {
    ($t:expr, |$a:ident| $body:expr) => {
        match $t {
            Tensor::F32($a) => Tensor::F32($body),
            Tensor::I64($a) => Tensor::I64($body),
            Tensor::Bool($a) => Tensor::Bool($body),
        }
    };
}
pub(crate) use map_dtype;

/// Borrows f32 data or explains which operand has the wrong dtype.
pub(crate) fn f32_of<'t>(t: &'t Tensor, what: &str) -> KResult<&'t ArrayD<f32>> {
    t.as_f32()
        .ok_or_else(|| format!("{what} must be f32, found {}", t.ty()))
}

/// Row-major data of `a`, copying only when it is not already contiguous.
pub(crate) fn standard<T: Clone>(a: &ArrayD<T>) -> CowArray<'_, T, IxDyn> {
    a.as_standard_layout()
}

/// The flat row-major slice of a standard-layout array.
pub(crate) fn flat<'a, T>(a: &'a CowArray<'_, T, IxDyn>) -> KResult<&'a [T]> {
    a.as_slice()
        .ok_or_else(|| "internal error: array is not contiguous".to_string())
}

/// Builds an array from row-major data, turning a size mismatch into an error.
pub(crate) fn from_vec<T>(shape: Vec<usize>, data: Vec<T>) -> KResult<ArrayD<T>> {
    ArrayD::from_shape_vec(IxDyn(&shape), data)
        .map_err(|e| format!("internal error building a {shape:?} result: {e}"))
}

/// Reshapes in row-major order, without copying when `a` is contiguous.
pub(crate) fn reshape<T: Clone>(a: ArrayD<T>, shape: Vec<usize>) -> KResult<ArrayD<T>> {
    let numel: usize = shape.iter().product();
    if numel != a.len() {
        return Err(format!(
            "cannot reshape {:?} ({} elements) into {shape:?} ({numel} elements)",
            a.shape(),
            a.len()
        ));
    }
    if a.is_standard_layout() {
        a.into_shape_with_order(IxDyn(&shape))
            .map_err(|e| format!("internal error reshaping: {e}"))
    } else {
        from_vec(shape, a.iter().cloned().collect())
    }
}

fn arg<'b>(args: &'b [Cow<'_, Tensor>], i: usize) -> KResult<&'b Tensor> {
    args.get(i)
        .map(|c| &**c)
        .ok_or_else(|| format!("operand {i} is missing"))
}

/// Runs one computational op. `args` holds the operands in order; those the
/// interpreter will not need again arrive owned so their buffers can be
/// reused in place.
pub(crate) fn exec(op: &Op, args: Vec<Cow<'_, Tensor>>) -> KResult<Vec<Tensor>> {
    let (lo, hi) = op.arity();
    if args.len() < lo || args.len() > hi {
        return Err(format!("takes {lo} to {hi} operands, found {}", args.len()));
    }
    let one = |t: Tensor| Ok(vec![t]);
    match op {
        Op::Input | Op::Param(_) | Op::Constant => Err("source ops have no kernel".into()),
        Op::Conv2d(c) => {
            let bias = match args.get(2) {
                Some(b) => Some(f32_of(b, "bias")?),
                None => None,
            };
            one(Tensor::F32(conv::conv2d(
                f32_of(arg(&args, 0)?, "input")?,
                f32_of(arg(&args, 1)?, "weight")?,
                bias,
                c,
            )?))
        }
        Op::MatMul => one(Tensor::F32(linalg::matmul(
            f32_of(arg(&args, 0)?, "A")?,
            f32_of(arg(&args, 1)?, "B")?,
        )?)),
        Op::Gemm(p) => {
            let c = match args.get(2) {
                Some(c) => Some(f32_of(c, "C")?),
                None => None,
            };
            one(Tensor::F32(linalg::gemm(
                f32_of(arg(&args, 0)?, "A")?,
                f32_of(arg(&args, 1)?, "B")?,
                c,
                p,
            )?))
        }
        Op::MaxPool(p) => one(Tensor::F32(pool::max_pool(
            f32_of(arg(&args, 0)?, "input")?,
            p,
        )?)),
        Op::AveragePool(p) => one(Tensor::F32(pool::avg_pool(
            f32_of(arg(&args, 0)?, "input")?,
            p,
        )?)),
        Op::GlobalAveragePool => one(Tensor::F32(pool::global_pool(
            f32_of(arg(&args, 0)?, "input")?,
            false,
        )?)),
        Op::GlobalMaxPool => one(Tensor::F32(pool::global_pool(
            f32_of(arg(&args, 0)?, "input")?,
            true,
        )?)),
        Op::BatchNormalization { epsilon } => {
            let (x, rest) = split_first(args)?;
            let p =
                |i: usize, what: &str| -> KResult<&ArrayD<f32>> { f32_of(arg(&rest, i)?, what) };
            let (scale, bias, mean, var) =
                (p(0, "scale")?, p(1, "bias")?, p(2, "mean")?, p(3, "var")?);
            let x = into_f32(x, "input")?;
            one(Tensor::F32(norm::batch_norm(
                x, scale, bias, mean, var, *epsilon,
            )?))
        }
        Op::Lrn(l) => one(Tensor::F32(norm::lrn(f32_of(arg(&args, 0)?, "input")?, l)?)),
        Op::Unary(u) => one(elementwise::unary(split_first(args)?.0, *u)?),
        Op::Binary(b) => {
            let mut it = args.into_iter();
            let (Some(x), Some(y)) = (it.next(), it.next()) else {
                return Err("Binary needs two operands".into());
            };
            one(elementwise::binary(x, &y, *b)?)
        }
        Op::Softmax { axis } => one(Tensor::F32(norm::softmax(
            into_f32(split_first(args)?.0, "input")?,
            *axis,
            false,
        )?)),
        Op::LogSoftmax { axis } => one(Tensor::F32(norm::softmax(
            into_f32(split_first(args)?.0, "input")?,
            *axis,
            true,
        )?)),
        Op::Reduce {
            kind,
            axes,
            keepdims,
        } => one(Tensor::F32(reduce::reduce(
            f32_of(arg(&args, 0)?, "input")?,
            *kind,
            axes,
            *keepdims,
        )?)),
        Op::Concat { axis } => {
            let ts: Vec<&Tensor> = args.iter().map(|c| &**c).collect();
            one(movement::concat(&ts, *axis)?)
        }
        Op::Split { axis, split } => movement::split(arg(&args, 0)?, *axis, split),
        Op::Slice {
            starts,
            ends,
            axes,
            steps,
        } => one(movement::slice(arg(&args, 0)?, starts, ends, axes, steps)?),
        Op::Reshape { shape } => {
            let x = split_first(args)?.0;
            let target = dnnc_ir::infer::reshape_target(x.shape(), shape)?;
            one(movement::reshape_tensor(x, target)?)
        }
        Op::Flatten { axis } => {
            let x = split_first(args)?.0;
            let target = movement::flatten_shape(x.shape(), *axis)?;
            one(movement::reshape_tensor(x, target)?)
        }
        Op::Squeeze { axes } => {
            let x = split_first(args)?.0;
            let target = movement::squeeze_shape(x.shape(), axes)?;
            one(movement::reshape_tensor(x, target)?)
        }
        Op::Unsqueeze { axes } => {
            let x = split_first(args)?.0;
            let target = movement::unsqueeze_shape(x.shape(), axes)?;
            one(movement::reshape_tensor(x, target)?)
        }
        Op::Transpose { perm } => one(movement::transpose(arg(&args, 0)?, perm)?),
        Op::Pad { pads, mode, value } => one(movement::pad(arg(&args, 0)?, pads, *mode, *value)?),
        Op::Gather { axis } => one(movement::gather(arg(&args, 0)?, arg(&args, 1)?, *axis)?),
        Op::Expand { shape } => one(movement::expand(arg(&args, 0)?, shape)?),
        Op::Identity | Op::Dropout { .. } => one(split_first(args)?.0),
        Op::ConvTranspose2d(c) => {
            let bias = match args.get(2) {
                Some(b) => Some(f32_of(b, "bias")?),
                None => None,
            };
            one(Tensor::F32(convt::conv_transpose2d(
                f32_of(arg(&args, 0)?, "input")?,
                f32_of(arg(&args, 1)?, "weight")?,
                bias,
                c,
            )?))
        }
        Op::InstanceNormalization { epsilon } => one(Tensor::F32(norm::instance_norm(
            f32_of(arg(&args, 0)?, "input")?,
            f32_of(arg(&args, 1)?, "scale")?,
            f32_of(arg(&args, 2)?, "bias")?,
            *epsilon,
        )?)),
        Op::LayerNormalization { axis, epsilon } => {
            let bias = match args.get(2) {
                Some(b) => Some(f32_of(b, "bias")?),
                None => None,
            };
            one(Tensor::F32(norm::layer_norm(
                f32_of(arg(&args, 0)?, "input")?,
                f32_of(arg(&args, 1)?, "scale")?,
                bias,
                *axis,
                *epsilon,
            )?))
        }
        Op::PRelu => {
            let (x, rest) = split_first(args)?;
            let slope = f32_of(arg(&rest, 0)?, "slope")?;
            one(Tensor::F32(elementwise::prelu(
                into_f32(x, "input")?,
                slope,
            )?))
        }
        Op::Shape { start, end } => one(generate::shape(arg(&args, 0)?, *start, *end)?),
        Op::ConstantOfShape { shape, value } => one(generate::constant_of_shape(shape, *value)?),
        Op::Range(r) => one(generate::range(r)?),
        Op::Tile { repeats } => one(generate::tile(arg(&args, 0)?, repeats)?),
        Op::Where => one(logic::where_(
            arg(&args, 0)?,
            arg(&args, 1)?,
            arg(&args, 2)?,
        )?),
        Op::Compare(k) => one(logic::compare(arg(&args, 0)?, arg(&args, 1)?, *k)?),
        Op::Not => one(logic::not(split_first(args)?.0)?),
        Op::Logical(k) => one(logic::logical(arg(&args, 0)?, arg(&args, 1)?, *k)?),
        Op::Cast { to } => one(logic::cast(split_first(args)?.0, *to)),
        Op::Einsum { equation } => {
            let ops: Vec<&ArrayD<f32>> = args
                .iter()
                .enumerate()
                .map(|(k, t)| f32_of(t, &format!("operand {k}")))
                .collect::<KResult<_>>()?;
            one(Tensor::F32(einsum::einsum(equation, &ops)?))
        }
        Op::Resize(r) => one(Tensor::F32(resize::resize(
            f32_of(arg(&args, 0)?, "input")?,
            r,
        )?)),
        Op::Recurrent(r) => {
            let ins: Vec<&ArrayD<f32>> = args
                .iter()
                .enumerate()
                .map(|(k, t)| f32_of(t, &format!("input {k}")))
                .collect::<KResult<_>>()?;
            Ok(rnn::recurrent(r, &ins)?
                .into_iter()
                .map(Tensor::F32)
                .collect())
        }
    }
}

/// The first operand, owned (moved when the interpreter gave it up, else
/// cloned), and the rest.
fn split_first(args: Vec<Cow<'_, Tensor>>) -> KResult<(Tensor, Vec<Cow<'_, Tensor>>)> {
    let mut it = args.into_iter();
    let x = it
        .next()
        .ok_or_else(|| "operand 0 is missing".to_string())?
        .into_owned();
    Ok((x, it.collect()))
}

fn into_f32(t: Tensor, what: &str) -> KResult<ArrayD<f32>> {
    let ty = t.ty();
    t.into_f32()
        .ok_or_else(|| format!("{what} must be f32, found {ty}"))
}
