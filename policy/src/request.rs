//! The requests policy decides on: the host-only `workflow_command` request of a command node,
//! the [`ToolRequest`] of a model-facing tool call, and the operation classes both carry.
//!
//! Invariant: a [`CommandRequest`] carries only frozen facts from the confirmed program (plus
//! the run's identity), and its operation class is always [`OperationClass::Process`] — there
//! is no way to describe a command node as a cheaper class of operation. A tool states its own
//! class in its [`ToolRequest`]; the tool layer, not the model, chooses it.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What kind of effect an operation has; the decision table of `policy.md` is keyed on it.
///
/// A workflow command node is always [`OperationClass::Process`] because it executes a process,
/// whatever that process does. The other classes exist so the same table covers agent tool
/// calls (a read, an edit of a tracked workspace file, a write elsewhere).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationClass {
    /// Reading workspace or store data without changing anything; policy allows it in every
    /// mode (`plan` included), hooks still see it.
    Read,
    /// An edit to a file tracked in the workspace (recoverable through version control).
    TrackedWorkspaceEdit,
    /// Any other write: untracked files, files outside the workspace.
    OtherWrite,
    /// Executing a process.
    Process,
}

impl OperationClass {
    /// Every class, in table order.
    pub const ALL: [OperationClass; 4] = [
        OperationClass::Read,
        OperationClass::TrackedWorkspaceEdit,
        OperationClass::OtherWrite,
        OperationClass::Process,
    ];

    /// A short phrase for messages: "process execution", "tracked workspace edits", ...
    pub const fn describe(self) -> &'static str {
        match self {
            OperationClass::Read => "reads",
            OperationClass::TrackedWorkspaceEdit => "tracked workspace edits",
            OperationClass::OtherWrite => "writes outside tracked workspace files",
            OperationClass::Process => "process execution",
        }
    }
}

impl fmt::Display for OperationClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OperationClass::Read => "read",
            OperationClass::TrackedWorkspaceEdit => "tracked_workspace_edit",
            OperationClass::OtherWrite => "other_write",
            OperationClass::Process => "process",
        })
    }
}

/// The frozen identity of the program a command node runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutableIdentity {
    /// The resolved path recorded in the confirmed program.
    pub path: PathBuf,
    /// Lowercase hex SHA-256 of the executable's content at confirmation.
    pub sha256: String,
}

/// The frozen interpreter that actually runs a script: the kernel does not execute a script
/// itself, it runs this program with the shebang's arguments and the script's path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterpreterIdentity {
    /// The resolved interpreter binary recorded in the confirmed program (for
    /// `#!/usr/bin/env NAME`, NAME as found on `PATH` at planning).
    pub path: PathBuf,
    /// Lowercase hex SHA-256 of the interpreter's content at confirmation.
    pub sha256: String,
    /// The shebang's interpreter as written (`/usr/bin/env`, `/bin/sh`).
    pub shebang: String,
    /// The shebang's arguments, passed before the script (after NAME for `env`).
    pub arguments: Vec<String>,
}

/// The `workflow_command` request: one attempt of one command node, with the frozen process
/// facts a responder, classifier or hook judges. Serializes to the JSON a classifier
/// executable receives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandRequest {
    /// The workflow run.
    pub run_id: String,
    /// The confirmed program's digest.
    pub plan_digest: String,
    /// The node within the program.
    pub node_id: String,
    /// 1-based attempt number of this node.
    pub attempt: u32,
    /// The program to execute.
    pub executable: ExecutableIdentity,
    /// The interpreter that runs `executable` when it is a script; `None` for a binary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<InterpreterIdentity>,
    /// Full argument vector, `argv[0]` included.
    pub argv: Vec<String>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Name of the frozen environment policy the process gets.
    pub environment_policy: String,
    /// Frozen timeout in milliseconds.
    pub timeout_ms: u64,
    /// Frozen bound on captured output, in bytes.
    pub output_limit_bytes: u64,
}

impl CommandRequest {
    /// The tool name hooks and matchers see for command nodes.
    pub const TOOL_NAME: &'static str = "workflow_command";

    /// Always [`OperationClass::Process`]: a command node executes a process.
    pub const fn operation_class(&self) -> OperationClass {
        OperationClass::Process
    }
}

impl fmt::Display for CommandRequest {
    /// One line for prompts and logs: node, attempt, executable, argv and cwd.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node `{}` attempt {}: {} {:?} in {}",
            self.node_id,
            self.attempt,
            self.executable.path.display(),
            self.argv,
            self.cwd.display()
        )?;
        if let Some(interpreter) = &self.interpreter {
            write!(f, " (script run by {}", interpreter.path.display())?;
            if !interpreter.arguments.is_empty() {
                write!(f, " {:?}", interpreter.arguments)?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// One model-facing tool call as policy, hooks, classifier and human see it.
///
/// Built by the tool layer from arguments it has already validated; `operation` is the tool's
/// own statement of what the call does, never something the model chose. Serializes to the
/// JSON a classifier executable receives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRequest {
    /// The tool's name (`process`, `workflow`, `write_file`, ...); hook `tools` matchers see it.
    pub tool: String,
    /// What the call does.
    pub operation: OperationClass,
    /// The directory the call acts in (the workspace root for most tools).
    pub working_directory: PathBuf,
    /// One line for prompts and logs, e.g. ``start `npm run dev` ``.
    pub summary: String,
    /// The call's arguments as judged: what hooks and the classifier inspect (paths, command
    /// text). The tool layer bounds its size.
    pub input: serde_json::Value,
    /// Workflow labels when the call comes from inside a workflow node; `None` in an
    /// interactive or MCP session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<crate::hooks::HostLabels>,
}

impl fmt::Display for ToolRequest {
    /// One line for prompts and logs: tool, class and summary.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tool `{}` ({}): {}",
            self.tool, self.operation, self.summary
        )
    }
}

