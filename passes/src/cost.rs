//! The calibrated cost model: a convolution kernel's time on this machine
//! predicted from its Work-Depth work and the bytes it moves,
//!
//! `t = overhead + max(W_algo / rate_algo + O · out_algo, bytes / bandwidth)`,
//!
//! where `W_algo` is the survey's work for the algorithm (Appendix C, in
//! [`crate::wd::conv`]), `rate_algo` the work units per second this
//! machine's code for that algorithm sustains, `O` the output elements
//! and `out_algo` what each costs to store through the fused epilogue
//! (GEMM-based algorithms only), `bytes` the input, filter and output
//! traffic. The rates come from measurement (`dnnc
//! calibrate`); [`MachineProfile::default`] is the built-in profile of
//! this CPU's [`MachineClass`].

use crate::wd::conv::ConvShape;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The per-machine constants of the cost model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineProfile {
    /// What was measured (free text).
    pub machine: String,
    /// Threads the rates were measured with.
    pub threads: usize,
    /// Work units per second, by algorithm (`direct`, `im2col`,
    /// `pointwise`, `depthwise`, `winograd2`, `winograd4`, `fft`).
    pub rates: BTreeMap<String, f64>,
    /// Seconds a kernel of each algorithm costs besides its work (calls,
    /// transforms' setup, hand-offs), by algorithm; `overhead` where
    /// missing.
    #[serde(default)]
    pub fixed: BTreeMap<String, f64>,
    /// Seconds per output element a GEMM-based kernel (`im2col`,
    /// `pointwise`) costs besides its multiply-adds: its micro-kernel's
    /// C tiles stored through the fused epilogue, which a short reduction
    /// (a 1x1 conv over 16 channels) does not amortise. Without it the
    /// fitted rate is a blend: the zoo's 1x1 convs were predicted 0.72x
    /// their measured time over 16 input channels and 1.35x over 512.
    /// By algorithm ([`OUTPUT_TERM_ALGOS`]); none where missing.
    #[serde(default)]
    pub per_output: BTreeMap<String, f64>,
    /// Work-Depth units per second of the generated loops that are not
    /// convolutions, by kernel class (`reduction`: pools, reductions,
    /// normalisations; `elementwise`: a standalone elementwise chain;
    /// `movement`: copies), measured by `dnnc calibrate`; a class
    /// without an entry runs at [`LOOP_RATE`].
    #[serde(default)]
    pub class_rates: BTreeMap<String, f64>,
    /// Bytes per second a kernel streams from outside its core's caches:
    /// one core's read stream from memory, which `dnnc calibrate`
    /// measures (a batch-1 fully-connected layer is priced by it).
    pub bandwidth: f64,
    /// Seconds every kernel costs besides its work (call, hand-off).
    pub overhead: f64,
    /// Seconds each extra share adds when a kernel splits across threads
    /// whose workers poll for work: the hand-off itself plus the spread in
    /// the shares' finishing times and the data they fetch from another
    /// core, as [`MachineProfile::split_time`] charges it. `dnnc
    /// calibrate` measures it on a machine with two or more CPUs; older
    /// profiles without it read [`DEFAULT_HANDOFF`].
    #[serde(default = "default_handoff")]
    pub handoff: f64,
    /// Seconds each kernel beyond the first adds when a wave of
    /// independent kernels runs concurrently, one thread each, over the
    /// makespan of their one-thread times: the hand-off plus what the
    /// kernels after the wave pay to read results another core wrote.
    /// Measured by `dnnc calibrate` with [`MachineProfile::handoff`];
    /// older profiles read [`DEFAULT_HANDOFF`].
    #[serde(default = "default_handoff")]
    pub wave_handoff: f64,
    /// The model's typical relative error, median |predicted − measured|
    /// / measured over the calibration kernels (`dnnc calibrate` sets
    /// it): the partition runs independent kernels concurrently only when
    /// that promises a larger gain than this. Older profiles read
    /// [`DEFAULT_ERROR`].
    #[serde(default = "default_error")]
    pub error: f64,
}

/// The relative error a profile without one assumes: the median the
/// built-in profile measured on its calibration kernels (~15%).
pub const DEFAULT_ERROR: f64 = 0.15;

fn default_error() -> f64 {
    DEFAULT_ERROR
}

/// The hand-off cost a profile without one assumes (seconds): what the
/// runtime's own rule budgets for a hot worker (`dnnc_runtime::cpu`
/// schedule docs).
pub const DEFAULT_HANDOFF: f64 = 2e-6;

fn default_handoff() -> f64 {
    DEFAULT_HANDOFF
}

/// Why a profile could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Not JSON of the expected shape.
    #[error("machine profile {origin}: {message}")]
    Malformed {
        /// The file (or `built-in`).
        origin: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A rate, the bandwidth or the overhead is not usable.
    #[error("machine profile {origin}: {field} must be {want}, found {found}")]
    BadValue {
        /// The file.
        origin: String,
        /// The field.
        field: String,
        /// What it must be.
        want: &'static str,
        /// What it is.
        found: f64,
    },
}

/// A machine class with a built-in profile: the rates differ between
/// classes in ratio, not only in scale (pointwise against depthwise convs
/// 4.5x on the Xeon, 1.3x on the EPYC, whose FMA units are 128 bits
/// wide, so wide-vector GEMMs gain less over the generated loops), so one
/// class's profile misjudges the other's algorithm choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MachineClass {
    /// A 2-core AVX-512 Xeon VM, where dnnc was first tuned.
    XeonAvx512,
    /// A 2-core AMD EPYC Zen 1 (or Zen 2) VM with AVX2+FMA and no
    /// AVX-512, whose FMA units are 128 bits wide; also the class of
    /// every other core without AVX-512 that is not a Zen 3.
    EpycAvx2,
    /// A 2-core AMD EPYC (Zen 4) VM with AVX-512, whose 512-bit FMAs are
    /// two 256-bit halves: its kernels' rates are neither the Xeon's nor
    /// Zen 1's (with the Xeon's profile, `dnnc tune` on the zoo read a
    /// median prediction error of 37%; with its own, 6%). Its split and
    /// wave hand-offs are the Xeon's: three calibrations minutes apart
    /// measured 3.7-6.4 and 1.8-8.3 µs (the host stalls the second vCPU
    /// for milliseconds), and at 4.9 µs ShuffleNet-V2 split 10 kernels
    /// instead of 36 and ran 1.04-1.96x slower at two threads (8
    /// alternating pairs).
    EpycAvx512,
    /// A 2-core AMD EPYC Zen 3 VM: AVX2+FMA on full 256-bit units (about
    /// 100 GFLOP/s a core), the machine class of `../shared/bench`'s
    /// onnxruntime baseline. Its kernels run 2.2-2.4x Zen 1's rates: with
    /// Zen 1's profile `dnnc tune` on the zoo read a median prediction
    /// error of 130%, with its own 8%.
    EpycZen3,
}

