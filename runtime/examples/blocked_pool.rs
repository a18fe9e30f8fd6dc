//! A 3x3 max pool two ways on the same data: the channel-blocked kernel
//! (`dnnc_pool_nchw8c`, one call for every `[H][W][8]` block plane) and
//! the plain AVX-512 kernel (`dnnc_max_pool_3x3s1` or `..s2`, one call per
//! channel plane), data in cache. Prints the medians of 41 runs (each the
//! mean of 20 calls) and checks that the two agree.
//!
//! `cargo run --release -p dnnc-runtime --example blocked_pool -- C H W [STRIDE]`
//! (C a multiple of 8; padding 1 at stride 1, none at stride 2, as
//! GoogLeNet's pools; the plain kernel needs AVX-512).

use dnnc_runtime::cpu::blocked_pool::{dnnc_pool_nchw8c, PoolGeom};
use dnnc_runtime::cpu::maxpool::{dnnc_max_pool_3x3s1, dnnc_max_pool_3x3s2};
use std::time::Instant;

fn median(mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..41)
        .map(|_| {
            let s = Instant::now();
            for _ in 0..20 {
                f();
            }
            s.elapsed().as_secs_f64() / 20.0 * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let a: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("C H W [STRIDE] as integers"))
        .collect();
    let (c, h, w, s) = match a[..] {
        [c, h, w] => (c, h, w, 1),
        [c, h, w, s] => (c, h, w, s),
        _ => {
            eprintln!("usage: blocked_pool C H W [STRIDE]");
            std::process::exit(2);
        }
    };
    assert!(
        c % 8 == 0 && (s == 1 || s == 2),
        "C a multiple of 8, stride 1 or 2"
    );
    let pad = if s == 1 { 1 } else { 0 };
    // Ceil mode at stride 2, as GoogLeNet's pools.
    let out = |n: usize| (n + 2 * pad - 3).div_ceil(s) + 1;
    let (oh, ow) = (out(h), out(w));
    let plain: Vec<f32> = (0..c * h * w)
        .map(|i| ((i * 37) % 101) as f32 * 0.01)
        .collect();
    // The same tensor blocked: [C/8][H][W][8].
    let mut blocked = vec![0f32; plain.len()];
    for ch in 0..c {
        for p in 0..h * w {
            blocked[((ch / 8) * h * w + p) * 8 + ch % 8] = plain[ch * h * w + p];
        }
    }
    let g = PoolGeom {
        h: h as i64,
        w: w as i64,
        oh: oh as i64,
        ow: ow as i64,
        kh: 3,
        kw: 3,
        sh: s as i64,
        sw: s as i64,
        dh: 1,
        dw: 1,
        pt: pad as i64,
        pl: pad as i64,
        pb: pad as i64,
        pr: pad as i64,
        avg: 0,
        include_pad: 0,
    };
    let mut yb = vec![0f32; c * oh * ow];
    let mut yp = vec![0f32; c * oh * ow];
    let tb = median(|| unsafe {
        assert_eq!(
            dnnc_pool_nchw8c(&g, blocked.as_ptr(), yb.as_mut_ptr(), 0, (c / 8) as i64),
            0
        );
    });
    let plain_call = if s == 1 {
        dnnc_max_pool_3x3s1
    } else {
        dnnc_max_pool_3x3s2
    };
    let pads = (pad | (pad << 16)) as i64;
    let mut refused = false;
    let tp = median(|| {
        for ch in 0..c {
            let rc = unsafe {
                plain_call(
                    plain.as_ptr().add(ch * h * w),
                    yp.as_mut_ptr().add(ch * oh * ow),
                    h as i64,
                    w as i64,
                    ow as i64,
                    pads,
                    0,
                    oh as i64,
                )
            };
            refused |= rc != 0;
        }
    });
    for ch in 0..c {
        for p in 0..oh * ow {
            let b = yb[((ch / 8) * oh * ow + p) * 8 + ch % 8];
            assert!(
                refused || b == yp[ch * oh * ow + p],
                "channel {ch} pixel {p}"
            );
        }
    }
    println!("{c}x{h}x{w} stride {s}: blocked {tb:.1} us");
    if refused {
        println!("the plain kernel does not run here (it needs AVX-512)");
    } else {
        println!("plain {tp:.1} us, blocked/plain {:.2}", tb / tp);
    }
}
