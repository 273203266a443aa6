//! The frozen program: everything a run needs, fixed at plan time and covered by
//! `program_digest`. Shared by the planner worker (which produces the evaluated parts, see
//! `evaluated`), the host (which resolves and freezes) and the runner.
//!
//! Invariant: nothing in a `FrozenProgram` depends on where the workspace or the data
//! directory lives, on the clock, or on declaration order where order carries no meaning
//! (nodes are sorted by id, needs are sorted and de-duplicated, maps are sorted). Machine
//! identities (device, inode) appear only for files outside the workspace.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::budget::Budgets;
use crate::data::Data;

/// Version of the program format; part of the digest's domain tag.
pub const PROGRAM_FORMAT_VERSION: u32 = 1;

/// The id of the root scope.
pub const ROOT_SCOPE_ID: &str = "s0";

/// A frozen, normalized workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrozenProgram {
    /// [`PROGRAM_FORMAT_VERSION`] at the time of planning.
    pub format_version: u32,
    /// Which planner produced this program.
    pub planner: PlannerIdentity,
    /// The workflow name.
    pub name: String,
    /// The root scope `s0`.
    pub root: RootScope,
    /// Resolved agent setups by agent id (only agents that nodes name).
    pub agents: BTreeMap<String, AgentSetup>,
    /// The environment policy every command node runs under.
    pub environment: EnvironmentPolicy,
    /// Scheduler capacity.
    pub scheduler: SchedulerSettings,
    /// The budgets in force.
    pub budgets: Budgets,
    /// Every source served to the planner, sorted by label.
    pub sources: Vec<SourceEntry>,
    /// The trust this plan needed when it was made.
    pub trust: TrustRequirement,
}

impl FrozenProgram {
    /// A node by id.
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.root
            .nodes
            .binary_search_by(|n| n.id.as_str().cmp(id))
            .ok()
            .map(|i| &self.root.nodes[i])
    }
}

/// Which planner produced a program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannerIdentity {
    /// `rho-planner`.
    pub name: String,
    /// The crate version of the planner.
    pub version: String,
}

/// The root scope: inputs, exports and the static nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootScope {
    /// Always [`ROOT_SCOPE_ID`].
    pub id: String,
    /// Declared inputs by name.
    pub inputs: BTreeMap<String, InputDecl>,
    /// The bound input values (defaults applied).
    pub bound_inputs: BTreeMap<String, Data>,
    /// Typed named exports.
    pub exports: BTreeMap<String, Export>,
    /// Nodes sorted by id.
    pub nodes: Vec<Node>,
}

/// The type of a declared input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum InputType {
    /// A string.
    String,
    /// A signed 64-bit integer.
    Integer,
    /// A boolean.
    Bool,
    /// One of the listed scalar members.
    Enum {
        /// The members, in declaration order.
        members: Vec<Data>,
    },
}

/// A declared input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputDecl {
    /// The type.
    #[serde(rename = "type")]
    pub ty: InputType,
    /// The default; `None` means the input is required. Never `Some(Data::Null)`: the
    /// language spells "no default" as `default = None`, and both would encode as null, so
    /// the planner rejects a null default rather than letting a round trip change meaning.
    pub default: Option<Data>,
}

/// A named export of the root scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Export {
    /// What the export reads.
    pub reference: Reference,
    /// The type of the value it resolves to (null when unavailable).
    pub schema: Schema,
}

/// Output schema: a small schema language, not JSON Schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Schema {
    /// JSON null.
    Null,
    /// A boolean.
    Bool,
    /// A signed 64-bit integer.
    Integer,
    /// A string.
    String,
    /// One of the scalar members.
    Enum {
        /// The members, in declaration order.
        members: Vec<Data>,
    },
    /// A list of items of one schema.
    List {
        /// The item schema.
        items: Box<Schema>,
    },
    /// A record with named fields.
    Record {
        /// The fields by name.
        fields: BTreeMap<String, RecordField>,
    },
    /// Command output: the whole retained stdout is one JSON value matching `schema`.
    StdoutJson {
        /// The schema of the parsed stdout.
        schema: Box<Schema>,
    },
}

