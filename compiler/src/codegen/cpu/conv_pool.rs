//! A max pool computed inside the im2col conv kernel that feeds it
//! ([`super::group::absorb_pools`]): the stems of SqueezeNet, ResNet,
//! GoogLeNet and ShuffleNet write a 3.2 MB conv result that the pool right
//! after reads back from memory. Here the kernel walks bands of the pool's
//! output rows; for each it computes the conv rows the band's windows
//! cover into a per-task scratch (bias and clamp fused into the GEMM's
//! stores, as the unfused kernel does), then pools the band from that
//! scratch into the pool's output. Consecutive bands of one task share
//! the conv rows where their windows overlap: those rows are moved to
//! the top of the scratch instead of computed again. Every element is
//! computed by the same GEMM arithmetic and the same pool code as in the
//! two separate kernels, so results are bitwise theirs.
//!
//! [`PoolBands::plan`] decides the bands at compile time; the emission
//! is in `contraction::conv_gemm`, which shares the conv's im2col and
//! GEMM calls with the unfused lowering.

use super::contraction::chunk_rows;
use super::contraction::ConvGeom;
use dnnc_ir::op::Pool2d;

/// Conv result bytes (one image) from which an im2col conv kernel
/// absorbs the max pool after it: smaller results stay in cache between
/// the two kernels anyway.
pub(crate) const MIN_CONV_BYTES: usize = 1 << 20;

/// One band of pool output rows and the conv rows it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Band {
    /// First conv row of the band (scratch row 0).
    pub a: usize,
    /// Conv rows the band's windows cover (`a..a + rows`).
    pub rows: usize,
    /// First pool output row.
    pub q0: usize,
    /// Pool output rows.
    pub qn: usize,
    /// Padding rows above scratch row 0 as the band's windows see them.
    pub pt: usize,
}

/// How a conv kernel computes its absorbed max pool: bands of `r` pool
/// rows, the first, the middle ones (all alike) and the last.
#[derive(Clone, Debug)]
pub(crate) struct PoolBands {
    /// The pool's attributes.
    pub p: Pool2d,
    /// Pool output height.
    pub ohp: usize,
    /// Pool output width.
    pub owp: usize,
    /// Pool rows per band (the last may have fewer).
    pub r: usize,
    /// Bands per image.
    pub nb: usize,
    /// Scratch rows per channel: the most conv rows of any band.
    pub rs: usize,
    /// Conv rows a band shares with the band before it (the last `ov`
    /// rows of that band's scratch), taken over when the same task ran
    /// that band.
    pub ov: usize,
    /// Conv rows per GEMM call (the im2col chunk the workspace holds).
    pub chunk: usize,
    /// Band 0.
    pub first: Band,
    /// Bands `1..nb - 1`, all alike (their `a` and `q0` aside), if any.
    pub mid: Option<Band>,
    /// Band `nb - 1` (band 0 again when there is one band).
    pub last: Band,
}

impl PoolBands {
    /// The bands for max pool `p` (output `ohp x owp`) of conv `geo`'s
    /// result, or `None` where the scheme does not apply: a conv of more
    /// than one group, a pool whose windows leave conv rows between
    /// bands that no window covers oddly, or bands whose middle ones
    /// differ.
    pub fn plan(geo: &ConvGeom, p: &Pool2d, ohp: usize, owp: usize) -> Option<PoolBands> {
        if geo.g != 1 || ohp == 0 || owp == 0 || geo.oh == 0 || geo.ow < 4 {
            return None;
        }
        let (sp, pt) = (p.strides[0], p.pads[0]);
        let ext = (p.kernel[0].checked_sub(1)?) * p.dilations[0] + 1;
        if sp == 0 {
            return None;
        }
        let chunk = chunk_rows(geo);
        let r = (chunk / sp).clamp(1, ohp);
        let nb = ohp.div_ceil(r);
        let band = |b: usize| -> Option<Band> {
            let q0 = b * r;
            let qn = r.min(ohp - q0);
            let top = (q0 * sp) as isize - pt as isize;
            let a = top.max(0) as usize;
            let end = ((q0 + qn - 1) * sp + ext) as isize - pt as isize;
            let end = end.min(geo.oh as isize);
            if end <= a as isize {
                return None;
            }
            Some(Band {
                a,
                rows: end as usize - a,
                q0,
                qn,
                pt: (a as isize - top) as usize,
            })
        };
        let bands: Vec<Band> = (0..nb).map(band).collect::<Option<_>>()?;
        // Bands after the first start unclipped (`a = q0·s - pt`), so their
        // first conv row is `b·r·s - pt` at run time, and all take over the
        // same number of rows from the band before.
        let mut ov = None;
        for b in 1..nb {
            let (prev, cur) = (bands[b - 1], bands[b]);
            if cur.pt != 0 || cur.a + pt != cur.q0 * sp {
                return None;
            }
            let shared = (prev.a + prev.rows).saturating_sub(cur.a);
            // The shared rows move up without overlapping themselves.
            if shared > 0 && (2 * shared > prev.rows || shared * geo.ow < 4) {
                return None;
            }
            if *ov.get_or_insert(shared) != shared {
                return None;
            }
        }
        let mid = if nb > 2 {
            let m = bands[1];
            let alike = bands[1..nb - 1]
                .iter()
                .all(|b| (b.rows, b.qn, b.pt) == (m.rows, m.qn, m.pt));
            if !alike {
                return None;
            }
            Some(m)
        } else {
            None
        };
        Some(PoolBands {
            p: p.clone(),
            ohp,
            owp,
            r,
            nb,
            rs: bands.iter().map(|b| b.rows).max()?,
            ov: ov.unwrap_or(0),
            chunk,
            first: bands[0],
            mid,
            last: bands[nb - 1],
        })
    }

