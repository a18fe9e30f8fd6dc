//! Malformed models: each error's message and location, plus snapshots of
//! rendered miette reports for a few of them.

use dnnc_ir::text::{parse, ParseError};
use miette::Diagnostic;

fn err(src: &str) -> ParseError {
    match parse(src, "m.dnn") {
        Ok(g) => panic!("parsed unexpectedly:\n{}", dnnc_ir::text::print(&g)),
        Err(e) => e,
    }
}

/// Asserts the message and `line:col` of the error `src` produces.
fn check(src: &str, message: &str, line: usize, col: usize) {
    let e = err(src);
    assert_eq!(e.message(), message, "for source:\n{src}");
    assert_eq!((e.line(), e.column()), (line, col), "{e}");
    assert_eq!(e.to_string(), format!("m.dnn:{line}:{col}: {message}"));
    // The span starts where line:col says and lies within the source.
    let span = e.span();
    assert!(span.start <= span.end && span.end <= src.len(), "{span:?}");
    let before = &src[..span.start];
    assert_eq!(before.matches('\n').count() + 1, line);
}

fn render(e: &ParseError) -> String {
    let mut out = String::new();
    miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
        .with_width(80)
        .render_report(&mut out, e)
        .unwrap();
    out
}

// ----- syntax ---------------------------------------------------------------

#[test]
fn missing_colon_before_type() {
    check(
        "graph g {\n  input %x f32[1]\n}",
        "expected `:` and the input's type, found `f32`",
        2,
        12,
    );
}

#[test]
fn file_must_start_with_graph() {
    check("model g {\n}", "expected `graph`, found `model`", 1, 1);
    check("", "unexpected end of file: expected `graph`", 1, 1);
    check(
        "graph",
        "unexpected end of file: expected a graph name",
        1,
        6,
    );
}

#[test]
fn unexpected_end_of_file_points_at_the_end() {
    check(
        "graph lenet5 {\n  input %x: f32[1]\n",
        "unexpected end of file: expected `}` to close graph `lenet5`",
        2,
        19,
    );
    check(
        "graph g {\n  input %x: f32[4]\n  %y = Relu(%x",
        "unexpected end of file: expected `,` or `)`",
        3,
        15,
    );
}

#[test]
fn unclosed_operand_list() {
    check(
        "graph g {\n  input %x: f32[4]\n  %y = Relu(%x\n  output %y\n}",
        "expected `,` or `)`, found `output`",
        4,
        3,
    );
}

#[test]
fn misspelt_statement_keyword() {
    let src = "graph g {\n  input %x: f32[4]\n  %y = Relu(%x)\n  outptu %y\n}";
    check(src, "expected a statement, found `outptu`", 4, 3);
    assert_eq!(
        err(src).help().unwrap().to_string(),
        "did you mean `output`?"
    );
}

#[test]
fn lexical_errors() {
    check(
        "graph g {\n  input $x: f32[2]\n}",
        "unexpected character `$`",
        2,
        9,
    );
    check(
        "graph g {\n  input %\"x: f32[2]\n}",
        "unterminated string",
        2,
        10,
    );
    check(
        "graph g { input %: f32[2] }",
        "expected a value name after `%`, found `:`",
        1,
        17,
    );
    check(
        "graph g {\n  input %x: f32[99999999999999999999999999999999999999999]\n}",
        "integer `999999999999999999999999…` is too large",
        2,
        17,
    );
}

#[test]
fn text_after_the_graph() {
    check(
        "graph g {\n  input %x: f32[2]\n  output %x\n}\ngraph h {}",
        "unexpected `graph` after the closing `}` of graph `g`",
        5,
        1,
    );
}

#[test]
fn value_where_op_expected() {
    check(
        "graph g {\n  input %x: f32[4]\n  %y = %x\n  output %y\n}",
        "expected an op name, found value `%x`",
        3,
        8,
    );
}

// ----- ops and attributes ---------------------------------------------------

