//! ONNX's backend node tests (`../shared/onnx-tests/node`) on the reference
//! interpreter through `dnnc onnx-test`'s runner. Every test listed in
//! `onnx_conformance_expected_pass.txt` must pass, so a regression cannot
//! slip in; a passing test missing from the list is reported so it can be
//! added. Also prints the acceptance metric: the pass rate among tests
//! whose op types (INDEX.tsv) are all in the importer's supported set.

use dnnc_compiler::conformance::{
    run_dirs, run_dirs_on, run_dirs_on_adapter, run_dirs_with, Backend, Outcome, Report,
};
use dnnc_compiler::onnx::SUPPORTED_OPS;
use dnnc_integration::shared_or_skip;
use std::collections::{BTreeSet, HashMap};

const EXPECTED: &str = include_str!("onnx_conformance_expected_pass.txt");

/// The tensor element types dnnc computes in; tests whose graph I/O uses
/// others (DOUBLE, INT8..INT32, FLOAT16...) are reported unsupported.
const DNNC_DTYPES: &[&str] = &["FLOAT", "INT64", "BOOL"];

fn expected() -> Vec<&'static str> {
    EXPECTED
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn expected_pass_list_is_sorted_and_unique() {
    let list = expected();
    let mut sorted = list.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        list, sorted,
        "keep onnx_conformance_expected_pass.txt sorted, one name per line"
    );
}

/// Pass rate among the INDEX.tsv tests selected by `keep`.
fn rate(
    index: &[(String, Vec<String>, Vec<String>)],
    outcomes: &HashMap<&str, &Outcome>,
    keep: impl Fn(&[String], &[String]) -> bool,
) -> (usize, usize) {
    let mut n = 0;
    let mut passed = 0;
    for (test, ops, dtypes) in index {
        if keep(ops, dtypes) {
            n += 1;
            if matches!(outcomes.get(test.as_str()), Some(Outcome::Pass { .. })) {
                passed += 1;
            }
        }
    }
    (passed, n)
}

fn print_report(report: &Report) {
    for r in &report.results {
        if matches!(r.outcome, Outcome::Fail { .. }) {
            eprintln!("{r}");
        }
    }
    eprintln!("{}", report.summary());
}

#[test]
fn onnx_node_tests_pass_on_the_interpreter() {
    let Some(shared) = shared_or_skip("onnx_node_tests_pass_on_the_interpreter") else {
        return;
    };
    let node = shared.join("onnx-tests").join("node");
    if !node.is_dir() {
        eprintln!(
            "SKIPPED onnx_node_tests_pass_on_the_interpreter: {} is missing",
            node.display()
        );
        return;
    }
    let report = run_dirs(&[node], &mut |_| {}).expect("the node test folder is readable");
    print_report(&report);
    let outcomes: HashMap<&str, &Outcome> = report
        .results
        .iter()
        .map(|r| (r.name.as_str(), &r.outcome))
        .collect();

    // Regressions: listed tests that no longer pass.
    let expected = expected();
    let mut regressions = vec![];
    for name in &expected {
        match outcomes.get(name) {
            Some(Outcome::Pass { .. }) => {}
            Some(o) => regressions.push(format!("{name}: {o:?}")),
            None => regressions.push(format!("{name}: not found")),
        }
    }
    // Progress: passing tests that are not listed yet.
    let listed: BTreeSet<&str> = expected.iter().copied().collect();
    let new: Vec<&str> = report
        .results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Pass { .. }) && !listed.contains(r.name.as_str()))
        .map(|r| r.name.as_str())
        .collect();
    if !new.is_empty() {
        eprintln!(
            "NOTE: {} test(s) pass but are not in tests/onnx_conformance_expected_pass.txt; please add them:\n{}",
            new.len(),
            new.join("\n")
        );
    }

    // The acceptance metric, from INDEX.tsv's op_types and io_dtypes.
    let tsv = std::fs::read_to_string(shared.join("onnx-tests").join("INDEX.tsv"))
        .expect("INDEX.tsv is readable");
    let index: Vec<(String, Vec<String>, Vec<String>)> = tsv
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            let split = |s: &str| s.split(',').map(str::to_string).collect::<Vec<_>>();
            (cols.len() >= 6).then(|| (cols[1].to_string(), split(cols[2]), split(cols[5])))
        })
        .collect();
    let ops_ok = |ops: &[String]| ops.iter().all(|o| SUPPORTED_OPS.contains(&o.as_str()));
    let (p_ops, n_ops) = rate(&index, &outcomes, |ops, _| ops_ok(ops));
    let (p_f, n_f) = rate(&index, &outcomes, |ops, dt| {
        ops_ok(ops) && dt.iter().all(|d| DNNC_DTYPES.contains(&d.as_str()))
    });
    let pct = |p: usize, n: usize| 100.0 * p as f64 / n.max(1) as f64;
    eprintln!(
        "acceptance: {p_f}/{n_f} = {:.1}% of supported-op tests with FLOAT/INT64/BOOL graph I/O pass \
         ({p_ops}/{n_ops} = {:.1}% counting every dtype)",
        pct(p_f, n_f),
        pct(p_ops, n_ops)
    );

    assert!(
        regressions.is_empty(),
        "{} listed test(s) no longer pass:\n{}",
        regressions.len(),
        regressions.join("\n")
    );
    assert!(
        pct(p_f, n_f) >= 90.0,
        "acceptance target: at least 90% of supported-op float tests pass, got {:.1}%",
        pct(p_f, n_f)
    );
}

