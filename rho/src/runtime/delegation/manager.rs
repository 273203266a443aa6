//! The delegation manager of one parent session: starts child agents (foreground or
//! background) on the rho runtime or the `claude` CLI, tracks their handles, answers the
//! `agents` tool, delivers completions of background runs into the parent session, and
//! stops every child when the parent ends.
//!
//! Invariants:
//! - A child is bound as a delegated invocation before anything runs, so it never receives
//!   `agent`/`agents`, and it keeps the permission mode the parent had when it was launched.
//!   A rho child has no one to ask: in `supervised`, its writes and processes fail closed.
//! - Every child runs in its own run directory (`result.json`, `events.jsonl`, `log.txt`, the
//!   global index), so `rho attach` can follow it from any process; its status reaches a
//!   terminal state exactly once.
//! - A child holds a pool permit (global, and Claude's for claude-cli) for as long as it runs.
//! - A background completion is delivered into the parent at most once: either through the
//!   parent's notices or by an `agents` call that reported the finished run first.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rho_policy::ModeSelection;
use serde_json::json;

use super::pool::{AgentPools, PoolKind, process_pools};
use super::rundir::{AttachEventKind, RunDirectory};
use super::status::{RunRuntime, RunState, RunStatus};
use crate::agents::Catalog;
use crate::agents::binder::{self, BindRequest, BoundRuntime, ClaudeLaunch, Invocation};
use crate::config::Config;
use crate::paths::RhoHome;
use crate::runtime::agent_loop::{LoopEvent, Session, SessionLimits, TurnEnd};
use crate::runtime::claude_cli::{self, ClaudeRunRequest};
use crate::runtime::host::{HostRequest, Inbox, host_capabilities, tool_host};
use crate::runtime::launch::{self, LaunchRequest, PreparedAgent};
use crate::runtime::provider::select::ModelOverrides;
use crate::runtime::transcript::Transcript;
use crate::tools::{CancelToken, ToolHost as Front, ToolNotice};

/// The longest parent message, in bytes after trimming.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024;
/// How long shutdown and `stop` wait for a cancelled child to finish.
const STOP_WAIT: Duration = Duration::from_secs(10);
/// How much of a final result a completion text quotes.
const RESULT_EXCERPT_BYTES: usize = 16 * 1024;
/// How much of a tool call's input an attach event shows.
const EVENT_SUMMARY_BYTES: usize = 200;

/// Why a delegation request was refused. Nothing was started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DelegateError {
    /// No agent has this id.
    #[error("unknown agent `{agent}`; available: {available}")]
    UnknownAgent {
        /// The id asked for.
        agent: String,
        /// The catalog's ids.
        available: String,
    },
    /// The agent cannot be bound for delegation (tools, model, permission mode).
    #[error("agent `{agent}` cannot be delegated to: {reason}")]
    Bind {
        /// The agent.
        agent: String,
        /// Why, with its causes.
        reason: String,
    },
    /// Background runs are only available where a later turn can receive the completion.
    #[error("background agents are unavailable in non-interactive runs; omit `background`")]
    BackgroundUnavailable,
    /// The run directory or the pools could not be set up.
    #[error(transparent)]
    Delegation(#[from] super::DelegationError),
    /// No run has this id in this session.
    #[error("unknown delegated run `{id}` in this session; `agents` with action `list` shows them")]
    UnknownRun {
        /// The id asked for.
        id: String,
    },
    /// A parent message is empty or too long.
    #[error("invalid message: {reason}")]
    BadMessage {
        /// Why.
        reason: String,
    },
    /// The child cannot take a message now.
    #[error("cannot message run `{id}`: {reason}")]
    NotMessageable {
        /// The run.
        id: String,
        /// Why.
        reason: String,
    },
}

/// What a parent session's children are started with.
#[derive(Debug, Clone)]
pub struct DelegationSetup {
    /// The data directory.
    pub home: RhoHome,
    /// The configuration.
    pub config: Arc<Config>,
    /// The canonical workspace children work in.
    pub workspace: PathBuf,
    /// The agent catalog of the parent session.
    pub catalog: Arc<Catalog>,
    /// The parent's model flags (children with `model-policy: inherit` use the parent's model).
    pub overrides: ModelOverrides,
    /// The parent's permission mode, which children keep.
    pub permission_mode: ModeSelection,
    /// The parent session's id, recorded in each child's status.
    pub parent_session_id: Option<String>,
    /// Whether background runs are allowed (a later turn exists to receive completions).
    pub background: bool,
}

