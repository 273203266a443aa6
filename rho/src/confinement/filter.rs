//! The seccomp filter of a confined process: which calls it refuses, as a pure rule map,
//! and its compilation to BPF. Every refused call answers `EPERM`; everything else is
//! allowed (this filter narrows, the Landlock ruleset does the rest).
//!
//! Invariant: the rule map is built from fixed tables and the [`FilterPlan`] alone, so the
//! same plan always compiles to the same program.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::{ConfinementError, FilterPlan};

/// `fchmodat2` (Linux 6.6), the same number on every architecture.
const SYS_FCHMODAT2: i64 = 452;
/// `quotactl_fd` (Linux 5.14).
const SYS_QUOTACTL_FD: i64 = 443;
/// `setxattrat` (Linux 6.13).
const SYS_SETXATTRAT: i64 = 463;
/// `removexattrat` (Linux 6.13).
const SYS_REMOVEXATTRAT: i64 = 466;

/// `FS_IOC_SETFLAGS`, its 32-bit twin, `FS_IOC_SETVERSION` and `FS_IOC_FSSETXATTR`: they
/// change inode flags (`chattr`) through a descriptor opened only for reading.
pub const INODE_FLAG_IOCTLS: [u64; 4] = [0x4008_6602, 0x4004_6602, 0x4008_7602, 0x401c_5820];

/// `MSG_FASTOPEN`: a `sendto`/`sendmsg` that connects a TCP socket without `connect`.
pub const MSG_FASTOPEN: u64 = 0x2000_0000;

/// Calls that change file metadata (permissions, ownership, timestamps, extended
/// attributes): Landlock has no right for them.
pub fn metadata_calls() -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_fchmod,
        libc::SYS_fchmodat,
        SYS_FCHMODAT2,
        libc::SYS_fchown,
        libc::SYS_fchownat,
        libc::SYS_utimensat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        SYS_SETXATTRAT,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
        SYS_REMOVEXATTRAT,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_chmod,
        libc::SYS_chown,
        libc::SYS_lchown,
        libc::SYS_utime,
        libc::SYS_utimes,
        libc::SYS_futimesat,
    ]);
    calls
}

/// Calls that change the machine rather than a file.
pub fn machine_calls() -> Vec<i64> {
    vec![
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_adjtimex,
        libc::SYS_clock_adjtime,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_acct,
        libc::SYS_quotactl,
        SYS_QUOTACTL_FD,
    ]
}

