//! The seccomp allowlist, installed last: after it, the worker can read its request, write
//! its answers, manage memory, run threads and die, and nothing else.
//!
//! Two filters are installed. The first answers `clone3` with `ENOSYS`: its flags live in
//! memory a filter cannot inspect, and glibc falls back to `clone` (whose flags it can
//! inspect) only on `ENOSYS`, not on `EPERM`. The second is the allowlist; every other call
//! fails with `EPERM`. An `errno` answer rather than `SIGSYS` keeps a blocked call visible
//! as an ordinary error that the worker reports (and that tests can check), instead of a
//! death that the host can only call a crash; either way the call does not happen.
//!
//! The kernel runs every filter and keeps the answer of highest precedence (any `errno`
//! beats allow), so `clone3` passing the allowlist still gets `ENOSYS` from the first filter.
//!
//! Invariant: the rule tables below are pure data built by functions without I/O, unit-tested
//! by running the compiled BPF in a small interpreter; the list was measured with
//! `strace -f` on a worker that evaluates a plan (see [`allowlist`]), and each entry says why
//! it is needed. Nothing that names a path, creates a descriptor, a process or a socket, or
//! changes credentials is on it.
#![allow(unsafe_code)]

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::SandboxError;

/// Which argument values a permitted call may have (32-bit comparisons: every argument
/// checked here is an `int` or has its meaningful bits in the low word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgRule {
    /// Any arguments.
    Any,
    /// Argument `index` equals one of `values`.
    OneOf {
        /// Argument position (0-based).
        index: u8,
        /// The accepted values.
        values: Vec<u64>,
    },
    /// Argument `index` has every bit of `bits` set.
    AllBitsSet {
        /// Argument position (0-based).
        index: u8,
        /// The required bits.
        bits: u64,
    },
    /// Argument `index` has no bit of `bits` set.
    NoBitsSet {
        /// Argument position (0-based).
        index: u8,
        /// The forbidden bits.
        bits: u64,
    },
}

/// One permitted system call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedCall {
    /// The call's name.
    pub name: &'static str,
    /// Its number on this architecture.
    pub number: i64,
    /// The argument restriction.
    pub only: ArgRule,
    /// Why the worker needs it.
    pub why: &'static str,
}

/// The calls answered with `ENOSYS` by the first filter.
pub fn enosys_calls() -> Vec<(&'static str, i64)> {
    vec![("clone3", libc::SYS_clone3)]
}

fn any(name: &'static str, number: i64, why: &'static str) -> AllowedCall {
    AllowedCall {
        name,
        number,
        only: ArgRule::Any,
        why,
    }
}

fn one_of(
    name: &'static str,
    number: i64,
    index: u8,
    values: Vec<u64>,
    why: &'static str,
) -> AllowedCall {
    AllowedCall {
        name,
        number,
        only: ArgRule::OneOf { index, values },
        why,
    }
}

fn bits(value: libc::c_int) -> u64 {
    u64::from(value.unsigned_abs())
}