/// A record field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordField {
    /// The field's schema.
    pub schema: Schema,
    /// Whether the field may be absent (`schema.optional(...)`).
    pub optional: bool,
}

/// A typed reference to another node's state, exit or output.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "ref", rename_all = "snake_case", deny_unknown_fields)]
pub enum Reference {
    /// A validated output value, by a path through record fields.
    Output {
        /// The node.
        node: String,
        /// Record field names from the output's root.
        path: Vec<String>,
    },
    /// The node's terminal state.
    Status {
        /// The node.
        node: String,
    },
    /// The command's exit code.
    ExitCode {
        /// The node.
        node: String,
    },
}

impl Reference {
    /// The node the reference reads.
    pub fn node(&self) -> &str {
        match self {
            Reference::Output { node, .. }
            | Reference::Status { node }
            | Reference::ExitCode { node } => node,
        }
    }
}

/// One part of a template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TemplatePart {
    /// Literal text.
    Text(String),
    /// A value inserted at run time: strings as is, anything else as compact JSON.
    Ref(Reference),
}

/// A template: text and references, rendered at run time. Adjacent text parts are merged
/// when frozen, so a template without references is a single text part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Template(pub Vec<TemplatePart>);

impl Template {
    /// A template of literal text only.
    pub fn text(s: impl Into<String>) -> Self {
        Template(vec![TemplatePart::Text(s.into())])
    }

    /// The references it contains, in order.
    pub fn references(&self) -> impl Iterator<Item = &Reference> {
        self.0.iter().filter_map(|p| match p {
            TemplatePart::Ref(r) => Some(r),
            TemplatePart::Text(_) => None,
        })
    }

    /// The literal text when the template holds no reference.
    pub fn as_literal(&self) -> Option<String> {
        let mut out = String::new();
        for part in &self.0 {
            match part {
                TemplatePart::Text(t) => out.push_str(t),
                TemplatePart::Ref(_) => return None,
            }
        }
        Some(out)
    }

    /// Merges adjacent text parts and drops empty ones (an empty template keeps one empty
    /// text part so it still renders to "").
    #[must_use]
    pub fn normalized(self) -> Self {
        let mut parts: Vec<TemplatePart> = Vec::with_capacity(self.0.len());
        for part in self.0 {
            match (parts.last_mut(), part) {
                (_, TemplatePart::Text(t)) if t.is_empty() => {}
                (Some(TemplatePart::Text(prev)), TemplatePart::Text(t)) => prev.push_str(&t),
                (_, part) => parts.push(part),
            }
        }
        if parts.is_empty() {
            parts.push(TemplatePart::Text(String::new()));
        }
        Template(parts)
    }
}

/// A condition over typed node state; evaluates to true, false or unavailable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Condition {
    /// The referenced value equals `value`.
    Equals {
        /// What is read.
        reference: Reference,
        /// The value compared with.
        value: Data,
    },
    /// The referenced value is one of `values`.
    IsOneOf {
        /// What is read.
        reference: Reference,
        /// The accepted values.
        values: Vec<Data>,
    },
    /// All parts hold.
    All {
        /// The parts.
        conditions: Vec<Condition>,
    },
    /// Any part holds.
    Any {
        /// The parts.
        conditions: Vec<Condition>,
    },
    /// The part does not hold.
    Not {
        /// The negated part.
        condition: Box<Condition>,
    },
}

impl Condition {
    /// Nesting depth: a comparison is 1.
    pub fn depth(&self) -> usize {
        match self {
            Condition::Equals { .. } | Condition::IsOneOf { .. } => 1,
            Condition::All { conditions } | Condition::Any { conditions } => {
                1 + conditions.iter().map(Condition::depth).max().unwrap_or(0)
            }
            Condition::Not { condition } => 1 + condition.depth(),
        }
    }

