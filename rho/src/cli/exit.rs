//! Exit codes are a public contract: scripts and CI branch on them.
//!
//! Every subcommand returns `Result<ExitCode, CliError>`; `main` maps both into the process
//! exit status here and nowhere else.

use std::fmt;

/// The documented exit codes of `rho`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// The command succeeded; for `run`/`resume`, the workflow outcome is `success`.
    Success = 0,
    /// An operational error: I/O, store, worker crash, a lock held by another owner.
    Operational = 1,
    /// Invalid usage or an invalid workflow (validation or planning error, budget exceeded).
    Invalid = 2,
    /// `run`/`resume` finished with outcome `failure`.
    Failure = 3,
    /// `run`/`resume` finished with outcome `denial`.
    Denial = 4,
    /// `run`/`resume` finished with outcome `cancellation` (also SIGINT/SIGTERM to the owner).
    Cancellation = 5,
    /// `run`/`resume` finished with outcome `blocked`.
    Blocked = 6,
    /// The run needs recovery (an attempt's fate is uncertain).
    NeedsRecovery = 7,
    /// `rho run`: the wall-clock timeout or the model-step budget was reached.
    Timeout = 124,
    /// `rho run`, or planning (`validate`, `plan`, `graph`, `workflow run`): stopped by
    /// SIGINT, after cleanup.
    Interrupted = 130,
    /// `rho run`, or planning: stopped by SIGTERM, after cleanup.
    Terminated = 143,
}

impl ExitCode {
    /// The numeric process status.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// An error that ends a command, with the exit code it maps to.
#[derive(Debug)]
pub struct CliError {
    /// The exit code to leave with.
    pub code: ExitCode,
    /// The message printed on stderr (already complete: it names what is at fault).
    pub message: String,
}

impl CliError {
    /// An invalid usage or invalid workflow error (exit 2).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self {
            code: ExitCode::Invalid,
            message: message.into(),
        }
    }

    /// An operational error (exit 1).
    pub fn operational(message: impl Into<String>) -> Self {
        Self {
            code: ExitCode::Operational,
            message: message.into(),
        }
    }

    /// An error with an explicit exit code.
    pub fn with_code(code: ExitCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// Shorthand for subcommand results.
pub type CliResult = Result<ExitCode, CliError>;