/// The allowlist for a process whose pid is `pid`.
///
/// Measured with `strace -f` on a worker that hardens, receives a plan request with a
/// `load()`, a 900 KB module answer and large strings, evaluates on its big-stack thread
/// and answers. Seen after the filter: read, write, mmap, mprotect, munmap, madvise, brk,
/// futex, clone3 (ENOSYS) then clone, set_robust_list, rseq, sigaltstack, rt_sigprocmask,
/// rt_sigaction, getrandom, sched_getaffinity, exit, exit_group. Added for rare but
/// legitimate paths: clock_gettime (the deadline when the vDSO cannot answer; std panics
/// if it fails), getpid/gettid/tgkill (abort), fcntl(F_GETFD) (the Inspect probe).
/// Seen and left denied, because glibc falls back cleanly: `openat` of
/// `/proc/sys/vm/overcommit_memory` (arena shrink policy). Not needed: `mremap` (glibc's
/// realloc copies when it fails), `prctl(PR_SET_NAME)` (the evaluation thread is unnamed,
/// and std ignores a naming failure), `sched_yield`.
pub fn allowlist(pid: u32) -> Vec<AllowedCall> {
    let pid = u64::from(pid);
    let no_exec = |name, number, why| AllowedCall {
        name,
        number,
        only: ArgRule::NoBitsSet {
            index: 2,
            bits: bits(libc::PROT_EXEC),
        },
        why,
    };
    vec![
        one_of(
            "read",
            libc::SYS_read,
            0,
            vec![0],
            "the request and module answers on stdin",
        ),
        one_of(
            "write",
            libc::SYS_write,
            0,
            vec![1, 2],
            "frames on stdout, panic text on stderr",
        ),
        no_exec(
            "mmap",
            libc::SYS_mmap,
            "allocator and thread stacks; never executable memory (prot without PROT_EXEC)",
        ),
        no_exec(
            "mprotect",
            libc::SYS_mprotect,
            "arena growth and stack guards; never PROT_EXEC",
        ),
        any(
            "munmap",
            libc::SYS_munmap,
            "allocator frees, thread stack release",
        ),
        any("brk", libc::SYS_brk, "main-arena heap growth"),
        any(
            "madvise",
            libc::SYS_madvise,
            "glibc releases the thread stack and arena pages; huge-page advice for the heap",
        ),
        any("futex", libc::SYS_futex, "locks, channels and thread join"),
        AllowedCall {
            name: "clone",
            number: libc::SYS_clone,
            // CLONE_THREAD requires CLONE_SIGHAND and CLONE_VM, and excludes CLONE_NEWUSER and
            // CLONE_NEWPID: the result is always a thread of this process, under its filters
            // and Landlock domain, never a new process.
            only: ArgRule::AllBitsSet {
                index: 0,
                bits: bits(libc::CLONE_THREAD),
            },
            why: "spawning the evaluation thread (threads only: fork stays impossible)",
        },
        any(
            "set_robust_list",
            libc::SYS_set_robust_list,
            "glibc thread start",
        ),
        any(
            "rseq",
            libc::SYS_rseq,
            "glibc thread start registers restartable sequences",
        ),
        any(
            "sigaltstack",
            libc::SYS_sigaltstack,
            "std's stack-overflow guard on each thread",
        ),
        any(
            "rt_sigprocmask",
            libc::SYS_rt_sigprocmask,
            "glibc masks signals around clone, abort",
        ),
        any(
            "rt_sigaction",
            libc::SYS_rt_sigaction,
            "glibc thread setup, abort, overflow reset",
        ),
        any(
            "rt_sigreturn",
            libc::SYS_rt_sigreturn,
            "return from the stack-overflow handler",
        ),
        any("getrandom", libc::SYS_getrandom, "hash map seeds"),
        any(
            "sched_getaffinity",
            libc::SYS_sched_getaffinity,
            "glibc sizes its malloc arenas by the CPU count of a new thread",
        ),
        any(
            "clock_gettime",
            libc::SYS_clock_gettime,
            "the evaluation deadline (vDSO fallback)",
        ),
        any("getpid", libc::SYS_getpid, "abort"),
        any("gettid", libc::SYS_gettid, "abort"),
        // Only this process: as root without capabilities, a signal to another root process
        // is still allowed by the kernel, and Landlock's signal scope needs ABI 6.
        one_of(
            "tgkill",
            libc::SYS_tgkill,
            0,
            vec![pid],
            "abort raises SIGABRT on itself",
        ),
        one_of(
            "fcntl",
            libc::SYS_fcntl,
            1,
            vec![bits(libc::F_GETFD)],
            "the Inspect probe lists open descriptors (F_GETFD only)",
        ),
        any("exit", libc::SYS_exit, "thread exit"),
        any("exit_group", libc::SYS_exit_group, "process exit"),
    ]
}

