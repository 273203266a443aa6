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

/// The exit code of a host-policy error: a bad setting or file is a configuration error (2);
/// a file that cannot be read (or the trust store's safety checks) is operational (1).
pub fn permissions_exit_code(err: &crate::permissions::PermissionsError) -> ExitCode {
    use crate::permissions::PermissionsError;
    match err {
        PermissionsError::Policy(_)
        | PermissionsError::Trust(crate::trust::TrustError::Policy(_))
        | PermissionsError::FileTooLarge { .. }
        | PermissionsError::NotUtf8 { .. } => ExitCode::Invalid,
        _ => ExitCode::Operational,
    }
}

impl From<crate::permissions::PermissionsError> for CliError {
    fn from(err: crate::permissions::PermissionsError) -> Self {
        CliError::with_code(
            permissions_exit_code(&err),
            crate::workflow::plan::error_chain(&err),
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The host policy does not know its front end: no exit codes, no clap types.
    #[test]
    fn permissions_imports_nothing_of_the_command_line() {
        for (file, source) in [
            ("mod.rs", include_str!("../permissions/mod.rs")),
            ("mode.rs", include_str!("../permissions/mode.rs")),
            ("hooks.rs", include_str!("../permissions/hooks.rs")),
            (
                "classifier.rs",
                include_str!("../permissions/classifier.rs"),
            ),
            ("responder.rs", include_str!("../permissions/responder.rs")),
            ("spawn.rs", include_str!("../permissions/spawn.rs")),
            ("host_env.rs", include_str!("../permissions/host_env.rs")),
            (
                "credentials.rs",
                include_str!("../permissions/credentials.rs"),
            ),
        ] {
            assert!(
                !source.contains("crate::cli") && !source.contains("clap::"),
                "permissions/{file} refers to the command line"
            );
        }
    }

    #[test]
    fn a_bad_permission_setting_is_a_usage_error_and_an_unreadable_file_operational() {
        let env = crate::permissions::HostEnvironment::from_vars([("RHO_PERMISSION_MODE", "yolo")]);
        let config = crate::config::Config::empty(std::path::PathBuf::from("/c.toml"));
        let err = crate::permissions::select_permission_mode(None, &env, &config).unwrap_err();
        assert_eq!(permissions_exit_code(&err), ExitCode::Invalid);
        assert_eq!(CliError::from(err).code, ExitCode::Invalid);
        let read = crate::permissions::PermissionsError::Read {
            file: "/h/hooks.toml".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert_eq!(permissions_exit_code(&read), ExitCode::Operational);
    }
}
