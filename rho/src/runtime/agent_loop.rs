//! The agent loop: a session sends the conversation to the model, runs the tool calls the
//! model makes through the tool host, sends the results back, and repeats until the model
//! answers without a tool call, the step budget is spent, the deadline passes, or the run is
//! cancelled.
//!
//! Invariant: every tool call goes through [`ToolHost::call`] — the registry and its one
//! permission path — and every call the model made gets exactly one result in the
//! conversation (a denial, a bad argument or a cancellation is a result too), so the
//! conversation is always valid to send again. A child run (delegation) is just another
//! [`Session`] with its own host, cancellation token and usage.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::provider::{
    Message, ModelClient, ModelRequest, ProviderError, StopReason, StreamEvent, ToolCall,
    ToolResult, ToolSpec, Usage,
};
use super::transcript::Transcript;
use crate::workflow::exec::{CANCEL_POLL, CancelToken};

/// What a finished tool call gives back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// The text the model reads.
    pub content: String,
    /// Whether the call failed, was denied, or had bad arguments.
    pub is_error: bool,
}

/// The loop's seam to the tool registry: the tools a session offers and the one way to call
/// them. The production host wraps the registry (`crate::tools`), whose call path applies
/// the permission policy, hooks and approvals before anything runs.
pub trait ToolHost: Send + Sync {
    /// The tools offered to the model.
    fn specs(&self) -> Vec<ToolSpec>;

    /// Runs one call to its end (blocking), honouring `cancel` cooperatively.
    fn call(&self, call: &ToolCall, cancel: &CancelToken) -> ToolOutcome;

    /// Messages tools delivered after their call returned (a background run finished), in
    /// arrival order; each is taken once. The loop hands them to the model before its next
    /// request.
    fn take_notices(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether calls of `name` may run at the same time as adjacent calls of tools for which
    /// this is also true (independent delegations in one step run together).
    fn runs_concurrently(&self, _name: &str) -> bool {
        false
    }
}

/// A host with no tools (`--no-tools`, or a definition granting none).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTools;

impl ToolHost for NoTools {
    fn specs(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    fn call(&self, call: &ToolCall, _cancel: &CancelToken) -> ToolOutcome {
        ToolOutcome {
            content: format!("unknown tool `{}`: this session offers no tools", call.name),
            is_error: true,
        }
    }
}

/// The limits of one session.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    /// Model requests allowed per user turn.
    pub max_steps: u32,
    /// The wall-clock budget of a turn.
    pub timeout: Option<Duration>,
    /// The output token cap per model request.
    pub max_tokens: u32,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max_steps: 100,
            timeout: None,
            max_tokens: 8192,
        }
    }
}

/// What the loop reports while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopEvent {
    /// A model request starts (`step` counts from 1 within the turn).
    StepStarted {
        /// The step.
        step: u32,
    },
    /// Assistant text arrived.
    TextDelta {
        /// The text.
        text: String,
        /// The provider attempt it belongs to.
        attempt: u32,
    },
    /// A provider retry voids the text streamed by the failed attempt.
    TextReset {
        /// The attempt that starts.
        attempt: u32,
        /// Why.
        reason: String,
    },
    /// Reasoning text arrived.
    ReasoningDelta {
        /// The text.
        text: String,
    },
    /// A tool call starts.
    ToolStarted {
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// The arguments as the model wrote them.
        arguments: String,
    },
    /// A tool call ended.
    ToolFinished {
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// Whether it failed or was denied.
        is_error: bool,
        /// Its result text.
        content: String,
    },
}

/// How a turn ended.
#[derive(Debug)]
pub enum TurnEnd {
    /// The model answered without a tool call.
    Completed {
        /// The final answer.
        text: String,
    },
    /// The step budget was spent while the model still called tools.
    MaxSteps {
        /// The budget.
        limit: u32,
    },
    /// The wall-clock budget ran out.
    TimedOut {
        /// The budget.
        limit: Duration,
    },
    /// Cancelled.
    Cancelled,
    /// The model provider failed.
    Provider(ProviderError),
    /// The transcript could not be written.
    Transcript(std::io::Error),
}

