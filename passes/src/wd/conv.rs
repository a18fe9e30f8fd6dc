//! W-D figures of the convolution algorithms of the survey's Appendix C
//! (direct, im2col, FFT, Winograd), with the corrections listed in
//! `docs/cost-model.md`.
//!
//! Everything is a function of [`ConvShape`], a plain description of one
//! convolution, so the cost model can evaluate algorithms for shapes that are
//! not (yet) in a graph.

use super::rules::{ceil_log2, prod, Cost};
use dnnc_ir::op::Conv2d;
use dnnc_ir::TensorType;
use serde::Serialize;

/// The hidden constant `c` of the FFT formula: real operations per
/// `n log2 n` for a 2-D transform of `n` real points. A complex radix-2 FFT
/// takes `(n/2) log2 n` butterflies of 10 real operations (one complex
/// multiply, two complex adds), i.e. `5 n log2 n`; real input halves that.
pub const FFT_C: f64 = 2.5;

/// The geometry of one 2-D convolution (NCHW, OIHW weights), everything the
/// algorithm formulas need.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ConvShape {
    /// Batch `N`.
    pub n: u64,
    /// Input channels `C_in` (all groups).
    pub c_in: u64,
    /// Output channels `C_out` (all groups).
    pub c_out: u64,
    /// Input height `H` (unpadded).
    pub h: u64,
    /// Input width `W` (unpadded).
    pub w: u64,
    /// Output height `H'`.
    pub h_out: u64,
    /// Output width `W'`.
    pub w_out: u64,
    /// Kernel height `K_y`.
    pub kh: u64,
    /// Kernel width `K_x`.
    pub kw: u64,
    /// `[stride_h, stride_w]`.
    pub strides: [u64; 2],
    /// `[dilation_h, dilation_w]`.
    pub dilations: [u64; 2],
    /// `[top, left, bottom, right]`.
    pub pads: [u64; 4],
    /// Groups `g`; each group convolves `C_in/g` channels into `C_out/g`.
    pub group: u64,
}

impl ConvShape {
    /// Reads the geometry off a Conv2d node's attributes and its input `x`,
    /// weight `w` and output `y` types, the activations read through the
    /// conv's data layout (a channel-blocked `[N, C/8, H, W, 8]` is `C`
    /// channels, not `C/8`).
    pub fn from_types(c: &Conv2d, x: &TensorType, w: &TensorType, y: &TensorType) -> ConvShape {
        let d = |t: &TensorType, i: usize| t.shape.get(i).copied().unwrap_or(1) as u64;
        let logical = |t: &TensorType, layout: dnnc_ir::op::DataLayout| {
            layout.logical_dims(&t.shape).map_or_else(
                || [d(t, 0), d(t, 1), d(t, 2), d(t, 3)],
                |dims| dims.map(|v| v as u64),
            )
        };
        let ([n, c_in, h, w_in], [_, _, h_out, w_out]) =
            (logical(x, c.data.input()), logical(y, c.data.result()));
        ConvShape {
            n,
            c_in,
            c_out: d(w, 0),
            h,
            w: w_in,
            h_out,
            w_out,
            kh: d(w, 2),
            kw: d(w, 3),
            strides: c.strides.map(|s| s as u64),
            dilations: c.dilations.map(|s| s as u64),
            pads: c.pads.map(|s| s as u64),
            group: c.group.max(1) as u64,
        }
    }

    /// Input channels per group, `C_in/g`.
    pub fn cin_per_group(&self) -> u64 {
        self.c_in / self.group
    }

    /// Output channels per group, `C_out/g`.
    pub fn cout_per_group(&self) -> u64 {
        self.c_out / self.group
    }

    /// Length of each output's reduction, `(C_in/g) * K_y * K_x`.
    pub fn reduction_len(&self) -> u64 {
        prod([self.cin_per_group(), self.kh, self.kw])
    }

    /// Multiply-accumulates: `N * C_out * H' * W' * (C_in/g) * K_y * K_x`.
    pub fn macs(&self) -> u64 {
        prod([
            self.n,
            self.c_out,
            self.h_out,
            self.w_out,
            self.reduction_len(),
        ])
    }

    /// Padded input size `(H + pt + pb, W + pl + pr)`.
    pub fn padded(&self) -> (u64, u64) {
        (
            self.h + self.pads[0] + self.pads[2],
            self.w + self.pads[1] + self.pads[3],
        )
    }

