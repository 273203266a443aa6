//! The JSON event a hook receives on stdin and the minimal environment it runs with.
//!
//! Invariant: a hook sees only the base variables, the ones its file names, and
//! `RHO_IN_HOOK=1`; nothing else of the host environment reaches it.

use std::ffi::OsString;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::request::{
    CommandRequest, ExecutableIdentity, InterpreterIdentity, OperationClass, PermissionRequest,
    ToolRequest,
};

use super::{HOOK_BASE_ENV, HOOK_EVENT_SCHEMA_VERSION, HookEventName, HookSpec};

/// Workflow labels of an event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostLabels {
    /// The workflow run; absent for a tool call outside any workflow (an MCP or interactive
    /// session), whose labels are then `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_run_id: Option<String>,
    /// The confirmed program's digest; absent with `workflow_run_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_digest: Option<String>,
    /// The node, for node events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The node's attempt, for node events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}

/// The capability a `before_tool_use` event asks about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapabilityPayload {
    /// The tool, `workflow_command` for command nodes.
    pub tool: String,
    /// The operation class.
    pub operation: OperationClass,
    /// The working directory.
    pub working_directory: PathBuf,
    /// The program and its digest (command nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<ExecutableIdentity>,
    /// The interpreter that actually runs the executable when it is a script (command
    /// nodes): its frozen path, digest, shebang and shebang arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<InterpreterIdentity>,
    /// Full argv (command nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Vec<String>>,
    /// The environment policy's name (command nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_policy: Option<String>,
    /// One line saying what the call does (tool calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The tool's validated arguments (tool calls): paths and command text are there because
    /// judging them is what a deny hook is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Value>,
}

/// The JSON document a hook reads on stdin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookEvent {
    /// Always [`HOOK_EVENT_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Which event.
    pub event: HookEventName,
    /// Unique per event, so hooks can de-duplicate.
    pub event_id: String,
    /// The canonical workspace path.
    pub workspace: PathBuf,
    /// Run, plan and node labels.
    pub host_labels: HostLabels,
    /// The capability, for `before_tool_use`; absent for observational events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<CapabilityPayload>,
}

impl HookEvent {
    /// The `before_tool_use` event for a command node's request.
    pub fn before_tool_use(event_id: String, workspace: PathBuf, req: &CommandRequest) -> Self {
        HookEvent {
            schema_version: HOOK_EVENT_SCHEMA_VERSION,
            event: HookEventName::BeforeToolUse,
            event_id,
            workspace,
            host_labels: HostLabels {
                workflow_run_id: Some(req.run_id.clone()),
                plan_digest: Some(req.plan_digest.clone()),
                node_id: Some(req.node_id.clone()),
                attempt: Some(req.attempt),
            },
            payload: Some(CapabilityPayload {
                tool: CommandRequest::TOOL_NAME.to_owned(),
                operation: req.operation_class(),
                working_directory: req.cwd.clone(),
                executable: Some(req.executable.clone()),
                interpreter: req.interpreter.clone(),
                arguments: Some(req.argv.clone()),
                environment_policy: Some(req.environment_policy.clone()),
                summary: None,
                input: None,
            }),
        }
    }

    /// The `before_tool_use` event for a model-facing tool call.
    pub fn before_tool_call(event_id: String, workspace: PathBuf, req: &ToolRequest) -> Self {
        HookEvent {
            schema_version: HOOK_EVENT_SCHEMA_VERSION,
            event: HookEventName::BeforeToolUse,
            event_id,
            workspace,
            host_labels: req.labels.clone().unwrap_or_default(),
            payload: Some(CapabilityPayload {
                tool: req.tool.clone(),
                operation: req.operation,
                working_directory: req.working_directory.clone(),
                executable: None,
                interpreter: None,
                arguments: None,
                environment_policy: None,
                summary: Some(req.summary.clone()),
                input: Some(req.input.clone()),
            }),
        }
    }

    /// The `before_tool_use` event for either kind of request.
    pub fn for_request(event_id: String, workspace: PathBuf, req: PermissionRequest<'_>) -> Self {
        match req {
            PermissionRequest::Command(req) => Self::before_tool_use(event_id, workspace, req),
            PermissionRequest::Tool(req) => Self::before_tool_call(event_id, workspace, req),
        }
    }

