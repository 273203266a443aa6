//! The model-facing `process` tool: `start`, `poll` and `stop` of background shell commands,
//! served by the [`ProcessManager`](crate::process::ProcessManager) of the owning instance.
//!
//! Invariant: `start` and `stop` are process execution for the permission path (a mode that
//! denies processes denies them, `supervised` asks first); `poll` only reads. The summary the
//! model gets is bounded by the context's summary limit: the manager is asked for a window
//! that fits, and the text is cut on whole lines with a note when it still would not.

use std::time::{Duration, Instant};

use rho_policy::OperationClass;
use serde::Deserialize;
use serde_json::{Value, json};

use super::summary::bound_lines;
use super::{Tool, ToolContext, ToolError, ToolOutput, ToolPermission, parse_args};
use crate::process::{ProcessError, ProcessManager, Snapshot, Stream};

/// The tool's name and the capability an agent needs for it.
pub const PROCESS_TOOL: &str = "process";

/// A blocking poll re-checks the call's cancellation this often (output and exit still wake
/// it at once).
const CANCEL_SLICE: Duration = Duration::from_millis(250);

/// Room kept in the summary for the header and notes around the output.
const SUMMARY_OVERHEAD: usize = 1024;

/// Starts, polls and stops background processes through one manager.
#[derive(Debug, Clone)]
pub struct ProcessTool {
    manager: ProcessManager,
}

impl ProcessTool {
    /// The tool over `manager` (shared with the host, which shuts it down on exit).
    pub fn new(manager: ProcessManager) -> Self {
        ProcessTool { manager }
    }

    /// The manager behind the tool.
    pub fn manager(&self) -> &ProcessManager {
        &self.manager
    }
}

/// The arguments, as the schema admits them; per-action rules are checked in [`Action::from`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessArgs {
    action: String,
    command: Option<String>,
    timeout_seconds: Option<u64>,
    process_id: Option<String>,
    cursor: Option<u64>,
    wait_seconds: Option<u64>,
}

#[derive(Debug, PartialEq, Eq)]
enum Action {
    Start {
        command: String,
        timeout_seconds: Option<u64>,
    },
    Poll {
        process_id: String,
        cursor: Option<u64>,
        wait_seconds: u64,
    },
    Stop {
        process_id: String,
    },
}

fn invalid(field: &str, problem: impl Into<String>) -> ToolError {
    ToolError::invalid(PROCESS_TOOL, field, problem)
}

impl Action {
    fn parse(args: &Value) -> Result<Self, ToolError> {
        let args: ProcessArgs = parse_args(PROCESS_TOOL, args)?;
        let refuse = |field: &str, present: bool, action: &str| {
            if present {
                Err(invalid(
                    field,
                    format!("not allowed with action `{action}`"),
                ))
            } else {
                Ok(())
            }
        };
        match args.action.as_str() {
            "start" => {
                refuse("process_id", args.process_id.is_some(), "start")?;
                refuse("cursor", args.cursor.is_some(), "start")?;
                refuse("wait_seconds", args.wait_seconds.is_some(), "start")?;
                let command = args
                    .command
                    .ok_or_else(|| invalid("command", "required with action `start`"))?;
                Ok(Action::Start {
                    command,
                    timeout_seconds: args.timeout_seconds,
                })
            }
            "poll" => {
                refuse("command", args.command.is_some(), "poll")?;
                refuse("timeout_seconds", args.timeout_seconds.is_some(), "poll")?;
                let process_id = args
                    .process_id
                    .ok_or_else(|| invalid("process_id", "required with action `poll`"))?;
                Ok(Action::Poll {
                    process_id,
                    cursor: args.cursor,
                    wait_seconds: args.wait_seconds.unwrap_or(0),
                })
            }
            "stop" => {
                refuse("command", args.command.is_some(), "stop")?;
                refuse("timeout_seconds", args.timeout_seconds.is_some(), "stop")?;
                refuse("cursor", args.cursor.is_some(), "stop")?;
                refuse("wait_seconds", args.wait_seconds.is_some(), "stop")?;
                let process_id = args
                    .process_id
                    .ok_or_else(|| invalid("process_id", "required with action `stop`"))?;
                Ok(Action::Stop { process_id })
            }
            other => Err(invalid(
                "action",
                format!("`{other}` is not one of start, poll, stop"),
            )),
        }
    }
}

