//! Proving the planner sandbox, one protection at a time.
//!
//! Landlock and seccomp overlap: in a fully hardened worker seccomp refuses `openat`,
//! `socket`, `execve` and `kill` before Landlock is asked, so a refused probe there proves
//! only that *something* refused. Each is therefore also proved alone, in a probe-only
//! worker started with the other left out (`--omit`): with seccomp left out, Landlock must
//! refuse opening a file and executing (`EACCES`) and signalling the host (`EPERM`, its
//! signal scope); with Landlock left out, seccomp must refuse all four (`EPERM`). The
//! remaining protections are read back from outside the worker, from its
//! `/proc/<pid>/status` and `/proc/<pid>/limits`, and its parent-death signal from its own
//! `prctl(PR_GET_PDEATHSIG)` (in the worker without seccomp, which forbids `prctl`).
//!
//! Invariant: the functions here are pure: they judge what was observed and start nothing.

use rho_ipc::message::{ProbeResult, SandboxProbe};

use super::{Check, CheckStatus};

const AREA: &str = "sandbox";

/// The fix for any sandbox failure.
pub const SANDBOX_FIX: &str = "run on a Linux kernel with Landlock (ABI 4 or later) and seccomp \
    enabled, as a user the kernel lets restrict itself; planning refuses a degraded worker \
    unless RHO_PLANNER_SANDBOX=best-effort";

/// Which worker a probe ran in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeWorker {
    /// Every protection applied.
    Full,
    /// Seccomp left out: only Landlock can refuse.
    LandlockAlone,
    /// Landlock left out: only seccomp can refuse.
    SeccompAlone,
}

impl ProbeWorker {
    /// What the worker proves, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            ProbeWorker::Full => "hardened worker",
            ProbeWorker::LandlockAlone => "Landlock alone (seccomp left out)",
            ProbeWorker::SeccompAlone => "seccomp alone (Landlock left out)",
        }
    }

    /// The `--omit` value of the worker.
    pub fn omit(self) -> Option<&'static str> {
        match self {
            ProbeWorker::Full => None,
            ProbeWorker::LandlockAlone => Some("seccomp"),
            ProbeWorker::SeccompAlone => Some("landlock"),
        }
    }
}

/// One planned probe: where it runs, what it tries, the protection it proves and the errno
/// that protection answers with (`None`: any refusal will do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedProbe {
    /// The worker it runs in.
    pub worker: ProbeWorker,
    /// The operation.
    pub probe: SandboxProbe,
    /// A short description (`open /etc/passwd`).
    pub what: String,
    /// The protection it proves.
    pub proves: &'static str,
    /// The errno expected.
    pub errno: Option<i32>,
}

/// The probes of `rho doctor`; `host_pid` is the process a signal probe aims at.
pub fn planned_probes(host_pid: i32) -> Vec<PlannedProbe> {
    use ProbeWorker::{Full, LandlockAlone, SeccompAlone};
    let open = || SandboxProbe::Open {
        path: "/etc/passwd".to_owned(),
    };
    let execve = || SandboxProbe::Execve {
        path: "/bin/true".to_owned(),
    };
    let signal = || SandboxProbe::Signal { pid: host_pid };
    let probe = |worker, probe: SandboxProbe, what: &str, proves, errno| PlannedProbe {
        worker,
        probe,
        what: what.to_owned(),
        proves,
        errno,
    };
    vec![
        probe(Full, open(), "open /etc/passwd", "sandbox", None),
        probe(
            Full,
            SandboxProbe::Socket,
            "open a TCP socket",
            "sandbox",
            None,
        ),
        probe(Full, execve(), "execve /bin/true", "sandbox", None),
        probe(Full, SandboxProbe::Fork, "fork a process", "sandbox", None),
        probe(
            LandlockAlone,
            open(),
            "open /etc/passwd",
            "landlock",
            Some(libc::EACCES),
        ),
        probe(
            LandlockAlone,
            execve(),
            "execve /bin/true",
            "landlock",
            Some(libc::EACCES),
        ),
        probe(
            LandlockAlone,
            signal(),
            "signal the host",
            "landlock",
            Some(libc::EPERM),
        ),
        probe(
            SeccompAlone,
            open(),
            "open /etc/passwd",
            "seccomp",
            Some(libc::EPERM),
        ),
        probe(
            SeccompAlone,
            SandboxProbe::Socket,
            "open a TCP socket",
            "seccomp",
            Some(libc::EPERM),
        ),
        probe(
            SeccompAlone,
            execve(),
            "execve /bin/true",
            "seccomp",
            Some(libc::EPERM),
        ),
        probe(
            SeccompAlone,
            SandboxProbe::Fork,
            "fork a process",
            "seccomp",
            Some(libc::EPERM),
        ),
        probe(
            SeccompAlone,
            signal(),
            "signal the host",
            "seccomp",
            Some(libc::EPERM),
        ),
    ]
}