    /// Bytes of one task's scratch: `rs` conv rows of every channel.
    pub fn scratch_bytes(&self, geo: &ConvGeom) -> usize {
        geo.m * self.rs * geo.ow * 4
    }

    /// The pool's attributes for band `band` of its output rows read from
    /// the scratch: the band's own top padding, the bottom padding only
    /// for the last band (a max pool reads neither).
    pub fn band_pool(&self, band: &Band, last: bool) -> Pool2d {
        let mut p = self.p.clone();
        p.pads[0] = band.pt;
        if !last {
            p.pads[2] = 0;
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dnnc_ir::op::Conv2d;

    fn geo(m: usize, oh: usize, ow: usize, kk: usize) -> ConvGeom {
        ConvGeom {
            n: 1,
            c: kk,
            h: 2 * oh,
            w: 2 * ow,
            m,
            kh: 1,
            kw: 1,
            oh,
            ow,
            g: 1,
            p: Conv2d::default(),
            const_w: true,
        }
    }

    fn pool(k: usize, s: usize, pad: usize) -> Pool2d {
        Pool2d {
            kernel: [k, k],
            strides: [s, s],
            pads: [pad; 4],
            dilations: [1, 1],
            ceil_mode: false,
            count_include_pad: false,
            data: dnnc_ir::op::DataLayout::Nchw,
        }
    }

    /// SqueezeNet's stem pool (3x3, stride 2, ceil mode, 111 -> 55 rows):
    /// bands of four pool rows over nine conv rows, sharing one.
    #[test]
    fn squeezenet_stem_bands_share_one_conv_row() {
        let g = geo(64, 111, 111, 27);
        let b = PoolBands::plan(&g, &pool(3, 2, 0), 55, 55).expect("plan");
        assert_eq!((b.r, b.nb, b.ov, b.rs), (4, 14, 1, 9));
        assert_eq!(
            b.first,
            Band {
                a: 0,
                rows: 9,
                q0: 0,
                qn: 4,
                pt: 0
            }
        );
        assert_eq!(
            b.mid,
            Some(Band {
                a: 8,
                rows: 9,
                q0: 4,
                qn: 4,
                pt: 0
            })
        );
        // Rows 52..55 read conv rows 104..111 (the last window clipped).
        assert_eq!(
            b.last,
            Band {
                a: 104,
                rows: 7,
                q0: 52,
                qn: 3,
                pt: 0
            }
        );
    }

    /// ResNet's stem pool (3x3, stride 2, pad 1, 112 -> 56 rows): the
    /// first band's windows start in the padding.
    #[test]
    fn a_padded_pool_pads_only_the_first_band() {
        let g = geo(64, 112, 112, 147);
        let b = PoolBands::plan(&g, &pool(3, 2, 1), 56, 56).expect("plan");
        assert_eq!(b.first.pt, 1);
        assert_eq!(b.first.a, 0);
        assert!(b.mid.is_some_and(|m| m.pt == 0 && m.a + 1 == m.q0 * 2));
        assert_eq!(b.last.a + b.last.rows, 112);
        assert_eq!(b.ov, 1);
        let covered: usize =
            [b.first.qn, b.last.qn].iter().sum::<usize>() + b.mid.map_or(0, |m| m.qn * (b.nb - 2));
        assert_eq!(covered, 56);
    }

    /// Windows that do not overlap share no rows; a grouped conv is not
    /// planned.
    #[test]
    fn disjoint_windows_share_nothing_and_groups_do_not_plan() {
        let g = geo(32, 64, 64, 9);
        let b = PoolBands::plan(&g, &pool(2, 2, 0), 32, 32).expect("plan");
        assert_eq!(b.ov, 0);
        let mut grouped = geo(32, 64, 64, 9);
        grouped.g = 2;
        assert!(PoolBands::plan(&grouped, &pool(2, 2, 0), 32, 32).is_none());
    }
}
