//! Allocator settings for the one evaluation a worker process runs.
//!
//! Parsing, compiling and running a large workflow allocates tens of megabytes in many small
//! pieces and frees most of them at the end. With glibc's defaults the evaluation thread gets
//! an arena of its own that grows 128 KiB at a time (one `mprotect` each, then page faults),
//! and frees keep consolidating and trimming it; measured on the 1,000-node benchmark
//! workflow, that is about a fifth of the evaluation's CPU time. One arena grown in steps of
//! [`TOP_PAD_BYTES`] removes most of it.
//!
//! Blocks up to [`MMAP_THRESHOLD_BYTES`] come from that heap too: with glibc's defaults a
//! block of 128 KiB or more is a mapping of its own, whose every page faults afresh and
//! which is unmapped when freed. Building the globals compiles the Starlark crate's
//! documentation regexes, each with Unicode-class tables of a few hundred KiB allocated and
//! freed in turn; reusing heap pages for them saves ~120 of the ~1,240 page faults of a
//! 3-node `validate` (~5 µs each on a VM like CI's). Larger blocks (a string or list that
//! grows to many megabytes) stay mappings, returned when freed, and the heap's free top is
//! trimmed as before, so the address-space budget reaches as far as before (the limits
//! receipt pins it).
//!
//! The heap's untouched top is also advised for transparent huge pages. A worker's page
//! faults cost ~3 µs each on a VM like CI's (allocating, zeroing and charging one 4 KiB page),
//! and the evaluation thread of a 3-node `validate` faulted in ~220 heap pages one by one;
//! one 2 MiB page is allocated in about the time of 50 small faults. Measured in paired
//! whole-process runs of that `validate`: 5–7% faster. Where huge pages are off
//! (`transparent_hugepage` set to `never`) or none is free, the kernel backs the heap with
//! small pages as before.
//!
//! Invariant: only allocator tuning parameters and the heap's page-size advice change here.
//! No budget depends on them (the evaluator's heap budget is Starlark's own accounting, and
//! `RLIMIT_AS` counts the heap's mapping, which the advice does not grow), and a parameter
//! glibc or the kernel rejects leaves its default in place.
#![allow(unsafe_code)]

/// How far past each request the heap is extended, so growth happens in a few large steps.
pub(crate) const TOP_PAD_BYTES: i32 = 16 * 1024 * 1024;

/// Blocks below this size are served from the heap rather than mapped one by one.
pub(crate) const MMAP_THRESHOLD_BYTES: i32 = 1024 * 1024;

/// Applies the settings; call before the evaluation thread first allocates.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn tune_for_evaluation() {
    // SAFETY: mallopt only stores allocator parameters (taking glibc's allocator lock) and
    // touches no memory of ours; both parameters and values are valid for glibc, and a
    // refusal (return value 0) simply keeps the default, which is still correct.
    unsafe {
        // One arena: the evaluation thread shares the main heap instead of creating its own.
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_TOP_PAD, TOP_PAD_BYTES);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    }
    huge_page_heap();
}

/// The transparent huge page size with 4 KiB base pages (x86_64, most aarch64). Elsewhere
/// no aligned range of this size holds a huge page and the advice changes nothing.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const HUGE_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// Grows the heap by [`TOP_PAD_BYTES`] now (one block below the mapping threshold that the
/// current top cannot hold) and advises every whole huge page of its untouched top. The
/// evaluation thread allocates from that top first.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn huge_page_heap() {
    let probe = usize::try_from(MMAP_THRESHOLD_BYTES).map_or(0, |bytes| bytes / 2);
    // SAFETY: `sbrk(0)` only reads the current break. `malloc` returns a block (or null)
    // that nothing else sees and that is freed at once, unread and unwritten.
    let (before, block, after) = unsafe {
        let before = libc::sbrk(0) as usize;
        let block = libc::malloc(probe);
        if block.is_null() {
            return;
        }
        let after = libc::sbrk(0) as usize;
        libc::free(block);
        (before, block as usize, after)
    };
    let Some((start, len)) = untouched_top(before, block, probe, after) else {
        return;
    };
    // SAFETY: the range lies inside the heap mapping (see `untouched_top`); MADV_HUGEPAGE
    // changes how the kernel backs those pages, never their contents or the mapping's size,
    // and its failure (an older kernel, huge pages compiled out) leaves small pages.
    unsafe {
        libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
}

/// The whole huge pages from `block` (of `len` bytes, just allocated, never written) up to
/// the break `after`, when the allocation grew the main heap from the break `before`:
/// then the block lies in the heap mapping, and so does everything up to the new break. A
/// block from elsewhere (a thread's arena, a mapping of its own) or one that fit the old
/// top leaves the heap as it was, and nothing is advised.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn untouched_top(before: usize, block: usize, len: usize, after: usize) -> Option<(usize, usize)> {
    let grown = after > before;
    let inside = block < after && block.checked_add(len).is_some_and(|end| end <= after);
    if !grown || !inside {
        return None;
    }
    let start = block.checked_next_multiple_of(HUGE_PAGE_BYTES)?;
    let end = after - after % HUGE_PAGE_BYTES;
    (end > start).then(|| (start, end - start))
}

/// Other C libraries keep their defaults.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn tune_for_evaluation() {}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn a_grown_heap_is_advised_from_the_block_to_the_break_in_whole_huge_pages() {
        let before = 0x5000_0010_0000;
        let block = before - 4096;
        let after = before + 17 * MIB;
        let (start, len) = untouched_top(before, block, MIB / 2, after).unwrap();
        assert_eq!(start % HUGE_PAGE_BYTES, 0);
        assert!(start >= block && start - block < HUGE_PAGE_BYTES);
        assert_eq!((start + len) % HUGE_PAGE_BYTES, 0);
        assert!(start + len <= after && after - (start + len) < HUGE_PAGE_BYTES);
    }

    #[test]
    fn nothing_is_advised_unless_the_block_grew_the_main_heap() {
        let before = 0x5000_0010_0000;
        // Fit the old top: the break did not move.
        assert_eq!(untouched_top(before, before - MIB, MIB / 2, before), None);
        // From a thread arena or a mapping above the break.
        let far = 0x7f00_0000_0000;
        assert_eq!(untouched_top(before, far, MIB / 2, before + 17 * MIB), None);
        // Grown, but too little for a whole huge page past the block.
        assert_eq!(untouched_top(before, before, MIB / 2, before + MIB), None);
    }
}
