//! Buffer memory: aligned byte buffers and the activation allocator, kept
//! behind a trait so a lifetime-aware memory planner can replace the simple
//! one-buffer-per-value placement.

use dnnc_ir::Tensor;

/// Alignment of every buffer (a cache line; enough for any SIMD load).
pub const ALIGN: usize = 64;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; ALIGN]);

/// A zero-initialised, 64-byte aligned byte buffer.
#[derive(Clone)]
pub struct AlignedBuf {
    lines: Vec<Line>,
    bytes: usize,
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.bytes)
    }
}

impl AlignedBuf {
    /// `bytes` zero bytes.
    pub fn zeroed(bytes: usize) -> Self {
        AlignedBuf {
            lines: vec![Line([0; ALIGN]); bytes.div_ceil(ALIGN).max(1)],
            bytes,
        }
    }

    /// The buffer's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `lines` is contiguous and holds at least `bytes` bytes.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const u8, self.bytes) }
    }

    /// The buffer's bytes, mutably.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, with unique access.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr() as *mut u8, self.bytes) }
    }

    /// Start of the buffer.
    pub fn as_ptr(&self) -> *const u8 {
        self.lines.as_ptr() as *const u8
    }

    /// Start of the buffer, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr() as *mut u8
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// A tensor's elements in row-major order (bool as one byte 0/1).
    pub fn from_tensor(t: &Tensor) -> Self {
        let mut b = AlignedBuf::zeroed(t.ty().size_bytes());
        let out = b.as_bytes_mut();
        match t {
            Tensor::F32(a) => {
                for (c, v) in out.chunks_exact_mut(4).zip(a.iter()) {
                    c.copy_from_slice(&v.to_ne_bytes());
                }
            }
            Tensor::I64(a) => {
                for (c, v) in out.chunks_exact_mut(8).zip(a.iter()) {
                    c.copy_from_slice(&v.to_ne_bytes());
                }
            }
            Tensor::Bool(a) => {
                for (c, v) in out.iter_mut().zip(a.iter()) {
                    *c = *v as u8;
                }
            }
        }
        b
    }
}

/// A temp buffer the allocator must place: its size and the steps between
/// which it is live (inclusive; outputs live to the end).
#[derive(Clone, Copy, Debug)]
pub struct TempInfo {
    /// Buffer index in the executable.
    pub buf: usize,
    /// Size in bytes.
    pub bytes: usize,
    /// First step that touches it.
    pub first_step: usize,
    /// Last step that touches it (`steps.len()` for graph outputs).
    pub last_step: usize,
    /// Index (into the same `temps` slice) of a temp whose memory this one
    /// may take over: the kernel at `first_step` is elementwise, reads that
    /// temp for the last time and writes this one element by element at
    /// the same positions (see `Step::inplace`). An allocator may ignore it.
    pub reuse: Option<usize>,
}

/// Byte offsets of every temp in one arena.
#[derive(Clone, Debug, Default)]
pub struct ArenaPlan {
    /// Offset of each [`TempInfo`], in the order given.
    pub offsets: Vec<usize>,
    /// Arena size in bytes.
    pub total_bytes: usize,
}

/// Places temp buffers in one arena per run. A memory planner implements
/// this to overlap buffers whose lifetimes are disjoint.
pub trait Allocator: Send + Sync {
    /// Offsets for `temps`; each must lie 64-byte aligned inside the arena,
    /// and buffers live at the same time must not overlap.
    fn plan(&self, temps: &[TempInfo]) -> ArenaPlan;
}

/// The simplest placement: every temp gets its own memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct PerValueAllocator;

impl Allocator for PerValueAllocator {
    fn plan(&self, temps: &[TempInfo]) -> ArenaPlan {
        let mut offsets = Vec::with_capacity(temps.len());
        let mut total = 0usize;
        for t in temps {
            offsets.push(total);
            total += t.bytes.div_ceil(ALIGN).max(1) * ALIGN;
        }
        ArenaPlan {
            offsets,
            total_bytes: total,
        }
    }
}