/// Either kind of request, as the approval path and the host's traits see it.
///
/// Both kinds go through the same [`crate::Authorizer`] steps; the variants only differ in the
/// facts they carry for prompts, hooks and classifiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermissionRequest<'a> {
    /// A workflow command node (always a process).
    Command(&'a CommandRequest),
    /// A model-facing tool call.
    Tool(&'a ToolRequest),
}

impl PermissionRequest<'_> {
    /// The class policy decides on.
    pub fn operation_class(&self) -> OperationClass {
        match self {
            PermissionRequest::Command(req) => req.operation_class(),
            PermissionRequest::Tool(req) => req.operation,
        }
    }

    /// The tool name hook `tools` matchers are checked against.
    pub fn tool_name(&self) -> &str {
        match self {
            PermissionRequest::Command(_) => CommandRequest::TOOL_NAME,
            PermissionRequest::Tool(req) => &req.tool,
        }
    }

    /// The JSON a classifier executable receives: the request itself.
    pub fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        match self {
            PermissionRequest::Command(req) => serde_json::to_value(req),
            PermissionRequest::Tool(req) => serde_json::to_value(req),
        }
    }
}

impl fmt::Display for PermissionRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PermissionRequest::Command(req) => req.fmt(f),
            PermissionRequest::Tool(req) => req.fmt(f),
        }
    }
}

impl<'a> From<&'a CommandRequest> for PermissionRequest<'a> {
    fn from(req: &'a CommandRequest) -> Self {
        PermissionRequest::Command(req)
    }
}

impl<'a> From<&'a ToolRequest> for PermissionRequest<'a> {
    fn from(req: &'a ToolRequest) -> Self {
        PermissionRequest::Tool(req)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_request() -> CommandRequest {
        CommandRequest {
            run_id: "run-1".to_owned(),
            plan_digest: "ab".repeat(32),
            node_id: "build".to_owned(),
            attempt: 1,
            executable: ExecutableIdentity {
                path: PathBuf::from("/usr/bin/make"),
                sha256: "cd".repeat(32),
            },
            interpreter: None,
            argv: vec!["make".to_owned(), "-j2".to_owned()],
            cwd: PathBuf::from("/work/project"),
            environment_policy: "inherit_filtered".to_owned(),
            timeout_ms: 60_000,
            output_limit_bytes: 1 << 20,
        }
    }

    pub(crate) fn sample_tool_request(operation: OperationClass) -> ToolRequest {
        ToolRequest {
            tool: "process".to_owned(),
            operation,
            working_directory: PathBuf::from("/work/project"),
            summary: "start `npm run dev`".to_owned(),
            input: serde_json::json!({"action": "start", "command": "npm run dev"}),
            labels: None,
        }
    }

    #[test]
    fn tool_request_round_trips_and_names_its_class() {
        let req = sample_tool_request(OperationClass::Process);
        let json = serde_json::to_value(&req).unwrap();
        assert_eq!(json["operation"], "process");
        assert_eq!(json["input"]["command"], "npm run dev");
        assert!(json.get("labels").is_none());
        assert_eq!(serde_json::from_value::<ToolRequest>(json).unwrap(), req);
        let wrapped = PermissionRequest::from(&req);
        assert_eq!(wrapped.tool_name(), "process");
        assert_eq!(wrapped.operation_class(), OperationClass::Process);
        assert_eq!(
            wrapped.to_string(),
            "tool `process` (process): start `npm run dev`"
        );
        let command = sample_request();
        assert_eq!(
            PermissionRequest::from(&command).tool_name(),
            "workflow_command"
        );
    }

    #[test]
    fn command_request_is_always_process() {
        assert_eq!(sample_request().operation_class(), OperationClass::Process);
    }

    #[test]
    fn command_request_json_round_trips_and_rejects_unknown_fields() {
        let req = sample_request();
        let json = serde_json::to_value(&req).unwrap();
        assert_eq!(json["executable"]["path"], "/usr/bin/make");
        assert_eq!(json["argv"][1], "-j2");
        assert_eq!(json["timeout_ms"], 60_000);
        let back: CommandRequest = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, req);

        let mut extra = json;
        extra["class"] = serde_json::json!("tracked_workspace_edit");
        assert!(serde_json::from_value::<CommandRequest>(extra).is_err());
    }

    #[test]
    fn display_shows_node_executable_argv_and_cwd() {
        let line = sample_request().to_string();
        assert_eq!(
            line,
            "node `build` attempt 1: /usr/bin/make [\"make\", \"-j2\"] in /work/project"
        );
    }
}
