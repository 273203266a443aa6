//! The pure parts of hooks: the `hooks.toml` format, which hooks are eligible, the JSON event
//! a hook receives, its minimal environment, and how its answer becomes a verdict.
//!
//! Invariant: a `before_tool_use` hook can only continue or deny. Anything other than a
//! well-formed `continue` answer from a cleanly exiting hook — a crash, a timeout, a missing,
//! oversized or malformed answer — is a denial naming the hook. Project hooks are dropped
//! unless the workspace's hooks are trusted.
//!
//! Running hook processes is the host's job: it spawns each command with the event on stdin
//! and [`hook_environment`], bounds its output, and hands the result to [`hook_verdict`].

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::PolicyError;
use crate::approval::HookVerdict;
use crate::request::{CommandRequest, ExecutableIdentity, OperationClass};

/// The only `version` a hooks file may declare.
pub const HOOKS_FILE_VERSION: i64 = 1;
/// The longest timeout a hook may declare.
pub const MAX_HOOK_TIMEOUT: Duration = Duration::from_mins(10);
/// The most bytes of output a hook may answer with; more is a denial.
pub const HOOK_OUTPUT_LIMIT: usize = 8 * 1024;
/// `schema_version` of [`HookEvent`].
pub const HOOK_EVENT_SCHEMA_VERSION: u32 = 1;
/// Variables a hook always gets from the host's environment when set, besides its `env` list.
pub const HOOK_BASE_ENV: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ"];

const HOOK_FIELDS: &str = "id, on, tools, command, timeout, env";

/// Which hooks file a hook came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookScope {
    /// `$RHO_HOME/hooks.toml`: always eligible.
    User,
    /// `<workspace>/.rho/hooks.toml`: eligible only when the workspace's hooks are trusted.
    Project,
}

impl fmt::Display for HookScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HookScope::User => "user",
            HookScope::Project => "project",
        })
    }
}

/// The events a hook can subscribe to with `on`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEventName {
    /// Before an operation runs; the hook may deny it.
    BeforeToolUse,
    /// A workflow run started (observational).
    WorkflowStarted,
    /// A node attempt started (observational).
    WorkflowNodeStarted,
    /// A node attempt finished (observational).
    WorkflowNodeFinished,
    /// A run completed successfully (observational).
    WorkflowCompleted,
    /// A run failed (observational).
    WorkflowFailed,
    /// A run was cancelled (observational).
    WorkflowCancelled,
}

impl HookEventName {
    /// Every event name.
    pub const ALL: [HookEventName; 7] = [
        HookEventName::BeforeToolUse,
        HookEventName::WorkflowStarted,
        HookEventName::WorkflowNodeStarted,
        HookEventName::WorkflowNodeFinished,
        HookEventName::WorkflowCompleted,
        HookEventName::WorkflowFailed,
        HookEventName::WorkflowCancelled,
    ];

    /// The spelling in `on` and in the event JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            HookEventName::BeforeToolUse => "before_tool_use",
            HookEventName::WorkflowStarted => "workflow_started",
            HookEventName::WorkflowNodeStarted => "workflow_node_started",
            HookEventName::WorkflowNodeFinished => "workflow_node_finished",
            HookEventName::WorkflowCompleted => "workflow_completed",
            HookEventName::WorkflowFailed => "workflow_failed",
            HookEventName::WorkflowCancelled => "workflow_cancelled",
        }
    }

    /// Observational hooks never change the run; only `before_tool_use` can deny.
    pub const fn is_observational(self) -> bool {
        !matches!(self, HookEventName::BeforeToolUse)
    }
}