impl TurnEnd {
    /// A stable name for the reason (`completed`, `max_steps`, `timeout`, ...).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Completed { .. } => "completed",
            Self::MaxSteps { .. } => "max_steps",
            Self::TimedOut { .. } => "timeout",
            Self::Cancelled => "interrupted",
            Self::Provider(e) if e.is_authentication() => "authentication",
            Self::Provider(_) => "provider_error",
            Self::Transcript(_) => "output_error",
        }
    }

    /// A one-line description for people.
    pub fn describe(&self) -> String {
        match self {
            Self::Completed { .. } => "completed".to_owned(),
            Self::MaxSteps { limit } => format!("model-step budget of {limit} steps reached"),
            Self::TimedOut { limit } => {
                format!("wall-clock budget of {} reached", format_duration(*limit))
            }
            Self::Cancelled => "cancelled".to_owned(),
            Self::Provider(e) => e.to_string(),
            Self::Transcript(e) => format!("cannot write the session transcript: {e}"),
        }
    }
}

/// Formats a duration as `1m30s`, `45s` or `250ms`.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    match (h, m, s) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

/// One conversation with a model and a tool host.
pub struct Session {
    /// The session id.
    pub id: String,
    client: ModelClient,
    tools: Arc<dyn ToolHost>,
    specs: Vec<ToolSpec>,
    system: String,
    messages: Vec<Message>,
    limits: SessionLimits,
    usage: Usage,
    transcript: Transcript,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("model", &self.client.choice().label())
            .field("messages", &self.messages.len())
            .finish_non_exhaustive()
    }
}

/// The largest tool result text sent to the model; longer results are cut with a note.
pub const MAX_TOOL_RESULT_BYTES: usize = 64 * 1024;

impl Session {
    /// Starts a session; records `session.started` in the transcript.
    pub fn start(
        id: String,
        client: ModelClient,
        tools: Arc<dyn ToolHost>,
        system: String,
        limits: SessionLimits,
        mut transcript: Transcript,
        meta: serde_json::Value,
    ) -> std::io::Result<Self> {
        let specs = tools.specs();
        let mut fields = json!({
            "session_id": id,
            "model": client.choice().label(),
            "reasoning": client.choice().reasoning.map(crate::agents::Reasoning::as_str),
            "tools": specs.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
            "max_steps": limits.max_steps,
        });
        if let (Some(obj), serde_json::Value::Object(extra)) = (fields.as_object_mut(), meta) {
            obj.extend(extra);
        }
        transcript.append("session.started", fields)?;
        Ok(Self {
            id,
            client,
            tools,
            specs,
            system,
            messages: Vec::new(),
            limits,
            usage: Usage::default(),
            transcript,
        })
    }

    /// Usage so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The conversation so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The transcript file.
    pub fn transcript_path(&self) -> &std::path::Path {
        self.transcript.path()
    }

    /// Uses `client` for the next model requests (the interactive `/model`); the
    /// conversation and the tools stay.
    pub fn set_client(&mut self, client: ModelClient) {
        self.client = client;
    }

    /// Replaces the conversation (a resumed session).
    pub fn restore(&mut self, messages: Vec<Message>) {
        self.messages = messages;
    }

    /// Runs one user turn to its end.
    pub async fn run_turn(
        &mut self,
        prompt: &str,
        cancel: &CancelToken,
        observer: &mut (dyn FnMut(&LoopEvent) + Send),
    ) -> TurnEnd {
        let deadline = self.limits.timeout.map(|t| Instant::now() + t);
        self.messages.push(Message::User {
            text: prompt.to_owned(),
        });
        if let Err(e) = self.transcript.append("user", json!({"text": prompt})) {
            return TurnEnd::Transcript(e);
        }
        let end = self.steps(cancel, deadline, observer).await;
        let record = json!({
            "reason": end.reason(),
            "detail": end.describe(),
            "text": match &end { TurnEnd::Completed { text } => Some(text.clone()), _ => None },
            "usage": self.usage,
        });
        let written = self
            .transcript
            .append("turn.ended", record)
            .and_then(|()| self.transcript.sync());
        match written {
            Err(e) if matches!(end, TurnEnd::Completed { .. }) => TurnEnd::Transcript(e),
            _ => end,
        }
    }

