//! Vectorised transcendentals in Cranelift IR. Cranelift has no exp, log,
//! tanh or erf instructions, so these are polynomial approximations with
//! range reduction (Cephes-style coefficients), on f32x4 lanes. Scalar
//! tails splat a scalar into a vector and take lane 0, so there is exactly
//! one implementation of each function.
//!
//! Accuracy targets the interpreter at rtol 1e-4 / atol 1e-5 (measured in
//! `compiler/tests/cpu_ops.rs`, `transcendentals_over_wide_ranges`); special values follow libm where it is
//! cheap: `exp(+inf) = inf`, `exp(-inf) ~ 0`, `log(0) = -inf`,
//! `log(x < 0) = NaN`, NaN propagates.

use super::emit::Emit;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, Value};
/// `exp`'s and `erf`'s constants, shared with the packed GEMM's native
/// GELU (`pgemm::gelu`), which repeats these functions' operations.
use dnnc_runtime::cpu::pgemm::erf as C;

/// Horner evaluation `c[0] * x^(n-1) + ... + c[n-1]`.
fn poly(e: &mut Emit<'_>, x: Value, c: &[f32]) -> Value {
    let mut acc = e.vf(c[0]);
    for &k in &c[1..] {
        let t = e.b.ins().fmul(acc, x);
        let kk = e.vf(k);
        acc = e.b.ins().fadd(t, kk);
    }
    acc
}

/// `2^n` for integral f32x4 `n` in `[-252, 254]`, as two factors so that
/// neither exponent field overflows; `x * 2^n` is returned.
///
/// `n` becomes an integer by one add of `1.5 * 2^23` (exact for an
/// integral `|n| < 2^22`, the float's low mantissa bits then `n` plus a
/// constant) and an integer subtract: the value a converting instruction
/// gives, in two instructions where `fcvt_to_sint_sat` takes seven on x86
/// (its NaN and overflow fix-ups). A NaN `n` gives some integer, and
/// `x`, NaN too, keeps the result NaN.
fn ldexp(e: &mut Emit<'_>, x: Value, n: Value) -> Value {
    let shift = e.vf(12_582_912.0);
    let biased = e.b.ins().fadd(n, shift);
    let biased = e.as_int(biased);
    let base = e.vi(12_582_912.0_f32.to_bits() as i32);
    let ni = e.b.ins().isub(biased, base);
    let n1 = e.b.ins().sshr_imm_u(ni, 1);
    let n2 = e.b.ins().isub(ni, n1);
    let bias = e.vi(127);
    let p1 = e.b.ins().iadd(n1, bias);
    let p1 = e.b.ins().ishl_imm_u(p1, 23);
    let p1 = e.as_float(p1);
    let p2 = e.b.ins().iadd(n2, bias);
    let p2 = e.b.ins().ishl_imm_u(p2, 23);
    let p2 = e.as_float(p2);
    let y = e.b.ins().fmul(x, p1);
    e.b.ins().fmul(y, p2)
}

/// `e^x`.
///
/// `x` is clamped to `[EXP_LO, EXP_HI]` by selects that keep a NaN `x`
/// (a failed compare picks `x`), in the forms x86 lowers to one `minps`
/// and one `maxps` ([`sigmoid_n`] does the same): `fmin`/`fmax` take about
/// ten instructions each there for their NaN and signed-zero rules, which
/// a clamp by two non-zero bounds does not need. The result's bits are
/// the same for every `x` (the native GELU's `exp_exact` repeats them).
pub(crate) fn exp(e: &mut Emit<'_>, x: Value) -> Value {
    let hi = e.vf(C::EXP_HI);
    let lo = e.vf(C::EXP_LO);
    let xc = e.fsel(FloatCC::LessThan, hi, x, hi, x);
    let xc = e.fsel(FloatCC::LessThan, xc, lo, lo, xc);
    let log2e = e.vf(std::f32::consts::LOG2_E);
    let t = e.b.ins().fmul(xc, log2e);
    let n = e.b.ins().nearest(t);
    let c1 = e.vf(C::LN2_HI);
    let c2 = e.vf(C::LN2_LO);
    let a = e.b.ins().fmul(n, c1);
    let r = e.b.ins().fsub(xc, a);
    let a = e.b.ins().fmul(n, c2);
    let r = e.b.ins().fsub(r, a);
    let p = poly(e, r, &dnnc_runtime::cpu::pgemm::sig::P);
    let r2 = e.b.ins().fmul(r, r);
    let p = e.b.ins().fmul(p, r2);
    let p = e.b.ins().fadd(p, r);
    let one = e.vf(1.0);
    let p = e.b.ins().fadd(p, one);
    let y = ldexp(e, p, n);
    let inf = e.vf(f32::INFINITY);
    e.fsel(FloatCC::GreaterThan, x, hi, inf, y)
}

