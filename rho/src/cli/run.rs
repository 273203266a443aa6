//! `rho run [OPTIONS] [PROMPT]...`: one prompt to an agent, its answer, and an exit status
//! scripts can branch on (the Rho 1.47 automation contract).
//!
//! Output: `--output text` prints the final answer and a newline on stdout, nothing else;
//! `--output jsonl` prints one versioned event per line (`run.started`,
//! `assistant.text_delta`, `assistant.text_reset`, `tool.started`, `tool.finished`, and one
//! of `run.completed` / `run.failed` / `run.stopped`). `--output-file PATH` keeps the
//! delegated runs' status document (`result.json`'s contract) up to date; with text output,
//! stdout then streams progress and ends with `[subagent run complete]`.
//!
//! Exit codes: 0 completed; 1 authentication, provider, tool-host or output failure;
//! 2 invalid invocation or configuration; 124 timeout or step budget; 130 SIGINT;
//! 143 SIGTERM.
//!
//! Invariant: stdout carries only what the chosen output contract allows; errors and
//! diagnostics go to stderr, and credential problems are reported without detail.

use std::io::{IsTerminal as _, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use super::exit::{CliError, CliResult, ExitCode};
use super::session_args::{RootPlace, SessionArgs};
use crate::agents::{Catalog, CatalogSources};
use crate::paths::{self, RhoHome};
use crate::runtime::agent_loop::{LoopEvent, Session, SessionLimits, TurnEnd};
use crate::runtime::delegation::status::{RunRuntime, RunState, RunStatus};
use crate::runtime::launch;
use crate::runtime::transcript::Transcript;
use crate::workflow::exec::CancelToken;

/// The default model-step budget of `rho run`.
pub const DEFAULT_MAX_STEPS: u32 = 100;

/// How `rho run` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// The final answer only.
    Text,
    /// A JSON Lines event stream.
    Jsonl,
}

/// Send one prompt to an agent and print its answer.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Prompt text to send to the agent.
    #[arg(value_name = "PROMPT")]
    prompt: Vec<String>,
    /// Read additional prompt text from stdin. Required when stdin is a pipe or a
    /// redirected file; without it, those redirects are rejected so prompt text is not
    /// dropped.
    #[arg(long)]
    stdin: bool,
    /// Write a structured status/result file (JSON). With text output, stream progress and
    /// assistant text to stdout and end with a completion marker.
    #[arg(long, value_name = "PATH")]
    output_file: Option<PathBuf>,
    /// Plain final-answer output or a JSON Lines event stream.
    #[arg(long, value_enum, default_value = "text")]
    output: OutputFormat,
    /// Override the model-step budget for this run.
    #[arg(long, value_name = "N")]
    max_steps: Option<u32>,
    /// Cancel the run after this wall-clock duration (`90s`, `20m`, `1h`, `500ms`).
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
}

/// Parses `90`, `90s`, `20m`, `1h`, `500ms` (and combinations such as `1m30s`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("--timeout `{text}`: expected a duration such as 90s, 20m, 1h or 500ms");
    let text = text.trim();
    if text.is_empty() {
        return Err(bad());
    }
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(value),
            "s" => Duration::from_secs(value),
            "m" => Duration::from_secs(value.saturating_mul(60)),
            "h" => Duration::from_secs(value.saturating_mul(3600)),
            _ => return Err(bad()),
        };
        total = total.saturating_add(part);
    }
    if total.is_zero() {
        return Err(format!("--timeout `{text}` must be longer than zero"));
    }
    Ok(total)
}

/// Whether stdin is a pipe or a regular file (text a user meant to send).
fn stdin_is_redirected() -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return false;
    }
    let Ok(meta) = std::fs::metadata("/proc/self/fd/0") else {
        return false;
    };
    let kind = meta.file_type();
    kind.is_fifo() || kind.is_socket() || (kind.is_file() && meta.len() > 0)
}

