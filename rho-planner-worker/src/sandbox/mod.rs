//! Self-hardening of the planner worker, run before it reads a single byte of its request.
//!
//! [`harden`] applies the protections of `planning.md` in their fixed order (parent-death
//! signal, descriptors, environment, rlimits, `no_new_privs`, capabilities, Landlock,
//! seccomp) and returns a [`HardeningReport`] with one [`ProtectionStatus`] per protection,
//! named as in [`PROTECTIONS`]. Each step checks what it did rather than assuming it.
//!
//! Invariant: `harden` runs on the process's only thread, before any other thread exists
//! and before stdin is read; in [`SandboxMode::Required`] a protection that is not applied
//! makes the report carry `refused`, and the worker must then stop without evaluating.

pub mod fds;
pub mod landlock;
pub mod parent;
pub mod privileges;
pub mod probe;
pub mod rlimits;
pub mod seccomp;

use std::ffi::OsString;

use rho_ipc::budget::Budgets;
use rho_ipc::message::{HardeningReport, ProtectionStatus, SandboxMode};

/// The stable protection names, in the order [`harden`] applies and reports them. The host
/// (`rho doctor`, the plan manifest) shows each as applied or missing under these names, and
/// refuses a report that does not list every one of them.
pub use rho_ipc::message::PROTECTIONS;

/// Seconds of CPU time granted beyond the wall-time budget before the kernel stops the
/// worker (the rule is shared with the host: [`rho_ipc::budget::planner_cpu_seconds`]).
pub use rho_ipc::budget::PLANNER_CPU_MARGIN_SECONDS as CPU_MARGIN_SECONDS;

/// Why hardening, argument parsing or a rule builder failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A command-line argument of the worker is unknown or malformed.
    #[error("invalid worker argument `{argument}`: {reason}")]
    Usage {
        /// The argument as given.
        argument: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A system call used to apply a protection failed.
    #[error("{call} failed")]
    Syscall {
        /// The call and its arguments, e.g. `prctl(PR_SET_NO_NEW_PRIVS)`.
        call: String,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
    /// A protection was applied but the kernel reports a state other than the one asked for.
    #[error("{protection} not in force after applying it: {observed}")]
    NotInForce {
        /// The protection's stable name.
        protection: &'static str,
        /// What the kernel reports instead.
        observed: String,
    },
    /// The kernel lacks a feature that a protection needs.
    #[error("{feature} is unavailable: {reason}")]
    Unsupported {
        /// The missing kernel feature, e.g. `Landlock ABI 9`.
        feature: String,
        /// What the kernel offers instead.
        reason: String,
    },
    /// The Landlock library rejected the ruleset.
    #[error("Landlock ruleset for ABI {abi} rejected")]
    Landlock {
        /// The ABI whose rights were requested.
        abi: u32,
        /// The library's error.
        #[source]
        source: ::landlock::RulesetError,
    },
    /// The seccomp rule builder or the BPF compiler rejected the filter.
    #[error("seccomp filter `{filter}` could not be built or installed")]
    Seccomp {
        /// Which of the two filters (`allowlist` or `enosys`).
        filter: &'static str,
        /// The library's error.
        #[source]
        source: seccompiler::Error,
    },
}

impl SandboxError {
    /// A failed system call with `errno` taken from the calling thread.
    pub(crate) fn last_os_error(call: impl Into<String>) -> Self {
        Self::Syscall {
            call: call.into(),
            source: std::io::Error::last_os_error(),
        }
    }

    /// The error and its sources on one line, for a report detail.
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}

/// Tunables of [`harden`], from the worker's command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardeningOptions {
    /// `RLIMIT_AS` in bytes (`--address-space-bytes`); the `planner_address_space_bytes`
    /// budget. It must hold the binary, the evaluation thread's stack and the Starlark heap.
    pub address_space_bytes: u64,
    /// `RLIMIT_CPU` soft limit in seconds (`--cpu-seconds`); the hard limit is one more.
    pub cpu_seconds: u64,
    /// An explicit minimum Landlock ABI (`--require-landlock-abi`). When set, a kernel
    /// below it is a refusal even in best-effort mode: the caller asked for it by name.
    pub required_landlock_abi: Option<u32>,
    /// The host's process id (`--parent-pid`); when given, the parent-death check compares
    /// against it, which also catches a parent that died before the worker's `main` ran.
    pub parent_pid: Option<i32>,
    /// A layered protection left out on purpose (`--omit=landlock|seccomp`), so that `rho
    /// doctor` can prove the other one refuses on its own. Such a worker answers probes
    /// only: it never evaluates a workflow.
    pub omit: Option<Omitted>,
}