/// Fails naming every test of `report` that did not pass (`when` says
/// how they were run).
fn assert_all_pass(report: &Report, when: &str) {
    let failures: Vec<String> = report
        .results
        .iter()
        .filter(|r| !matches!(r.outcome, Outcome::Pass { .. }))
        .map(|r| r.to_string())
        .collect();
    assert!(
        failures.is_empty(),
        "{} listed test(s) fail {when}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The folders of the listed tests, or `None` (with a SKIPPED line naming
/// `test`) when the shared test data is missing.
fn listed_dirs(test: &str) -> Option<Vec<std::path::PathBuf>> {
    let shared = shared_or_skip(test)?;
    let node = shared.join("onnx-tests").join("node");
    if !node.is_dir() {
        eprintln!("SKIPPED {test}: {} is missing", node.display());
        return None;
    }
    Some(expected().iter().map(|n| node.join(n)).collect())
}

/// The committed expected-pass list holds on the compiled CPU backend too
/// (the default of `dnnc run` and `dnnc onnx-test`): every listed test
/// passes with the same tolerance rule, and nothing falls back to the
/// interpreter.
#[test]
fn expected_pass_list_holds_on_the_cpu_backend() {
    let Some(dirs) = listed_dirs("expected_pass_list_holds_on_the_cpu_backend") else {
        return;
    };
    let report = run_dirs_on(&dirs, Backend::Cpu, &mut |_| {})
        .expect("the listed test folders are readable");
    print_report(&report);
    assert_all_pass(&report, "on the cpu backend");
}

/// The committed expected-pass list holds on the GPU backend (WGSL through
/// wgpu; lavapipe's Vulkan and llvmpipe's GL in CI), on every adapter:
/// every listed op, attribute form and dtype compiles to validated shaders
/// and matches ONNX's expected outputs.
#[test]
fn expected_pass_list_holds_on_the_gpu_backend() {
    let test = "expected_pass_list_holds_on_the_gpu_backend";
    let Some(dirs) = listed_dirs(test) else {
        return;
    };
    for dev in dnnc_integration::every_gpu_or_skip(test) {
        let a = dev.adapter();
        let choice = dnnc_runtime::gpu::AdapterChoice::Index(a.index);
        let report = run_dirs_on_adapter(&dirs, Backend::Gpu, false, &choice, &mut |_| {})
            .expect("the listed test folders are readable");
        print_report(&report);
        assert_all_pass(
            &report,
            &format!("on the gpu backend, {} ({})", a.name, a.backend),
        );
    }
}

/// Every listed test also passes when its graph goes through the
/// optimisation pipeline (simplify, the folds, the e-graph, algorithm
/// selection, fusion) before it runs, on the interpreter and on the cpu
/// backend: the rewrites keep ONNX's semantics on every op kind listed.
#[test]
fn expected_pass_list_holds_after_the_optimisation_pipeline() {
    let Some(dirs) = listed_dirs("expected_pass_list_holds_after_the_optimisation_pipeline") else {
        return;
    };
    for backend in [Backend::Interp, Backend::Cpu] {
        let report = run_dirs_with(&dirs, backend, true, &mut |_| {})
            .expect("the listed test folders are readable");
        assert_all_pass(&report, &format!("after the pipeline on {backend:?}"));
    }
}
