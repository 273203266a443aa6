//! What `rho doctor` checks: that the planner sandbox holds, each protection proved on its
//! own ([`sandbox`]), and that everything a run depends on is in order ([`setup`]: the
//! configuration, the data directory, the agent runtimes).
//!
//! Invariant: a check inspects and grants nothing, and never reveals a secret: for a key
//! variable only whether it is set is reported, never its value.

pub mod sandbox;
pub mod setup;

use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// It holds.
    Ok,
    /// Something optional is unavailable (a runtime nobody selected); runs that do not need
    /// it are unaffected.
    Warning,
    /// It does not hold: planning or running is unsafe or will fail.
    Failed,
}

/// One finding of `rho doctor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The area: `sandbox`, `config`, `data_directory`, `provider`, `claude`.
    pub area: &'static str,
    /// What was checked (`landlock refuses open on its own`, `ANTHROPIC_API_KEY`, ...).
    pub name: String,
    /// The outcome.
    pub status: CheckStatus,
    /// What was observed.
    pub detail: String,
    /// What to do about it, when it does not hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    /// A check that holds.
    pub fn ok(area: &'static str, name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            area,
            name: name.into(),
            status: CheckStatus::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    /// A check that does not hold (`status` `Failed` or `Warning`), with what to do.
    pub fn not_ok(
        area: &'static str,
        name: impl Into<String>,
        status: CheckStatus,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            area,
            name: name.into(),
            status,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    /// A check that holds when `holds`, else fails with `fix`.
    pub fn expect(
        area: &'static str,
        name: impl Into<String>,
        holds: bool,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        if holds {
            Self::ok(area, name, detail)
        } else {
            Self::not_ok(area, name, CheckStatus::Failed, detail, fix)
        }
    }
}