/// The delegation manager of one parent session. Clones share the handles.
#[derive(Debug, Clone)]
pub struct DelegationManager {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    setup: DelegationSetup,
    pools: AgentPools,
    runs: Mutex<BTreeMap<String, Arc<Handle>>>,
    /// Start order, for `list`.
    order: Mutex<Vec<String>>,
}

/// One child run, as the parent tracks it.
struct Handle {
    id: String,
    agent_id: String,
    background: bool,
    started: Instant,
    cancel: CancelToken,
    state: Mutex<HandleState>,
    changed: Condvar,
    /// The rho child's inbox, once its session exists (parent messages go there).
    inbox: Mutex<Option<Inbox>>,
    /// Where completions of background runs go.
    front: Option<Arc<dyn Front>>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("id", &self.id)
            .field("agent_id", &self.agent_id)
            .field("background", &self.background)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct HandleState {
    status: RunStatus,
    done: bool,
    /// The final outcome has reached the parent (a foreground answer, a notice, or an
    /// `agents` call on the finished run).
    delivered: bool,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A started child.
#[derive(Debug, Clone)]
pub struct Started {
    /// The six-character run id.
    pub id: String,
    /// The agent it runs.
    pub agent_id: String,
}

/// How the child runs, once bound.
enum Child {
    Rho(Box<PreparedAgent>),
    Claude(Box<ClaudeLaunch>),
}

impl DelegationManager {
    /// A manager for one parent session; pools are this process's.
    pub fn new(setup: DelegationSetup) -> Result<Self, DelegateError> {
        let pools = process_pools()?;
        Ok(DelegationManager {
            inner: Arc::new(Inner {
                setup,
                pools,
                runs: Mutex::new(BTreeMap::new()),
                order: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Whether background runs may be started.
    pub fn background_allowed(&self) -> bool {
        self.inner.setup.background
    }

    /// The agents a parent may delegate to: `(id, description)` in catalog order.
    pub fn agents(&self) -> Vec<(String, String)> {
        self.inner
            .setup
            .catalog
            .entries()
            .map(|e| (e.id().to_owned(), e.definition.description.clone()))
            .collect()
    }

    /// Binds `agent_id` for delegation, reserves its run directory and starts it on its own
    /// thread. `front` receives the completion notice of a background run.
    pub fn spawn(
        &self,
        agent_id: &str,
        prompt: &str,
        background: bool,
        front: Option<Arc<dyn Front>>,
    ) -> Result<Started, DelegateError> {
        let setup = &self.inner.setup;
        if background && !setup.background {
            return Err(DelegateError::BackgroundUnavailable);
        }
        let child = self.bind(agent_id)?;
        let (runtime, fingerprint) = match &child {
            Child::Rho(prepared) => (RunRuntime::Rho, prepared.bound.fingerprint.clone()),
            Child::Claude(_) => (
                RunRuntime::ClaudeCli,
                setup
                    .catalog
                    .get(agent_id)
                    .map(|e| e.fingerprint.clone())
                    .unwrap_or_default(),
            ),
        };
        let mut status = RunStatus::starting(agent_id, Some(&fingerprint), runtime);
        status
            .parent_session_id
            .clone_from(&setup.parent_session_id);
        if let Child::Rho(prepared) = &child {
            let choice = prepared.client.choice();
            status.provider = Some(choice.endpoint.provider.clone());
            status.model = Some(choice.model.clone());
        }
        if let Child::Claude(launch) = &child {
            status.model.clone_from(&launch.model);
        }
        let run = RunDirectory::create(&setup.home, None, &status)?;
        let id = run.id().to_owned();
        let handle = Arc::new(Handle {
            id: id.clone(),
            agent_id: agent_id.to_owned(),
            background,
            started: Instant::now(),
            cancel: CancelToken::new(),
            state: Mutex::new(HandleState {
                status: status.clone(),
                ..HandleState::default()
            }),
            changed: Condvar::new(),
            inbox: Mutex::new(None),
            front: if background { front } else { None },
        });
        lock(&self.inner.runs).insert(id.clone(), Arc::clone(&handle));
        lock(&self.inner.order).push(id.clone());
        let inner = Arc::clone(&self.inner);
        let worker = Arc::clone(&handle);
        let prompt = prompt.to_owned();
        let thread = std::thread::Builder::new()
            .name(format!("rho-agent-{id}"))
            .spawn(move || {
                let (final_status, recorded) = match child {
                    Child::Rho(prepared) => (
                        run_rho(&inner, &worker, &run, status, *prepared, &prompt),
                        false,
                    ),
                    Child::Claude(launch) => {
                        run_claude(&inner, &worker, &run, status, &launch, &prompt)
                    }
                };
                // The parent learns the outcome first, then the run directory shows it: an
                // observer who sees the terminal status knows the parent has it queued.
                finish(&worker, final_status.clone());
                if !recorded {
                    record(&run, &final_status, final_status.error.clone());
                }
            });
        match thread {
            Ok(thread) => lock(&handle.state).thread = Some(thread),
            Err(e) => {
                tracing::error!(%id, error = %e, "cannot start a delegated run's thread");
                finish(&handle, {
                    let mut status = lock(&handle.state).status.clone();
                    status.error = Some(format!("cannot start the run's thread: {e}"));
                    status.transition(RunState::Error);
                    status
                });
            }
        }
        Ok(Started {
            id,
            agent_id: agent_id.to_owned(),
        })
    }

    /// Waits for a foreground run to end and returns its completion text and whether it
    /// succeeded. When `cancel` fires first (the parent's turn ended), the child is stopped.
    pub fn wait(&self, id: &str, cancel: &CancelToken) -> Result<(String, bool), DelegateError> {
        let handle = self.handle(id)?;
        let mut state = lock(&handle.state);
        while !state.done {
            if cancel.is_cancelled() {
                handle.cancel.cancel();
                drop(state);
                return Ok(Self::stop_handle(&handle));
            }
            state = handle
                .changed
                .wait_timeout(state, Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        state.delivered = true;
        let ok = state.status.state == RunState::Ok;
        Ok((completion_text(&handle, &state.status), ok))
    }

    /// One line per run of this session, in start order.
    pub fn list(&self) -> String {
        let order = lock(&self.inner.order).clone();
        let runs = lock(&self.inner.runs);
        let lines: Vec<String> = order
            .iter()
            .filter_map(|id| runs.get(id))
            .map(|h| {
                let state = lock(&h.state);
                format!(
                    "{} {} ({}): {} · {} · attach: rho attach {}",
                    if h.background {
                        "background"
                    } else {
                        "foreground"
                    },
                    h.id,
                    h.agent_id,
                    state.status.state,
                    format_elapsed(h.started.elapsed()),
                    h.id
                )
            })
            .collect();
        if lines.is_empty() {
            "no delegated agents in this session".to_owned()
        } else {
            lines.join("\n")
        }
    }

    /// Progress of a running child; the whole outcome of a finished one (which then counts
    /// as delivered).
    pub fn status(&self, id: &str) -> Result<String, DelegateError> {
        let handle = self.handle(id)?;
        let mut state = lock(&handle.state);
        if state.done {
            state.delivered = true;
            return Ok(completion_text(&handle, &state.status));
        }
        Ok(progress_text(&handle, &state.status))
    }

    /// Cancels a child and waits (bounded) for it to stop; returns its final outcome.
    pub fn stop(&self, id: &str) -> Result<(String, bool), DelegateError> {
        let handle = self.handle(id)?;
        Ok(Self::stop_handle(&handle))
    }

    /// Queues a plain-text message for a running rho child (read before its next model
    /// request).
    pub fn message(&self, id: &str, text: &str) -> Result<(), DelegateError> {
        let body = text.trim();
        if body.is_empty() {
            return Err(DelegateError::BadMessage {
                reason: "the message is empty".to_owned(),
            });
        }
        if body.len() > MAX_MESSAGE_BYTES {
            return Err(DelegateError::BadMessage {
                reason: format!(
                    "the message is {} bytes; the limit is {MAX_MESSAGE_BYTES}",
                    body.len()
                ),
            });
        }
        let handle = self.handle(id)?;
        if lock(&handle.state).done {
            return Err(DelegateError::NotMessageable {
                id: id.to_owned(),
                reason: "the run has finished".to_owned(),
            });
        }
        let inbox = lock(&handle.inbox);
        let Some(inbox) = inbox.as_ref() else {
            return Err(DelegateError::NotMessageable {
                id: id.to_owned(),
                reason: if lock(&handle.state).status.runtime == Some(RunRuntime::ClaudeCli) {
                    "claude-cli children cannot receive parent messages in this version of rho"
                        .to_owned()
                } else {
                    "the run has not started its session yet; try again shortly".to_owned()
                },
            });
        };
        inbox.push(ToolNotice {
            tool: "agents".to_owned(),
            kind: "parent_message".to_owned(),
            summary: format!("[message from the parent agent]\n{body}"),
            structured: json!({"message": body}),
        });
        Ok(())
    }

    /// Cancels every active child and waits, bounded, for them to stop. Called when the
    /// parent session ends.
    pub fn shutdown(&self) {
        let handles: Vec<Arc<Handle>> = lock(&self.inner.runs).values().cloned().collect();
        for handle in &handles {
            if !lock(&handle.state).done {
                handle.cancel.cancel();
            }
        }
        let deadline = Instant::now() + STOP_WAIT;
        for handle in handles {
            let mut state = lock(&handle.state);
            while !state.done && Instant::now() < deadline {
                state = handle
                    .changed
                    .wait_timeout(state, Duration::from_millis(50))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            if state.done {
                if let Some(thread) = state.thread.take() {
                    drop(state);
                    let _ = thread.join();
                }
            } else {
                tracing::warn!(id = %handle.id, "a delegated run did not stop within the shutdown bound");
            }
        }
    }

    fn handle(&self, id: &str) -> Result<Arc<Handle>, DelegateError> {
        lock(&self.inner.runs)
            .get(id)
            .cloned()
            .ok_or_else(|| DelegateError::UnknownRun { id: id.to_owned() })
    }

    fn stop_handle(handle: &Handle) -> (String, bool) {
        handle.cancel.cancel();
        let deadline = Instant::now() + STOP_WAIT;
        let mut state = lock(&handle.state);
        while !state.done && Instant::now() < deadline {
            state = handle
                .changed
                .wait_timeout(state, Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if state.done {
            state.delivered = true;
            let ok = state.status.state == RunState::Ok;
            (completion_text(handle, &state.status), ok)
        } else {
            (
                format!(
                    "agent {} ({}): stop requested; it has not stopped yet\nattach: rho attach {}",
                    handle.id, handle.agent_id, handle.id
                ),
                false,
            )
        }
    }

    fn bind(&self, agent_id: &str) -> Result<Child, DelegateError> {
        let setup = &self.inner.setup;
        let entry = setup
            .catalog
            .get(agent_id)
            .ok_or_else(|| DelegateError::UnknownAgent {
                agent: agent_id.to_owned(),
                available: setup
                    .catalog
                    .entries()
                    .map(|e| e.id().to_owned())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let capabilities = host_capabilities(true);
        let bound = binder::bind(
            entry,
            &BindRequest {
                config: &setup.config,
                capabilities: &capabilities,
                invocation: Invocation::Delegated,
                permission_mode: setup.permission_mode.mode,
                max_turns: None,
            },
        )
        .map_err(|e| DelegateError::Bind {
            agent: agent_id.to_owned(),
            reason: crate::tools::workspace::error_chain(&e),
        })?;
        if let BoundRuntime::Claude(launch) = bound.runtime {
            return Ok(Child::Claude(Box::new(launch)));
        }
        let env = |name: &str| std::env::var(name).ok();
        let prepared = launch::prepare(&LaunchRequest {
            home: &setup.home,
            config: &setup.config,
            workspace: &setup.workspace,
            catalog: &setup.catalog,
            agent: agent_id,
            overrides: &setup.overrides,
            capabilities: &capabilities,
            invocation: Invocation::Delegated,
            permission_mode: setup.permission_mode.mode,
            no_system_prompt: false,
            env: &env,
        })
        .map_err(|e| DelegateError::Bind {
            agent: agent_id.to_owned(),
            reason: crate::tools::workspace::error_chain(&e),
        })?;
        Ok(Child::Rho(Box::new(prepared)))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Records the final status, wakes waiters, and delivers a background completion.
fn finish(handle: &Handle, status: RunStatus) {
    let mut state = lock(&handle.state);
    state.status = status;
    state.done = true;
    let deliver = handle.background && !state.delivered;
    if deliver {
        state.delivered = true;
    }
    let text = completion_text(handle, &state.status);
    let run_state = state.status.state;
    drop(state);
    handle.changed.notify_all();
    if deliver && let Some(front) = &handle.front {
        front.notify(ToolNotice {
            tool: "agent".to_owned(),
            kind: "agent_completed".to_owned(),
            summary: format!(
                "[agent notification]\n{text}\n\nThis is an automated notification of a \
                 background agent run, not a user message."
            ),
            structured: json!({"id": handle.id, "agent_id": handle.agent_id,
                               "state": run_state.as_str()}),
        });
    }
}

/// Writes a status and its state event; failures are logged (the run goes on).
fn record(run: &RunDirectory, status: &RunStatus, detail: Option<String>) {
    if let Err(e) = run.write_status(status) {
        tracing::warn!(id = %run.id(), error = %e, "cannot write a delegated run's status");
    }
    if let Err(e) = run.append_event(AttachEventKind::State {
        state: status.state,
        detail,
    }) {
        tracing::warn!(id = %run.id(), error = %e, "cannot append a delegated run's event");
    }
}

fn event(run: &RunDirectory, kind: AttachEventKind) {
    if let Err(e) = run.append_event(kind) {
        tracing::warn!(id = %run.id(), error = %e, "cannot append a delegated run's event");
    }
}

/// `status` ended as stopped, for the caller to record.
fn stopped(mut status: RunStatus, why: &str) -> RunStatus {
    status.error = Some(why.to_owned());
    status.transition(RunState::Stopped);
    status
}

/// `status` ended in error, for the caller to record.
fn failed(mut status: RunStatus, why: String) -> RunStatus {
    status.error = Some(why);
    status.transition(RunState::Error);
    status
}

fn run_rho(
    inner: &Inner,
    handle: &Handle,
    run: &RunDirectory,
    mut status: RunStatus,
    prepared: PreparedAgent,
    prompt: &str,
) -> RunStatus {
    let setup = &inner.setup;
    let Some(_permit) = inner
        .pools
        .acquire(PoolKind::Rho, &|| handle.cancel.is_cancelled())
    else {
        return stopped(
            status,
            "cancelled while waiting for a place in the agent pool",
        );
    };
    let tools = match tool_host(
        &HostRequest {
            home: &setup.home,
            config: &setup.config,
            workspace: &setup.workspace,
            capabilities: &prepared.capabilities,
            permission_mode: setup.permission_mode,
            no_tools: false,
            no_subagents: true,
            headless: true,
            read_only: false,
        },
        None,
        None,
        None,
    ) {
        Ok(tools) => tools,
        Err(e) => return failed(status, format!("cannot set up the child's tools: {e}")),
    };
    *lock(&handle.inbox) = Some(tools.inbox());
    let transcript = match Transcript::create(&run.path().join("session")) {
        Ok(t) => t,
        Err(e) => {
            return failed(status, format!("cannot create the child's transcript: {e}"));
        }
    };
    let meta = json!({
        "invocation": "delegated",
        "run_id": handle.id,
        "agent_id": prepared.bound.id,
        "agent_fingerprint": prepared.bound.fingerprint,
        "parent_session_id": setup.parent_session_id,
        "permission_mode": setup.permission_mode.mode.to_string(),
    });
    let mut session = match Session::start(
        handle.id.clone(),
        prepared.client,
        tools,
        prepared.system_prompt,
        SessionLimits::default(),
        transcript,
        meta,
    ) {
        Ok(s) => s,
        Err(e) => {
            return failed(status, format!("cannot write the child's transcript: {e}"));
        }
    };
    status.transition(RunState::Running);
    record(run, &status, None);
    lock(&handle.state).status = status;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let status = lock(&handle.state).status.clone();
            return failed(status, format!("cannot start the async runtime: {e}"));
        }
    };
    let mut observer = |ev: &LoopEvent| match ev {
        LoopEvent::StepStarted { .. } => {
            let mut state = lock(&handle.state);
            state.status.turns += 1;
            let _ = run.write_status(&state.status);
        }
        LoopEvent::TextDelta { text, .. } => event(
            run,
            AttachEventKind::Text {
                text: text.clone(),
                partial: true,
            },
        ),
        LoopEvent::ToolStarted {
            name, arguments, ..
        } => {
            event(
                run,
                AttachEventKind::ToolUse {
                    name: name.clone(),
                    summary: clip(arguments, EVENT_SUMMARY_BYTES),
                },
            );
            let mut state = lock(&handle.state);
            state.status.last_activity = Some(format!("tool {name}"));
            let _ = run.write_status(&state.status);
        }
        LoopEvent::ToolFinished {
            is_error, content, ..
        } => event(
            run,
            AttachEventKind::ToolResult {
                is_error: *is_error,
                summary: clip(content, EVENT_SUMMARY_BYTES),
            },
        ),
        LoopEvent::TextReset { .. } | LoopEvent::ReasoningDelta { .. } => {}
    };
    let end = runtime.block_on(session.run_turn(prompt, &handle.cancel, &mut observer));
    drop(runtime);
    let mut status = lock(&handle.state).status.clone();
    let usage = session.usage();
    status.input_tokens = Some(usage.input_tokens);
    status.output_tokens = Some(usage.output_tokens);
    status.cache_read_input_tokens = Some(usage.cache_read_tokens);
    status.cache_creation_input_tokens = Some(usage.cache_write_tokens);
    event(
        run,
        AttachEventKind::Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_input_tokens: usage.cache_read_tokens,
            cache_creation_input_tokens: usage.cache_write_tokens,
        },
    );
    // The child's processes and background work end with its session.
    drop(session);
    match end {
        TurnEnd::Completed { text } => {
            event(
                run,
                AttachEventKind::Text {
                    text: text.clone(),
                    partial: false,
                },
            );
            status.last_text = Some(clip(&text, RESULT_EXCERPT_BYTES));
            status.result = Some(text);
            status.transition(RunState::Ok);
            status
        }
        TurnEnd::Cancelled => stopped(status, "stopped by the parent"),
        other => failed(status, other.describe()),
    }
}

fn run_claude(
    inner: &Inner,
    handle: &Handle,
    run: &RunDirectory,
    status: RunStatus,
    launch: &ClaudeLaunch,
    prompt: &str,
) -> (RunStatus, bool) {
    let setup = &inner.setup;
    let Some(_permit) = inner
        .pools
        .acquire(PoolKind::Claude, &|| handle.cancel.is_cancelled())
    else {
        return (
            stopped(
                status,
                "cancelled while waiting for a place in the Claude pool",
            ),
            false,
        );
    };
    let request = ClaudeRunRequest {
        launch,
        prompt,
        cwd: &setup.workspace,
        env: claude_cli::environment::child_environment(std::env::vars_os()),
        cancel: handle.cancel.clone(),
        timeout: None,
    };
    match claude_cli::run_claude(&setup.home, run, status.clone(), &request) {
        Ok(outcome) => {
            if let Err(e) = claude_cli::limits::record(&setup.home, &outcome.rate_limits) {
                tracing::warn!(error = %e, "cannot record observed Claude rate limits");
            }
            // The claude-cli runtime wrote its terminal status itself.
            (outcome.status, true)
        }
        Err(e) => (failed(status, e.to_string()), false),
    }
}

fn completion_text(handle: &Handle, status: &RunStatus) -> String {
    let mut text = format!(
        "agent {} ({}): {}",
        handle.id, handle.agent_id, status.state
    );
    let _ = write!(
        text,
        "\nturns: {} · tokens: {} in / {} out",
        status.turns,
        status.input_tokens.unwrap_or(0),
        status.output_tokens.unwrap_or(0)
    );
    if let Some(session) = &status.claude_session_id {
        let _ = write!(text, "\nclaude session: {session}");
    }
    if let Some(error) = &status.error {
        let _ = write!(text, "\nerror: {error}");
    }
    if matches!(status.state, RunState::Error | RunState::Stopped) {
        text.push_str("\nthis delegated task did not complete; treat its work as unverified");
    }
    if let Some(result) = status.result.as_deref().filter(|r| !r.is_empty()) {
        text.push_str("\n\n");
        text.push_str(&clip(result, RESULT_EXCERPT_BYTES));
    }
    text
}

fn progress_text(handle: &Handle, status: &RunStatus) -> String {
    let mut text = format!(
        "agent {} ({}): {}\nelapsed: {} · turns: {}",
        handle.id,
        handle.agent_id,
        status.state,
        format_elapsed(handle.started.elapsed()),
        status.turns
    );
    if let Some(activity) = &status.last_activity {
        let _ = write!(text, "\nactivity: {activity}");
    }
    let _ = write!(
        text,
        "\nstill running: its result arrives when it finishes (end your turn instead of \
         polling)\nattach: rho attach {}",
        handle.id
    );
    text
}

fn format_elapsed(elapsed: Duration) -> String {
    let secs = elapsed.as_secs();
    if secs >= 60 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{secs}s")
    }
}

/// `text` cut to at most `limit` bytes on a character boundary, with a marker when cut.
fn clip(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… [{} bytes cut]", &text[..cut], text.len() - cut)
}
