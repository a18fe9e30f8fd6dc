//! The operation set. Every op is a plain value: its attributes are fields,
//! its tensors arrive as inputs, and its weights live in the weight store.
//!
//! `Op::attrs` and `Op::from_attrs` are the single description of each op's
//! attributes; the text format, the ONNX importer and the e-graph all use
//! them, so adding an op means adding it here, to `infer`, and to the
//! interpreter.

use crate::attr::fmt_f32;
use crate::attr::{AttrError, AttrReader, AttrValue};
use crate::init::Init;
use crate::types::DType;

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
    /// The algorithm a backend should use, so the choice is visible and
    /// editable in the IR (`algo=...`); `Auto` leaves it to the backend's
    /// heuristic. The `select-conv-algo` pass fills it in; whether a forced
    /// algorithm applies is checked by the backend, which falls back with
    /// a note when it does not.
    pub algo: ConvAlgo,
    /// How a backend lays out the packed filter of a GEMM-based algorithm
    /// (`layout=...`, printed only when chosen); `Auto` leaves it to the
    /// backend. The `egraph` pass may choose it by cost.
    pub layout: WeightLayout,
    /// How the input and result activations are laid out (`data=...`,
    /// printed only when blocked): plain NCHW, or channel-blocked so a
    /// CPU kernel's vector lanes run over channels (see [`DataLayout`]).
    pub data: DataLayout,
}

/// The memory layout of a Conv2d's input and result activations. `Nchw`
/// is ONNX's; `Nchw8c` stores `[N, C/8, H, W, 8]`, eight consecutive
/// channels of one pixel side by side, the layout onnxruntime's CPU
/// convolutions use: a pointwise conv's GEMM then reads each pixel's
/// channels as one contiguous run instead of `C` rows a plane apart, and a
/// depthwise conv's vectors are channels, one FMA per tap. The filter and
/// bias keep their logical shapes either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DataLayout {
    /// `[N, C, H, W]`.
    #[default]
    Nchw,
    /// `[N, C/8, H, W, 8]`.
    Nchw8c,
    /// A conv's input plain `[N, C, H, W]`, its result `[N, C/8, H, W,
    /// 8]`: the conv that feeds a channel-blocked chain from a plain
    /// tensor (a 3-channel stem) writes the chain's first activation
    /// blocked instead of plain and then reordered. Only a conv's `data`
    /// takes it; a tensor is stored in one of the other two.
    NchwToNchw8c,
}

impl DataLayout {
    /// Every variant, in text-format order.
    pub const ALL: [DataLayout; 3] = [
        DataLayout::Nchw,
        DataLayout::Nchw8c,
        DataLayout::NchwToNchw8c,
    ];

    /// Channels per block of the blocked layout.
    pub const BLOCK: usize = 8;

    /// The text-format spelling.
    pub fn name(self) -> &'static str {
        match self {
            DataLayout::Nchw => "nchw",
            DataLayout::Nchw8c => "nchw8c",
            DataLayout::NchwToNchw8c => "nchw_to_nchw8c",
        }
    }

    /// The layout of a conv's input under this `data` attribute.
    pub fn input(self) -> DataLayout {
        match self {
            DataLayout::Nchw | DataLayout::NchwToNchw8c => DataLayout::Nchw,
            DataLayout::Nchw8c => DataLayout::Nchw8c,
        }
    }

    /// The layout of a conv's result under this `data` attribute.
    pub fn result(self) -> DataLayout {
        match self {
            DataLayout::Nchw => DataLayout::Nchw,
            DataLayout::Nchw8c | DataLayout::NchwToNchw8c => DataLayout::Nchw8c,
        }
    }

    /// Parses a text-format spelling.
    pub fn from_name(s: &str) -> Option<DataLayout> {
        DataLayout::ALL.into_iter().find(|a| a.name() == s)
    }

    /// The stored shape of a logical `[n, c, h, w]` activation (a conv's
    /// result, for [`DataLayout::NchwToNchw8c`]).
    pub fn stored_shape(self, n: usize, c: usize, h: usize, w: usize) -> Vec<usize> {
        match self.result() {
            DataLayout::Nchw => vec![n, c, h, w],
            _ => vec![n, c / Self::BLOCK, h, w, Self::BLOCK],
        }
    }

    /// The logical `[n, c, h, w]` of a stored shape, if it has this
    /// layout's rank (and block); `None` for [`DataLayout::NchwToNchw8c`],
    /// which is no tensor's layout (read a conv's operands through
    /// [`DataLayout::input`] and [`DataLayout::result`]).
    pub fn logical_dims(self, s: &[usize]) -> Option<[usize; 4]> {
        match (self, s) {
            (DataLayout::Nchw, &[n, c, h, w]) => Some([n, c, h, w]),
            (DataLayout::Nchw8c, &[n, cb, h, w, b]) if b == Self::BLOCK => {
                Some([n, cb * Self::BLOCK, h, w])
            }
            _ => None,
        }
    }
}

/// The layout of a conv's packed filter for the CPU backend's GEMM
/// micro-kernels (`layout=` in the text format): output channels along a
/// micro-kernel tile's rows with its vector lanes over output pixels
/// (`panels`, every machine), or output channels as the vector lanes and
/// each pixel a broadcast (`lanes`, AVX-512 machines), which wastes no
/// lanes on maps whose pixel count is not a multiple of the vector width
/// (7x7, 14x14). A backend that cannot honour `lanes` uses `panels`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WeightLayout {
    /// No choice recorded: the backend decides per shape.
    #[default]
    Auto,
    /// Output channels along tile rows, pixels in vector lanes.
    Panels,
    /// Output channels in vector lanes, pixels broadcast.
    Lanes,
}

