//! The messages of one planner conversation, carried in frames (`frame`):
//!
//! 1. worker → host: [`WorkerMessage::Hardening`] (before reading anything);
//! 2. host → worker: [`HostMessage::Plan`] (or [`HostMessage::Probe`] for diagnostics);
//! 3. any number of worker → host [`WorkerMessage::LoadModule`] answered by host → worker
//!    [`HostMessage::Module`];
//! 4. worker → host: one [`WorkerMessage::Planned`] (or [`WorkerMessage::ProbeResult`]).
//!
//! Invariant: every message travels in an [`Envelope`] whose `protocol_version` is checked
//! before the payload is trusted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::budget::{BudgetOverrun, Budgets};
use crate::canonical;
use crate::data::Data;
use crate::evaluated::{EvaluatedWorkflow, SourceSpan};
use crate::frame::{self, FrameError};

/// The protocol version of this build.
pub const PROTOCOL_VERSION: u32 = 1;

/// A message with its protocol version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope<T> {
    /// Must equal [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// The payload.
    pub message: T,
}

impl<T> Envelope<T> {
    /// Wraps a message with this build's protocol version.
    pub fn new(message: T) -> Self {
        Self {
            protocol_version: PROTOCOL_VERSION,
            message,
        }
    }
}

/// Only the version of an envelope, for when its message does not decode: a peer of another
/// protocol version may send messages this build cannot read, and the mismatch is the error
/// to report, not the undecodable payload.
#[derive(Deserialize)]
struct VersionHeader {
    protocol_version: u32,
    #[serde(rename = "message")]
    _message: serde::de::IgnoredAny,
}

/// Reads one framed [`Envelope`] and returns its message after checking the protocol
/// version; a peer of another version gets [`FrameError::VersionMismatch`] even when its
/// message has a shape this build does not know.
pub fn read_envelope<R: std::io::Read, T: serde::de::DeserializeOwned>(
    r: &mut R,
) -> Result<T, FrameError> {
    let payload = frame::read_frame(r)?;
    match canonical::from_canonical_bytes::<Envelope<T>>(&payload) {
        Ok(envelope) => {
            frame::check_version(PROTOCOL_VERSION, envelope.protocol_version)?;
            Ok(envelope.message)
        }
        Err(error) => {
            if let Ok(header) = canonical::from_canonical_bytes::<VersionHeader>(&payload) {
                frame::check_version(PROTOCOL_VERSION, header.protocol_version)?;
            }
            Err(error.into())
        }
    }
}

/// Writes `message` as one framed [`Envelope`] of this build's protocol version.
pub fn write_envelope<W: std::io::Write, T: Serialize>(
    w: &mut W,
    message: T,
) -> Result<(), FrameError> {
    frame::write_message(w, &Envelope::new(message))
}

/// Messages from the worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerMessage {
    /// The result of self-hardening; always the first message.
    Hardening(HardeningReport),
    /// A request for the module at `label` (answered by [`HostMessage::Module`]).
    LoadModule(ModuleRequest),
    /// The final answer to a plan request.
    Planned(PlanResponse),
    /// The answer to a probe.
    ProbeResult(ProbeResult),
}

/// Messages from the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostMessage {
    /// Evaluate a workflow.
    Plan(PlanRequest),
    /// The answer to a module request.
    Module(ModuleResponse),
    /// Try one forbidden operation and report what the kernel said (used by `rho doctor`
    /// and the sandbox tests; it proves a protection, it grants nothing).
    Probe(SandboxProbe),
}

/// How strict the worker must be about its protections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Every protection is required; the worker refuses to evaluate otherwise.
    Required,
    /// Missing protections are reported, and evaluation goes on (explicit opt-in only).
    BestEffort,
}

impl SandboxMode {
    /// The mode's name as written on the worker's command line and in `RHO_PLANNER_SANDBOX`.
    pub fn name(self) -> &'static str {
        match self {
            SandboxMode::Required => "required",
            SandboxMode::BestEffort => "best-effort",
        }
    }
}

/// The stable protection names, in the order the worker applies and reports them. A report
/// lists each exactly once; the host refuses one that omits, repeats or invents a name.
pub const PROTECTIONS: [&str; 8] = [
    "parent_death_signal",
    "close_fds",
    "empty_environment",
    "rlimits",
    "no_new_privs",
    "capabilities",
    "landlock",
    "seccomp",
];

/// One protection and whether it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtectionStatus {
    /// Stable name: `parent_death_signal`, `close_fds`, `empty_environment`, `rlimits`,
    /// `no_new_privs`, `capabilities`, `landlock`, `seccomp`.
    pub name: String,
    /// Whether it was applied.
    pub applied: bool,
    /// What was applied, or why not.
    pub detail: String,
}

