//! The host CPU's vector instruction sets as dnnc may use them: what the
//! CPU has, capped by the `DNNC_CPU_ISA` environment variable.
//!
//! Every part of dnnc that picks code by instruction set (the runtime's
//! native kernels, the peak its profiles report against, the compiler's
//! Cranelift target and cost-model class) asks [`cpu_isa`], so one setting
//! makes a whole run behave as on a machine without AVX-512 — the way
//! oneDNN's `ONEDNN_MAX_CPU_ISA` does. That lets one machine test and
//! time the AVX2 paths a smaller machine would run. The cap only lowers:
//! `DNNC_CPU_ISA=avx512` on an AVX2 machine still runs AVX2.
//!
//! It lives in the IR crate because both the passes (cost model) and the
//! runtime (kernels) need the same answer and neither depends on the
//! other.

use std::sync::OnceLock;

/// The environment variable that caps [`cpu_isa`].
pub const ENV: &str = "DNNC_CPU_ISA";

/// A vector instruction-set level, ordered from narrowest to widest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CpuIsa {
    /// No AVX2+FMA (the portable kernels; non-x86 machines).
    Portable,
    /// AVX2 with FMA: 8-lane (256-bit) kernels.
    Avx2,
    /// AVX-512F: 16-lane (512-bit) kernels.
    Avx512,
}

impl CpuIsa {
    /// The name `DNNC_CPU_ISA` takes for this level.
    pub fn name(self) -> &'static str {
        match self {
            CpuIsa::Portable => "portable",
            CpuIsa::Avx2 => "avx2",
            CpuIsa::Avx512 => "avx512",
        }
    }

    /// Parses a `DNNC_CPU_ISA` value: `avx512`, `avx2` or `native` (no
    /// cap, `None`), case-insensitive. A lower level is not offered: the
    /// generated code needs FMA, and the portable kernels are tested on
    /// their own.
    pub fn parse_cap(s: &str) -> Result<Option<CpuIsa>, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "native" | "" => Ok(None),
            "avx512" => Ok(Some(CpuIsa::Avx512)),
            "avx2" => Ok(Some(CpuIsa::Avx2)),
            other => Err(format!(
                "{ENV}={other:?} is not an instruction-set level: use avx512, avx2 or native"
            )),
        }
    }
}

/// What the CPU itself supports (AVX-512 counts only with AVX2+FMA,
/// which every kernel that uses it also needs).
pub fn detected() -> CpuIsa {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
        if avx2 && std::is_x86_feature_detected!("avx512f") {
            return CpuIsa::Avx512;
        }
        if avx2 {
            return CpuIsa::Avx2;
        }
    }
    CpuIsa::Portable
}

/// The cap `DNNC_CPU_ISA` sets, checked: `Ok(None)` when it is unset or
/// `native`, an error naming the variable for any other value (the CLI
/// reports it before doing anything).
pub fn cap_from_env() -> Result<Option<CpuIsa>, String> {
    match std::env::var(ENV) {
        Ok(v) => CpuIsa::parse_cap(&v),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("{ENV} is not valid Unicode")),
    }
}

/// The level dnnc uses: [`detected`], lowered to the `DNNC_CPU_ISA` cap
/// (an invalid value is ignored here; [`cap_from_env`] reports it).
/// Decided once per process, so every kernel chosen in it agrees.
pub fn cpu_isa() -> CpuIsa {
    static ISA: OnceLock<CpuIsa> = OnceLock::new();
    *ISA.get_or_init(|| {
        let found = detected();
        match cap_from_env() {
            Ok(Some(cap)) => found.min(cap),
            _ => found,
        }
    })
}

/// Whether AVX-512VL may be used (8-lane EVEX instructions with 32
/// registers): AVX-512 is in use and the CPU has VL.
pub fn avx512_vl() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        cpu_isa() == CpuIsa::Avx512 && std::is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_parse_and_bad_values_name_the_variable() {
        assert_eq!(CpuIsa::parse_cap("AVX2"), Ok(Some(CpuIsa::Avx2)));
        assert_eq!(CpuIsa::parse_cap(" avx512 "), Ok(Some(CpuIsa::Avx512)));
        assert_eq!(CpuIsa::parse_cap("native"), Ok(None));
        let e = CpuIsa::parse_cap("sse9").unwrap_err();
        assert!(e.contains("DNNC_CPU_ISA") && e.contains("sse9"), "{e}");
        for l in [CpuIsa::Avx2, CpuIsa::Avx512] {
            assert_eq!(CpuIsa::parse_cap(l.name()), Ok(Some(l)));
        }
    }

    /// The level in use never exceeds what the CPU has.
    #[test]
    fn the_level_in_use_is_at_most_the_detected_one() {
        assert!(cpu_isa() <= detected());
        assert!(CpuIsa::Portable < CpuIsa::Avx2 && CpuIsa::Avx2 < CpuIsa::Avx512);
    }
}