impl WeightLayout {
    /// Every variant, in text-format order.
    pub const ALL: [WeightLayout; 3] = [
        WeightLayout::Auto,
        WeightLayout::Panels,
        WeightLayout::Lanes,
    ];

    /// The text-format spelling.
    pub fn name(self) -> &'static str {
        match self {
            WeightLayout::Auto => "auto",
            WeightLayout::Panels => "panels",
            WeightLayout::Lanes => "lanes",
        }
    }

    /// Parses a text-format spelling.
    pub fn from_name(s: &str) -> Option<WeightLayout> {
        WeightLayout::ALL.into_iter().find(|a| a.name() == s)
    }
}

/// Convolution algorithm recorded on a Conv2d node (`algo=` in the text
/// format). It names a lowering, not a cost: the CPU backend has one
/// lowering per variant. `Pointwise` (1x1, stride 1, no padding: the input
/// is the GEMM operand) and `Depthwise` (one channel per group, direct
/// loop) are kept as variants of their own rather than folded into
/// `Im2col`/`Direct`, because they are separate lowerings the heuristic
/// picks, and the IR should show exactly what will run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ConvAlgo {
    /// No choice recorded: the backend's heuristic decides.
    #[default]
    Auto,
    /// Direct loop nest.
    Direct,
    /// im2col packing then GEMM.
    Im2col,
    /// 1x1 convolution as a plain GEMM.
    Pointwise,
    /// Depthwise direct loop.
    Depthwise,
    /// Winograd F(2x2, 3x3).
    Winograd2,
    /// Winograd F(4x4, 3x3).
    Winograd4,
    /// FFT convolution.
    Fft,
}

impl ConvAlgo {
    /// Every variant, in text-format order.
    pub const ALL: [ConvAlgo; 8] = [
        ConvAlgo::Auto,
        ConvAlgo::Direct,
        ConvAlgo::Im2col,
        ConvAlgo::Pointwise,
        ConvAlgo::Depthwise,
        ConvAlgo::Winograd2,
        ConvAlgo::Winograd4,
        ConvAlgo::Fft,
    ];

    /// The text-format spelling.
    pub fn name(self) -> &'static str {
        match self {
            ConvAlgo::Auto => "auto",
            ConvAlgo::Direct => "direct",
            ConvAlgo::Im2col => "im2col",
            ConvAlgo::Pointwise => "pointwise",
            ConvAlgo::Depthwise => "depthwise",
            ConvAlgo::Winograd2 => "winograd2",
            ConvAlgo::Winograd4 => "winograd4",
            ConvAlgo::Fft => "fft",
        }
    }

    /// Parses a text-format spelling.
    pub fn from_name(s: &str) -> Option<ConvAlgo> {
        ConvAlgo::ALL.into_iter().find(|a| a.name() == s)
    }
}

impl Default for Conv2d {
    fn default() -> Self {
        Conv2d {
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
            group: 1,
            algo: ConvAlgo::Auto,
            layout: WeightLayout::Auto,
            data: DataLayout::Nchw,
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
    /// How input and result are stored: `[N, C, H, W]`, or channel-blocked
    /// `[N, C/8, H, W, 8]` (`data=nchw8c`, placed by the CPU backend's
    /// `block-channels` pass inside a blocked region). The pooling is the
    /// same either way.
    pub data: DataLayout,
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
    /// `gamma * x` if positive else `gamma * alpha * (e^x - 1)`.
    Selu {
        /// Negative saturation.
        alpha: f32,
        /// Output scale.
        gamma: f32,
    },
    /// -1, 0 or 1 (f32 and i64; NaN stays NaN).
    Sign,
    /// Round down.
    Floor,
    /// Round up.
    Ceil,
    /// Round to nearest, ties to even.
    Round,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
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

/// 2-D transposed convolution attributes (ONNX `ConvTranspose` on NCHW
/// data). `output_shape` and `auto_pad` are resolved to explicit `pads` at
/// import, so the output size is always
/// `stride*(in-1) + output_padding + (k-1)*dilation + 1 - pad_begin - pad_end`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvTranspose2d {
    /// `[stride_h, stride_w]`.
    pub strides: [usize; 2],
    /// `[top, left, bottom, right]`, cropped from the full output.
    pub pads: [usize; 4],
    /// `[dilation_h, dilation_w]`.
    pub dilations: [usize; 2],
    /// Number of groups.
    pub group: usize,
    /// `[extra_h, extra_w]` rows/columns added at the bottom/right.
    pub output_padding: [usize; 2],
}

impl Default for ConvTranspose2d {
    fn default() -> Self {
        ConvTranspose2d {
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
            group: 1,
            output_padding: [0, 0],
        }
    }
}

/// A scalar literal of one of the IR's dtypes: the fill of
/// `ConstantOfShape`, whose dtype it also determines.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// An f32 value.
    F32(f32),
    /// An i64 value.
    I64(i64),
    /// A bool value.
    Bool(bool),
}

impl Scalar {
    /// The dtype of the value.
    pub fn dtype(self) -> DType {
        match self {
            Scalar::F32(_) => DType::F32,
            Scalar::I64(_) => DType::I64,
            Scalar::Bool(_) => DType::Bool,
        }
    }
}

/// Static `Range`: `start + i * delta` for
/// `i < max(ceil((limit - start) / delta), 0)`, in the variant's dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RangeParams {
    /// f32 range.
    F32 {
        /// First value.
        start: f32,
        /// Exclusive bound.
        limit: f32,
        /// Step (non-zero).
        delta: f32,
    },
    /// i64 range.
    I64 {
        /// First value.
        start: i64,
        /// Exclusive bound.
        limit: i64,
        /// Step (non-zero).
        delta: i64,
    },
}

