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

/// Closes every descriptor above 2 (`close_range(3, ~0, 0)`, or a loop up to the open-files
/// limit on kernels older than 5.9).
pub fn close_above_stderr() -> Result<String, SandboxError> {
    let open_before = open_above_stderr();
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
    let still_open = open_above_stderr();
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
/// file system access and is the only `fcntl` command the seccomp allowlist lets through.
pub fn open_above_stderr() -> Vec<i32> {
    (3..INSPECT_LIMIT)
        .filter(|&fd| {
            // SAFETY: F_GETFD only reads the descriptor's flags; any integer is acceptable
            // and a closed one answers EBADF.
            unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
        })
        .collect()
}
