//! The step a `std::process::Command` child takes between `fork` and `exec` to enter its
//! tree's containment: join the cgroup (write `0` to its `cgroup.procs`) or become a child
//! subreaper carrying its tree's tag (the tracked fallback). The executor's own spawner
//! calls [`enter_tracked`] in its child too.
//!
//! Also [`kill_tagged`], which the exec guardian runs when its owner died.
//!
//! Invariant: the code here only makes async-signal-safe system calls on descriptors
//! opened before the fork and on stack memory, and allocates nothing.
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

/// Sends SIGKILL to every process whose `RLIMIT_RTTIME` soft limit `t` has
/// `t >> TREE_BITS == owner >> TREE_BITS` (a tree of the owner whose tags start with
/// `owner`, see [`super::tracked::owner_tags`]), round after round until a round finds none
/// (a process forked meanwhile carries the tag too), at most 64 rounds. Async-signal-safe:
/// for a process forked from a multithreaded one (the exec guardian).
pub(crate) fn kill_tagged(owner: u64) {
    let shift = super::tracked::TREE_BITS;
    for _ in 0..64 {
        if kill_tagged_round(owner >> shift, shift) == 0 {
            return;
        }
    }
}

/// One scan of `/proc`; the number of processes signalled.
fn kill_tagged_round(high: u64, shift: u32) -> usize {
    #[repr(C, align(8))]
    struct Buffer([u8; 4096]);
    let mut killed = 0;
    // SAFETY (whole block): open/getdents64/read/close/pidfd system calls on stack buffers
    // whose lengths are passed; every pointer stays within its buffer.
    unsafe {
        let proc_fd = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if proc_fd < 0 {
            return 0;
        }
        let mut entries = Buffer([0; 4096]);
        loop {
            let n = libc::syscall(
                libc::SYS_getdents64,
                proc_fd,
                entries.0.as_mut_ptr(),
                entries.0.len(),
            );
            let Ok(n) = usize::try_from(n) else { break };
            if n == 0 {
                break;
            }
            let mut offset = 0;
            while offset + 19 < n {
                let record = &entries.0[offset..n];
                let reclen = usize::from(u16::from_ne_bytes([record[16], record[17]]));
                if reclen == 0 {
                    break;
                }
                let name = &record[19..reclen.min(record.len())];
                let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                if let Some(pid) = parse_pid(&name[..len])
                    && kill_if_tagged(pid, &name[..len], high, shift)
                {
                    killed += 1;
                }
                offset += reclen;
            }
        }
        libc::close(proc_fd);
    }
    killed
}

fn parse_pid(name: &[u8]) -> Option<i32> {
    if name.is_empty() || name.len() > 9 {
        return None;
    }
    let mut pid: i32 = 0;
    for &b in name {
        if !b.is_ascii_digit() {
            return None;
        }
        pid = pid * 10 + i32::from(b - b'0');
    }
    Some(pid)
}

/// Pins `pid` with a pidfd, reads its limits and signals it when its tag matches.
fn kill_if_tagged(pid: i32, digits: &[u8], high: u64, shift: u32) -> bool {
    let mut path = [0_u8; 32];
    let (prefix, suffix) = (b"/proc/", b"/limits\0");
    let total = prefix.len() + digits.len() + suffix.len();
    if total > path.len() {
        return false;
    }
    path[..prefix.len()].copy_from_slice(prefix);
    path[prefix.len()..prefix.len() + digits.len()].copy_from_slice(digits);
    path[prefix.len() + digits.len()..total].copy_from_slice(suffix);
    let mut text = [0_u8; 4096];
    // SAFETY: system calls on a NUL-terminated stack path and a stack buffer of the length
    // passed; the descriptors opened here are closed here.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        let Ok(pidfd) = libc::c_int::try_from(pidfd) else {
            return false;
        };
        if pidfd < 0 {
            return false;
        }
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        let mut len = 0;
        if fd >= 0 {
            let n = libc::read(fd, text.as_mut_ptr().cast(), text.len());
            len = usize::try_from(n).unwrap_or(0);
            libc::close(fd);
        }
        let matched = realtime_soft_limit(&text[..len]).is_some_and(|soft| soft >> shift == high);
        if matched {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd,
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0_u32,
            );
        }
        libc::close(pidfd);
        matched
    }
}

/// The soft limit on the `Max realtime timeout` line of `/proc/<pid>/limits` text, when
/// it is a number. Allocates nothing.
fn realtime_soft_limit(text: &[u8]) -> Option<u64> {
    let key = b"Max realtime timeout";
    let start = text.windows(key.len()).position(|w| w == key)? + key.len();
    let mut value: u64 = 0;
    let mut digits = 0;
    for &b in text[start..].iter().skip_while(|b| **b == b' ') {
        if !b.is_ascii_digit() {
            break;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        digits += 1;
    }
    (digits > 0).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_realtime_limit_is_parsed_without_allocating() {
        let text = b"Max realtime priority     0    0\nMax realtime timeout      1125899923619840     unlimited            us\n";
        assert_eq!(realtime_soft_limit(text), Some(1_125_899_923_619_840));
        assert_eq!(
            realtime_soft_limit(b"Max realtime timeout      unlimited   unlimited  us\n"),
            None
        );
        assert_eq!(parse_pid(b"4242"), Some(4242));
        assert_eq!(parse_pid(b"self"), None);
        assert_eq!(parse_pid(b""), None);
    }
}
