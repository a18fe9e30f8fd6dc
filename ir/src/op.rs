//! The operation set. Every op is a plain value: its attributes are fields,
//! its tensors arrive as inputs, and its weights live in the weight store.
//!
//! `Op::attrs` and `Op::from_attrs` are the single description of each op's
//! attributes; the text format, the ONNX importer and the e-graph all use
//! them, so adding an op means adding it here, to `infer`, and to the
//! interpreter.

use crate::attr::{AttrError, AttrReader, AttrValue};
use crate::init::Init;

/// 2-D convolution attributes (ONNX `Conv` on NCHW data).
#[derive(Clone, Debug, PartialEq)]
pub struct Conv2d {
    /// `[stride_h, stride_w]`.
    pub strides: [usize; 2],
    /// `[top, left, bottom, right]`, ONNX order (begins then ends).
    pub pads: [usize; 4],
    /// `[dilation_h, dilation_w]`.
    pub dilations: [usize; 2],
    /// Number of groups; `group == C_in` is depthwise.
    pub group: usize,
}

impl Default for Conv2d {
    fn default() -> Self {
        Conv2d {
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
            group: 1,
        }
    }
}

/// `Y = alpha * op(A) * op(B) + beta * C`, C broadcast to `[M, N]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemm {
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of C.
    pub beta: f32,
    /// Transpose A first.
    pub trans_a: bool,
    /// Transpose B first (PyTorch's Linear exports `trans_b = 1`).
    pub trans_b: bool,
}

impl Default for Gemm {
    fn default() -> Self {
        Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: false,
        }
    }
}

/// Windowed 2-D pooling attributes shared by MaxPool and AveragePool.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool2d {
    /// `[k_h, k_w]`.
    pub kernel: [usize; 2],
    /// `[stride_h, stride_w]`.
    pub strides: [usize; 2],
    /// `[top, left, bottom, right]`.
    pub pads: [usize; 4],
    /// `[dilation_h, dilation_w]` (MaxPool only; 1 for AveragePool).
    pub dilations: [usize; 2],
    /// Round the output size up rather than down.
    pub ceil_mode: bool,
    /// AveragePool: divide by the full window including padding.
    pub count_include_pad: bool,
}

/// Local response normalisation across channels (AlexNet).
#[derive(Clone, Debug, PartialEq)]
pub struct Lrn {
    /// Number of channels summed over.
    pub size: usize,
    /// Scale.
    pub alpha: f32,
    /// Exponent.
    pub beta: f32,
    /// Additive constant.
    pub bias: f32,
}

/// Padding mode of `Pad`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PadMode {
    /// Fill with a constant.
    Constant,
    /// Mirror without repeating the edge.
    Reflect,
    /// Repeat the edge value.
    Edge,
}

impl PadMode {
    /// Text spelling.
    pub fn name(self) -> &'static str {
        match self {
            PadMode::Constant => "constant",
            PadMode::Reflect => "reflect",
            PadMode::Edge => "edge",
        }
    }
}

/// Which reduction a `Reduce*` op performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// Arithmetic mean.
    Mean,
    /// Sum.
    Sum,
    /// Maximum.
    Max,
}

/// Elementwise single-input ops. Parameterised ones carry their constants.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unary {
    /// `max(x, 0)`.
    Relu,
    /// `x` if positive else `alpha * x`.
    LeakyRelu {
        /// Negative slope.
        alpha: f32,
    },
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
    /// `min(max(x, min), max)`; ReLU6 is `Clip{0, 6}`.
    Clip {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// `max(0, min(1, alpha * x + beta))`.
    HardSigmoid {
        /// Slope.
        alpha: f32,
        /// Offset.
        beta: f32,
    },
    /// `x * HardSigmoid(x; 1/6, 0.5)`.
    HardSwish,
    /// `x` if positive else `alpha * (e^x - 1)`.
    Elu {
        /// Negative saturation.
        alpha: f32,
    },
    /// `ln(1 + e^x)`.
    Softplus,
    /// Gaussian error linear unit, exact (erf) or tanh approximation.
    Gelu {
        /// Use the tanh approximation.
        tanh_approx: bool,
    },
    /// Square root.
    Sqrt,
    /// `e^x`.
    Exp,
    /// Natural log.
    Log,
    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
    /// `1 / x`.
    Reciprocal,
    /// Gauss error function.
    Erf,
}