fn errno_text(errno: i32) -> String {
    format!("{} ({errno})", nix::errno::Errno::from_raw(errno).desc())
}

/// Judges a probe's outcome (`Err`: the probe could not be run).
pub fn judge_probe(planned: &PlannedProbe, outcome: &Result<ProbeResult, String>) -> Check {
    let name = format!("{}: {} refused", planned.worker.describe(), planned.what);
    let result = match outcome {
        Ok(result) => result,
        Err(error) => {
            return Check::not_ok(
                AREA,
                name,
                CheckStatus::Failed,
                format!("the probe could not be run: {error}"),
                SANDBOX_FIX,
            );
        }
    };
    match (result.succeeded, result.errno, planned.errno) {
        (true, _, _) => Check::not_ok(
            AREA,
            name,
            CheckStatus::Failed,
            "ALLOWED: the operation succeeded inside the sandbox",
            SANDBOX_FIX,
        ),
        (false, Some(got), Some(expected)) if got != expected => Check::not_ok(
            AREA,
            name,
            CheckStatus::Failed,
            format!(
                "refused with {}, but {} refuses with {}: something else refused it",
                errno_text(got),
                planned.proves,
                errno_text(expected)
            ),
            SANDBOX_FIX,
        ),
        (false, Some(got), _) => Check::ok(
            AREA,
            name,
            format!("refused with {} by {}", errno_text(got), planned.proves),
        ),
        (false, None, _) => Check::not_ok(
            AREA,
            name,
            CheckStatus::Failed,
            "the probe reported neither success nor an errno",
            SANDBOX_FIX,
        ),
    }
}

/// The value of `Field:` in a `/proc/<pid>/status` text.
fn status_field<'a>(status: &'a str, field: &str) -> Option<&'a str> {
    status.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// `no_new_privs`, `seccomp` (filter mode) and `capabilities` (every set empty), from the
/// hardened worker's `/proc/<pid>/status`.
pub fn judge_status(status: Option<&str>) -> Vec<Check> {
    let Some(status) = status else {
        return vec![Check::not_ok(
            AREA,
            "/proc/<worker>/status read back",
            CheckStatus::Failed,
            "the hardened worker's /proc status could not be read",
            "mount /proc; rho reads each worker's status from it to prove its protections",
        )];
    };
    let field = |name| status_field(status, name).unwrap_or("absent");
    let nnp = field("NoNewPrivs");
    let seccomp = field("Seccomp");
    let mut checks = vec![
        Check::expect(
            AREA,
            "no_new_privs read back",
            nnp == "1",
            format!("NoNewPrivs: {nnp}"),
            SANDBOX_FIX,
        ),
        Check::expect(
            AREA,
            "seccomp filter read back",
            seccomp == "2",
            format!("Seccomp: {seccomp} (2 is filter mode)"),
            SANDBOX_FIX,
        ),
    ];
    let sets = ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"];
    let held: Vec<String> = sets
        .iter()
        .filter_map(|set| {
            let value = field(set);
            let empty = u64::from_str_radix(value, 16).is_ok_and(|bits| bits == 0);
            (!empty).then(|| format!("{set} {value}"))
        })
        .collect();
    checks.push(Check::expect(
        AREA,
        "capabilities read back",
        held.is_empty(),
        if held.is_empty() {
            "every capability set is empty".to_owned()
        } else {
            format!("capabilities still held: {}", held.join(", "))
        },
        SANDBOX_FIX,
    ));
    checks
}

/// Soft and hard limit of `Max <name>` in a `/proc/<pid>/limits` text (`None` for
/// `unlimited` or an unreadable line).
fn limit(limits: &str, name: &str) -> Option<(Option<u64>, Option<u64>)> {
    let line = limits.lines().find(|l| l.starts_with(name))?;
    let mut fields = line[name.len()..].split_whitespace();
    let value = |field: Option<&str>| field.and_then(|f| f.parse::<u64>().ok());
    Some((value(fields.next()), value(fields.next())))
}

