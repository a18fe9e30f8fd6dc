//! Code generators: native CPU code through Cranelift ([`cpu`]) and WGSL
//! compute shaders for wgpu ([`gpu`]).

pub mod cpu;
pub mod gpu;
