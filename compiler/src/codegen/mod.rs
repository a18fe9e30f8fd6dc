//! Code generators: native CPU code through Cranelift ([`cpu`]).

pub mod cpu;
