//! Buffer memory: aligned byte buffers and the activation allocator, kept
//! behind a trait so a lifetime-aware memory planner can replace the simple
//! one-buffer-per-value placement.

use dnnc_ir::Tensor;

/// Alignment of every buffer (a cache line; enough for any SIMD load).
pub const ALIGN: usize = 64;

/// The size from which a buffer is 2 MiB aligned and its whole 2 MiB
/// pages are asked for transparent huge pages (Linux `madvise(MADV_HUGEPAGE)`;
/// systems whose THP setting is `madvise`, a common default, give none
/// otherwise). Streaming a batch-1 FC layer's 5.1 MB of weights, or a 4.8
/// MB activation, on 4 KiB pages misses the TLB every 64 cache lines: with
/// huge pages MobileNet-V2 ran 23.48 -> 22.77 ms at one thread (sum of
/// per-kernel medians over 7 alternating profiles on the AMD EPYC), its FC
/// layer 0.861 -> 0.669 ms.
pub const HUGE_PAGE: usize = 2 << 20;

/// A zero-initialised, 64-byte aligned byte buffer; from [`HUGE_PAGE`]
/// bytes on, 2 MiB aligned and backed by huge pages where the system
/// grants them (all but a last partial 2 MiB).
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    bytes: usize,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer owns its memory exclusively, like a `Vec<u8>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads.
unsafe impl Sync for AlignedBuf {}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        let b = AlignedBuf::uninit(self.bytes);
        // SAFETY: both allocations hold `layout.size()` bytes (the same
        // size) and do not overlap: the copy writes every byte once, the
        // zero padding after `bytes` included.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), b.ptr.as_ptr(), b.layout.size());
        }
        b
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.bytes)
    }
}

impl AlignedBuf {
    /// `bytes` zero bytes.
    pub fn zeroed(bytes: usize) -> Self {
        let b = AlignedBuf::uninit(bytes);
        // Zeroing after the advice: the first touch then faults whole huge
        // pages in.
        // SAFETY: `ptr` addresses `layout.size()` writable bytes.
        unsafe { b.ptr.as_ptr().write_bytes(0, b.layout.size()) };
        b
    }

    /// An allocation for `bytes` bytes, aligned and advised as the type
    /// says, not yet touched (so not yet faulted in): the caller writes
    /// its bytes before any accessor reads them.
    fn uninit(bytes: usize) -> Self {
        let size = bytes.div_ceil(ALIGN).max(1) * ALIGN;
        let align = if size >= HUGE_PAGE { HUGE_PAGE } else { ALIGN };
        let layout = std::alloc::Layout::from_size_align(size, align)
            .unwrap_or_else(|_| panic!("a buffer of {bytes} bytes exceeds the address space"));
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = std::ptr::NonNull::new(ptr) else {
            std::alloc::handle_alloc_error(layout)
        };
        if align == HUGE_PAGE {
            // Whole huge pages only: a partial last one would be resident
            // whole (ResNet-18's peak RSS rose 191 -> 212-218 MB with
            // every large weight rounded up to 2 MiB pages).
            advise_huge(ptr.as_ptr(), size / HUGE_PAGE * HUGE_PAGE);
        }
        AlignedBuf { ptr, bytes, layout }
    }

    /// The buffer's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: the allocation holds at least `bytes` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.bytes) }
    }

    /// The buffer's bytes, mutably.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, with unique access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.bytes) }
    }

    /// Start of the buffer.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Start of the buffer, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
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

/// Asks the kernel to back `[ptr, ptr + len)` (2 MiB aligned) with
/// transparent huge pages; a refusal only costs the TLB misses.
#[cfg(target_os = "linux")]
fn advise_huge(ptr: *mut u8, len: usize) {
    // SAFETY: the range is this buffer's own allocation; the advice
    // changes no contents.
    unsafe {
        libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE);
    }
}

/// Elsewhere the system decides on its own.
#[cfg(not(target_os = "linux"))]
fn advise_huge(_ptr: *mut u8, _len: usize) {}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_aligned_and_large_ones_start_on_a_huge_page() {
        for bytes in [0, 1, 100, HUGE_PAGE - 1, HUGE_PAGE, 3 * HUGE_PAGE + 5] {
            let mut b = AlignedBuf::zeroed(bytes);
            assert_eq!(b.len(), bytes);
            assert!(b.as_bytes().iter().all(|&x| x == 0), "{bytes} bytes");
            let align = if bytes >= HUGE_PAGE { HUGE_PAGE } else { ALIGN };
            assert_eq!(b.as_ptr() as usize % align, 0, "{bytes} bytes");
            // Every byte is writable, and a clone copies them.
            for (i, x) in b.as_bytes_mut().iter_mut().enumerate() {
                *x = (i % 251) as u8;
            }
            let c = b.clone();
            assert_eq!(c.as_bytes(), b.as_bytes());
            assert_ne!(c.as_ptr(), b.as_ptr());
        }
    }
}
