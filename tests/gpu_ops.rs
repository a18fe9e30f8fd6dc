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
