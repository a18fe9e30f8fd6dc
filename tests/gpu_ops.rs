//! GPU backend differential tests: every op family, and fused epilogues,
//! on small shapes, against the reference interpreter. They run on any
//! wgpu adapter (lavapipe in CI); without one they skip with a message,
//! unless `DNNC_REQUIRE_GPU=1` (set by `.ci/run`) makes that a failure.

use dnnc_integration::gpu_check as check;

#[test]
fn elementwise_chain_with_broadcast() {
    check(
        "elementwise_chain_with_broadcast",
        "graph t {
  input %x: f32[2,3,4,5]
  input %y: f32[3,1,5]
  %a = Add(%x, %y)
  %b = Sigmoid(%a)
  %c = Mul(%b, %x)
  %d = Tanh(%c)
  output %d
}",
        1e-5,
        1e-6,
    );
}

#[test]
fn conv_as_implicit_gemm_with_fused_epilogue() {
    // Stride, asymmetric pads, dilation; bias, Relu and a residual Add
    // fused into the GEMM's epilogue.
    check(
        "conv_as_implicit_gemm_with_fused_epilogue",
        "graph t {
  input %x: f32[2,5,11,9]
  input %r: f32[2,7,6,4]
  param %w: f32[7,5,3,3] = he(seed=1)
  param %b: f32[7] = uniform(low=-0.5, high=0.5, seed=2)
  %c = Conv2d(%x, %w, %b) {strides=[2,2], pads=[1,2,1,0], dilations=[1,2]}
  %y = Relu(%c)
  %z = Add(%y, %r)
  output %z
}",
        1e-4,
        1e-5,
    );
}

#[test]
fn pointwise_grouped_and_depthwise_convs() {
    check(
        "pointwise_grouped_and_depthwise_convs",
        "graph t {
  input %x: f32[1,8,10,10]
  param %w1: f32[16,8,1,1] = he(seed=1)
  param %w2: f32[16,4,3,3] = he(seed=2)
  param %b2: f32[16] = uniform(low=-0.5, high=0.5, seed=3)
  param %w3: f32[16,1,3,3] = he(seed=4)
  %p = Conv2d(%x, %w1)
  %g = Conv2d(%p, %w2, %b2) {group=4, pads=[1,1,1,1]}
  %d = Conv2d(%g, %w3) {group=16, strides=[2,2], pads=[1,1,1,1]}
  %y = Clip(%d) {min=0.0, max=6.0}
  output %y
}",
        1e-4,
        1e-5,
    );
}

#[test]
fn winograd_f2x2_3x3_matches_the_interpreter() {
    let src = "graph t {
  input %x: f32[2,6,9,7]
  param %w: f32[5,6,3,3] = he(seed=1)
  param %b: f32[5] = uniform(low=-0.5, high=0.5, seed=2)
  %c = Conv2d(%x, %w, %b) {pads=[1,1,1,1]}
  %y = Relu(%c)
  output %y
}";
    let opts = dnnc_compiler::codegen::gpu::GpuOptions {
        winograd: Some(true),
        ..Default::default()
    };
    // The forced option really selects the three Winograd stages.
    let g = dnnc_compiler::model::load_model_str(src, "t.dnn").unwrap();
    let p = dnnc_compiler::codegen::gpu::compile_gpu(&g, &opts).unwrap();
    let labels: Vec<&str> = p.stages().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        ["y.winograd-input", "y.winograd-gemm", "y.winograd-output"]
    );
    dnnc_integration::gpu_check_with("winograd_f2x2_3x3", src, opts, 1e-4, 1e-5);
}

#[test]
fn gemm_transposes_alpha_beta_and_matmul_batches() {
    check(
        "gemm_transposes_alpha_beta",
        "graph t {
  input %a: f32[37,70]
  param %b: f32[45,37] = he(seed=1)
  param %c: f32[45] = uniform(low=-1.0, high=1.0, seed=2)
  %y = Gemm(%a, %b, %c) {alpha=0.5, beta=2.0, transA=1, transB=1}
  %z = Sigmoid(%y)
  output %z
}",
        1e-4,
        1e-5,
    );
    check(
        "matmul_batched_broadcast",
        "graph t {
  input %a: f32[3,1,5,66]
  input %b: f32[4,66,19]
  input %v: f32[19]
  %y = MatMul(%a, %b)
  %z = MatMul(%y, %v)
  output %y
  output %z
}",
        1e-4,
        1e-5,
    );
}