    fn unit_stride_dilation(&self) -> Result<(), String> {
        if self.strides != [1, 1] {
            return Err(format!("stride {}x{}", self.strides[0], self.strides[1]));
        }
        if self.dilations != [1, 1] {
            return Err(format!(
                "dilation {}x{}",
                self.dilations[0], self.dilations[1]
            ));
        }
        Ok(())
    }

    /// Direct convolution: one MAC per (output, reduction element); depth
    /// of a single tree over the whole reduction, `ceil(log2((C_in/g) K_y K_x))`.
    pub fn direct(&self) -> Cost {
        Cost::new(self.macs(), ceil_log2(self.reduction_len()))
    }

    /// im2col + GEMM: the same arithmetic as direct (the layout copies carry
    /// no arithmetic in the survey's model).
    pub fn im2col(&self) -> Cost {
        self.direct()
    }

    /// FFT convolution with [`FFT_C`]; see [`ConvShape::fft_with`].
    pub fn fft(&self) -> Result<Cost, String> {
        self.fft_with(FFT_C)
    }

    /// FFT convolution with hidden constant `c`, per group and times `g`:
    /// `W = c·HW·log2(HW)·(Co·Ci + N·Ci + N·Co) + HW·N·Ci·Co`,
    /// `D = 2·ceil(log2 HW) + ceil(log2 Ci)`, with `H, W` the padded input
    /// and `Ci, Co` the per-group channels. Stride 1 and dilation 1 only.
    pub fn fft_with(&self, c: f64) -> Result<Cost, String> {
        self.unit_stride_dilation()?;
        let (ph, pw) = self.padded();
        let hw = prod([ph, pw]);
        let (ci, co) = (self.cin_per_group(), self.cout_per_group());
        let transforms = prod([co, ci]) + prod([self.n, ci]) + prod([self.n, co]);
        let fft_work = if hw <= 1 {
            0.0
        } else {
            c * hw as f64 * (hw as f64).log2() * transforms as f64
        };
        let per_group = (fft_work.round() as u64).saturating_add(prod([hw, self.n, ci, co]));
        Ok(Cost::new(
            per_group.saturating_mul(self.group),
            2 * ceil_log2(hw) + ceil_log2(ci),
        ))
    }

    /// Winograd `F(m x m, r x r)` (Lavin & Gray), per group and times `g`.
    /// With `alpha = m + r - 1` and `P = N·ceil(H'/m)·ceil(W'/m)` output tiles:
    /// `W = Co·Ci·(r²α + α²r) + P·Ci·2α³ + α²·Co·Ci·P + Co·P·(α²m + m²α)`,
    /// `D = max(2⌈log2 r⌉, 2⌈log2 α⌉) + ⌈log2 Ci⌉ + 2⌈log2 α⌉`.
    /// Square kernels, stride 1 and dilation 1 only.
    pub fn winograd(&self, m: u64) -> Result<Cost, String> {
        if self.kh != self.kw {
            return Err(format!("kernel {}x{} is not square", self.kh, self.kw));
        }
        self.unit_stride_dilation()?;
        if m == 0 {
            return Err("tile size 0".into());
        }
        let r = self.kh;
        let a = m + r - 1;
        let tiles = prod([self.n, self.h_out.div_ceil(m), self.w_out.div_ceil(m)]);
        let (ci, co) = (self.cin_per_group(), self.cout_per_group());
        let filter = prod([co, ci, transform_work(r, a)]);
        let input = prod([tiles, ci, transform_work(a, a)]);
        let gemm = prod([a, a, co, ci, tiles]);
        let output = prod([co, tiles, transform_work(a, m)]);
        let per_group = filter
            .saturating_add(input)
            .saturating_add(gemm)
            .saturating_add(output);
        let depth = (2 * ceil_log2(r)).max(2 * ceil_log2(a)) + ceil_log2(ci) + 2 * ceil_log2(a);
        Ok(Cost::new(per_group.saturating_mul(self.group), depth))
    }

    /// Every algorithm's figures for this convolution.
    pub fn algos(&self) -> ConvAlgos {
        ConvAlgos {
            shape: self.clone(),
            direct: AlgoCost::from(Ok(self.direct())),
            im2col: AlgoCost::from(Ok(self.im2col())),
            fft: AlgoCost::from(self.fft()),
            winograd2: AlgoCost::from(self.winograd(2)),
            winograd4: AlgoCost::from(self.winograd(4)),
        }
    }
}

