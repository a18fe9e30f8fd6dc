//! Convolution algorithm selection: the shape-based heuristic that picks a
//! [`ConvAlgo`] for each Conv2d, and the `select-conv-algo` pass that
//! records it in the node's `algo` attribute. It lives here, not in a
//! backend, so `dnnc ir --after select-conv-algo` shows the decision and
//! the CPU backend (which honours the attribute) uses the same function.
//!
//! The thresholds are measured on the CPU backend; see docs/cpu-backend.md,
//! "Convolution algorithms".

use crate::pipeline::{Pass, PassError, PassStats};
use dnnc_ir::op::{Conv2d, ConvAlgo};
use dnnc_ir::{Graph, NodeId, Op};

/// The FFT length dnnc uses for `n` padded samples: the next size with no
/// prime factor above 5. It mirrors `dnnc_runtime::cpu::fftconv::smooth_size`
/// (a test checks they agree) so this crate need not depend on the runtime.
pub fn smooth_size(n: usize) -> usize {
    let mut k = n.max(1);
    loop {
        let mut r = k;
        for p in [2, 3, 5] {
            while r.is_multiple_of(p) {
                r /= p;
            }
        }
        if r == 1 {
            return k;
        }
        k += 1;
    }
}

/// Complex values in one real-input 2-D spectrum of an `hf x wf` plane
/// (mirrors `dnnc_runtime::cpu::fftconv::plane_len`).
pub fn spectrum_plane_len(hf: usize, wf: usize) -> usize {
    (wf / 2 + 1) * hf
}

/// Largest filter spectrum (bytes) an FFT convolution may keep.
pub const FFT_MAX_SPECTRUM: usize = 256 << 20;

/// Winograd by default needs at least this many input and output channels
/// per group (measured; see docs/cpu-backend.md, "Convolution algorithms").
pub const WINO_MIN_CHANNELS: usize = 8;

/// A strided grouped conv of 8-channel groups ([`ConvGeom::grouped8`])
/// takes `direct` by default only from this many output columns; below,
/// its kernel's per-row copies of the input's phases cost more than
/// im2col saves (RegNetY-400MF at batch 8, one thread: 48 channels
/// 112x112 -> 56x56 8.98 ms direct, 10.36 im2col; 104 channels 56 -> 28
/// 5.61 / 5.36; 208 channels 28 -> 14 3.27 / 3.08).
pub const GROUP8_STRIDED_MIN_COLS: usize = 32;

/// Winograd F(4x4) by default needs at least this many 4x4 output tiles
/// per image: each transformed filter element (α²/9 times the filter's
/// size, read from memory once per run in a model of tens of MiB of
/// weights) is reused once per tile. At 16 tiles (13x13 to 16x16 maps) its
/// GEMMs are one narrow 16-column block, whose kernel prefetches the
/// filter far enough ahead to stream it (`pgemm`'s `NARROW_L2_PREFETCH`);
/// in-model, per-kernel medians at one thread, F(4x4) against F(2x2):
/// GoogLeNet's 96 -> 208 to 160 -> 320 on 14x14 0.193-0.408 vs
/// 0.253-0.555 ms, ResNet-18's 256 -> 256 on 14x14 0.56-0.61 vs 0.71-0.75,
/// SqueezeNet's 64 -> 256 on 13x13 0.164 vs 0.194-0.202. Before that
/// prefetch the streamed filter made F(4x4) lose there (GoogLeNet's 96 ->
/// 208: 0.317 vs 0.286 ms), and the bound was 32 tiles.
pub const WINO_MIN_TILES: usize = 16;

/// Winograd F(2x2) by default needs at least this many 2x2 output tiles.
/// Its per-position GEMMs are N = tiles wide; since the packed GEMM runs
/// column blocks of <= 16 on a narrow, unmasked AVX-512 kernel, F(2x2)
/// beats im2col at 7x7 = 16 tiles (ResNet-18 layer4 3x3, 512 channels:
/// 1.87-1.90 vs 2.17-2.29 ms per conv, `dnnc run --profile`).
pub const WINO2_MIN_TILES: usize = 16;