fn assemble_prompt(args: &RunArgs) -> Result<String, CliError> {
    let mut prompt = args.prompt.join(" ");
    if args.stdin {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(|e| {
            CliError::invalid(format!("--stdin: cannot read stdin as UTF-8 text: {e}"))
        })?;
        if !text.trim().is_empty() {
            if !prompt.is_empty() {
                prompt.push_str("\n\n");
            }
            prompt.push_str(text.trim_end());
        }
    } else if stdin_is_redirected() {
        return Err(CliError::invalid(
            "stdin is a pipe or a redirected file: pass --stdin to send it as prompt text \
             (it is not read otherwise, so nothing is dropped silently)",
        ));
    }
    if prompt.trim().is_empty() {
        return Err(CliError::invalid(
            "no prompt: give prompt text as arguments or with --stdin",
        ));
    }
    Ok(prompt)
}

/// Writes run output; a failed write cancels the run (a closed pipe ends it).
struct Reporter {
    format: OutputFormat,
    live_text: bool,
    seq: u64,
    run_id: String,
    failed: Option<std::io::Error>,
    cancel: CancelToken,
    /// Model requests made so far (the status file's `turns`).
    steps: u32,
}

impl Reporter {
    fn write(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        let mut out = std::io::stdout().lock();
        if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
            self.failed = Some(e);
            self.cancel.cancel();
        }
    }

    fn event(&mut self, kind: &str, fields: Value) {
        if self.format != OutputFormat::Jsonl {
            return;
        }
        self.seq += 1;
        let mut event = json!({"schema_version": 1, "seq": self.seq, "type": kind,
                               "run_id": self.run_id});
        if let (Some(obj), Value::Object(extra)) = (event.as_object_mut(), fields) {
            obj.extend(extra);
        }
        let mut line = event.to_string();
        line.push('\n');
        self.write(line.as_bytes());
    }

    fn on_loop(&mut self, event: &LoopEvent) {
        match event {
            LoopEvent::TextDelta { text, attempt } => {
                self.event(
                    "assistant.text_delta",
                    json!({"text": text, "attempt": attempt}),
                );
                if self.live_text {
                    self.write(text.as_bytes());
                }
            }
            LoopEvent::TextReset { attempt, reason } => {
                self.event(
                    "assistant.text_reset",
                    json!({"attempt": attempt, "reason": reason}),
                );
                if self.live_text {
                    self.write(format!("\n[retrying: {reason}]\n").as_bytes());
                }
            }
            LoopEvent::ToolStarted { id, name, .. } => {
                self.event("tool.started", json!({"call_id": id, "name": name}));
                if self.live_text {
                    self.write(format!("\n[tool] {name}\n").as_bytes());
                }
            }
            LoopEvent::ToolFinished {
                id, name, is_error, ..
            } => {
                self.event(
                    "tool.finished",
                    json!({"call_id": id, "name": name, "ok": !is_error}),
                );
                if self.live_text && *is_error {
                    self.write(format!("[tool] {name} failed\n").as_bytes());
                }
            }
            LoopEvent::StepStarted { .. } => self.steps += 1,
            LoopEvent::ReasoningDelta { .. } => {}
        }
    }
}

/// The `--output-file` status document: the delegated runs' `result.json` contract
/// ([`RunStatus`]: `state`, `agent_id`, `agent_fingerprint`, tokens, `result`, `error`, ...)
/// with our additions beside it (`session_id`, `transcript`, `reason`), rewritten atomically
/// on every change.
struct StatusFile {
    path: PathBuf,
    status: RunStatus,
    extra: serde_json::Map<String, Value>,
}

impl StatusFile {
    fn write(&self) -> Result<(), CliError> {
        let mut doc = serde_json::to_value(&self.status)
            .map_err(|e| CliError::operational(format!("cannot encode the status file: {e}")))?;
        if let Value::Object(map) = &mut doc {
            for (key, value) in &self.extra {
                map.insert(key.clone(), value.clone());
            }
        }
        let text = serde_json::to_vec_pretty(&doc)
            .map_err(|e| CliError::operational(format!("cannot encode the status file: {e}")))?;
        let tmp = self.path.with_extension("json.tmp");
        let written = std::fs::write(&tmp, &text).and_then(|()| std::fs::rename(&tmp, &self.path));
        written.map_err(|e| {
            CliError::operational(format!(
                "--output-file: cannot write {}: {e}",
                self.path.display()
            ))
        })
    }
}

