//! A thin layer over Cranelift's `FunctionBuilder` for the code the CPU
//! backend generates: buffer pointers from the argument array, counted
//! loops, f32x4 constants and lane-wise selects.

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F32X4, I32, I32X4, I64, I8X16};
use cranelift_codegen::ir::{
    ConstantData, Endianness, FuncRef, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind,
    Type, Value,
};
use cranelift_frontend::{FunctionBuilder, Variable};
use std::collections::HashMap;

/// The generated function being built, with the kernel's buffer pointers
/// loaded in its entry block.
pub(crate) struct Emit<'a> {
    /// The Cranelift builder.
    pub b: FunctionBuilder<'a>,
    /// Buffer pointers, in the step's argument order.
    pub bufs: Vec<Value>,
    /// The native GEMM helper, imported into this function.
    pub sgemm: FuncRef,
    /// The packed-weight GEMM helper (`dnnc_sgemm_packed`), imported.
    pub psgemm: FuncRef,
    /// The packed-weight GEMM with a gathered B
    /// (`dnnc_sgemm_packed_gather`, an implicit im2col), imported.
    pub gsgemm: FuncRef,
    /// The batched packed-weight GEMM (`dnnc_sgemm_packed_batch`), which
    /// splits a batch of small GEMMs across threads, imported.
    pub bsgemm: FuncRef,
    /// The channel-blocked pointwise conv (`dnnc_conv1x1_nchw8c`), imported.
    pub conv8c: FuncRef,
    /// The channel-blocked pointwise conv into a band buffer
    /// (`dnnc_conv1x1_nchw8c_band`, a fused expansion's rows), imported.
    pub conv8c_band: FuncRef,
    /// The grouped conv of 8-channel groups (`dnnc_conv_group8`), imported.
    pub group8: FuncRef,
    /// The depthwise conv over channel-interleaved scratch
    /// (`dnnc_conv_dw8`), imported.
    pub dw8: FuncRef,
    /// The conv from a plain input into the blocked layout
    /// (`dnnc_conv_into_nchw8c`), imported.
    pub into8c: FuncRef,
    /// A window conv on blocked data as gathered columns and the
    /// pointwise tiles (`dnnc_conv_gather_nchw8c`), imported.
    pub gather8c: FuncRef,
    /// One output row of a grouped window conv on blocked data from a
    /// ring of its input rows (`dnnc_conv_group_ring_nchw8c`, a fused
    /// expansion's conv), imported.
    pub group_ring8c: FuncRef,
    /// One output row of one channel block of a blocked depthwise conv
    /// (`dnnc_dw_row_nchw8c`), imported.
    pub dw8c_row: FuncRef,
    /// A task's rows of a blocked depthwise conv (`dnnc_dw_nchw8c`),
    /// imported.
    pub dw8c: FuncRef,
    /// A plane's rows of a 3x3 stride-2 max pool (`dnnc_max_pool_3x3s2`,
    /// AVX-512), imported.
    pub maxpool: FuncRef,
    /// The same with stride 1 (`dnnc_max_pool_3x3s1`), imported.
    pub maxpool1: FuncRef,
    /// One tile row of one channel of Winograd F(4x4)'s output transform
    /// with a bias-and-clamp epilogue (`dnnc_winograd4_out_row`,
    /// AVX-512), imported.
    pub wino4_out: FuncRef,
    /// One tile row of one channel of Winograd F(4x4)'s input transform
    /// (`dnnc_winograd4_in_row`, AVX-512), imported.
    pub wino4_in: FuncRef,
    /// One channel block's rows spread over eight plain planes
    /// (`dnnc_unblock_rows`), imported.
    pub unblock: FuncRef,
    /// Eight plain planes gathered into one channel block's rows with
    /// bias, residual and clamp (`dnnc_block_rows`), imported.
    pub block_rows: FuncRef,
    /// One channel block's rows of a blocked max or average pool
    /// (`dnnc_pool_nchw8c`), imported.
    pub pool8c: FuncRef,
    /// Block every error path jumps to, with the error code as parameter.
    pub fail: cranelift_codegen::ir::Block,
    /// The target's frontend configuration (for memcpy libcalls).
    pub cfg: cranelift_codegen::isa::TargetFrontendConfig,
    /// This call's task index (the kernel ABI's `task`, i64).
    pub task: Value,
    /// This call's task count (the kernel ABI's `tasks`, i64, >= 1).
    pub tasks: Value,
    /// The split the kernel declared with [`Emit::task_range`]: its extent
    /// and this task's unit range (`None`: the kernel does not split and
    /// ignores `task`/`tasks`).
    pub split: Option<(usize, (Value, Value))>,
    /// What the split's units are (`output planes`, `bands of output
    /// rows`, ...), for the partition `dnnc ir --after partition` shows.
    pub split_unit: Option<&'static str>,
    /// What each phase's units are, in order (see [`Emit::phase`]).
    pub phase_units: Vec<&'static str>,
    /// This call's phase (the kernel ABI's `phase`, i64).
    pub phase: Value,
    /// Extents of the phases declared with [`Emit::phase`], in order
    /// (empty: a single-phase kernel).
    pub phases: Vec<usize>,
    /// Argument indices of workspaces addressed per task
    /// ([`Emit::task_slice`]), which the runtime sizes per task.
    pub task_ws: Vec<usize>,
    /// Compile this kernel without Cranelift's e-graph optimisations, so
    /// its instructions stay in the order they were emitted. Set by
    /// kernels whose emission order is already the schedule (a long FMA
    /// chain with its loads interleaved); the e-graph would place every
    /// pure value at its first use, computing the chain only after all
    /// of its loads and spilling the registers the kernel planned for.
    pub in_order: bool,
    /// Where [`Emit::vf`] defines its constants while set (see
    /// [`Emit::hoist_constants`]), with the ones defined so far by bit
    /// pattern.
    pub hoist: Option<(cranelift_codegen::ir::Inst, HashMap<u32, Value>)>,
}

