//! Probes: try one forbidden operation inside the hardened worker and report the kernel's
//! answer. They prove protections to `rho doctor` and the sandbox tests; they grant nothing.
//!
//! Invariant: a probe that unexpectedly succeeds undoes its effect at once (closes the
//! descriptor, ends the child) and reports `succeeded: true` as a protection gap; it never
//! acts on the host's behalf.
#![allow(unsafe_code)]

use std::ffi::CString;

use rho_ipc::message::{ProbeResult, SandboxProbe};

use super::fds;

/// Runs `probe` in the calling (hardened) process.
pub fn run(probe: &SandboxProbe) -> ProbeResult {
    let mut result = ProbeResult {
        probe: probe.clone(),
        succeeded: false,
        errno: None,
        environment_len: None,
        open_fds_above_2: Vec::new(),
        parent_death_signal: None,
    };
    let outcome = match probe {
        SandboxProbe::Open { path } => open(path),
        SandboxProbe::Socket => socket(),
        SandboxProbe::Execve { path } => execve(path),
        SandboxProbe::Fork => fork(),
        SandboxProbe::Signal { pid } => signal(*pid),
        SandboxProbe::Inspect => {
            result.environment_len = Some(std::env::vars_os().count() as u64);
            result.open_fds_above_2 = fds::open_above_stderr();
            result.parent_death_signal = parent_death_signal();
            result.succeeded = true;
            return result;
        }
    };
    match outcome {
        Ok(()) => result.succeeded = true,
        Err(errno) => result.errno = Some(errno),
    }
    result
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn c_path(path: &str) -> Result<CString, i32> {
    CString::new(path).map_err(|_| libc::EINVAL)
}

fn open(path: &str) -> Result<(), i32> {
    let path = c_path(path)?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: `fd` was just returned by open and is owned by nobody else.
    unsafe { libc::close(fd) };
    Ok(())
}

fn socket() -> Result<(), i32> {
    // SAFETY: socket takes integers only.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: `fd` was just returned by socket and is owned by nobody else.
    unsafe { libc::close(fd) };
    Ok(())
}

fn execve(path: &str) -> Result<(), i32> {
    let path = c_path(path)?;
    let argv = [path.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    // SAFETY: `path`, `argv` and `envp` are NUL-terminated and outlive the call. On success
    // the process image is replaced (the host then sees no probe answer: a gap it reports).
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    Err(last_errno())
}

fn signal(pid: i32) -> Result<(), i32> {
    // SAFETY: kill takes integers only; signal 0 checks permission and delivers nothing.
    if unsafe { libc::kill(pid, 0) } == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

fn parent_death_signal() -> Option<i32> {
    let mut signal: libc::c_int = 0;
    // SAFETY: PR_GET_PDEATHSIG writes one c_int through the pointer, which points to a live
    // local.
    let rc = unsafe { libc::prctl(libc::PR_GET_PDEATHSIG, &raw mut signal, 0, 0, 0) };
    (rc == 0).then_some(signal)
}

fn fork() -> Result<(), i32> {
    // SAFETY: the child only calls `_exit`, which is async-signal-safe, so forking a
    // process that may have other threads is sound.
    match unsafe { libc::fork() } {
        -1 => Err(last_errno()),
        0 => {
            // SAFETY: ends the child at once without running destructors or atexit hooks.
            unsafe { libc::_exit(0) }
        }
        child => {
            let mut status = 0;
            // SAFETY: reaps our own child; `status` is a live local. If wait4 is denied
            // the child stays a zombie until the worker exits, which is harmless.
            unsafe { libc::waitpid(child, &raw mut status, 0) };
            Ok(())
        }
    }
}
