//! GPU data-movement differential tests: Concat, Split, Slice, Transpose,
//! Pad, Gather, Expand, ConstantOfShape, Tile, Range and Resize on small
//! shapes, against the reference interpreter (copies exactly, Resize's
//! interpolation within rtol 1e-4 / atol 1e-5), plus i64 and bool tensors
//! through the copy path. Without a wgpu adapter they skip (see
//! `dnnc_integration::gpu_or_skip`).

use dnnc_integration::gpu_check;

/// Copies must be bit-exact.
fn exact(test: &str, src: &str) {
    gpu_check(test, src, 0.0, 0.0);
}

#[test]
fn concat_three_parts_on_each_axis() {
    exact(
        "concat_three_parts_on_each_axis",
        "graph t {
  input %a: f32[2,3,4]
  input %b: f32[2,3,4]
  input %c: f32[1,3,4]
  input %d: f32[2,2,4]
  input %e: f32[2,3,1]
  const %w: f32[2,3,2] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
  %x = Concat(%a, %c, %b) {axis=0}
  %y = Concat(%d, %a, %d) {axis=1}
  %z = Concat(%e, %w, %b) {axis=-1}
  output %x, %y, %z
}",
    );
}

#[test]
fn split_uneven_with_an_unused_result() {
    exact(
        "split_uneven_with_an_unused_result",
        "graph t {
  input %x: f32[3,7,2]
  %a, %b, %c = Split(%x) {axis=1, split=[1,4,2]}
  %p, %q = Split(%x) {axis=-1, split=[1,1]}
  %r, %s = Split(%x) {axis=0, split=[2,1]}
  output %a, %c, %q, %r, %s
}",
    );
}

#[test]
fn slice_negative_steps_and_clamped_ends() {
    exact(
        "slice_negative_steps_and_clamped_ends",
        "graph t {
  input %x: f32[5,6,4]
  %a = Slice(%x) {starts=[-1, 1], ends=[-100, 6], axes=[0, 1], steps=[-2, 2]}
  %b = Slice(%x) {starts=[9223372036854775807], ends=[-9223372036854775808], axes=[-1], steps=[-1]}
  %c = Slice(%x) {starts=[1, -3, 0], ends=[-1, 9223372036854775807, -1], axes=[0, 1, 2], steps=[1, 1, 3]}
  %d = Slice(%x) {starts=[4], ends=[0], axes=[1], steps=[-3]}
  output %a, %b, %c, %d
}",
    );
}

#[test]
fn transpose_4d() {
    exact(
        "transpose_4d",
        "graph t {
  input %x: f32[2,3,4,5]
  %a = Transpose(%x) {perm=[2,0,3,1]}
  %b = Transpose(%x) {perm=[3,2,1,0]}
  output %a, %b
}",
    );
}

#[test]
fn pad_constant_reflect_edge_and_crop() {
    exact(
        "pad_constant_reflect_edge_and_crop",
        "graph t {
  input %x: f32[2,3,4]
  %c = Pad(%x) {pads=[0,1,2,1,0,1], mode=constant, value=1.5}
  %r = Pad(%x) {pads=[1,2,3,0,1,2], mode=reflect}
  %e = Pad(%x) {pads=[0,2,1,1,0,3], mode=edge}
  %k = Pad(%x) {pads=[0,-1,1,0,0,-2], mode=constant, value=-2}
  %m = Pad(%x) {pads=[1,-1,0,0,2,-1], mode=reflect}
  output %c, %r, %e, %k, %m
}",
    );
}

#[test]
fn gather_axis_0_and_1_with_negative_indices() {
    exact(
        "gather_axis_0_and_1_with_negative_indices",
        "graph t {
  input %x: f32[4,5,3]
  const %i: i64[2,2] = [0, -1, 2, -4]
  const %j: i64[3] = [-5, 4, 1]
  const %k: i64[] = [-2]
  %a = Gather(%x, %i) {axis=0}
  %b = Gather(%x, %j) {axis=1}
  %c = Gather(%x, %k) {axis=-1}
  output %a, %b, %c
}",
    );
}

/// An index outside `[-d, d)` fails the run naming the node, as in the
/// interpreter and the cpu backend; the same executable then runs valid
/// indices (the error flag is reset per run).
#[test]
fn gather_out_of_range_index_fails_the_run() {
    use dnnc_ir::Tensor;
    let test = "gather_out_of_range_index_fails_the_run";
    let Some(dev) = dnnc_integration::gpu_or_skip(test) else {
        return;
    };
    let src = "graph t {
  input %x: f32[4,2]
  input %i: i64[4]
  %a = Gather(%x, %i) {axis=0}
  output %a
}";
    let g = dnnc_compiler::model::load_model_str(src, "test.dnn").expect("parse");
    let xs: Vec<f32> = (0..8).map(|v| v as f32).collect();
    let x = Tensor::F32(ndarray::ArrayD::from_shape_vec(vec![4, 2], xs).expect("shape"));
    let idx =
        |v: Vec<i64>| Tensor::I64(ndarray::ArrayD::from_shape_vec(vec![4], v).expect("shape"));
    let opts = dnnc_compiler::codegen::gpu::GpuOptions {
        limits: dev.limits(),
        ..Default::default()
    };
    let prog = dnnc_compiler::codegen::gpu::compile_gpu(&g, &opts).expect("compile");
    let exe = dnnc_runtime::gpu::GpuExecutable::new(dev, prog).expect("pipelines");
    for bad in [vec![7, 0, 1, 2], vec![0, -9, 1, 2]] {
        let e = exe
            .run(&[("x".to_string(), x.clone()), ("i".to_string(), idx(bad))])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "run failed: Gather `%a`: index out of range for an axis of size 4"
        );
    }
    let got = exe
        .run(&[
            ("x".to_string(), x),
            ("i".to_string(), idx(vec![3, -4, 1, -1])),
        ])
        .expect("run");
    let a = got[0].as_f32().expect("f32");
    assert_eq!(
        a.iter().copied().collect::<Vec<_>>(),
        [6.0, 7.0, 0.0, 1.0, 2.0, 3.0, 6.0, 7.0]
    );
}

