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
//! Invariant: only allocator tuning parameters change here. No budget depends on them (the
//! evaluator's heap budget is Starlark's own accounting, and `RLIMIT_AS` still bounds the
//! process), and a parameter glibc rejects leaves its default in place.
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
}

/// Other C libraries keep their defaults.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn tune_for_evaluation() {}
