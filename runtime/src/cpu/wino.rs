//! The input and output transforms of Winograd F(4x4, 3x3) for one tile
//! row of one channel, with AVX-512: sixteen tiles a vector (a lane a
//! tile), where the generated code, limited to Cranelift's 128-bit
//! vectors, takes four.
//!
//! Input: the tile row's six rows of the zero-padded plane are loaded 64
//! columns (sixteen tiles) at a time and split by `vpermt2ps` into the
//! columns `4t + c` of every tile `t` (`c < 6`), then `V = Bᵀ d B` with the
//! generated code's shared sums, stored a frequency at a time.
//!
//! Output: The products `M` of the tile row's frequency GEMMs give
//! `Y = Aᵀ M A` (points 0, ±1, ±2, ∞, the `Aᵀ` rows written with shared
//! sums as the generated code writes them), then each output is
//! `min(max(y + bias, lo), hi)` (a NaN kept, as the generated clamp keeps
//! it), the tiles' 4x4 blocks regrouped into output rows by shuffles and
//! stored, the columns past the row's end masked off.

/// Whether [`dnnc_winograd4_out_row`] and [`dnnc_winograd4_in_row`] run
/// on this machine.
pub fn winograd4_out_row_runs() -> bool {
    super::avx512_vl()
}

/// The F(4x4) input transform of one tile row of one channel: tile `t`
/// (`t < tiles`) reads rows `0..6` and columns `4t..4t + 6` of the padded
/// plane at `x` (rows `xw` floats apart, `xw >= 4 * tiles + 2`), and its
/// 36 transformed values go to `v[f * vs + t]`, `f = 6i + j`. Returns 0,
/// or 2 where it does not run or for a geometry it does not take.
///
/// # Safety
/// `x` must hold six rows of `xw` floats, `v` the 36 frequencies' `tiles`
/// values `vs` floats apart; they must not overlap.
#[no_mangle]
pub unsafe extern "C" fn dnnc_winograd4_in_row(
    x: *const f32,
    xw: i64,
    tiles: i64,
    v: *mut f32,
    vs: i64,
) -> i32 {
    let (Ok(xw), Ok(tiles), Ok(vs)) = (
        usize::try_from(xw),
        usize::try_from(tiles),
        usize::try_from(vs),
    ) else {
        return 2;
    };
    if !winograd4_out_row_runs() || xw < 4 * tiles + 2 {
        return 2;
    }
    #[cfg(target_arch = "x86_64")]
    {
        x86::in_row(x, xw, tiles, v, vs);
        0
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (x, v);
        2
    }
}