/// FFT by default: kernels of at least this many taps...
pub const FFT_MIN_TAPS: usize = 49;

/// ...and at most this many (input, output) channel pairs per group (the
/// per-frequency products read the whole filter spectrum every run).
pub const FFT_MAX_PAIRS: usize = 2048;

/// Static geometry of one convolution: everything the heuristic and the
/// backends' lowerings need to know about it.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvGeom {
    /// Batch.
    pub n: usize,
    /// Input channels.
    pub c: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output channels.
    pub m: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Groups (at least 1).
    pub g: usize,
    /// The node's attributes.
    pub p: Conv2d,
    /// Whether the filter is a compile-time constant (Param/Constant), as
    /// Winograd and FFT transform it at compile time.
    pub const_w: bool,
}

impl ConvGeom {
    /// The geometry of Conv2d node `id` of `g`.
    pub fn of_node(g: &Graph, id: NodeId) -> Result<ConvGeom, String> {
        let node = g.node(id);
        let Op::Conv2d(p) = &node.op else {
            return Err("not a Conv2d".into());
        };
        let wv = node.inputs[1];
        let const_w = matches!(g.node(g.value(wv).producer).op, Op::Param(_) | Op::Constant);
        ConvGeom::from_shapes(
            p,
            &g.value(node.inputs[0]).ty.shape,
            &g.value(wv).ty.shape,
            &g.value(node.outputs[0]).ty.shape,
            const_w,
        )
    }

    /// The geometry of a convolution with attributes `p` of input shape
    /// `x`, filter shape `w` and result shape `y` (the e-graph's cost
    /// model has types, not nodes); `const_w` as in [`ConvGeom::const_w`].
    pub fn from_shapes(
        p: &Conv2d,
        x: &[usize],
        w: &[usize],
        y: &[usize],
        const_w: bool,
    ) -> Result<ConvGeom, String> {
        let (Some([n, c, h, w]), &[m, _, kh, kw], Some([_, _, oh, ow])) = (
            p.data.input().logical_dims(x),
            w,
            p.data.result().logical_dims(y),
        ) else {
            return Err(format!(
                "Conv2d operands must be rank 4 (data=nchw8c: input and result [N, C/8, H, W, 8]; data=nchw_to_nchw8c: the result), found {x:?}, {w:?}, {y:?}"
            ));
        };
        Ok(ConvGeom {
            n,
            c,
            h,
            w,
            m,
            kh,
            kw,
            oh,
            ow,
            g: p.group.max(1),
            p: p.clone(),
            const_w,
        })
    }

    /// Whether the optimiser may give this conv algorithm `a` of its own
    /// accord, beyond [`ConvGeom::unfit`]: not Winograd with fewer than
    /// [`WINO_MIN_CHANNELS`] channels per group, where the cost model is
    /// known to mislead: the calibration layers have 16 and more, and the
    /// fitted fixed costs then favour Winograd over im2col (4 -> 32 on
    /// 28x28 predicted 0.016 vs 0.026 ms, measured 0.029 vs 0.016). And
    /// nothing where the heuristic sends the conv to the grouped-8 kernel
    /// ([`ConvGeom::grouped8`]): the cost model has no figures for that
    /// kernel (it prices `direct` as the generic loop, 20-50x slower), so
    /// it chose Winograd and im2col for RegNetY-400MF's grouped convs at
    /// batch 8, 15.7 + 15.3 ms against the kernel's 14.1 + 10.9 (with the
    /// im2col convs the heuristic gives too), the model 1.08 of the
    /// default build.
    pub fn offers(&self, a: ConvAlgo) -> bool {
        let winograd = matches!(a, ConvAlgo::Winograd2 | ConvAlgo::Winograd4);
        self.unfit(a).is_none()
            && (!winograd || self.winograd_channels())
            && self.default_algo() != ConvAlgo::Direct
    }