/// The architecture the filters are compiled for; `None` on an architecture this build has
/// no syscall table for, which fails the protection.
pub fn target_arch() -> Option<TargetArch> {
    if cfg!(target_arch = "x86_64") {
        Some(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(TargetArch::aarch64)
    } else {
        None
    }
}

fn condition(index: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value).map_err(|source| {
        SandboxError::Seccomp {
            filter: "allowlist",
            source: source.into(),
        }
    })
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SandboxError> {
    SeccompRule::new(conditions).map_err(|source| SandboxError::Seccomp {
        filter: "allowlist",
        source: source.into(),
    })
}

/// The seccompiler rule map for `calls`: an empty rule list matches unconditionally.
pub fn rule_map(calls: &[AllowedCall]) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    let mut map = BTreeMap::new();
    for call in calls {
        let rules = match &call.only {
            ArgRule::Any => Vec::new(),
            ArgRule::OneOf { index, values } => values
                .iter()
                .map(|&value| rule(vec![condition(*index, SeccompCmpOp::Eq, value)?]))
                .collect::<Result<_, _>>()?,
            ArgRule::AllBitsSet { index, bits } => {
                vec![rule(vec![condition(
                    *index,
                    SeccompCmpOp::MaskedEq(*bits),
                    *bits,
                )?])?]
            }
            ArgRule::NoBitsSet { index, bits } => {
                vec![rule(vec![condition(
                    *index,
                    SeccompCmpOp::MaskedEq(*bits),
                    0,
                )?])?]
            }
        };
        map.insert(call.number, rules);
    }
    Ok(map)
}

/// The two compiled filters, in installation order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledFilters {
    /// Installed first: `clone3` → `ENOSYS`, everything else allowed.
    pub enosys: BpfProgram,
    /// Installed second: the allowlist, everything else → `EPERM`.
    pub allowlist: BpfProgram,
}

/// Compiles both filters for `arch` and a process whose pid is `pid`.
pub fn compile(arch: TargetArch, pid: u32) -> Result<CompiledFilters, SandboxError> {
    let enosys_rules = enosys_calls()
        .into_iter()
        .map(|(_, number)| (number, Vec::new()))
        .collect();
    let enosys = SeccompFilter::new(
        enosys_rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS.unsigned_abs()),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|source| SandboxError::Seccomp {
        filter: "enosys",
        source: source.into(),
    })?;

    let mut calls = allowlist(pid);
    // Let clone3 through the allowlist so the first filter's ENOSYS is the answer; with
    // EPERM from both, the later filter's EPERM would win the tie and glibc would not fall
    // back to clone.
    calls.extend(
        enosys_calls()
            .into_iter()
            .map(|(name, number)| any(name, number, "answered ENOSYS by the first filter")),
    );
    let allowlist = SeccompFilter::new(
        rule_map(&calls)?,
        SeccompAction::Errno(libc::EPERM.unsigned_abs()),
        SeccompAction::Allow,
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|source| SandboxError::Seccomp {
        filter: "allowlist",
        source: source.into(),
    })?;
    Ok(CompiledFilters { enosys, allowlist })
}

/// Compiles and installs both filters on the calling thread.
///
/// No `TSYNC`: [`super::harden`] checked that this is the only thread. Threads created
/// later inherit the filters.
pub fn install() -> Result<String, SandboxError> {
    let Some(arch) = target_arch() else {
        return Err(SandboxError::Unsupported {
            feature: "seccomp filter".to_owned(),
            reason: format!("no syscall table for {}", std::env::consts::ARCH),
        });
    };
    let filters = compile(arch, std::process::id())?;
    seccompiler::apply_filter(&filters.enosys).map_err(|source| SandboxError::Seccomp {
        filter: "enosys",
        source,
    })?;
    seccompiler::apply_filter(&filters.allowlist).map_err(|source| SandboxError::Seccomp {
        filter: "allowlist",
        source,
    })?;
    verify_mode()?;
    let names: Vec<&str> = allowlist(0).iter().map(|call| call.name).collect();
    Ok(format!(
        "filter mode; {} calls allowed ({}); clone3 answers ENOSYS; everything else EPERM",
        names.len(),
        names.join(", ")
    ))
}