impl RangeParams {
    /// Number of elements produced, or an error for a zero or NaN step or
    /// an absurd length.
    pub fn len(&self) -> Result<usize, String> {
        match *self {
            RangeParams::F32 {
                start,
                limit,
                delta,
            } => {
                if delta == 0.0 || !delta.is_finite() || !start.is_finite() || !limit.is_finite() {
                    return Err(format!(
                        "Range needs finite start, limit and a finite non-zero delta, found {start}, {limit}, {delta}"
                    ));
                }
                // ONNX computes the count in the input type.
                let n = ((limit - start) / delta).ceil();
                if n <= 0.0 {
                    Ok(0)
                } else if n > (1u64 << 40) as f32 {
                    Err(format!("Range of {n} elements is too large"))
                } else {
                    Ok(n as usize)
                }
            }
            RangeParams::I64 {
                start,
                limit,
                delta,
            } => {
                if delta == 0 {
                    return Err("Range delta cannot be 0".into());
                }
                let (span, d) = (limit as i128 - start as i128, delta as i128);
                // ceil(span / d) for either sign of d.
                let n = if (span > 0) == (d > 0) && span != 0 {
                    (span.abs() + d.abs() - 1) / d.abs()
                } else {
                    0
                };
                if n > 1i128 << 40 {
                    Err(format!("Range of {n} elements is too large"))
                } else {
                    Ok(n as usize)
                }
            }
        }
    }

    /// Whether the range is empty (or invalid).
    pub fn is_empty(&self) -> bool {
        self.len().map_or(true, |n| n == 0)
    }
}

/// Elementwise comparisons producing bool (numpy broadcasting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compare {
    /// `a == b` (f32, i64 or bool operands).
    Equal,
    /// `a < b` (f32 or i64).
    Less,
    /// `a > b` (f32 or i64).
    Greater,
}

/// Elementwise two-input boolean ops (numpy broadcasting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Logical {
    /// `a && b`.
    And,
    /// `a || b`.
    Or,
}

/// Interpolation of `Resize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResizeMode {
    /// Nearest neighbour, rounded by [`NearestMode`].
    Nearest,
    /// n-linear over the resized axes.
    Linear,
}

/// How `Resize` maps an output coordinate back to the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoordMode {
    /// `(x + 0.5) / scale - 0.5`.
    HalfPixel,
    /// Like half_pixel, but 0 when the output axis has length 1.
    PytorchHalfPixel,
    /// `x * (in - 1) / (out - 1)` (0 when `out == 1`).
    AlignCorners,
    /// `x / scale`.
    Asymmetric,
}

/// Rounding of a fractional source coordinate in nearest mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NearestMode {
    /// Round half down.
    RoundPreferFloor,
    /// Round half up.
    RoundPreferCeil,
    /// Always down.
    Floor,
    /// Always up.
    Ceil,
}

/// Static `Resize`: output sizes are attributes; `scales`, when present
/// (one per axis), are the factors ONNX uses in the coordinate transform
/// (which can differ from `sizes / in` once sizes were floored).
#[derive(Clone, Debug, PartialEq)]
pub struct Resize {
    /// Output shape, one entry per input axis.
    pub sizes: Vec<usize>,
    /// Per-axis scale for the coordinate transform; empty = `sizes / in`.
    pub scales: Vec<f32>,
    /// Interpolation.
    pub mode: ResizeMode,
    /// Coordinate transform.
    pub coord: CoordMode,
    /// Rounding in nearest mode.
    pub nearest: NearestMode,
}

/// Direction a recurrent layer scans its sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RnnDirection {
    /// `t = 0 .. seq`.
    Forward,
    /// `t = seq-1 .. 0`.
    Reverse,
    /// Both, forward first on the direction axis.
    Bidirectional,
}

impl RnnDirection {
    /// Number of directions (the leading dim of W, R, B and the states).
    pub fn count(self) -> usize {
        match self {
            RnnDirection::Bidirectional => 2,
            _ => 1,
        }
    }
}

/// Activation functions a recurrent cell may use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RnnActivation {
    /// `max(x, 0)`.
    Relu,
    /// Hyperbolic tangent.
    Tanh,
    /// Logistic sigmoid.
    Sigmoid,
    /// `max(0, min(1, alpha * x + beta))`.
    HardSigmoid {
        /// Slope.
        alpha: f32,
        /// Offset.
        beta: f32,
    },
}

impl RnnActivation {
    /// Text spelling: the ONNX name, HardSigmoid with its parameters.
    pub fn spelling(self) -> String {
        match self {
            RnnActivation::Relu => "Relu".into(),
            RnnActivation::Tanh => "Tanh".into(),
            RnnActivation::Sigmoid => "Sigmoid".into(),
            RnnActivation::HardSigmoid { alpha, beta } => {
                format!("HardSigmoid({};{})", fmt_f32(alpha), fmt_f32(beta))
            }
        }
    }

    /// Parses [`RnnActivation::spelling`]; a bare `HardSigmoid` takes
    /// ONNX's defaults (0.2, 0.5).
    pub fn parse(s: &str) -> Result<RnnActivation, String> {
        let s = s.trim();
        Ok(match s {
            "Relu" => RnnActivation::Relu,
            "Tanh" => RnnActivation::Tanh,
            "Sigmoid" => RnnActivation::Sigmoid,
            "HardSigmoid" => RnnActivation::HardSigmoid {
                alpha: 0.2,
                beta: 0.5,
            },
            _ => {
                let params = s
                    .strip_prefix("HardSigmoid(")
                    .and_then(|r| r.strip_suffix(')'))
                    .and_then(|r| r.split_once(';'))
                    .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
                match params {
                    Some((alpha, beta)) => RnnActivation::HardSigmoid { alpha, beta },
                    None => {
                        return Err(format!(
                            "unsupported activation `{s}` (dnnc supports Relu, Tanh, Sigmoid and HardSigmoid)"
                        ))
                    }
                }
            }
        })
    }
}

