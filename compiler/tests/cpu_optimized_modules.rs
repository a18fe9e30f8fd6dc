//! Random inception-like modules through the whole optimisation pipeline
//! (`Pipeline::default`: the e-graph's branch merges, `split-order`) and
//! the CPU backend (in-place Concats and Splits, routed Splits, padded
//! planes), against the interpreter on the graph as written.
//!
//! Each module reads one value with two to four 1x1 branches (which the
//! e-graph merges), some followed by a 3x3 conv, and optionally a 3x3/1
//! max pool + 1x1 branch; the branches join in a channel Concat in a
//! random order, and two or three modules are stacked (so a Concat is
//! the next module's input) on maps of 5x5 to 20x20, mostly at batch 1.
//! Every build is also compared bitwise across threads with every kernel
//! split, and with dense planes.

mod cpu_common;

use cpu_common::{assert_close, bits, parse, rand_f32, Rng};
use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};
use dnnc_ir::Graph;
use dnnc_runtime::cpu::{Concurrency, KernelSplit};

/// A random stack of modules (see the file's doc) and its input shape.
fn modules(rng: &mut Rng) -> (String, Vec<usize>) {
    let n = 1 + usize::from(rng.below(4) == 0);
    let s = 5 + rng.below(16);
    let mut c = 4 + rng.below(12);
    let mut body = format!("  input %x: f32[{n},{c},{s},{s}]\n");
    let mut x = "%x".to_string();
    let mut seed = 1;
    let mut param = |body: &mut String, name: &str, shape: &str, init: &str| {
        body.push_str(&format!(
            "  param %{name}: f32[{shape}] = {init}(seed={seed})\n"
        ));
        seed += 1;
    };
    for m in 0..2 + rng.below(2) {
        let mut parts = Vec::new();
        let branches = 2 + rng.below(3);
        for b in 0..branches {
            let w = 4 + 4 * rng.below(4);
            let p = format!("m{m}b{b}");
            param(&mut body, &format!("{p}w"), &format!("{w},{c},1,1"), "he");
            param(&mut body, &format!("{p}bias"), &format!("{w}"), "he");
            body.push_str(&format!(
                "  %{p}c = Conv2d({x}, %{p}w, %{p}bias)\n  %{p} = Relu(%{p}c)\n"
            ));
            if rng.below(2) == 0 {
                let w2 = 4 + 4 * rng.below(3);
                param(&mut body, &format!("{p}w3"), &format!("{w2},{w},3,3"), "he");
                body.push_str(&format!(
                    "  %{p}t = Conv2d(%{p}, %{p}w3) {{pads=[1,1,1,1]}}\n  %{p}r = Relu(%{p}t)\n"
                ));
                parts.push((format!("%{p}r"), w2));
            } else {
                parts.push((format!("%{p}"), w));
            }
        }
        if rng.below(2) == 0 {
            let p = format!("m{m}pool");
            body.push_str(&format!(
                "  %{p} = MaxPool({x}) {{kernel=[3,3], pads=[1,1,1,1]}}\n"
            ));
            param(&mut body, &format!("{p}w"), &format!("8,{c},1,1"), "he");
            body.push_str(&format!(
                "  %{p}c = Conv2d(%{p}, %{p}w)\n  %{p}r = Relu(%{p}c)\n"
            ));
            parts.push((format!("%{p}r"), 8));
        }
        // A random order of the parts in the Concat.
        for i in (1..parts.len()).rev() {
            parts.swap(i, rng.below(i + 1));
        }
        c = parts.iter().map(|p| p.1).sum();
        let names: Vec<&str> = parts.iter().map(|p| p.0.as_str()).collect();
        body.push_str(&format!(
            "  %cat{m} = Concat({}) {{axis=1}}\n",
            names.join(", ")
        ));
        x = format!("%cat{m}");
    }
    param(&mut body, "ow", &format!("6,{c},1,1"), "he");
    body.push_str(&format!("  %y = Conv2d({x}, %ow)\n  output %y"));
    (body, vec![n, 4, s, s])
}

#[test]
fn optimized_random_modules_match_the_interpreter() {
    let (mut routed, mut merged) = (0, 0);
    let mut rng = Rng(0x5eed);
    for case in 0..60 {
        let (body, _) = modules(&mut rng);
        let g: Graph = parse(&body);
        let x = g.inputs()[0];
        let shape = g.value(x).ty.shape.clone();
        let feeds = vec![("x".to_string(), rand_f32(&shape, case, -2.0, 2.0))];
        let want = dnnc_runtime::run(&g, &feeds).expect("interpreter");
        let mut opt = g.clone();
        dnnc_passes::Pipeline::default()
            .run(&mut opt)
            .unwrap_or_else(|e| panic!("case {case}: {e}\n{body}"));
        let mut exe = compile_cpu(&opt, &CpuOptions::default())
            .unwrap_or_else(|e| panic!("case {case}: {e}\n{body}"));
        let got = exe.run(&feeds).unwrap();
        let what = format!("case {case}\n{body}");
        assert_close(&what, &got[0], &want[0], 1e-4, 1e-4);
        merged += opt
            .topo_order()
            .into_iter()
            .filter(|&n| opt.node(n).op.name() == "Split")
            .count();
        routed += exe
            .buffers()
            .iter()
            .filter(|b| b.name.contains(" (with %"))
            .count();
        let dense = compile_cpu(
            &opt,
            &CpuOptions {
                dense_planes: true,
                ..Default::default()
            },
        )
        .unwrap();
        let one = bits(&got);
        assert_eq!(
            bits(&dense.run(&feeds).unwrap()),
            one,
            "{what}: dense planes"
        );
        exe.set_kernel_split(KernelSplit::Always);
        exe.set_concurrency(Concurrency::Never);
        exe.set_threads(2).unwrap();
        assert_eq!(bits(&exe.run(&feeds).unwrap()), one, "{what}: 2 threads");
        exe.set_concurrency(Concurrency::Always);
        assert_eq!(bits(&exe.run(&feeds).unwrap()), one, "{what}: concurrent");
    }
    // The generator is meant to exercise merges and routed Splits.
    eprintln!("{merged} merged Splits, {routed} routed, in 60 cases");
    assert!(
        merged >= 30 && routed >= 10,
        "{merged} merged Splits, {routed} routed"
    );
}
