//! Bad input never panics: every case exits with code 2 and a message that
//! names the place (line:column, value, input or file) and the problem.

mod cli_common;

use cli_common::{dnnc, fails_with, Scratch};

const GOOD: &str = r#"graph tiny {
  input %x: f32[1,2,4,4]
  param %w: f32[3,2,3,3] = he(seed=1)
  param %b: f32[3] = zeros
  %c = Conv2d(%x, %w, %b) {pads=[1,1,1,1]}
  %r = Relu(%c)
  output %r
}
"#;

fn model_case(tag: &str, src: &str, needles: &[&str]) {
    let s = Scratch::new(tag);
    let m = s.file("m.dnn", src.as_bytes());
    fails_with(&dnnc(&[&"ir", &m]), needles);
    fails_with(&dnnc(&[&"run", &m]), needles);
}

fn with(line_from: &str, line_to: &str) -> String {
    assert!(GOOD.contains(line_from), "{line_from}");
    GOOD.replace(line_from, line_to)
}

#[test]
fn good_model_runs() {
    let s = Scratch::new("good");
    let m = s.file("m.dnn", GOOD.as_bytes());
    let out = dnnc(&[&"run", &m]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("%r: f32[1,3,4,4]"), "{stdout}");
}

#[test]
fn unknown_op() {
    model_case(
        "unknown-op",
        &with("Relu(%c)", "Frobnicate(%c)"),
        &["m.dnn:6:", "Frobnicate"],
    );
}

#[test]
fn wrong_arity() {
    model_case(
        "arity",
        &with("Relu(%c)", "Relu(%c, %c)"),
        &["m.dnn:6:", "input"],
    );
}

#[test]
fn shape_mismatch() {
    model_case(
        "shape",
        &with("%w: f32[3,2,3,3]", "%w: f32[3,5,3,3]"),
        &["m.dnn:5:", "channels"],
    );
}

#[test]
fn cycle() {
    model_case(
        "cycle",
        &with("%r = Relu(%c)", "%r = Relu(%q)\n  %q = Relu(%r)"),
        &["cycle"],
    );
}

#[test]
fn undefined_value() {
    model_case(
        "undef",
        &with("Relu(%c)", "Relu(%nope)"),
        &["m.dnn:6:", "nope"],
    );
}

#[test]
fn duplicate_name() {
    model_case(
        "dup",
        &with("%r = Relu(%c)", "%c = Relu(%c)"),
        &["m.dnn:6:", "%c"],
    );
}

#[test]
fn unknown_attribute() {
    model_case(
        "attr",
        &with("{pads=[1,1,1,1]}", "{padz=[1,1,1,1]}"),
        &["m.dnn:5:", "padz"],
    );
}

#[test]
fn bad_attribute_value() {
    model_case(
        "attr-val",
        &with("{pads=[1,1,1,1]}", "{pads=[1,1]}"),
        &["m.dnn:5:", "pads"],
    );
}

#[test]
fn bad_initializer() {
    model_case(
        "init",
        &with("he(seed=1)", "kaiming(seed=1)"),
        &["m.dnn:3:", "kaiming"],
    );
}

#[test]
fn bad_initializer_argument() {
    model_case(
        "init-arg",
        &with("he(seed=1)", "he(sead=1)"),
        &["m.dnn:3:", "sead"],
    );
}

#[test]
fn truncated_file() {
    let cut = &GOOD[..GOOD.find("output").unwrap()];
    model_case("truncated", cut, &["m.dnn:"]);
}

#[test]
fn declared_type_differs_from_inferred() {
    model_case(
        "decl",
        &with("%r = Relu(%c)", "%r: f32[1,3,5,5] = Relu(%c)"),
        &["m.dnn:6:", "f32[1,3,4,4]"],
    );
}

#[test]
fn bad_dtype() {
    model_case(
        "dtype",
        &with("%x: f32[1,2,4,4]", "%x: f16[1,2,4,4]"),
        &["m.dnn:2:", "f16"],
    );
}

#[test]
fn const_literal_count() {
    model_case(
        "const",
        &with("  output %r", "  const %k: i64[3] = [1, 2]\n  output %r"),
        &["m.dnn:7:", "3"],
    );
}

#[test]
fn no_outputs() {
    model_case("no-out", &with("  output %r\n", ""), &["output"]);
}

#[test]
fn output_undefined() {
    model_case(
        "out-undef",
        &with("output %r", "output %zz"),
        &["m.dnn:7:", "zz"],
    );
}

#[test]
fn missing_safetensors_tensor() {
    let s = Scratch::new("missing-weight");
    let m = s.file(
        "m.dnn",
        with("= he(seed=1)", "= external(\"conv.w\")").as_bytes(),
    );
    let w = s.safetensors("w.safetensors", &[("other", vec![2])]);
    fails_with(&dnnc(&[&"run", &m, &"--weights", &w]), &["conv.w", "%w"]);
    // And with no weights file at all.
    fails_with(&dnnc(&[&"run", &m]), &["conv.w", "--weights"]);
}

#[test]
fn safetensors_tensor_of_wrong_shape() {
    let s = Scratch::new("weight-shape");
    let m = s.file("m.dnn", GOOD.as_bytes());
    let w = s.safetensors("w.safetensors", &[("w", vec![3, 2, 5, 5])]);
    fails_with(
        &dnnc(&[&"run", &m, &"--weights", &w]),
        &["f32[3,2,5,5]", "f32[3,2,3,3]", "%w"],
    );
}