/// A protection `rho doctor` may leave out of a probe-only worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Omitted {
    /// No Landlock ruleset: only seccomp stands between a probe and the kernel.
    Landlock,
    /// No seccomp filter: only Landlock stands between a probe and the kernel.
    Seccomp,
}

impl Omitted {
    /// The protection's stable name.
    pub fn name(self) -> &'static str {
        match self {
            Omitted::Landlock => "landlock",
            Omitted::Seccomp => "seccomp",
        }
    }
}

impl Default for HardeningOptions {
    fn default() -> Self {
        let budgets = Budgets::default();
        Self {
            address_space_bytes: budgets.planner_address_space_bytes,
            cpu_seconds: rho_ipc::budget::planner_cpu_seconds(budgets.planner_wall_ms),
            required_landlock_abi: None,
            parent_pid: None,
            omit: None,
        }
    }
}

/// The worker's parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerArgs {
    /// `--sandbox=required` (default) or `--sandbox=best-effort`.
    pub mode: SandboxMode,
    /// The hardening tunables.
    pub options: HardeningOptions,
}

/// Parses the worker's arguments (without the program name). Flags take their value as
/// `--flag=value` or `--flag value`.
pub fn parse_args<I>(args: I) -> Result<WorkerArgs, SandboxError>
where
    I: IntoIterator<Item = OsString>,
{
    let mut parsed = WorkerArgs {
        mode: SandboxMode::Required,
        options: HardeningOptions::default(),
    };
    let mut args = args.into_iter();
    while let Some(raw) = args.next() {
        let Some(arg) = raw.to_str().map(str::to_owned) else {
            return Err(usage(&raw.to_string_lossy(), "not valid UTF-8"));
        };
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg.clone(), None),
        };
        let known = matches!(
            flag.as_str(),
            "--sandbox"
                | "--address-space-bytes"
                | "--cpu-seconds"
                | "--require-landlock-abi"
                | "--parent-pid"
                | "--omit"
        );
        if !known {
            return Err(usage(&arg, "unknown argument"));
        }
        let value = match inline {
            Some(value) => value,
            None => match args.next().map(|next| next.to_str().map(str::to_owned)) {
                Some(Some(value)) => value,
                Some(None) => return Err(usage(&arg, "value is not valid UTF-8")),
                None => return Err(usage(&arg, "missing value")),
            },
        };
        match flag.as_str() {
            "--sandbox" => {
                parsed.mode = match value.as_str() {
                    "required" => SandboxMode::Required,
                    "best-effort" => SandboxMode::BestEffort,
                    _ => return Err(usage(&arg, "expected `required` or `best-effort`")),
                };
            }
            "--address-space-bytes" => {
                parsed.options.address_space_bytes = positive(&arg, &value)?;
            }
            "--cpu-seconds" => parsed.options.cpu_seconds = positive(&arg, &value)?,
            "--omit" => {
                parsed.options.omit = Some(match value.as_str() {
                    "landlock" => Omitted::Landlock,
                    "seccomp" => Omitted::Seccomp,
                    _ => return Err(usage(&arg, "expected `landlock` or `seccomp`")),
                });
            }
            "--require-landlock-abi" => {
                let abi = positive(&arg, &value)?;
                let abi = u32::try_from(abi).map_err(|_| usage(&arg, "ABI out of range"))?;
                parsed.options.required_landlock_abi = Some(abi);
            }
            _ => {
                let pid = positive(&arg, &value)?;
                let pid = i32::try_from(pid).map_err(|_| usage(&arg, "pid out of range"))?;
                parsed.options.parent_pid = Some(pid);
            }
        }
    }
    Ok(parsed)
}

fn usage(argument: &str, reason: &str) -> SandboxError {
    SandboxError::Usage {
        argument: argument.to_owned(),
        reason: reason.to_owned(),
    }
}

fn positive(argument: &str, value: &str) -> Result<u64, SandboxError> {
    match value.parse::<u64>() {
        Ok(0) => Err(usage(argument, "must be greater than zero")),
        Ok(number) => Ok(number),
        Err(_) => Err(usage(argument, "expected a decimal integer")),
    }
}

