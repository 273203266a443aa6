//! Inherited descriptors: the worker keeps its three pipes and nothing else.
//!
//! Invariant: after [`close_above_stderr`] succeeds, no descriptor above 2 is open, so a
//! descriptor leaked by the host (or by whoever started the host) cannot be reached from
//! Starlark even through a bug; Landlock does not cover descriptors opened before it.
#![allow(unsafe_code)]

use super::SandboxError;

/// How far [`open_above_stderr`] looks. Hardening closes everything, and seccomp forbids
/// every call that creates a descriptor, so a scan of this size is exhaustive in practice.
pub const INSPECT_LIMIT: i32 = 1024;

/// Descriptors one `poll` call inspects. `poll` refuses (EINVAL) a list longer than the
/// open-files soft limit, which whoever started the host may have set low; a refused chunk
/// is inspected one descriptor at a time instead.
const POLL_CHUNK: usize = 64;

/// Closes every descriptor above 2 (`close_range(3, ~0, 0)`, or a loop up to the open-files
/// limit on kernels older than 5.9).
pub fn close_above_stderr() -> Result<String, SandboxError> {
    let open_before = open_above_stderr_polled();
    // SAFETY: close_range takes plain integers; closing descriptors this process does not
    // use any more is the intent (std holds none above 2 at this point: `main` calls us
    // before opening anything, and the only file read so far was closed on drop).
    let rc = unsafe { libc::syscall(libc::SYS_close_range, 3_u32, u32::MAX, 0_u32) };
    if rc != 0 {
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ENOSYS) {
            return Err(SandboxError::Syscall {
                call: "close_range(3, ~0, 0)".to_owned(),
                source: error,
            });
        }
        let (limit, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).map_err(|source| {
            SandboxError::Syscall {
                call: "getrlimit(RLIMIT_NOFILE)".to_owned(),
                source,
            }
        })?;
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        for fd in 3..limit {
            // SAFETY: as above; EBADF for descriptors that are not open is expected.
            unsafe { libc::close(fd) };
        }
    }
    let still_open = open_above_stderr_polled();
    if !still_open.is_empty() {
        return Err(SandboxError::NotInForce {
            protection: "close_fds",
            observed: format!("descriptors still open: {still_open:?}"),
        });
    }
    Ok(if open_before.is_empty() {
        "no descriptor above 2 was open".to_owned()
    } else {
        format!("closed inherited descriptors {open_before:?}")
    })
}

/// The open descriptors in `3..INSPECT_LIMIT`, found with `fcntl(F_GETFD)`, which needs no
/// file system access and is the only `fcntl` command the seccomp allowlist lets through
/// (the Inspect probe runs under the filter).
pub fn open_above_stderr() -> Vec<i32> {
    (3..INSPECT_LIMIT).filter(|&fd| is_open(fd)).collect()
}

/// The same answer as [`open_above_stderr`] in 16 `poll` calls instead of 1,021 `fcntl`
/// calls, for hardening, which runs before the seccomp filter (that does not allow `poll`)
/// and checks twice: the scans were a tenth of the worker's start-up system time.
fn open_above_stderr_polled() -> Vec<i32> {
    let mut open = Vec::new();
    let mut first = 3;
    while first < INSPECT_LIMIT {
        let mut list = [libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        }; POLL_CHUNK];
        let mut len = 0;
        for (slot, fd) in list.iter_mut().zip(first..INSPECT_LIMIT) {
            slot.fd = fd;
            len += 1;
        }
        let chunk = &mut list[..len];
        // SAFETY: `chunk` is a valid array of `len` pollfd entries that outlives the call; a
        // zero timeout never blocks, and no event is asked for: the kernel only marks the
        // entries whose descriptor is not open with POLLNVAL.
        let ready = unsafe { libc::poll(chunk.as_mut_ptr(), len as libc::nfds_t, 0) };
        if ready < 0 {
            open.extend(chunk.iter().map(|entry| entry.fd).filter(|&fd| is_open(fd)));
        } else {
            open.extend(
                chunk
                    .iter()
                    .filter(|entry| entry.revents & libc::POLLNVAL == 0)
                    .map(|entry| entry.fd),
            );
        }
        first = first.saturating_add(i32::try_from(len).unwrap_or(i32::MAX));
    }
    open
}

fn is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD only reads the descriptor's flags; any integer is acceptable and a
    // closed one answers EBADF.
    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_and_fcntl_scans_agree_on_a_descriptor_opened_and_closed() {
        // A high number no other test of this process reaches, so the scans (which see the
        // whole process) can be compared while other tests open files.
        // SAFETY: F_DUPFD_CLOEXEC duplicates stdin to the lowest free number >= 900.
        let fd = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 900) };
        assert!(fd >= 900, "dup failed: {}", std::io::Error::last_os_error());
        assert!(open_above_stderr_polled().contains(&fd));
        assert!(open_above_stderr().contains(&fd));
        // SAFETY: `fd` was opened above and is closed once.
        assert_eq!(unsafe { libc::close(fd) }, 0);
        assert!(!open_above_stderr_polled().contains(&fd));
        assert!(!open_above_stderr().contains(&fd));
    }

    #[test]
    fn the_poll_scan_covers_every_number_up_to_the_limit() {
        // SAFETY: as above, at the very last number the scans look at.
        let fd = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, INSPECT_LIMIT - 1) };
        assert_eq!(fd, INSPECT_LIMIT - 1, "{}", std::io::Error::last_os_error());
        let found = open_above_stderr_polled();
        // SAFETY: opened above, closed once.
        assert_eq!(unsafe { libc::close(fd) }, 0);
        assert!(found.contains(&fd), "{found:?}");
        assert!(found.iter().all(|&n| (3..INSPECT_LIMIT).contains(&n)));
    }
}