/// Memory flags for buffer accesses: in bounds by construction.
pub(crate) fn mem() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// Elements [`Emit::load_strided4`] reads for stride `s`.
pub(crate) fn strided4_span(s: usize) -> usize {
    match s {
        1 => 4,
        2 => 8,
        _ => 3 * s + 1,
    }
}

fn le() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

impl<'a> Emit<'a> {
    /// Declares that the kernel's outermost independent loop has `extent`
    /// units and returns this task's share `[extent * task / tasks,
    /// extent * (task + 1) / tasks)` (the kernel ABI, `dnnc_runtime::cpu`).
    /// The caller loops over exactly these units and writes nothing
    /// outside them. A kernel splits over one extent only: a second call
    /// with the same extent returns the same range (so a fused epilogue
    /// can cover the same units), another extent is an error. Call it in
    /// straight-line code of the function body (not inside a loop or
    /// branch) so the range dominates every later use.
    pub fn task_range(
        &mut self,
        extent: usize,
        unit: &'static str,
    ) -> Result<(Value, Value), String> {
        if let Some((n, r)) = self.split {
            return if n == extent {
                Ok(r)
            } else {
                Err(format!("kernel split over {n} units, then over {extent}"))
            };
        }
        let e = self.ci(extent as i64);
        let lo = self.b.ins().imul(e, self.task);
        let lo = self.b.ins().udiv(lo, self.tasks);
        let t1 = self.b.ins().iadd_imm_s(self.task, 1);
        let hi = self.b.ins().imul(e, t1);
        let hi = self.b.ins().udiv(hi, self.tasks);
        self.split = Some((extent, (lo, hi)));
        self.split_unit = Some(unit);
        Ok((lo, hi))
    }

    /// Emits phase `k` (the next one) of a phased kernel: `body` runs when
    /// the call's `phase` argument is `k`, over this task's share
    /// `[lo, hi)` of the phase's `extent` units (the kernel ABI's
    /// "Phases": the runtime runs phases in order with a barrier between
    /// them). Call it in straight-line code of the function body, once
    /// per phase; a phased kernel does not use [`Emit::task_range`].
    pub fn phase(
        &mut self,
        extent: usize,
        unit: &'static str,
        body: impl FnOnce(&mut Self, Value, Value) -> Result<(), String>,
    ) -> Result<(), String> {
        if self.split.is_some() {
            return Err("a kernel split with task_range cannot have phases".into());
        }
        let k = self.phases.len() as i64;
        self.phases.push(extent.max(1));
        self.phase_units.push(unit);
        let run = self.b.create_block();
        let next = self.b.create_block();
        let is = self.b.ins().icmp_imm_s(IntCC::Equal, self.phase, k);
        self.b.ins().brif(is, run, &[], next, &[]);
        self.b.switch_to_block(run);
        let e = self.ci(extent.max(1) as i64);
        let lo = self.b.ins().imul(e, self.task);
        let lo = self.b.ins().udiv(lo, self.tasks);
        let t1 = self.b.ins().iadd_imm_s(self.task, 1);
        let hi = self.b.ins().imul(e, t1);
        let hi = self.b.ins().udiv(hi, self.tasks);
        body(self, lo, hi)?;
        self.b.ins().jump(next, &[]);
        self.b.switch_to_block(next);
        Ok(())
    }