/// Natural logarithm. Subnormal inputs are treated as their normal-range
/// neighbours scaled (accurate), via a pre-scale by 2^23.
pub(crate) fn log(e: &mut Emit<'_>, x: Value) -> Value {
    // Scale subnormals into the normal range.
    let tiny = e.vf(f32::MIN_POSITIVE);
    let big = e.vf(8_388_608.0); // 2^23
    let xs = e.b.ins().fmul(x, big);
    let is_sub = e.b.ins().fcmp(FloatCC::LessThan, x, tiny);
    let xn = e.msel(is_sub, xs, x);
    let zero_v = e.vf(0.0);
    let sub_adj = e.vf(-23.0);
    let adj = e.msel(is_sub, sub_adj, zero_v);

    let bits = e.as_int(xn);
    let ex = e.b.ins().ushr_imm_u(bits, 23);
    let c126 = e.vi(126);
    let ex = e.b.ins().isub(ex, c126);
    let mant_mask = e.vi(0x807f_ffff_u32 as i32);
    let m = e.b.ins().band(bits, mant_mask);
    let half = e.vi(0x3f00_0000);
    let m = e.b.ins().bor(m, half);
    let m = e.as_float(m); // [0.5, 1)
    let ef =
        e.b.ins()
            .fcvt_from_sint(cranelift_codegen::ir::types::F32X4, ex);
    let ef = e.b.ins().fadd(ef, adj);
    // if m < sqrt(1/2): e -= 1, x = 2m - 1 else x = m - 1
    let sqrthf = e.vf(std::f32::consts::FRAC_1_SQRT_2);
    let small = e.b.ins().fcmp(FloatCC::LessThan, m, sqrthf);
    let one = e.vf(1.0);
    let m2 = e.b.ins().fadd(m, m);
    let mm = e.msel(small, m2, m);
    let xr = e.b.ins().fsub(mm, one);
    let ef1 = e.b.ins().fsub(ef, one);
    let ef = e.msel(small, ef1, ef);
    let z = e.b.ins().fmul(xr, xr);
    let p = poly(
        e,
        xr,
        &[
            7.037_683_6e-2,
            -1.151_461e-1,
            1.167_699_9e-1,
            -1.242_014_1e-1,
            1.424_932_3e-1,
            -1.666_805_8e-1,
            2.000_071_4e-1,
            -2.499_999_4e-1,
            0.333_333_3,
        ],
    );
    let y = e.b.ins().fmul(p, xr);
    let y = e.b.ins().fmul(y, z);
    let c = e.vf(-2.121_944_4e-4);
    let t = e.b.ins().fmul(ef, c);
    let y = e.b.ins().fadd(y, t);
    let h = e.vf(-0.5);
    let t = e.b.ins().fmul(z, h);
    let y = e.b.ins().fadd(y, t);
    let r = e.b.ins().fadd(xr, y);
    let c = e.vf(0.693_359_4);
    let t = e.b.ins().fmul(ef, c);
    let r = e.b.ins().fadd(r, t);
    // Special values: x == 0 -> -inf, x < 0 -> NaN, x == inf -> inf, NaN -> NaN.
    let ninf = e.vf(f32::NEG_INFINITY);
    let r = e.fsel(FloatCC::Equal, x, zero_v, ninf, r);
    let nan = e.vf(f32::NAN);
    let r = e.fsel(FloatCC::LessThan, x, zero_v, nan, r);
    let inf = e.vf(f32::INFINITY);
    let r = e.fsel(FloatCC::Equal, x, inf, inf, r);
    e.fsel(FloatCC::Unordered, x, x, x, r)
}