    async fn steps(
        &mut self,
        cancel: &CancelToken,
        deadline: Option<Instant>,
        observer: &mut (dyn FnMut(&LoopEvent) + Send),
    ) -> TurnEnd {
        let timeout = self.limits.timeout.unwrap_or_default();
        for step in 1..=self.limits.max_steps {
            if cancel.is_cancelled() {
                return TurnEnd::Cancelled;
            }
            observer(&LoopEvent::StepStarted { step });
            if let Err(e) = self.deliver_notices() {
                return TurnEnd::Transcript(e);
            }
            let mut attempt = 1;
            let request = ModelRequest {
                system: &self.system,
                messages: &self.messages,
                tools: &self.specs,
                max_tokens: self.limits.max_tokens,
            };
            let mut sink = |event: StreamEvent| match event {
                StreamEvent::TextDelta(text) => observer(&LoopEvent::TextDelta { text, attempt }),
                StreamEvent::ReasoningDelta(text) => observer(&LoopEvent::ReasoningDelta { text }),
                StreamEvent::ToolCallStarted { .. } => {}
                StreamEvent::Retrying {
                    attempt: next,
                    reason,
                    ..
                } => {
                    attempt = next;
                    observer(&LoopEvent::TextReset {
                        attempt: next,
                        reason,
                    });
                }
            };
            let outcome = tokio::select! {
                r = self.client.complete(request, &mut sink) => Some(r),
                () = wait_cancelled(cancel) => None,
                () = wait_until(deadline) => {
                    return TurnEnd::TimedOut { limit: timeout };
                }
            };
            let Some(outcome) = outcome else {
                return TurnEnd::Cancelled;
            };
            let turn = match outcome {
                Ok(turn) => turn,
                Err(e) => return TurnEnd::Provider(e),
            };
            self.usage.add(turn.usage);
            let record = json!({
                "step": step,
                "text": turn.text,
                "reasoning": if turn.reasoning_text.is_empty() { None } else { Some(&turn.reasoning_text) },
                "tool_calls": turn.tool_calls,
                "stop": turn.stop,
                "usage": turn.usage,
            });
            if let Err(e) = self.transcript.append("assistant", record) {
                return TurnEnd::Transcript(e);
            }
            self.messages.push(Message::Assistant {
                thinking: turn.thinking.clone(),
                text: turn.text.clone(),
                tool_calls: turn.tool_calls.clone(),
            });
            if turn.tool_calls.is_empty() {
                if turn.stop == StopReason::MaxTokens && turn.text.is_empty() {
                    return TurnEnd::Provider(ProviderError::MalformedStream {
                        provider: self.client.choice().endpoint.provider.clone(),
                        detail: "the answer was cut by the output token cap before any text"
                            .to_owned(),
                        attempts: 1,
                    });
                }
                return TurnEnd::Completed { text: turn.text };
            }
            let mut results = Vec::with_capacity(turn.tool_calls.len());
            let mut interrupted: Option<TurnEnd> = None;
            let calls = &turn.tool_calls;
            let mut next = 0;
            while next < calls.len() {
                // A run of consecutive calls the host runs concurrently (delegations) forms
                // one batch; every other call is a batch of its own, run in order.
                let mut batch_end = next + 1;
                if self.tools.runs_concurrently(&calls[next].name) {
                    while batch_end < calls.len()
                        && self.tools.runs_concurrently(&calls[batch_end].name)
                    {
                        batch_end += 1;
                    }
                }
                let batch = &calls[next..batch_end];
                next = batch_end;
                if interrupted.is_none() {
                    if cancel.is_cancelled() {
                        interrupted = Some(TurnEnd::Cancelled);
                    } else if deadline.is_some_and(|d| Instant::now() >= d) {
                        interrupted = Some(TurnEnd::TimedOut { limit: timeout });
                    }
                }
                let outcomes: Vec<ToolOutcome> = if let Some(end) = &interrupted {
                    batch
                        .iter()
                        .map(|_| ToolOutcome {
                            content: format!("not run: the turn ended ({})", end.reason()),
                            is_error: true,
                        })
                        .collect()
                } else {
                    for call in batch {
                        observer(&LoopEvent::ToolStarted {
                            id: call.id.clone(),
                            name: call.name.clone(),
                            arguments: call.arguments.clone(),
                        });
                    }
                    let finished = futures_util::future::join_all(
                        batch
                            .iter()
                            .map(|call| self.call_tool(call, cancel, deadline, timeout)),
                    )
                    .await;
                    let mut outcomes = Vec::with_capacity(batch.len());
                    for (call, (outcome, end)) in batch.iter().zip(finished) {
                        if interrupted.is_none() && end.is_some() {
                            interrupted = end;
                        }
                        observer(&LoopEvent::ToolFinished {
                            id: call.id.clone(),
                            name: call.name.clone(),
                            is_error: outcome.is_error,
                            content: outcome.content.clone(),
                        });
                        outcomes.push(outcome);
                    }
                    outcomes
                };
                for (call, outcome) in batch.iter().zip(outcomes) {
                    let content = bound_result(outcome.content);
                    if let Err(e) = self.transcript.append(
                        "tool.result",
                        json!({"call_id": call.id, "name": call.name,
                               "is_error": outcome.is_error, "content": content}),
                    ) {
                        return TurnEnd::Transcript(e);
                    }
                    results.push(ToolResult {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        content,
                        is_error: outcome.is_error,
                    });
                }
            }
            self.messages.push(Message::ToolResults { results });
            if let Some(end) = interrupted {
                return end;
            }
        }
        TurnEnd::MaxSteps {
            limit: self.limits.max_steps,
        }
    }