/// `rlimits`, from the hardened worker's `/proc/<pid>/limits`: the address space and CPU
/// time the host asked for, no file writes, no core dumps, a handful of descriptors.
pub fn judge_limits(limits: Option<&str>, address_space: u64, cpu_seconds: u64) -> Check {
    let name = "rlimits read back";
    let Some(limits) = limits else {
        return Check::not_ok(
            AREA,
            name,
            CheckStatus::Failed,
            "the hardened worker's /proc limits could not be read",
            "mount /proc; rho reads each worker's limits from it to prove them",
        );
    };
    let expected: [(&str, u64, u64); 4] = [
        ("Max address space", address_space, address_space),
        ("Max cpu time", cpu_seconds, cpu_seconds.saturating_add(1)),
        ("Max file size", 0, 0),
        ("Max core file size", 0, 0),
    ];
    let mut wrong = Vec::new();
    let mut seen = Vec::new();
    for (row, soft, hard) in expected {
        match limit(limits, row) {
            Some((Some(s), Some(h))) if s == soft && h == hard => seen.push(format!("{row} {s}")),
            other => wrong.push(format!(
                "{row}: expected {soft}/{hard}, found {}",
                match other {
                    Some((s, h)) => format!(
                        "{}/{}",
                        s.map_or("unlimited".to_owned(), |v| v.to_string()),
                        h.map_or("unlimited".to_owned(), |v| v.to_string())
                    ),
                    None => "no such line".to_owned(),
                }
            )),
        }
    }
    match limit(limits, "Max open files") {
        Some((Some(s), Some(h))) if s == h && s <= 64 => seen.push(format!("Max open files {s}")),
        other => wrong.push(format!(
            "Max open files: expected a small fixed limit, found {other:?}"
        )),
    }
    if wrong.is_empty() {
        Check::ok(AREA, name, seen.join(", "))
    } else {
        Check::not_ok(
            AREA,
            name,
            CheckStatus::Failed,
            wrong.join("; "),
            SANDBOX_FIX,
        )
    }
}

/// `parent_death_signal`, read back by the worker itself (`Inspect` in the worker without
/// seccomp, which is the only one allowed `prctl`).
pub fn judge_parent_death_signal(inspect: &Result<ProbeResult, String>) -> Check {
    let name = "parent_death_signal read back";
    match inspect {
        Ok(result) if result.parent_death_signal == Some(libc::SIGKILL) => {
            Check::ok(AREA, name, "PR_GET_PDEATHSIG answers SIGKILL")
        }
        Ok(result) => Check::not_ok(
            AREA,
            name,
            CheckStatus::Failed,
            format!(
                "PR_GET_PDEATHSIG answers {:?}, not SIGKILL ({})",
                result.parent_death_signal,
                libc::SIGKILL
            ),
            SANDBOX_FIX,
        ),
        Err(error) => Check::not_ok(
            AREA,
            name,
            CheckStatus::Failed,
            format!("the worker could not be asked: {error}"),
            SANDBOX_FIX,
        ),
    }
}

