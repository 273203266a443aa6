//! `Fault`: a diagnostic raised inside evaluation (by a builtin, the loader or the engine)
//! that travels through `starlark::Error` and comes back out as a [`Diagnostic`].
//!
//! Invariant: a fault keeps its stable `code` and, for budgets, the exact
//! [`BudgetOverrun`]; a span is attached as close to the source at fault as is known.

use rho_ipc::budget::{BudgetOverrun, Budgets};
use rho_ipc::evaluated::SourceSpan;
use rho_ipc::message::Diagnostic;
use starlark::codemap::FileSpan;

/// A problem in the workflow source found while evaluating it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Fault {
    /// Stable machine-readable code (`budget`, `invalid_name`, `unknown_input`, ...).
    pub(crate) code: &'static str,
    /// The complete message.
    pub(crate) message: String,
    /// The overrun for `code == "budget"`.
    pub(crate) budget: Option<BudgetOverrun>,
    /// Where in the source, when known.
    pub(crate) span: Option<SourceSpan>,
}

impl Fault {
    /// A fault with a code and message.
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            budget: None,
            span: None,
        }
    }

    /// A budget overrun.
    pub(crate) fn budget(overrun: BudgetOverrun) -> Self {
        Self {
            code: "budget",
            message: overrun.to_string(),
            budget: Some(overrun),
            span: None,
        }
    }

    /// Checks `measured` against the budget `name`.
    pub(crate) fn check(budgets: &Budgets, name: &'static str, measured: u64) -> Result<(), Self> {
        budgets.check(name, measured).map_err(Fault::budget)
    }

    /// Attaches a location unless one is already known.
    #[must_use]
    pub(crate) fn or_at(mut self, span: Option<SourceSpan>) -> Self {
        if self.span.is_none() {
            self.span = span;
        }
        self
    }

    /// The diagnostic the host receives.
    pub(crate) fn into_diagnostic(self) -> Diagnostic {
        Diagnostic {
            code: self.code.to_owned(),
            message: self.message,
            span: self.span,
            budget: self.budget,
        }
    }
}

impl From<Fault> for starlark::Error {
    fn from(fault: Fault) -> Self {
        starlark::Error::new_other(fault)
    }
}

/// Converts a Starlark file span (0-based) into the contract's 1-based span.
pub(crate) fn source_span(span: &FileSpan) -> SourceSpan {
    let resolved = span.resolve_span();
    SourceSpan {
        label: span.filename().to_owned(),
        line: u32::try_from(resolved.begin.line + 1).unwrap_or(u32::MAX),
        column: u32::try_from(resolved.begin.column + 1).unwrap_or(u32::MAX),
    }
}