    /// Every reference in the condition.
    pub fn references(&self) -> Vec<&Reference> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(c) = stack.pop() {
            match c {
                Condition::Equals { reference, .. } | Condition::IsOneOf { reference, .. } => {
                    out.push(reference);
                }
                Condition::All { conditions } | Condition::Any { conditions } => {
                    stack.extend(conditions.iter());
                }
                Condition::Not { condition } => stack.push(condition),
            }
        }
        out
    }
}

/// How a node may touch the checkout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Reads only; may run beside other readers.
    ReadOnly,
    /// May write; needs the checkout exclusively.
    Mutating,
}

/// What network a command or shell node may use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Whatever the owner's process may reach (the default).
    #[default]
    Allowed,
    /// `network = "none"`: no TCP connect or bind and no other IP or packet socket; the
    /// kernel refuses them.
    None,
}

impl Network {
    /// Whether this is the default, so the encoding omits it and programs written before
    /// the field existed keep their digest.
    #[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes `&T`
    pub fn is_allowed(&self) -> bool {
        *self == Network::Allowed
    }
}

/// A frozen node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// The node id (also the task instance id in the root scope).
    pub id: String,
    /// Nodes that must be terminal first; sorted, de-duplicated.
    pub needs: Vec<String>,
    /// Optional condition.
    pub when: Option<Condition>,
    /// Whether this node's failure leaves the workflow outcome alone.
    pub allow_failure: bool,
    /// Checkout access.
    pub access: Access,
    /// Network access (command and shell nodes only); omitted from the encoding when
    /// `allowed`.
    #[serde(default, skip_serializing_if = "Network::is_allowed")]
    pub network: Network,
    /// Wall-time limit in seconds.
    pub timeout_seconds: u64,
    /// Retained bytes per output stream.
    pub max_output_bytes: u64,
    /// Optional output schema.
    pub output: Option<Schema>,
    /// What the node runs.
    pub execution: Execution,
}

impl Node {
    /// `agent`, `command` or `shell`.
    pub fn kind(&self) -> NodeKind {
        match self.execution {
            Execution::Agent { .. } => NodeKind::Agent,
            Execution::Command { .. } => NodeKind::Command,
            Execution::Shell { .. } => NodeKind::Shell,
        }
    }
}

/// The kind of a node, for scheduling lanes and display.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// An agent node.
    Agent,
    /// A direct-argv command node.
    Command,
    /// An explicit shell node.
    Shell,
}

impl NodeKind {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Agent => "agent",
            NodeKind::Command => "command",
            NodeKind::Shell => "shell",
        }
    }
}

/// What a node runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Execution {
    /// An agent invocation; the setup is `FrozenProgram::agents[agent]`.
    Agent {
        /// The agent id.
        agent: String,
        /// The prompt.
        prompt: Template,
    },
    /// A direct argv command.
    Command {
        /// The resolved executable (and interpreter for a script).
        program: FrozenExecutable,
        /// `argv[0]` as written in the workflow.
        argv0: String,
        /// `argv[1..]`.
        args: Vec<Template>,
        /// The working directory.
        cwd: FrozenDirectory,
    },
    /// An explicit shell: `executable arguments... command`.
    Shell {
        /// The resolved shell executable.
        program: FrozenExecutable,
        /// The shell as written (`bash`).
        executable: String,
        /// Arguments before the command (`-c`).
        arguments: Vec<String>,
        /// The shell source.
        command: String,
        /// The working directory.
        cwd: FrozenDirectory,
    },
}

/// Where a frozen file lives. Workspace files are recorded relative to the workspace so
/// that a copied workspace plans to the same digest; files elsewhere carry their machine
/// identity too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "root", rename_all = "snake_case", deny_unknown_fields)]
pub enum FileLocation {
    /// Inside the workspace: a `/`-separated relative path (`.` for the workspace itself).
    Workspace {
        /// The relative path.
        path: String,
    },
    /// Outside the workspace: a canonical absolute path and its identity.
    Absolute {
        /// The canonical path.
        path: String,
        /// `st_dev`.
        device: u64,
        /// `st_ino`.
        inode: u64,
    },
}