    /// This task's slice of workspace argument `arg` (pointer `base`),
    /// `bytes` per task: `base + task * task_slice_stride(bytes)`, on a
    /// cache line. Declares the workspace as per task, so the runtime sizes
    /// it that stride times the step's planned task count (`bytes` must be
    /// the workspace's declared size).
    pub fn task_slice(&mut self, arg: usize, base: Value, bytes: usize) -> Value {
        if !self.task_ws.contains(&arg) {
            self.task_ws.push(arg);
        }
        let stride = dnnc_runtime::cpu::task_slice_stride(bytes);
        let off = self.b.ins().imul_imm_s(self.task, stride as i64);
        self.b.ins().iadd(base, off)
    }

    /// Lanes `idx` (each < 8) of the eight floats `a ++ b` (f32x4s): one
    /// byte shuffle, which Cranelift lowers to `shufps`/`unpck*` forms.
    pub fn shuffle4(&mut self, a: Value, b: Value, idx: [u8; 4]) -> Value {
        let ai = self.b.ins().bitcast(I8X16, le(), a);
        let bi = self.b.ins().bitcast(I8X16, le(), b);
        let mask: Vec<u8> = idx
            .iter()
            .flat_map(|&l| (0..4u8).map(move |k| l * 4 + k))
            .collect();
        let imm = self.b.func.dfg.immediates.push(ConstantData::from(mask));
        let r = self.b.ins().shuffle(ai, bi, imm);
        self.b.ins().bitcast(F32X4, le(), r)
    }

    /// An i64 constant.
    pub fn ci(&mut self, v: i64) -> Value {
        self.b.ins().iconst(I64, v)
    }

    /// An f32 scalar constant.
    pub fn cf(&mut self, v: f32) -> Value {
        self.b.ins().f32const(v)
    }

    /// An f32x4 with `v` in every lane.
    pub fn vf(&mut self, v: f32) -> Value {
        if let Some((at, seen)) = &mut self.hoist {
            if let Some(&c) = seen.get(&v.to_bits()) {
                return c;
            }
            let mut pos = FuncCursor::new(self.b.func).at_inst(*at);
            let s = pos.ins().f32const(v);
            let c = pos.ins().splat(F32X4, s);
            seen.insert(v.to_bits(), c);
            return c;
        }
        let s = self.b.ins().f32const(v);
        self.b.ins().splat(F32X4, s)
    }

    /// From here on, [`Emit::vf`] defines each distinct constant once, at
    /// this point (which must dominate every later use, e.g. a loop's
    /// preheader), until [`Emit::end_hoist`]. For kernels compiled
    /// [`Emit::in_order`], which get no global value numbering, this keeps
    /// an epilogue's constants in registers instead of reloading them for
    /// every block.
    pub fn hoist_constants(&mut self) {
        let z = self.b.ins().iconst(I64, 0);
        let at = self
            .b
            .func
            .dfg
            .value_def(z)
            .inst()
            .expect("an instruction result");
        self.hoist = Some((at, HashMap::new()));
    }

    /// Ends [`Emit::hoist_constants`].
    pub fn end_hoist(&mut self) {
        self.hoist = None;
    }

    /// An i32x4 with `v` in every lane.
    pub fn vi(&mut self, v: i32) -> Value {
        let s = self.b.ins().iconst(I32, v as i64);
        self.b.ins().splat(I32X4, s)
    }

    /// Reinterprets f32x4 bits as i32x4.
    pub fn as_int(&mut self, v: Value) -> Value {
        self.b.ins().bitcast(I32X4, le(), v)
    }

    /// Reinterprets i32x4 bits as f32x4.
    pub fn as_float(&mut self, v: Value) -> Value {
        self.b.ins().bitcast(F32X4, le(), v)
    }

    /// Lane-wise `cond ? x : y` for an f32x4 comparison `a cc b`.
    pub fn fsel(&mut self, cc: FloatCC, a: Value, b: Value, x: Value, y: Value) -> Value {
        let m = self.b.ins().fcmp(cc, a, b);
        let m = self.as_float(m);
        self.b.ins().bitselect(m, x, y)
    }

    /// Lane-wise select with a mask already computed (i32x4 from `fcmp`
    /// or integer compares).
    pub fn msel(&mut self, mask: Value, x: Value, y: Value) -> Value {
        let m = self.as_float(mask);
        self.b.ins().bitselect(m, x, y)
    }