/// Elementwise two-input ops with numpy broadcasting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Binary {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `a ^ b`.
    Pow,
    /// `max(a, b)`.
    Max,
    /// `min(a, b)`.
    Min,
}

/// One IR operation.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A graph input, fed at run time.
    Input,
    /// A trainable parameter; data from the weight store or its initializer.
    Param(Init),
    /// A literal tensor; data in the weight store under the value's name.
    Constant,
    /// 2-D convolution: inputs `x[N,C,H,W]`, `w[M,C/g,kH,kW]`, optional `b[M]`.
    Conv2d(Conv2d),
    /// numpy-style matrix product with batch broadcasting.
    MatMul,
    /// General matrix multiply: inputs A, B, optional C.
    Gemm(Gemm),
    /// Windowed maximum.
    MaxPool(Pool2d),
    /// Windowed mean.
    AveragePool(Pool2d),
    /// Mean over H and W, keeping `[N,C,1,1]`.
    GlobalAveragePool,
    /// Max over H and W, keeping `[N,C,1,1]`.
    GlobalMaxPool,
    /// Inference-form batch norm: inputs x, scale, bias, mean, var.
    BatchNormalization {
        /// Added to the variance.
        epsilon: f32,
    },
    /// Local response normalisation.
    Lrn(Lrn),
    /// Elementwise unary op.
    Unary(Unary),
    /// Elementwise binary op with broadcasting.
    Binary(Binary),
    /// Softmax along `axis`.
    Softmax {
        /// Axis (negative counts from the end).
        axis: i64,
    },
    /// Log of softmax along `axis`.
    LogSoftmax {
        /// Axis (negative counts from the end).
        axis: i64,
    },
    /// Reduction over `axes` (all axes when empty).
    Reduce {
        /// Which reduction.
        kind: ReduceKind,
        /// Axes reduced; empty means all.
        axes: Vec<i64>,
        /// Keep reduced axes as size 1.
        keepdims: bool,
    },
    /// Join inputs along `axis`.
    Concat {
        /// Axis.
        axis: i64,
    },
    /// Cut along `axis` into pieces of the given sizes (one output each).
    Split {
        /// Axis.
        axis: i64,
        /// Size of each output along `axis`.
        split: Vec<usize>,
    },
    /// ONNX slice semantics (negative and clamped indices, steps).
    Slice {
        /// Start per sliced axis.
        starts: Vec<i64>,
        /// End per sliced axis (exclusive).
        ends: Vec<i64>,
        /// Axes sliced.
        axes: Vec<i64>,
        /// Step per sliced axis.
        steps: Vec<i64>,
    },
    /// Reinterpret with a new shape; `0` copies a dim, `-1` is inferred.
    Reshape {
        /// Target shape.
        shape: Vec<i64>,
    },
    /// Collapse into 2-D at `axis`.
    Flatten {
        /// Split point.
        axis: i64,
    },
    /// Permute axes.
    Transpose {
        /// Permutation.
        perm: Vec<usize>,
    },
    /// Remove size-1 axes (all of them when `axes` is empty).
    Squeeze {
        /// Axes removed.
        axes: Vec<i64>,
    },
    /// Insert size-1 axes at the given output positions.
    Unsqueeze {
        /// Axes inserted.
        axes: Vec<i64>,
    },
    /// Pad every axis; `pads` is all begins then all ends.
    Pad {
        /// Begins then ends, one per axis.
        pads: Vec<i64>,
        /// Fill mode.
        mode: PadMode,
        /// Fill value for `constant`.
        value: f32,
    },
    /// Take entries along `axis` at i64 indices (second input).
    Gather {
        /// Axis.
        axis: i64,
    },
    /// Broadcast to `shape` (numpy rules, both directions).
    Expand {
        /// Target shape.
        shape: Vec<i64>,
    },
    /// Pass-through.
    Identity,
    /// Inference-mode dropout: pass-through. Kept so training can revive it.
    Dropout {
        /// Drop probability (unused at inference).
        ratio: f32,
    },
}

