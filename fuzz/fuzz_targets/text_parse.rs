//! Arbitrary UTF-8 into the text-format parser: it must return a graph or
//! a located error, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(src) = std::str::from_utf8(data) {
        let _ = dnnc_ir::text::parse(src, "fuzz.dnn");
    }
});