    /// Address of element `idx` (i64) of `elem_bytes`-byte elements at `base`.
    pub fn addr(&mut self, base: Value, idx: Value, elem_bytes: usize) -> Value {
        let off = match elem_bytes {
            1 => idx,
            _ => self.b.ins().imul_imm_s(idx, elem_bytes as i64),
        };
        self.b.ins().iadd(base, off)
    }

    /// Loads an f32 at element `idx` of `base`.
    pub fn load_f32(&mut self, base: Value, idx: Value) -> Value {
        let a = self.addr(base, idx, 4);
        self.b.ins().load(F32, mem(), a, 0)
    }

    /// Stores an f32 at element `idx` of `base`.
    pub fn store_f32(&mut self, v: Value, base: Value, idx: Value) {
        let a = self.addr(base, idx, 4);
        self.b.ins().store(mem(), v, a, 0);
    }

    /// Loads four consecutive f32s starting at element `idx`.
    pub fn load_v(&mut self, base: Value, idx: Value) -> Value {
        let a = self.addr(base, idx, 4);
        self.b.ins().load(F32X4, mem(), a, 0)
    }

    /// Stores four consecutive f32s starting at element `idx`.
    pub fn store_v(&mut self, v: Value, base: Value, idx: Value) {
        let a = self.addr(base, idx, 4);
        self.b.ins().store(mem(), v, a, 0);
    }

    /// Loads one element of `ty` (F32, I64 or I8) at element `idx`.
    pub fn load_ty(&mut self, ty: Type, base: Value, idx: Value) -> Value {
        let a = self.addr(base, idx, ty.bytes() as usize);
        self.b.ins().load(ty, mem(), a, 0)
    }

    /// Stores one element of its own type at element `idx`.
    pub fn store_ty(&mut self, v: Value, base: Value, idx: Value) {
        let ty = self.b.func.dfg.value_type(v);
        let a = self.addr(base, idx, ty.bytes() as usize);
        self.b.ins().store(mem(), v, a, 0);
    }

    /// [`Emit::load_v`] when `lanes`, else [`Emit::load_f32`]: one step
    /// of a loop written once for its vector body and its scalar tail.
    pub fn load_lanes(&mut self, lanes: bool, base: Value, idx: Value) -> Value {
        if lanes {
            self.load_v(base, idx)
        } else {
            self.load_f32(base, idx)
        }
    }

    /// [`Emit::store_v`] when `lanes`, else [`Emit::store_f32`].
    pub fn store_lanes(&mut self, lanes: bool, v: Value, base: Value, idx: Value) {
        if lanes {
            self.store_v(v, base, idx)
        } else {
            self.store_f32(v, base, idx)
        }
    }

    /// A fresh mutable variable of type `ty` holding `init`.
    pub fn var(&mut self, ty: Type, init: Value) -> Variable {
        let v = self.b.declare_var(ty);
        self.b.def_var(v, init);
        v
    }

    /// `for i in (start..end).step_by(step)` with `body(self, i)`; `end` is
    /// exclusive and the loop runs zero times when `start >= end`.
    pub fn for_range(
        &mut self,
        start: Value,
        end: Value,
        step: i64,
        mut body: impl FnMut(&mut Self, Value),
    ) {
        let header = self.b.create_block();
        let body_blk = self.b.create_block();
        let exit = self.b.create_block();
        self.b.append_block_param(header, I64);
        self.b.ins().jump(header, &[start.into()]);
        self.b.switch_to_block(header);
        let i = self.b.block_params(header)[0];
        let c = self.b.ins().icmp(IntCC::SignedLessThan, i, end);
        self.b.ins().brif(c, body_blk, &[], exit, &[]);
        self.b.switch_to_block(body_blk);
        body(self, i);
        let next = self.b.ins().iadd_imm_s(i, step);
        self.b.ins().jump(header, &[next.into()]);
        self.b.switch_to_block(exit);
    }

    /// Runs `body` only when `cond` (an `i8` truth value) holds at run
    /// time.
    pub fn when(&mut self, cond: Value, body: impl FnOnce(&mut Self)) {
        let run = self.b.create_block();
        let next = self.b.create_block();
        self.b.ins().brif(cond, run, &[], next, &[]);
        self.b.switch_to_block(run);
        body(self);
        self.b.ins().jump(next, &[]);
        self.b.switch_to_block(next);
    }

    /// `for i in 0..n` over a compile-time count.
    pub fn for_n(&mut self, n: usize, body: impl FnMut(&mut Self, Value)) {
        let s = self.ci(0);
        let e = self.ci(n as i64);
        self.for_range(s, e, 1, body);
    }