/// Coarse grouping of ops for analyses and fusion decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// Inputs, parameters and constants: produce data, compute nothing.
    Source,
    /// Conv2d, MatMul, Gemm: multiply-accumulate reductions.
    Contraction,
    /// Pooling, reductions, softmax and normalisations with a reduction.
    Reduction,
    /// One output element from the matching input elements.
    Elementwise,
    /// Pure re-indexing that copies data (concat, slice, transpose, pad...).
    DataMovement,
    /// Metadata-only change: the buffer is reused unchanged.
    View,
}

/// Every op name the IR knows, in documentation order (sources excluded).
pub const OP_NAMES: &[&str] = &[
    "Conv2d",
    "MatMul",
    "Gemm",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "BatchNormalization",
    "LRN",
    "Relu",
    "LeakyRelu",
    "Sigmoid",
    "Tanh",
    "Clip",
    "HardSigmoid",
    "HardSwish",
    "Elu",
    "Softplus",
    "Gelu",
    "Sqrt",
    "Exp",
    "Log",
    "Neg",
    "Abs",
    "Reciprocal",
    "Erf",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Softmax",
    "LogSoftmax",
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "Concat",
    "Split",
    "Slice",
    "Reshape",
    "Flatten",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Pad",
    "Gather",
    "Expand",
    "Identity",
    "Dropout",
];

fn arr2(v: Vec<usize>) -> [usize; 2] {
    [v[0], v[1]]
}

fn arr4(v: Vec<usize>) -> [usize; 4] {
    [v[0], v[1], v[2], v[3]]
}

fn ints(v: &[usize]) -> AttrValue {
    AttrValue::Ints(v.iter().map(|&x| x as i64).collect())
}

