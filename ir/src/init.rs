//! Parameter initializers: how a `param` gets data when no weights file binds it.
//!
//! Seeded initializers use a self-contained SplitMix64 generator so a model
//! description produces bit-identical weights on every machine and every
//! version of dnnc, independent of any RNG crate's stream stability.

use crate::attr::fmt_f32;
use crate::types::TensorType;
use ndarray::ArrayD;
use std::fmt;

/// How a parameter's data is produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Init {
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
    /// Every element equal to the value.
    Constant(f32),
    /// Uniform in `[low, high)`.
    Uniform {
        /// Lower bound (inclusive).
        low: f32,
        /// Upper bound (exclusive).
        high: f32,
        /// Generator seed.
        seed: u64,
    },
    /// Normal with the given mean and standard deviation.
    Normal {
        /// Mean.
        mean: f32,
        /// Standard deviation.
        std: f32,
        /// Generator seed.
        seed: u64,
    },
    /// Glorot/Xavier uniform: `U(-b, b)`, `b = sqrt(6 / (fan_in + fan_out))`.
    Xavier {
        /// Generator seed.
        seed: u64,
    },
    /// He/Kaiming normal: `N(0, sqrt(2 / fan_in))`.
    He {
        /// Generator seed.
        seed: u64,
    },
    /// No data of its own: the tensor of this name must come from a weights
    /// (safetensors) file.
    External(String),
}

impl Init {
    /// Whether this initializer needs a weights file.
    pub fn is_external(&self) -> bool {
        matches!(self, Init::External(_))
    }

    /// Produces the data for a parameter of type `ty`. `None` for
    /// [`Init::External`], which has no data of its own.
    pub fn materialize(&self, ty: &TensorType) -> Option<ArrayD<f32>> {
        let shape = ty.shape.clone();
        let n = ty.numel();
        let (fan_in, fan_out) = fans(&ty.shape);
        let data: Vec<f32> = match *self {
            Init::Zeros => vec![0.0; n],
            Init::Ones => vec![1.0; n],
            Init::Constant(v) => vec![v; n],
            Init::Uniform { low, high, seed } => {
                generate(n, seed, 1, |r| low + (high - low) * r.next_unit())
            }
            Init::Normal { mean, std, seed } => {
                generate(n, seed, 2, |r| mean + std * r.next_normal())
            }
            Init::Xavier { seed } => {
                let b = (6.0 / (fan_in + fan_out).max(1) as f64).sqrt() as f32;
                generate(n, seed, 1, |r| -b + 2.0 * b * r.next_unit())
            }
            Init::He { seed } => {
                let s = (2.0 / fan_in.max(1) as f64).sqrt() as f32;
                generate(n, seed, 2, |r| s * r.next_normal())
            }
            Init::External(_) => return None,
        };
        Some(ArrayD::from_shape_vec(shape, data).expect("init data matches its shape"))
    }
}

/// Elements per thread below which [`generate`] stays on one thread.
const GENERATE_CHUNK: usize = 1 << 16;

/// `n` values of `f`, each drawing `calls` numbers from one SplitMix64
/// stream started at `seed`, in order. Large tensors are generated in
/// chunks on several threads, each chunk's generator jumped to its first
/// draw ([`SplitMix64::at`]), so the values are exactly the sequential
/// ones: ResNet-50's seeded weights (25M normals, each a logarithm and a
/// cosine) took ~2.5 s on one thread.
fn generate(
    n: usize,
    seed: u64,
    calls: u64,
    f: impl Fn(&mut SplitMix64) -> f32 + Sync,
) -> Vec<f32> {
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    let chunks = n.div_ceil(GENERATE_CHUNK).min(threads).max(1);
    let mut out = vec![0f32; n];
    if chunks == 1 {
        let mut r = SplitMix64::new(seed);
        out.iter_mut().for_each(|v| *v = f(&mut r));
        return out;
    }
    let per = n.div_ceil(chunks);
    std::thread::scope(|sc| {
        for (i, part) in out.chunks_mut(per).enumerate() {
            let f = &f;
            sc.spawn(move || {
                let mut r = SplitMix64::at(seed, (i * per) as u64 * calls);
                part.iter_mut().for_each(|v| *v = f(&mut r));
            });
        }
    });
    out
}

/// Fan-in and fan-out by PyTorch's convention: dim 1 and dim 0 times the
/// receptive field (product of the remaining dims).
pub fn fans(shape: &[usize]) -> (usize, usize) {
    match shape.len() {
        0 => (1, 1),
        1 => (shape[0], shape[0]),
        _ => {
            let rf: usize = shape[2..].iter().product();
            (shape[1] * rf, shape[0] * rf)
        }
    }
}

