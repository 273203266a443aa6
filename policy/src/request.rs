//! The host-only `workflow_command` request and the operation classes policy decides on.
//!
//! Invariant: a [`CommandRequest`] carries only frozen facts from the confirmed program (plus
//! the run's identity), and its operation class is always [`OperationClass::Process`] — there
//! is no way to describe a command node as a cheaper class of operation.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What kind of effect an operation has; the decision table of `policy.md` is keyed on it.
///
/// A workflow command node is always [`OperationClass::Process`] because it executes a process,
/// whatever that process does. The other classes exist so the same table covers agent tool
/// calls (an edit of a tracked workspace file, a write elsewhere).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationClass {
    /// An edit to a file tracked in the workspace (recoverable through version control).
    TrackedWorkspaceEdit,
    /// Any other write: untracked files, files outside the workspace.
    OtherWrite,
    /// Executing a process.
    Process,
}

impl OperationClass {
    /// Every class, in table order.
    pub const ALL: [OperationClass; 3] = [
        OperationClass::TrackedWorkspaceEdit,
        OperationClass::OtherWrite,
        OperationClass::Process,
    ];

    /// A short phrase for messages: "process execution", "tracked workspace edits", ...
    pub const fn describe(self) -> &'static str {
        match self {
            OperationClass::TrackedWorkspaceEdit => "tracked workspace edits",
            OperationClass::OtherWrite => "writes outside tracked workspace files",
            OperationClass::Process => "process execution",
        }
    }
}

impl fmt::Display for OperationClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
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
        )
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
            argv: vec!["make".to_owned(), "-j2".to_owned()],
            cwd: PathBuf::from("/work/project"),
            environment_policy: "inherit_filtered".to_owned(),
            timeout_ms: 60_000,
            output_limit_bytes: 1 << 20,
        }
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