/// The frozen identity of a regular file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileIdentity {
    /// Where it lives.
    pub location: FileLocation,
    /// Size in bytes.
    pub size: u64,
    /// `sha256:<hex>` of the content.
    pub sha256: String,
}

/// An executable as frozen: the file itself and, for a script, its interpreter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrozenExecutable {
    /// The executable file (the script, for a script).
    pub file: FileIdentity,
    /// The interpreter, when the file starts with `#!`.
    pub interpreter: Option<FrozenInterpreter>,
}

/// A script's interpreter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrozenInterpreter {
    /// The interpreter binary (for `#!/usr/bin/env NAME`, NAME resolved on PATH).
    pub file: FileIdentity,
    /// The shebang line's interpreter as written (`/usr/bin/env`, `/bin/sh`).
    pub shebang: String,
    /// Interpreter arguments from the shebang line (after NAME for `env`).
    pub args: Vec<String>,
}

/// A frozen working directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrozenDirectory {
    /// The directory, relative to the workspace (`.` for the root).
    pub path: String,
}

/// The environment commands run with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentPolicy {
    /// The policy name: `inherit_except_credentials`.
    pub name: String,
    /// Name patterns never passed to a node (`*_API_KEY`, `ANTHROPIC_*`, exact names),
    /// matched without regard to ASCII case.
    pub exclude: Vec<String>,
    /// Name patterns passed even though an exclusion (or a password in a URL value) would
    /// withhold them (`[environment] allow`). Absent from the encoding when empty, so
    /// programs frozen without it keep their digest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
}

impl EnvironmentPolicy {
    /// Whether the variable `name` is withheld from nodes by its name alone.
    pub fn excludes(&self, name: &str) -> bool {
        !self.allows(name) && self.exclude.iter().any(|pattern| glob_match(pattern, name))
    }

    /// Whether the variable `name` with `value` is withheld from nodes: by its name, or
    /// because its value is a URL that carries a password (`postgres://u:pw@host/db`).
    pub fn withholds(&self, name: &str, value: &[u8]) -> bool {
        !self.allows(name)
            && (self.exclude.iter().any(|pattern| glob_match(pattern, name))
                || url_has_password(value))
    }

    fn allows(&self, name: &str) -> bool {
        self.allow.iter().any(|pattern| glob_match(pattern, name))
    }
}

/// Whether `value` holds a URL whose authority carries a password (`scheme://user:pw@host`).
pub fn url_has_password(value: &[u8]) -> bool {
    let mut rest = value;
    while let Some(at) = find(rest, b"://") {
        let after = &rest[at + 3..];
        let end = after
            .iter()
            .position(|b| matches!(b, b'/' | b'?' | b'#') || b.is_ascii_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..end];
        if let Some(at_sign) = authority.iter().rposition(|b| *b == b'@') {
            let userinfo = &authority[..at_sign];
            if let Some(colon) = userinfo.iter().position(|b| *b == b':')
                && colon + 1 < userinfo.len()
            {
                return true;
            }
        }
        rest = after;
    }
    false
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Matches `*` wildcards (any run of characters) without regard to ASCII case; everything
/// else is literal.
fn glob_match(pattern: &str, name: &str) -> bool {
    let pattern = pattern.to_ascii_uppercase();
    let name = name.to_ascii_uppercase();
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let mut rest = name.as_str();
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.len() >= part.len() && rest.ends_with(part);
        } else if let Some(pos) = rest.find(part) {
            rest = &rest[pos + part.len()..];
        } else {
            return false;
        }
    }
    true
}

/// Scheduler capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerSettings {
    /// Nodes running at once.
    pub max_parallel_nodes: u32,
    /// Agent nodes running at once.
    pub max_parallel_agents: u32,
    /// Command and shell nodes running at once.
    pub max_parallel_commands: u32,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            max_parallel_nodes: 4,
            max_parallel_agents: 4,
            max_parallel_commands: 4,
        }
    }
}