impl MachineClass {
    /// Every class, for listings and tests.
    pub const ALL: [MachineClass; 4] = [
        MachineClass::XeonAvx512,
        MachineClass::EpycAvx2,
        MachineClass::EpycAvx512,
        MachineClass::EpycZen3,
    ];

    /// The class whose profile fits this CPU best: AVX-512 cores run the
    /// AVX-512 kernels (AMD's at the Zen 4 profile's rates, others at the
    /// Xeon's), AMD's family 25 without AVX-512 (a Zen 3, or a Zen 4
    /// capped by `DNNC_CPU_ISA`: both 256-bit FMA units) the AVX2 kernels
    /// at the Zen 3 profile's rates, every other core (AVX2,
    /// or no x86 at all, or AVX-512 capped by `DNNC_CPU_ISA`) the
    /// narrower ones the EPYC AVX2 profile measured.
    pub fn detect() -> MachineClass {
        if dnnc_ir::isa::cpu_isa() != dnnc_ir::isa::CpuIsa::Avx512 {
            if amd() && cpu_family() == ZEN3_FAMILY {
                MachineClass::EpycZen3
            } else {
                MachineClass::EpycAvx2
            }
        } else if amd() {
            MachineClass::EpycAvx512
        } else {
            MachineClass::XeonAvx512
        }
    }

    /// The name a profile's origin and the CLI's notes give the class.
    pub fn name(self) -> &'static str {
        match self {
            MachineClass::XeonAvx512 => "xeon-avx512",
            MachineClass::EpycAvx2 => "epyc-avx2",
            MachineClass::EpycAvx512 => "epyc-avx512",
            MachineClass::EpycZen3 => "epyc-zen3",
        }
    }

    /// The class's profile as `dnnc calibrate` wrote it (checked in as
    /// JSON, so it reads like the profiles users write).
    fn json(self) -> &'static str {
        match self {
            MachineClass::XeonAvx512 => include_str!("../profiles/xeon-avx512.json"),
            MachineClass::EpycAvx2 => include_str!("../profiles/epyc-avx2.json"),
            MachineClass::EpycAvx512 => include_str!("../profiles/epyc-avx512.json"),
            MachineClass::EpycZen3 => include_str!("../profiles/epyc-zen3.json"),
        }
    }
}

/// AMD's CPU family of Zen 3 and Zen 4 (Zen 1 and 2 are 23, Zen 5 26);
/// only Zen 4 of the two has AVX-512.
const ZEN3_FAMILY: u32 = 25;

