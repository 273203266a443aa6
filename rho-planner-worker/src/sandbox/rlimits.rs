//! Resource limits: address space, CPU time, file size, open files, core dumps.
//!
//! Invariant: soft and hard limits are lowered together, so the worker cannot raise them
//! again (raising a hard limit needs `CAP_SYS_RESOURCE`, which the next step drops anyway).
//!
//! Choices: `RLIMIT_FSIZE` is 0 because the worker writes to pipes only (the limit does not
//! apply to pipes), and `SIGXFSZ` is ignored so that a misuse such as redirecting stdout to
//! a regular file fails with `EFBIG` instead of killing the worker silently.
//! `RLIMIT_NPROC` is not set: it counts every thread of every process of the user (so it
//! would stop the evaluation thread of a user with many processes) and does not apply to
//! root; seccomp is what forbids `fork`.
#![allow(unsafe_code)]

use rlimit::Resource;

use super::{HardeningOptions, SandboxError};

/// Descriptors the worker may hold: its three pipes plus room for the Landlock ruleset
/// descriptor that hardening creates after this step. Seccomp forbids every other call
/// that creates one.
pub const OPEN_FILES_LIMIT: u64 = 8;

/// One limit to set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitSetting {
    /// The resource.
    pub resource: Resource,
    /// The soft limit.
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
}

/// The limits for `options`, in the order they are applied.
pub fn plan(options: &HardeningOptions) -> Vec<LimitSetting> {
    let fixed = |resource, value| LimitSetting {
        resource,
        soft: value,
        hard: value,
    };
    vec![
        fixed(Resource::AS, options.address_space_bytes),
        // At the soft limit the kernel sends SIGXCPU (fatal by default), at the hard limit
        // SIGKILL.
        LimitSetting {
            resource: Resource::CPU,
            soft: options.cpu_seconds,
            hard: options.cpu_seconds.saturating_add(1),
        },
        fixed(Resource::FSIZE, 0),
        fixed(Resource::NOFILE, OPEN_FILES_LIMIT),
        fixed(Resource::CORE, 0),
    ]
}

/// Applies `settings`, then reads each limit back.
pub fn apply(settings: &[LimitSetting]) -> Result<String, SandboxError> {
    // SAFETY: installing SIG_IGN for SIGXFSZ registers no handler code; nothing else in the
    // process relies on this signal.
    if unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(SandboxError::last_os_error("signal(SIGXFSZ, SIG_IGN)"));
    }
    let mut applied = Vec::with_capacity(settings.len());
    for setting in settings {
        let name = setting.resource.as_name();
        setting
            .resource
            .set(setting.soft, setting.hard)
            .map_err(|source| SandboxError::Syscall {
                call: format!("setrlimit({name}, {}, {})", setting.soft, setting.hard),
                source,
            })?;
        let observed = setting
            .resource
            .get()
            .map_err(|source| SandboxError::Syscall {
                call: format!("getrlimit({name})"),
                source,
            })?;
        if observed != (setting.soft, setting.hard) {
            return Err(SandboxError::NotInForce {
                protection: "rlimits",
                observed: format!("{name} is {observed:?}"),
            });
        }
        applied.push(if setting.soft == setting.hard {
            format!("{name}={}", setting.soft)
        } else {
            format!("{name}={}/{}", setting.soft, setting.hard)
        });
    }
    Ok(applied.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_sets_each_limit_from_the_options() {
        let options = HardeningOptions {
            address_space_bytes: 1 << 30,
            cpu_seconds: 12,
            ..HardeningOptions::default()
        };
        let plan = plan(&options);
        let find = |resource| {
            plan.iter()
                .find(|s| s.resource == resource)
                .copied()
                .unwrap()
        };
        assert_eq!(
            (find(Resource::AS).soft, find(Resource::AS).hard),
            (1 << 30, 1 << 30)
        );
        assert_eq!(
            (find(Resource::CPU).soft, find(Resource::CPU).hard),
            (12, 13)
        );
        assert_eq!(find(Resource::FSIZE).hard, 0);
        assert_eq!(find(Resource::CORE).hard, 0);
        assert_eq!(find(Resource::NOFILE).hard, OPEN_FILES_LIMIT);
        assert!(plan.iter().all(|s| s.resource != Resource::NPROC));
    }

    #[test]
    fn soft_limit_never_exceeds_hard_limit() {
        let options = HardeningOptions {
            cpu_seconds: u64::MAX,
            ..HardeningOptions::default()
        };
        assert!(plan(&options).iter().all(|s| s.soft <= s.hard));
    }
}