    /// Nested loops over `dims` (outermost first); `body` gets the indices.
    pub fn for_nest(&mut self, dims: &[usize], body: &mut dyn FnMut(&mut Emit<'a>, &[Value])) {
        fn rec<'a>(
            e: &mut Emit<'a>,
            dims: &[usize],
            idx: &mut Vec<Value>,
            body: &mut dyn FnMut(&mut Emit<'a>, &[Value]),
        ) {
            if idx.len() == dims.len() {
                body(e, idx);
                return;
            }
            let d = dims[idx.len()];
            if d == 1 {
                let z = e.ci(0);
                idx.push(z);
                rec(e, dims, idx, body);
                idx.pop();
                return;
            }
            e.for_n(d, |e, i| {
                idx.push(i);
                rec(e, dims, idx, body);
                idx.pop();
            });
        }
        let mut idx = Vec::with_capacity(dims.len());
        rec(self, dims, &mut idx, body);
    }

    /// `sum_d idx[d] * strides[d]` plus `base`.
    pub fn linear(&mut self, base: Option<Value>, idx: &[Value], strides: &[i64]) -> Value {
        let mut acc = base;
        for (&i, &s) in idx.iter().zip(strides) {
            if s == 0 {
                continue;
            }
            let t = if s == 1 {
                i
            } else {
                self.b.ins().imul_imm_s(i, s)
            };
            acc = Some(match acc {
                Some(a) => self.b.ins().iadd(a, t),
                None => t,
            });
        }
        match acc {
            Some(a) => a,
            None => self.ci(0),
        }
    }

    /// `v`, computed where this is called and kept there: stored to a
    /// stack slot and loaded back, so Cranelift's e-graph, which places a
    /// pure value at its uses, cannot move its computation into a loop
    /// emitted after this point. (An elementwise kernel's per-plane
    /// operand offsets, two divisions by constants among them, were
    /// recomputed for every pair of vectors of the plane: an 8x96x56x56
    /// SiLU 1.97 → 1.68 ms at one thread.)
    pub fn pin(&mut self, v: Value) -> Value {
        let ty = self.b.func.dfg.value_type(v);
        let ss = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            ty.bytes(),
            ty.bytes().trailing_zeros() as u8,
        ));
        let a = self.b.ins().stack_addr(I64, ss, 0);
        self.b.ins().store(mem(), v, a, 0);
        self.b.ins().load(ty, mem(), a, 0)
    }

    /// Returns error `code` from the function when `cond` (an integer
    /// truth value) holds.
    pub fn fail_if(&mut self, cond: Value, code: i32) {
        let ok = self.b.create_block();
        let c = self.b.ins().iconst(I32, code as i64);
        self.b.ins().brif(cond, self.fail, &[c.into()], ok, &[]);
        self.b.switch_to_block(ok);
    }

    /// Splats an f32 scalar to f32x4.
    pub fn splat(&mut self, s: Value) -> Value {
        self.b.ins().splat(F32X4, s)
    }

    /// `x[idx + k*s]` for `k = 0..4` as an f32x4, where `bp` points at
    /// element `idx` (plus `off` elements). Stride 1 is one load; stride 2
    /// loads 8 consecutive floats and keeps the even lanes (one shuffle),
    /// since pooling and depthwise convs with stride 2 are common and a
    /// lane-by-lane gather costs four inserts. Reads the elements
    /// `[idx, idx + strided4_span(s))`.
    pub fn load_strided4(&mut self, bp: Value, off: usize, s: usize) -> Value {
        let o = (off * 4) as i32;
        match s {
            1 => self.b.ins().load(F32X4, mem(), bp, o),
            2 => {
                let a = self.b.ins().load(F32X4, mem(), bp, o);
                let b = self.b.ins().load(F32X4, mem(), bp, o + 16);
                self.shuffle4(a, b, [0, 2, 4, 6])
            }
            _ => {
                let v0 = self.b.ins().load(F32, mem(), bp, o);
                let mut v = self.b.ins().scalar_to_vector(F32X4, v0);
                for k in 1..4u8 {
                    let o = o + (k as usize * s * 4) as i32;
                    let t = self.b.ins().load(F32, mem(), bp, o);
                    v = self.b.ins().insertlane(v, t, k);
                }
                v
            }
        }
    }

    /// Lane 0 of an f32x4.
    pub fn lane0(&mut self, v: Value) -> Value {
        self.b.ins().extractlane(v, 0)
    }
}
