//! Snapshots of every bundled example: the canonical printed IR and the
//! `dnnc analyze` table. Any change to printing, shape inference or the
//! Work-Depth model shows up here as a reviewable diff.

use dnnc_integration::{examples, stem};

#[test]
fn every_example_prints_canonically_and_round_trips() {
    let files = examples();
    assert!(
        files.len() >= 6,
        "expected the six bundled examples, found {files:?}"
    );
    for path in files {
        let g =
            dnnc_compiler::load_model(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let printed = dnnc_ir::text::print(&g);
        let again = dnnc_ir::text::parse(&printed, "printed").expect("printed IR parses");
        assert_eq!(dnnc_ir::text::print(&again), printed, "{}", path.display());
        insta::assert_snapshot!(format!("ir_{}", stem(&path)), printed);
    }
}

#[test]
fn every_example_has_an_analysis_snapshot() {
    for path in examples() {
        let g = dnnc_compiler::load_model(&path).expect("example loads");
        let a = dnnc_passes::wd::analyze(&g);
        let table = dnnc_passes::wd::render_table(&a, 2);
        insta::assert_snapshot!(format!("analyze_{}", stem(&path)), table);
    }
}

#[test]
fn every_example_analysis_is_valid_json() {
    for path in examples() {
        let g = dnnc_compiler::load_model(&path).expect("example loads");
        let a = dnnc_passes::wd::analyze(&g);
        let json = dnnc_passes::wd::render_json(&a, 4);
        let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
        assert!(v.is_object(), "{}", path.display());
    }
}