#[test]
fn device_errors_are_reported_not_panics() {
    use dnnc_runtime::gpu::{AdapterChoice, GpuDevice, GpuError, GpuExecutable};
    let Some(dev) = dnnc_integration::gpu_or_skip("device_errors_are_reported_not_panics") else {
        return;
    };
    // An adapter that does not exist: named, with the list.
    let e = GpuDevice::open(&AdapterChoice::Index(999)).unwrap_err();
    assert!(matches!(e, GpuError::AdapterNotFound { .. }), "{e}");
    assert!(e.to_string().contains("999"), "{e}");
    let e = GpuDevice::open(&AdapterChoice::Name("no-such-gpu".into())).unwrap_err();
    assert!(e.to_string().contains("no-such-gpu"), "{e}");

    let src = "graph t {
  input %x: f32[4,4]
  %y = Relu(%x)
  output %y
}";
    let g = dnnc_compiler::model::load_model_str(src, "t.dnn").unwrap();
    let opts = dnnc_compiler::codegen::gpu::GpuOptions {
        limits: dev.limits(),
        ..Default::default()
    };
    // Wrong inputs.
    let own = GpuDevice::open(&AdapterChoice::Default).unwrap();
    let exe = GpuExecutable::new(
        own.clone(),
        dnnc_compiler::codegen::gpu::compile_gpu(&g, &opts).unwrap(),
    )
    .unwrap();
    let bad = dnnc_ir::Tensor::F32(ndarray::ArrayD::zeros(vec![2, 4]));
    let e = exe.run(&[("x".into(), bad)]).unwrap_err();
    assert!(e.to_string().contains("expected f32[4,4]"), "{e}");
    let e = exe.run(&[]).unwrap_err();
    assert!(e.to_string().contains("`x` was not given"), "{e}");
    // A lost device: every later run says so.
    own.destroy();
    let ok = dnnc_ir::Tensor::F32(ndarray::ArrayD::zeros(vec![4, 4]));
    let e = exe.run(&[("x".into(), ok)]).unwrap_err();
    assert!(matches!(e, GpuError::Lost(_)), "{e}");

    // A model larger than one storage binding allows: a limit error.
    let big = (dev.limits().max_binding_bytes / 4 + 1024) as usize;
    let src = format!("graph t {{\n  input %x: f32[{big}]\n  %y = Relu(%x)\n  output %y\n}}");
    let g = dnnc_compiler::model::load_model_str(&src, "t.dnn").unwrap();
    let p = dnnc_compiler::codegen::gpu::compile_gpu(&g, &opts).unwrap();
    let e = GpuExecutable::new(dev, p).unwrap_err();
    assert!(matches!(e, GpuError::Limit(_)), "{e}");
}

#[test]
fn every_elementwise_op_matches_the_interpreter() {
    // Each unary and binary op, comparisons, logic, Where, PRelu,
    // BatchNormalization and casts, all outputs of one graph (so they
    // are separate kernels' outputs and stored, not only fused).
    let unary = [
        "Relu",
        "LeakyRelu(%x) {alpha=0.1}",
        "Sigmoid",
        "Tanh",
        "Clip(%x) {min=-0.5, max=0.7}",
        "HardSigmoid(%x) {alpha=0.3, beta=0.4}",
        "HardSwish",
        "Elu(%x) {alpha=0.8}",
        "Softplus",
        "Gelu",
        "Gelu(%x) {approximate=tanh}",
        "Neg",
        "Abs",
        "Erf",
        "Selu",
        "Sign",
        "Floor",
        "Ceil",
        "Round",
        "Sin",
        "Cos",
        "Exp",
    ];
    let mut src = String::from(
        "graph t {\n  input %x: f32[2,3,4,5]\n  input %y: f32[3,1,5]\n  param %s: f32[3] = uniform(low=0.5, high=1.5, seed=1)\n  param %b: f32[3] = uniform(low=-1.0, high=1.0, seed=2)\n  param %m: f32[3] = uniform(low=-1.0, high=1.0, seed=3)\n  param %v: f32[3] = uniform(low=0.1, high=2.0, seed=4)\n  param %slope: f32[3,1,1] = uniform(low=0.0, high=0.5, seed=5)\n",
    );
    let mut outs = Vec::new();
    for (i, u) in unary.iter().enumerate() {
        let call = if u.contains('(') {
            u.to_string()
        } else {
            format!("{u}(%x)")
        };
        src.push_str(&format!("  %u{i} = {call}\n"));
        outs.push(format!("%u{i}"));
    }
    // Positive operands for Sqrt, Log, Reciprocal and Pow's base.
    src.push_str("  %pos = Abs(%x)\n  %p1 = Add(%pos, %y)\n  %p = Abs(%p1)\n");
    for (i, op) in ["Sqrt", "Log", "Reciprocal"].iter().enumerate() {
        src.push_str(&format!("  %q{i} = {op}(%p)\n"));
        outs.push(format!("%q{i}"));
    }
    for (i, op) in ["Add", "Sub", "Mul", "Div", "Max", "Min"]
        .iter()
        .enumerate()
    {
        src.push_str(&format!("  %b{i} = {op}(%x, %y)\n"));
        outs.push(format!("%b{i}"));
    }
    src.push_str("  const %e: f32[5] = [2.0, 3.0, -1.0, 0.0, 1.0]\n  %pw = Pow(%p, %y)\n  %pn = Pow(%x, %e)\n");
    outs.extend(["%pw".to_string(), "%pn".to_string()]);
    src.push_str(
        "  %gt = Greater(%x, %y)\n  %lt = Less(%x, %y)\n  %eq = Equal(%gt, %lt)\n  %nt = Not(%eq)\n  %an = And(%gt, %nt)\n  %or = Or(%lt, %an)\n  %wh = Where(%or, %x, %y)\n  %pr = PRelu(%x, %slope)\n  %bn = BatchNormalization(%x, %s, %b, %m, %v) {epsilon=0.001}\n  %ci = Cast(%x) {to=i64}\n  %ci2 = Mul(%ci, %ci)\n  %cf = Cast(%ci2) {to=f32}\n  %cb = Cast(%or) {to=f32}\n",
    );
    outs.extend(
        ["%or", "%wh", "%pr", "%bn", "%ci2", "%cf", "%cb"]
            .iter()
            .map(|s| s.to_string()),
    );
    src.push_str(&format!("  output {}\n}}\n", outs.join(", ")));
    check(
        "every_elementwise_op_matches_the_interpreter",
        &src,
        1e-4,
        1e-5,
    );
}

