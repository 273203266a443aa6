//! `no_new_privs` and the capability drop.
//!
//! Invariant: after this step the worker holds no capability in any set (bounding, ambient,
//! effective, permitted, inheritable) and can never gain one: `no_new_privs` stops execve
//! from granting privileges, and an empty bounding set stops any later gain as root.
//!
//! Order matters: the bounding set is dropped first, because `PR_CAPBSET_DROP` needs
//! `CAP_SETPCAP`, which the final `capset` removes.
#![allow(unsafe_code)]

use super::SandboxError;

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Sets `PR_SET_NO_NEW_PRIVS` and reads it back.
pub fn set_no_new_privs() -> Result<String, SandboxError> {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(SandboxError::last_os_error("prctl(PR_SET_NO_NEW_PRIVS, 1)"));
    }
    // SAFETY: as above.
    match unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) } {
        1 => Ok("no_new_privs set".to_owned()),
        other => Err(SandboxError::NotInForce {
            protection: "no_new_privs",
            observed: format!("PR_GET_NO_NEW_PRIVS answered {other}"),
        }),
    }
}

/// Drops every capability from every set, then verifies all sets are empty.
///
/// A process that is not root usually lacks `CAP_SETPCAP` and so cannot shrink its bounding
/// set; that is accepted only when its permitted set is empty and `no_new_privs` is set,
/// because then no capability can ever become effective.
pub fn drop_capabilities() -> Result<String, SandboxError> {
    let last = last_capability();
    let mut bounding_kept = 0_u32;
    for cap in 0..=last {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EPERM) {
                return Err(SandboxError::Syscall {
                    call: format!("prctl(PR_CAPBSET_DROP, {cap})"),
                    source: error,
                });
            }
            bounding_kept += 1;
        }
    }
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    // EINVAL: a kernel before 4.3 has no ambient set, which is as good as an empty one.
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
        return Err(SandboxError::last_os_error(
            "prctl(PR_CAP_AMBIENT, CLEAR_ALL)",
        ));
    }
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let empty = [CapData::default(); 2];
    // SAFETY: capset reads one header and two data structs (version 3), which live on this
    // stack frame with the kernel's layout (`repr(C)`).
    let rc = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, empty.as_ptr()) };
    if rc != 0 {
        return Err(SandboxError::last_os_error("capset(all sets empty)"));
    }
    verify(last, bounding_kept)
}

/// The highest capability number this kernel knows: `PR_CAPBSET_READ` answers EINVAL past
/// it. Reading `/proc/sys/kernel/cap_last_cap` would need the file system.
fn last_capability() -> libc::c_int {
    let mut last = 0;
    // 64 is the width of the capability sets; no kernel defines more.
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) } < 0 {
            break;
        }
        last = cap;
    }
    last
}

fn verify(last: libc::c_int, bounding_kept: u32) -> Result<String, SandboxError> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut sets = [CapData::default(); 2];
    // SAFETY: capget writes two data structs (version 3) into `sets`, which has exactly that
    // size and layout, and reads the header.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &raw mut header, sets.as_mut_ptr()) };
    if rc != 0 {
        return Err(SandboxError::last_os_error("capget"));
    }
    if sets != [CapData::default(); 2] {
        let word = |f: fn(&CapData) -> u32| (u64::from(f(&sets[1])) << 32) | u64::from(f(&sets[0]));
        return Err(SandboxError::NotInForce {
            protection: "capabilities",
            observed: format!(
                "effective {:#x}, permitted {:#x}, inheritable {:#x}",
                word(|d| d.effective),
                word(|d| d.permitted),
                word(|d| d.inheritable)
            ),
        });
    }
    let ambient: Vec<libc::c_int> = (0..=last)
        .filter(|&cap| {
            // SAFETY: prctl with integer arguments only.
            let set = unsafe {
                libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_IS_SET, cap, 0, 0)
            };
            set > 0
        })
        .collect();
    if !ambient.is_empty() {
        return Err(SandboxError::NotInForce {
            protection: "capabilities",
            observed: format!("ambient capabilities still set: {ambient:?}"),
        });
    }
    let bounding: Vec<libc::c_int> = (0..=last)
        .filter(|&cap| {
            // SAFETY: prctl with integer arguments only.
            let held = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) };
            held > 0
        })
        .collect();
    if bounding.is_empty() {
        return Ok(format!(
            "all capability sets empty (bounding set dropped for capabilities 0..={last})"
        ));
    }
    // SAFETY: prctl with integer arguments only.
    let no_new_privs = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) } == 1;
    if no_new_privs {
        Ok(format!(
            "effective, permitted, inheritable and ambient sets empty; {bounding_kept} \
             capabilities kept in the bounding set (dropping needs CAP_SETPCAP), unreachable \
             under no_new_privs"
        ))
    } else {
        Err(SandboxError::NotInForce {
            protection: "capabilities",
            observed: format!("bounding set still holds {bounding:?} without no_new_privs"),
        })
    }
}