    /// Whether each group has [`WINO_MIN_CHANNELS`] input and output
    /// channels, below which neither the heuristic nor the optimiser
    /// picks Winograd.
    fn winograd_channels(&self) -> bool {
        let (cg, mg) = self.per_group();
        cg >= WINO_MIN_CHANNELS && mg >= WINO_MIN_CHANNELS
    }

    /// Whether this is a grouped conv of 8 input and 8 output channels
    /// per group (more than one group, undilated, filter known at compile
    /// time), which the CPU backend's `direct` algorithm computes with its
    /// own kernel (`dnnc_runtime::cpu::group8`) and the heuristic gives
    /// `direct`: RegNet's 3x3 convs, whose 8 x 8 per-group GEMMs waste a
    /// third of the packed GEMM's 6-row panels.
    pub fn grouped8(&self) -> bool {
        self.g > 1
            && self.per_group() == (8, 8)
            && self.p.dilations == [1, 1]
            && self.const_w
            && self.p.data == dnnc_ir::op::DataLayout::Nchw
    }

    /// The geometry as the Work-Depth model's and cost model's shape.
    pub fn shape(&self) -> crate::wd::ConvShape {
        let u = |v: usize| v as u64;
        crate::wd::ConvShape {
            n: u(self.n),
            c_in: u(self.c),
            c_out: u(self.m),
            h: u(self.h),
            w: u(self.w),
            h_out: u(self.oh),
            w_out: u(self.ow),
            kh: u(self.kh),
            kw: u(self.kw),
            strides: self.p.strides.map(u),
            dilations: self.p.dilations.map(u),
            pads: self.p.pads.map(u),
            group: u(self.g),
        }
    }

    /// Input and output channels per group.
    pub fn per_group(&self) -> (usize, usize) {
        (self.c / self.g, self.m / self.g)
    }

    /// FFT grid `(hf, wf)`: the padded input rounded up to smooth sizes.
    pub fn fft_grid(&self) -> (usize, usize) {
        let pads = &self.p.pads;
        (
            smooth_size(self.h + pads[0] + pads[2]),
            smooth_size(self.w + pads[1] + pads[3]),
        )
    }

    /// Why `a` cannot compute this convolution (`None`: it can; `Auto`
    /// always can).
    pub fn unfit(&self, a: ConvAlgo) -> Option<String> {
        let (cg, mg) = self.per_group();
        let s1d1 = || {
            if self.p.strides != [1, 1] {
                Some(format!(
                    "stride {}x{} (needs 1)",
                    self.p.strides[0], self.p.strides[1]
                ))
            } else if self.p.dilations != [1, 1] {
                Some(format!(
                    "dilation {}x{} (needs 1)",
                    self.p.dilations[0], self.p.dilations[1]
                ))
            } else if !self.const_w {
                Some("the filter is not a compile-time constant".into())
            } else {
                None
            }
        };
        match a {
            ConvAlgo::Auto | ConvAlgo::Im2col | ConvAlgo::Direct => None,
            ConvAlgo::Pointwise => {
                let ok = self.kh == 1
                    && self.kw == 1
                    && self.p.strides == [1, 1]
                    && self.p.pads == [0; 4];
                (!ok).then(|| "needs a 1x1 kernel, stride 1 and no padding".into())
            }
            ConvAlgo::Depthwise => (!(self.g == self.c && self.g == self.m))
                .then(|| "needs one input and one output channel per group".into()),
            ConvAlgo::Winograd2 | ConvAlgo::Winograd4 => {
                if self.kh != 3 || self.kw != 3 {
                    Some(format!("kernel {}x{} (needs 3x3)", self.kh, self.kw))
                } else if cg == 1 && mg == 1 {
                    Some("depthwise: the per-point GEMMs would be 1x1".into())
                } else {
                    s1d1()
                }
            }
            ConvAlgo::Fft => s1d1().or_else(|| {
                let (hf, wf) = self.fft_grid();
                let bytes = self.m * cg * spectrum_plane_len(hf, wf) * 8;
                (bytes > FFT_MAX_SPECTRUM).then(|| {
                    format!(
                        "the filter spectrum would take {} MiB (limit {})",
                        bytes >> 20,
                        FFT_MAX_SPECTRUM >> 20
                    )
                })
            }),
        }
    }