/// The manager's refusal as the tool's typed error.
fn tool_error(error: ProcessError) -> ToolError {
    let message = error.to_string();
    match error {
        ProcessError::UnknownProcess {
            process_id,
            retention_minutes,
            max_records,
        } => ToolError::UnknownId {
            tool: PROCESS_TOOL.to_owned(),
            kind: "process_id",
            id: process_id,
            hint: format!(
                ": no such process in this rho instance (finished records are kept \
                 {retention_minutes} minutes, at most {max_records})"
            ),
        },
        ProcessError::LimitReached {
            limit,
            limit_value,
            what,
            advice,
        } => ToolError::Limit {
            tool: PROCESS_TOOL.to_owned(),
            limit,
            limit_value: limit_value.to_string(),
            detail: format!("{limit_value} {what}; {advice}"),
        },
        ProcessError::InvalidArgument { field, reason } => invalid(field, reason),
        _ => ToolError::failed(PROCESS_TOOL, message),
    }
}

/// The model-facing text of a snapshot: a header, the output grouped by stream in order,
/// and what to do next.
fn summary_lines(snapshot: &Snapshot, action: &str) -> Vec<String> {
    let mut lines = vec![format!(
        "process {}: {} after {:.1} s — `{}`",
        snapshot.process_id,
        snapshot.state.as_str(),
        snapshot.runtime_seconds,
        one_line(&snapshot.command)
    )];
    if let Some(code) = snapshot.exit_code {
        lines.push(format!("exit code: {code}"));
    }
    if let Some(detail) = &snapshot.terminal_detail {
        lines.push(format!("detail: {detail}"));
    }
    if let Some(stale) = snapshot.stale_cursor {
        lines.push(format!(
            "cursor {stale} was older than the retained output; reading resumed at cursor {}",
            snapshot
                .chunks
                .first()
                .map_or(snapshot.next_cursor, |c| c.cursor)
        ));
    }
    if snapshot.truncated {
        lines.push(format!(
            "output truncated: {} bytes were dropped under the retention caps (the first \
             chunk is kept while it fits)",
            snapshot.dropped_bytes
        ));
    }
    let mut current: Option<Stream> = None;
    let mut text = String::new();
    for chunk in &snapshot.chunks {
        if current != Some(chunk.stream) {
            flush_stream(&mut lines, current, &mut text);
            current = Some(chunk.stream);
        }
        text.push_str(&chunk.text);
    }
    flush_stream(&mut lines, current, &mut text);
    if action != "stop" && snapshot.chunks.is_empty() {
        lines.push("(no new output)".to_owned());
    }
    lines.push(format!(
        "cursors: first {}, next {}, available {}",
        snapshot.first_cursor, snapshot.next_cursor, snapshot.available_cursor
    ));
    if snapshot.output_pending {
        lines.push(format!(
            "more output is retained: poll with cursor {}",
            snapshot.next_cursor
        ));
    } else if !snapshot.state.is_terminal() {
        lines.push(format!(
            "still running: poll with cursor {} (wait_seconds up to 30 blocks until new \
             output), stop when done",
            snapshot.next_cursor
        ));
    }
    lines
}

fn flush_stream(lines: &mut Vec<String>, stream: Option<Stream>, text: &mut String) {
    let Some(stream) = stream else {
        return;
    };
    lines.push(format!("[{}]", stream.as_str()));
    lines.extend(text.lines().map(str::to_owned));
    if !text.is_empty() && !text.ends_with('\n') {
        lines.push("(no newline at the end)".to_owned());
    }
    text.clear();
}

/// The command on one line, shortened for the header.
fn one_line(command: &str) -> String {
    const MAX: usize = 200;
    let flat: String = command
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.len() <= MAX {
        return flat;
    }
    let mut cut = MAX;
    while !flat.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &flat[..cut])
}

fn text_bytes(snapshot: &Snapshot) -> usize {
    snapshot.chunks.iter().map(|c| c.text.len()).sum()
}

