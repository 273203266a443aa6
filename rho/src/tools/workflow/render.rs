//! The `workflow` tool's summaries: line lists for each action, bounded by
//! [`crate::tools::summary::bound_lines`] at the edge, and their structured JSON.
//!
//! Invariant: summaries carry IDs, digests, lifecycle, per-node state and attempt,
//! diagnostics, exports and artifact references — never sources or logs.

use std::path::Path;

use rho_ipc::message::Diagnostic;
use serde_json::{Value, json};

use crate::workflow::plan::{PlanError, Planned};
use crate::workflow::runner::{CancelAnswer, Inspection};
use crate::workflow::state::{Artifact, State};
use crate::workflow::store::plans::PlanManifest;
use crate::workflow::store::runs::{ConfirmationMethod, RunManifest, StoredManifest};

/// `1 node`, `3 nodes`.
fn nodes(count: usize) -> String {
    if count == 1 {
        "1 node".to_owned()
    } else {
        format!("{count} nodes")
    }
}

/// One diagnostic line: `error[code] file:line:column: message` (location when known).
pub fn diagnostic_line(d: &Diagnostic) -> String {
    let message = d.message.replace('\n', " ");
    match &d.span {
        Some(span) => format!(
            "error[{}] {}:{}:{}: {message}",
            d.code,
            span.label.strip_prefix("//").unwrap_or(&span.label),
            span.line,
            span.column
        ),
        None => format!("error[{}] {message}", d.code),
    }
}

/// A diagnostic as JSON: code, message, and file/line/column and budget when known.
pub fn diagnostic_json(d: &Diagnostic) -> Value {
    let mut object = json!({ "code": d.code, "message": d.message });
    if let Some(span) = &d.span {
        object["file"] = span.label.strip_prefix("//").unwrap_or(&span.label).into();
        object["line"] = span.line.into();
        object["column"] = span.column.into();
    }
    if let Some(b) = &d.budget {
        object["budget"] = json!({ "name": b.name, "limit": b.limit, "measured": b.measured });
    }
    object
}

/// `validate` on success.
pub fn validate_ok(file: &str, planned: &Planned) -> (Vec<String>, Value) {
    let mut lines = vec![
        format!(
            "valid: workflow `{}` ({}) from {file}",
            planned.program.name,
            nodes(planned.program.root.nodes.len())
        ),
        format!("program_digest: {}", planned.program_digest),
    ];
    let warnings = planned.warnings();
    lines.extend(warnings.iter().map(|w| format!("warning: {w}")));
    lines.push(
        "next: {\"action\":\"plan\",\"file\":...} freezes it into a plan you can run".to_owned(),
    );
    let structured = json!({
        "action": "validate",
        "valid": true,
        "file": file,
        "name": planned.program.name,
        "node_count": planned.program.root.nodes.len(),
        "program_digest": planned.program_digest,
        "graph_digest": planned.graph_digest,
        "warnings": warnings,
        "diagnostics": [],
    });
    (lines, structured)
}

/// `validate` or `plan` when the workflow is invalid.
pub fn invalid(action: &str, file: &str, error: &PlanError) -> (Vec<String>, Value) {
    let diagnostics = error.diagnostics();
    let mut lines = vec![format!(
        "invalid: {file} has {} problem{}",
        diagnostics.len().max(1),
        if diagnostics.len() > 1 { "s" } else { "" }
    )];
    if diagnostics.is_empty() {
        lines.push(format!(
            "error {}",
            crate::workflow::plan::error_chain(error).replace('\n', " ")
        ));
    }
    lines.extend(diagnostics.iter().map(diagnostic_line));
    let structured = json!({
        "action": action,
        "valid": false,
        "file": file,
        "diagnostics": diagnostics.iter().map(diagnostic_json).collect::<Vec<_>>(),
        "message": crate::workflow::plan::error_chain(error),
    });
    (lines, structured)
}

