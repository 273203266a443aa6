//! The raw system calls of confinement: Landlock's three calls, `prctl` and `seccomp`.
//! The `landlock` and `seccompiler` crates allocate when they apply a ruleset or filter,
//! which a child between `fork` and `exec` must not do, so the child side is written here
//! by hand on state the parent prepared.
//!
//! Invariant: [`apply`] allocates nothing, takes no lock and touches only its arguments; it
//! may run in a `CLONE_VM` child or a `pre_exec` hook.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::Arc;

use super::{Confinement, ConfinementError, ConfinementPlan, RuleTarget};

/// `LANDLOCK_CREATE_RULESET_VERSION`.
const CREATE_RULESET_VERSION: u32 = 1;
/// `LANDLOCK_RULE_PATH_BENEATH`.
const RULE_PATH_BENEATH: u32 = 1;
/// `SECCOMP_SET_MODE_FILTER`.
const SECCOMP_SET_MODE_FILTER: u32 = 1;

/// `struct landlock_ruleset_attr` (ABI 6 layout; older kernels accept the larger size when
/// the fields they do not know are zero).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the UAPI).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The step of [`apply`] that failed and the errno the kernel gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildFailure {
    /// `prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self` or `seccomp`.
    pub step: &'static str,
    /// The error number.
    pub errno: i32,
}

fn errno() -> i32 {
    // SAFETY: errno's location is valid for the calling thread.
    unsafe { *libc::__errno_location() }
}

/// The kernel's Landlock ABI, or the errno of the version query (`ENOSYS`: not built in;
/// `EOPNOTSUPP`: disabled at boot).
pub fn landlock_abi() -> io::Result<u32> {
    // SAFETY: with a null attribute, size 0 and the VERSION flag the call only returns the
    // ABI version; no memory is read or written and no descriptor is created.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0_usize,
            CREATE_RULESET_VERSION,
        )
    };
    if version < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(version).map_err(|_| io::Error::from_raw_os_error(libc::ERANGE))
}

/// Whether the kernel was built with seccomp (`PR_GET_SECCOMP` answers instead of `EINVAL`).
pub fn seccomp_available() -> bool {
    // SAFETY: PR_GET_SECCOMP takes no pointer and only reports the calling thread's mode.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    mode >= 0
}

fn open_path(path: &Path, directory: bool) -> Result<OwnedFd, ConfinementError> {
    let open_error = |source| ConfinementError::Open {
        path: path.to_owned(),
        source,
    };
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| open_error(io::Error::from_raw_os_error(libc::EINVAL)))?;
    let mut flags = libc::O_PATH | libc::O_CLOEXEC;
    if directory {
        flags |= libc::O_DIRECTORY | libc::O_NOFOLLOW;
    }
    // SAFETY: `c_path` is NUL-terminated and outlives the call.
    let fd = unsafe { libc::open(c_path.as_ptr(), flags) };
    if fd < 0 {
        return Err(open_error(io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just returned by open; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Creates the ruleset of `plan` and adds its rules (`scratch` for [`RuleTarget::Scratch`]).
/// The descriptor is close-on-exec, so the confined program never holds it.
pub fn build_ruleset(plan: &ConfinementPlan, scratch: &Path) -> Result<OwnedFd, ConfinementError> {
    let attr = RulesetAttr {
        handled_access_fs: plan.handled_fs,
        handled_access_net: plan.handled_net,
        scoped: plan.scoped,
    };
    // SAFETY: `attr` is a live, correctly laid out struct of the size passed; the kernel
    // only reads it. The result is checked below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &raw const attr,
            std::mem::size_of::<RulesetAttr>(),
            0_u32,
        )
    };
    if fd < 0 {
        return Err(ConfinementError::Syscall {
            call: "landlock_create_ruleset",
            source: io::Error::last_os_error(),
        });
    }
    let fd = i32::try_from(fd).map_err(|_| ConfinementError::Syscall {
        call: "landlock_create_ruleset",
        source: io::Error::from_raw_os_error(libc::EBADF),
    })?;
    // SAFETY: the kernel just returned this new (close-on-exec) descriptor.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd) };
    for rule in &plan.rules {
        let target = match rule.target {
            RuleTarget::Root => open_path(Path::new("/"), true)?,
            RuleTarget::Scratch => open_path(scratch, true)?,
            RuleTarget::DevNull => open_path(Path::new("/dev/null"), false)?,
        };
        let beneath = PathBeneathAttr {
            allowed_access: rule.access,
            parent_fd: target.as_raw_fd(),
        };
        // SAFETY: both descriptors are open; `beneath` is a live packed struct the kernel
        // only reads.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                RULE_PATH_BENEATH,
                &raw const beneath,
                0_u32,
            )
        };
        if r < 0 {
            return Err(ConfinementError::Syscall {
                call: "landlock_add_rule",
                source: io::Error::last_os_error(),
            });
        }
    }
    Ok(ruleset)
}