impl fmt::Display for Init {
    /// The text-format spelling, e.g. `he(seed=3)` or `external("fc.weight")`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Init::Zeros => f.write_str("zeros"),
            Init::Ones => f.write_str("ones"),
            Init::Constant(v) => write!(f, "constant(value={})", fmt_f32(*v)),
            Init::Uniform { low, high, seed } => {
                write!(
                    f,
                    "uniform(low={}, high={}, seed={seed})",
                    fmt_f32(*low),
                    fmt_f32(*high)
                )
            }
            Init::Normal { mean, std, seed } => {
                write!(
                    f,
                    "normal(mean={}, std={}, seed={seed})",
                    fmt_f32(*mean),
                    fmt_f32(*std)
                )
            }
            Init::Xavier { seed } => write!(f, "xavier(seed={seed})"),
            Init::He { seed } => write!(f, "he(seed={seed})"),
            Init::External(name) => write!(f, "external({})", quote(name)),
        }
    }
}

/// Quotes a string for the text format, escaping `"` and `\`.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// SplitMix64's state increment (the golden ratio in 64 bits).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64 (Steele, Lea & Flood 2014): tiny, fast, and fully specified,
/// so seeded weights never change between releases.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The generator from `seed` after `draws` calls of
    /// [`SplitMix64::next_u64`]: the state only advances by a constant per
    /// draw, so any position is one multiply away.
    pub fn at(seed: u64, draws: u64) -> Self {
        SplitMix64 {
            state: seed.wrapping_add(draws.wrapping_mul(GAMMA)),
        }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 24 bits of resolution (exact in f32).
    pub fn next_unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Standard normal by Box-Muller (one value per call).
    pub fn next_normal(&mut self) -> f32 {
        let u1 = ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64; // (0, 1]
        let u2 = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_init_is_deterministic_and_scaled() {
        let ty = TensorType::f32(vec![64, 32, 3, 3]);
        let a = Init::He { seed: 7 }.materialize(&ty).unwrap();
        let b = Init::He { seed: 7 }.materialize(&ty).unwrap();
        assert_eq!(a, b);
        let n = a.len() as f64;
        let var = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / n;
        let expected = 2.0 / (32.0 * 9.0);
        assert!(
            (var - expected).abs() / expected < 0.05,
            "var {var} vs {expected}"
        );
        let c = Init::He { seed: 8 }.materialize(&ty).unwrap();
        assert_ne!(a, c);
    }

    #[test]
    fn chunked_generation_equals_the_sequential_stream() {
        // Larger than one chunk, so it is generated on several threads
        // wherever more than one is available.
        let n = 2 * GENERATE_CHUNK + 12345;
        let ty = TensorType::f32(vec![n]);
        for init in [
            Init::He { seed: 3 },
            Init::Normal {
                mean: 0.5,
                std: 2.0,
                seed: 4,
            },
            Init::Uniform {
                low: -1.0,
                high: 3.0,
                seed: 5,
            },
        ] {
            let got = init.materialize(&ty).unwrap();
            let mut r = SplitMix64::new(match init {
                Init::He { seed } | Init::Normal { seed, .. } | Init::Uniform { seed, .. } => seed,
                _ => unreachable!(),
            });
            let s = (2.0 / n as f64).sqrt() as f32;
            let want: Vec<f32> = (0..n)
                .map(|_| match init {
                    Init::He { .. } => s * r.next_normal(),
                    Init::Normal { mean, std, .. } => mean + std * r.next_normal(),
                    Init::Uniform { low, high, .. } => low + (high - low) * r.next_unit(),
                    _ => unreachable!(),
                })
                .collect();
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{init}"
            );
        }
        let mut a = SplitMix64::new(9);
        for _ in 0..1000 {
            a.next_u64();
        }
        assert_eq!(a.next_u64(), SplitMix64::at(9, 1000).next_u64());
    }

    #[test]
    fn xavier_respects_bound() {
        let ty = TensorType::f32(vec![10, 20]);
        let a = Init::Xavier { seed: 1 }.materialize(&ty).unwrap();
        let b = (6.0f32 / 30.0).sqrt();
        assert!(a.iter().all(|&x| x >= -b && x < b));
    }

    #[test]
    fn external_has_no_data() {
        assert!(Init::External("w".into())
            .materialize(&TensorType::f32(vec![2]))
            .is_none());
    }
}
