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

    /// Appends the calls that led to the fault (innermost first) when it happened inside a
    /// function: an error raised in a helper then also names the line in the workflow file
    /// that called the helper. One line, so a message cannot forge lines of its own.
    #[must_use]
    pub(crate) fn with_call_stack(mut self, stack: &starlark::eval::CallStack) -> Self {
        // Each frame is a function and the place it was called from; the innermost call is
        // the span itself, so it is left out.
        let calls: Vec<String> = stack
            .frames
            .iter()
            .rev()
            .filter_map(|frame| {
                let at = source_span(frame.location.as_ref()?);
                Some(format!(
                    "`{}` called at {}:{}:{}",
                    frame.name,
                    at.label.strip_prefix("//").unwrap_or(&at.label),
                    at.line,
                    at.column
                ))
            })
            .skip(1)
            .collect();
        if !calls.is_empty() {
            self.message.push_str("; call stack, innermost first: ");
            self.message.push_str(&calls.join(", "));
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
