//! [`ToolError`]: every way a tool call can end without a result, in words a model can act on.
//!
//! Invariant: a denial always says who denied (policy, a named hook, the classifier, a human)
//! and why; an argument error always names the field; a limit error names the limit.

use rho_policy::{Authorization, Decider, PermissionMode};

/// Why a tool call produced no result.
///
/// The `Display` text is what the model (or the MCP client) reads, so each variant carries
/// what is needed to act on it: the field to fix, the limit hit, who denied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// No tool of that name is in the registry.
    #[error("unknown tool `{name}`; available: {available}")]
    UnknownTool {
        /// The requested name.
        name: String,
        /// The registry's tool names, comma-separated.
        available: String,
    },

    /// The arguments do not satisfy the tool's schema (or a rule the schema cannot express).
    #[error("invalid arguments for `{tool}`: field `{field}`: {problem}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// The field at fault, dotted (`inputs.target`), or `(arguments)` for the whole
        /// object.
        field: String,
        /// What is wrong with it.
        problem: String,
    },

    /// The permission path refused the call; nothing ran.
    #[error("`{tool}` denied by {decided_by}: {reason} (permission mode {mode})")]
    Denied {
        /// The tool.
        tool: String,
        /// Who denied: policy, a hook (by id), the classifier, a human.
        decided_by: Decider,
        /// Why, as the decider said.
        reason: String,
        /// The mode in force.
        mode: PermissionMode,
    },

    /// The host did not confirm an action that needs explicit consent (a run of an exact
    /// program digest); nothing ran.
    #[error("`{tool}` not confirmed: {reason}")]
    NotConfirmed {
        /// The tool.
        tool: String,
        /// Why no consent was given (declined, cancelled, no one can answer), and what to do.
        reason: String,
    },

    /// A limit of the tool or its service was reached.
    #[error("`{tool}`: limit `{limit}` reached ({limit_value}): {detail}")]
    Limit {
        /// The tool.
        tool: String,
        /// The limit's name (`max_live_processes`, `summary_bytes`, ...).
        limit: &'static str,
        /// The limit's value, with its unit.
        limit_value: String,
        /// What was attempted.
        detail: String,
    },

    /// An ID (process, plan, run) names nothing this tool knows.
    #[error("`{tool}`: unknown {kind} `{id}`{hint}")]
    UnknownId {
        /// The tool.
        tool: String,
        /// What kind of ID (`process_id`, `plan`, `run`).
        kind: &'static str,
        /// The ID as given.
        id: String,
        /// Extra guidance, starting with `: ` when present.
        hint: String,
    },

    /// The call was cancelled (the client cancelled the request, or the host is shutting down)
    /// before it finished.
    #[error("`{tool}` cancelled before it finished")]
    Cancelled {
        /// The tool.
        tool: String,
    },

    /// The call ran and failed: an I/O error, an invalid workflow, a store error.
    #[error("`{tool}` failed: {message}")]
    Failed {
        /// The tool.
        tool: String,
        /// What failed, with its context (file, line, node).
        message: String,
    },
}

impl ToolError {
    /// A denial built from the permission path's answer.
    pub fn denied(tool: &str, authorization: Authorization) -> Self {
        ToolError::Denied {
            tool: tool.to_owned(),
            decided_by: authorization.decided_by,
            reason: authorization.reason,
            mode: authorization.mode,
        }
    }

    /// An argument error naming `field`.
    pub fn invalid(tool: &str, field: impl Into<String>, problem: impl Into<String>) -> Self {
        ToolError::InvalidArguments {
            tool: tool.to_owned(),
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// A failure with its message.
    pub fn failed(tool: &str, message: impl Into<String>) -> Self {
        ToolError::Failed {
            tool: tool.to_owned(),
            message: message.into(),
        }
    }

    /// A short machine-readable code for structured results (`denied`, `invalid_arguments`,
    /// ...), stable across releases.
    pub fn code(&self) -> &'static str {
        match self {
            ToolError::UnknownTool { .. } => "unknown_tool",
            ToolError::InvalidArguments { .. } => "invalid_arguments",
            ToolError::Denied { .. } => "denied",
            ToolError::NotConfirmed { .. } => "not_confirmed",
            ToolError::Limit { .. } => "limit",
            ToolError::UnknownId { .. } => "unknown_id",
            ToolError::Cancelled { .. } => "cancelled",
            ToolError::Failed { .. } => "failed",
        }
    }

    /// The structured form of the error: `code`, `message`, and the variant's fields.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let mut value = json!({"error": self.code(), "message": self.to_string()});
        let extra = match self {
            ToolError::InvalidArguments { field, .. } => json!({"field": field}),
            ToolError::Denied {
                decided_by, mode, ..
            } => json!({"decided_by": decided_by.to_string(), "mode": mode.as_str()}),
            ToolError::Limit { limit, .. } => json!({"limit": limit}),
            ToolError::UnknownId { kind, id, .. } => json!({"kind": kind, "id": id}),
            _ => json!({}),
        };
        if let (Some(map), serde_json::Value::Object(extra)) = (value.as_object_mut(), extra) {
            map.extend(extra);
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denial_names_who_and_why() {
        let err = ToolError::denied(
            "process",
            Authorization {
                allowed: false,
                decided_by: Decider::Hook { id: "guard".into() },
                reason: "no servers".into(),
                mode: PermissionMode::Bypass,
            },
        );
        assert_eq!(
            err.to_string(),
            "`process` denied by hook `guard`: no servers (permission mode bypass)"
        );
        assert_eq!(err.to_json()["decided_by"], "hook `guard`");
        assert_eq!(err.to_json()["error"], "denied");
    }

    #[test]
    fn argument_error_names_the_field() {
        let err = ToolError::invalid("workflow", "inputs.target", "expected a string");
        assert_eq!(
            err.to_string(),
            "invalid arguments for `workflow`: field `inputs.target`: expected a string"
        );
        assert_eq!(err.to_json()["field"], "inputs.target");
    }
}