    /// An observational workflow event.
    pub fn workflow(
        event: HookEventName,
        event_id: String,
        workspace: PathBuf,
        host_labels: HostLabels,
    ) -> Self {
        HookEvent {
            schema_version: HOOK_EVENT_SCHEMA_VERSION,
            event,
            event_id,
            workspace,
            host_labels,
            payload: None,
        }
    }
}

/// The environment a hook process gets: [`HOOK_BASE_ENV`] and the hook's `env` names that are
/// set in the host (via `lookup`), then `RHO_IN_HOOK=1`. Nothing else is inherited.
pub fn hook_environment(
    hook: &HookSpec,
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Vec<(String, OsString)> {
    let mut vars: Vec<(String, OsString)> = Vec::new();
    let names = HOOK_BASE_ENV
        .iter()
        .copied()
        .chain(hook.env.iter().map(String::as_str));
    for name in names {
        if name == "RHO_IN_HOOK" || vars.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Some(value) = lookup(name) {
            vars.push((name.to_owned(), value));
        }
    }
    vars.push(("RHO_IN_HOOK".to_owned(), OsString::from("1")));
    vars
}

#[cfg(test)]
mod tests {
    use super::super::HookScope;
    use super::super::tests::{USER_FILE, parse};
    use super::*;

    #[test]
    fn environment_is_minimal() {
        let hook = parse(USER_FILE, HookScope::User).unwrap().hooks.remove(0);
        let host = |name: &str| match name {
            "PATH" => Some(OsString::from("/usr/bin")),
            "HOME" => Some(OsString::from("/home/me")),
            "GUARD_TOKEN" => Some(OsString::from("t")),
            "RHO_IN_HOOK" => Some(OsString::from("0")),
            "SECRET_API_KEY" => Some(OsString::from("no")),
            _ => None,
        };
        let env = hook_environment(&hook, host);
        let as_pairs: Vec<(&str, &str)> = env
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            as_pairs,
            [
                ("PATH", "/usr/bin"),
                ("HOME", "/home/me"),
                ("GUARD_TOKEN", "t"),
                ("RHO_IN_HOOK", "1")
            ]
        );
    }

    #[test]
    fn before_tool_use_event_shape() {
        let req = crate::request::tests::sample_request();
        let event = HookEvent::before_tool_use("ev-1".into(), PathBuf::from("/work/project"), &req);
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "schema_version": 1,
                "event": "before_tool_use",
                "event_id": "ev-1",
                "workspace": "/work/project",
                "host_labels": {
                    "workflow_run_id": "run-1",
                    "plan_digest": "ab".repeat(32),
                    "node_id": "build",
                    "attempt": 1,
                },
                "payload": {
                    "tool": "workflow_command",
                    "operation": "process",
                    "working_directory": "/work/project",
                    "executable": {"path": "/usr/bin/make", "sha256": "cd".repeat(32)},
                    "arguments": ["make", "-j2"],
                    "environment_policy": "inherit_filtered",
                },
            })
        );
        assert_eq!(serde_json::from_value::<HookEvent>(json).unwrap(), event);

        let labels = HostLabels {
            workflow_run_id: Some("run-1".into()),
            plan_digest: Some("d".into()),
            node_id: None,
            attempt: None,
        };
        let started = HookEvent::workflow(
            HookEventName::WorkflowStarted,
            "ev-2".into(),
            PathBuf::from("/w"),
            labels,
        );
        let json = serde_json::to_value(&started).unwrap();
        assert_eq!(json["event"], "workflow_started");
        assert!(json.get("payload").is_none());
        assert!(json["host_labels"].get("node_id").is_none());
    }

    #[test]
    fn tool_call_event_shape() {
        let req = crate::request::tests::sample_tool_request(OperationClass::Process);
        let event = HookEvent::for_request(
            "ev-3".into(),
            PathBuf::from("/work/project"),
            PermissionRequest::Tool(&req),
        );
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "schema_version": 1,
                "event": "before_tool_use",
                "event_id": "ev-3",
                "workspace": "/work/project",
                "host_labels": {},
                "payload": {
                    "tool": "process",
                    "operation": "process",
                    "working_directory": "/work/project",
                    "summary": "start `npm run dev`",
                    "input": {"action": "start", "command": "npm run dev"},
                },
            })
        );
        assert_eq!(serde_json::from_value::<HookEvent>(json).unwrap(), event);
    }
}
