//! The allocator of a short-lived `stockade run`: small blocks are cut in
//! turn from one fixed region and never given back; everything else, and
//! everything once the region is used up or [`Arena::on`] was not called,
//! is the system allocator's.
//!
//! Why: musl's allocator (the static build's) takes a lock, walks its
//! metadata and often returns memory to the kernel on each free; a run's
//! start makes a few thousand small allocations across the supervisor,
//! init and the payload before execve, and cutting them from a region
//! took about 0.2 ms off a start here. A block is never reused, so a
//! process that runs for long (`serve`, a session, the library's spawner)
//! does not turn it on: what it frees must come back.
//!
//! The region is zeroed memory in .bss: untouched pages cost nothing. A
//! fork (init) gets a copy-on-write view of it like of any heap; a vfork
//! child (the payload before execve) cuts from the parent's, which waits.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The region's size: what a run's supervisor, init and payload allocate
/// several times over.
const SIZE: usize = 4 << 20;
/// Larger blocks (output buffers, a big program's argv) are the system's.
const LARGEST: usize = 64 << 10;
/// The alignment every block gets, as from malloc (x86_64's and
/// aarch64's 16 bytes).
const MALLOC_ALIGN: usize = 16;

#[repr(C, align(4096))]
struct Region(UnsafeCell<[u8; SIZE]>);

// SAFETY: the bytes are only reached through pointers `alloc` hands out,
// each range to one caller only (the cursor moves atomically past it).
unsafe impl Sync for Region {}

static REGION: Region = Region(UnsafeCell::new([0; SIZE]));
/// Offset of the first free byte.
static NEXT: AtomicUsize = AtomicUsize::new(0);
static ON: AtomicBool = AtomicBool::new(false);

/// The global allocator (`#[global_allocator]` in the binary).
pub struct Arena;

impl Arena {
    /// Cut small blocks from the region from now on (a short-lived
    /// process only: they are never reused).
    pub fn on() {
        ON.store(true, Ordering::Relaxed);
    }

    fn base() -> usize {
        REGION.0.get() as usize
    }

    fn holds(p: *mut u8) -> bool {
        let a = p as usize;
        a >= Self::base() && a < Self::base() + SIZE
    }

    /// A block of `l` from the region, or None (off, too large, used up).
    fn cut(l: Layout) -> Option<*mut u8> {
        if !ON.load(Ordering::Relaxed) || l.size() > LARGEST || l.align() > 4096 {
            return None;
        }
        let base = Self::base();
        // At least malloc's alignment: code that reads a C struct out of a
        // byte buffer (nix's control messages) counts on it.
        let align = l.align().max(MALLOC_ALIGN);
        let mut next = NEXT.load(Ordering::Relaxed);
        loop {
            // `base` is 4096-aligned, so aligning the offset aligns the
            // address.
            let start = next.checked_add(align - 1)? & !(align - 1);
            let end = start.checked_add(l.size().max(1))?;
            if end > SIZE {
                return None;
            }
            match NEXT.compare_exchange_weak(next, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some((base + start) as *mut u8),
                Err(now) => next = now,
            }
        }
    }
}

// SAFETY: `alloc` returns either a block of the region of at least
// `l.size()` bytes aligned to `l.align()` that no other call returns (the
// cursor only moves forward, atomically), or the system allocator's;
// `dealloc` and `realloc` tell the two apart by address and give the
// system's blocks back to it alone.
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        match Self::cut(l) {
            Some(p) => p,
            // SAFETY: the caller's layout, passed on as it is.
            None => unsafe { System.alloc(l) },
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if !Self::holds(p) {
            // SAFETY: not the region's, so the system allocator's, with
            // the layout it was allocated with (the caller's contract).
            unsafe { System.dealloc(p, l) }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        if !Self::holds(p) {
            // SAFETY: the system allocator's block, its layout and a new
            // size the caller vouches for.
            return unsafe { System.realloc(p, l, new_size) };
        }
        // SAFETY: the caller guarantees `new_size` with `l.align()` is a
        // valid layout (GlobalAlloc::realloc's contract).
        let nl = unsafe { Layout::from_size_align_unchecked(new_size, l.align()) };
        // SAFETY: a valid, non-zero-size layout (see above).
        let q = unsafe { self.alloc(nl) };
        if !q.is_null() {
            // SAFETY: `p` holds `l.size()` bytes, `q` at least `new_size`;
            // two distinct blocks, so they do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size)) };
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the region and the switch are the process's.
    #[test]
    fn blocks_are_cut_aligned_apart_and_fall_back_to_the_system() {
        let a = Arena;
        let layout = |size, align| Layout::from_size_align(size, align).unwrap();
        // Off: the system's.
        // SAFETY: valid layouts; every block is given back as it was made.
        unsafe {
            let p = a.alloc(layout(32, 8));
            assert!(!Arena::holds(p));
            a.dealloc(p, layout(32, 8));
        }
        Arena::on();
        // SAFETY: as above.
        unsafe {
            let mut seen: Vec<(usize, usize)> = Vec::new();
            for (size, align) in [(1, 1), (24, 8), (3, 16), (100, 64), (8, 4096), (0x1000, 8)] {
                let p = a.alloc(layout(size, align));
                assert!(Arena::holds(p), "{size}/{align} from the region");
                assert_eq!(p as usize % align.max(16), 0, "{size}/{align} aligned");
                let (s, e) = (p as usize, p as usize + size);
                assert!(seen.iter().all(|&(a, b)| e <= a || s >= b), "blocks apart");
                seen.push((s, e));
                std::ptr::write_bytes(p, 0xa5, size);
            }
            // Too large: the system's, and given back to it.
            let big = a.alloc(layout(LARGEST + 1, 8));
            assert!(!Arena::holds(big));
            a.dealloc(big, layout(LARGEST + 1, 8));
            // A region block grows into a new one with its bytes.
            let p = a.alloc(layout(16, 8));
            std::ptr::copy_nonoverlapping(b"0123456789abcdef".as_ptr(), p, 16);
            let q = a.realloc(p, layout(16, 8), 40);
            assert!(Arena::holds(q) && q != p);
            assert_eq!(std::slice::from_raw_parts(q, 16), b"0123456789abcdef");
            // ... and past the largest size into the system's.
            let r = a.realloc(q, layout(40, 8), LARGEST * 2);
            assert!(!Arena::holds(r));
            assert_eq!(std::slice::from_raw_parts(r, 16), b"0123456789abcdef");
            a.dealloc(r, layout(LARGEST * 2, 8));
            // Used up: the system's from then on.
            while Arena::cut(layout(LARGEST, 8)).is_some() {}
            let last = a.alloc(layout(LARGEST, 8));
            assert!(!Arena::holds(last));
            a.dealloc(last, layout(LARGEST, 8));
        }
    }
}
