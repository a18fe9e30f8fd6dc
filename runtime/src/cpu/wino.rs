//! The output transform of Winograd F(4x4, 3x3) for one tile row of one
//! output channel, with AVX-512: sixteen tiles a vector (a lane a tile),
//! where the generated code, limited to Cranelift's 128-bit vectors,
//! takes four. The products `M` of the tile row's frequency GEMMs give
//! `Y = Aᵀ M A` (points 0, ±1, ±2, ∞, the `Aᵀ` rows written with shared
//! sums as the generated code writes them), then each output is
//! `min(max(y + bias, lo), hi)` (a NaN kept, as the generated clamp keeps
//! it), the tiles' 4x4 blocks regrouped into output rows by shuffles and
//! stored, the columns past the row's end masked off.

/// Whether [`dnnc_winograd4_out_row`] runs on this machine.
pub fn winograd4_out_row_runs() -> bool {
    super::avx512_vl()
}

/// Output rows `4r..4r + rows` (`rows` at most 4) of one channel from the
/// F(4x4) products of the tile row's `tiles` tiles: the product of
/// frequency `f = 6k + j` for tile `t` at `m[f * ms + t]`; output row `i`
/// at `y + i * ow`, its `ow` columns (at most `4 * tiles`). Returns 0, or
/// 2 where it does not run ([`winograd4_out_row_runs`]) or for a
/// geometry it does not take.
///
/// # Safety
/// `m` must hold the 36 frequencies' `tiles` products `ms` floats apart,
/// `y` the `rows` output rows; they must not overlap.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_winograd4_out_row(
    m: *const f32,
    ms: i64,
    tiles: i64,
    y: *mut f32,
    ow: i64,
    rows: i64,
    bias: f32,
    lo: f32,
    hi: f32,
) -> i32 {
    let (Ok(ms), Ok(tiles), Ok(ow), Ok(rows)) = (
        usize::try_from(ms),
        usize::try_from(tiles),
        usize::try_from(ow),
        usize::try_from(rows),
    ) else {
        return 2;
    };
    if !winograd4_out_row_runs() || rows > 4 || ow > 4 * tiles {
        return 2;
    }
    #[cfg(target_arch = "x86_64")]
    {
        x86::row(m, ms, tiles, y, ow, rows, (bias, lo, hi));
        0
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (m, y, bias, lo, hi);
        2
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `Aᵀ x` for six vectors: `x0 + (x1 + x2) + (x3 + x4)`, `(x1 - x2) +
    /// 2(x3 - x4)`, `(x1 + x2) + 4(x3 + x4)`, `(x1 - x2) + 8(x3 - x4) +
    /// x5`. (`inline(always)` keeps it inside the `target_feature`
    /// caller.)
    #[inline(always)]
    unsafe fn at(x: &[__m512; 6]) -> [__m512; 4] {
        let (k2, k4, k8) = (
            _mm512_set1_ps(2.0),
            _mm512_set1_ps(4.0),
            _mm512_set1_ps(8.0),
        );
        let s12 = _mm512_add_ps(x[1], x[2]);
        let d12 = _mm512_sub_ps(x[1], x[2]);
        let s34 = _mm512_add_ps(x[3], x[4]);
        let d34 = _mm512_sub_ps(x[3], x[4]);
        [
            _mm512_add_ps(_mm512_add_ps(x[0], s12), s34),
            _mm512_fmadd_ps(d34, k2, d12),
            _mm512_fmadd_ps(s34, k4, s12),
            _mm512_add_ps(_mm512_fmadd_ps(d34, k8, d12), x[5]),
        ]
    }

    /// See [`super::dnnc_winograd4_out_row`]; the caller checked the
    /// arguments.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn row(
        m: *const f32,
        ms: usize,
        tiles: usize,
        y: *mut f32,
        ow: usize,
        rows: usize,
        (bias, lo, hi): (f32, f32, f32),
    ) {
        let (vb, vlo, vhi) = (_mm512_set1_ps(bias), _mm512_set1_ps(lo), _mm512_set1_ps(hi));
        for c in (0..tiles).step_by(16) {
            let nt = (tiles - c).min(16);
            let tmask = ((1u32 << nt) - 1) as __mmask16;
            // cols[j][i] = sum_k Aᵀ[i][k] M[k][j], tile per lane.
            let mut cols = [[_mm512_setzero_ps(); 4]; 6];
            for (j, col) in cols.iter_mut().enumerate() {
                let mut x = [_mm512_setzero_ps(); 6];
                for (k, v) in x.iter_mut().enumerate() {
                    *v = _mm512_maskz_loadu_ps(tmask, m.add((6 * k + j) * ms + c));
                }
                *col = at(&x);
            }
            let tr: [[__m512; 6]; 4] = std::array::from_fn(|i| std::array::from_fn(|j| cols[j][i]));
            for (i, tri) in tr.iter().enumerate().take(rows) {
                let v = at(tri).map(|v| {
                    let v = _mm512_add_ps(v, vb);
                    // `max(lo, v)` and `min(hi, v)` return `v` when it is
                    // NaN.
                    _mm512_min_ps(vhi, _mm512_max_ps(vlo, v))
                });
                // Regroup: lane t of v[j] is column 4t + j; each 128-bit
                // lane of a, b, c, d holds one tile's four columns.
                let lo01 = _mm512_unpacklo_ps(v[0], v[1]);
                let hi01 = _mm512_unpackhi_ps(v[0], v[1]);
                let lo23 = _mm512_unpacklo_ps(v[2], v[3]);
                let hi23 = _mm512_unpackhi_ps(v[2], v[3]);
                let (lo01, hi01) = (_mm512_castps_pd(lo01), _mm512_castps_pd(hi01));
                let (lo23, hi23) = (_mm512_castps_pd(lo23), _mm512_castps_pd(hi23));
                // Tiles 4L, 4L+1, 4L+2, 4L+3 in 128-bit lane L.
                let ta = _mm512_castpd_ps(_mm512_unpacklo_pd(lo01, lo23));
                let tb = _mm512_castpd_ps(_mm512_unpackhi_pd(lo01, lo23));
                let tc = _mm512_castpd_ps(_mm512_unpacklo_pd(hi01, hi23));
                let td = _mm512_castpd_ps(_mm512_unpackhi_pd(hi01, hi23));
                let ab_lo = _mm512_shuffle_f32x4::<0b01_00_01_00>(ta, tb);
                let cd_lo = _mm512_shuffle_f32x4::<0b01_00_01_00>(tc, td);
                let ab_hi = _mm512_shuffle_f32x4::<0b11_10_11_10>(ta, tb);
                let cd_hi = _mm512_shuffle_f32x4::<0b11_10_11_10>(tc, td);
                let out = [
                    _mm512_shuffle_f32x4::<0b10_00_10_00>(ab_lo, cd_lo),
                    _mm512_shuffle_f32x4::<0b11_01_11_01>(ab_lo, cd_lo),
                    _mm512_shuffle_f32x4::<0b10_00_10_00>(ab_hi, cd_hi),
                    _mm512_shuffle_f32x4::<0b11_01_11_01>(ab_hi, cd_hi),
                ];
                let yr = y.add(i * ow);
                for (q, &o) in out.iter().enumerate() {
                    let col = 4 * c + 16 * q;
                    if col >= ow {
                        break;
                    }
                    let n = (ow - col).min(16);
                    if n == 16 {
                        _mm512_storeu_ps(yr.add(col), o);
                    } else {
                        _mm512_mask_storeu_ps(yr.add(col), ((1u32 << n) - 1) as __mmask16, o);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Aᵀ` of F(4x4, 3x3), points 0, ±1, ±2, ∞.
    const AT: [[f64; 6]; 4] = [
        [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        [0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
        [0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
        [0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
    ];

    #[test]
    fn computes_the_transform_of_every_tile_clamped_and_masked() {
        if !winograd4_out_row_runs() {
            eprintln!("SKIPPED: no AVX-512 on this machine; the generated transform runs instead");
            return;
        }
        let mut seed = 3u32;
        let mut next = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1 << 24) as f32 * 2.0 - 1.0
        };
        for (tiles, ow, rows) in [
            (14, 55, 4),
            (14, 56, 3),
            (7, 27, 4),
            (20, 77, 2),
            (16, 64, 1),
            (3, 9, 4),
        ] {
            let ms = tiles + 5;
            let m: Vec<f32> = (0..36 * ms).map(|_| next()).collect();
            let (bias, lo, hi) = (0.25f32, 0.0f32, 1.5f32);
            let mut y = vec![-7.0f32; 4 * ow + 3];
            let rc = unsafe {
                dnnc_winograd4_out_row(
                    m.as_ptr(),
                    ms as i64,
                    tiles as i64,
                    y.as_mut_ptr(),
                    ow as i64,
                    rows as i64,
                    bias,
                    lo,
                    hi,
                )
            };
            assert_eq!(rc, 0);
            for i in 0..4 {
                for col in 0..ow {
                    let got = y[i * ow + col];
                    if i >= rows {
                        assert_eq!(got, -7.0, "row {i} past the rows written");
                        continue;
                    }
                    let (t, j) = (col / 4, col % 4);
                    let mut want = 0.0f64;
                    for k in 0..6 {
                        for l in 0..6 {
                            want += AT[i][k] * m[(6 * k + l) * ms + t] as f64 * AT[j][l];
                        }
                    }
                    let want = ((want + bias as f64).max(lo as f64)).min(hi as f64);
                    assert!(
                        (got as f64 - want).abs() < 1e-4,
                        "tiles {tiles} row {i} col {col}: {got} vs {want}"
                    );
                }
            }
            assert!(
                y[4 * ow..].iter().all(|&v| v == -7.0),
                "wrote past the rows"
            );
        }
    }

    #[test]
    fn a_nan_product_reaches_its_outputs() {
        if !winograd4_out_row_runs() {
            eprintln!("SKIPPED: no AVX-512 on this machine; the generated transform runs instead");
            return;
        }
        let (tiles, ms, ow) = (14usize, 16usize, 55usize);
        let mut m = vec![0.5f32; 36 * ms];
        m[7 * ms + 5] = f32::NAN;
        let mut y = vec![0.0f32; 4 * ow];
        let rc = unsafe {
            dnnc_winograd4_out_row(
                m.as_ptr(),
                ms as i64,
                tiles as i64,
                y.as_mut_ptr(),
                ow as i64,
                4,
                0.0,
                0.0,
                f32::INFINITY,
            )
        };
        assert_eq!(rc, 0);
        assert!(y[20..24].iter().any(|v| v.is_nan()), "{:?}", &y[16..28]);
    }

    #[test]
    fn geometries_it_cannot_take_are_refused() {
        let m = [0.0f32; 36];
        let mut y = [0.0f32; 8];
        let call = |tiles: i64, ow: i64, rows: i64, y: &mut [f32]| unsafe {
            dnnc_winograd4_out_row(
                m.as_ptr(),
                1,
                tiles,
                y.as_mut_ptr(),
                ow,
                rows,
                0.0,
                0.0,
                1.0,
            )
        };
        assert_eq!(call(1, 4, 5, &mut y), 2);
        assert_eq!(call(1, 5, 1, &mut y), 2);
        assert_eq!(call(-1, 4, 1, &mut y), 2);
    }
}