/// The CPU's display family (CPUID leaf 1: the base family, plus the
/// extended family when the base is 15); 0 off x86-64.
fn cpu_family() -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: CPUID leaf 1 exists on every x86-64 CPU.
        #[allow(unused_unsafe)]
        let eax = unsafe { std::arch::x86_64::__cpuid(1) }.eax;
        let base = (eax >> 8) & 0xf;
        if base == 0xf {
            base + ((eax >> 20) & 0xff)
        } else {
            base
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// Whether the CPU's vendor string (CPUID leaf 0) is AMD's.
fn amd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: CPUID leaf 0 exists on every x86-64 CPU.
        #[allow(unused_unsafe)]
        let r = unsafe { std::arch::x86_64::__cpuid(0) };
        let mut vendor = [0u8; 12];
        for (i, w) in [r.ebx, r.edx, r.ecx].into_iter().enumerate() {
            vendor[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        &vendor == b"AuthenticAMD"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl MachineProfile {
    /// The built-in profile of `class`.
    pub fn builtin(class: MachineClass) -> Self {
        let origin = format!("built-in {}", class.name());
        MachineProfile::from_json(class.json(), &origin).expect("the built-in profiles parse")
    }
}

/// The built-in profile of this CPU's class ([`MachineClass::detect`]):
/// what every cost-model decision uses when no profile is given.
impl Default for MachineProfile {
    fn default() -> Self {
        MachineProfile::builtin(MachineClass::detect())
    }
}

/// Work units per second of a generated non-GEMM loop when the profile
/// has no rate for its class: ~2-3 elements or taps per ns, as the
/// runtime's split rule assumes (`dnnc_runtime::cpu` schedule docs).
pub const LOOP_RATE: f64 = 2.5e9;

/// The kernel classes a profile may give a loop rate.
pub const CLASSES: [&str; 3] = ["reduction", "elementwise", "movement"];

/// The profile key of a kernel class, for the classes with loop rates.
pub fn class_key(class: dnnc_ir::OpClass) -> Option<&'static str> {
    match class {
        dnnc_ir::OpClass::Reduction => Some("reduction"),
        dnnc_ir::OpClass::Elementwise => Some("elementwise"),
        dnnc_ir::OpClass::DataMovement => Some("movement"),
        _ => None,
    }
}

/// The algorithms whose kernels the profile may charge per output element
/// ([`MachineProfile::per_output`]): those ending in the packed GEMM.
pub const OUTPUT_TERM_ALGOS: [&str; 2] = ["im2col", "pointwise"];

/// Every algorithm name a profile may rate.
pub const ALGOS: [&str; 7] = [
    "direct",
    "im2col",
    "pointwise",
    "depthwise",
    "winograd2",
    "winograd4",
    "fft",
];

impl MachineProfile {
    /// Reads a profile from JSON; `origin` names it in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<Self, ProfileError> {
        let p: MachineProfile =
            serde_json::from_str(text).map_err(|e| ProfileError::Malformed {
                origin: origin.to_string(),
                message: e.to_string(),
            })?;
        let bad = |field: String, want, found| ProfileError::BadValue {
            origin: origin.to_string(),
            field,
            want,
            found,
        };
        // (field, its entries, the names it may hold, what a name is,
        // whether zero is allowed: rates must be positive, costs >= 0)
        type RateMap<'a> = (
            &'a str,
            &'a BTreeMap<String, f64>,
            &'a [&'a str],
            &'a str,
            bool,
        );
        let maps: [RateMap; 3] = [
            ("rates", &p.rates, &ALGOS, "algorithm", false),
            (
                "class_rates",
                &p.class_rates,
                &CLASSES,
                "kernel class",
                false,
            ),
            (
                "per_output",
                &p.per_output,
                &OUTPUT_TERM_ALGOS,
                "algorithm",
                true,
            ),
        ];
        for (field, map, known, what, zero) in maps {
            for (k, &r) in map {
                if !known.contains(&k.as_str()) {
                    return Err(ProfileError::Malformed {
                        origin: origin.to_string(),
                        message: format!(
                            "unknown {what} `{k}` in {field}; known: {}",
                            known.join(", ")
                        ),
                    });
                }
                let (ok, want) = if zero {
                    (r >= 0.0, "a number of seconds >= 0")
                } else {
                    (r > 0.0, "a positive number")
                };
                if !(r.is_finite() && ok) {
                    return Err(bad(format!("{field}.{k}"), want, r));
                }
            }
        }
        if !(p.bandwidth.is_finite() && p.bandwidth > 0.0) {
            return Err(bad("bandwidth".into(), "a positive number", p.bandwidth));
        }
        if !(p.overhead.is_finite() && p.overhead >= 0.0) {
            return Err(bad(
                "overhead".into(),
                "a number of seconds >= 0",
                p.overhead,
            ));
        }
        for (field, v) in [("handoff", p.handoff), ("wave_handoff", p.wave_handoff)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(bad(field.into(), "a number of seconds >= 0", v));
            }
        }
        if !(p.error.is_finite() && (0.0..1.0).contains(&p.error)) {
            return Err(bad("error".into(), "a fraction in [0, 1)", p.error));
        }
        if p.threads == 0 {
            return Err(bad("threads".into(), "at least 1", 0.0));
        }
        Ok(p)
    }

    /// The profile as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("profiles serialise") + "\n"
    }

    /// Work units per second of a generated loop of `class` (its measured
    /// rate, or [`LOOP_RATE`]).
    pub fn loop_rate(&self, class: dnnc_ir::OpClass) -> f64 {
        class_key(class)
            .and_then(|k| self.class_rates.get(k).copied())
            .unwrap_or(LOOP_RATE)
    }

    /// Predicted seconds of a kernel split into `q` shares, from its
    /// one-thread prediction: `serial` seconds that do not split (its
    /// call, unsplit parts), `parallel` seconds over the shares, and
    /// [`MachineProfile::handoff`] per share beyond the first — Brent's
    /// bound `W / q + D` with the depth term priced by measurement. With
    /// `units > 0` the parallel part is that many whole units (a kernel's
    /// output planes, row bands, ...): at most `units` shares, the
    /// slowest doing `ceil(units / q)` of them; with 0 it divides evenly
    /// (a GEMM's slices). The partition of a compiled model picks, per
    /// kernel, the `q` of least predicted time.
    pub fn split_time(&self, serial: f64, parallel: f64, q: usize, units: usize) -> f64 {
        let q = q.max(1);
        let (q, share) = if units == 0 {
            (q, 1.0 / q as f64)
        } else {
            let q = q.min(units);
            (q, units.div_ceil(q) as f64 / units as f64)
        };
        serial + parallel * share + self.handoff * (q - 1) as f64
    }

    /// Predicted seconds of one convolution kernel computed with `algo`,
    /// or `None` when the algorithm does not apply to `shape` (or the
    /// profile has no rate for it).
    ///
    /// im2col on a conv that is its own column matrix (1x1, stride 1, no
    /// padding) is priced at no less than the pointwise kernel plus the
    /// copy of its input into columns, which is what it runs: fitted on
    /// different layers, the two rates alone put im2col within 1% of
    /// pointwise on GoogLeNet's 1x1 convs on Zen 3, where it measured
    /// 10-15% slower.
    pub fn predict_conv(&self, algo: &str, shape: &ConvShape) -> Option<f64> {
        let own = self.predict_alone(algo, shape)?;
        if algo != "im2col" || !is_own_column_matrix(shape) {
            return Some(own);
        }
        let copy = (shape.n * shape.c_in * shape.h * shape.w) as f64
            / self.loop_rate(dnnc_ir::OpClass::DataMovement);
        Some(match self.predict_alone("pointwise", shape) {
            Some(pointwise) => own.max(pointwise + copy),
            None => own,
        })
    }

    /// [`MachineProfile::predict_conv`] from `algo`'s own figures alone.
    fn predict_alone(&self, algo: &str, shape: &ConvShape) -> Option<f64> {
        let algo = lowered(algo, shape);
        let work = conv_work(algo, shape)? as f64;
        let rate = *self.rates.get(algo)?;
        let fixed = self.conv_fixed(algo, shape);
        let stores = self.per_output.get(algo).copied().unwrap_or(0.0) * outputs(shape);
        Some(fixed + (work / rate + stores).max(conv_bytes(algo, shape) / self.bandwidth))
    }

    /// The part of [`MachineProfile::predict_conv`] that does not grow
    /// with the conv's size: its algorithm's fixed cost (calls,
    /// transforms' setup).
    pub fn conv_fixed(&self, algo: &str, shape: &ConvShape) -> f64 {
        let algo = lowered(algo, shape);
        self.fixed.get(algo).copied().unwrap_or(self.overhead)
    }
}

/// The transposed store of one `32 x 14` lanes-layout tile, in MACs of
/// micro-kernel time: ~128 vector-FMA issue slots of 16 MACs each, as the
/// CPU backend's packed GEMM measured it on hot GEMMs (its
/// `LANE_STORE_COST`).
pub const LANE_TILE_STORE_MACS: u64 = 128 * 16;

/// Rows of C per `lanes` tile (output channels as two 16-lane vectors)
/// and columns per tile.
const LANE_TILE: (u64, u64) = (32, 14);

/// Rows of C per `panels` panel (the AVX-512 `14 x 32` micro-kernel).
const PANEL_ROWS: u64 = 14;

/// How much micro-kernel work a GEMM-based conv (`im2col`, `pointwise`)
/// does with its packed filter in `layout`, relative to `panels` (the
/// layout the rates were measured with, and what `auto` is priced as):
/// `panels` pads output channels to whole 14-row panels (pairs of rows
/// in the last) and pixels to whole 16-wide column tiles
/// ([`GEMM_COLUMN_TILE`]); `lanes` pads output channels to 32 and pays
/// [`LANE_TILE_STORE_MACS`] per `32 x 14` tile, but no pixel padding. A
/// 7x7 map's 49 pixels fill 64 lanes of panels, so wide 1x1 convs on it
/// do ~25% less work in lanes. `None` for other algorithms.
pub fn layout_factor(layout: dnnc_ir::op::WeightLayout, algo: &str, s: &ConvShape) -> Option<f64> {
    use dnnc_ir::op::WeightLayout;
    if !matches!(algo, "im2col" | "pointwise") {
        return None;
    }
    let (m, k) = (s.cout_per_group(), s.cin_per_group() * s.kh * s.kw);
    let n = s.h_out * s.w_out;
    let panel_rows = m / PANEL_ROWS * PANEL_ROWS + (m % PANEL_ROWS).next_multiple_of(2);
    let panels = (panel_rows * n.next_multiple_of(GEMM_COLUMN_TILE) * k) as f64;
    if panels == 0.0 {
        return None;
    }
    Some(match layout {
        WeightLayout::Auto | WeightLayout::Panels => 1.0,
        WeightLayout::Lanes => {
            let (tr, tc) = LANE_TILE;
            let tiles = m.div_ceil(tr) * n.div_ceil(tc);
            let lanes =
                (m.next_multiple_of(tr) * n * k) as f64 + (tiles * LANE_TILE_STORE_MACS) as f64;
            lanes / panels
        }
    })
}