/// One source served to the planner.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceEntry {
    /// The workspace-rooted label (`//.rho/workflows/check/workflow.star`).
    pub label: String,
    /// Size in bytes.
    pub size: u64,
    /// `sha256:<hex>` of the content.
    pub digest: String,
}

/// The trust a plan needed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustRequirement {
    /// A node uses an agent defined in the project's `.agents/agents`.
    pub project_agents: bool,
}

/// The runtime an agent runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentRuntime {
    /// The in-process runtime.
    Rho,
    /// The external `claude` CLI.
    ClaudeCli,
}

/// Where an agent definition came from (no paths: those are not behaviour).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentSource {
    /// Built into rho.
    Builtin,
    /// `~/.agents/agents`.
    UserAgents,
    /// `$RHO_HOME/agents`.
    RhoHome,
    /// The workspace's `.agents/agents`.
    Project,
    /// `<workflow_dir>/agents`.
    Workflow,
}

/// A resolved, frozen agent setup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSetup {
    /// The agent id.
    pub id: String,
    /// Where the definition came from.
    pub source: AgentSource,
    /// The semantic fingerprint v2 (`sha256:<hex>`).
    pub fingerprint: String,
    /// The runtime.
    pub runtime: AgentRuntime,
    /// `extend` or `replace`.
    pub prompt_policy: String,
    /// The rendered system prompt (base plus body, or the body alone).
    pub system_prompt: String,
    /// `inherit`, `prefer`, `require` or `select`.
    pub model_policy: String,
    /// The model (alias resolved for the rho runtime; byte for byte for claude-cli).
    pub model: Option<String>,
    /// The provider (rho runtime only).
    pub provider: Option<String>,
    /// The reasoning level.
    pub reasoning: Option<String>,
    /// The frozen capability set (rho tools, or Claude tool entries), sorted.
    pub capabilities: Vec<String>,
    /// Whether the capability set excludes every mutating capability.
    pub read_only: bool,
    /// claude-cli: load the user's full Claude settings.
    pub inherit_claude_config: bool,
}

#[cfg(test)]
mod environment_tests {
    use super::{EnvironmentPolicy, url_has_password};

    #[test]
    fn patterns_match_without_regard_to_case_and_allow_wins() {
        let policy = EnvironmentPolicy {
            name: "p".to_owned(),
            exclude: vec![
                "*_token".to_owned(),
                "API_KEY".to_owned(),
                "*PASS*".to_owned(),
            ],
            allow: vec!["ci_job_TOKEN".to_owned()],
        };
        assert!(policy.excludes("Github_Token"));
        assert!(policy.excludes("api_key"));
        assert!(policy.excludes("MYPASSPHRASE"));
        assert!(!policy.excludes("CI_JOB_TOKEN"));
        assert!(!policy.excludes("TOKENIZER"));
        assert!(policy.withholds("DB", b"mysql://root:pw@localhost/db"));
        assert!(!policy.withholds("CI_JOB_TOKEN", b"x"));
    }

    #[test]
    fn only_a_url_with_a_password_in_its_authority_counts() {
        assert!(url_has_password(b"postgres://u:p@h/db"));
        assert!(url_has_password(b"redis://:secret@cache:6379"));
        assert!(url_has_password(b"a list: x, https://u:p@h"));
        assert!(!url_has_password(b"postgres://u@h/db"));
        assert!(!url_has_password(b"postgres://u:@h/db"));
        assert!(!url_has_password(b"https://h/path:x@y"));
        assert!(!url_has_password(b"user:pass@host"));
    }

    #[test]
    fn an_empty_allow_list_is_not_encoded() {
        let policy = EnvironmentPolicy {
            name: "p".to_owned(),
            exclude: vec![],
            allow: vec![],
        };
        let json = serde_json::to_value(&policy).unwrap_or_default();
        assert!(json.get("allow").is_none(), "{json}");
    }
}