/// Hyperbolic tangent: an odd polynomial for `|x| < 0.625`, else
/// `sign(x) (1 - 2 / (e^{2|x|} + 1))`.
pub(crate) fn tanh(e: &mut Emit<'_>, x: Value) -> Value {
    let ax = e.b.ins().fabs(x);
    let two = e.vf(2.0);
    let t = e.b.ins().fmul(ax, two);
    let ex = exp(e, t);
    let one = e.vf(1.0);
    let d = e.b.ins().fadd(ex, one);
    let q = e.b.ins().fdiv(two, d);
    let big = e.b.ins().fsub(one, q);
    // Restore the sign by copying x's sign bit.
    let sign_mask = e.vi(i32::MIN);
    let xi = e.as_int(x);
    let s = e.b.ins().band(xi, sign_mask);
    let bi = e.as_int(big);
    let bi = e.b.ins().bor(bi, s);
    let big = e.as_float(bi);
    let z = e.b.ins().fmul(x, x);
    let p = poly(
        e,
        z,
        &[
            -5.704_988_7e-3,
            2.063_909e-2,
            -5.373_971_6e-2,
            1.333_144_2e-1,
            -0.333_332_8,
        ],
    );
    let p = e.b.ins().fmul(p, z);
    let p = e.b.ins().fmul(p, x);
    let small = e.b.ins().fadd(p, x);
    let lim = e.vf(0.625);
    let r = e.fsel(FloatCC::LessThan, ax, lim, small, big);
    e.fsel(FloatCC::Unordered, x, x, x, r)
}

/// Logistic sigmoid `1 / (1 + e^-x)`, NaN propagating.
///
/// Its own `e^-x`, cheaper than [`exp`] (EfficientNet's SiLU runs it on
/// every activation), the operations and constants of the packed GEMM's
/// epilogue (`dnnc_runtime::cpu::pgemm::sigmoid`, where the method is
/// described), so both give the same bits for every number: `x` clamped
/// to `[-88, 87]` with one `maxps` and one `minps` (selects that keep a
/// NaN `x`, which then flows through the arithmetic to the result, where
/// the `fmax`/`fmin` sequences would take several instructions each and
/// a final NaN select two more), `n` and `2^n` from one add of a magic
/// constant and a shift, no negation of `x`, the reduction and
/// polynomial as fused multiply-adds. About 40 instructions per four
/// lanes instead of 75 (EfficientNet block's 8x96x16x16 SiLU: 0.59 ->
/// 0.28 ms; its 8x32x16x16 depthwise conv + SiLU 0.102 -> 0.093 ms with
/// this version against the previous one, which negated `x` and added
/// the exponent bias as an integer); the NaN-keeping clamps instead of a
/// compare-and-blend and a final select: an 8x96x56x56 SiLU 2.38 -> 1.96
/// ms.
pub(crate) fn sigmoid(e: &mut Emit<'_>, x: Value) -> Value {
    sigmoid_n(e, &[x])[0]
}

/// [`sigmoid`] of each of `xs`, emitted a step at a time across all of
/// them: each result's bits are those of `sigmoid` alone, but the machine
/// code holds `xs.len()` independent chains side by side, which Zen 1's
/// small FP scheduler cannot find on its own in one chain of ~20
/// dependent operations after another.
pub(crate) fn sigmoid_n(e: &mut Emit<'_>, xs: &[Value]) -> Vec<Value> {
    use dnnc_runtime::cpu::pgemm::sig;
    let lo = e.vf(sig::LO);
    let hi = e.vf(sig::HI);
    // Both clamps keep a NaN `x` (a failed compare selects `x`), each in
    // the form x86 lowers to one `maxps`/`minps`; the NaN then flows
    // through every later operation to the result, so no final select
    // is needed.
    let c: Vec<Value> = xs
        .iter()
        .map(|&x| e.fsel(FloatCC::LessThan, x, lo, lo, x))
        .collect();
    let c: Vec<Value> = c
        .iter()
        .map(|&c| e.fsel(FloatCC::LessThan, hi, c, hi, c))
        .collect();
    let nlog2e = e.vf(sig::NLOG2E);
    let magic = e.vf(sig::MAGIC);
    let y: Vec<Value> = c.iter().map(|&c| e.b.ins().fma(c, nlog2e, magic)).collect();
    let n: Vec<Value> = y.iter().map(|&y| e.b.ins().fsub(y, magic)).collect();
    let c1 = e.vf(sig::LN2_HI);
    let c2 = e.vf(sig::LN2_LO);
    let s: Vec<Value> = n
        .iter()
        .zip(&c)
        .map(|(&n, &c)| e.b.ins().fma(n, c1, c))
        .collect();
    let s: Vec<Value> = n
        .iter()
        .zip(&s)
        .map(|(&n, &s)| e.b.ins().fma(n, c2, s))
        .collect();
    let q0 = e.vf(sig::Q[0]);
    let mut p = vec![q0; xs.len()];
    for &k in &sig::Q[1..] {
        let kk = e.vf(k);
        for (p, &s) in p.iter_mut().zip(&s) {
            *p = e.b.ins().fma(*p, s, kk);
        }
    }
    let one = e.vf(1.0);
    let q: Vec<Value> = p
        .iter()
        .zip(&s)
        .map(|(&p, &s)| {
            let s2 = e.b.ins().fmul(s, s);
            let q = e.b.ins().fma(p, s2, one);
            e.b.ins().fsub(q, s)
        })
        .collect();
    q.iter()
        .zip(&y)
        .map(|(&q, &y)| {
            // 2^n: the bits of y shifted left by 23 (module `sig`).
            let yi = e.as_int(y);
            let ei = e.b.ins().ishl_imm_u(yi, 23);
            let scale = e.as_float(ei);
            let d = e.b.ins().fma(q, scale, one);
            e.b.ins().fdiv(one, d)
        })
        .collect()
}