#[test]
fn small_gemms_with_long_reductions_split_k() {
    // Few output tiles and a long reduction: the tile model splits the
    // reduction into slices (more workgroups), a second stage adds the
    // partial sums and runs the epilogue.
    let src = "graph t {
  input %a: f32[6,2048]
  param %w: f32[2048,8] = he(seed=1)
  param %c: f32[8] = uniform(low=-1.0, high=1.0, seed=2)
  input %x: f32[2,1024,3,3]
  param %k: f32[8,1024,1,1] = he(seed=3)
  param %kb: f32[8] = uniform(low=-1.0, high=1.0, seed=4)
  input %bm: f32[3,5,1500]
  input %bn: f32[3,1500,6]
  %y = Gemm(%a, %w, %c)
  %z = Relu(%y)
  %v = Conv2d(%x, %k, %kb)
  %u = Sigmoid(%v)
  %p = MatMul(%bm, %bn)
  output %z, %u, %p
}";
    let g = dnnc_compiler::model::load_model_str(src, "t.dnn").unwrap();
    let p = dnnc_compiler::codegen::gpu::compile_gpu(&g, &Default::default()).unwrap();
    let labels: Vec<&str> = p.stages().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "z.split-k",
            "z.split-k-sum",
            "u.split-k",
            "u.split-k-sum",
            "p.split-k",
            "p.split-k-sum"
        ]
    );
    check("small_gemms_with_long_reductions_split_k", src, 1e-4, 1e-5);
}

#[test]
fn large_gemms_use_the_8x8_register_block() {
    // Enough 128x128 tiles to occupy a GPU: the tile model picks the
    // largest register block (64 accumulators per invocation); ragged
    // edges (1000 = 7 x 128 + 104) still match.
    let src = "graph t {
  input %a: f32[1000,40]
  input %b: f32[40,1030]
  %y = MatMul(%a, %b)
  %z = Relu(%y)
  output %z
}";
    let g = dnnc_compiler::model::load_model_str(src, "t.dnn").unwrap();
    let p = dnnc_compiler::codegen::gpu::compile_gpu(&g, &Default::default()).unwrap();
    let wgsl = &p.kernels[0].stages[0].wgsl;
    assert!(wgsl.contains("var c63: f32"), "expected an 8x8 block");
    assert!(wgsl.contains("@workgroup_size(16, 16)"));
    dnnc_integration::gpu_check_default_adapter(
        "large_gemms_use_the_8x8_register_block",
        src,
        1e-4,
        1e-5,
    );
}

#[test]
fn gemv_shaped_gemms_are_dot_products() {
    // A batch-1 fully connected layer (one row, transposed weight), a
    // 3-row MatMul and a conv on a 1x1 map: at most 4 rows or columns,
    // so one workgroup per output with a tree sum, not a padded tile.
    let src = "graph t {
  input %x: f32[1,700]
  param %w: f32[1000,700] = he(seed=1)
  param %b: f32[1000] = uniform(low=-1.0, high=1.0, seed=2)
  input %a: f32[2,3,300]
  input %m: f32[300,50]
  input %i: f32[1,96,1,1]
  param %k: f32[40,96,1,1] = he(seed=3)
  %y = Gemm(%x, %w, %b) {transB=1}
  %z = Relu(%y)
  %p = MatMul(%a, %m)
  %c = Conv2d(%i, %k)
  output %z, %p, %c
}";
    let g = dnnc_compiler::model::load_model_str(src, "t.dnn").unwrap();
    let p = dnnc_compiler::codegen::gpu::compile_gpu(&g, &Default::default()).unwrap();
    let labels: Vec<&str> = p.stages().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, ["z.dot", "p.dot", "c.dot"]);
    check("gemv_shaped_gemms_are_dot_products", src, 1e-4, 1e-5);
}