#[test]
fn unknown_op_suggests_close_names() {
    let src = "graph g {\n  input %x: f32[1]\n  %y = Conv(%x)\n  output %y\n}";
    check(src, "unknown op `Conv`", 3, 8);
    assert_eq!(
        err(src).help().unwrap().to_string(),
        "did you mean one of `Conv2d`, `ConvTranspose2d`?"
    );
    let e = err("graph g {\n  input %x: f32[1]\n  %y = Frobnicate(%x)\n  output %y\n}");
    assert!(e.help().unwrap().to_string().contains("docs/ir.md"));
}

#[test]
fn wrong_arity() {
    check(
        "graph g {\n  input %x: f32[1]\n  %y = Relu(%x, %x)\n  output %y\n}",
        "Relu takes 1 input, found 2",
        3,
        12,
    );
    check(
        "graph g {\n  input %x: f32[4]\n  %y = Concat() {axis=0}\n  output %y\n}",
        "Concat takes at least 1 input, found 0",
        3,
        14,
    );
    check(
        "graph g {\n  input %x: f32[1,1,3,3]\n  %y = Conv2d(%x)\n  output %y\n}",
        "Conv2d takes 2 to 3 inputs, found 1",
        3,
        14,
    );
}

#[test]
fn wrong_result_count() {
    check(
        "graph g {\n  input %x: f32[4]\n  %a, %b, %c = Split(%x) {split=[2,2]}\n  output %a\n}",
        "Split produces 2 results, but 3 names are given",
        3,
        3,
    );
}

#[test]
fn bad_attribute_value() {
    check(
        "graph g {\n  input %x: f32[1,1,4,4]\n  %y = MaxPool(%x) {kernel=[2]}\n  output %y\n}",
        "MaxPool attribute `kernel`: expected 2 positive values `[k_h,k_w]`",
        3,
        21,
    );
    check(
        "graph g {\n  input %x: f32[4]\n  %y = Gelu(%x) {approximate=fast}\n  output %y\n}",
        "Gelu attribute `approximate`: `fast` is not one of none, tanh",
        3,
        18,
    );
}

#[test]
fn attribute_of_the_wrong_kind() {
    check(
        "graph g {\n  input %x: f32[1,3,4,4]\n  param %w: f32[3,3,1,1]\n  %y = Conv2d(%x, %w) {group=1.5}\n  output %y\n}",
        "Conv2d attribute `group`: expected an integer, found `1.5`",
        4,
        24,
    );
}

#[test]
fn unknown_attribute() {
    let e = err("graph g {\n  input %x: f32[3]\n  %y = Relu(%x) {alpha=1.0}\n  output %y\n}");
    assert_eq!(e.message(), "unknown attribute `alpha` for Relu");
    assert_eq!((e.line(), e.column()), (3, 18));
    assert_eq!(e.help().unwrap().to_string(), "Relu takes no attributes");
    check(
        "graph g {\n  input %x: f32[3]\n  %y = LeakyRelu(%x) {alpah=1.0}\n  output %y\n}",
        "unknown attribute `alpah` for LeakyRelu",
        3,
        23,
    );
}

#[test]
fn missing_required_attribute_points_at_the_op() {
    check(
        "graph g {\n  input %x: f32[3]\n  %y = Reshape(%x)\n  output %y\n}",
        "Reshape attribute `shape` is required",
        3,
        8,
    );
}

#[test]
fn duplicate_attribute() {
    check(
        "graph g {\n  input %x: f32[3]\n  %y = Softmax(%x) {axis=0, axis=0}\n  output %y\n}",
        "attribute `axis` is given twice",
        3,
        29,
    );
}

#[test]
fn float_out_of_range() {
    check(
        "graph g {\n  input %x: f32[2]\n  %y = Clip(%x) {min=1e99}\n  output %y\n}",
        "number `1e99` is out of range for f32",
        3,
        22,
    );
}

// ----- types ----------------------------------------------------------------

#[test]
fn shape_mismatch_spans_the_node() {
    let src =
        "graph g {\n  input %x: f32[2,3]\n  input %z: f32[4]\n  %y = Add(%x, %z)\n  output %y\n}";
    check(
        src,
        "Add: shapes [2, 3] and [4] do not broadcast (dimension 3 vs 4)",
        4,
        3,
    );
    let e = err(src);
    assert_eq!(&src[e.span()], "%y = Add(%x, %z)");
    assert_eq!(
        e.help().unwrap().to_string(),
        "inputs are `%x`: f32[2,3], `%z`: f32[4]"
    );
}