/// `e^x - 1`, with a series near 0 to avoid cancellation.
pub(crate) fn expm1(e: &mut Emit<'_>, x: Value) -> Value {
    let ex = exp(e, x);
    let one = e.vf(1.0);
    let big = e.b.ins().fsub(ex, one);
    // x + x^2/2 + x^3/6 + x^4/24 + x^5/120 for |x| < 0.25
    let p = poly(e, x, &[1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0]);
    let small = e.b.ins().fmul(p, x);
    let ax = e.b.ins().fabs(x);
    let lim = e.vf(0.25);
    e.fsel(FloatCC::LessThan, ax, lim, small, big)
}

/// Gauss error function: Maclaurin series for `|x| < 0.75`, else
/// `1 - erfc` with Abramowitz-Stegun 7.1.26's rational form (|err| < 1.5e-7).
pub(crate) fn erf(e: &mut Emit<'_>, x: Value) -> Value {
    let ax = e.b.ins().fabs(x);
    // Series: 2/sqrt(pi) * x * (1 - x^2/3 + x^4/10 - x^6/42 + x^8/216 - x^10/1320 + x^12/9360)
    let z = e.b.ins().fmul(x, x);
    let p = poly(e, z, &C::SERIES);
    let c = e.vf(std::f32::consts::FRAC_2_SQRT_PI);
    let p = e.b.ins().fmul(p, c);
    let small = e.b.ins().fmul(p, x);
    // A&S 7.1.26 on |x|.
    let pc = e.vf(C::T);
    let t = e.b.ins().fmul(ax, pc);
    let one = e.vf(1.0);
    let t = e.b.ins().fadd(t, one);
    let t = e.b.ins().fdiv(one, t);
    let q = poly(e, t, &C::AS);
    let q = e.b.ins().fmul(q, t);
    let nz = e.b.ins().fneg(z);
    let ez = exp(e, nz);
    let q = e.b.ins().fmul(q, ez);
    let big = e.b.ins().fsub(one, q);
    let sign_mask = e.vi(i32::MIN);
    let xi = e.as_int(x);
    let s = e.b.ins().band(xi, sign_mask);
    let bi = e.as_int(big);
    let bi = e.b.ins().bor(bi, s);
    let big = e.as_float(bi);
    let lim = e.vf(C::SMALL);
    let r = e.fsel(FloatCC::LessThan, ax, lim, small, big);
    e.fsel(FloatCC::Unordered, x, x, x, r)
}