impl Op {
    /// The op's name in the text format (ONNX's op_type where one exists).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input => "input",
            Op::Param(_) => "param",
            Op::Constant => "const",
            Op::Conv2d(_) => "Conv2d",
            Op::MatMul => "MatMul",
            Op::Gemm(_) => "Gemm",
            Op::MaxPool(_) => "MaxPool",
            Op::AveragePool(_) => "AveragePool",
            Op::GlobalAveragePool => "GlobalAveragePool",
            Op::GlobalMaxPool => "GlobalMaxPool",
            Op::BatchNormalization { .. } => "BatchNormalization",
            Op::Lrn(_) => "LRN",
            Op::Unary(u) => match u {
                Unary::Relu => "Relu",
                Unary::LeakyRelu { .. } => "LeakyRelu",
                Unary::Sigmoid => "Sigmoid",
                Unary::Tanh => "Tanh",
                Unary::Clip { .. } => "Clip",
                Unary::HardSigmoid { .. } => "HardSigmoid",
                Unary::HardSwish => "HardSwish",
                Unary::Elu { .. } => "Elu",
                Unary::Softplus => "Softplus",
                Unary::Gelu { .. } => "Gelu",
                Unary::Sqrt => "Sqrt",
                Unary::Exp => "Exp",
                Unary::Log => "Log",
                Unary::Neg => "Neg",
                Unary::Abs => "Abs",
                Unary::Reciprocal => "Reciprocal",
                Unary::Erf => "Erf",
            },
            Op::Binary(b) => match b {
                Binary::Add => "Add",
                Binary::Sub => "Sub",
                Binary::Mul => "Mul",
                Binary::Div => "Div",
                Binary::Pow => "Pow",
                Binary::Max => "Max",
                Binary::Min => "Min",
            },
            Op::Softmax { .. } => "Softmax",
            Op::LogSoftmax { .. } => "LogSoftmax",
            Op::Reduce { kind, .. } => match kind {
                ReduceKind::Mean => "ReduceMean",
                ReduceKind::Sum => "ReduceSum",
                ReduceKind::Max => "ReduceMax",
            },
            Op::Concat { .. } => "Concat",
            Op::Split { .. } => "Split",
            Op::Slice { .. } => "Slice",
            Op::Reshape { .. } => "Reshape",
            Op::Flatten { .. } => "Flatten",
            Op::Transpose { .. } => "Transpose",
            Op::Squeeze { .. } => "Squeeze",
            Op::Unsqueeze { .. } => "Unsqueeze",
            Op::Pad { .. } => "Pad",
            Op::Gather { .. } => "Gather",
            Op::Expand { .. } => "Expand",
            Op::Identity => "Identity",
            Op::Dropout { .. } => "Dropout",
        }
    }

    /// Whether `name` is a computational op of the IR (see [`OP_NAMES`]).
    pub fn is_known(name: &str) -> bool {
        OP_NAMES.contains(&name)
    }

    /// Inclusive bounds on the number of inputs.
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Op::Input | Op::Param(_) | Op::Constant => (0, 0),
            Op::Conv2d(_) | Op::Gemm(_) => (2, 3),
            Op::MatMul | Op::Binary(_) | Op::Gather { .. } => (2, 2),
            Op::BatchNormalization { .. } => (5, 5),
            Op::Concat { .. } => (1, usize::MAX),
            _ => (1, 1),
        }
    }

    /// Number of results.
    pub fn num_outputs(&self) -> usize {
        match self {
            Op::Split { split, .. } => split.len(),
            _ => 1,
        }
    }

    /// The op's class, used by cost analysis and fusion.
    pub fn class(&self) -> OpClass {
        match self {
            Op::Input | Op::Param(_) | Op::Constant => OpClass::Source,
            Op::Conv2d(_) | Op::MatMul | Op::Gemm(_) => OpClass::Contraction,
            Op::MaxPool(_)
            | Op::AveragePool(_)
            | Op::GlobalAveragePool
            | Op::GlobalMaxPool
            | Op::Lrn(_)
            | Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::Reduce { .. } => OpClass::Reduction,
            Op::BatchNormalization { .. } | Op::Unary(_) | Op::Binary(_) => OpClass::Elementwise,
            Op::Concat { .. }
            | Op::Split { .. }
            | Op::Slice { .. }
            | Op::Transpose { .. }
            | Op::Pad { .. }
            | Op::Gather { .. }
            | Op::Expand { .. } => OpClass::DataMovement,
            Op::Reshape { .. }
            | Op::Flatten { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. }
            | Op::Identity
            | Op::Dropout { .. } => OpClass::View,
        }
    }

    /// Attributes in canonical order. The printer writes all of them, so a
    /// printed graph never depends on defaults.
    pub fn attrs(&self) -> Vec<(&'static str, AttrValue)> {
        use AttrValue::*;
        let f = Float;
        match self {
            Op::Input | Op::Param(_) | Op::Constant => vec![],
            Op::Conv2d(c) => vec![
                ("strides", ints(&c.strides)),
                ("pads", ints(&c.pads)),
                ("dilations", ints(&c.dilations)),
                ("group", Int(c.group as i64)),
            ],
            Op::Gemm(g) => vec![
                ("alpha", f(g.alpha)),
                ("beta", f(g.beta)),
                ("transA", Int(g.trans_a as i64)),
                ("transB", Int(g.trans_b as i64)),
            ],
            Op::MaxPool(p) => vec![
                ("kernel", ints(&p.kernel)),
                ("strides", ints(&p.strides)),
                ("pads", ints(&p.pads)),
                ("dilations", ints(&p.dilations)),
                ("ceil_mode", Int(p.ceil_mode as i64)),
            ],
            Op::AveragePool(p) => vec![
                ("kernel", ints(&p.kernel)),
                ("strides", ints(&p.strides)),
                ("pads", ints(&p.pads)),
                ("ceil_mode", Int(p.ceil_mode as i64)),
                ("count_include_pad", Int(p.count_include_pad as i64)),
            ],
            Op::BatchNormalization { epsilon } => vec![("epsilon", f(*epsilon))],
            Op::Lrn(l) => vec![
                ("size", Int(l.size as i64)),
                ("alpha", f(l.alpha)),
                ("beta", f(l.beta)),
                ("bias", f(l.bias)),
            ],
            Op::Unary(u) => match *u {
                Unary::LeakyRelu { alpha } | Unary::Elu { alpha } => vec![("alpha", f(alpha))],
                Unary::Clip { min, max } => vec![("min", f(min)), ("max", f(max))],
                Unary::HardSigmoid { alpha, beta } => {
                    vec![("alpha", f(alpha)), ("beta", f(beta))]
                }
                Unary::Gelu { tanh_approx } => vec![(
                    "approximate",
                    Word(if tanh_approx { "tanh" } else { "none" }.into()),
                )],
                _ => vec![],
            },
            Op::Softmax { axis } | Op::LogSoftmax { axis } => vec![("axis", Int(*axis))],
            Op::Reduce { axes, keepdims, .. } => vec![
                ("axes", Ints(axes.clone())),
                ("keepdims", Int(*keepdims as i64)),
            ],
            Op::Concat { axis } | Op::Flatten { axis } | Op::Gather { axis } => {
                vec![("axis", Int(*axis))]
            }
            Op::Split { axis, split } => vec![("axis", Int(*axis)), ("split", ints(split))],
            Op::Slice {
                starts,
                ends,
                axes,
                steps,
            } => vec![
                ("starts", Ints(starts.clone())),
                ("ends", Ints(ends.clone())),
                ("axes", Ints(axes.clone())),
                ("steps", Ints(steps.clone())),
            ],
            Op::Reshape { shape } | Op::Expand { shape } => vec![("shape", Ints(shape.clone()))],
            Op::Transpose { perm } => vec![("perm", ints(perm))],
            Op::Squeeze { axes } | Op::Unsqueeze { axes } => vec![("axes", Ints(axes.clone()))],
            Op::Pad { pads, mode, value } => vec![
                ("pads", Ints(pads.clone())),
                ("mode", Word(mode.name().into())),
                ("value", f(*value)),
            ],
            Op::Dropout { ratio } => vec![("ratio", f(*ratio))],
            Op::MatMul
            | Op::GlobalAveragePool
            | Op::GlobalMaxPool
            | Op::Binary(_)
            | Op::Identity => {
                vec![]
            }
        }
    }

    /// Builds a computational op from its name and attributes. Missing
    /// attributes take ONNX's defaults; unknown ones are rejected. Returns
    /// `Ok(None)` when `name` is not an op of the IR.
    pub fn from_attrs(name: &str, mut a: AttrReader) -> Result<Option<Op>, AttrError> {
        let op = match name {
            "Conv2d" => Op::Conv2d(Conv2d {
                strides: arr2(a.usizes_n("strides", 2, 1, 1)?),
                pads: arr4(a.usizes_n("pads", 4, 0, 0)?),
                dilations: arr2(a.usizes_n("dilations", 2, 1, 1)?),
                group: a.usize_min("group", 1, 1)?,
            }),
            "MatMul" => Op::MatMul,
            "Gemm" => Op::Gemm(Gemm {
                alpha: a.float("alpha", 1.0)?,
                beta: a.float("beta", 1.0)?,
                trans_a: a.flag("transA", false)?,
                trans_b: a.flag("transB", false)?,
            }),
            "MaxPool" | "AveragePool" => {
                let kernel = a
                    .ints_opt("kernel")?
                    .ok_or_else(|| AttrError::at("kernel", "is required"))?;
                if kernel.len() != 2 || kernel.iter().any(|&k| k < 1) {
                    return Err(AttrError::at(
                        "kernel",
                        "expected 2 positive values `[k_h,k_w]`",
                    ));
                }
                let max = name == "MaxPool";
                let p = Pool2d {
                    kernel: [kernel[0] as usize, kernel[1] as usize],
                    strides: arr2(a.usizes_n("strides", 2, 1, 1)?),
                    pads: arr4(a.usizes_n("pads", 4, 0, 0)?),
                    dilations: if max {
                        arr2(a.usizes_n("dilations", 2, 1, 1)?)
                    } else {
                        [1, 1]
                    },
                    ceil_mode: a.flag("ceil_mode", false)?,
                    count_include_pad: if max {
                        false
                    } else {
                        a.flag("count_include_pad", false)?
                    },
                };
                let extent = |i: usize| {
                    (p.kernel[i] - 1)
                        .saturating_mul(p.dilations[i])
                        .saturating_add(1)
                };
                if p.pads[0] >= extent(0)
                    || p.pads[2] >= extent(0)
                    || p.pads[1] >= extent(1)
                    || p.pads[3] >= extent(1)
                {
                    return Err(AttrError::at(
                        "pads",
                        "padding must be smaller than the window",
                    ));
                }
                if max {
                    Op::MaxPool(p)
                } else {
                    Op::AveragePool(p)
                }
            }
            "GlobalAveragePool" => Op::GlobalAveragePool,
            "GlobalMaxPool" => Op::GlobalMaxPool,
            "BatchNormalization" => Op::BatchNormalization {
                epsilon: a.float("epsilon", 1e-5)?,
            },
            "LRN" => Op::Lrn(Lrn {
                size: a
                    .ints_opt("size")?
                    .and_then(|v| v.first().copied())
                    .filter(|&s| s >= 1)
                    .ok_or_else(|| AttrError::at("size", "is required and must be positive"))?
                    as usize,
                alpha: a.float("alpha", 1e-4)?,
                beta: a.float("beta", 0.75)?,
                bias: a.float("bias", 1.0)?,
            }),
            "Relu" => Op::Unary(Unary::Relu),
            "LeakyRelu" => Op::Unary(Unary::LeakyRelu {
                alpha: a.float("alpha", 0.01)?,
            }),
            "Sigmoid" => Op::Unary(Unary::Sigmoid),
            "Tanh" => Op::Unary(Unary::Tanh),
            "Clip" => {
                let min = a.float("min", f32::NEG_INFINITY)?;
                let max = a.float("max", f32::INFINITY)?;
                if min > max {
                    return Err(AttrError::at("min", format!("min {min} exceeds max {max}")));
                }
                Op::Unary(Unary::Clip { min, max })
            }
            "HardSigmoid" => Op::Unary(Unary::HardSigmoid {
                alpha: a.float("alpha", 0.2)?,
                beta: a.float("beta", 0.5)?,
            }),
            "HardSwish" => Op::Unary(Unary::HardSwish),
            "Elu" => Op::Unary(Unary::Elu {
                alpha: a.float("alpha", 1.0)?,
            }),
            "Softplus" => Op::Unary(Unary::Softplus),
            "Gelu" => Op::Unary(Unary::Gelu {
                tanh_approx: a.word("approximate", "none", &["none", "tanh"])? == "tanh",
            }),
            "Sqrt" => Op::Unary(Unary::Sqrt),
            "Exp" => Op::Unary(Unary::Exp),
            "Log" => Op::Unary(Unary::Log),
            "Neg" => Op::Unary(Unary::Neg),
            "Abs" => Op::Unary(Unary::Abs),
            "Reciprocal" => Op::Unary(Unary::Reciprocal),
            "Erf" => Op::Unary(Unary::Erf),
            "Add" => Op::Binary(Binary::Add),
            "Sub" => Op::Binary(Binary::Sub),
            "Mul" => Op::Binary(Binary::Mul),
            "Div" => Op::Binary(Binary::Div),
            "Pow" => Op::Binary(Binary::Pow),
            "Max" => Op::Binary(Binary::Max),
            "Min" => Op::Binary(Binary::Min),
            "Softmax" => Op::Softmax {
                axis: a.int("axis", -1)?,
            },
            "LogSoftmax" => Op::LogSoftmax {
                axis: a.int("axis", -1)?,
            },
            "ReduceMean" | "ReduceSum" | "ReduceMax" => Op::Reduce {
                kind: match name {
                    "ReduceMean" => ReduceKind::Mean,
                    "ReduceSum" => ReduceKind::Sum,
                    _ => ReduceKind::Max,
                },
                axes: a.ints("axes", &[])?,
                keepdims: a.flag("keepdims", true)?,
            },
            "Concat" => Op::Concat {
                axis: a.int("axis", 0)?,
            },
            "Split" => {
                let axis = a.int("axis", 0)?;
                let split = a.ints_required("split")?;
                if split.is_empty() || split.iter().any(|&s| s < 0) {
                    return Err(AttrError::at(
                        "split",
                        "expected one or more non-negative sizes",
                    ));
                }
                Op::Split {
                    axis,
                    split: split.into_iter().map(|s| s as usize).collect(),
                }
            }
            "Slice" => {
                let starts = a.ints_required("starts")?;
                let ends = a.ints_required("ends")?;
                let n = starts.len();
                let axes = a.ints("axes", &(0..n as i64).collect::<Vec<_>>())?;
                let steps = a.ints("steps", &vec![1; n])?;
                if ends.len() != n || axes.len() != n || steps.len() != n {
                    return Err(AttrError::op(
                        "Slice needs starts, ends, axes and steps of equal length",
                    ));
                }
                if steps.contains(&0) {
                    return Err(AttrError::at("steps", "a step cannot be 0"));
                }
                Op::Slice {
                    starts,
                    ends,
                    axes,
                    steps,
                }
            }
            "Reshape" => Op::Reshape {
                shape: a.ints_required("shape")?,
            },
            "Flatten" => Op::Flatten {
                axis: a.int("axis", 1)?,
            },
            "Transpose" => {
                let perm = a.ints_required("perm")?;
                let mut seen = vec![false; perm.len()];
                for &p in &perm {
                    if p < 0 || p as usize >= perm.len() || seen[p as usize] {
                        return Err(AttrError::at("perm", "is not a permutation"));
                    }
                    seen[p as usize] = true;
                }
                Op::Transpose {
                    perm: perm.into_iter().map(|p| p as usize).collect(),
                }
            }
            "Squeeze" => Op::Squeeze {
                axes: a.ints("axes", &[])?,
            },
            "Unsqueeze" => Op::Unsqueeze {
                axes: a.ints_required("axes")?,
            },
            "Pad" => Op::Pad {
                pads: a.ints_required("pads")?,
                mode: match a
                    .word("mode", "constant", &["constant", "reflect", "edge"])?
                    .as_str()
                {
                    "reflect" => PadMode::Reflect,
                    "edge" => PadMode::Edge,
                    _ => PadMode::Constant,
                },
                value: a.float("value", 0.0)?,
            },
            "Gather" => Op::Gather {
                axis: a.int("axis", 0)?,
            },
            "Expand" => Op::Expand {
                shape: a.ints_required("shape")?,
            },
            "Identity" => Op::Identity,
            "Dropout" => Op::Dropout {
                ratio: a.float("ratio", 0.5)?,
            },
            _ => return Ok(None),
        };
        a.finish(name)?;
        Ok(Some(op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_op_round_trips_through_attrs() {
        for &name in OP_NAMES {
            let mut attrs: Vec<(String, AttrValue)> = vec![];
            match name {
                "MaxPool" | "AveragePool" => {
                    attrs.push(("kernel".into(), AttrValue::Ints(vec![2, 2])))
                }
                "LRN" => attrs.push(("size".into(), AttrValue::Int(5))),
                "Split" => attrs.push(("split".into(), AttrValue::Ints(vec![1, 2]))),
                "Slice" => {
                    attrs.push(("starts".into(), AttrValue::Ints(vec![0])));
                    attrs.push(("ends".into(), AttrValue::Ints(vec![1])));
                }
                "Reshape" | "Expand" => attrs.push(("shape".into(), AttrValue::Ints(vec![-1]))),
                "Transpose" => attrs.push(("perm".into(), AttrValue::Ints(vec![1, 0]))),
                "Unsqueeze" => attrs.push(("axes".into(), AttrValue::Ints(vec![0]))),
                "Pad" => attrs.push(("pads".into(), AttrValue::Ints(vec![1, 1]))),
                _ => {}
            }
            let op = Op::from_attrs(name, AttrReader::new(attrs))
                .unwrap()
                .unwrap_or_else(|| panic!("{name} not built"));
            assert_eq!(op.name(), name);
            let again = Op::from_attrs(
                name,
                AttrReader::new(op.attrs().into_iter().map(|(k, v)| (k.to_string(), v))),
            )
            .unwrap()
            .unwrap();
            assert_eq!(op, again, "{name}");
        }
    }

    #[test]
    fn unknown_attribute_is_named() {
        let e = Op::from_attrs(
            "Relu",
            AttrReader::new([("alpha".to_string(), AttrValue::Float(1.0))]),
        )
        .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("alpha"));
    }

    #[test]
    fn unknown_op_is_none() {
        assert!(Op::from_attrs("Frobnicate", AttrReader::default())
            .unwrap()
            .is_none());
    }
}