/// Which signal stopped the run, if any (0: none, else the signal number).
static STOP_SIGNAL: AtomicU8 = AtomicU8::new(0);

/// Runs `rho run`.
pub fn run_run(args: &RunArgs, session_args: &SessionArgs) -> CliResult {
    let prompt = assemble_prompt(args)?;
    if args.max_steps == Some(0) {
        return Err(CliError::invalid("--max-steps must be at least 1"));
    }
    let timeout = args
        .timeout
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(CliError::invalid)?;
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let workspace = paths::current_workspace().map_err(|e| CliError::operational(e.to_string()))?;
    let config = super::root::options()
        .load_config(&home)
        .map_err(|e| CliError::invalid(e.to_string()))?;
    let overrides = session_args.overrides()?;
    let mode_selection = session_args.mode_selection(&config)?;
    let permission_mode = mode_selection.mode;
    let trusted = super::agents::project_agents_trusted(&home, &workspace)?;
    let catalog = Catalog::discover(&CatalogSources::new(
        &home,
        Some(workspace.clone()),
        trusted,
    ))
    .map_err(|e| CliError::invalid(crate::workflow::plan::error_chain(&e)))?;
    let agent_id = session_args
        .agent
        .clone()
        .unwrap_or_else(|| launch::DEFAULT_AGENT.to_owned());
    let place = RootPlace {
        home: &home,
        config: &config,
        workspace: &workspace,
        catalog: &catalog,
    };
    let prepared = session_args
        .prepare_root(&place, &agent_id, &overrides, permission_mode)
        .map_err(|e| {
            if e.is_authentication() {
                CliError::operational(e.to_string())
            } else {
                CliError::invalid(crate::workflow::plan::error_chain(&e))
            }
        })?;

    let cancel = CancelToken::new();
    let (session_id, session_dir) = launch::new_session_dir(&home, &workspace);
    let tools = session_args.root_tools(
        &place,
        &prepared,
        mode_selection,
        &overrides,
        &session_id,
        None,
    )?;
    let transcript = Transcript::create(&session_dir).map_err(|e| {
        CliError::operational(format!(
            "cannot create the session transcript in {}: {e}",
            session_dir.display()
        ))
    })?;
    let limits = SessionLimits {
        max_steps: args.max_steps.unwrap_or(DEFAULT_MAX_STEPS),
        timeout,
        ..SessionLimits::default()
    };
    let model_label = prepared.client.choice().label();
    let choice_provider = prepared.client.choice().endpoint.provider.clone();
    let choice_model = prepared.client.choice().model.clone();
    let meta = json!({
        "invocation": "run",
        "agent_id": prepared.bound.id,
        "agent_fingerprint": prepared.bound.fingerprint,
        "workspace": workspace,
        "permission_mode": permission_mode.to_string(),
    });
    let mut session = Session::start(
        session_id.clone(),
        prepared.client,
        tools,
        prepared.system_prompt,
        limits,
        transcript,
        meta,
    )
    .map_err(|e| CliError::operational(format!("cannot write the session transcript: {e}")))?;

    let mut status = args.output_file.as_ref().map(|path| {
        let mut status = RunStatus::starting(
            &prepared.bound.id,
            Some(&prepared.bound.fingerprint),
            RunRuntime::Rho,
        );
        status.provider = Some(choice_provider.clone());
        status.model = Some(choice_model.clone());
        status.transition(RunState::Running);
        let mut extra = serde_json::Map::new();
        extra.insert("session_id".into(), json!(session_id));
        extra.insert(
            "transcript".into(),
            json!(session.transcript_path().to_string_lossy()),
        );
        StatusFile {
            path: path.clone(),
            status,
            extra,
        }
    });
    if let Some(status) = &status {
        status.write()?;
    }

    let mut reporter = Reporter {
        format: args.output,
        live_text: args.output == OutputFormat::Text && args.output_file.is_some(),
        seq: 0,
        run_id: session_id.clone(),
        failed: None,
        cancel: cancel.clone(),
        steps: 0,
    };
    reporter.event(
        "run.started",
        json!({"session_id": session_id, "workspace": workspace, "agent": agent_id,
               "model": model_label}),
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::operational(format!("cannot start the async runtime: {e}")))?;
    let end = runtime.block_on(async {
        let signals = tokio::spawn(watch_signals(cancel.clone()));
        let end = session
            .run_turn(&prompt, &cancel, &mut |e| reporter.on_loop(e))
            .await;
        signals.abort();
        end
    });
    drop(runtime);

    finish(
        &end,
        &mut reporter,
        status.as_mut(),
        session.usage(),
        session.transcript_path(),
    )
}