/// Hardens the calling process and reports every protection.
///
/// Every step runs even after an earlier one failed, so the report (and `rho doctor`) shows
/// the full picture; the caller decides from `refused` whether to go on. `refused` is set in
/// required mode when any protection is missing, and in every mode when the parent is
/// already gone or an explicitly required Landlock ABI is unavailable.
pub fn harden(mode: SandboxMode, options: &HardeningOptions) -> HardeningReport {
    // Landlock and seccomp bind only the calling thread (no TSYNC): count threads while
    // /proc is still reachable. std starts none before `main`, and `main` calls us first.
    // An unreadable count is not "one thread": fail closed and leave both unapplied.
    let threads = thread_count();
    let single_threaded = matches!(threads, Ok(1));

    let mut protections = Vec::with_capacity(PROTECTIONS.len());
    let mut hard_refusals = Vec::new();

    let parent = parent::set_parent_death_signal(options.parent_pid);
    if let Err(parent::ParentGone { detail }) = &parent.gone {
        hard_refusals.push(format!("parent_death_signal: {detail}"));
    }
    protections.push(status("parent_death_signal", parent.result));
    protections.push(status("close_fds", fds::close_above_stderr()));
    protections.push(status("empty_environment", check_environment()));
    protections.push(status("rlimits", rlimits::apply(&rlimits::plan(options))));
    protections.push(status("no_new_privs", privileges::set_no_new_privs()));
    protections.push(status("capabilities", privileges::drop_capabilities()));

    let landlock = if options.omit == Some(Omitted::Landlock) {
        Err(omitted(Omitted::Landlock))
    } else if single_threaded {
        landlock::enforce(options.required_landlock_abi)
    } else {
        Err(more_threads("landlock", &threads))
    };
    if let (Some(abi), Err(error)) = (options.required_landlock_abi, &landlock) {
        hard_refusals.push(format!("landlock (ABI {abi} required): {}", error.chain()));
    }
    protections.push(status("landlock", landlock));

    let seccomp = if options.omit == Some(Omitted::Seccomp) {
        Err(omitted(Omitted::Seccomp))
    } else if single_threaded {
        seccomp::install()
    } else {
        Err(more_threads("seccomp", &threads))
    };
    protections.push(status("seccomp", seccomp));

    let refused = refusal(mode, &protections, hard_refusals);
    HardeningReport {
        mode,
        protections,
        refused,
    }
}

/// The refusal reason for `protections` in `mode`, naming every missing protection.
pub fn refusal(
    mode: SandboxMode,
    protections: &[ProtectionStatus],
    mut hard_refusals: Vec<String>,
) -> Option<String> {
    if mode == SandboxMode::Required {
        for missing in protections.iter().filter(|p| !p.applied) {
            let reason = format!("{}: {}", missing.name, missing.detail);
            if !hard_refusals
                .iter()
                .any(|r| r.starts_with(missing.name.as_str()))
            {
                hard_refusals.push(reason);
            }
        }
    }
    if hard_refusals.is_empty() {
        None
    } else {
        Some(format!(
            "required protection not applied: {}",
            hard_refusals.join("; ")
        ))
    }
}

fn status(name: &str, result: Result<String, SandboxError>) -> ProtectionStatus {
    match result {
        Ok(detail) => ProtectionStatus {
            name: name.to_owned(),
            applied: true,
            detail,
        },
        Err(error) => ProtectionStatus {
            name: name.to_owned(),
            applied: false,
            detail: error.chain(),
        },
    }
}

fn omitted(which: Omitted) -> SandboxError {
    SandboxError::NotInForce {
        protection: which.name(),
        observed: "left out on request (--omit): this worker answers probes only".to_owned(),
    }
}

fn more_threads(protection: &'static str, threads: &Result<u64, String>) -> SandboxError {
    let observed = match threads {
        Ok(count) => format!(
            "the process has {count} threads and the filter would bind only the calling one"
        ),
        Err(why) => format!(
            "cannot tell whether the process is single-threaded ({why}), and the filter would \
             bind only the calling thread"
        ),
    };
    SandboxError::NotInForce {
        protection,
        observed,
    }
}

/// The planner receives nothing through its environment: the host clears it, and a
/// variable that got through (a loader hook such as `LD_PRELOAD` ran already, but a
/// library could still read one) means the host is not the one we expect.
fn check_environment() -> Result<String, SandboxError> {
    let names: Vec<String> = std::env::vars_os()
        .map(|(name, _)| name.to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        Ok("environment is empty".to_owned())
    } else {
        Err(SandboxError::NotInForce {
            protection: "empty_environment",
            observed: format!("{} variables set: {}", names.len(), names.join(", ")),
        })
    }
}

/// Threads of this process according to `/proc/self/stat` (field 20); `Err` says why the
/// count is unknown (`/proc` not mounted, an unexpected format).
fn thread_count() -> Result<u64, String> {
    let stat = std::fs::read_to_string("/proc/self/stat")
        .map_err(|e| format!("cannot read /proc/self/stat: {e}"))?;
    parse_thread_count(&stat)
}