/// The worker's first message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardeningReport {
    /// The mode the worker was started in.
    pub mode: SandboxMode,
    /// Each protection, in the order applied.
    pub protections: Vec<ProtectionStatus>,
    /// Set when the worker refuses to evaluate (a required protection is missing); the
    /// worker exits after sending the report.
    pub refused: Option<String>,
}

impl HardeningReport {
    /// Names of the protections that are not applied.
    pub fn missing(&self) -> Vec<&str> {
        self.protections
            .iter()
            .filter(|p| !p.applied)
            .map(|p| p.name.as_str())
            .collect()
    }

    /// Checks that the report describes a worker started in `requested` mode and lists every
    /// protection of [`PROTECTIONS`] exactly once, and nothing else. `Err` says what is wrong.
    ///
    /// A report that leaves a protection out would otherwise read as "nothing missing".
    pub fn check_complete(&self, requested: SandboxMode) -> Result<(), String> {
        if self.mode != requested {
            return Err(format!(
                "the worker reports sandbox mode `{}`, but `{}` was requested",
                self.mode.name(),
                requested.name()
            ));
        }
        let mut problems = Vec::new();
        for expected in PROTECTIONS {
            match self
                .protections
                .iter()
                .filter(|p| p.name == expected)
                .count()
            {
                1 => {}
                0 => problems.push(format!("`{expected}` is not listed")),
                n => problems.push(format!("`{expected}` is listed {n} times")),
            }
        }
        for unknown in self
            .protections
            .iter()
            .filter(|p| !PROTECTIONS.contains(&p.name.as_str()))
        {
            problems.push(format!("`{}` is not a known protection", unknown.name));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("incomplete report: {}", problems.join(", ")))
        }
    }
}

/// A plan request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    /// The entry module's label (`//.rho/workflows/check/workflow.star`).
    pub entry_label: String,
    /// The entry module's source.
    pub entry_source: String,
    /// Input values from the user, not yet validated.
    pub inputs: BTreeMap<String, Data>,
    /// The budgets in force.
    pub budgets: Budgets,
}

/// A module request from the worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleRequest {
    /// The label as written in `load()`.
    pub label: String,
    /// The label of the module that loads it.
    pub from: String,
    /// Where the `load()` statement is.
    pub span: Option<SourceSpan>,
}

/// The host's answer to a module request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModuleResponse {
    /// The module's source.
    Source {
        /// The normalized label.
        label: String,
        /// The text.
        source: String,
    },
    /// The host refused (label rules, missing file, symlink, budget).
    Refused {
        /// The label as requested.
        label: String,
        /// A diagnostic naming the reason.
        diagnostic: Diagnostic,
    },
}

/// The final answer to a plan request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanResponse {
    /// Evaluation succeeded.
    Workflow(EvaluatedWorkflow),
    /// Evaluation failed.
    Diagnostics(Vec<Diagnostic>),
}

/// A problem found while planning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Diagnostic {
    /// A stable machine-readable code (`syntax`, `budget`, `unknown_input`, ...).
    pub code: String,
    /// The complete human message.
    pub message: String,
    /// Where in the source, when known.
    pub span: Option<SourceSpan>,
    /// The budget overrun, for `code == "budget"`.
    pub budget: Option<BudgetOverrun>,
}

impl Diagnostic {
    /// A diagnostic without a location.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            span: None,
            budget: None,
        }
    }

    /// Attaches a location.
    #[must_use]
    pub fn at(mut self, span: Option<SourceSpan>) -> Self {
        self.span = span;
        self
    }

    /// A budget overrun.
    pub fn budget(overrun: BudgetOverrun) -> Self {
        Self {
            code: "budget".to_owned(),
            message: overrun.to_string(),
            span: None,
            budget: Some(overrun),
        }
    }
}

/// A forbidden operation to attempt inside the hardened worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxProbe {
    /// `open(path, O_RDONLY)`.
    Open {
        /// The path to try.
        path: String,
    },
    /// `socket(AF_INET, SOCK_STREAM)`.
    Socket,
    /// `execve(path)`.
    Execve {
        /// The program to try.
        path: String,
    },
    /// `fork()`.
    Fork,
    /// `kill(pid, 0)`: a signal probe to a process outside the sandbox (the host). Seccomp
    /// and Landlock's signal scope each refuse it.
    Signal {
        /// The target process.
        pid: i32,
    },
    /// Report the environment size and the open descriptors above 2.
    Inspect,
}