#[test]
fn expand_both_directions() {
    exact(
        "expand_both_directions",
        "graph t {
  input %x: f32[3,1]
  input %y: f32[2,1,4]
  %a = Expand(%x) {shape=[2,3,4]}
  %b = Expand(%y) {shape=[3,1]}
  output %a, %b
}",
    );
}

#[test]
fn constant_of_shape_every_dtype() {
    exact(
        "constant_of_shape_every_dtype",
        "graph t {
  %a = ConstantOfShape() {shape=[2,3], value=2.5}
  %b = ConstantOfShape() {shape=[4], value=-7, dtype=i64}
  %c = ConstantOfShape() {shape=[2,2], value=1, dtype=bool}
  output %a, %b, %c
}",
    );
}

#[test]
fn tile() {
    exact(
        "tile",
        "graph t {
  input %x: f32[2,3]
  input %y: f32[2,1,3]
  %a = Tile(%x) {repeats=[3,2]}
  %b = Tile(%y) {repeats=[1,4,2]}
  output %a, %b
}",
    );
}

#[test]
fn range_f32_and_i64() {
    gpu_check(
        "range_f32_and_i64",
        "graph t {
  %a = Range() {start=0.5, limit=3.7, delta=0.3}
  %b = Range() {start=10, limit=-5, delta=-3, dtype=i64}
  %c = Range() {start=-2.5, limit=-30, delta=-1.25}
  output %a, %b, %c
}",
        1e-6,
        1e-7,
    );
}

#[test]
fn resize_nearest_modes() {
    exact(
        "resize_nearest_modes",
        "graph t {
  input %x: f32[1,2,3,4]
  %a = Resize(%x) {sizes=[1,2,7,9], mode=nearest, coordinate_transformation_mode=half_pixel, nearest_mode=round_prefer_floor}
  %b = Resize(%x) {sizes=[1,2,7,9], mode=nearest, coordinate_transformation_mode=asymmetric, nearest_mode=floor}
  %c = Resize(%x) {sizes=[2,2,5,3], mode=nearest, coordinate_transformation_mode=align_corners, nearest_mode=round_prefer_ceil}
  %d = Resize(%x) {sizes=[1,2,2,3], mode=nearest, coordinate_transformation_mode=pytorch_half_pixel, nearest_mode=ceil}
  output %a, %b, %c, %d
}",
    );
}

#[test]
fn resize_linear_modes() {
    gpu_check(
        "resize_linear_modes",
        "graph t {
  input %x: f32[1,2,4,5]
  %a = Resize(%x) {sizes=[1,2,8,10], mode=linear, coordinate_transformation_mode=half_pixel}
  %b = Resize(%x) {sizes=[1,2,7,3], mode=linear, coordinate_transformation_mode=align_corners}
  %c = Resize(%x) {sizes=[1,2,1,9], mode=linear, coordinate_transformation_mode=pytorch_half_pixel}
  %d = Resize(%x) {sizes=[1,2,9,12], scales=[1,1,2.3,2.4], mode=linear, coordinate_transformation_mode=asymmetric}
  %e = Resize(%x) {sizes=[2,3,3,5], mode=linear, coordinate_transformation_mode=half_pixel}
  output %a, %b, %c, %d, %e
}",
        1e-4,
        1e-5,
    );
}

#[test]
fn i64_and_bool_through_movement() {
    exact(
        "i64_and_bool_through_movement",
        "graph t {
  input %x: f32[2,3,4]
  const %ten: f32[] = [10]
  const %zero: f32[] = [0]
  const %g: i64[2] = [-1, 0]
  %s = Mul(%x, %ten)
  %n = Cast(%s) {to=i64}
  %nt = Transpose(%n) {perm=[2,0,1]}
  %nc = Concat(%n, %n, %n) {axis=1}
  %np = Pad(%n) {pads=[0,1,0,0,0,2], mode=constant, value=-3}
  %ng = Gather(%n, %g) {axis=1}
  %b = Greater(%x, %zero)
  %bt = Transpose(%b) {perm=[1,2,0]}
  %bc = Concat(%b, %b, %b) {axis=2}
  %bs = Slice(%b) {starts=[-1], ends=[-100], axes=[2], steps=[-1]}
  %bp = Pad(%b) {pads=[1,0,0,0,1,1], mode=constant, value=1}
  %be = Pad(%b) {pads=[0,1,1,0,0,1], mode=edge}
  %b1, %b2 = Split(%b) {axis=2, split=[3,1]}
  %bx = Expand(%b2) {shape=[3,2,3,2]}
  output %nt, %nc, %np, %ng, %bt, %bc, %bs, %bp, %be, %b1, %bx
}",
    );
}