#[test]
fn unreadable_safetensors() {
    let s = Scratch::new("bad-st");
    let m = s.file("m.dnn", GOOD.as_bytes());
    let w = s.file("w.safetensors", b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":");
    fails_with(
        &dnnc(&[&"run", &m, &"--weights", &w]),
        &["w.safetensors", "safetensors"],
    );
}

#[test]
fn missing_weights_file() {
    let s = Scratch::new("no-st");
    let m = s.file("m.dnn", GOOD.as_bytes());
    fails_with(
        &dnnc(&[&"run", &m, &"--weights", &s.0.join("nope.safetensors")]),
        &["nope.safetensors"],
    );
}

#[test]
fn wrong_input_shape() {
    let s = Scratch::new("in-shape");
    let m = s.file("m.dnn", GOOD.as_bytes());
    let x = s.npy_f32("x.npy", &[1, 2, 5, 5]);
    fails_with(
        &dnnc(&[&"run", &m, &"--input", &x]),
        &["x", "f32[1,2,4,4]", "f32[1,2,5,5]"],
    );
}

#[test]
fn wrong_input_dtype() {
    let s = Scratch::new("in-dtype");
    let m = s.file("m.dnn", GOOD.as_bytes());
    let x = s.npy_i64("x.npy", &[1, 2, 4, 4]);
    fails_with(&dnnc(&[&"run", &m, &"--input", &x]), &["i64", "f32"]);
}

#[test]
fn nonexistent_model_file() {
    let s = Scratch::new("no-model");
    fails_with(&dnnc(&[&"ir", &s.0.join("missing.dnn")]), &["missing.dnn"]);
    fails_with(
        &dnnc(&[&"analyze", &s.0.join("missing.dnn")]),
        &["missing.dnn"],
    );
}

#[test]
fn nonexistent_input_file() {
    let s = Scratch::new("no-input");
    let m = s.file("m.dnn", GOOD.as_bytes());
    fails_with(
        &dnnc(&[&"run", &m, &"--input", &s.0.join("gone.npy")]),
        &["gone.npy"],
    );
}

#[test]
fn unreadable_npy() {
    let s = Scratch::new("bad-npy");
    let m = s.file("m.dnn", GOOD.as_bytes());
    let x = s.file("x.npy", b"this is not an npy file at all");
    fails_with(&dnnc(&[&"run", &m, &"--input", &x]), &["x.npy"]);
}

#[test]
fn truncated_npy() {
    let s = Scratch::new("trunc-npy");
    let m = s.file("m.dnn", GOOD.as_bytes());
    let full = s.npy_f32("full.npy", &[1, 2, 4, 4]);
    let bytes = std::fs::read(&full).unwrap();
    let x = s.file("x.npy", &bytes[..bytes.len() - 10]);
    fails_with(&dnnc(&[&"run", &m, &"--input", &x]), &["x.npy"]);
}

#[test]
fn unknown_input_name() {
    let two = GOOD
        .replace(
            "  input %x: f32[1,2,4,4]\n",
            "  input %x: f32[1,2,4,4]\n  input %y: f32[1,3,4,4]\n",
        )
        .replace("%r = Relu(%c)", "%r = Add(%c, %y)");
    let s = Scratch::new("in-name");
    let m = s.file("m.dnn", two.as_bytes());
    let x = s.npy_f32("x.npy", &[1, 2, 4, 4]);
    let arg = format!("zz={}", x.display());
    fails_with(&dnnc(&[&"run", &m, &"--input", &arg]), &["zz", "x, y"]);
    // Naming only one of two inputs leaves the other missing.
    let arg = format!("x={}", x.display());
    fails_with(&dnnc(&[&"run", &m, &"--input", &arg]), &["y"]);
}

#[test]
fn duplicate_input() {
    let s = Scratch::new("in-dup");
    let m = s.file("m.dnn", GOOD.as_bytes());
    let x = s.npy_f32("x.npy", &[1, 2, 4, 4]);
    fails_with(
        &dnnc(&[&"run", &m, &"--input", &x, &"--input", &x]),
        &["more than once"],
    );
}

#[test]
fn binary_model_file() {
    let s = Scratch::new("binary");
    let m = s.file("m.dnn", &[0xff, 0xfe, 0x00, 0x81, 0x92]);
    fails_with(&dnnc(&[&"ir", &m]), &["m.dnn"]);
}

#[test]
fn bad_cli_arguments() {
    let s = Scratch::new("args");
    let m = s.file("m.dnn", GOOD.as_bytes());
    fails_with(&dnnc(&[&"analyze", &m, &"--procs", &"0"]), &["--procs"]);
    fails_with(&dnnc(&[&"analyze", &m, &"--procs", &"many"]), &["--procs"]);
    fails_with(&dnnc(&[&"run", &m, &"--backend", &"tpu"]), &["tpu"]);
    fails_with(&dnnc(&[&"frobnicate"]), &["frobnicate"]);
    fails_with(&dnnc(&[&"run"]), &["MODEL"]);
}

#[test]
fn text_after_graph_and_garbage() {
    model_case(
        "trailing",
        &format!("{GOOD}graph again {{}}\n"),
        &["m.dnn:9:"],
    );
    model_case("garbage", "this is not a model", &["m.dnn:1:"]);
}