    /// The default algorithm (documented heuristic, see docs/cpu-backend.md,
    /// "Convolution algorithms"):
    /// depthwise and pointwise where they apply; direct for grouped convs
    /// of 8-channel groups ([`ConvGeom::grouped8`]; strided ones from
    /// [`GROUP8_STRIDED_MIN_COLS`] output columns); Winograd for 3x3
    /// stride-1 convolutions with at least [`WINO_MIN_CHANNELS`] channels:
    /// F(4x4) when an image has [`WINO_MIN_TILES`] tiles, else F(2x2) when
    /// it has [`WINO2_MIN_TILES`], else im2col; FFT for kernels of 7x7 and more with few
    /// channels; im2col otherwise. Never returns `Auto`.
    pub fn default_algo(&self) -> ConvAlgo {
        let (cg, mg) = self.per_group();
        let fits = |a| self.unfit(a).is_none();
        if fits(ConvAlgo::Depthwise) {
            ConvAlgo::Depthwise
        } else if fits(ConvAlgo::Pointwise) {
            ConvAlgo::Pointwise
        } else if self.grouped8()
            && (self.p.strides == [1, 1] || self.ow >= GROUP8_STRIDED_MIN_COLS)
        {
            ConvAlgo::Direct
        } else if fits(ConvAlgo::Winograd4) && self.winograd_channels() {
            // The frequency GEMMs' width: one image's tiles where the
            // lowering multiplies image by image (a batch-8 DenseNet
            // block's 32 -> 8 conv on 8x8 maps, 4 tiles an image: F(4x4)
            // 0.072, F(2x2) 0.033, im2col 0.042 ms, `dnnc tune`), every
            // image's where the batch shares its GEMMs
            // (`cost::winograd_shares_gemms`: ResNet-50's 512 -> 512 on
            // 7x7 at batch 8, F(4x4) 3.8, F(2x2) 5.7, im2col 12.5 ms;
            // Inception-v3's 448 -> 384 on 8x8, 2.5, 3.8, 7.9 ms).
            let tiles = |m: usize| {
                let one = self.oh.div_ceil(m) * self.ow.div_ceil(m);
                if crate::cost::winograd_shares_gemms(&self.shape(), m) {
                    one * self.n
                } else {
                    one
                }
            };
            if tiles(4) >= WINO_MIN_TILES {
                ConvAlgo::Winograd4
            } else if tiles(2) >= WINO2_MIN_TILES {
                ConvAlgo::Winograd2
            } else {
                ConvAlgo::Im2col
            }
        } else if fits(ConvAlgo::Fft)
            && self.kh * self.kw >= FFT_MIN_TAPS
            && cg * mg <= FFT_MAX_PAIRS
        {
            ConvAlgo::Fft
        } else {
            ConvAlgo::Im2col
        }
    }
}

/// `select-conv-algo`: writes [`ConvGeom::default_algo`] into the `algo`
/// attribute of every Conv2d that has `algo=auto`, so the IR records the
/// decision; a node already carrying an algorithm keeps it.
#[derive(Clone, Copy, Debug, Default)]
pub struct SelectConvAlgo;