/// One condition on a 32-bit argument.
fn condition(
    index: u8,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, ConfinementError> {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value).map_err(|source| {
        ConfinementError::Filter {
            source: source.into(),
        }
    })
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, ConfinementError> {
    SeccompRule::new(conditions).map_err(|source| ConfinementError::Filter {
        source: source.into(),
    })
}

/// The refused calls: a call maps to rules that are OR'ed (an empty list refuses it
/// unconditionally); the conditions of one rule are AND'ed.
pub fn rule_map(plan: &FilterPlan) -> Result<BTreeMap<i64, Vec<SeccompRule>>, ConfinementError> {
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    if plan.deny_metadata {
        for call in metadata_calls().into_iter().chain(machine_calls()) {
            map.insert(call, Vec::new());
        }
        let ioctls = INODE_FLAG_IOCTLS
            .iter()
            .map(|&cmd| rule(vec![condition(1, SeccompCmpOp::Eq, cmd)?]))
            .collect::<Result<Vec<_>, _>>()?;
        map.insert(libc::SYS_ioctl, ioctls);
    }
    if plan.deny_sockets {
        let unix = libc::AF_UNIX as u64;
        let inet = libc::AF_INET as u64;
        let inet6 = libc::AF_INET6 as u64;
        let mut socket = Vec::new();
        if plan.tcp_by_landlock {
            // Any family but Unix and IP.
            socket.push(rule(vec![
                condition(0, SeccompCmpOp::Ne, unix)?,
                condition(0, SeccompCmpOp::Ne, inet)?,
                condition(0, SeccompCmpOp::Ne, inet6)?,
            ])?);
            // IP sockets of any type but a stream (the low four bits of the type; the
            // high bits are SOCK_NONBLOCK and SOCK_CLOEXEC).
            for family in [inet, inet6] {
                for kind in 2..=15_u64 {
                    socket.push(rule(vec![
                        condition(0, SeccompCmpOp::Eq, family)?,
                        condition(1, SeccompCmpOp::MaskedEq(0xf), kind)?,
                    ])?);
                }
                // A stream with a protocol other than 0 or TCP (SCTP, MPTCP).
                socket.push(rule(vec![
                    condition(0, SeccompCmpOp::Eq, family)?,
                    condition(2, SeccompCmpOp::Ne, 0)?,
                    condition(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
                ])?);
            }
            // TCP Fast Open connects inside a send, where Landlock's connect check is not.
            for (call, flags_index) in [
                (libc::SYS_sendto, 3),
                (libc::SYS_sendmsg, 2),
                (libc::SYS_sendmmsg, 3),
            ] {
                map.insert(
                    call,
                    vec![rule(vec![condition(
                        flags_index,
                        SeccompCmpOp::MaskedEq(MSG_FASTOPEN),
                        MSG_FASTOPEN,
                    )?])?],
                );
            }
        } else {
            socket.push(rule(vec![condition(0, SeccompCmpOp::Ne, unix)?])?);
        }
        map.insert(libc::SYS_socket, socket);
        // io_uring can create and connect sockets without a system call seccomp sees.
        map.insert(libc::SYS_io_uring_setup, Vec::new());
    }
    Ok(map)
}

/// The architecture of this build, or `None` where no syscall table is known (the filter
/// then cannot be built and confinement fails closed).
pub fn target_arch() -> Option<TargetArch> {
    if cfg!(target_arch = "x86_64") {
        Some(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(TargetArch::aarch64)
    } else {
        None
    }
}

/// Compiles the filter: refused calls answer `EPERM`, all others are allowed.
///
/// The program is a binary search on the call number (see [`with_dispatch`]): a call
/// refused outright answers there, a call whose refusal depends on its arguments continues
/// into seccompiler's chain of those rules. Where that cannot be built, seccompiler's linear
/// program of every rule is used as it is.
pub fn compile(plan: &FilterPlan) -> Result<BpfProgram, ConfinementError> {
    let map = rule_map(plan)?;
    let unconditional: Vec<i64> = map
        .iter()
        .filter(|(_, rules)| rules.is_empty())
        .map(|(&nr, _)| nr)
        .collect();
    let conditional: Vec<i64> = map
        .iter()
        .filter(|(_, rules)| !rules.is_empty())
        .map(|(&nr, _)| nr)
        .collect();
    let mut chain_map = map.clone();
    chain_map.retain(|_, rules| !rules.is_empty());
    // Without a chain (say, no rule has conditions) the linear program serves.
    let chain = linear_program(chain_map).ok();
    let program = match chain.and_then(|chain| with_dispatch(&chain, &unconditional, &conditional))
    {
        Some(program) => program,
        None => linear_program(map)?,
    };
    refuse_foreign_numbers(&program)
}

/// The bit that marks a call number of x86_64's x32 ABI: the same architecture value in
/// `seccomp_data`, so seccompiler's per-number rules would not see `chmod` called by its
/// x32 number on a kernel that has x32 enabled.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Refuses every x32 call number (x86_64 only) right after the call number is loaded,
/// before any rule: the rules name native numbers, and no confined node needs x32. Fails
/// (instead of leaving the gap open) when the load is missing or a jump crosses it.
#[cfg(target_arch = "x86_64")]
fn refuse_foreign_numbers(
    program: &[seccompiler::sock_filter],
) -> Result<BpfProgram, ConfinementError> {
    let Some(load) = call_number_load(program) else {
        return Err(ConfinementError::Unsupported {
            what: "kernel confinement",
            reason: "the seccomp program has no single load of the call number to guard".to_owned(),
        });
    };
    let guard = [
        seccompiler::sock_filter {
            code: JGE,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        seccompiler::sock_filter {
            code: RET,
            jt: 0,
            jf: 0,
            k: u32::from(SeccompAction::Errno(EPERM)),
        },
    ];
    let mut out = Vec::with_capacity(program.len() + guard.len());
    out.extend_from_slice(&program[..=load]);
    out.extend(guard);
    out.extend_from_slice(&program[load + 1..]);
    Ok(out)
}

/// Other architectures have one call numbering: nothing to refuse.
#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::unnecessary_wraps, reason = "the same signature as on x86_64")]
fn refuse_foreign_numbers(
    program: &[seccompiler::sock_filter],
) -> Result<BpfProgram, ConfinementError> {
    Ok(program.to_vec())
}

/// Where `program` loads the call number, when no jump before it lands past it (BPF jumps
/// only forward, so instructions inserted right after it are reached by every call).
fn call_number_load(program: &[seccompiler::sock_filter]) -> Option<usize> {
    let load = program
        .iter()
        .position(|insn| insn.code == LD_ABS && insn.k == 0)?;
    let crosses = program[..load].iter().enumerate().any(|(i, insn)| {
        let reach = match insn.code {
            JA => usize::try_from(insn.k).unwrap_or(usize::MAX),
            code if code & 0x07 == 0x05 => usize::from(insn.jt.max(insn.jf)),
            _ => 0,
        };
        (i + 1).saturating_add(reach) > load
    });
    (!crosses).then_some(load)
}

/// seccompiler's program for `map`: each call compared in turn.
fn linear_program(map: BTreeMap<i64, Vec<SeccompRule>>) -> Result<BpfProgram, ConfinementError> {
    let arch = target_arch().ok_or_else(|| ConfinementError::Unsupported {
        what: "kernel confinement",
        reason: format!("no seccomp syscall table for {}", std::env::consts::ARCH),
    })?;
    let filter = SeccompFilter::new(map, SeccompAction::Allow, SeccompAction::Errno(EPERM), arch)
        .map_err(|source| ConfinementError::Filter {
        source: source.into(),
    })?;
    BpfProgram::try_from(filter).map_err(|source| ConfinementError::Filter {
        source: source.into(),
    })
}

#[allow(clippy::cast_sign_loss)]
const EPERM: u32 = libc::EPERM as u32;

/// `BPF_LD | BPF_W | BPF_ABS`: load a word of `seccomp_data`.
const LD_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JA`.
const JA: u16 = 0x05;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
const JEQ: u16 = 0x15;
/// `BPF_JMP | BPF_JGE | BPF_K`.
const JGE: u16 = 0x35;
/// `BPF_RET | BPF_K`.
const RET: u16 = 0x06;
/// `SECCOMP_RET_ALLOW`.
const RET_ALLOW: u32 = 0x7fff_0000;

/// Where a dispatch jump lands.
#[derive(Clone, Copy)]
enum Target {
    /// An instruction of the dispatch itself (its index there).
    At(usize),
    /// The `ret ALLOW` after the dispatch: the call has no rule.
    Allow,
    /// The `ret ERRNO(EPERM)` after it: the call is refused whatever its arguments.
    Deny,
    /// seccompiler's chain of the rules with conditions, after both.
    Chain,
}

/// Splices a binary search on the call number into `chain` (seccompiler's program of the
/// rules with conditions) right after its load of the call number: a call without a rule
/// is allowed after about log2(rules) comparisons, a call in `unconditional` is refused
/// there, one in `conditional` continues into the unchanged chain. This matters for the
/// cost of attaching the filter: the kernel runs the program for every call number when it
/// builds its cache of allowed calls (under a lock, in every confined child before `exec`),
/// and compiles it; a linear chain makes both grow with the number of rules.
///
/// `None` (the caller then uses the linear program) when the load is missing, an earlier
/// jump would cross the insertion, a number does not fit, or a jump would not fit BPF's
/// 8-bit offsets.
fn with_dispatch(
    chain: &[seccompiler::sock_filter],
    unconditional: &[i64],
    conditional: &[i64],
) -> Option<BpfProgram> {
    let load = call_number_load(chain)?;
    let mut keys = Vec::with_capacity(unconditional.len() + conditional.len());
    for (calls, target) in [(unconditional, Target::Deny), (conditional, Target::Chain)] {
        for &nr in calls {
            keys.push((u32::try_from(nr).ok()?, target));
        }
    }
    keys.sort_unstable_by_key(|&(nr, _)| nr);
    if keys.is_empty() || keys.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    let mut pending = Vec::with_capacity(2 * keys.len());
    dispatch(&keys, &mut pending);
    let allow = pending.len();
    let mut tree = Vec::with_capacity(allow + 2);
    for (i, &(code, k, jt, jf)) in pending.iter().enumerate() {
        let offset = |target: Target| {
            let to = match target {
                Target::At(at) => at,
                Target::Allow => allow,
                Target::Deny => allow + 1,
                Target::Chain => allow + 2,
            };
            u8::try_from(to - (i + 1)).ok()
        };
        tree.push(seccompiler::sock_filter {
            code,
            jt: offset(jt)?,
            jf: offset(jf)?,
            k,
        });
    }
    for k in [RET_ALLOW, u32::from(SeccompAction::Errno(EPERM))] {
        tree.push(seccompiler::sock_filter {
            code: RET,
            jt: 0,
            jf: 0,
            k,
        });
    }
    let mut out = Vec::with_capacity(chain.len() + tree.len());
    out.extend_from_slice(&chain[..=load]);
    out.extend(tree);
    out.extend_from_slice(&chain[load + 1..]);
    Some(out)
}

/// Appends the search over the sorted, non-empty `keys`: each inner node sends the calls at
/// or above its middle key to its right half, each leaf compares one key and sends it to
/// its target.
fn dispatch(keys: &[(u32, Target)], out: &mut Vec<(u16, u32, Target, Target)>) {
    if let [(key, target)] = keys {
        out.push((JEQ, *key, *target, Target::Allow));
        return;
    }
    let mid = keys.len() / 2;
    let node = out.len();
    out.push((JGE, keys[mid].0, Target::Allow, Target::At(node + 1)));
    dispatch(&keys[..mid], out);
    out[node].2 = Target::At(out.len());
    dispatch(&keys[mid..], out);
}

#[cfg(test)]
mod tests {
    use super::*;

    const RET_ALLOW: u32 = 0x7fff_0000;
    #[allow(clippy::cast_sign_loss)]
    const RET_EPERM: u32 = 0x0005_0000 | libc::EPERM as u32;

    /// Runs a classic BPF program (the subset seccompiler emits) on a `seccomp_data`.
    fn run(program: &BpfProgram, nr: i64, args: [u64; 6]) -> u32 {
        let arch: u32 = if cfg!(target_arch = "x86_64") {
            0xc000_003e
        } else {
            0xc000_00b7
        };
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

    fn read_only() -> BpfProgram {
        compile(&FilterPlan {
            deny_metadata: true,
            ..FilterPlan::default()
        })
        .unwrap()
    }

    fn no_network(tcp_by_landlock: bool) -> BpfProgram {
        compile(&FilterPlan {
            deny_sockets: true,
            tcp_by_landlock,
            ..FilterPlan::default()
        })
        .unwrap()
    }

    #[test]
    fn read_only_refuses_metadata_changes_and_allows_io() {
        let p = read_only();
        assert_eq!(run(&p, libc::SYS_fchmodat, [0; 6]), RET_EPERM);
        assert_eq!(run(&p, libc::SYS_fchmod, [3, 0o777, 0, 0, 0, 0]), RET_EPERM);
        assert_eq!(run(&p, libc::SYS_utimensat, [0; 6]), RET_EPERM);
        assert_eq!(run(&p, libc::SYS_fsetxattr, [0; 6]), RET_EPERM);
        assert_eq!(run(&p, libc::SYS_finit_module, [0; 6]), RET_EPERM);
        assert_eq!(run(&p, libc::SYS_read, [0; 6]), RET_ALLOW);
        assert_eq!(run(&p, libc::SYS_write, [1, 0, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(run(&p, libc::SYS_openat, [0; 6]), RET_ALLOW);
        assert_eq!(run(&p, libc::SYS_socket, [2, 1, 0, 0, 0, 0]), RET_ALLOW);
    }

    #[test]
    fn read_only_refuses_only_the_inode_flag_ioctls() {
        let p = read_only();
        for cmd in INODE_FLAG_IOCTLS {
            assert_eq!(run(&p, libc::SYS_ioctl, [3, cmd, 0, 0, 0, 0]), RET_EPERM);
        }
        // TCGETS, FIONREAD: terminals and pipes keep working.
        assert_eq!(run(&p, libc::SYS_ioctl, [1, 0x5401, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(run(&p, libc::SYS_ioctl, [1, 0x541b, 0, 0, 0, 0]), RET_ALLOW);
    }

    #[test]
    fn no_network_with_landlock_tcp_refuses_everything_but_unix_and_tcp_streams() {
        let p = no_network(true);
        let inet = libc::AF_INET as u64;
        let inet6 = libc::AF_INET6 as u64;
        let stream = libc::SOCK_STREAM as u64;
        let cloexec = libc::SOCK_CLOEXEC as u64 | libc::SOCK_NONBLOCK as u64;
        let dgram = libc::SOCK_DGRAM as u64;
        let raw = libc::SOCK_RAW as u64;
        let socket = |family: u64, kind: u64, proto: u64| {
            run(&p, libc::SYS_socket, [family, kind, proto, 0, 0, 0])
        };
        assert_eq!(socket(libc::AF_UNIX as u64, stream, 0), RET_ALLOW);
        assert_eq!(socket(libc::AF_UNIX as u64, dgram, 0), RET_ALLOW);
        assert_eq!(socket(inet, stream | cloexec, 0), RET_ALLOW);
        assert_eq!(socket(inet6, stream, libc::IPPROTO_TCP as u64), RET_ALLOW);
        assert_eq!(socket(inet, dgram, 0), RET_EPERM);
        assert_eq!(socket(inet6, dgram | cloexec, 0), RET_EPERM);
        assert_eq!(socket(inet, raw, 1), RET_EPERM);
        assert_eq!(socket(inet, stream, 132), RET_EPERM, "SCTP");
        assert_eq!(socket(libc::AF_PACKET as u64, raw, 0), RET_EPERM);
        assert_eq!(socket(libc::AF_NETLINK as u64, raw, 0), RET_EPERM);
        assert_eq!(
            run(&p, libc::SYS_sendto, [3, 0, 0, MSG_FASTOPEN, 0, 0]),
            RET_EPERM
        );
        assert_eq!(run(&p, libc::SYS_sendto, [3, 0, 0, 0x40, 0, 0]), RET_ALLOW);
        assert_eq!(
            run(&p, libc::SYS_sendmsg, [3, 0, MSG_FASTOPEN, 0, 0, 0]),
            RET_EPERM
        );
        assert_eq!(run(&p, libc::SYS_io_uring_setup, [0; 6]), RET_EPERM);
        assert_eq!(run(&p, libc::SYS_fchmodat, [0; 6]), RET_ALLOW);
    }

    #[test]
    fn no_network_without_landlock_refuses_every_ip_socket() {
        let p = no_network(false);
        let stream = libc::SOCK_STREAM as u64;
        assert_eq!(
            run(
                &p,
                libc::SYS_socket,
                [libc::AF_INET as u64, stream, 0, 0, 0, 0]
            ),
            RET_EPERM
        );
        assert_eq!(
            run(
                &p,
                libc::SYS_socket,
                [libc::AF_INET6 as u64, stream, 0, 0, 0, 0]
            ),
            RET_EPERM
        );
        assert_eq!(
            run(
                &p,
                libc::SYS_socket,
                [libc::AF_UNIX as u64, stream, 0, 0, 0, 0]
            ),
            RET_ALLOW
        );
    }

    /// One plan of each kind and all refusals together.
    const PLANS: [FilterPlan; 4] = [
        FilterPlan {
            deny_metadata: true,
            ..NONE
        },
        FilterPlan {
            deny_sockets: true,
            tcp_by_landlock: true,
            ..NONE
        },
        FilterPlan {
            deny_sockets: true,
            ..NONE
        },
        FilterPlan {
            deny_metadata: true,
            deny_sockets: true,
            tcp_by_landlock: true,
        },
    ];

    /// A plan refusing nothing (`Default` is not `const`).
    const NONE: FilterPlan = FilterPlan {
        deny_metadata: false,
        deny_sockets: false,
        tcp_by_landlock: false,
    };

    /// seccompiler's program of every rule, without the dispatch.
    fn linear(plan: FilterPlan) -> BpfProgram {
        linear_program(rule_map(&plan).unwrap()).unwrap()
    }

    #[test]
    fn the_dispatch_gives_every_call_the_verdict_of_the_linear_chain() {
        let plans = PLANS;
        let mut args: Vec<[u64; 6]> = vec![[0; 6], [3, 0o777, 0, 0, 0, 0]];
        for cmd in INODE_FLAG_IOCTLS {
            args.push([3, cmd, 0, 0, 0, 0]);
        }
        for family in [1_u64, 2, 10, 16, 17] {
            for kind in [1_u64, 2, 3, 1 | 0x80000, 5] {
                for proto in [0_u64, 6, 132] {
                    args.push([family, kind, proto, 0, 0, 0]);
                }
            }
        }
        args.push([3, 0, 0, MSG_FASTOPEN, 0, 0]);
        args.push([3, 0, MSG_FASTOPEN, 0, 0, 0]);
        for plan in &plans {
            let fast = compile(plan).unwrap();
            let slow = linear(*plan);
            let load = fast
                .iter()
                .position(|i| i.code == LD_ABS && i.k == 0)
                .unwrap();
            // On x86_64 the x32 guard (a comparison and its refusal) comes first.
            let first = if cfg!(target_arch = "x86_64") {
                load + 3
            } else {
                load + 1
            };
            assert_eq!(fast[first].code, JGE, "the dispatch is in place");
            if plan.deny_metadata {
                assert!(
                    fast.len() < slow.len(),
                    "refusals outright end in the dispatch: {} < {}",
                    fast.len(),
                    slow.len()
                );
            }
            let numbers = (0..1024_i64).chain([0x3fff_ffff]);
            for nr in numbers {
                for a in &args {
                    assert_eq!(run(&fast, nr, *a), run(&slow, nr, *a), "call {nr}, {a:?}");
                }
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn every_x32_call_number_is_refused_whatever_the_plan() {
        // seccompiler's rules name native numbers: `chmod` by its x32 number would pass them
        // on a kernel with x32 enabled. Every plan refuses the whole x32 range instead.
        let plans = &PLANS[..3];
        for plan in plans {
            let p = compile(plan).unwrap();
            for nr in [
                libc::SYS_chmod,
                libc::SYS_socket,
                libc::SYS_read,
                0,
                0x3fff_ffff,
            ] {
                let x32 = nr | 0x4000_0000;
                assert_eq!(
                    run(&p, x32, [0; 6]),
                    RET_EPERM,
                    "call {x32:#x} under {plan:?}"
                );
            }
            // The native numbers keep their verdicts.
            assert_eq!(run(&p, libc::SYS_read, [0; 6]), RET_ALLOW);
            assert_eq!(run(&p, libc::SYS_getpid, [0; 6]), RET_ALLOW);
        }
    }

    #[test]
    fn a_call_without_a_rule_is_allowed_after_a_few_comparisons() {
        let p = read_only();
        let load = p.iter().position(|i| i.code == LD_ABS && i.k == 0).unwrap();
        // Walk from the load for `read`: count instructions until the verdict.
        let mut pc = load + 1;
        let mut steps = 0;
        let read = u32::try_from(libc::SYS_read).unwrap();
        while p[pc].code != RET {
            let taken = if p[pc].code == JEQ {
                read == p[pc].k
            } else {
                read >= p[pc].k
            };
            pc += 1 + usize::from(if taken { p[pc].jt } else { p[pc].jf });
            steps += 1;
        }
        assert_eq!(p[pc].k, RET_ALLOW);
        assert!(
            steps <= 8,
            "{steps} comparisons (the x32 guard included) for a call without a rule"
        );
    }

    #[test]
    fn the_same_plan_compiles_to_the_same_program() {
        let a = no_network(true);
        let b = no_network(true);
        assert_eq!(a.len(), b.len());
        assert!(
            a.iter()
                .zip(&b)
                .all(|(x, y)| (x.code, x.jt, x.jf, x.k) == (y.code, y.jt, y.jf, y.k))
        );
    }
}