/// Which recurrent cell, with its cell-specific options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CellKind {
    /// ONNX `RNN`: `H = f(X W^T + H R^T + Wb + Rb)`; gates: 1.
    Rnn,
    /// ONNX `GRU`, gates `z, r, h`.
    Gru {
        /// Apply R_h before multiplying by the reset gate.
        linear_before_reset: bool,
    },
    /// ONNX `LSTM`, gates `i, o, f, c`.
    Lstm {
        /// Couple the forget gate to the input gate (`f = 1 - i`).
        input_forget: bool,
    },
}

impl CellKind {
    /// Gates stacked in W and R (1, 3 or 4).
    pub fn gates(self) -> usize {
        match self {
            CellKind::Rnn => 1,
            CellKind::Gru { .. } => 3,
            CellKind::Lstm { .. } => 4,
        }
    }

    /// Activation functions per direction (1, 2 or 3).
    pub fn activations_per_direction(self) -> usize {
        match self {
            CellKind::Rnn => 1,
            CellKind::Gru { .. } => 2,
            CellKind::Lstm { .. } => 3,
        }
    }

    /// ONNX's default activations for one direction.
    pub fn default_activations(self) -> &'static [RnnActivation] {
        match self {
            CellKind::Rnn => &[RnnActivation::Tanh],
            CellKind::Gru { .. } => &[RnnActivation::Sigmoid, RnnActivation::Tanh],
            CellKind::Lstm { .. } => &[
                RnnActivation::Sigmoid,
                RnnActivation::Tanh,
                RnnActivation::Tanh,
            ],
        }
    }
}

/// A recurrent layer (ONNX RNN, GRU or LSTM with `layout = 0`). Inputs are
/// fixed: `X[seq,batch,in]`, `W[dirs,G*hid,in]`, `R[dirs,G*hid,hid]`,
/// `B[dirs,2*G*hid]`, `initial_h[dirs,batch,hid]`, and for LSTM
/// `initial_c[dirs,batch,hid]` and optionally `P[dirs,3*hid]`; the importer
/// supplies zeros for omitted ones. Results: `Y[seq,dirs,batch,hid]`,
/// `Y_h[dirs,batch,hid]` and, for LSTM, `Y_c[dirs,batch,hid]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Recurrent {
    /// The cell.
    pub cell: CellKind,
    /// Hidden size.
    pub hidden_size: usize,
    /// Scan direction.
    pub direction: RnnDirection,
    /// Activations, `activations_per_direction` for each direction in turn.
    pub activations: Vec<RnnActivation>,
    /// Gate pre-activations are clipped to `[-clip, clip]` (`inf`: none).
    pub clip: f32,
}

/// Parsed form of an Einsum equation (explicit or implicit, no ellipsis).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EinsumSpec {
    /// Index letters of each operand, in axis order (may repeat: diagonal).
    pub inputs: Vec<Vec<u8>>,
    /// Index letters of the result (distinct).
    pub output: Vec<u8>,
}