/// Reads the seccomp mode back: `2` is filter mode.
fn verify_mode() -> Result<(), SandboxError> {
    // SAFETY: PR_GET_SECCOMP takes no pointer and only returns the mode; the allowlist
    // refuses prctl, so EPERM (which PR_GET_SECCOMP never answers otherwise) also proves
    // the filter is on.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    let filtered = mode == 2
        || (mode == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM));
    if filtered {
        Ok(())
    } else {
        Err(SandboxError::NotInForce {
            protection: "seccomp",
            observed: format!("mode {mode}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    const PID: u32 = 4242;

    /// Runs a classic BPF program (the subset seccompiler emits) on a `seccomp_data`.
    fn run(program: &BpfProgram, arch: u32, nr: i64, args: [u64; 6]) -> u32 {
        let mut data = Vec::with_capacity(64);
        data.extend_from_slice(&i32::try_from(nr).unwrap().to_ne_bytes());
        data.extend_from_slice(&arch.to_ne_bytes());
        data.extend_from_slice(&0_u64.to_ne_bytes());
        for arg in args {
            data.extend_from_slice(&arg.to_ne_bytes());
        }
        let mut acc: u32 = 0;
        let mut pc = 0_usize;
        loop {
            let insn = &program[pc];
            pc += 1;
            let k = insn.k;
            match insn.code {
                0x20 => {
                    let at = usize::try_from(k).unwrap();
                    acc = u32::from_ne_bytes(data[at..at + 4].try_into().unwrap());
                }
                0x54 => acc &= k,
                0x05 => pc += usize::try_from(k).unwrap(),
                0x06 => return k,
                code => {
                    let taken = match code {
                        0x15 => acc == k,
                        0x25 => acc > k,
                        0x35 => acc >= k,
                        0x45 => acc & k != 0,
                        other => panic!("unexpected BPF opcode {other:#x}"),
                    };
                    pc += usize::from(if taken { insn.jt } else { insn.jf });
                }
            }
        }
    }

    /// The kernel's combination: the answer of highest precedence wins; on a tie the most
    /// recently installed filter (the allowlist) wins.
    fn decide(nr: i64, args: [u64; 6]) -> u32 {
        let arch = target_arch().unwrap();
        let audit = if arch == TargetArch::x86_64 {
            0xc000_003e
        } else {
            0xc000_00b7
        };
        let filters = compile(arch, PID).unwrap();
        let newest = run(&filters.allowlist, audit, nr, args);
        let oldest = run(&filters.enosys, audit, nr, args);
        #[allow(clippy::cast_possible_wrap)]
        let rank = |ret: u32| (ret & 0xffff_0000) as i32;
        if rank(oldest) < rank(newest) {
            oldest
        } else {
            newest
        }
    }

    fn errno(value: i32) -> u32 {
        RET_ERRNO | value.unsigned_abs()
    }

    #[test]
    fn allowlist_holds_what_a_threaded_evaluator_needs() {
        let names: Vec<&str> = allowlist(PID).iter().map(|c| c.name).collect();
        for needed in [
            "read",
            "write",
            "mmap",
            "munmap",
            "mprotect",
            "brk",
            "futex",
            "clone",
            "exit",
            "exit_group",
            "rt_sigreturn",
            "sigaltstack",
            "getrandom",
            "set_robust_list",
            "rseq",
        ] {
            assert!(names.contains(&needed), "{needed} missing from {names:?}");
        }
        assert!(allowlist(PID).iter().all(|c| !c.why.is_empty()));
    }

    #[test]
    fn allowlist_excludes_files_processes_and_network() {
        let numbers: Vec<i64> = allowlist(PID).iter().map(|c| c.number).collect();
        for forbidden in [
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_openat,
            libc::SYS_socket,
            libc::SYS_connect,
            libc::SYS_clone3,
            libc::SYS_ptrace,
            libc::SYS_kill,
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_mount,
            libc::SYS_seccomp,
            libc::SYS_prctl,
            libc::SYS_setuid,
            libc::SYS_capset,
        ] {
            assert!(
                !numbers.contains(&forbidden),
                "syscall {forbidden} is allowed"
            );
            if forbidden != libc::SYS_clone3 {
                assert_eq!(
                    decide(forbidden, [0; 6]),
                    errno(libc::EPERM),
                    "syscall {forbidden}"
                );
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn legacy_x86_file_and_process_calls_are_denied() {
        for forbidden in [
            libc::SYS_open,
            libc::SYS_fork,
            libc::SYS_vfork,
            libc::SYS_creat,
        ] {
            assert_eq!(
                decide(forbidden, [0; 6]),
                errno(libc::EPERM),
                "syscall {forbidden}"
            );
        }
        // The x32 ABI shares the x86_64 audit arch; its numbers never match the allowlist.
        assert_eq!(
            decide(libc::SYS_read | 0x4000_0000, [0; 6]),
            errno(libc::EPERM)
        );
    }

    #[test]
    fn clone3_answers_enosys_so_glibc_falls_back_to_clone() {
        assert_eq!(decide(libc::SYS_clone3, [0; 6]), errno(libc::ENOSYS));
    }

    #[test]
    fn clone_is_allowed_only_for_threads() {
        let thread = bits(
            libc::CLONE_VM
                | libc::CLONE_FS
                | libc::CLONE_FILES
                | libc::CLONE_SIGHAND
                | libc::CLONE_THREAD
                | libc::CLONE_SYSVSEM
                | libc::CLONE_SETTLS
                | libc::CLONE_PARENT_SETTID
                | libc::CLONE_CHILD_CLEARTID,
        );
        assert_eq!(decide(libc::SYS_clone, [thread, 0, 0, 0, 0, 0]), RET_ALLOW);
        let fork = bits(libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD);
        assert_eq!(
            decide(libc::SYS_clone, [fork, 0, 0, 0, 0, 0]),
            errno(libc::EPERM)
        );
        let vfork = bits(libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD);
        assert_eq!(
            decide(libc::SYS_clone, [vfork, 0, 0, 0, 0, 0]),
            errno(libc::EPERM)
        );
    }

    #[test]
    fn io_is_limited_to_the_three_pipes() {
        assert_eq!(decide(libc::SYS_read, [0; 6]), RET_ALLOW);
        assert_eq!(
            decide(libc::SYS_read, [3, 0, 0, 0, 0, 0]),
            errno(libc::EPERM)
        );
        assert_eq!(decide(libc::SYS_write, [1, 0, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(decide(libc::SYS_write, [2, 0, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(
            decide(libc::SYS_write, [0, 0, 0, 0, 0, 0]),
            errno(libc::EPERM)
        );
        assert_eq!(
            decide(libc::SYS_write, [u64::MAX, 0, 0, 0, 0, 0]),
            errno(libc::EPERM)
        );
    }

    #[test]
    fn memory_can_never_become_executable() {
        let rw = bits(libc::PROT_READ | libc::PROT_WRITE);
        let rwx = bits(libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC);
        assert_eq!(decide(libc::SYS_mmap, [0, 4096, rw, 0, 0, 0]), RET_ALLOW);
        assert_eq!(
            decide(libc::SYS_mmap, [0, 4096, rwx, 0, 0, 0]),
            errno(libc::EPERM)
        );
        assert_eq!(
            decide(libc::SYS_mprotect, [0, 4096, rwx, 0, 0, 0]),
            errno(libc::EPERM)
        );
    }

    #[test]
    fn argument_restricted_calls_accept_only_their_values() {
        let pid = u64::from(PID);
        assert_eq!(decide(libc::SYS_tgkill, [pid, 1, 6, 0, 0, 0]), RET_ALLOW);
        assert_eq!(
            decide(libc::SYS_tgkill, [1, 1, 9, 0, 0, 0]),
            errno(libc::EPERM)
        );
        let dumpable = bits(libc::PR_SET_DUMPABLE);
        assert_eq!(
            decide(libc::SYS_prctl, [dumpable, 1, 0, 0, 0, 0]),
            errno(libc::EPERM)
        );
        let get_fd = bits(libc::F_GETFD);
        let dup = bits(libc::F_DUPFD);
        assert_eq!(decide(libc::SYS_fcntl, [3, get_fd, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(
            decide(libc::SYS_fcntl, [0, dup, 0, 0, 0, 0]),
            errno(libc::EPERM)
        );
    }

    #[test]
    fn another_architecture_is_killed() {
        let filters = compile(target_arch().unwrap(), PID).unwrap();
        let i386 = 0x4000_0003;
        assert_eq!(
            run(&filters.allowlist, i386, libc::SYS_read, [0; 6]),
            0x8000_0000
        );
    }
}
