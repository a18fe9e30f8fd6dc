//! The interpreter's im2col/GEMM and depthwise convolution against a naive
//! direct convolution written here, on random shapes, strides, pads,
//! dilations and groups.

mod common;
use common::*;
use dnnc_ir::infer::window_out;
use dnnc_ir::op::Conv2d;
use dnnc_ir::Op;

/// SplitMix64: a tiny deterministic generator so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// Direct convolution, straight from the definition (7 nested loops over
/// n, m, oy, ox, c, ky, kx).
#[allow(clippy::too_many_arguments)]
fn naive(
    x: &[f32],
    [n, cin, h, w]: [usize; 4],
    wt: &[f32],
    [m, cg, kh, kw]: [usize; 4],
    bias: Option<&[f32]>,
    c: &Conv2d,
    [ho, wo]: [usize; 2],
) -> Vec<f32> {
    let mg = m / c.group;
    let mut out = vec![0.0f32; n * m * ho * wo];
    for ni in 0..n {
        for mi in 0..m {
            let g = mi / mg;
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut acc = bias.map_or(0.0, |b| b[mi] as f64);
                    for ci in 0..cg {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * c.strides[0] + ky * c.dilations[0]) as isize
                                    - c.pads[0] as isize;
                                let ix = (ox * c.strides[1] + kx * c.dilations[1]) as isize
                                    - c.pads[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let cx = g * cg + ci;
                                let xv = x[((ni * cin + cx) * h + iy as usize) * w + ix as usize];
                                let wv = wt[((mi * cg + ci) * kh + ky) * kw + kx];
                                acc += xv as f64 * wv as f64;
                            }
                        }
                    }
                    out[((ni * m + mi) * ho + oy) * wo + ox] = acc as f32;
                }
            }
        }
    }
    out
}

#[test]
fn conv_matches_naive_direct_convolution() {
    let mut rng = Rng(0x5eed);
    let mut tested = 0;
    let mut depthwise = 0;
    while tested < 300 {
        let group = rng.range(1, 3);
        let cg = if rng.range(0, 2) == 0 {
            1
        } else {
            rng.range(1, 3)
        };
        let mg = rng.range(1, 3);
        let (cin, m) = (cg * group, mg * group);
        let n = rng.range(1, 2);
        let (h, w) = (rng.range(1, 9), rng.range(1, 9));
        let (kh, kw) = (rng.range(1, 4), rng.range(1, 4));
        let c = Conv2d {
            strides: [rng.range(1, 3), rng.range(1, 3)],
            pads: [
                rng.range(0, 3),
                rng.range(0, 3),
                rng.range(0, 3),
                rng.range(0, 3),
            ],
            dilations: [rng.range(1, 3), rng.range(1, 3)],
            group,
            ..Conv2d::default()
        };
        let (Some(ho), Some(wo)) = (
            window_out(
                h,
                kh,
                c.strides[0],
                c.pads[0],
                c.pads[2],
                c.dilations[0],
                false,
            ),
            window_out(
                w,
                kw,
                c.strides[1],
                c.pads[1],
                c.pads[3],
                c.dilations[1],
                false,
            ),
        ) else {
            continue;
        };
        let xs: Vec<f32> = (0..n * cin * h * w).map(|_| rng.unit()).collect();
        let ws: Vec<f32> = (0..m * cg * kh * kw).map(|_| rng.unit()).collect();
        let bs: Vec<f32> = (0..m).map(|_| rng.unit()).collect();
        let with_bias = rng.range(0, 1) == 1;
        let expected = naive(
            &xs,
            [n, cin, h, w],
            &ws,
            [m, cg, kh, kw],
            with_bias.then_some(&bs[..]),
            &c,
            [ho, wo],
        );
        let mut ins = vec![f(&[n, cin, h, w], &xs), f(&[m, cg, kh, kw], &ws)];
        if with_bias {
            ins.push(f(&[m], &bs));
        }
        let y = eval(Op::Conv2d(c.clone()), &ins);
        let case = format!("case {tested}: x [{n},{cin},{h},{w}] w [{m},{cg},{kh},{kw}] {c:?}");
        let got = y.as_f32().expect("f32");
        assert_eq!(got.shape(), &[n, m, ho, wo], "{case}");
        for (k, (&g, &e)) in got.iter().zip(&expected).enumerate() {
            assert!(
                (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
                "{case}: element {k}: {g} vs {e}"
            );
        }
        tested += 1;
        depthwise += (cg == 1) as usize;
    }
    // Both code paths were exercised.
    assert!(
        depthwise > 50 && depthwise < 250,
        "{depthwise} depthwise cases"
    );
}
