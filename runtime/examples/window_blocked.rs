//! A dense window conv on channel-blocked activations
//! (`dnnc_conv_into_nchw8c` with a blocked input, the kernel of a 5x5,
//! 1x7 or strided 3x3 conv inside a blocked region): median of 15 runs
//! over a batch of `IMGS` images (default 8), in ms and GFLOP/s, with the
//! units of the call split over `SLICES` filter slices (default 1).
//! `GATHER=1`: the gathered conv instead (`dnnc_conv_gather_nchw8c`:
//! the columns of each piece of pixels copied into blocks, then the
//! pointwise conv's tiles), on the same data, to compare the two.
//! `GROUPED=1`: a grouped conv of eight channels in and out per group
//! (RegNet's; `CIN` = `COUT`). `PLAIN=1`: the input in NCHW, as a stem
//! feeding a blocked chain reads it (MobileNet-V2's: `3 224 224 32 3 3 2
//! 1 1`).
//!
//! `cargo run --release -p dnnc-runtime --example window_blocked -- CIN H W COUT KH KW STRIDE PAD_H PAD_W`
//! (channel counts multiples of 8, but a plain input's).

use dnnc_runtime::cpu::blocked::{
    dnnc_conv_gather_nchw8c, dnnc_conv_into_nchw8c, pack_filter, pack_grouped_filter, panel_count,
    IntoBlockedGeom,
};
use dnnc_runtime::cpu::group8::Group8Geom;
use std::time::Instant;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let dims: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .unwrap_or_default();
    let [c, h, w, m, kh, kw, s, ph, pw] = dims[..] else {
        eprintln!("usage: window_blocked CIN H W COUT KH KW STRIDE PAD_H PAD_W (integers)");
        std::process::exit(2);
    };
    let n = env("IMGS", 8);
    let (oh, ow) = ((h + 2 * ph - kh) / s + 1, (w + 2 * pw - kw) / s + 1);
    let geo = IntoBlockedGeom {
        conv: Group8Geom {
            c,
            h,
            w,
            oh,
            ow,
            kh,
            kw,
            sh: s,
            sw: s,
            pt: ph,
            pl: pw,
        },
        m,
        blocked_input: usize::from(env("PLAIN", 0) != 1),
        slices: env("SLICES", 1),
        n,
        groups: if env("GROUPED", 0) == 1 { c / 8 } else { 1 },
    };
    if let Some(why) = dnnc_runtime::cpu::blocked::into_unfit(&geo) {
        eprintln!("window_blocked: {why}");
        std::process::exit(2);
    }
    let taps = c / geo.groups * kh * kw;
    let wt: Vec<f32> = (0..m * taps)
        .map(|i| ((i * 7) % 13) as f32 * 0.01)
        .collect();
    let gather = env("GATHER", 0) == 1;
    if gather && geo.groups > 1 {
        eprintln!("window_blocked: GATHER=1 runs convs of one group only");
        std::process::exit(2);
    }
    let packed = if geo.groups > 1 {
        pack_grouped_filter(&wt, m, taps)
    } else {
        pack_filter(&wt, m, taps)
    };
    let x: Vec<f32> = (0..n * c * h * w)
        .map(|i| ((i * 5) % 11) as f32 * 0.1)
        .collect();
    let mut y = vec![0f32; n * m * oh * ow];
    let units = geo.slices * n * oh;
    let mut times = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        // SAFETY: the buffers have the geometry's sizes.
        let rc = unsafe {
            if gather {
                dnnc_conv_gather_nchw8c(
                    packed.as_ptr(),
                    x.as_ptr(),
                    y.as_mut_ptr(),
                    &geo,
                    0,
                    n * oh * ow,
                    0,
                    panel_count(m),
                    std::ptr::null(),
                )
            } else {
                dnnc_conv_into_nchw8c(
                    packed.as_ptr(),
                    x.as_ptr(),
                    y.as_mut_ptr(),
                    &geo,
                    0,
                    units,
                    std::ptr::null(),
                )
            }
        };
        assert_eq!(rc, 0);
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let med = times[times.len() / 2];
    let flops = 2.0 * (n * m * oh * ow * taps) as f64;
    println!(
        "{c}x{h}x{w} -> {m}x{oh}x{ow}, {kh}x{kw} stride {s}, batch {n}: {:.3} ms, {:.1} GFLOP/s",
        med * 1e3,
        flops / med / 1e9
    );
}
