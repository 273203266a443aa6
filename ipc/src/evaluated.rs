//! What the planner worker returns: the workflow as evaluated from Starlark, before the host
//! resolves executables, directories and agents and freezes it into a `FrozenProgram`.
//!
//! Invariant: everything here is plain data produced inside the sandbox; the host treats it
//! as untrusted and re-checks every rule it relies on.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::data::Data;
use crate::program::{Condition, InputDecl, Reference, Schema, Template};

/// A place in a workflow source.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpan {
    /// The module label (`//path/to/file.star`).
    pub label: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

/// The workflow returned by `build(inputs)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluatedWorkflow {
    /// `workflow(name = ...)`.
    pub name: String,
    /// The inputs declared by `define`.
    pub inputs: BTreeMap<String, InputDecl>,
    /// The validated input values with defaults applied.
    pub bound_inputs: BTreeMap<String, Data>,
    /// Nodes in declaration order.
    pub nodes: Vec<EvaluatedNode>,
    /// `exports` by name.
    pub exports: BTreeMap<String, Reference>,
    /// `workflow(max_parallel_commands = ...)`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel_commands: Option<u32>,
    /// Where `workflow(...)` was called.
    pub span: Option<SourceSpan>,
}

/// A node as written, with raw executable and directory strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluatedNode {
    /// The node name.
    pub name: String,
    /// `needs` as written (order and duplicates preserved; the host normalizes).
    pub needs: Vec<String>,
    /// `when`.
    pub when: Option<Condition>,
    /// `allow_failure`.
    pub allow_failure: bool,
    /// `access` as written (`None` means the default, mutating).
    pub access: Option<crate::program::Access>,
    /// `network` as written (command and shell nodes; `None` means allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::program::Network>,
    /// `timeout_seconds`.
    pub timeout_seconds: u64,
    /// `max_output_bytes`.
    pub max_output_bytes: u64,
    /// `output`.
    pub output: Option<Schema>,
    /// What the node runs.
    pub execution: EvaluatedExecution,
    /// Where the node's constructor was called.
    pub span: Option<SourceSpan>,
}

/// A node's execution before resolution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum EvaluatedExecution {
    /// `agent(...)`.
    Agent {
        /// The agent id.
        agent: String,
        /// The prompt.
        prompt: Template,
    },
    /// `command(...)`.
    Command {
        /// `argv[0]`, a static string.
        argv0: String,
        /// `argv[1..]`.
        args: Vec<Template>,
        /// `cwd` as written (default `.`).
        cwd: String,
    },
    /// `shell(...)`.
    Shell {
        /// The shell executable as written.
        executable: String,
        /// Arguments before the command.
        arguments: Vec<String>,
        /// The shell source.
        command: String,
        /// `cwd` as written (default `.`).
        cwd: String,
    },
}