impl Pass for SelectConvAlgo {
    fn name(&self) -> &'static str {
        "select-conv-algo"
    }
    fn description(&self) -> &'static str {
        "record the heuristic's convolution algorithm in each Conv2d's `algo` attribute where it is `auto`"
    }
    fn run(&self, g: &mut Graph) -> Result<PassStats, PassError> {
        let mut stats = PassStats::default();
        for id in g.topo_order() {
            let Op::Conv2d(p) = &g.node(id).op else {
                continue;
            };
            if p.algo != ConvAlgo::Auto {
                continue;
            }
            let Ok(geom) = ConvGeom::of_node(g, id) else {
                continue;
            };
            let op = Op::Conv2d(Conv2d {
                algo: geom.default_algo(),
                ..p.clone()
            });
            let inputs = g.node(id).inputs.clone();
            g.rewrite_node(id, op, &inputs)
                .map_err(|e| PassError::graph("select-conv-algo", e))?;
            stats.rewrites += 1;
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dnnc_ir::text::parse;

    /// `name algo` per Conv2d, in topological order.
    fn algos(g: &Graph) -> String {
        g.topo_order()
            .into_iter()
            .filter_map(|n| match &g.node(n).op {
                Op::Conv2d(c) => Some(format!("%{} {}", g.node_name(n), c.algo.name())),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn resnet18_decisions() {
        let src = include_str!("../../examples/resnet18.dnn");
        let mut g = parse(src, "resnet18.dnn").unwrap();
        let stats = SelectConvAlgo.run(&mut g).unwrap();
        assert_eq!(stats.rewrites, 20);
        dnnc_ir::verify(&g).unwrap();
        insta::assert_snapshot!(algos(&g));
        // A second run has nothing left to decide.
        assert_eq!(SelectConvAlgo.run(&mut g).unwrap().rewrites, 0);
    }

    #[test]
    fn explicit_algorithms_are_kept() {
        let mut g = parse(
            "graph g {
              input %x: f32[1,16,32,32]
              param %w: f32[16,16,3,3] = he(seed=1)
              %a = Conv2d(%x, %w) {pads=[1,1,1,1], algo=direct}
              %b = Conv2d(%a, %w) {pads=[1,1,1,1]}
              output %b
            }",
            "g.dnn",
        )
        .unwrap();
        assert_eq!(SelectConvAlgo.run(&mut g).unwrap().rewrites, 1);
        assert_eq!(algos(&g), "%a direct\n%b winograd4");
    }

    /// The heuristic's choice for a same-padded 3x3 `c -> c` conv on
    /// `n x c x hw x hw`.
    fn decide_3x3(n: usize, c: usize, hw: usize) -> String {
        let mut g = parse(
            &format!(
                "graph g {{
                  input %x: f32[{n},{c},{hw},{hw}]
                  param %w: f32[{c},{c},3,3] = he(seed=1)
                  %c = Conv2d(%x, %w) {{pads=[1,1,1,1]}}
                  output %c
                }}"
            ),
            "g.dnn",
        )
        .unwrap();
        SelectConvAlgo.run(&mut g).unwrap();
        algos(&g)
    }

    /// The tile bounds: a 3x3 conv takes F(4x4) from 16 tiles of 4x4 per
    /// image (13x13), F(2x2) below that from 16 tiles of 2x2 (7x7), im2col
    /// below that (5x5).
    #[test]
    fn winograd_tile_bounds() {
        let decide = |hw: usize| decide_3x3(1, 64, hw);
        assert_eq!(decide(13), "%c winograd4");
        assert_eq!(decide(12), "%c winograd2");
        assert_eq!(decide(7), "%c winograd2");
        assert_eq!(decide(6), "%c im2col");
    }

    /// At batch 8 a 512-channel 7x7 conv's images share their frequency
    /// GEMMs, whose F(4x4) width is then 32 tiles: F(4x4); an 8-channel
    /// one's do not (its filter is no bigger than an image's transforms),
    /// so it keeps one image's count: F(2x2).
    #[test]
    fn shared_winograd_gemms_count_every_image() {
        assert_eq!(decide_3x3(8, 512, 7), "%c winograd4");
        assert_eq!(decide_3x3(8, 8, 7), "%c winograd2");
    }
}

#[cfg(test)]
mod smooth_size_tests {
    #[test]
    fn matches_the_runtime_fft_sizes() {
        for n in 0..2000 {
            assert_eq!(
                super::smooth_size(n),
                dnnc_runtime::cpu::fftconv::smooth_size(n),
                "n = {n}"
            );
            assert_eq!(
                super::spectrum_plane_len(n, n + 3),
                dnnc_runtime::cpu::fftconv::plane_len(n, n + 3)
            );
        }
    }
}
