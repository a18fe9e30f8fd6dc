//! Native helpers with a C ABI that generated code calls. Only tuned inner
//! kernels live here (the GEMM micro-kernel); loops, packing and epilogues
//! around them are generated. The code generator registers
//! [`symbols`] with its JIT linker.

/// `C = alpha * op(A) * op(B) + beta * C` in f32, for `A: m x k`,
/// `B: k x n`, `C: m x n`, each addressed by a row stride (`*_rs`) and a
/// column stride (`*_cs`) in elements, so transposes are just swapped
/// strides. With `beta == 0` the old `C` is not read (it may be garbage).
///
/// Wraps `matrixmultiply`'s f32 kernel (see ARCHITECTURE.md, "CPU backend",
/// for the measured choice), single-threaded.
///
/// # Safety
/// The pointers must address matrices of the given sizes and strides; `C`
/// must not overlap `A` or `B`.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: *const f32,
    a_rs: isize,
    a_cs: isize,
    b: *const f32,
    b_rs: isize,
    b_cs: isize,
    c: *mut f32,
    c_rs: isize,
    c_cs: isize,
    alpha: f32,
    beta: f32,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // With k = 0 the product is empty: only scale C, never reading it
        // when beta == 0.
        for i in 0..m as isize {
            for j in 0..n as isize {
                let p = c.offset(i * c_rs + j * c_cs);
                *p = if beta == 0.0 { 0.0 } else { beta * *p };
            }
        }
        return;
    }
    // matrixmultiply: C = alpha A B + beta C, C not read when beta == 0.
    matrixmultiply::sgemm(
        m, k, n, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, c_rs, c_cs,
    );
}

/// Name and address of every native helper, for the JIT's symbol table.
pub fn symbols() -> Vec<(&'static str, *const u8)> {
    vec![("dnnc_sgemm", dnnc_sgemm as *const u8)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgemm_matches_naive_with_transposes_and_beta() {
        let (m, n, k) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.5 - 2.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 1.0).collect();
        let mut c = vec![1.0f32; m * n];
        // A stored transposed (k x m): row stride 1, column stride m.
        let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
        unsafe {
            dnnc_sgemm(
                m,
                n,
                k,
                at.as_ptr(),
                1,
                m as isize,
                b.as_ptr(),
                n as isize,
                1,
                c.as_mut_ptr(),
                n as isize,
                1,
                2.0,
                0.5,
            );
        }
        for i in 0..m {
            for j in 0..n {
                let s: f32 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
                assert!((c[i * n + j] - (2.0 * s + 0.5)).abs() < 1e-4);
            }
        }
    }
}