impl ProcessTool {
    /// The output for `snapshot`, re-read from `cursor` with smaller windows until the
    /// summary fits `limit` whole, so `next_cursor` never skips output the model was not
    /// shown (a single chunk too large for the limit is clipped by the bound instead).
    fn fitted(
        &self,
        mut snapshot: Snapshot,
        cursor: Option<u64>,
        action: &str,
        limit: usize,
    ) -> Result<ToolOutput, ToolError> {
        let mut lines = summary_lines(&snapshot, action);
        while lines.iter().map(|l| l.len() + 1).sum::<usize>() > limit && snapshot.chunks.len() > 1
        {
            let window = (text_bytes(&snapshot) / 2).max(1);
            snapshot = self
                .manager
                .poll(&snapshot.process_id, cursor, Duration::ZERO, window)
                .map_err(tool_error)?;
            if action == "stop" {
                snapshot.chunks.clear();
            }
            lines = summary_lines(&snapshot, action);
        }
        let summary = bound_lines(&lines, limit);
        let structured = serde_json::to_value(&snapshot).map_err(|e| {
            ToolError::failed(PROCESS_TOOL, format!("cannot encode the snapshot: {e}"))
        })?;
        Ok(ToolOutput::new(summary, structured))
    }
}

impl Tool for ProcessTool {
    fn name(&self) -> &'static str {
        PROCESS_TOOL
    }

    fn description(&self) -> &'static str {
        "Run a shell command in the background and read its output across turns. \
         `start` (command, optional timeout_seconds >= 1) launches `/bin/sh -c command` in the \
         workspace root with stdin closed and returns a process_id with early output. `poll` \
         (process_id, optional cursor = the previous next_cursor, optional wait_seconds 0-30 \
         to block until new output or exit) returns retained stdout/stderr chunks. `stop` \
         (process_id) stops the whole process tree (SIGTERM, 2 s grace, SIGKILL). At most 16 \
         processes run at once; each keeps its last 1 MiB of output (and its first chunk). \
         Not for interactive programs: there is no stdin and no terminal."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {
                    "type": "string",
                    "enum": ["start", "poll", "stop"],
                    "description": "start a command, poll its output, or stop its process tree"
                },
                "command": {
                    "type": "string",
                    "minLength": 1,
                    "description": "start: the shell command, run as `/bin/sh -c command` in the workspace root"
                },
                "timeout_seconds": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "start: stop the tree and mark it timed_out after this many seconds"
                },
                "process_id": {
                    "type": "string",
                    "minLength": 1,
                    "description": "poll, stop: the process_id that start returned"
                },
                "cursor": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "poll: read from here (the previous next_cursor); default: the oldest retained output"
                },
                "wait_seconds": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 30,
                    "description": "poll: block up to this long for new output or exit (default 0)"
                }
            },
            "required": ["action"],
            "additionalProperties": false
        })
    }

    fn capability(&self) -> &'static str {
        PROCESS_TOOL
    }

    fn permission_requests(
        &self,
        args: &Value,
        _ctx: &ToolContext,
    ) -> Result<Vec<ToolPermission>, ToolError> {
        Ok(vec![match Action::parse(args)? {
            Action::Start {
                command,
                timeout_seconds,
            } => {
                let bound =
                    timeout_seconds.map_or_else(String::new, |s| format!(" for at most {s} s"));
                ToolPermission::new(
                    OperationClass::Process,
                    format!("start `{}` in the background{bound}", one_line(&command)),
                )
            }
            Action::Stop { process_id } => ToolPermission::new(
                OperationClass::Process,
                format!("stop the process tree of {process_id}"),
            ),
            Action::Poll { process_id, .. } => {
                ToolPermission::read(format!("read the output of {process_id}"))
            }
        }])
    }

    fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let limit = ctx.summary_limit();
        let window = limit.saturating_sub(SUMMARY_OVERHEAD).max(1);
        match Action::parse(&args)? {
            Action::Start {
                command,
                timeout_seconds,
            } => {
                let snapshot = self
                    .manager
                    .start(&command, timeout_seconds)
                    .map_err(tool_error)?;
                self.fitted(snapshot, None, "start", limit)
            }
            Action::Poll {
                process_id,
                cursor,
                wait_seconds,
            } => {
                let deadline = Instant::now() + Duration::from_secs(wait_seconds);
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let snapshot = self
                        .manager
                        .poll(&process_id, cursor, left.min(CANCEL_SLICE), window)
                        .map_err(tool_error)?;
                    if !snapshot.chunks.is_empty()
                        || snapshot.state.is_terminal()
                        || left <= CANCEL_SLICE
                    {
                        return self.fitted(snapshot, cursor, "poll", limit);
                    }
                    if ctx.cancel().is_cancelled() {
                        return Err(ToolError::Cancelled {
                            tool: PROCESS_TOOL.to_owned(),
                        });
                    }
                }
            }
            Action::Stop { process_id } => {
                let snapshot = self.manager.stop(&process_id).map_err(tool_error)?;
                self.fitted(snapshot, None, "stop", limit)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{Chunk, ProcessState};

    fn snapshot() -> Snapshot {
        Snapshot {
            process_id: "proc-ab-1".into(),
            command: "npm run dev".into(),
            state: ProcessState::Running,
            runtime_seconds: 1.31,
            first_cursor: 0,
            next_cursor: 3,
            available_cursor: 3,
            chunks: vec![
                Chunk {
                    cursor: 0,
                    stream: Stream::Stdout,
                    text: "a\nb\n".into(),
                },
                Chunk {
                    cursor: 1,
                    stream: Stream::Stdout,
                    text: "c".into(),
                },
                Chunk {
                    cursor: 2,
                    stream: Stream::Stderr,
                    text: "warn\n".into(),
                },
            ],
            exit_code: None,
            terminal_detail: None,
            truncated: false,
            output_pending: false,
            stale_cursor: None,
            dropped_bytes: 0,
        }
    }

    #[test]
    fn running_summary_groups_streams_in_order_and_says_how_to_continue() {
        assert_eq!(
            summary_lines(&snapshot(), "poll").join("\n"),
            "process proc-ab-1: running after 1.3 s — `npm run dev`\n\
             [stdout]\na\nb\nc\n(no newline at the end)\n[stderr]\nwarn\n\
             cursors: first 0, next 3, available 3\n\
             still running: poll with cursor 3 (wait_seconds up to 30 blocks until new \
             output), stop when done"
        );
    }

    #[test]
    fn finished_summary_reports_exit_truncation_and_stale_cursor() {
        let mut snap = snapshot();
        snap.state = ProcessState::TimedOut;
        snap.exit_code = None;
        snap.terminal_detail = Some("timed out after 5 s".into());
        snap.truncated = true;
        snap.dropped_bytes = 42;
        snap.stale_cursor = Some(1);
        snap.chunks.remove(0);
        snap.output_pending = true;
        snap.next_cursor = 2;
        let text = summary_lines(&snap, "poll").join("\n");
        assert!(text.contains("timed_out"), "{text}");
        assert!(text.contains("detail: timed out after 5 s"), "{text}");
        assert!(text.contains("42 bytes were dropped"), "{text}");
        assert!(
            text.contains(
                "cursor 1 was older than the retained output; reading resumed at cursor 1"
            ),
            "{text}"
        );
        assert!(
            text.ends_with("more output is retained: poll with cursor 2"),
            "{text}"
        );
    }

    #[test]
    fn per_action_fields_are_checked_by_name() {
        let parse = |v: Value| Action::parse(&v);
        assert_eq!(
            parse(json!({"action": "start", "command": "ls", "timeout_seconds": 5})).unwrap(),
            Action::Start {
                command: "ls".into(),
                timeout_seconds: Some(5)
            }
        );
        assert_eq!(
            parse(json!({"action": "poll", "process_id": "p"})).unwrap(),
            Action::Poll {
                process_id: "p".into(),
                cursor: None,
                wait_seconds: 0
            }
        );
        let field = |v: Value| match Action::parse(&v) {
            Err(ToolError::InvalidArguments { field, .. }) => field,
            other => panic!("expected an argument error, got {other:?}"),
        };
        assert_eq!(field(json!({"action": "start"})), "command");
        assert_eq!(field(json!({"action": "poll"})), "process_id");
        assert_eq!(
            field(json!({"action": "stop", "process_id": "p", "cursor": 1})),
            "cursor"
        );
        assert_eq!(
            field(json!({"action": "start", "command": "x", "wait_seconds": 1})),
            "wait_seconds"
        );
        assert_eq!(field(json!({"action": "list"})), "action");
    }

    #[test]
    fn manager_refusals_become_typed_tool_errors() {
        let unknown = tool_error(ProcessError::UnknownProcess {
            process_id: "proc-x".into(),
            retention_minutes: 30,
            max_records: 64,
        });
        assert_eq!(unknown.code(), "unknown_id");
        assert!(unknown.to_string().contains("`proc-x`"), "{unknown}");
        let limit = tool_error(ProcessError::LimitReached {
            limit: "max_live",
            limit_value: 16,
            what: "processes are running",
            advice: "stop one",
        });
        assert_eq!(limit.to_json()["limit"], "max_live");
        let invalid = tool_error(ProcessError::InvalidArgument {
            field: "cursor",
            reason: "past the end".into(),
        });
        assert_eq!(invalid.to_json()["field"], "cursor");
    }

    #[test]
    fn long_commands_are_shown_on_one_short_line() {
        assert_eq!(one_line("a\nb"), "a b");
        let long = "é".repeat(300);
        let shown = one_line(&long);
        assert!(shown.len() <= 204 && shown.ends_with('…'));
    }

    fn context(dir: &std::path::Path, mode: rho_policy::PermissionMode) -> ToolContext {
        use crate::permissions::{
            HostAuthorizer, HostEnvironment, ProcessHookRunner, SharedHostAuthorizer,
        };
        let env = HostEnvironment::from_vars([("PATH", "/usr/bin:/bin")]);
        let runner = ProcessHookRunner::new(rho_policy::HookSet::default(), dir, dir, env);
        let host = HostAuthorizer::new(mode, runner, None, None);
        ToolContext::new(
            dir.to_path_buf(),
            crate::paths::RhoHome::at(dir.join("home"), None),
            std::sync::Arc::new(crate::config::Config::empty(dir.join("home/config.toml"))),
            rho_policy::ModeSelection {
                mode,
                source: rho_policy::ModeSource::Flag,
            },
            std::sync::Arc::new(SharedHostAuthorizer::new(host)),
            std::sync::Arc::new(super::super::HeadlessHost),
        )
    }

    fn registry(dir: &std::path::Path) -> super::super::ToolRegistry {
        let manager = ProcessManager::new(crate::process::ProcessConfig::new(dir, &[])).unwrap();
        super::super::ToolRegistry::builder()
            .with(ProcessTool::new(manager))
            .build()
            .unwrap()
    }

    #[test]
    fn start_poll_stop_through_the_registry() {
        let dir = tempfile::tempdir().unwrap();
        let registry = registry(dir.path());
        let ctx = context(dir.path(), rho_policy::PermissionMode::Bypass);
        let started = registry
            .call(
                "process",
                json!({"action": "start", "command": "echo one; sleep 1; echo two; sleep 300"}),
                &ctx,
            )
            .unwrap();
        let id = started.structured["process_id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            started
                .summary
                .starts_with(&format!("process {id}: running")),
            "{}",
            started.summary
        );
        let next = started.structured["next_cursor"].as_u64().unwrap();
        let polled = registry
            .call(
                "process",
                json!({"action": "poll", "process_id": id, "cursor": next, "wait_seconds": 20}),
                &ctx,
            )
            .unwrap();
        assert!(
            polled.summary.contains("[stdout]\ntwo\n"),
            "{}",
            polled.summary
        );
        let stopped = registry
            .call("process", json!({"action": "stop", "process_id": id}), &ctx)
            .unwrap();
        assert_eq!(stopped.structured["state"], "terminated");
        assert!(
            stopped.summary.contains("stopped on request"),
            "{}",
            stopped.summary
        );
        match registry.call(
            "process",
            json!({"action": "poll", "process_id": id, "extra": 1}),
            &ctx,
        ) {
            Err(ToolError::InvalidArguments { field, .. }) => assert_eq!(field, "extra"),
            other => panic!("expected the unknown field refused, got {other:?}"),
        }
    }

    #[test]
    fn plan_mode_denies_start_and_stop_but_lets_poll_read() {
        let dir = tempfile::tempdir().unwrap();
        let registry = registry(dir.path());
        let ctx = context(dir.path(), rho_policy::PermissionMode::Plan);
        assert!(matches!(
            registry.call(
                "process",
                json!({"action": "start", "command": "touch made"}),
                &ctx
            ),
            Err(ToolError::Denied { .. })
        ));
        assert!(matches!(
            registry.call(
                "process",
                json!({"action": "stop", "process_id": "proc-x-1"}),
                &ctx
            ),
            Err(ToolError::Denied { .. })
        ));
        assert!(matches!(
            registry.call(
                "process",
                json!({"action": "poll", "process_id": "proc-x-1"}),
                &ctx
            ),
            Err(ToolError::UnknownId { .. })
        ));
        assert!(!dir.path().join("made").exists());
    }
}