/// The outcome of a probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeResult {
    /// The probe that ran.
    pub probe: SandboxProbe,
    /// `true` when the operation was allowed (a protection gap).
    pub succeeded: bool,
    /// The errno when it failed.
    pub errno: Option<i32>,
    /// Number of environment variables (for `Inspect`).
    pub environment_len: Option<u64>,
    /// Open descriptors above 2 (for `Inspect`).
    pub open_fds_above_2: Vec<i32>,
    /// The parent-death signal read back with `prctl(PR_GET_PDEATHSIG)` (for `Inspect`);
    /// `None` when the call is refused (seccomp forbids `prctl`).
    #[serde(default)]
    pub parent_death_signal: Option<i32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message of a future protocol version, with a shape this build does not know.
    #[derive(Serialize)]
    enum FutureMessage {
        Teleport { to: String },
    }

    fn frame_of<T: Serialize>(value: &T) -> Vec<u8> {
        let mut buf = Vec::new();
        frame::write_message(&mut buf, value).unwrap();
        buf
    }

    #[test]
    fn a_future_version_with_an_unknown_message_is_a_version_mismatch() {
        let bytes = frame_of(&Envelope {
            protocol_version: PROTOCOL_VERSION + 1,
            message: FutureMessage::Teleport { to: "mars".into() },
        });
        let err = read_envelope::<_, HostMessage>(&mut bytes.as_slice()).unwrap_err();
        assert!(
            matches!(err, FrameError::VersionMismatch { expected, got }
                if expected == PROTOCOL_VERSION && got == PROTOCOL_VERSION + 1),
            "{err:?}"
        );
    }

    #[test]
    fn a_future_version_with_a_known_message_is_a_version_mismatch() {
        let bytes = frame_of(&Envelope {
            protocol_version: PROTOCOL_VERSION + 1,
            message: HostMessage::Probe(SandboxProbe::Fork),
        });
        let err = read_envelope::<_, HostMessage>(&mut bytes.as_slice()).unwrap_err();
        assert!(matches!(err, FrameError::VersionMismatch { .. }), "{err:?}");
    }

    #[test]
    fn an_unknown_message_of_our_version_is_a_payload_error() {
        let bytes = frame_of(&Envelope {
            protocol_version: PROTOCOL_VERSION,
            message: FutureMessage::Teleport { to: "mars".into() },
        });
        let err = read_envelope::<_, HostMessage>(&mut bytes.as_slice()).unwrap_err();
        assert!(matches!(err, FrameError::Payload(_)), "{err:?}");
    }

    fn full_report(mode: SandboxMode) -> HardeningReport {
        HardeningReport {
            mode,
            protections: PROTECTIONS
                .iter()
                .map(|name| ProtectionStatus {
                    name: (*name).to_owned(),
                    applied: true,
                    detail: String::new(),
                })
                .collect(),
            refused: None,
        }
    }

    #[test]
    fn a_complete_report_of_the_requested_mode_is_accepted() {
        assert_eq!(
            full_report(SandboxMode::Required).check_complete(SandboxMode::Required),
            Ok(())
        );
        let best = full_report(SandboxMode::BestEffort);
        assert_eq!(best.check_complete(SandboxMode::BestEffort), Ok(()));
    }

    #[test]
    fn a_report_of_another_mode_is_refused() {
        let report = full_report(SandboxMode::BestEffort);
        let problem = report.check_complete(SandboxMode::Required).unwrap_err();
        assert!(
            problem.contains("`best-effort`") && problem.contains("`required` was requested"),
            "{problem}"
        );
    }

    #[test]
    fn a_missing_repeated_or_unknown_protection_is_refused() {
        let mut report = full_report(SandboxMode::Required);
        report.protections.retain(|p| p.name != "landlock");
        let problem = report.check_complete(SandboxMode::Required).unwrap_err();
        assert_eq!(problem, "incomplete report: `landlock` is not listed");

        let mut report = full_report(SandboxMode::Required);
        let seccomp = report.protections.last().unwrap().clone();
        report.protections.push(seccomp);
        report.protections.push(ProtectionStatus {
            name: "luck".to_owned(),
            applied: true,
            detail: String::new(),
        });
        let problem = report.check_complete(SandboxMode::Required).unwrap_err();
        assert!(problem.contains("`seccomp` is listed 2 times"), "{problem}");
        assert!(
            problem.contains("`luck` is not a known protection"),
            "{problem}"
        );

        let empty = HardeningReport {
            mode: SandboxMode::Required,
            protections: Vec::new(),
            refused: None,
        };
        let problem = empty.check_complete(SandboxMode::Required).unwrap_err();
        assert_eq!(problem.matches("is not listed").count(), PROTECTIONS.len());
    }

    #[test]
    fn envelopes_round_trip() {
        let mut buf = Vec::new();
        write_envelope(&mut buf, HostMessage::Probe(SandboxProbe::Socket)).unwrap();
        let message: HostMessage = read_envelope(&mut buf.as_slice()).unwrap();
        assert_eq!(message, HostMessage::Probe(SandboxProbe::Socket));
    }
}