/// `plan` on success.
pub fn plan_ok(file: &str, planned: &Planned, manifest: &PlanManifest) -> (Vec<String>, Value) {
    let mut lines = vec![
        format!("plan_id: {}", manifest.plan_id),
        format!(
            "workflow: `{}` ({}) from {file}",
            manifest.name,
            nodes(planned.program.root.nodes.len())
        ),
        format!("program_digest: {}", manifest.program_digest),
    ];
    let warnings = planned.warnings();
    lines.extend(warnings.iter().map(|w| format!("warning: {w}")));
    lines.push(format!(
        "next: {{\"action\":\"run\",\"plan_id\":\"{}\"}} runs it once the user confirms this \
         exact digest",
        manifest.plan_id
    ));
    let structured = json!({
        "action": "plan",
        "plan_id": manifest.plan_id,
        "name": manifest.name,
        "file": file,
        "node_count": planned.program.root.nodes.len(),
        "program_digest": manifest.program_digest,
        "graph_digest": manifest.graph_digest,
        "warnings": warnings,
    });
    (lines, structured)
}

/// An artifact reference line: `<label>: <path> · <retained> bytes · digest sha256:...`, with
/// a shortfall note only when the retained bytes are not the whole artifact.
pub fn artifact_line(label: &str, run_dir: &Path, artifact: &Artifact) -> String {
    let shortfall = if artifact.truncated || artifact.retained_bytes != artifact.observed_bytes {
        format!(
            " · shortfall: {} of {} bytes retained",
            artifact.retained_bytes, artifact.observed_bytes
        )
    } else {
        String::new()
    };
    format!(
        "{label}: {} · {} bytes · digest {}{shortfall}",
        run_dir.join(&artifact.path).display(),
        artifact.retained_bytes,
        artifact.sha256
    )
}

/// The run summary `run`, `status` and `resume` return, and completion notices carry.
pub fn run_summary(run_id: &str, run_dir: &Path, inspection: &Inspection) -> (Vec<String>, Value) {
    let manifest = match &inspection.manifest {
        StoredManifest::Current(m) => m,
        StoredManifest::Legacy(_) => {
            let lines = vec![
                format!("run: {run_id}"),
                "format: 1 (written by an older release; read-only)".to_owned(),
                format!("inspect it with `rho workflow status {run_id}` in a terminal"),
            ];
            return (lines, json!({"run_id": run_id, "legacy": true}));
        }
    };
    let empty = State::empty();
    let state = inspection.state.as_ref().unwrap_or(&empty);
    let lifecycle = inspection.effective_lifecycle().unwrap_or(state.lifecycle);
    let root = state.root();
    let mut lines = header(run_id, manifest);
    lines.push(format!("lifecycle: {lifecycle}"));
    let outcome = root.result.as_ref().map(|r| r.outcome);
    lines.push(format!(
        "outcome: {}",
        outcome.map_or_else(|| "none yet".to_owned(), |o| o.to_string())
    ));
    let done = root
        .tasks
        .values()
        .filter(|t| t.state.is_terminal())
        .count();
    lines.push(format!("nodes: {done}/{} terminal", root.tasks.len()));
    let mut nodes_json = serde_json::Map::new();
    for (node, task) in &root.tasks {
        let last = task.attempts.last();
        let attempt = last.map_or_else(String::new, |a| format!(" attempt {}", a.number));
        let reason = task
            .reason
            .as_ref()
            .map(|r| format!(" ({})", r.replace('\n', " ")))
            .unwrap_or_default();
        lines.push(format!("  {node}: {}{attempt}{reason}", task.state));
        let mut artifacts = Vec::new();
        if let Some(a) = last {
            if let Some(denial) = &a.denial {
                lines.push(format!(
                    "    denied by {}: {} (permission mode {})",
                    denial.decided_by, denial.reason, denial.mode
                ));
            }
            for (label, art) in [
                ("stdout", &a.stdout),
                ("stderr", &a.stderr),
                ("output", &a.output),
            ] {
                if let Some(art) = art {
                    lines.push(format!("    {}", artifact_line(label, run_dir, art)));
                    artifacts.push(json!({
                        "label": label,
                        "path": run_dir.join(&art.path).to_string_lossy(),
                        "retained_bytes": art.retained_bytes,
                        "observed_bytes": art.observed_bytes,
                        "truncated": art.truncated,
                        "digest": art.sha256,
                    }));
                }
            }
        }
        // Built member by member: `json!` encodes each value through serde into a tree of
        // its own first, which for a 1,000-node run was most of building the summary.
        let mut entry = serde_json::Map::new();
        entry.insert("state".to_owned(), Value::from(task.state.as_str()));
        entry.insert(
            "attempt".to_owned(),
            last.map_or(Value::Null, |a| Value::from(a.number)),
        );
        entry.insert(
            "reason".to_owned(),
            task.reason.clone().map_or(Value::Null, Value::from),
        );
        entry.insert("artifacts".to_owned(), Value::Array(artifacts));
        nodes_json.insert(node.clone(), Value::Object(entry));
    }
    let mut exports_json = serde_json::Map::new();
    if let Some(result) = &root.result {
        for (name, e) in &result.exports {
            match &e.note {
                None => lines.push(format!("export {name} = {}", e.value)),
                Some(note) => lines.push(format!("export {name} = null (unavailable: {note})")),
            }
            exports_json.insert(
                name.clone(),
                json!({"value": e.value.to_json(), "available": e.available, "note": e.note}),
            );
        }
    }
    for f in &state.hook_failures {
        lines.push(format!(
            "hook failed: {} hook `{}` on {}: {}",
            f.scope, f.hook_id, f.event, f.detail
        ));
    }
    if !inspection.uncertain.is_empty() {
        lines.push(format!(
            "needs recovery: {}; inspect them, then resume with \"recover_uncertain\": true",
            inspection.uncertain.join("; ")
        ));
    }
    let mut structured = json!({
        "run_id": run_id,
        "plan_id": manifest.plan_id,
        "name": manifest.name,
        "program_digest": manifest.program_digest,
        "permission_mode": manifest.policy.as_ref().map(|p| p.permission_mode),
        "lifecycle": lifecycle,
        "outcome": outcome,
        "needs_recovery": inspection.uncertain,
        "run_dir": run_dir.to_string_lossy(),
    });
    // Moved in: `json!` would copy each (one entry per node) through serde.
    structured["nodes"] = Value::Object(nodes_json);
    structured["exports"] = Value::Object(exports_json);
    (lines, structured)
}

