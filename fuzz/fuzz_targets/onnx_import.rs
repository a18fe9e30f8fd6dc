//! Arbitrary bytes into the ONNX frontend: import must return `Ok` or an
//! error, never panic (libFuzzer's panic hook turns a panic, even one the
//! importer would catch, into a crash), and whatever imports must verify.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = dnnc_compiler::onnx::import_onnx(data, "fuzz.onnx") {
        if let Err(errs) = dnnc_ir::verify(&g) {
            panic!("imported graph does not verify: {errs:?}");
        }
    }
});