/// The algorithm whose figures price `algo` on `shape`: the direct
/// lowering of a depthwise conv is the depthwise kernel.
fn lowered<'a>(algo: &'a str, shape: &ConvShape) -> &'a str {
    if algo == "direct" && is_depthwise(shape) {
        "depthwise"
    } else {
        algo
    }
}

/// Columns the packed GEMM's micro-kernel computes at once (the AVX-512
/// kernels' 16-wide B panels): a GEMM with fewer pays for them all.
pub const GEMM_COLUMN_TILE: u64 = 16;

/// The run-time Work-Depth work of `algo` on `shape` (`None` when it
/// does not apply): the survey's direct count for the direct and
/// depthwise loops, its im2col count for im2col and pointwise (a 1x1 conv
/// is its own column matrix), and Winograd F(2x2), F(4x4) and FFT without
/// the filter transforms, which dnnc does once when the model is compiled
/// (with them, the 512-channel 7x7 layers' Winograd work is 2-3x what
/// runs); Winograd's frequency GEMMs count whole column tiles of
/// [`GEMM_COLUMN_TILE`] (without that, F(4x4) on 7x7 maps was predicted
/// 20% faster than F(2x2) and measured 2x slower).
pub fn conv_work(algo: &str, shape: &ConvShape) -> Option<u64> {
    let s = shape;
    let (ci, co) = (s.cin_per_group(), s.cout_per_group());
    Some(match algo {
        "direct" | "depthwise" => s.direct().work,
        "im2col" | "pointwise" => s.im2col().work,
        "winograd2" | "winograd4" => {
            let m = if algo == "winograd2" { 2 } else { 4 };
            let all = s.winograd(m).ok()?.work;
            let a = m + s.kh - 1;
            let filter = co * ci * crate::wd::conv::transform_work(s.kh, a) * s.group;
            // The per-frequency GEMMs have one column per tile, and the
            // packed GEMM computes whole column tiles (a 7x7 map's 4
            // F(4x4) tiles cost a full tile of 16) plus, where a batch's
            // images share their GEMMs, the gaps between images.
            let tiles = s.n * s.h_out.div_ceil(m) * s.w_out.div_ceil(m);
            let idle = winograd_gemm_columns(s, m as usize) - tiles;
            let waste = a * a * co * ci * idle * s.group;
            all.saturating_sub(filter).saturating_add(waste)
        }
        "fft" => {
            let all = s.fft().ok()?.work;
            let (ph, pw) = s.padded();
            let hw = (ph * pw) as f64;
            let spectra =
                crate::wd::conv::FFT_C * hw * hw.log2().max(0.0) * (co * ci * s.group) as f64;
            all.saturating_sub(spectra.round() as u64)
        }
        _ => return None,
    })
}

/// Whether the CPU backend runs Winograd F(m x m)'s frequency GEMMs once
/// over every image of the batch rather than image by image: where
/// streaming the transformed filter `U` once per image costs more than
/// taking every image's transformed input and products (V, M) through
/// memory, `(N - 1) |U| > 2 N (|V| + |M|)` per image, for an ungrouped
/// conv. At batch 8 ResNet-50's 7x7 F(4x4) convs streamed their 37.7 MB
/// `U` once per image (15 ms a conv, 3.8 shared). The code generator
/// asks this, so the cost model prices what runs.
pub fn winograd_shares_gemms(s: &ConvShape, m: usize) -> bool {
    if s.group != 1 || s.n < 2 {
        return false;
    }
    let a2 = ((m as u64) + s.kh - 1).pow(2);
    let tiles = s.h_out.div_ceil(m as u64) * s.w_out.div_ceil(m as u64);
    let u = a2 * s.c_out * s.c_in;
    let vm = a2 * (s.c_in + s.c_out) * tiles;
    (s.n - 1) * u > 2 * s.n * vm
}

/// Columns of V and M per image in the CPU backend's Winograd layout:
/// the tiles plus the overhang of the last tile row's group of four
/// (a row's tiles go four to a vector).
pub fn winograd_image_columns(s: &ConvShape, m: usize) -> u64 {
    let (th, tw) = (s.h_out.div_ceil(m as u64), s.w_out.div_ceil(m as u64));
    tile_rows_columns(th, tw)
}

/// Columns `rows` tile rows of `tw` tiles take in V and M: the tiles plus
/// the overhang of the last row's group of four, in whole groups.
fn tile_rows_columns(rows: u64, tw: u64) -> u64 {
    (rows * tw + tw.next_multiple_of(4) - tw).next_multiple_of(4)
}

/// Bytes of transformed input and products (V and M) of one image above
/// which a Winograd conv runs in bands ([`winograd_bands`]): the smaller
/// L2 of the machine classes (Zen 4's 1 MiB).
pub const WINOGRAD_BAND_BYTES: u64 = 1024 * 1024;

/// Fewest tiles a band's frequency GEMMs get: about one of the packed
/// GEMM's 16-column tiles (SqueezeNet's 55x55 F(4x4) convs, 14 tiles a
/// row, ran fastest one tile row a band: 0.32 ms at one thread against
/// 0.33 in 3-row bands and 0.35 unbanded).
pub const WINOGRAD_BAND_MIN_TILES: u64 = 14;

/// Bands of tile rows per image of Winograd F(m x m) on `s` as the CPU
/// backend runs it image by image (1: the image is one band). A band runs
/// the input transform, the frequency GEMMs and the output transform of
/// its tile rows in turn, so its V and M stay in the core's L2, and the
/// bands are the units the kernel splits across threads, each core
/// reading only what it wrote. SqueezeNet's 16 -> 64 3x3 convs on 55x55
/// hold 2.3 MB of V and M in F(4x4), more than an L2, and split three
/// ways by phase (input channels, frequencies, output channels) between
/// two threads each core read half of V and M from the other's cache.
///
/// Banded where the image's V and M exceed [`WINOGRAD_BAND_BYTES`] and
/// the transformed filter `U`, which every band streams, is at most a
/// quarter of them (SqueezeNet's 32 -> 128 convs on 27x27, U 0.6 MB
/// against 1.2 MB, ran slower in bands); never where the batch shares its
/// GEMMs ([`winograd_shares_gemms`]). A band holds at least as many
/// bytes of V and M as `U` has (ResNet-18's 64 -> 64 convs on 56x56,
/// U 0.6 MB: 4 bands 0.69-0.75 ms, 14 bands 0.72-0.82, unbanded
/// 0.76-0.90 at one thread) and at least [`WINOGRAD_BAND_MIN_TILES`]
/// tiles. The count is even, so two threads get equal halves of the
/// image ([`winograd_band_span`]).
pub fn winograd_bands(s: &ConvShape, m: usize) -> u64 {
    let m = m as u64;
    let (th, tw) = (s.h_out.div_ceil(m), s.w_out.div_ceil(m));
    if winograd_shares_gemms(s, m as usize) || th < 2 || tw == 0 {
        return 1;
    }
    let a2 = (m + s.kh - 1).pow(2);
    let (cg, mg) = (s.cin_per_group(), s.cout_per_group());
    let row = a2 * (cg + mg) * tw * 4;
    let u = a2 * cg * mg * 4;
    if row * th <= WINOGRAD_BAND_BYTES || 4 * u > row * th {
        return 1;
    }
    let rows = u
        .div_ceil(row)
        .max(WINOGRAD_BAND_MIN_TILES.div_ceil(tw))
        .max(1);
    let nb = th / rows;
    (nb - nb % 2).max(1)
}