/// Restricts the calling thread: `no_new_privs` (required by both Landlock and seccomp for
/// an unprivileged caller, and so that no set-id program regains what is taken), then the
/// ruleset, then the filter. Async-signal-safe.
pub fn apply(
    ruleset: Option<&OwnedFd>,
    filter: Option<&[seccompiler::sock_filter]>,
) -> Result<(), ChildFailure> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
        return Err(ChildFailure {
            step: "prctl(PR_SET_NO_NEW_PRIVS)",
            errno: errno(),
        });
    }
    if let Some(ruleset) = ruleset {
        // SAFETY: an open ruleset descriptor and flags 0.
        let r =
            unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0_u32) };
        if r < 0 {
            return Err(ChildFailure {
                step: "landlock_restrict_self",
                errno: errno(),
            });
        }
    }
    if let Some(filter) = filter {
        let program = libc::sock_fprog {
            len: u16::try_from(filter.len()).map_err(|_| ChildFailure {
                step: "seccomp",
                errno: libc::E2BIG,
            })?,
            // seccompiler's `sock_filter` is `#[repr(C)]` with the kernel's layout.
            filter: filter.as_ptr().cast::<libc::sock_filter>().cast_mut(),
        };
        // SAFETY: `program` points at the live instructions of `filter`; the kernel copies
        // them and keeps no pointer.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                SECCOMP_SET_MODE_FILTER,
                0_u32,
                &raw const program,
            )
        };
        if r < 0 {
            return Err(ChildFailure {
                step: "seccomp",
                errno: errno(),
            });
        }
    }
    Ok(())
}

/// Fails unless a seccomp filter is in force on the calling thread (`PR_GET_SECCOMP`
/// answers 2, `SECCOMP_MODE_FILTER`). Async-signal-safe.
pub fn check_filtered() -> Result<(), ChildFailure> {
    // SAFETY: PR_GET_SECCOMP takes no pointer and only reports the calling thread's mode.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if mode == 2 {
        return Ok(());
    }
    Err(ChildFailure {
        step: "seccomp",
        errno: if mode < 0 { errno() } else { libc::EPERM },
    })
}

/// Installs `confinement` as a `pre_exec` hook of `command`.
pub fn install(confinement: Arc<Confinement>, command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the hook runs in the child between fork and exec and only calls
    // `apply_in_child`, which allocates nothing and takes no lock; the error it returns is
    // built from a raw errno (no allocation).
    unsafe {
        command.pre_exec(move || {
            confinement
                .apply_in_child()
                .map_err(|failure| io::Error::from_raw_os_error(failure.errno))
        });
    }
}

/// Whether the directory open as `dir` holds nothing but `.` and `..`, read from its start
/// (`lseek` back to 0, then `getdents64`): the inode itself is read, whatever its path now
/// names.
pub fn directory_is_empty(dir: BorrowedFd<'_>) -> io::Result<bool> {
    /// `struct linux_dirent64`: `d_ino` (8), `d_off` (8), `d_reclen` (2), `d_type` (1),
    /// then the NUL-terminated name.
    const RECLEN_AT: usize = 16;
    const NAME_AT: usize = 19;
    // SAFETY: lseek on an open descriptor; no memory is passed.
    if unsafe { libc::lseek(dir.as_raw_fd(), 0, libc::SEEK_SET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0_u8; 1024];
    loop {
        // SAFETY: `buf` is writable for the length passed; the kernel writes at most that.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let filled = usize::try_from(n).unwrap_or(0).min(buf.len());
        if filled == 0 {
            return Ok(true);
        }
        let mut at = 0;
        while at + NAME_AT < filled {
            let reclen = usize::from(u16::from_ne_bytes([
                buf[at + RECLEN_AT],
                buf[at + RECLEN_AT + 1],
            ]));
            let end = (at + reclen).min(filled);
            if reclen <= NAME_AT || end <= at + NAME_AT {
                // A record the kernel cannot have written: do not trust the directory.
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let raw = &buf[at + NAME_AT..end];
            let name = raw.split(|&b| b == 0).next().unwrap_or(raw);
            if name != b"." && name != b".." {
                return Ok(false);
            }
            at += reclen;
        }
    }
}
