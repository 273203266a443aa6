//! Permission modes, the decision for command nodes and tool calls, the approval flow, hooks
//! and trust.
//!
//! This crate owns every policy rule of `rho` as pure functions and small state machines; the
//! host (`rho`) does all I/O — reading files and environment variables, prompting, running
//! classifier and hook processes — and feeds the results in through the traits of
//! [`approval`].
//!
//! Invariant: nothing here touches the file system, the environment, the clock or a process,
//! and every path that cannot reach a positive answer ends in a denial (fail closed).

pub mod approval;
pub mod decision;
pub mod hooks;
pub mod mode;
pub mod request;
pub mod trust;

use std::path::PathBuf;

pub use approval::{
    ApprovalAnswer, ApprovalContext, ApprovalReason, ApprovalResponder, Approvers, Authorization,
    Authorizer, Classifier, ClassifierAnswer, Decider, EscalationCounters, HookRunner, HookVerdict,
    NoHooks,
};
pub use decision::{ApprovalRoute, PolicyDecision, decide};
pub use hooks::{
    HookEvent, HookEventName, HookRun, HookScope, HookSet, HookSpec, HooksFile, hook_environment,
    hook_verdict, parse_hook_response, parse_hooks_file,
};
pub use mode::{ModeSelection, ModeSource, PermissionMode, narrow, select_mode};
pub use request::{
    CommandRequest, ExecutableIdentity, InterpreterIdentity, OperationClass, PermissionRequest,
    ToolRequest,
};
pub use trust::{
    CurrentTrust, TrustKind, TrustOverrides, TrustRequirement, TrustStore, check_trust,
};

/// Why a policy input (a mode setting, a hooks file, the trust store, a frozen plan's trust)
/// was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A string that should name a permission mode names none.
    #[error(
        "unknown permission mode `{value}`: expected one of bypass, auto, allow_edits, plan, \
         supervised"
    )]
    UnknownPermissionMode {
        /// The rejected text, exactly as given.
        value: String,
    },

    /// A configured permission mode (flag, environment or config file) names no mode.
    #[error(
        "invalid permission mode `{value}` from {origin}: expected one of bypass, auto, \
         allow_edits, plan, supervised"
    )]
    InvalidModeSetting {
        /// Where the value came from.
        origin: mode::ModeSource,
        /// The rejected text, exactly as given.
        value: String,
    },

    /// A hooks file is not valid TOML.
    #[error("{}:{line}:{column}: invalid TOML: {message}", file.display())]
    HooksSyntax {
        /// The hooks file.
        file: PathBuf,
        /// 1-based line of the error (1 when the parser gave no position).
        line: usize,
        /// 1-based column of the error (1 when the parser gave no position).
        column: usize,
        /// The parser's description.
        message: String,
    },

    /// A top-level key of a hooks file is missing, unknown or has a bad value.
    #[error("{}: field `{field}`: {problem}", file.display())]
    HooksFile {
        /// The hooks file.
        file: PathBuf,
        /// The top-level key at fault.
        field: String,
        /// What is wrong with it.
        problem: String,
    },

    /// A field of one `[[hook]]` table is missing, unknown or has a bad value.
    #[error("{}: hook `{hook}`: field `{field}`: {problem}", file.display())]
    HookField {
        /// The hooks file.
        file: PathBuf,
        /// The hook's `id`, or `#N` (1-based position) when the id itself is unusable.
        hook: String,
        /// The key at fault.
        field: String,
        /// What is wrong with it.
        problem: String,
    },

    /// `trust.json` does not have the expected shape.
    #[error("{}: invalid trust store: {problem}", file.display())]
    TrustStoreFormat {
        /// The trust store file.
        file: PathBuf,
        /// What is wrong with it.
        problem: String,
    },

    /// A path offered to the trust store is not absolute and normalized.
    #[error(
        "workspace path `{}` is not canonical: trust is recorded for absolute, normalized paths",
        path.display()
    )]
    TrustPathNotCanonical {
        /// The rejected path.
        path: PathBuf,
    },

    /// A frozen plan needed project trust that the current process no longer has.
    #[error(
        "the plan needed trust that is gone for workspace `{}`: {}; resolve trust (`rho trust \
         add`{}) and create a new plan",
        workspace.display(),
        trust::describe_kinds(missing),
        trust::override_hint(missing)
    )]
    TrustRevoked {
        /// The canonical workspace path the plan was made for.
        workspace: PathBuf,
        /// Each kind of trust the plan needed and no longer has.
        missing: Vec<trust::TrustKind>,
    },
}