/// Output rows `4r..4r + rows` (`rows` at most 4) of one channel from the
/// F(4x4) products of the tile row's `tiles` tiles: the product of
/// frequency `f = 6k + j` for tile `t` at `m[f * ms + t]`; output row `i`
/// at `y + i * ow`, its `ow` columns (at most `4 * tiles`). Each output is
/// `min(max(y + bias + r, lo), hi)`, `r` the residual's element at `res +
/// i * ow` plus the column (none for a null `res`). Returns 0, or 2 where
/// it does not run ([`winograd4_out_row_runs`]) or for a geometry it does
/// not take.
///
/// # Safety
/// `m` must hold the 36 frequencies' `tiles` products `ms` floats apart,
/// `y` the `rows` output rows, `res` (unless null) rows of `y`'s shape;
/// `y` must not overlap `m` or `res`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_winograd4_out_row(
    m: *const f32,
    ms: i64,
    tiles: i64,
    y: *mut f32,
    ow: i64,
    rows: i64,
    res: *const f32,
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
        x86::row(m, ms, tiles, (y, res), ow, rows, (bias, lo, hi));
        0
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (m, y, res, bias, lo, hi);
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

    /// `Bᵀ d` for six vectors: `4(d0 - d2) + (d4 - d2)`, `(d4 - 4d2) ±
    /// (d3 - 4d1)`, `(d4 - d2) ± 2(d3 - d1)`, `-4(d3 - d1) + (d5 - d3)`.
    #[inline(always)]
    unsafe fn bt(d: &[__m512; 6]) -> [__m512; 6] {
        let (k2, k4) = (_mm512_set1_ps(2.0), _mm512_set1_ps(4.0));
        let (n2, n4) = (_mm512_set1_ps(-2.0), _mm512_set1_ps(-4.0));
        let c = _mm512_sub_ps(d[4], d[2]);
        let a = _mm512_fmadd_ps(d[2], n4, d[4]);
        let b = _mm512_fmadd_ps(d[1], n4, d[3]);
        let t = _mm512_sub_ps(d[3], d[1]);
        [
            _mm512_fmadd_ps(_mm512_sub_ps(d[0], d[2]), k4, c),
            _mm512_add_ps(a, b),
            _mm512_sub_ps(a, b),
            _mm512_fmadd_ps(t, k2, c),
            _mm512_fmadd_ps(t, n2, c),
            _mm512_fmadd_ps(t, n4, _mm512_sub_ps(d[5], d[3])),
        ]
    }

    /// See [`super::dnnc_winograd4_in_row`]; the caller checked the
    /// arguments.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn in_row(x: *const f32, xw: usize, tiles: usize, v: *mut f32, vs: usize) {
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let next0 = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
        let next1 = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17);
        // Columns `[col, col + 16)` of a row, those past `xw` as zeros.
        let load = |row: *const f32, col: usize| -> __m512 {
            let n = xw.saturating_sub(col).min(16);
            _mm512_maskz_loadu_ps(((1u32 << n) - 1) as __mmask16, row.add(col))
        };
        for c in (0..tiles).step_by(16) {
            let nt = (tiles - c).min(16);
            let tmask = ((1u32 << nt) - 1) as __mmask16;
            // cols[k][j]: row k's column 4t + j of every tile, then the
            // column pass: col[i][j] = sum_k Bᵀ[i][k] d[k][j].
            let mut cols = [[_mm512_setzero_ps(); 6]; 6];
            for (k, colk) in cols.iter_mut().enumerate() {
                let row = x.add(k * xw);
                let x0 = 4 * c;
                let (v0, v1, v2, v3, v4) = (
                    load(row, x0),
                    load(row, x0 + 16),
                    load(row, x0 + 32),
                    load(row, x0 + 48),
                    load(row, x0 + 64),
                );
                let (e01, o01) = (
                    _mm512_permutex2var_ps(v0, even, v1),
                    _mm512_permutex2var_ps(v0, odd, v1),
                );
                let (e23, o23) = (
                    _mm512_permutex2var_ps(v2, even, v3),
                    _mm512_permutex2var_ps(v2, odd, v3),
                );
                let p0 = _mm512_permutex2var_ps(e01, even, e23);
                let p2 = _mm512_permutex2var_ps(e01, odd, e23);
                let p1 = _mm512_permutex2var_ps(o01, even, o23);
                let p3 = _mm512_permutex2var_ps(o01, odd, o23);
                let p4 = _mm512_permutex2var_ps(p0, next0, v4);
                let p5 = _mm512_permutex2var_ps(p1, next1, v4);
                *colk = [p0, p1, p2, p3, p4, p5];
            }
            let passed: [[__m512; 6]; 6] =
                std::array::from_fn(|j| bt(&std::array::from_fn(|k| cols[k][j])));
            let cols: [[__m512; 6]; 6] =
                std::array::from_fn(|k| std::array::from_fn(|j| passed[j][k]));
            // The row pass: V[i][j] = sum_c col[i][c] B[c][j].
            for (i, ci) in cols.iter().enumerate() {
                for (j, vij) in bt(ci).into_iter().enumerate() {
                    _mm512_mask_storeu_ps(v.add((6 * i + j) * vs + c), tmask, vij);
                }
            }
        }
    }

    /// See [`super::dnnc_winograd4_out_row`]; the caller checked the
    /// arguments.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn row(
        m: *const f32,
        ms: usize,
        tiles: usize,
        (y, res): (*mut f32, *const f32),
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
                let v = at(tri).map(|v| _mm512_add_ps(v, vb));
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
                    let mask = ((1u32 << n) - 1) as __mmask16;
                    let o = if res.is_null() {
                        o
                    } else {
                        _mm512_add_ps(o, _mm512_maskz_loadu_ps(mask, res.add(i * ow + col)))
                    };
                    // `max(lo, v)` and `min(hi, v)` return `v` when it is
                    // NaN.
                    let o = _mm512_min_ps(vhi, _mm512_max_ps(vlo, o));
                    if n == 16 {
                        _mm512_storeu_ps(yr.add(col), o);
                    } else {
                        _mm512_mask_storeu_ps(yr.add(col), mask, o);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the native transforms run here; says so when they do not.
    fn runs() -> bool {
        let ok = winograd4_out_row_runs();
        if !ok {
            eprintln!("SKIPPED: no AVX-512 on this machine; the generated transform runs instead");
        }
        ok
    }

    /// Floats in `[-1, 1)` from a linear congruential generator.
    fn uniform(seed: u32) -> impl FnMut() -> f32 {
        let mut s = seed;
        move || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1 << 24) as f32 * 2.0 - 1.0
        }
    }

    /// `Aᵀ` of F(4x4, 3x3), points 0, ±1, ±2, ∞.
    const AT: [[f64; 6]; 4] = [
        [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        [0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
        [0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
        [0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
    ];

    #[test]
    fn computes_the_transform_of_every_tile_clamped_and_masked() {
        if !runs() {
            return;
        }
        let mut next = uniform(3);
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
            // A residual for the even cases (its rows as the output's).
            let res: Vec<f32> = (0..4 * ow).map(|_| next()).collect();
            let with_res = ow % 2 == 0;
            let mut y = vec![-7.0f32; 4 * ow + 3];
            let rc = unsafe {
                dnnc_winograd4_out_row(
                    m.as_ptr(),
                    ms as i64,
                    tiles as i64,
                    y.as_mut_ptr(),
                    ow as i64,
                    rows as i64,
                    if with_res {
                        res.as_ptr()
                    } else {
                        std::ptr::null()
                    },
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
                    let r = if with_res {
                        res[i * ow + col] as f64
                    } else {
                        0.0
                    };
                    let want = ((want + bias as f64 + r).max(lo as f64)).min(hi as f64);
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

    /// `Bᵀ` of F(4x4, 3x3).
    const BT: [[f64; 6]; 6] = [
        [4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
        [0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
        [0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
        [0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
        [0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
        [0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
    ];

    #[test]
    fn transforms_every_input_tile_and_writes_only_its_tiles() {
        if !runs() {
            return;
        }
        let mut next = uniform(5);
        for (tiles, xw) in [(14, 68), (14, 58), (7, 32), (20, 84), (28, 116), (16, 66)] {
            let x: Vec<f32> = (0..6 * xw).map(|_| next()).collect();
            let vs = tiles + 3;
            let mut v = vec![9.0f32; 36 * vs];
            let rc = unsafe {
                dnnc_winograd4_in_row(
                    x.as_ptr(),
                    xw as i64,
                    tiles as i64,
                    v.as_mut_ptr(),
                    vs as i64,
                )
            };
            assert_eq!(rc, 0);
            for t in 0..vs {
                for i in 0..6 {
                    for j in 0..6 {
                        let got = v[(6 * i + j) * vs + t];
                        if t >= tiles {
                            assert_eq!(got, 9.0, "tile {t} past the row written");
                            continue;
                        }
                        let mut want = 0.0f64;
                        for k in 0..6 {
                            for l in 0..6 {
                                want += BT[i][k] * x[k * xw + 4 * t + l] as f64 * BT[j][l];
                            }
                        }
                        assert!(
                            (got as f64 - want).abs() < 1e-4,
                            "tiles {tiles} tile {t} V[{i}][{j}]: {got} vs {want}"
                        );
                    }
                }
            }
        }
        assert_eq!(
            unsafe {
                dnnc_winograd4_in_row([0.0f32; 6].as_ptr(), 1, 1, [0.0f32; 36].as_mut_ptr(), 1)
            },
            2
        );
    }

    #[test]
    fn a_nan_product_reaches_its_outputs() {
        if !runs() {
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
                std::ptr::null(),
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
                std::ptr::null(),
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
