//! The step a `std::process::Command` child takes between `fork` and `exec` to enter its
//! tree's containment: join the cgroup (write `0` to its `cgroup.procs`) or become a child
//! subreaper carrying its tree's tag (the tracked fallback). The executor's own spawner
//! calls [`enter_tracked`] in its child too.
//!
//! Invariant: the hook only makes async-signal-safe system calls on a descriptor opened
//! before the fork, and allocates nothing.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::sync::Arc;

/// Makes `command`'s child join `tree` before it executes; the returned descriptor (the
/// cgroup's `cgroup.procs`) must stay open until the child was spawned.
pub fn install(
    command: &mut std::process::Command,
    tree: &super::Tree,
) -> Result<Option<Arc<OwnedFd>>, super::ContainmentError> {
    let join = tree.join_handle()?.map(Arc::new);
    let fd = join.as_ref().map(|j| j.as_ref().as_raw_fd());
    let tag = tree.leader_tag();
    // SAFETY: the hook runs in the child between fork and exec; it calls only `write` on a
    // descriptor that is open in the child (the parent keeps `join` open until spawn
    // returns) and `prctl`, both async-signal-safe, and builds errors from raw errnos.
    unsafe {
        command.pre_exec(move || {
            if let Some(fd) = fd
                && libc::write(fd, b"0".as_ptr().cast(), 1) != 1
            {
                return Err(io::Error::last_os_error());
            }
            if let Some(tag) = tag
                && !enter_tracked(tag)
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(join)
}

/// In a child between `fork` and `exec`: becomes a child subreaper and, when `tag` is not
/// 0 and the hard limit allows it, sets the `RLIMIT_RTTIME` soft limit to `tag` (inherited
/// by every descendant; a limit that high never binds). `false` with errno set when a
/// step failed. Async-signal-safe: two system calls on stack memory.
pub(crate) fn enter_tracked(tag: u64) -> bool {
    // SAFETY: prctl with integer arguments; getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 {
            return false;
        }
        if tag == 0 {
            return true;
        }
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_RTTIME, &raw mut limit) < 0 {
            return false;
        }
        if limit.rlim_max < tag {
            // A lowered hard limit leaves no room for the tag: identities alone then.
            return true;
        }
        limit.rlim_cur = tag;
        libc::setrlimit(libc::RLIMIT_RTTIME, &raw const limit) == 0
    }
}