impl EinsumSpec {
    /// Parses an equation such as `bij,bjk->bik` (spaces ignored). Without
    /// `->` the output is the letters used exactly once, sorted (numpy's
    /// implicit mode).
    pub fn parse(eq: &str) -> Result<EinsumSpec, String> {
        let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
        if eq.contains("...") || eq.contains('.') {
            return Err(format!(
                "Einsum equation `{eq}`: ellipsis (`...`) is not supported"
            ));
        }
        let (lhs, rhs) = match eq.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (eq.as_str(), None),
        };
        let letters = |s: &str| -> Result<Vec<u8>, String> {
            s.bytes()
                .map(|b| {
                    if b.is_ascii_alphabetic() {
                        Ok(b)
                    } else {
                        Err(format!(
                            "Einsum equation `{eq}`: unexpected character `{}`",
                            b as char
                        ))
                    }
                })
                .collect()
        };
        let inputs = lhs.split(',').map(letters).collect::<Result<Vec<_>, _>>()?;
        let output = match rhs {
            Some(r) => {
                let out = letters(r)?;
                for (i, c) in out.iter().enumerate() {
                    if out[..i].contains(c) {
                        return Err(format!(
                            "Einsum equation `{eq}`: output index `{}` is repeated",
                            *c as char
                        ));
                    }
                    if !inputs.iter().any(|op| op.contains(c)) {
                        return Err(format!(
                            "Einsum equation `{eq}`: output index `{}` appears in no operand",
                            *c as char
                        ));
                    }
                }
                out
            }
            None => {
                let mut once: Vec<u8> = (b'A'..=b'z')
                    .filter(|c| inputs.iter().flatten().filter(|&x| x == c).count() == 1)
                    .collect();
                once.sort_unstable();
                once
            }
        };
        Ok(EinsumSpec { inputs, output })
    }

    /// Every distinct index letter: the output's first, then the summed
    /// ones in order of appearance.
    pub fn all_indices(&self) -> Vec<u8> {
        let mut all = self.output.clone();
        for &c in self.inputs.iter().flatten() {
            if !all.contains(&c) {
                all.push(c);
            }
        }
        all
    }
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
    /// 2-D transposed convolution: `x[N,C,H,W]`, `w[C,M/g,kH,kW]`,
    /// optional `b[M]`.
    ConvTranspose2d(ConvTranspose2d),
    /// Per-(image, channel) normalisation over the spatial axes: inputs
    /// x `[N,C,...]`, scale `[C]`, bias `[C]`.
    InstanceNormalization {
        /// Added to the variance.
        epsilon: f32,
    },
    /// Normalisation over axes `axis..`: inputs x, scale, optional bias
    /// (both broadcast to `x.shape[axis..]`); only the `Y` result.
    LayerNormalization {
        /// First normalised axis (negative counts from the end).
        axis: i64,
        /// Added to the variance.
        epsilon: f32,
    },
    /// `x` if positive else `slope * x`; slope broadcasts to x.
    PRelu,
    /// The input's shape `[start, end)` as i64 (ONNX clamping rules).
    Shape {
        /// First axis (negative counts from the end).
        start: i64,
        /// End axis, exclusive; `i64::MAX` = to the end.
        end: i64,
    },
    /// A tensor of static `shape` filled with `value` (no inputs).
    ConstantOfShape {
        /// Result shape.
        shape: Vec<usize>,
        /// Fill value; its dtype is the result's.
        value: Scalar,
    },
    /// A static arithmetic sequence (no inputs).
    Range(RangeParams),
    /// Repeat the input `repeats[i]` times along axis `i`.
    Tile {
        /// One count per axis.
        repeats: Vec<usize>,
    },
    /// `cond ? x : y` with numpy broadcasting of all three.
    Where,
    /// Elementwise comparison to bool.
    Compare(Compare),
    /// Boolean negation.
    Not,
    /// Elementwise boolean and/or.
    Logical(Logical),
    /// Conversion between dtypes with ONNX rules (float to int truncates,
    /// non-zero is true).
    Cast {
        /// Target dtype.
        to: DType,
    },
    /// Einstein summation over f32 operands.
    Einsum {
        /// The equation, whitespace removed.
        equation: String,
    },
    /// Static resize (nearest or n-linear).
    Resize(Resize),
    /// RNN, GRU or LSTM layer (multi-result).
    Recurrent(Recurrent),
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
    "Selu",
    "Sign",
    "Floor",
    "Ceil",
    "Round",
    "Sin",
    "Cos",
    "ConvTranspose2d",
    "InstanceNormalization",
    "LayerNormalization",
    "PRelu",
    "Shape",
    "ConstantOfShape",
    "Range",
    "Tile",
    "Where",
    "Equal",
    "Less",
    "Greater",
    "Not",
    "And",
    "Or",
    "Cast",
    "Einsum",
    "Resize",
    "RNN",
    "GRU",
    "LSTM",
];

fn arr2(v: Vec<usize>) -> [usize; 2] {
    [v[0], v[1]]
}

fn arr4(v: Vec<usize>) -> [usize; 4] {
    [v[0], v[1], v[2], v[3]]
}