/// Field 20 (`num_threads`) of a `/proc/<pid>/stat` line.
fn parse_thread_count(stat: &str) -> Result<u64, String> {
    // The command name (field 2) may contain spaces and parentheses; fields after the last
    // `)` are plain numbers, starting with field 3 (state).
    let malformed = || format!("/proc/self/stat has no thread count: {stat:?}");
    let after_name = &stat[stat.rfind(')').ok_or_else(malformed)? + 1..];
    after_name
        .split_whitespace()
        .nth(17)
        .and_then(|field| field.parse().ok())
        .ok_or_else(malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn defaults_follow_the_budgets() {
        let parsed = parse_args(args(&[])).unwrap();
        assert_eq!(parsed.mode, SandboxMode::Required);
        assert_eq!(parsed.options.address_space_bytes, 1_073_741_824);
        assert_eq!(parsed.options.cpu_seconds, 10 + CPU_MARGIN_SECONDS);
        assert_eq!(parsed.options.required_landlock_abi, None);
    }

    #[test]
    fn flags_accept_inline_and_separate_values() {
        let parsed = parse_args(args(&[
            "--sandbox=best-effort",
            "--require-landlock-abi",
            "99",
            "--cpu-seconds=3",
            "--address-space-bytes",
            "2048",
            "--parent-pid=42",
            "--omit=seccomp",
        ]))
        .unwrap();
        assert_eq!(parsed.mode, SandboxMode::BestEffort);
        assert_eq!(parsed.options.required_landlock_abi, Some(99));
        assert_eq!(parsed.options.cpu_seconds, 3);
        assert_eq!(parsed.options.address_space_bytes, 2048);
        assert_eq!(parsed.options.parent_pid, Some(42));
        assert_eq!(parsed.options.omit, Some(Omitted::Seccomp));
    }

    #[test]
    fn bad_arguments_are_usage_errors_naming_the_argument() {
        for bad in [
            &["--sandbox=off"][..],
            &["--cpu-seconds=0"],
            &["--cpu-seconds=x"],
            &["--require-landlock-abi"],
            &["--verbose"],
            &["--omit=rlimits"],
        ] {
            let error = parse_args(args(bad)).unwrap_err();
            assert!(
                matches!(error, SandboxError::Usage { .. }),
                "{bad:?}: {error}"
            );
            assert!(error.to_string().contains(bad[0]), "{error}");
        }
    }

    fn protection(name: &str, applied: bool) -> ProtectionStatus {
        ProtectionStatus {
            name: name.to_owned(),
            applied,
            detail: format!("{name} detail"),
        }
    }

    #[test]
    fn required_mode_refuses_naming_each_missing_protection() {
        let list = [protection("rlimits", true), protection("landlock", false)];
        let reason = refusal(SandboxMode::Required, &list, Vec::new()).unwrap();
        assert!(reason.contains("landlock: landlock detail"), "{reason}");
        assert!(!reason.contains("rlimits"), "{reason}");
        assert_eq!(refusal(SandboxMode::BestEffort, &list, Vec::new()), None);
    }

    #[test]
    fn thread_count_reads_field_20_and_refuses_anything_else() {
        let line = "42 (a (weird) name) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 3 0 9";
        assert_eq!(parse_thread_count(line), Ok(3));
        assert!(parse_thread_count("").is_err());
        assert!(parse_thread_count("42 (name) S 1 2").is_err());
        assert!(parse_thread_count("42 (name) S 1 42 42 0 -1 4 1 0 0 0 0 0 0 0 20 0 x 0").is_err());
    }

    #[test]
    fn an_unknown_thread_count_leaves_the_filters_unapplied() {
        let error = more_threads("seccomp", &Err("cannot read /proc/self/stat".to_owned()));
        let text = error.to_string();
        assert!(
            text.contains("cannot tell whether the process is single-threaded"),
            "{text}"
        );
        assert!(!status("seccomp", Err(error)).applied);
    }

    #[test]
    fn hard_refusals_hold_in_best_effort_mode() {
        let list = [protection("landlock", false)];
        let hard = vec!["landlock (ABI 99 required): kernel has 7".to_owned()];
        let reason = refusal(SandboxMode::BestEffort, &list, hard.clone()).unwrap();
        assert!(reason.contains("ABI 99"), "{reason}");
        let required = refusal(SandboxMode::Required, &list, hard).unwrap();
        assert_eq!(required.matches("landlock").count(), 1, "{required}");
    }
}