/// Tile rows `[r0, r1)` of band `b` of `nb` over `th` tile rows: as
/// equal as whole rows allow, so consecutive halves of the bands hold
/// halves of the rows.
pub fn winograd_band_span(th: u64, nb: u64, b: u64) -> (u64, u64) {
    (b * th / nb, (b + 1) * th / nb)
}

/// Columns of V and M per band ([`winograd_bands`]) in the CPU backend's
/// Winograd layout: the largest band's tiles plus the overhang of its
/// last tile row's group of four. One band's are
/// [`winograd_image_columns`].
pub fn winograd_band_columns(s: &ConvShape, m: usize) -> u64 {
    let (th, tw) = (s.h_out.div_ceil(m as u64), s.w_out.div_ceil(m as u64));
    tile_rows_columns(th.div_ceil(winograd_bands(s, m)), tw)
}

/// Columns the frequency GEMMs of Winograd F(m x m) compute per
/// frequency and group over the whole batch, whole column tiles of
/// [`GEMM_COLUMN_TILE`]: one GEMM over every image's tiles (packed without
/// gaps) where [`winograd_shares_gemms`], else one per band of each
/// image ([`winograd_bands`]).
pub fn winograd_gemm_columns(s: &ConvShape, m: usize) -> u64 {
    let (th, tw) = (s.h_out.div_ceil(m as u64), s.w_out.div_ceil(m as u64));
    if winograd_shares_gemms(s, m) {
        return (s.n * th * tw).next_multiple_of(GEMM_COLUMN_TILE);
    }
    let nb = winograd_bands(s, m);
    let band = |b| {
        let (r0, r1) = winograd_band_span(th, nb, b);
        ((r1 - r0) * tw).next_multiple_of(GEMM_COLUMN_TILE)
    };
    s.n * (0..nb).map(band).sum::<u64>()
}

/// Output elements of a convolution (all images and channels).
pub fn outputs(s: &ConvShape) -> f64 {
    (s.n * s.c_out * s.h_out * s.w_out) as f64
}

/// Whether a conv's input already is its GEMM operand (1x1, stride 1,
/// unpadded): the pointwise kernel's convs.
pub fn is_own_column_matrix(s: &ConvShape) -> bool {
    s.kh == 1 && s.kw == 1 && s.strides == [1, 1] && s.pads == [0; 4]
}

/// One input and one output channel per group.
pub fn is_depthwise(s: &ConvShape) -> bool {
    s.group > 1 && s.group == s.c_in && s.group == s.c_out
}

/// Bytes a convolution computed with `algo` moves at least: input,
/// filter, output (f32), and for im2col its column matrix written and
/// read back.
pub fn conv_bytes(algo: &str, s: &ConvShape) -> f64 {
    let input = s.n * s.c_in * s.h * s.w;
    let filter = s.c_out * (s.c_in / s.group.max(1)) * s.kh * s.kw;
    let output = s.n * s.c_out * s.h_out * s.w_out;
    let columns = if algo == "im2col" {
        2 * s.n * s.c_in * s.kh * s.kw * s.h_out * s.w_out
    } else {
        0
    };
    4.0 * (input + filter + output + columns) as f64
}

/// Fits a profile to measured kernel times `(algorithm, shape,
/// seconds)`: per algorithm, the fixed cost `c` and rate `F` of `t = c +
/// W / F` that minimise the squared *relative* error over its samples (a
/// 2 x 2 linear least-squares problem in `c` and `1/F`); where that gives
/// a negative `c` or rate (too few or too alike samples), `c` is the
/// profile's overhead and `F` the median of `W / (t - c)`. For the
/// [`OUTPUT_TERM_ALGOS`] the fit also has the per-output cost `s` of `t
/// = c + W / F + O s` (3 x 3, in `c`, `1/F` and `s`) when that solves
/// with all three non-negative; else `s` is dropped. Algorithms without
/// samples keep `base`'s figures.
pub fn fit(base: &MachineProfile, samples: &[(String, ConvShape, f64)]) -> MachineProfile {
    let mut by_algo: BTreeMap<&str, Vec<(f64, f64, f64)>> = BTreeMap::new();
    for (algo, shape, t) in samples {
        let algo = if algo == "direct" && is_depthwise(shape) {
            "depthwise"
        } else {
            algo
        };
        let Some(w) = conv_work(algo, shape) else {
            continue;
        };
        if *t > 0.0 {
            by_algo
                .entry(algo)
                .or_default()
                .push((w as f64, outputs(shape), *t));
        }
    }
    let mut p = base.clone();
    for (algo, s) in by_algo {
        if OUTPUT_TERM_ALGOS.contains(&algo) {
            let rows: Vec<([f64; 3], f64)> = s.iter().map(|&(w, o, t)| ([1.0, w, o], t)).collect();
            match relative_fit(&rows) {
                Some([c, x, y]) if c >= 0.0 && x > 0.0 && y >= 0.0 => {
                    p.rates.insert(algo.to_string(), 1.0 / x);
                    p.fixed.insert(algo.to_string(), c);
                    p.per_output.insert(algo.to_string(), y);
                    continue;
                }
                _ => {
                    p.per_output.remove(algo);
                }
            }
        }
        let rows: Vec<([f64; 2], f64)> = s.iter().map(|&(w, _, t)| ([1.0, w], t)).collect();
        let (c, rate) = match relative_fit(&rows) {
            Some([c, x]) if c >= 0.0 && x > 0.0 => (c, 1.0 / x),
            _ => {
                let c = base.overhead;
                let mut r: Vec<f64> = s
                    .iter()
                    .map(|&(w, _, t)| w / (t - c).max(t * 0.1))
                    .collect();
                r.sort_by(|a, b| a.total_cmp(b));
                (c, r[r.len() / 2])
            }
        };
        p.rates.insert(algo.to_string(), rate);
        p.fixed.insert(algo.to_string(), c);
    }
    p
}