fn non_negative(v: Vec<i64>, key: &str) -> Result<Vec<usize>, AttrError> {
    v.into_iter()
        .map(|x| {
            usize::try_from(x)
                .map_err(|_| AttrError::at(key, format!("values must be non-negative, found {x}")))
        })
        .collect()
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
                Unary::Selu { .. } => "Selu",
                Unary::Sign => "Sign",
                Unary::Floor => "Floor",
                Unary::Ceil => "Ceil",
                Unary::Round => "Round",
                Unary::Sin => "Sin",
                Unary::Cos => "Cos",
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
            Op::ConvTranspose2d(_) => "ConvTranspose2d",
            Op::InstanceNormalization { .. } => "InstanceNormalization",
            Op::LayerNormalization { .. } => "LayerNormalization",
            Op::PRelu => "PRelu",
            Op::Shape { .. } => "Shape",
            Op::ConstantOfShape { .. } => "ConstantOfShape",
            Op::Range(_) => "Range",
            Op::Tile { .. } => "Tile",
            Op::Where => "Where",
            Op::Compare(c) => match c {
                Compare::Equal => "Equal",
                Compare::Less => "Less",
                Compare::Greater => "Greater",
            },
            Op::Not => "Not",
            Op::Logical(l) => match l {
                Logical::And => "And",
                Logical::Or => "Or",
            },
            Op::Cast { .. } => "Cast",
            Op::Einsum { .. } => "Einsum",
            Op::Resize(_) => "Resize",
            Op::Recurrent(r) => match r.cell {
                CellKind::Rnn => "RNN",
                CellKind::Gru { .. } => "GRU",
                CellKind::Lstm { .. } => "LSTM",
            },
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
            Op::ConstantOfShape { .. } | Op::Range(_) => (0, 0),
            Op::Conv2d(_) | Op::Gemm(_) | Op::ConvTranspose2d(_) => (2, 3),
            Op::LayerNormalization { .. } => (2, 3),
            Op::MatMul
            | Op::Binary(_)
            | Op::Gather { .. }
            | Op::PRelu
            | Op::Compare(_)
            | Op::Logical(_) => (2, 2),
            Op::InstanceNormalization { .. } | Op::Where => (3, 3),
            Op::BatchNormalization { .. } => (5, 5),
            Op::Concat { .. } | Op::Einsum { .. } => (1, usize::MAX),
            Op::Recurrent(r) => match r.cell {
                CellKind::Lstm { .. } => (6, 7),
                _ => (5, 5),
            },
            _ => (1, 1),
        }
    }

    /// Number of results.
    pub fn num_outputs(&self) -> usize {
        match self {
            Op::Split { split, .. } => split.len(),
            Op::Recurrent(r) => match r.cell {
                CellKind::Lstm { .. } => 3,
                _ => 2,
            },
            _ => 1,
        }
    }

    /// The op's class, used by cost analysis and fusion.
    pub fn class(&self) -> OpClass {
        match self {
            Op::Input | Op::Param(_) | Op::Constant => OpClass::Source,
            Op::Conv2d(_)
            | Op::MatMul
            | Op::Gemm(_)
            | Op::ConvTranspose2d(_)
            | Op::Einsum { .. }
            | Op::Recurrent(_) => OpClass::Contraction,
            Op::MaxPool(_)
            | Op::AveragePool(_)
            | Op::GlobalAveragePool
            | Op::GlobalMaxPool
            | Op::Lrn(_)
            | Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::Reduce { .. }
            | Op::InstanceNormalization { .. }
            | Op::LayerNormalization { .. } => OpClass::Reduction,
            Op::BatchNormalization { .. }
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::PRelu
            | Op::Where
            | Op::Compare(_)
            | Op::Not
            | Op::Logical(_)
            | Op::Cast { .. }
            | Op::Range(_) => OpClass::Elementwise,
            Op::Concat { .. }
            | Op::Split { .. }
            | Op::Slice { .. }
            | Op::Transpose { .. }
            | Op::Pad { .. }
            | Op::Gather { .. }
            | Op::Expand { .. }
            | Op::Shape { .. }
            | Op::ConstantOfShape { .. }
            | Op::Tile { .. }
            | Op::Resize(_) => OpClass::DataMovement,
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
            Op::Conv2d(c) => {
                let mut a = vec![
                    ("strides", ints(&c.strides)),
                    ("pads", ints(&c.pads)),
                    ("dilations", ints(&c.dilations)),
                    ("group", Int(c.group as i64)),
                    ("algo", Word(c.algo.name().to_string())),
                ];
                // Only a chosen layout is printed, so dumps of graphs that
                // leave it to the backend read as before it existed.
                if c.layout != WeightLayout::Auto {
                    a.push(("layout", Word(c.layout.name().to_string())));
                }
                if c.data != DataLayout::Nchw {
                    a.push(("data", Word(c.data.name().to_string())));
                }
                a
            }
            Op::Gemm(g) => vec![
                ("alpha", f(g.alpha)),
                ("beta", f(g.beta)),
                ("transA", Int(g.trans_a as i64)),
                ("transB", Int(g.trans_b as i64)),
            ],
            Op::MaxPool(p) => {
                let mut a = vec![
                    ("kernel", ints(&p.kernel)),
                    ("strides", ints(&p.strides)),
                    ("pads", ints(&p.pads)),
                    ("dilations", ints(&p.dilations)),
                    ("ceil_mode", Int(p.ceil_mode as i64)),
                ];
                if p.data != DataLayout::Nchw {
                    a.push(("data", Word(p.data.name().to_string())));
                }
                a
            }
            Op::AveragePool(p) => {
                let mut a = vec![
                    ("kernel", ints(&p.kernel)),
                    ("strides", ints(&p.strides)),
                    ("pads", ints(&p.pads)),
                    ("ceil_mode", Int(p.ceil_mode as i64)),
                    ("count_include_pad", Int(p.count_include_pad as i64)),
                ];
                if p.data != DataLayout::Nchw {
                    a.push(("data", Word(p.data.name().to_string())));
                }
                a
            }
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
                Unary::Selu { alpha, gamma } => vec![("alpha", f(alpha)), ("gamma", f(gamma))],
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
            Op::ConvTranspose2d(c) => vec![
                ("strides", ints(&c.strides)),
                ("pads", ints(&c.pads)),
                ("dilations", ints(&c.dilations)),
                ("group", Int(c.group as i64)),
                ("output_padding", ints(&c.output_padding)),
            ],
            Op::InstanceNormalization { epsilon } => vec![("epsilon", f(*epsilon))],
            Op::LayerNormalization { axis, epsilon } => {
                vec![("axis", Int(*axis)), ("epsilon", f(*epsilon))]
            }
            Op::Shape { start, end } => vec![("start", Int(*start)), ("end", Int(*end))],
            Op::ConstantOfShape { shape, value } => vec![
                ("shape", ints(shape)),
                (
                    "value",
                    match *value {
                        Scalar::F32(v) => f(v),
                        Scalar::I64(v) => Int(v),
                        Scalar::Bool(v) => Int(v as i64),
                    },
                ),
                ("dtype", Word(value.dtype().name().into())),
            ],
            Op::Range(r) => match *r {
                RangeParams::F32 {
                    start,
                    limit,
                    delta,
                } => vec![
                    ("start", f(start)),
                    ("limit", f(limit)),
                    ("delta", f(delta)),
                    ("dtype", Word("f32".into())),
                ],
                RangeParams::I64 {
                    start,
                    limit,
                    delta,
                } => vec![
                    ("start", Int(start)),
                    ("limit", Int(limit)),
                    ("delta", Int(delta)),
                    ("dtype", Word("i64".into())),
                ],
            },
            Op::Tile { repeats } => vec![("repeats", ints(repeats))],
            Op::Cast { to } => vec![("to", Word(to.name().into()))],
            Op::Einsum { equation } => vec![("equation", Word(equation.clone()))],
            Op::Resize(r) => vec![
                ("sizes", ints(&r.sizes)),
                ("scales", Floats(r.scales.clone())),
                (
                    "mode",
                    Word(
                        match r.mode {
                            ResizeMode::Nearest => "nearest",
                            ResizeMode::Linear => "linear",
                        }
                        .into(),
                    ),
                ),
                (
                    "coordinate_transformation_mode",
                    Word(
                        match r.coord {
                            CoordMode::HalfPixel => "half_pixel",
                            CoordMode::PytorchHalfPixel => "pytorch_half_pixel",
                            CoordMode::AlignCorners => "align_corners",
                            CoordMode::Asymmetric => "asymmetric",
                        }
                        .into(),
                    ),
                ),
                (
                    "nearest_mode",
                    Word(
                        match r.nearest {
                            NearestMode::RoundPreferFloor => "round_prefer_floor",
                            NearestMode::RoundPreferCeil => "round_prefer_ceil",
                            NearestMode::Floor => "floor",
                            NearestMode::Ceil => "ceil",
                        }
                        .into(),
                    ),
                ),
            ],
            Op::Recurrent(r) => {
                let acts: Vec<String> = r.activations.iter().map(|a| a.spelling()).collect();
                let mut v = vec![
                    ("hidden_size", Int(r.hidden_size as i64)),
                    (
                        "direction",
                        Word(
                            match r.direction {
                                RnnDirection::Forward => "forward",
                                RnnDirection::Reverse => "reverse",
                                RnnDirection::Bidirectional => "bidirectional",
                            }
                            .into(),
                        ),
                    ),
                    ("activations", Word(acts.join(","))),
                    ("clip", f(r.clip)),
                ];
                match r.cell {
                    CellKind::Rnn => {}
                    CellKind::Gru {
                        linear_before_reset,
                    } => v.push(("linear_before_reset", Int(linear_before_reset as i64))),
                    CellKind::Lstm { input_forget } => {
                        v.push(("input_forget", Int(input_forget as i64)))
                    }
                }
                v
            }
            Op::MatMul
            | Op::GlobalAveragePool
            | Op::GlobalMaxPool
            | Op::Binary(_)
            | Op::Identity
            | Op::PRelu
            | Op::Where
            | Op::Compare(_)
            | Op::Not
            | Op::Logical(_) => {
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
                algo: {
                    let names = ConvAlgo::ALL.map(ConvAlgo::name);
                    let w = a.word("algo", "auto", &names)?;
                    ConvAlgo::from_name(&w).unwrap_or_default()
                },
                layout: {
                    let names = WeightLayout::ALL.map(WeightLayout::name);
                    let w = a.word("layout", "auto", &names)?;
                    WeightLayout::from_name(&w).unwrap_or_default()
                },
                data: {
                    let names = DataLayout::ALL.map(DataLayout::name);
                    let w = a.word("data", "nchw", &names)?;
                    DataLayout::from_name(&w).unwrap_or_default()
                },
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
                    data: {
                        // A pool's input and result share one layout.
                        let names = [DataLayout::Nchw, DataLayout::Nchw8c].map(DataLayout::name);
                        let w = a.word("data", "nchw", &names)?;
                        DataLayout::from_name(&w).unwrap_or_default()
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
            "Selu" => Op::Unary(Unary::Selu {
                alpha: a.float("alpha", 1.673_263_2)?,
                gamma: a.float("gamma", 1.050_701)?,
            }),
            "Sign" => Op::Unary(Unary::Sign),
            "Floor" => Op::Unary(Unary::Floor),
            "Ceil" => Op::Unary(Unary::Ceil),
            "Round" => Op::Unary(Unary::Round),
            "Sin" => Op::Unary(Unary::Sin),
            "Cos" => Op::Unary(Unary::Cos),
            "ConvTranspose2d" => Op::ConvTranspose2d(ConvTranspose2d {
                strides: arr2(a.usizes_n("strides", 2, 1, 1)?),
                pads: arr4(a.usizes_n("pads", 4, 0, 0)?),
                dilations: arr2(a.usizes_n("dilations", 2, 1, 1)?),
                group: a.usize_min("group", 1, 1)?,
                output_padding: arr2(a.usizes_n("output_padding", 2, 0, 0)?),
            }),
            "InstanceNormalization" => Op::InstanceNormalization {
                epsilon: a.float("epsilon", 1e-5)?,
            },
            "LayerNormalization" => Op::LayerNormalization {
                axis: a.int("axis", -1)?,
                epsilon: a.float("epsilon", 1e-5)?,
            },
            "PRelu" => Op::PRelu,
            "Shape" => Op::Shape {
                start: a.int("start", 0)?,
                end: a.int("end", i64::MAX)?,
            },
            "ConstantOfShape" => {
                let shape = non_negative(a.ints("shape", &[])?, "shape")?;
                let dtype = a.word("dtype", "f32", &["f32", "i64", "bool"])?;
                let value = match dtype.as_str() {
                    "i64" => Scalar::I64(a.int("value", 0)?),
                    "bool" => Scalar::Bool(a.flag("value", false)?),
                    _ => Scalar::F32(a.float("value", 0.0)?),
                };
                Op::ConstantOfShape { shape, value }
            }
            "Range" => {
                let dtype = a.word("dtype", "f32", &["f32", "i64"])?;
                let r = if dtype == "i64" {
                    RangeParams::I64 {
                        start: a.int("start", 0)?,
                        limit: a.int("limit", 0)?,
                        delta: a.int("delta", 1)?,
                    }
                } else {
                    RangeParams::F32 {
                        start: a.float("start", 0.0)?,
                        limit: a.float("limit", 0.0)?,
                        delta: a.float("delta", 1.0)?,
                    }
                };
                r.len().map_err(|m| AttrError::at("delta", m))?;
                Op::Range(r)
            }
            "Tile" => Op::Tile {
                repeats: non_negative(a.ints_required("repeats")?, "repeats")?,
            },
            "Where" => Op::Where,
            "Equal" => Op::Compare(Compare::Equal),
            "Less" => Op::Compare(Compare::Less),
            "Greater" => Op::Compare(Compare::Greater),
            "Not" => Op::Not,
            "And" => Op::Logical(Logical::And),
            "Or" => Op::Logical(Logical::Or),
            "Cast" => {
                let to = a
                    .word_any("to")?
                    .ok_or_else(|| AttrError::at("to", "is required"))?;
                Op::Cast {
                    to: DType::from_name(&to).ok_or_else(|| {
                        AttrError::at("to", format!("`{to}` is not one of f32, i64, bool"))
                    })?,
                }
            }
            "Einsum" => {
                let eq = a
                    .word_any("equation")?
                    .ok_or_else(|| AttrError::at("equation", "is required"))?;
                EinsumSpec::parse(&eq).map_err(|m| AttrError::at("equation", m))?;
                Op::Einsum {
                    equation: eq.chars().filter(|c| !c.is_whitespace()).collect(),
                }
            }
            "Resize" => {
                let sizes = non_negative(a.ints_required("sizes")?, "sizes")?;
                let scales = a.floats("scales", &[])?;
                if !scales.is_empty() && scales.len() != sizes.len() {
                    return Err(AttrError::at(
                        "scales",
                        format!("has {} entries but sizes has {}", scales.len(), sizes.len()),
                    ));
                }
                if scales.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
                    return Err(AttrError::at(
                        "scales",
                        "scales must be positive and finite",
                    ));
                }
                let mode = match a.word_any("mode")?.as_deref().unwrap_or("nearest") {
                    "nearest" => ResizeMode::Nearest,
                    "linear" => ResizeMode::Linear,
                    m => {
                        return Err(AttrError::at(
                            "mode",
                            format!("`{m}` is not supported (dnnc supports nearest and linear; cubic is not implemented)"),
                        ))
                    }
                };
                let coord = match a
                    .word_any("coordinate_transformation_mode")?
                    .as_deref()
                    .unwrap_or("half_pixel")
                {
                    "half_pixel" => CoordMode::HalfPixel,
                    "pytorch_half_pixel" => CoordMode::PytorchHalfPixel,
                    "align_corners" => CoordMode::AlignCorners,
                    "asymmetric" => CoordMode::Asymmetric,
                    m => {
                        return Err(AttrError::at(
                            "coordinate_transformation_mode",
                            format!("`{m}` is not supported (dnnc supports half_pixel, pytorch_half_pixel, align_corners and asymmetric)"),
                        ))
                    }
                };
                let nearest = match a
                    .word(
                        "nearest_mode",
                        "round_prefer_floor",
                        &["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"],
                    )?
                    .as_str()
                {
                    "round_prefer_ceil" => NearestMode::RoundPreferCeil,
                    "floor" => NearestMode::Floor,
                    "ceil" => NearestMode::Ceil,
                    _ => NearestMode::RoundPreferFloor,
                };
                Op::Resize(Resize {
                    sizes,
                    scales,
                    mode,
                    coord,
                    nearest,
                })
            }
            "RNN" | "GRU" | "LSTM" => {
                let cell = match name {
                    "RNN" => CellKind::Rnn,
                    "GRU" => CellKind::Gru {
                        linear_before_reset: a.flag("linear_before_reset", false)?,
                    },
                    _ => CellKind::Lstm {
                        input_forget: a.flag("input_forget", false)?,
                    },
                };
                let hidden_size = a
                    .ints_opt("hidden_size")?
                    .and_then(|v| (v.len() == 1 && v[0] >= 1).then_some(v[0] as usize))
                    .ok_or_else(|| {
                        AttrError::at("hidden_size", "is required and must be a positive integer")
                    })?;
                let direction = match a
                    .word(
                        "direction",
                        "forward",
                        &["forward", "reverse", "bidirectional"],
                    )?
                    .as_str()
                {
                    "reverse" => RnnDirection::Reverse,
                    "bidirectional" => RnnDirection::Bidirectional,
                    _ => RnnDirection::Forward,
                };
                let per = cell.activations_per_direction();
                let want = per * direction.count();
                let activations = match a.word_any("activations")? {
                    None => cell
                        .default_activations()
                        .iter()
                        .copied()
                        .cycle()
                        .take(want)
                        .collect(),
                    Some(w) => w
                        .split(',')
                        .map(RnnActivation::parse)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|m| AttrError::at("activations", m))?,
                };
                if activations.len() != want {
                    return Err(AttrError::at(
                        "activations",
                        format!(
                            "{name} with direction {} needs {want} activations, found {}",
                            match direction {
                                RnnDirection::Forward => "forward",
                                RnnDirection::Reverse => "reverse",
                                RnnDirection::Bidirectional => "bidirectional",
                            },
                            activations.len()
                        ),
                    ));
                }
                let clip = a.float("clip", f32::INFINITY)?;
                if clip.is_nan() || clip <= 0.0 {
                    return Err(AttrError::at("clip", "must be positive"));
                }
                Op::Recurrent(Recurrent {
                    cell,
                    hidden_size,
                    direction,
                    activations,
                    clip,
                })
            }
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
                "Tile" => attrs.push(("repeats".into(), AttrValue::Ints(vec![2]))),
                "Cast" => attrs.push(("to".into(), AttrValue::Word("i64".into()))),
                "Einsum" => attrs.push(("equation".into(), AttrValue::Word("ij, jk".into()))),
                "Resize" => attrs.push(("sizes".into(), AttrValue::Ints(vec![1, 4]))),
                "RNN" | "GRU" | "LSTM" => attrs.push(("hidden_size".into(), AttrValue::Int(3))),
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