impl fmt::Display for HookEventName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One validated `[[hook]]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookSpec {
    /// Unique within its file.
    pub id: String,
    /// The file it came from.
    pub scope: HookScope,
    /// The event it runs on.
    pub on: HookEventName,
    /// Tool names it applies to (`before_tool_use` only); `None` matches every tool. An entry
    /// is an exact name, `prefix*`, or `*`.
    pub tools: Option<Vec<String>>,
    /// The argv to execute; `command[0]` is the program.
    pub command: Vec<String>,
    /// How long it may run.
    pub timeout: Duration,
    /// Extra environment variable names passed through from the host.
    pub env: Vec<String>,
}

impl HookSpec {
    /// Whether this hook applies to `event` for the tool named `tool`.
    pub fn matches(&self, event: HookEventName, tool: &str) -> bool {
        if self.on != event {
            return false;
        }
        match &self.tools {
            None => true,
            Some(patterns) => patterns
                .iter()
                .any(|pattern| match pattern.strip_suffix('*') {
                    Some(prefix) => tool.starts_with(prefix),
                    None => pattern == tool,
                }),
        }
    }
}

/// A validated hooks file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HooksFile {
    /// Where it was read from (for messages).
    pub path: PathBuf,
    /// User or project.
    pub scope: HookScope,
    /// Its hooks, in file order.
    pub hooks: Vec<HookSpec>,
}

/// Parses and validates one hooks file. `file` is only used in messages.
pub fn parse_hooks_file(
    file: &Path,
    text: &str,
    scope: HookScope,
) -> Result<HooksFile, PolicyError> {
    let table: toml::Table = toml::from_str(text).map_err(|err| {
        let (line, column) = err
            .span()
            .map_or((1, 1), |span| line_column(text, span.start));
        PolicyError::HooksSyntax {
            file: file.to_path_buf(),
            line,
            column,
            message: err.message().to_owned(),
        }
    })?;
    let file_error = |field: &str, problem: String| PolicyError::HooksFile {
        file: file.to_path_buf(),
        field: field.to_owned(),
        problem,
    };

    let mut version_seen = false;
    let mut raw_hooks: &[toml::Value] = &[];
    for (key, value) in &table {
        match key.as_str() {
            "version" => {
                if value.as_integer() != Some(HOOKS_FILE_VERSION) {
                    return Err(file_error(
                        "version",
                        format!("unsupported value {}; expected `version = 1`", show(value)),
                    ));
                }
                version_seen = true;
            }
            "hook" => match value.as_array() {
                Some(items) => raw_hooks = items,
                None => {
                    return Err(file_error(
                        "hook",
                        "expected an array of `[[hook]]` tables".to_owned(),
                    ));
                }
            },
            other => {
                return Err(file_error(
                    other,
                    "unknown key; expected `version` or `[[hook]]`".into(),
                ));
            }
        }
    }
    if !version_seen {
        return Err(file_error(
            "version",
            "missing; expected `version = 1`".to_owned(),
        ));
    }

    let mut hooks: Vec<HookSpec> = Vec::with_capacity(raw_hooks.len());
    for (index, raw) in raw_hooks.iter().enumerate() {
        let hook = parse_hook(file, scope, index, raw)?;
        if hooks.iter().any(|h| h.id == hook.id) {
            return Err(PolicyError::HookField {
                file: file.to_path_buf(),
                hook: hook.id,
                field: "id".to_owned(),
                problem: "duplicate id; each hook in a file needs its own".to_owned(),
            });
        }
        hooks.push(hook);
    }
    Ok(HooksFile {
        path: file.to_path_buf(),
        scope,
        hooks,
    })
}

fn parse_hook(
    file: &Path,
    scope: HookScope,
    index: usize,
    raw: &toml::Value,
) -> Result<HookSpec, PolicyError> {
    let position = format!("#{}", index + 1);
    let error = |hook: &str, field: &str, problem: String| PolicyError::HookField {
        file: file.to_path_buf(),
        hook: hook.to_owned(),
        field: field.to_owned(),
        problem,
    };
    let Some(table) = raw.as_table() else {
        return Err(error(
            &position,
            "hook",
            "expected a `[[hook]]` table".to_owned(),
        ));
    };

    // The id comes first so every later message can name the hook.
    let id = match table.get("id") {
        None => return Err(error(&position, "id", "missing".to_owned())),
        Some(value) => {
            let id = value.as_str().unwrap_or_default();
            if !valid_hook_id(id) {
                return Err(error(
                    &position,
                    "id",
                    format!(
                        "{} is not a valid id: use letters, digits, `_`, `-` or `.`",
                        show(value)
                    ),
                ));
            }
            id.to_owned()
        }
    };
    let error = |field: &str, problem: String| error(&id, field, problem);

    let mut on = None;
    let mut tools = None;
    let mut command = None;
    let mut timeout = None;
    let mut env = Vec::new();
    for (key, value) in table {
        match key.as_str() {
            "id" => {}
            "on" => {
                let name = value.as_str().unwrap_or_default();
                let event = HookEventName::ALL.into_iter().find(|e| e.as_str() == name);
                on = Some(event.ok_or_else(|| {
                    error(
                        "on",
                        format!(
                            "unknown event {}; expected one of {}",
                            show(value),
                            HookEventName::ALL.map(HookEventName::as_str).join(", ")
                        ),
                    )
                })?);
            }
            "tools" => {
                let list = string_list(value).map_err(|p| error("tools", p))?;
                if list.is_empty() {
                    return Err(error(
                        "tools",
                        "empty list matches nothing; omit `tools` to match every tool".into(),
                    ));
                }
                if let Some(bad) = list
                    .iter()
                    .find(|t| t.is_empty() || t.strip_suffix('*').unwrap_or(t).contains('*'))
                {
                    return Err(error(
                        "tools",
                        format!("bad matcher `{bad}`: use a tool name, `prefix*` or `*`"),
                    ));
                }
                tools = Some(list);
            }
            "command" => {
                let argv = string_list(value).map_err(|p| error("command", p))?;
                check_command(&argv, scope).map_err(|p| error("command", p))?;
                command = Some(argv);
            }
            "timeout" => {
                let text = value.as_str().ok_or_else(|| {
                    error(
                        "timeout",
                        format!("expected a string like \"2s\", got {}", show(value)),
                    )
                })?;
                timeout = Some(parse_timeout(text).map_err(|p| error("timeout", p))?);
            }
            "env" => {
                env = string_list(value).map_err(|p| error("env", p))?;
                check_env_names(&env).map_err(|p| error("env", p))?;
            }
            other => {
                return Err(error(
                    other,
                    format!("unknown field; expected one of {HOOK_FIELDS}"),
                ));
            }
        }
    }
    let on = on.ok_or_else(|| error("on", "missing".to_owned()))?;
    if tools.is_some() && on.is_observational() {
        return Err(error(
            "tools",
            format!("only applies to `before_tool_use` hooks, not `{on}`"),
        ));
    }
    Ok(HookSpec {
        on,
        tools,
        command: command.ok_or_else(|| error("command", "missing".to_owned()))?,
        timeout: timeout.ok_or_else(|| error("timeout", "missing".to_owned()))?,
        env,
        id,
        scope,
    })
}

/// A TOML value as a user would recognize it in a message.
fn show(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(_) => "an array".to_owned(),
        toml::Value::Table(_) => "a table".to_owned(),
    }
}

fn valid_hook_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn string_list(value: &toml::Value) -> Result<Vec<String>, String> {
    let items = value
        .as_array()
        .ok_or_else(|| format!("expected a list of strings, got {}", show(value)))?;
    items
        .iter()
        .map(|item| {
            item.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("expected a list of strings, found {}", show(item)))
        })
        .collect()
}

fn check_command(argv: &[String], scope: HookScope) -> Result<(), String> {
    let Some(program) = argv.first() else {
        return Err("empty; expected an argv list such as [\"/path/to/hook\", \"--flag\"]".into());
    };
    if program.is_empty() {
        return Err("the program (first element) is empty".to_owned());
    }
    if argv.iter().any(|arg| arg.contains('\0')) {
        return Err("an argument contains a NUL byte".to_owned());
    }
    // A project file must not be able to pick up whatever a bare name resolves to on the
    // user's PATH.
    if scope == HookScope::Project && !program.contains('/') {
        return Err(format!(
            "project hooks must name their program by path (e.g. `./{program}`), not the bare \
             PATH name `{program}`"
        ));
    }
    Ok(())
}

fn check_env_names(names: &[String]) -> Result<(), String> {
    for (i, name) in names.iter().enumerate() {
        let mut bytes = name.bytes();
        let valid = bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return Err(format!("`{name}` is not a valid environment variable name"));
        }
        if names[..i].contains(name) {
            return Err(format!("`{name}` is listed twice"));
        }
    }
    Ok(())
}

/// Parses a hook timeout: a positive whole number with unit `ms`, `s` or `m`, at most
/// [`MAX_HOOK_TIMEOUT`]. The error is the problem, for the caller to place.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let shape = || format!("`{text}` is not a duration like \"500ms\", \"2s\" or \"1m\"");
    if number.is_empty() {
        return Err(shape());
    }
    let value: u64 = number.parse().map_err(|_| shape())?;
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        _ => return Err(shape()),
    };
    let too_long = || format!("`{text}` exceeds the limit of 10m");
    let millis = value.checked_mul(millis_per_unit).ok_or_else(too_long)?;
    let duration = Duration::from_millis(millis);
    if duration.is_zero() {
        return Err(format!("`{text}` must be greater than zero"));
    }
    if duration > MAX_HOOK_TIMEOUT {
        return Err(too_long());
    }
    Ok(duration)
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.split(|&b| b == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

/// The hooks eligible in one process: user hooks, then project hooks if trusted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HookSet {
    hooks: Vec<HookSpec>,
}

impl HookSet {
    /// Combines the files; project hooks are dropped unless `project_hooks_trusted`
    /// (workspace trusted, or `RHO_TRUST_PROJECT_HOOKS=1`).
    pub fn new(
        user: Option<HooksFile>,
        project: Option<HooksFile>,
        project_hooks_trusted: bool,
    ) -> Self {
        let mut hooks = user.map(|f| f.hooks).unwrap_or_default();
        if project_hooks_trusted {
            hooks.extend(project.map(|f| f.hooks).unwrap_or_default());
        }
        HookSet { hooks }
    }

    /// The hooks to run for `event` on `tool`, in order (user first); for `before_tool_use`
    /// the first denial wins.
    pub fn matching(&self, event: HookEventName, tool: &str) -> impl Iterator<Item = &HookSpec> {
        self.hooks.iter().filter(move |h| h.matches(event, tool))
    }

    /// Every eligible hook.
    pub fn all(&self) -> &[HookSpec] {
        &self.hooks
    }
}

/// Workflow labels of an event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostLabels {
    /// The workflow run.
    pub workflow_run_id: String,
    /// The confirmed program's digest.
    pub plan_digest: String,
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
    /// The program and its digest.
    pub executable: ExecutableIdentity,
    /// Full argv.
    pub arguments: Vec<String>,
    /// The environment policy's name.
    pub environment_policy: String,
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
                workflow_run_id: req.run_id.clone(),
                plan_digest: req.plan_digest.clone(),
                node_id: Some(req.node_id.clone()),
                attempt: Some(req.attempt),
            },
            payload: Some(CapabilityPayload {
                tool: CommandRequest::TOOL_NAME.to_owned(),
                operation: req.operation_class(),
                working_directory: req.cwd.clone(),
                executable: req.executable.clone(),
                arguments: req.argv.clone(),
                environment_policy: req.environment_policy.clone(),
            }),
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

/// How a hook process ended, as observed by the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookRun {
    /// It exited with `code`. `stdout` holds at most [`HOOK_OUTPUT_LIMIT`] + 1 bytes (the host
    /// stops reading there, which is enough to see it was too long); likewise `stderr`.
    Exited {
        /// Exit status.
        code: i32,
        /// Captured standard output.
        stdout: Vec<u8>,
        /// Captured standard error.
        stderr: Vec<u8>,
    },
    /// It was killed by `signal`.
    Signaled {
        /// Signal number.
        signal: i32,
    },
    /// It was killed after its timeout.
    TimedOut {
        /// The declared timeout.
        after: Duration,
    },
    /// It could not be started.
    SpawnFailed {
        /// The OS error.
        detail: String,
    },
}

/// The verdict of one `before_tool_use` hook run.
///
/// Exit 0 must come with a valid answer on stdout ([`parse_hook_response`]). Exit 2 denies:
/// the reason is taken from a valid deny answer on stdout, else from stderr, else the status.
/// Any other ending denies with a reason saying how the hook ended.
pub fn hook_verdict(hook_id: &str, run: &HookRun) -> HookVerdict {
    let deny = |reason: String| HookVerdict::Deny {
        hook_id: hook_id.to_owned(),
        reason,
    };
    match run {
        HookRun::Exited {
            code: 0, stdout, ..
        } => parse_hook_response(hook_id, stdout),
        HookRun::Exited {
            code: 2,
            stdout,
            stderr,
        } => match response_decision(stdout) {
            Ok(Decision::Deny(Some(reason))) if !reason.trim().is_empty() => deny(reason),
            _ => {
                let text = bounded_text(stderr);
                if text.is_empty() {
                    deny("hook exited with status 2".to_owned())
                } else {
                    deny(text)
                }
            }
        },
        HookRun::Exited { code, .. } => deny(format!("hook failed: exited with status {code}")),
        HookRun::Signaled { signal } => deny(format!("hook crashed: killed by signal {signal}")),
        HookRun::TimedOut { after } => {
            deny(format!("hook timed out after {}ms", after.as_millis()))
        }
        HookRun::SpawnFailed { detail } => deny(format!("hook could not start: {detail}")),
    }
}

fn bounded_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(HOOK_OUTPUT_LIMIT)]);
    text.trim().to_owned()
}

enum Decision {
    Continue,
    Deny(Option<String>),
}

/// Parses a `before_tool_use` answer: exactly `{"version":1,"decision":"continue"}` or
/// `{"version":1,"decision":"deny","reason":"..."}` (reason optional), at most
/// [`HOOK_OUTPUT_LIMIT`] bytes. Anything else denies, naming the hook.
pub fn parse_hook_response(hook_id: &str, stdout: &[u8]) -> HookVerdict {
    let deny = |reason: String| HookVerdict::Deny {
        hook_id: hook_id.to_owned(),
        reason,
    };
    match response_decision(stdout) {
        Ok(Decision::Continue) => HookVerdict::Continue,
        Ok(Decision::Deny(Some(reason))) if !reason.trim().is_empty() => deny(reason),
        Ok(Decision::Deny(_)) => deny(format!("hook `{hook_id}` denied without a reason")),
        Err(problem) => deny(format!(
            "hook `{hook_id}` gave an invalid answer: {problem}"
        )),
    }
}

fn response_decision(stdout: &[u8]) -> Result<Decision, String> {
    if stdout.len() > HOOK_OUTPUT_LIMIT {
        return Err(format!(
            "output exceeds {HOOK_OUTPUT_LIMIT} bytes (at least {} bytes)",
            stdout.len()
        ));
    }
    if stdout.iter().all(u8::is_ascii_whitespace) {
        return Err("no output".to_owned());
    }
    let value: serde_json::Value =
        serde_json::from_slice(stdout).map_err(|err| format!("malformed JSON: {err}"))?;
    let object = value.as_object().ok_or("expected a JSON object")?;
    if let Some(key) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "version" | "decision" | "reason"))
    {
        return Err(format!("unknown field `{key}`"));
    }
    match object.get("version") {
        None => return Err("missing `version`".to_owned()),
        Some(v) if v.as_u64() == Some(1) => {}
        Some(v) => return Err(format!("unsupported version {v}; expected 1")),
    }
    let reason = match object.get("reason") {
        None => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(format!("`reason` must be a string, got {other}")),
    };
    match object.get("decision").map(|d| (d, d.as_str())) {
        None => Err("missing `decision`".to_owned()),
        Some((_, Some("continue"))) if reason.is_some() => {
            Err("`reason` is only allowed with decision `deny`".to_owned())
        }
        Some((_, Some("continue"))) => Ok(Decision::Continue),
        Some((_, Some("deny"))) => Ok(Decision::Deny(reason)),
        Some((d, _)) => Err(format!(
            "unknown decision {d}; expected \"continue\" or \"deny\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER_FILE: &str = r#"
version = 1

[[hook]]
id = "guard"
on = "before_tool_use"
tools = ["workflow_command"]
command = ["/home/me/bin/guard", "--strict"]
timeout = "2s"
env = ["GUARD_TOKEN"]

[[hook]]
id = "log-finish"
on = "workflow_node_finished"
command = ["logger", "-t", "rho"]
timeout = "500ms"
"#;

    fn parse(text: &str, scope: HookScope) -> Result<HooksFile, PolicyError> {
        parse_hooks_file(Path::new("/home/me/.rho/hooks.toml"), text, scope)
    }

    fn parse_err(text: &str, scope: HookScope) -> String {
        parse(text, scope).unwrap_err().to_string()
    }

    fn hook_table(body: &str) -> String {
        format!("version = 1\n[[hook]]\nid = \"h\"\non = \"before_tool_use\"\n{body}")
    }

    #[test]
    fn accepts_a_full_user_file() {
        let file = parse(USER_FILE, HookScope::User).unwrap();
        assert_eq!(file.hooks.len(), 2);
        let guard = &file.hooks[0];
        assert_eq!(guard.id, "guard");
        assert_eq!(guard.on, HookEventName::BeforeToolUse);
        assert_eq!(
            guard.tools.as_deref(),
            Some(&["workflow_command".to_owned()][..])
        );
        assert_eq!(guard.command, ["/home/me/bin/guard", "--strict"]);
        assert_eq!(guard.timeout, Duration::from_secs(2));
        assert_eq!(guard.env, ["GUARD_TOKEN"]);
        let log = &file.hooks[1];
        assert_eq!(log.on, HookEventName::WorkflowNodeFinished);
        assert_eq!(log.tools, None);
        assert_eq!(log.timeout, Duration::from_millis(500));
        assert!(log.env.is_empty());
    }

    #[test]
    fn accepts_non_ascii_and_prefix_tool_matchers() {
        let text = hook_table(
            "command = [\"/x\"]\ntimeout = \"1s\"\ntools = [\"é\", \"edit_*\", \"*\"]\n",
        );
        let hook = &parse(&text, HookScope::User).unwrap().hooks[0];
        assert_eq!(hook.tools.as_ref().unwrap().len(), 3);
    }

    #[test]
    fn version_only_file_has_no_hooks() {
        assert!(
            parse("version = 1\n", HookScope::Project)
                .unwrap()
                .hooks
                .is_empty()
        );
    }

    #[test]
    fn unknown_hook_field_names_file_hook_and_field() {
        let msg = parse_err(
            &hook_table("command = [\"/x\"]\ntimeout = \"1s\"\nshell = \"x\"\n"),
            HookScope::User,
        );
        assert_eq!(
            msg,
            "/home/me/.rho/hooks.toml: hook `h`: field `shell`: unknown field; expected one of \
             id, on, tools, command, timeout, env"
        );
    }

    #[test]
    fn unknown_top_level_key_names_file_and_key() {
        let msg = parse_err("version = 1\nhooks = []\n", HookScope::User);
        assert_eq!(
            msg,
            "/home/me/.rho/hooks.toml: field `hooks`: unknown key; expected `version` or `[[hook]]`"
        );
    }

    #[test]
    fn version_must_be_one_and_present() {
        assert!(
            parse_err("version = 2\n", HookScope::User)
                .contains("field `version`: unsupported value 2")
        );
        assert!(parse_err("version = \"1\"\n", HookScope::User).contains("field `version`"));
        assert!(
            parse_err("[[hook]]\nid = \"a\"\n", HookScope::User)
                .contains("field `version`: missing")
        );
    }

    #[test]
    fn syntax_error_names_line_and_column() {
        let err = parse("version = 1\n[[hook]]\nid = \n", HookScope::User).unwrap_err();
        let PolicyError::HooksSyntax { line, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(*line, 3, "{err}");
        assert!(
            err.to_string().starts_with("/home/me/.rho/hooks.toml:3:"),
            "{err}"
        );
    }

    #[test]
    fn missing_required_fields_are_named() {
        let cases = [
            (
                "version = 1\n[[hook]]\non = \"before_tool_use\"\n",
                "hook `#1`: field `id`: missing",
            ),
            (
                "version = 1\n[[hook]]\nid = \"a\"\ncommand = [\"/x\"]\ntimeout = \"1s\"\n",
                "hook `a`: field `on`: missing",
            ),
            (
                &hook_table("timeout = \"1s\"\n"),
                "hook `h`: field `command`: missing",
            ),
            (
                &hook_table("command = [\"/x\"]\n"),
                "hook `h`: field `timeout`: missing",
            ),
        ];
        for (text, want) in cases {
            let msg = parse_err(text, HookScope::User);
            assert!(msg.contains(want), "{msg} should contain {want}");
        }
    }

    #[test]
    fn rejects_bad_values() {
        let cases = [
            (hook_table("command = \"/x --y\"\ntimeout = \"1s\"\n"), "field `command`: expected a list of strings"),
            (hook_table("command = []\ntimeout = \"1s\"\n"), "field `command`: empty"),
            (hook_table("command = [\"\"]\ntimeout = \"1s\"\n"), "field `command`: the program (first element) is empty"),
            (hook_table("command = [\"/x\", 3]\ntimeout = \"1s\"\n"), "field `command`: expected a list of strings, found 3"),
            (hook_table("command = [\"/x\"]\ntimeout = 2\n"), "field `timeout`: expected a string"),
            (hook_table("command = [\"/x\"]\ntimeout = \"11m\"\n"), "exceeds the limit of 10m"),
            (hook_table("command = [\"/x\"]\ntimeout = \"0s\"\n"), "must be greater than zero"),
            (hook_table("command = [\"/x\"]\ntimeout = \"2 s\"\n"), "is not a duration"),
            (hook_table("command = [\"/x\"]\ntimeout = \"1s\"\nenv = [\"BAD-NAME\"]\n"), "field `env`: `BAD-NAME` is not a valid"),
            (hook_table("command = [\"/x\"]\ntimeout = \"1s\"\nenv = [\"A\", \"A\"]\n"), "`A` is listed twice"),
            (hook_table("command = [\"/x\"]\ntimeout = \"1s\"\ntools = []\n"), "field `tools`: empty list"),
            (hook_table("command = [\"/x\"]\ntimeout = \"1s\"\ntools = [\"a*b\"]\n"), "bad matcher `a*b`"),
            (hook_table("command = [\"/x\"]\ntimeout = \"1s\"\ntools = [\"**\"]\n"), "bad matcher `**`"),
            (
                "version = 1\n[[hook]]\nid = \"o\"\non = \"workflow_started\"\ntools = [\"x\"]\ncommand = [\"/x\"]\ntimeout = \"1s\"\n".to_owned(),
                "hook `o`: field `tools`: only applies to `before_tool_use`",
            ),
            (
                "version = 1\n[[hook]]\nid = \"o\"\non = \"after_tool_use\"\ncommand = [\"/x\"]\ntimeout = \"1s\"\n".to_owned(),
                "hook `o`: field `on`: unknown event \"after_tool_use\"",
            ),
            (
                "version = 1\n[[hook]]\nid = \"has space\"\n".to_owned(),
                "hook `#1`: field `id`: \"has space\" is not a valid id",
            ),
            (format!("{}\n[[hook]]\nid = \"h\"\non = \"workflow_failed\"\ncommand = [\"/y\"]\ntimeout = \"1s\"\n", hook_table("command = [\"/x\"]\ntimeout = \"1s\"\n")), "hook `h`: field `id`: duplicate id"),
        ];
        for (text, want) in cases {
            let msg = parse_err(&text, HookScope::User);
            assert!(msg.contains(want), "{msg}\n  should contain: {want}");
        }
    }

    #[test]
    fn project_hooks_must_name_program_by_path() {
        let bare = hook_table("command = [\"guard\"]\ntimeout = \"1s\"\n");
        assert!(parse(&bare, HookScope::User).is_ok());
        let msg = parse_err(&bare, HookScope::Project);
        assert!(
            msg.contains(
                "hook `h`: field `command`: project hooks must name their program by path"
            ),
            "{msg}"
        );
        let pathed = hook_table("command = [\"./.rho/guard\"]\ntimeout = \"1s\"\n");
        assert!(parse(&pathed, HookScope::Project).is_ok());
    }

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_timeout("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_timeout("1m"), Ok(Duration::from_mins(1)));
        assert_eq!(parse_timeout("10m"), Ok(MAX_HOOK_TIMEOUT));
        assert_eq!(parse_timeout("600000ms"), Ok(MAX_HOOK_TIMEOUT));
        for bad in [
            "",
            "s",
            "2",
            "1.5s",
            "-1s",
            "1h",
            "2S",
            " 2s",
            "99999999999999999999m",
            "600001ms",
        ] {
            assert!(parse_timeout(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn untrusted_project_hooks_are_not_eligible_and_user_hooks_come_first() {
        let user = parse(USER_FILE, HookScope::User).unwrap();
        let project_text = hook_table("command = [\"./check\"]\ntimeout = \"1s\"\n");
        let project = parse_hooks_file(
            Path::new("/w/.rho/hooks.toml"),
            &project_text,
            HookScope::Project,
        )
        .unwrap();

        let untrusted = HookSet::new(Some(user.clone()), Some(project.clone()), false);
        let ids: Vec<_> = untrusted
            .matching(HookEventName::BeforeToolUse, "workflow_command")
            .map(|h| h.id.as_str())
            .collect();
        assert_eq!(ids, ["guard"]);

        let trusted = HookSet::new(Some(user), Some(project), true);
        let ids: Vec<_> = trusted
            .matching(HookEventName::BeforeToolUse, "workflow_command")
            .map(|h| h.id.as_str())
            .collect();
        assert_eq!(ids, ["guard", "h"]);
        let ids: Vec<_> = trusted
            .matching(HookEventName::BeforeToolUse, "edit_file")
            .map(|h| h.id.as_str())
            .collect();
        assert_eq!(ids, ["h"], "guard only matches workflow_command");
        assert_eq!(trusted.all().len(), 3);
    }

    #[test]
    fn tool_matchers() {
        let mut hook = parse(USER_FILE, HookScope::User).unwrap().hooks.remove(0);
        hook.tools = Some(vec!["edit_*".to_owned(), "bash".to_owned()]);
        assert!(hook.matches(HookEventName::BeforeToolUse, "edit_file"));
        assert!(hook.matches(HookEventName::BeforeToolUse, "bash"));
        assert!(!hook.matches(HookEventName::BeforeToolUse, "bash2"));
        assert!(!hook.matches(HookEventName::WorkflowStarted, "bash"));
        hook.tools = Some(vec!["*".to_owned()]);
        assert!(hook.matches(HookEventName::BeforeToolUse, "anything"));
    }

    fn deny_reason(v: HookVerdict) -> String {
        match v {
            HookVerdict::Deny { hook_id, reason } => {
                assert_eq!(hook_id, "guard");
                reason
            }
            HookVerdict::Continue => panic!("expected a denial"),
        }
    }

    #[test]
    fn response_continue_and_deny() {
        assert_eq!(
            parse_hook_response("guard", br#"{"version":1,"decision":"continue"}"#),
            HookVerdict::Continue
        );
        assert_eq!(
            parse_hook_response("guard", b"{\"decision\":\"continue\",\"version\":1}\n"),
            HookVerdict::Continue
        );
        let reason = deny_reason(parse_hook_response(
            "guard",
            br#"{"version":1,"decision":"deny","reason":"rm -rf is off limits"}"#,
        ));
        assert_eq!(reason, "rm -rf is off limits");
        let reason = deny_reason(parse_hook_response(
            "guard",
            br#"{"version":1,"decision":"deny"}"#,
        ));
        assert_eq!(reason, "hook `guard` denied without a reason");
    }

    #[test]
    fn any_other_response_denies_naming_the_hook() {
        let too_big = format!(
            "{{\"version\":1,\"decision\":\"continue\"}}{}",
            " ".repeat(HOOK_OUTPUT_LIMIT)
        );
        let cases: [(&[u8], &str); 12] = [
            (b"", "no output"),
            (b"  \n", "no output"),
            (b"ok", "malformed JSON"),
            (br#"{"version":1,"decision":"continue""#, "malformed JSON"),
            (b"[1]", "expected a JSON object"),
            (
                br#"{"version":2,"decision":"continue"}"#,
                "unsupported version 2",
            ),
            (
                br#"{"version":"1","decision":"continue"}"#,
                "unsupported version \"1\"",
            ),
            (br#"{"decision":"continue"}"#, "missing `version`"),
            (
                br#"{"version":1,"decision":"allow"}"#,
                "unknown decision \"allow\"",
            ),
            (br#"{"version":1}"#, "missing `decision`"),
            (
                br#"{"version":1,"decision":"continue","extra":true}"#,
                "unknown field `extra`",
            ),
            (too_big.as_bytes(), "output exceeds 8192 bytes"),
        ];
        for (stdout, want) in cases {
            let reason = deny_reason(parse_hook_response("guard", stdout));
            assert!(
                reason.starts_with("hook `guard` gave an invalid answer: "),
                "{reason}"
            );
            assert!(reason.contains(want), "{reason} should contain {want}");
        }
        let reason = deny_reason(parse_hook_response(
            "guard",
            br#"{"version":1,"decision":"continue","reason":"x"}"#,
        ));
        assert!(
            reason.contains("only allowed with decision `deny`"),
            "{reason}"
        );
        let reason = deny_reason(parse_hook_response(
            "guard",
            br#"{"version":1,"decision":"deny","reason":5}"#,
        ));
        assert!(reason.contains("`reason` must be a string"), "{reason}");
    }

    #[test]
    fn process_endings_map_to_verdicts() {
        let exited = |code: i32, stdout: &[u8], stderr: &[u8]| HookRun::Exited {
            code,
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
        };
        assert_eq!(
            hook_verdict(
                "guard",
                &exited(0, br#"{"version":1,"decision":"continue"}"#, b"")
            ),
            HookVerdict::Continue
        );
        assert!(deny_reason(hook_verdict("guard", &exited(0, b"", b""))).contains("no output"));
        assert_eq!(
            deny_reason(hook_verdict(
                "guard",
                &exited(
                    2,
                    br#"{"version":1,"decision":"deny","reason":"json reason"}"#,
                    b"stderr reason"
                )
            )),
            "json reason"
        );
        assert_eq!(
            deny_reason(hook_verdict(
                "guard",
                &exited(2, b"", b"  blocked by guard\n")
            )),
            "blocked by guard"
        );
        assert_eq!(
            deny_reason(hook_verdict("guard", &exited(2, b"", b""))),
            "hook exited with status 2"
        );
        // Exit 2 never allows, even with a continue answer on stdout.
        assert_eq!(
            deny_reason(hook_verdict(
                "guard",
                &exited(2, br#"{"version":1,"decision":"continue"}"#, b"")
            )),
            "hook exited with status 2"
        );
        assert_eq!(
            deny_reason(hook_verdict(
                "guard",
                &exited(1, br#"{"version":1,"decision":"continue"}"#, b"")
            )),
            "hook failed: exited with status 1"
        );
        assert_eq!(
            deny_reason(hook_verdict("guard", &HookRun::Signaled { signal: 9 })),
            "hook crashed: killed by signal 9"
        );
        assert_eq!(
            deny_reason(hook_verdict(
                "guard",
                &HookRun::TimedOut {
                    after: Duration::from_secs(2)
                }
            )),
            "hook timed out after 2000ms"
        );
        assert_eq!(
            deny_reason(hook_verdict(
                "guard",
                &HookRun::SpawnFailed {
                    detail: "No such file or directory".into()
                }
            )),
            "hook could not start: No such file or directory"
        );
    }

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
            workflow_run_id: "run-1".into(),
            plan_digest: "d".into(),
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
}