/// The coefficients `x` of `t ≈ x · f`, one sample `(f, t)` per row, that
/// minimise the squared relative error `Σ (x · f / t − 1)²`: the normal
/// equations of the rows `f / t` against 1, each column scaled to mean
/// magnitude 1 (work runs to 1e9 where a constant term is 1), solved by
/// Gaussian elimination with partial pivoting. `None` with no more
/// samples than coefficients, a column that is all zero, or a system too
/// close to singular (samples too alike to separate the terms).
fn relative_fit<const N: usize>(rows: &[([f64; N], f64)]) -> Option<[f64; N]> {
    if rows.len() <= N {
        return None;
    }
    let mut scale = [0.0f64; N];
    for (f, _) in rows {
        for (s, v) in scale.iter_mut().zip(f) {
            *s += v.abs() / rows.len() as f64;
        }
    }
    if scale.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
        return None;
    }
    let mut a = [[0.0f64; N]; N];
    let mut b = [0.0f64; N];
    for (f, t) in rows {
        let r: [f64; N] = std::array::from_fn(|j| f[j] / scale[j] / t);
        for i in 0..N {
            b[i] += r[i];
            for j in 0..N {
                a[i][j] += r[i] * r[j];
            }
        }
    }
    let tol = 1e-9 * (0..N).map(|i| a[i][i]).fold(0.0, f64::max);
    for col in 0..N {
        let piv = (col..N).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        let pivot = a[piv][col].abs();
        if pivot.is_nan() || !tol.is_finite() || pivot <= tol {
            return None;
        }
        a.swap(col, piv);
        b.swap(col, piv);
        let (pivot_row, pivot_b) = (a[col], b[col]);
        for (r, br) in a.iter_mut().zip(b.iter_mut()).skip(col + 1) {
            let m = r[col] / pivot_row[col];
            for (v, p) in r.iter_mut().zip(&pivot_row).skip(col) {
                *v -= m * p;
            }
            *br -= m * pivot_b;
        }
    }
    let mut x = [0.0f64; N];
    for i in (0..N).rev() {
        let rest: f64 = (i + 1..N).map(|j| a[i][j] * x[j]).sum();
        x[i] = (b[i] - rest) / a[i][i];
    }
    Some(std::array::from_fn(|j| x[j] / scale[j]))
}