/// Work of a Winograd transform `a x a -> b x b` as two small matrix
/// products (`b x a` by `a x a`, then by `a x b`): `a²b + b²a`.
pub fn transform_work(a: u64, b: u64) -> u64 {
    prod([a, a, b]).saturating_add(prod([b, b, a]))
}

/// One algorithm's figures, or why it does not apply.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct AlgoCost {
    /// Work and depth, `None` when not applicable.
    pub cost: Option<Cost>,
    /// Why the algorithm does not apply (set exactly when `cost` is `None`).
    pub reason: Option<String>,
}

impl AlgoCost {
    /// `(work, depth)` when applicable.
    pub fn work_depth(&self) -> Option<(u64, u64)> {
        self.cost.map(|c| c.pair())
    }
}

impl From<Result<Cost, String>> for AlgoCost {
    fn from(r: Result<Cost, String>) -> Self {
        match r {
            Ok(c) => AlgoCost {
                cost: Some(c),
                reason: None,
            },
            Err(e) => AlgoCost {
                cost: None,
                reason: Some(e),
            },
        }
    }
}

/// The W-D figures of every convolution algorithm for one Conv2d node, so
/// the cost model can weigh them against measured machine rates.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ConvAlgos {
    /// The geometry the figures were computed from.
    pub shape: ConvShape,
    /// Direct convolution (Appendix C.1).
    pub direct: AlgoCost,
    /// im2col + GEMM (C.2).
    pub im2col: AlgoCost,
    /// FFT with [`FFT_C`] (C.3).
    pub fft: AlgoCost,
    /// Winograd F(2x2, rxr) (C.4).
    pub winograd2: AlgoCost,
    /// Winograd F(4x4, rxr) (C.4).
    pub winograd4: AlgoCost,
}

impl ConvAlgos {
    /// `(short name, figures)` in a fixed order: direct, im2col, fft, wino2, wino4.
    pub fn all(&self) -> [(&'static str, &AlgoCost); 5] {
        [
            ("direct", &self.direct),
            ("im2col", &self.im2col),
            ("fft", &self.fft),
            ("wino2", &self.winograd2),
            ("wino4", &self.winograd4),
        ]
    }

    /// The applicable algorithm with the least work (first in [`ConvAlgos::all`]
    /// order on ties) — a machine-independent first guess only.
    pub fn least_work(&self) -> (&'static str, Cost) {
        self.all()
            .into_iter()
            .filter_map(|(n, a)| a.cost.map(|c| (n, c)))
            .min_by_key(|(_, c)| c.work)
            .expect("direct always applies")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transform_work_matches_survey() {
        // W_WG = r²α + α²r, W_WD = 2α³, W_WY = α²m + m²α for F(2x2, 3x3).
        assert_eq!(transform_work(3, 4), 9 * 4 + 16 * 3);
        assert_eq!(transform_work(4, 4), 2 * 64);
        assert_eq!(transform_work(4, 2), 16 * 2 + 4 * 4);
    }

    /// A channel-blocked conv is the same convolution as its NCHW form:
    /// read as NCHW, a depthwise conv's `[1, 48, 14, 14, 8]` input had
    /// 48 channels for 384 groups, and no work at all.
    #[test]
    fn blocked_activations_read_as_their_logical_shape() {
        use dnnc_ir::op::DataLayout;
        use dnnc_ir::TensorType;
        let plain = Conv2d {
            strides: [1, 1],
            pads: [1, 1, 1, 1],
            dilations: [1, 1],
            group: 384,
            ..Default::default()
        };
        let blocked = Conv2d {
            data: DataLayout::Nchw8c,
            ..plain.clone()
        };
        let w = TensorType::f32([384, 1, 3, 3]);
        let nchw = TensorType::f32([1, 384, 14, 14]);
        let nchw8c = TensorType::f32([1, 48, 14, 14, 8]);
        let want = ConvShape::from_types(&plain, &nchw, &w, &nchw);
        let got = ConvShape::from_types(&blocked, &nchw8c, &w, &nchw8c);
        assert_eq!(got, want);
        assert_eq!(got.macs(), 384 * 14 * 14 * 9);
    }
}