fn header(run_id: &str, manifest: &RunManifest) -> Vec<String> {
    let mut lines = vec![
        format!("run_id: {run_id}"),
        format!("workflow: `{}`", manifest.name),
        format!("plan_id: {}", manifest.plan_id),
        format!("program_digest: {}", manifest.program_digest),
        format!(
            "consent: {} to this digest, for this run only",
            match manifest.confirmation.method {
                ConfirmationMethod::Yes => "--yes",
                ConfirmationMethod::Prompt => "terminal prompt",
                ConfirmationMethod::Host => "host confirmation",
            }
        ),
    ];
    if let Some(policy) = &manifest.policy {
        lines.push(format!("permission mode: {}", policy.permission_mode));
    }
    lines
}

/// `cancel`'s answer: the same fields as the CLI's line.
pub fn cancel(run_id: &str, answer: &CancelAnswer) -> (Vec<String>, Value) {
    let mut lines = vec![format!("run_id: {run_id}")];
    if let Some(request_id) = &answer.request_id {
        lines.push(format!("request_id: {request_id}"));
    }
    lines.push(format!("cancellation_state: {}", answer.cancellation_state));
    lines.push(format!("lifecycle: {}", answer.lifecycle));
    if answer.cancellation_state == "pending" {
        lines.push(
            "the owner has not acknowledged yet; a completion notice follows when it stops"
                .to_owned(),
        );
    }
    let mut structured = json!({
        "action": "cancel",
        "run_id": run_id,
        "cancellation_state": answer.cancellation_state,
        "lifecycle": answer.lifecycle,
    });
    if let Some(request_id) = &answer.request_id {
        structured["request_id"] = json!(request_id);
    }
    (lines, structured)
}