/// The loop rate of each kernel class from measured kernels `(class,
/// Work-Depth work, seconds)`: the median over its samples of `W / (t −
/// overhead)` (at least a tenth of `t` left for the loop), so one
/// outlier cannot pull it. Classes without samples get no entry.
pub fn fit_loops(
    base: &MachineProfile,
    samples: &[(dnnc_ir::OpClass, u64, f64)],
) -> BTreeMap<String, f64> {
    let mut by: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for &(class, w, t) in samples {
        if let (Some(k), true) = (class_key(class), t > 0.0 && w > 0) {
            let loop_t = (t - base.overhead).max(t * 0.1);
            by.entry(k).or_default().push(w as f64 / loop_t);
        }
    }
    by.into_iter()
        .map(|(k, mut r)| {
            r.sort_by(|a, b| a.total_cmp(b));
            (k.to_string(), r[r.len() / 2])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1x1 conv of `c` to `m` channels on an `hw x hw` map.
    fn pointwise_shape(c: u64, m: u64, hw: u64) -> ConvShape {
        ConvShape {
            n: 1,
            c_in: c,
            h: hw,
            w: hw,
            c_out: m,
            kh: 1,
            kw: 1,
            h_out: hw,
            w_out: hw,
            strides: [1, 1],
            dilations: [1, 1],
            pads: [0; 4],
            group: 1,
        }
    }

    /// A 3x3 same-padded conv of `c -> m` channels on `hw x hw` maps at
    /// batch `n`.
    fn three_by_three(n: u64, c: u64, m: u64, hw: u64) -> ConvShape {
        ConvShape {
            n,
            kh: 3,
            kw: 3,
            pads: [1; 4],
            ..pointwise_shape(c, m, hw)
        }
    }

    /// im2col on a 1x1 conv runs the pointwise GEMM after copying its
    /// input into columns, so no profile prices it below that; other
    /// convs keep im2col's own figures.
    #[test]
    fn im2col_on_a_1x1_conv_costs_the_pointwise_gemm_and_a_copy() {
        for class in MachineClass::ALL {
            let p = MachineProfile::builtin(class);
            for s in [pointwise_shape(192, 96, 28), pointwise_shape(832, 128, 7)] {
                let copy =
                    (s.c_in * s.h * s.w) as f64 / p.loop_rate(dnnc_ir::OpClass::DataMovement);
                let im2col = p.predict_conv("im2col", &s).unwrap();
                let pointwise = p.predict_conv("pointwise", &s).unwrap();
                assert!(im2col >= pointwise + copy, "{class:?} {s:?}");
                assert!(im2col >= p.predict_alone("im2col", &s).unwrap());
            }
            let s = three_by_three(1, 64, 64, 28);
            assert_eq!(p.predict_conv("im2col", &s), p.predict_alone("im2col", &s));
            let strided = ConvShape {
                strides: [2, 2],
                h_out: 14,
                w_out: 14,
                ..pointwise_shape(256, 128, 28)
            };
            assert!(!is_own_column_matrix(&strided));
        }
    }

    /// Which Winograd batches share their frequency GEMMs, and the columns
    /// each layout computes: ResNet-50's 512-channel 7x7 convs at batch
    /// 8 share (one GEMM over 8 x 4 F(4x4) tiles: 32 columns, against 8
    /// per-image GEMMs of 16 before), its 64-channel 56x56 ones do not,
    /// nor does any batch of one or grouped conv.
    #[test]
    fn winograd_batches_share_their_gemms_where_the_filter_outweighs_them() {
        let l4 = three_by_three(8, 512, 512, 7);
        assert!(winograd_shares_gemms(&l4, 4) && winograd_shares_gemms(&l4, 2));
        assert_eq!(winograd_gemm_columns(&l4, 4), 32);
        assert_eq!(winograd_gemm_columns(&l4, 2), 128);
        let l1 = three_by_three(8, 64, 64, 56);
        assert!(!winograd_shares_gemms(&l1, 4));
        // Per image, in four bands of 3, 4, 3 and 4 rows of 14 tiles.
        assert_eq!(winograd_bands(&l1, 4), 4);
        assert_eq!(winograd_gemm_columns(&l1, 4), 8 * (48 + 64 + 48 + 64));
        assert!(!winograd_shares_gemms(&three_by_three(1, 512, 512, 7), 4));
        let grouped = ConvShape {
            group: 2,
            ..l4.clone()
        };
        assert!(!winograd_shares_gemms(&grouped, 4));
        // One image's columns: 7x7 in F(4x4) is 2 x 2 tiles, a row of 2
        // overhanging to 4.
        assert_eq!(winograd_image_columns(&l4, 4), 8);
    }

    /// Which Winograd convs run in bands of tile rows, and how many:
    /// SqueezeNet's 16 -> 64 on 55x55 (V and M 2.3 MB in F(4x4), U 147
    /// KB) one tile row a band; ResNet-18's 64 -> 64 on 56x56 (U 590 KB)
    /// bands of at least U's bytes; not where U outweighs a quarter of V
    /// and M (SqueezeNet's 32 -> 128 on 27x27), where V and M fit one
    /// band, or where the batch shares its GEMMs. Counts are even and the
    /// spans cover the tile rows in order.
    #[test]
    fn winograd_bands_of_tile_rows_where_v_and_m_outgrow_the_l2() {
        let fire3 = three_by_three(1, 16, 64, 55);
        assert_eq!(winograd_bands(&fire3, 4), 14);
        assert_eq!(winograd_band_columns(&fire3, 4), 16);
        assert_eq!(winograd_gemm_columns(&fire3, 4), 14 * 16);
        assert_eq!(winograd_bands(&three_by_three(1, 64, 64, 56), 4), 4);
        assert_eq!(winograd_bands(&three_by_three(1, 32, 128, 27), 4), 1);
        assert_eq!(winograd_bands(&three_by_three(1, 256, 256, 14), 4), 1);
        assert_eq!(winograd_bands(&three_by_three(8, 512, 512, 7), 4), 1);
        for (th, nb) in [(14, 14), (14, 4), (13, 12), (25, 24), (16, 8)] {
            let spans: Vec<_> = (0..nb).map(|b| winograd_band_span(th, nb, b)).collect();
            assert_eq!(spans[0].0, 0);
            assert_eq!(spans[nb as usize - 1].1, th);
            assert!(spans
                .windows(2)
                .all(|w| w[0].1 == w[1].0 && w[0].0 < w[0].1));
            // Two threads split the bands in halves of the rows.
            let half = spans[nb as usize / 2].0;
            assert!(half.abs_diff(th - half) <= 1, "{th} rows in {nb} bands");
        }
    }

    #[test]
    fn every_built_in_profile_rates_every_algorithm() {
        for class in MachineClass::ALL {
            let p = MachineProfile::builtin(class);
            for a in ALGOS {
                assert!(p.rates.get(a).is_some_and(|&r| r > 0.0), "{class:?} {a}");
            }
            let back = MachineProfile::from_json(&p.to_json(), "round trip").unwrap();
            assert_eq!(back, p);
        }
    }

    /// The default is the profile of the class this CPU belongs to, and
    /// the classes' profiles order the algorithms differently (which is
    /// why there is one per class): the Xeon's 1x1 GEMM is over 3x its
    /// depthwise loop, Zen 1's under 2x, Zen 4's in between; Zen 3's
    /// rates are over twice Zen 1's.
    #[test]
    fn the_default_profile_is_this_cpus_class() {
        let class = MachineClass::detect();
        let avx512 = dnnc_ir::isa::cpu_isa() == dnnc_ir::isa::CpuIsa::Avx512;
        let zen3 = !avx512 && amd() && cpu_family() == ZEN3_FAMILY;
        let expected = match (avx512, amd()) {
            (true, true) => MachineClass::EpycAvx512,
            (true, false) => MachineClass::XeonAvx512,
            _ if zen3 => MachineClass::EpycZen3,
            _ => MachineClass::EpycAvx2,
        };
        assert_eq!(class, expected);
        assert_eq!(MachineProfile::default(), MachineProfile::builtin(class));
        let lead = |c| {
            let p = MachineProfile::builtin(c);
            p.rates["pointwise"] / p.rates["depthwise"]
        };
        assert!(lead(MachineClass::XeonAvx512) > 3.0);
        assert!(lead(MachineClass::EpycAvx2) < 2.0);
        let zen4 = lead(MachineClass::EpycAvx512);
        assert!(zen4 > 2.0 && zen4 < 3.0, "{zen4}");
        let pointwise = |c| MachineProfile::builtin(c).rates["pointwise"];
        assert!(pointwise(MachineClass::EpycZen3) > 2.0 * pointwise(MachineClass::EpycAvx2));
        let names: std::collections::HashSet<_> =
            MachineClass::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), MachineClass::ALL.len());
    }

    #[test]
    fn malformed_profiles_name_the_problem() {
        let e = MachineProfile::from_json("{\"machine\": 3", "p.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("machine profile p.json:") && e.contains("line 1"),
            "{e}"
        );
        let mut p = MachineProfile::default();
        p.rates.insert("im2col".into(), -1.0);
        let e = MachineProfile::from_json(&p.to_json(), "p.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rates.im2col must be a positive number, found -1"),
            "{e}"
        );
        let text = MachineProfile::default()
            .to_json()
            .replace("\"direct\"", "\"magic\"");
        let e = MachineProfile::from_json(&text, "p.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown algorithm `magic`"), "{e}");
        let text = MachineProfile::default()
            .to_json()
            .replace("\"bandwidth\"", "\"bandwith\"");
        let e = MachineProfile::from_json(&text, "p.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bandwidth"), "{e}");
        for (field, v, want) in [
            ("handoff", -1e-6, "handoff must be a number of seconds >= 0"),
            (
                "wave_handoff",
                -0.5,
                "wave_handoff must be a number of seconds >= 0",
            ),
            ("error", 1.5, "error must be a fraction in [0, 1)"),
        ] {
            let mut j: serde_json::Value =
                serde_json::from_str(&MachineProfile::default().to_json()).unwrap();
            j[field] = serde_json::json!(v);
            let e = MachineProfile::from_json(&j.to_string(), "p.json")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{field}: {e}");
        }
    }

    #[test]
    fn per_output_costs_are_checked() {
        for (key, v, want) in [
            (
                "depthwise",
                1e-10,
                "unknown algorithm `depthwise` in per_output",
            ),
            (
                "pointwise",
                -1e-10,
                "per_output.pointwise must be a number of seconds >= 0",
            ),
        ] {
            let mut j: serde_json::Value =
                serde_json::from_str(&MachineProfile::default().to_json()).unwrap();
            j["per_output"][key] = serde_json::json!(v);
            let e = MachineProfile::from_json(&j.to_string(), "p.json")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{key}: {e}");
        }
        // A profile without the field charges no per-output cost.
        let mut j: serde_json::Value =
            serde_json::from_str(&MachineProfile::default().to_json()).unwrap();
        j.as_object_mut().unwrap().remove("per_output");
        let p = MachineProfile::from_json(&j.to_string(), "old.json").unwrap();
        assert!(p.per_output.is_empty());
    }

    /// 1x1 convs of several reductions timed as `t = c + W / F + O s`
    /// exactly: the fit gives back `c`, `F` and `s`, and the prediction
    /// matches every sample; the two-term fit of another algorithm on the
    /// same times charges nothing per output.
    #[test]
    fn the_fit_separates_the_per_output_cost_from_the_rate() {
        let (c, f, so) = (4e-6, 80e9, 1e-10);
        let shape = pointwise_shape;
        let shapes = [
            shape(16, 64, 56),
            shape(64, 256, 56),
            shape(128, 256, 14),
            shape(576, 96, 14),
            shape(960, 160, 7),
            shape(32, 128, 27),
        ];
        let time =
            |s: &ConvShape| c + conv_work("pointwise", s).unwrap() as f64 / f + outputs(s) * so;
        let mut samples: Vec<(String, ConvShape, f64)> = shapes
            .iter()
            .map(|s| ("pointwise".to_string(), s.clone(), time(s)))
            .collect();
        samples.extend(
            shapes
                .iter()
                .map(|s| ("depthwise".to_string(), s.clone(), time(s))),
        );
        let p = fit(&MachineProfile::default(), &samples);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs();
        assert!(close(p.fixed["pointwise"], c), "{:?}", p.fixed);
        assert!(close(p.rates["pointwise"], f), "{:?}", p.rates);
        assert!(close(p.per_output["pointwise"], so), "{:?}", p.per_output);
        for s in &shapes {
            let t = p.predict_conv("pointwise", s).unwrap();
            assert!(close(t, time(s)), "{t} vs {}", time(s));
        }
        assert!(!p.per_output.contains_key("depthwise"));
    }

    #[test]
    fn profiles_without_the_partition_figures_read_the_defaults() {
        let mut j: serde_json::Value =
            serde_json::from_str(&MachineProfile::default().to_json()).unwrap();
        for f in ["handoff", "wave_handoff", "error"] {
            j.as_object_mut().unwrap().remove(f);
        }
        let p = MachineProfile::from_json(&j.to_string(), "old.json").unwrap();
        assert_eq!(
            (p.handoff, p.wave_handoff, p.error),
            (DEFAULT_HANDOFF, DEFAULT_HANDOFF, DEFAULT_ERROR)
        );
    }

    #[test]
    fn lanes_pay_where_pixels_pad_panels_tiles() {
        use dnnc_ir::op::WeightLayout::{Auto, Lanes, Panels};
        let shape = pointwise_shape;
        // 7x7: 49 pixels pad to 64 in panels; lanes pad nothing.
        let small = shape(384, 64, 7);
        let f = layout_factor(Lanes, "pointwise", &small).unwrap();
        assert!((0.7..0.85).contains(&f), "{f}");
        assert_eq!(layout_factor(Panels, "pointwise", &small), Some(1.0));
        assert_eq!(layout_factor(Auto, "im2col", &small), Some(1.0));
        // 56x56 = 3136 pixels, a multiple of 16: lanes only add stores.
        let big = shape(64, 64, 56);
        assert!(layout_factor(Lanes, "pointwise", &big).unwrap() > 1.0);
        // Other algorithms have no packed filter.
        assert_eq!(layout_factor(Lanes, "winograd4", &small), None);
    }

    #[test]
    fn split_time_divides_whole_units_and_charges_each_extra_share() {
        let p = MachineProfile {
            handoff: 1.0,
            ..Default::default()
        };
        // 10 s over 4 shares evenly: 2.5 + 3 hand-offs, after 1 s serial.
        assert_eq!(p.split_time(1.0, 10.0, 4, 0), 1.0 + 2.5 + 3.0);
        // 5 units on 4 shares: the slowest does 2 of them (4 s).
        assert_eq!(p.split_time(0.0, 10.0, 4, 5), 4.0 + 3.0);
        // More shares than units: only 2 shares run.
        assert_eq!(p.split_time(0.0, 10.0, 8, 2), 5.0 + 1.0);
        assert_eq!(p.split_time(0.5, 10.0, 1, 7), 10.5);
    }

    #[test]
    fn loop_rates_are_checked_and_fitted() {
        let p = MachineProfile::default();
        for c in CLASSES {
            assert!(p.class_rates.get(c).is_some_and(|&r| r > 0.0), "{c}");
        }
        assert_eq!(
            p.loop_rate(dnnc_ir::OpClass::View),
            LOOP_RATE,
            "a class without a rate runs at LOOP_RATE"
        );
        let text = p.to_json().replace("\"movement\"", "\"copies\"");
        let e = MachineProfile::from_json(&text, "p.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown kernel class `copies`"), "{e}");
        let mut q = p.clone();
        q.class_rates.insert("reduction".into(), 0.0);
        let e = MachineProfile::from_json(&q.to_json(), "p.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("class_rates.reduction must be a positive number"),
            "{e}"
        );
        // Three pools at 4 units/ns after the overhead, one outlier at 40:
        // the median keeps 4.
        let o = p.overhead;
        let w = 1_000_000u64;
        let t = |rate: f64| o + w as f64 / rate;
        let r = dnnc_ir::OpClass::Reduction;
        let fitted = fit_loops(
            &p,
            &[
                (r, w, t(4e9)),
                (r, w, t(4e9)),
                (r, w, t(40e9)),
                (r, w, t(4e9)),
            ],
        );
        assert!((fitted["reduction"] / 4e9 - 1.0).abs() < 1e-9, "{fitted:?}");
        assert!(!fitted.contains_key("elementwise"));
    }

    #[test]
    fn fitting_recovers_a_rate() {
        let shape = ConvShape {
            n: 1,
            c_in: 64,
            c_out: 64,
            h: 28,
            w: 28,
            h_out: 28,
            w_out: 28,
            kh: 3,
            kw: 3,
            strides: [1, 1],
            dilations: [1, 1],
            pads: [1, 1, 1, 1],
            group: 1,
        };
        // Three sizes of one shape family with t = 20 µs + W / 5e10.
        let base = MachineProfile::default();
        let samples: Vec<(String, ConvShape, f64)> = [14u64, 28, 56]
            .into_iter()
            .map(|h| {
                let s = ConvShape {
                    h,
                    w: h,
                    h_out: h,
                    w_out: h,
                    ..shape.clone()
                };
                let w = conv_work("im2col", &s).unwrap() as f64;
                ("im2col".to_string(), s, 20e-6 + w / 5e10)
            })
            .collect();
        let p = fit(&base, &samples);
        assert!(
            (p.rates["im2col"] / 5e10 - 1.0).abs() < 1e-6,
            "{}",
            p.rates["im2col"]
        );
        assert!(
            (p.fixed["im2col"] / 20e-6 - 1.0).abs() < 1e-6,
            "{}",
            p.fixed["im2col"]
        );
        for (a, s, t) in &samples {
            let pred = p.predict_conv(a, s).unwrap();
            assert!((pred / t - 1.0).abs() < 1e-6, "{pred} vs {t}");
        }
    }
}
