//! Inherited descriptors: `rho` marks every descriptor above 2 that it inherited
//! close-on-exec before doing anything else, so nothing a parent process leaked into `rho`
//! (a pipe end, a socket, an open file) reaches the planner worker, command nodes or agent
//! runtimes that `rho` starts.
//!
//! Invariant: called first in `main`, before `rho` opens a descriptor of its own; the
//! descriptors stay usable by `rho` itself (only `FD_CLOEXEC` is set, nothing is closed),
//! and every descriptor `rho` opens later is close-on-exec already (the standard library
//! and `nix` calls here use `O_CLOEXEC`).
#![allow(unsafe_code)]

use std::io;

/// Marks every descriptor above 2 close-on-exec: `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`,
/// or, on kernels without it (before 5.11), `fcntl(F_SETFD)` on each entry of
/// `/proc/self/fd`.
pub fn mark_inherited_cloexec() -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC takes plain integers and only sets a
    // flag on the descriptors in the range; it closes nothing and touches no memory. The
    // raw system call is used so that a C library without the wrapper still links.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3_u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::ENOSYS | libc::EINVAL) => mark_each_cloexec(),
        _ => Err(error),
    }
}

/// The fallback: every open descriptor above 2 listed in `/proc/self/fd`.
fn mark_each_cloexec() -> io::Result<()> {
    // Collect first: the directory stream itself holds a (close-on-exec) descriptor that
    // disappears when it is dropped.
    let fds: Vec<libc::c_int> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: F_GETFD/F_SETFD read and set the descriptor flags of a plain integer; a
        // descriptor that is no longer open (the directory stream's) answers EBADF, which
        // is ignored.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags < 0 {
            continue;
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EBADF) {
                return Err(error);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd as _;

    use super::*;

    fn cloexec(fd: libc::c_int) -> bool {
        // SAFETY: reads the flags of a descriptor this test owns.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert!(flags >= 0);
        flags & libc::FD_CLOEXEC != 0
    }

    fn clear_cloexec(fd: libc::c_int) {
        // SAFETY: clears the flag on a descriptor this test owns.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
    }

    #[test]
    fn both_ways_mark_inherited_descriptors_without_closing_them() {
        let file = tempfile::tempfile().unwrap();
        let fd = file.as_raw_fd();
        clear_cloexec(fd);
        assert!(!cloexec(fd));
        mark_inherited_cloexec().unwrap();
        assert!(cloexec(fd));
        clear_cloexec(fd);
        mark_each_cloexec().unwrap();
        assert!(cloexec(fd));
        assert!(file.metadata().is_ok(), "the descriptor stays open");
    }
}