async fn watch_signals(cancel: CancelToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        tracing::warn!("cannot install signal handlers; SIGINT/SIGTERM end rho immediately");
        return;
    };
    tokio::select! {
        _ = int.recv() => STOP_SIGNAL.store(2, Ordering::SeqCst),
        _ = term.recv() => STOP_SIGNAL.store(15, Ordering::SeqCst),
    }
    cancel.cancel();
}

fn finish(
    end: &TurnEnd,
    reporter: &mut Reporter,
    status: Option<&mut StatusFile>,
    usage: crate::runtime::provider::Usage,
    transcript: &Path,
) -> CliResult {
    let output_failed = reporter.failed.take();
    let signal = STOP_SIGNAL.load(Ordering::SeqCst);
    let (code, reason, state) = match (end, &output_failed) {
        (_, Some(_)) => (ExitCode::Operational, "output_error", "failed"),
        (TurnEnd::Completed { .. }, None) => (ExitCode::Success, "completed", "completed"),
        (TurnEnd::MaxSteps { .. }, None) => (ExitCode::Timeout, "max_steps", "stopped"),
        (TurnEnd::TimedOut { .. }, None) => (ExitCode::Timeout, "timeout", "stopped"),
        (TurnEnd::Cancelled, None) if signal == 15 => {
            (ExitCode::Terminated, "interrupted", "stopped")
        }
        (TurnEnd::Cancelled, None) => (ExitCode::Interrupted, "interrupted", "stopped"),
        (TurnEnd::Provider(_) | TurnEnd::Transcript(_), None) => {
            (ExitCode::Operational, end.reason(), "failed")
        }
    };
    let message = match &output_failed {
        Some(e) => format!("cannot write output: {e}"),
        None => end.describe(),
    };
    let text = match end {
        TurnEnd::Completed { text } => Some(text.clone()),
        _ => None,
    };
    if let Some(file) = status {
        let status = &mut file.status;
        status.turns = u64::from(reporter.steps);
        status.input_tokens = Some(usage.input_tokens);
        status.output_tokens = Some(usage.output_tokens);
        status.cache_read_input_tokens = Some(usage.cache_read_tokens);
        status.cache_creation_input_tokens = Some(usage.cache_write_tokens);
        status.result.clone_from(&text);
        status.last_text.clone_from(&text);
        if state != "completed" {
            status.error = Some(message.clone());
        }
        status.transition(match state {
            "completed" => RunState::Ok,
            "stopped" => RunState::Stopped,
            _ => RunState::Error,
        });
        file.extra.insert("reason".into(), json!(reason));
        file.write()?;
    }
    match state {
        "completed" => reporter.event(
            "run.completed",
            json!({"reason": reason, "text": text, "usage": usage}),
        ),
        "stopped" => reporter.event(
            "run.stopped",
            json!({"reason": reason, "message": message, "usage": usage}),
        ),
        _ => reporter.event(
            "run.failed",
            json!({"reason": reason, "message": message, "usage": usage}),
        ),
    }
    if code == ExitCode::Success && reporter.format == OutputFormat::Text {
        let out = if reporter.live_text {
            "\n[subagent run complete]\n".to_owned()
        } else {
            format!("{}\n", text.unwrap_or_default())
        };
        reporter.write(out.as_bytes());
        if let Some(e) = reporter.failed.take() {
            return Err(CliError::operational(format!("cannot write output: {e}")));
        }
    }
    tracing::debug!(transcript = %transcript.display(), reason, "run ended");
    if code == ExitCode::Success {
        Ok(code)
    } else {
        Err(CliError::with_code(code, format!("run {state}: {message}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_rho_spellings() {
        assert_eq!(parse_duration("20m").unwrap(), Duration::from_mins(20));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_hours(1));
        for bad in ["", "m", "10x", "0s", "-1s", "1.5s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