/// Sine (`cos = false`) or cosine (`cos = true`): Cody-Waite reduction by
/// pi/2 in three parts, then the quadrant's polynomial. Accurate for
/// `|x|` up to about 1e5.
pub(crate) fn sincos(e: &mut Emit<'_>, x: Value, cos: bool) -> Value {
    use cranelift_codegen::ir::types::{F32X4, I32X4};
    let two_pi_inv = e.vf(std::f32::consts::FRAC_2_PI);
    let t = e.b.ins().fmul(x, two_pi_inv);
    let q = e.b.ins().nearest(t);
    let d1 = e.vf(1.570_312_5);
    let d2 = e.vf(4.837_513e-4);
    let d3 = e.vf(7.549_79e-8);
    let a = e.b.ins().fmul(q, d1);
    let r = e.b.ins().fsub(x, a);
    let a = e.b.ins().fmul(q, d2);
    let r = e.b.ins().fsub(r, a);
    let a = e.b.ins().fmul(q, d3);
    let r = e.b.ins().fsub(r, a);
    let z = e.b.ins().fmul(r, r);
    let ps = poly(e, z, &[-1.951_529_6e-4, 8.332_161e-3, -1.666_665_5e-1]);
    let ps = e.b.ins().fmul(ps, z);
    let ps = e.b.ins().fmul(ps, r);
    let s = e.b.ins().fadd(ps, r);
    let pc = poly(e, z, &[2.443_315_7e-5, -1.388_731_6e-3, 4.166_664_6e-2]);
    let pc = e.b.ins().fmul(pc, z);
    let pc = e.b.ins().fmul(pc, z);
    let h = e.vf(0.5);
    let hz = e.b.ins().fmul(z, h);
    let one = e.vf(1.0);
    let c = e.b.ins().fsub(one, hz);
    let c = e.b.ins().fadd(c, pc);
    let mut qi = e.b.ins().fcvt_to_sint_sat(I32X4, q);
    if cos {
        let one_i = e.vi(1);
        qi = e.b.ins().iadd(qi, one_i);
    }
    let one_i = e.vi(1);
    let two_i = e.vi(2);
    let zero_i = e.vi(0);
    let odd = e.b.ins().band(qi, one_i);
    let odd = e.b.ins().icmp(
        cranelift_codegen::ir::condcodes::IntCC::NotEqual,
        odd,
        zero_i,
    );
    let v = e.msel(odd, c, s);
    let neg = e.b.ins().band(qi, two_i);
    let neg = e.b.ins().icmp(
        cranelift_codegen::ir::condcodes::IntCC::NotEqual,
        neg,
        zero_i,
    );
    let nv = e.b.ins().fneg(v);
    let r = e.msel(neg, nv, v);
    let _ = F32X4;
    // inf and NaN give NaN.
    let ax = e.b.ins().fabs(x);
    let inf = e.vf(f32::INFINITY);
    let nan = e.vf(f32::NAN);
    e.fsel(FloatCC::Equal, ax, inf, nan, r)
}

/// `a^b` lane-wise with C `powf` special cases for the common ones:
/// `x^0 = 1`, negative bases with integral exponents keep their sign,
/// negative bases with fractional exponents give NaN, `0^b` is 0 for
/// `b > 0` and inf for `b < 0`.
pub(crate) fn pow(e: &mut Emit<'_>, a: Value, b: Value) -> Value {
    let aa = e.b.ins().fabs(a);
    let l = log(e, aa);
    let t = e.b.ins().fmul(l, b);
    let mag = exp(e, t);
    let bf = e.b.ins().floor(b);
    let zero = e.vf(0.0);
    let is_int = e.b.ins().fcmp(FloatCC::Equal, bf, b);
    let half = e.vf(0.5);
    let hb = e.b.ins().fmul(b, half);
    let hbf = e.b.ins().floor(hb);
    let even = e.b.ins().fcmp(FloatCC::Equal, hbf, hb);
    let neg = e.b.ins().fneg(mag);
    let odd_int = e.b.ins().band_not(is_int, even);
    let signed = e.msel(odd_int, neg, mag);
    let nan = e.vf(f32::NAN);
    let neg_val = e.msel(is_int, signed, nan);
    let r = e.fsel(FloatCC::LessThan, a, zero, neg_val, mag);
    // a == 0: exp(b * -inf) already gives 0 (b > 0) or inf (b < 0); fix the
    // sign of odd integral powers of -0 via `signed` above. b == 0 -> 1.
    let one = e.vf(1.0);
    let r = e.fsel(FloatCC::Equal, b, zero, one, r);
    // a == 1 -> 1 even for NaN b (C semantics).
    e.fsel(FloatCC::Equal, a, one, one, r)
}
