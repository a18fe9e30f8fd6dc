//! GPU backend differential tests of the reduction lowerings (pools, LRN,
//! Reduce*, Softmax/LogSoftmax, Instance/LayerNorm) and their fused
//! epilogues, on small shapes, against the reference interpreter. Like
//! `gpu_ops.rs`, they skip without a wgpu adapter unless
//! `DNNC_REQUIRE_GPU=1`.

use dnnc_integration::gpu_check;

fn check(test: &str, src: &str) {
    gpu_check(test, src, 1e-4, 1e-5);
}

#[test]
fn max_pool_pads_strides_dilation_ceil() {
    check(
        "max_pool_pads_strides_dilation_ceil",
        "graph t {
  input %x: f32[2,3,9,8]
  %a = MaxPool(%x) {kernel=[3,3], strides=[2,2], pads=[1,1,1,1]}
  %b = MaxPool(%x) {kernel=[2,3], strides=[2,1], pads=[2,0,1,2], dilations=[2,1], ceil_mode=1}
  %c = MaxPool(%x) {kernel=[3,2], strides=[3,3], pads=[0,1,2,1], ceil_mode=1}
  output %a
  output %b
  output %c
}",
    );
}

#[test]
fn average_pool_count_include_pad_and_ceil() {
    check(
        "average_pool_count_include_pad_and_ceil",
        "graph t {
  input %x: f32[2,3,9,8]
  %a = AveragePool(%x) {kernel=[3,3], strides=[2,2], pads=[1,1,1,1]}
  %b = AveragePool(%x) {kernel=[3,3], strides=[2,2], pads=[1,1,1,1], count_include_pad=1}
  %c = AveragePool(%x) {kernel=[2,3], strides=[3,2], pads=[1,0,1,2], ceil_mode=1, count_include_pad=1}
  %d = AveragePool(%x) {kernel=[2,3], strides=[3,2], pads=[1,0,1,2], ceil_mode=1}
  output %a
  output %b
  output %c
  output %d
}",
    );
}

#[test]
fn global_pools() {
    check(
        "global_pools",
        "graph t {
  input %x: f32[2,3,5,7]
  %a = GlobalAveragePool(%x)
  %b = GlobalMaxPool(%x)
  output %a
  output %b
}",
    );
}

#[test]
fn reduce_axes_keepdims_negative() {
    check(
        "reduce_axes_keepdims_negative",
        "graph t {
  input %x: f32[2,3,4,5]
  %a = ReduceMean(%x) {axes=[1,3], keepdims=1}
  %b = ReduceSum(%x) {axes=[-1,0], keepdims=0}
  %c = ReduceMax(%x)
  %d = ReduceMax(%x) {axes=[-3], keepdims=0}
  %e = ReduceSum(%x) {axes=[2,3]}
  %f = ReduceMean(%x) {axes=[0], keepdims=0}
  output %a
  output %b
  output %c
  output %d
  output %e
  output %f
}",
    );
}

#[test]
fn softmax_and_log_softmax_axes() {
    check(
        "softmax_and_log_softmax_axes",
        "graph t {
  input %x: f32[2,3,4,5]
  %a = Softmax(%x) {axis=1}
  %b = Softmax(%x)
  %c = LogSoftmax(%x) {axis=-2}
  %d = LogSoftmax(%x) {axis=3}
  %e = Softmax(%x) {axis=0}
  output %a
  output %b
  output %c
  output %d
  output %e
}",
    );
}

#[test]
fn lrn_odd_and_even_size() {
    check(
        "lrn_odd_and_even_size",
        "graph t {
  input %x: f32[2,6,4,3]
  %a = LRN(%x) {size=3}
  %b = LRN(%x) {size=4, alpha=0.01, beta=0.5, bias=2.0}
  output %a
  output %b
}",
    );
}

#[test]
fn instance_and_layer_norm() {
    check(
        "instance_and_layer_norm",
        "graph t {
  input %x: f32[2,3,5,4]
  param %s: f32[3] = uniform(low=0.5, high=1.5, seed=1)
  param %b: f32[3] = uniform(low=-0.5, high=0.5, seed=2)
  param %ls: f32[4] = uniform(low=0.5, high=1.5, seed=3)
  param %lb: f32[4] = uniform(low=-0.5, high=0.5, seed=4)
  param %ms: f32[5,4] = uniform(low=0.5, high=1.5, seed=5)
  param %mb: f32[3,5,4] = uniform(low=-0.5, high=0.5, seed=6)
  %a = InstanceNormalization(%x, %s, %b) {epsilon=0.001}
  %c = LayerNormalization(%x, %ls, %lb)
  %d = LayerNormalization(%x, %ms, %mb) {axis=1}
  %e = LayerNormalization(%x, %ms) {axis=-2, epsilon=0.01}
  output %a
  output %c
  output %d
  output %e
}",
    );
}

/// Pool + Relu + residual Add, ReduceMean + Sigmoid and Softmax + Mul
/// each fuse into one Reduction kernel (`dnnc ir --after fusion`); the
/// epilogue runs per result element in the reduction's shader.
#[test]
fn fused_epilogues() {
    check(
        "fused_epilogues",
        "graph t {
  input %x: f32[1,4,8,8]
  input %y: f32[1,4,4,4]
  %p = MaxPool(%x) {kernel=[2,2], strides=[2,2]}
  %r = Relu(%p)
  %a = Add(%r, %y)
  %m = ReduceMean(%x) {axes=[2,3], keepdims=1}
  %s = Sigmoid(%m)
  %q = Softmax(%x) {axis=1}
  %t = Mul(%q, %x)
  param %y2s: f32[4] = uniform(low=0.5, high=1.5, seed=1)
  param %y2b: f32[4] = uniform(low=-0.5, high=0.5, seed=2)
  %n = InstanceNormalization(%y, %y2s, %y2b)
  %u = LeakyRelu(%n)
  output %a
  output %s
  output %t
  output %u
}",
    );
}

/// Reduced extents larger than a workgroup (up to 256 invocations), so
/// each invocation accumulates several elements before the tree: a
/// trailing axis, a leading (non-contiguous) axis, softmax and layer norm.
#[test]
fn reduced_extent_larger_than_workgroup() {
    check(
        "reduced_extent_larger_than_workgroup",
        "graph t {
  input %x: f32[3,1100]
  input %z: f32[1200,3]
  %a = ReduceMean(%x) {axes=[1]}
  %b = ReduceMean(%z) {axes=[0], keepdims=0}
  %c = ReduceMax(%z) {axes=[0]}
  %d = Softmax(%x)
  %e = LogSoftmax(%z) {axis=0}
  param %s: f32[1100] = uniform(low=0.5, high=1.5, seed=1)
  %f = LayerNormalization(%x, %s)
  output %a
  output %b
  output %c
  output %d
  output %e
  output %f
}",
    );
}