#[test]
fn dtype_mismatch_after_forward_reference() {
    check(
        "graph g {\n  %y = Relu(%x)\n  input %x: i64[4]\n  %z = Sigmoid(%x)\n  output %y\n}",
        "Sigmoid: input must be f32, found i64",
        4,
        3,
    );
}

#[test]
fn declared_type_differs_from_inferred() {
    check(
        "graph g {\n  input %x: f32[3]\n  %y: f32[2] = Relu(%x)\n  output %y\n}",
        "`%y` is declared f32[2] but Relu produces f32[3]",
        3,
        7,
    );
}

#[test]
fn bad_dtype() {
    check(
        "graph g {\n  input %x: f64[2]\n  output %x\n}",
        "unknown dtype `f64`",
        2,
        13,
    );
    check(
        "graph g {\n  param %p: i64[2]\n  output %p\n}",
        "parameters must be f32, found i64",
        2,
        13,
    );
    check(
        "graph g {\n  input %x: f32[3037000500,3037000500]\n  output %x\n}",
        "tensor type has too many elements",
        2,
        13,
    );
}

// ----- names ----------------------------------------------------------------

#[test]
fn undefined_value_at_its_use() {
    let src = "graph g {\n  input %x: f32[3]\n  %y = Relu(%q)\n  output %y\n}";
    check(src, "undefined value `%q`", 3, 13);
    let e = err("graph g {\n  input %input: f32[3]\n  %y = Relu(%inptu)\n  output %y\n}");
    assert_eq!(e.help().unwrap().to_string(), "did you mean `%input`?");
}

#[test]
fn duplicate_name_mentions_first_definition() {
    let src = "graph g {\n  input %x: f32[3]\n  %x = Relu(%x)\n  output %x\n}";
    check(src, "value `%x` is already defined (first on line 2)", 3, 3);
    let e = err(src);
    let labels: Vec<_> = e.labels().unwrap().collect();
    assert_eq!(labels.len(), 2);
    assert_eq!(
        labels[1].offset(),
        18,
        "secondary label at the first definition"
    );
}

#[test]
fn cycle_lists_its_values() {
    check(
        "graph g {\n  input %x: f32[3]\n  %a = Add(%x, %c)\n  %b = Relu(%a)\n  %c = Neg(%b)\n  output %c\n}",
        "values form a cycle: `%a` -> `%b` -> `%c` -> `%a`",
        3,
        3,
    );
    check(
        "graph g {\n  input %x: f32[4]\n  %y = Relu(%y)\n  output %y\n}",
        "values form a cycle: `%y` -> `%y`",
        3,
        3,
    );
}

#[test]
fn output_of_undefined_value() {
    check(
        "graph g {\n  input %x: f32[2]\n  output %z\n}",
        "output `%z` is not defined",
        3,
        10,
    );
}

#[test]
fn graph_without_output() {
    check(
        "graph g {\n  input %x: f32[2]\n}",
        "graph `g` has no `output` statement",
        1,
        7,
    );
}

// ----- initializers and constants -------------------------------------------

#[test]
fn bad_initializers() {
    let p = |init: &str| format!("graph g {{\n  param %w: f32[3] = {init}\n  output %w\n}}");
    check(
        &p("kaiming(seed=1)"),
        "unknown initializer `kaiming`",
        2,
        22,
    );
    check(
        &p("uniform(low=0.0, seed=1)"),
        "initializer `uniform` needs argument `high`",
        2,
        22,
    );
    check(&p("he(seed=1.5)"), "`seed` must be an integer", 2, 30);
    check(
        &p("he(sed=1)"),
        "unknown argument `sed` for initializer `he`",
        2,
        25,
    );
    check(
        &p("he(seed=-1)"),
        "`seed` must be between 0 and 18446744073709551615",
        2,
        30,
    );
    check(
        &p("external()"),
        "initializer `external` needs the tensor name",
        2,
        22,
    );
    check(
        &p("zeros(value=1)"),
        "unknown argument `value` for initializer `zeros`",
        2,
        28,
    );
    check(
        &p("constant(value=true)"),
        "expected a number for `value`, found `true`",
        2,
        37,
    );
}

