//! The parent-death signal: the worker must not outlive the host that spawned it.
//!
//! Invariant: `PR_SET_PDEATHSIG` is set before the parent is checked, so a parent that dies
//! after the check still kills the worker, and one that died before it is detected.
#![allow(unsafe_code)]

use super::SandboxError;

/// The parent died before the worker could bind its life to it.
#[derive(Debug)]
pub struct ParentGone {
    /// What was observed.
    pub detail: String,
}

/// The outcome of [`set_parent_death_signal`].
#[derive(Debug)]
pub struct ParentDeath {
    /// The protection status: whether the signal is armed.
    pub result: Result<String, SandboxError>,
    /// `Err` when the parent is already gone: nobody will read the report, so the worker
    /// must stop in every mode.
    pub gone: Result<(), ParentGone>,
}

/// Arms `SIGKILL` on parent death, then checks the parent is still the one we expect:
/// `expected_parent` when the host passed its pid, else the parent seen before arming.
pub fn set_parent_death_signal(expected_parent: Option<i32>) -> ParentDeath {
    // SAFETY: getppid has no preconditions and cannot fail.
    let before = unsafe { libc::getppid() };
    let expected = expected_parent.unwrap_or(before);
    // SAFETY: PR_SET_PDEATHSIG takes a signal number by value; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if rc != 0 {
        return ParentDeath {
            result: Err(SandboxError::last_os_error(
                "prctl(PR_SET_PDEATHSIG, SIGKILL)",
            )),
            gone: Ok(()),
        };
    }
    // SAFETY: as above.
    let after = unsafe { libc::getppid() };
    let mut signal: libc::c_int = 0;
    // SAFETY: PR_GET_PDEATHSIG writes one c_int through the pointer, which points to a live
    // local of that type.
    let rc = unsafe { libc::prctl(libc::PR_GET_PDEATHSIG, &raw mut signal, 0, 0, 0) };
    let result = if rc != 0 {
        Err(SandboxError::last_os_error("prctl(PR_GET_PDEATHSIG)"))
    } else if signal == libc::SIGKILL {
        Ok(format!("SIGKILL when parent {after} exits"))
    } else {
        Err(SandboxError::NotInForce {
            protection: "parent_death_signal",
            observed: format!("death signal is {signal}, not SIGKILL"),
        })
    };
    let gone = if after == expected {
        Ok(())
    } else {
        Err(ParentGone {
            detail: format!("parent {expected} is gone (the worker was reparented to {after})"),
        })
    };
    ParentDeath { result, gone }
}