/// `empty_environment` and `close_fds`, from the hardened worker's own `Inspect`; a probe
/// that could not run is a failure, not "clean".
pub fn judge_inspect(inspect: &Result<ProbeResult, String>) -> Vec<Check> {
    let result = match inspect {
        Ok(result) => result,
        Err(error) => {
            let detail = format!("the worker could not be inspected: {error}");
            return vec![
                Check::not_ok(
                    AREA,
                    "empty_environment read back",
                    CheckStatus::Failed,
                    &detail,
                    SANDBOX_FIX,
                ),
                Check::not_ok(
                    AREA,
                    "close_fds read back",
                    CheckStatus::Failed,
                    detail,
                    SANDBOX_FIX,
                ),
            ];
        }
    };
    vec![
        Check::expect(
            AREA,
            "empty_environment read back",
            result.environment_len == Some(0),
            result.environment_len.map_or_else(
                || "the environment size was not reported".to_owned(),
                |n| format!("{n} environment variables"),
            ),
            "start the worker only through rho, which clears its environment",
        ),
        Check::expect(
            AREA,
            "close_fds read back",
            result.open_fds_above_2.is_empty(),
            format!("descriptors above 2: {:?}", result.open_fds_above_2),
            SANDBOX_FIX,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(succeeded: bool, errno: Option<i32>) -> ProbeResult {
        ProbeResult {
            probe: SandboxProbe::Fork,
            succeeded,
            errno,
            environment_len: Some(0),
            open_fds_above_2: Vec::new(),
            parent_death_signal: None,
        }
    }

    fn planned(errno: Option<i32>) -> PlannedProbe {
        PlannedProbe {
            worker: ProbeWorker::LandlockAlone,
            probe: SandboxProbe::Fork,
            what: "open /etc/passwd".to_owned(),
            proves: "landlock",
            errno,
        }
    }

    #[test]
    fn a_refusal_by_the_wrong_protection_does_not_prove_it() {
        let check = judge_probe(
            &planned(Some(libc::EACCES)),
            &Ok(result(false, Some(libc::EPERM))),
        );
        assert_eq!(check.status, CheckStatus::Failed);
        assert!(
            check.detail.contains("something else refused it"),
            "{}",
            check.detail
        );
        let check = judge_probe(
            &planned(Some(libc::EACCES)),
            &Ok(result(false, Some(libc::EACCES))),
        );
        assert_eq!(check.status, CheckStatus::Ok, "{}", check.detail);
        let check = judge_probe(&planned(None), &Ok(result(true, None)));
        assert_eq!(check.status, CheckStatus::Failed);
        let check = judge_probe(&planned(None), &Err("spawn failed".to_owned()));
        assert_eq!(check.status, CheckStatus::Failed);
    }

    #[test]
    fn every_protection_is_proved_alone_by_some_probe() {
        let probes = planned_probes(1);
        for (worker, proves) in [
            (ProbeWorker::LandlockAlone, "landlock"),
            (ProbeWorker::SeccompAlone, "seccomp"),
        ] {
            assert!(
                probes
                    .iter()
                    .filter(|p| p.worker == worker)
                    .all(|p| p.proves == proves),
                "{proves}"
            );
            assert!(probes.iter().filter(|p| p.worker == worker).count() >= 3);
        }
    }

    const STATUS: &str = "Name:\trho-planner-wor\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t2\n";

    #[test]
    fn status_read_back_checks_nnp_seccomp_and_every_capability_set() {
        assert!(
            judge_status(Some(STATUS))
                .iter()
                .all(|c| c.status == CheckStatus::Ok)
        );
        let held = STATUS.replace("CapBnd:\t0000000000000000", "CapBnd:\t000001ffffffffff");
        let checks = judge_status(Some(&held));
        let caps = checks
            .iter()
            .find(|c| c.name == "capabilities read back")
            .unwrap();
        assert_eq!(caps.status, CheckStatus::Failed);
        assert!(
            caps.detail.contains("CapBnd 000001ffffffffff"),
            "{}",
            caps.detail
        );
        let lax = STATUS
            .replace("NoNewPrivs:\t1", "NoNewPrivs:\t0")
            .replace("Seccomp:\t2", "Seccomp:\t0");
        let failed = judge_status(Some(&lax))
            .into_iter()
            .filter(|c| c.status == CheckStatus::Failed)
            .count();
        assert_eq!(failed, 2);
        assert_eq!(judge_status(None)[0].status, CheckStatus::Failed);
    }

    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units     \nMax cpu time              12                   13                   seconds   \nMax file size             0                    0                    bytes     \nMax core file size        0                    0                    bytes     \nMax open files            8                    8                    files     \nMax address space         1073741824           1073741824           bytes     \n";

    #[test]
    fn limits_read_back_match_what_the_host_asked() {
        let check = judge_limits(Some(LIMITS), 1 << 30, 12);
        assert_eq!(check.status, CheckStatus::Ok, "{}", check.detail);
        let check = judge_limits(Some(LIMITS), 1 << 30, 20);
        assert_eq!(check.status, CheckStatus::Failed);
        assert!(
            check
                .detail
                .contains("Max cpu time: expected 20/21, found 12/13"),
            "{}",
            check.detail
        );
        let open = LIMITS.replace(
            "Max address space         1073741824           1073741824",
            "Max address space         unlimited            unlimited",
        );
        let check = judge_limits(Some(&open), 1 << 30, 12);
        assert!(
            check.detail.contains("found unlimited/unlimited"),
            "{}",
            check.detail
        );
        assert_eq!(judge_limits(None, 1, 1).status, CheckStatus::Failed);
    }

    #[test]
    fn a_failed_inspection_is_not_healthy() {
        let checks = judge_inspect(&Err("worker died".to_owned()));
        assert!(checks.iter().all(|c| c.status == CheckStatus::Failed));
        let mut leaky = result(true, None);
        leaky.open_fds_above_2 = vec![5];
        let checks = judge_inspect(&Ok(leaky));
        assert_eq!(checks[1].status, CheckStatus::Failed);
        let mut armed = result(true, None);
        assert_eq!(
            judge_parent_death_signal(&Ok(armed.clone())).status,
            CheckStatus::Failed
        );
        armed.parent_death_signal = Some(libc::SIGKILL);
        assert_eq!(
            judge_parent_death_signal(&Ok(armed)).status,
            CheckStatus::Ok
        );
    }
}