#[test]
fn bad_constant_literals() {
    check(
        "graph g {\n  const %c: i64[2] = [1, 2, 3]\n  output %c\n}",
        "constant `%c` is declared i64[2] (2 elements), but its data has 3 elements",
        2,
        22,
    );
    check(
        "graph g {\n  const %c: i64[2] = [1, 2.5]\n  output %c\n}",
        "expected an integer in i64 constant, found number `2.5`",
        2,
        26,
    );
    check(
        "graph g {\n  const %c: bool[1] = [1]\n  output %c\n}",
        "expected `true` or `false` in bool constant, found number `1`",
        2,
        24,
    );
    check(
        "graph g {\n  const %c: f32[2,2] = [[1,2],[3,4]]\n  output %c\n}",
        "expected a number, `true` or `false`, found `[`",
        2,
        25,
    );
}

// ----- robustness -----------------------------------------------------------

#[test]
fn arithmetic_overflow_in_inference_is_an_error_not_a_panic() {
    // Extreme attribute values must give a diagnostic on the node, never an
    // arithmetic-overflow panic in op.rs / infer.rs.
    let node = |n: &str| format!("graph g {{\n  input %x: f32[1,1,4,4]\n  {n}\n  output %y\n}}");
    let cases = [
        "%y = Pad(%x) {pads=[9223372036854775807,0,0,0,9223372036854775807,0,0,0]}",
        "%y = MaxPool(%x) {kernel=[9223372036854775807,1], dilations=[9223372036854775807,1]}",
        "%y = Reshape(%x) {shape=[4294967296,4294967296,4]}",
        "%y = Slice(%x) {starts=[3], ends=[0], axes=[3], steps=[-9223372036854775808]}",
        "%y = Expand(%x) {shape=[4611686018427387904,4611686018427387904,4,4]}",
        "%y = Conv2d(%x, %x) {pads=[9223372036854775807,0,9223372036854775807,0]}",
    ];
    for c in cases {
        let e = err(&node(c));
        assert_eq!((e.line(), e.column()), (3, 3), "{e}");
        eprintln!("{e}");
        assert!(
            [
                "too large",
                "too many",
                "overflow",
                "does not fit",
                "greater than"
            ]
            .iter()
            .any(|m| e.message().contains(m)),
            "{e}"
        );
    }
}

#[test]
fn parse_error_is_a_diagnostic_with_source() {
    let e = err("graph g {\n  input %x: f32[3]\n  %y = Relu(%q)\n  output %y\n}");
    assert!(e.source_code().is_some());
    assert_eq!(e.code().unwrap().to_string(), "dnnc::parse");
    assert_eq!(e.span(), 41..43);
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert!(boxed.to_string().starts_with("m.dnn:3:13: "));
}

// ----- rendered reports -----------------------------------------------------

#[test]
fn rendered_reports() {
    let cases = [
        ("eof", "graph lenet5 {\n  input %x: f32[1]\n"),
        ("unknown_op", "graph g {\n  input %x: f32[1]\n  %y = Conv(%x)\n  output %y\n}"),
        (
            "shape_mismatch",
            "graph g {\n  input %x: f32[2,3]\n  input %z: f32[4]\n  %y = Add(%x, %z)\n  output %y\n}",
        ),
        ("duplicate", "graph g {\n  input %x: f32[3]\n  %x = Relu(%x)\n  output %x\n}"),
        (
            "cycle",
            "graph g {\n  input %x: f32[3]\n  %a = Add(%x, %c)\n  %b = Relu(%a)\n  %c = Neg(%b)\n  output %c\n}",
        ),
        (
            "unknown_attribute",
            "graph g {\n  input %x: f32[3]\n  %y = LeakyRelu(%x) {alpah=1.0}\n  output %y\n}",
        ),
        ("no_output", "graph g {\n  input %x: f32[2]\n}"),
    ];
    for (name, src) in cases {
        insta::assert_snapshot!(format!("report_{name}"), render(&err(src)));
    }
}
