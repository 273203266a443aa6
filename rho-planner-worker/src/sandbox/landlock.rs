//! Landlock: the worker handles every file system right (and network and scope rights where
//! the ABI has them) and adds no rule, so no path can be opened, created or changed.
//!
//! Invariant: the rights come from a fixed ABI chosen here ([`TARGET_ABI`], or more when a
//! caller requires it), never from "whatever the kernel has", and the ruleset is created
//! under `HardRequirement`: either every handled right is enforced or the step fails.
//! Landlock does not cover descriptors opened before it, `stat`, or UDP and raw sockets;
//! the descriptor sweep and seccomp cover those.
#![allow(unsafe_code)]

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetStatus, Scope,
};

use super::SandboxError;

/// The ABI whose rights are handled by default when the kernel has it: ABI 5 completes the
/// file system rights (`IoctlDev`), ABI 4 adds TCP bind/connect, ABI 6 adds the abstract
/// socket and signal scopes. ABI 7 adds only audit-log controls, so nothing above 6 is
/// needed.
pub const TARGET_ABI: u32 = 6;

/// The lowest ABI accepted without an explicit requirement: from ABI 3 (`Truncate`) on, no
/// path-based operation on a file escapes Landlock. Older kernels are a refusal in required
/// mode.
pub const DEFAULT_MINIMUM_ABI: u32 = 3;

/// The highest ABI this build of the `landlock` crate can express.
pub const HIGHEST_KNOWN_ABI: u32 = 10;

/// The rights to handle, fixed before anything is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandlockPlan {
    /// The ABI the rights come from.
    pub abi: u32,
    /// File system rights.
    pub fs: BitFlags<AccessFs>,
    /// Network rights (empty below ABI 4).
    pub net: BitFlags<AccessNet>,
    /// Scopes (empty below ABI 6).
    pub scope: BitFlags<Scope>,
}

/// The Landlock ABI of the running kernel, or the errno of the version query (`ENOSYS`:
/// not built in; `EOPNOTSUPP`: built in but disabled at boot).
pub fn kernel_abi() -> std::io::Result<u32> {
    // SAFETY: with a null attribute pointer, size 0 and LANDLOCK_CREATE_RULESET_VERSION the
    // call only returns the ABI version; no memory is read or written and no fd is created.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0_usize,
            1_u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if version < 0 {
        return Err(std::io::Error::last_os_error());
    }
    u32::try_from(version).map_err(|_| std::io::Error::from_raw_os_error(libc::ERANGE))
}

/// Chooses the rights for a kernel at `kernel_abi` (`None`: no Landlock) with an optional
/// explicit minimum. Pure: the same inputs always give the same plan.
pub fn plan(kernel_abi: Option<u32>, required: Option<u32>) -> Result<LandlockPlan, SandboxError> {
    let minimum = required.unwrap_or(DEFAULT_MINIMUM_ABI);
    let feature = format!("Landlock ABI {minimum}");
    let Some(kernel) = kernel_abi else {
        return Err(SandboxError::Unsupported {
            feature,
            reason: "the kernel has no Landlock (not built in or not enabled at boot)".to_owned(),
        });
    };
    if kernel < minimum {
        return Err(SandboxError::Unsupported {
            feature,
            reason: format!("the kernel provides ABI {kernel}"),
        });
    }
    let abi = minimum.max(kernel.min(TARGET_ABI));
    let Some(known) = known_abi(abi) else {
        return Err(SandboxError::Unsupported {
            feature,
            reason: format!("this build knows Landlock ABIs up to {HIGHEST_KNOWN_ABI}"),
        });
    };
    Ok(LandlockPlan {
        abi,
        fs: AccessFs::from_all(known),
        net: AccessNet::from_all(known),
        scope: Scope::from_all(known),
    })
}

fn known_abi(abi: u32) -> Option<ABI> {
    Some(match abi {
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        7 => ABI::V7,
        8 => ABI::V8,
        9 => ABI::V9,
        10 => ABI::V10,
        _ => return None,
    })
}

/// Queries the kernel, plans, and restricts the calling thread.
pub fn enforce(required: Option<u32>) -> Result<String, SandboxError> {
    let kernel = kernel_abi().ok();
    let plan = plan(kernel, required)?;
    apply(&plan)?;
    Ok(format!(
        "ABI {} fully enforced (kernel ABI {}): {} file system rights, {} network rights, {} \
         scopes handled; no rule grants access",
        plan.abi,
        kernel.unwrap_or(0),
        plan.fs.len(),
        plan.net.len(),
        plan.scope.len()
    ))
}

/// Creates a ruleset handling every right of `plan` with no rule, and restricts itself.
pub fn apply(plan: &LandlockPlan) -> Result<(), SandboxError> {
    let abi = plan.abi;
    let wrap = |source| SandboxError::Landlock { abi, source };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(plan.fs)
        .map_err(wrap)?;
    // Under HardRequirement an empty set of rights is an error, so skip what the ABI lacks.
    if !plan.net.is_empty() {
        ruleset = ruleset.handle_access(plan.net).map_err(wrap)?;
    }
    if !plan.scope.is_empty() {
        ruleset = ruleset.scope(plan.scope).map_err(wrap)?;
    }
    let status = ruleset
        .create()
        .map_err(wrap)?
        .restrict_self()
        .map_err(wrap)?;
    if status.ruleset == RulesetStatus::FullyEnforced {
        Ok(())
    } else {
        Err(SandboxError::NotInForce {
            protection: "landlock",
            observed: format!("ruleset status {:?}", status.ruleset),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_kernel_gets_the_target_abi_with_network_and_scope() {
        let plan = plan(Some(7), None).unwrap();
        assert_eq!(plan.abi, TARGET_ABI);
        assert!(
            plan.fs
                .contains(AccessFs::ReadFile | AccessFs::Execute | AccessFs::IoctlDev)
        );
        assert!(plan.fs.contains(AccessFs::Truncate | AccessFs::Refer));
        assert_eq!(plan.net, AccessNet::BindTcp | AccessNet::ConnectTcp);
        assert_eq!(plan.scope, Scope::AbstractUnixSocket | Scope::Signal);
    }

    #[test]
    fn older_kernel_gets_its_own_abi_without_network() {
        let plan = plan(Some(3), None).unwrap();
        assert_eq!(plan.abi, 3);
        assert!(plan.fs.contains(AccessFs::Truncate));
        assert!(plan.net.is_empty() && plan.scope.is_empty());
    }

    #[test]
    fn kernel_below_the_minimum_is_refused() {
        let error = plan(Some(2), None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "Landlock ABI 3 is unavailable: the kernel provides ABI 2"
        );
        let error = plan(None, None).unwrap_err();
        assert!(error.to_string().contains("no Landlock"), "{error}");
    }

    #[test]
    fn explicit_requirement_beyond_the_kernel_is_refused() {
        let error = plan(Some(7), Some(99)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "Landlock ABI 99 is unavailable: the kernel provides ABI 7"
        );
        let error = plan(Some(200), Some(99)).unwrap_err();
        assert!(error.to_string().contains("up to 10"), "{error}");
    }

    #[test]
    fn explicit_requirement_above_target_raises_the_abi() {
        assert_eq!(plan(Some(7), Some(7)).unwrap().abi, 7);
        assert_eq!(plan(Some(7), Some(1)).unwrap().abi, TARGET_ABI);
    }
}