    /// Hands the tool host's pending notices to the model as one user message, recorded in
    /// the transcript.
    fn deliver_notices(&mut self) -> std::io::Result<()> {
        let notices = self.tools.take_notices();
        if notices.is_empty() {
            return Ok(());
        }
        let text = notices.join("\n\n");
        self.transcript
            .append("notice", json!({"text": text, "count": notices.len()}))?;
        self.messages.push(Message::User { text });
        Ok(())
    }

    /// Runs one tool call on a blocking thread. On cancellation or timeout the call's token
    /// is cancelled (tools poll it and stop their children) and the call is awaited a short
    /// grace period so its processes are gone before the turn ends.
    async fn call_tool(
        &self,
        call: &ToolCall,
        cancel: &CancelToken,
        deadline: Option<Instant>,
        timeout: Duration,
    ) -> (ToolOutcome, Option<TurnEnd>) {
        let token = CancelToken::new();
        let host = Arc::clone(&self.tools);
        let owned = call.clone();
        let call_token = token.clone();
        let mut handle = tokio::task::spawn_blocking(move || host.call(&owned, &call_token));
        let end = tokio::select! {
            joined = &mut handle => {
                return (joined_outcome(joined, &call.name), None);
            }
            () = wait_cancelled(cancel) => TurnEnd::Cancelled,
            () = wait_until(deadline) => TurnEnd::TimedOut { limit: timeout },
        };
        token.cancel();
        let outcome = if let Ok(joined) = tokio::time::timeout(TOOL_STOP_GRACE, &mut handle).await {
            let mut outcome = joined_outcome(joined, &call.name);
            outcome.is_error = true;
            outcome.content = format!(
                "stopped: the turn ended ({})\n{}",
                end.reason(),
                outcome.content
            );
            outcome
        } else {
            tracing::warn!(tool = %call.name, "a tool did not stop within the grace period");
            ToolOutcome {
                content: format!("stopped: the turn ended ({})", end.reason()),
                is_error: true,
            }
        };
        (outcome, Some(end))
    }
}

/// How long a cancelled tool gets to stop before the turn ends without it.
const TOOL_STOP_GRACE: Duration = Duration::from_secs(10);

fn joined_outcome(joined: Result<ToolOutcome, tokio::task::JoinError>, name: &str) -> ToolOutcome {
    joined.unwrap_or_else(|e| ToolOutcome {
        content: format!("tool `{name}` failed internally: {e}"),
        is_error: true,
    })
}

fn bound_result(mut content: String) -> String {
    if content.len() <= MAX_TOOL_RESULT_BYTES {
        return content;
    }
    let mut cut = MAX_TOOL_RESULT_BYTES;
    while !content.is_char_boundary(cut) {
        cut -= 1;
    }
    let total = content.len();
    content.truncate(cut);
    let _ = write!(
        content,
        "\n[result cut: {total} bytes, the first {cut} shown]"
    );
    content
}

/// Resolves when `token` is cancelled.
pub async fn wait_cancelled(token: &CancelToken) {
    while !token.is_cancelled() {
        tokio::time::sleep(CANCEL_POLL).await;
    }
}

async fn wait_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_format_compactly() {
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_mins(20)), "20m");
        assert_eq!(format_duration(Duration::from_secs(3700)), "1h1m");
    }

    #[test]
    fn long_results_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_TOOL_RESULT_BYTES);
        let cut = bound_result(long);
        assert!(cut.len() < MAX_TOOL_RESULT_BYTES + 100);
        assert!(cut.contains("[result cut:"));
    }
}
