//! The `claude-cli` runtime: runs a delegated agent as the user's installed Claude Code
//! (`claude -p`), with the fixed flag set the binder computes, and reports through the same
//! run directory and status contract as rho's own runtime.
//!
//! Order of a run: find `claude` on the child's `PATH`; `claude auth status` (a missing binary
//! or a signed-out user fails at once, before anything else); the definition body to a private
//! 0600 file in the run directory; spawn in its own process group with the prompt on stdin,
//! stdout decoded as NDJSON, stderr to `log.txt`; cancellation and timeout stop the whole group
//! (SIGTERM, grace, SIGKILL), and the group is killed again after the leader exits so no
//! `claude` descendant outlives the run.
//!
//! Invariant: success comes only from a `result` message whose `is_error` is false; rho's own
//! provider keys never reach the child (see [`environment`]), and Supervised mode never spawns
//! (the binder refuses it).

pub mod environment;
pub mod limits;
pub mod node;
pub mod stream;

use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::agents::binder::ClaudeLaunch;
use crate::paths::RhoHome;
use crate::runtime::delegation::DelegationError;
use crate::runtime::delegation::rundir::{AttachEventKind, RunDirectory};
use crate::runtime::delegation::status::{RunState, RunStatus};
use crate::workflow::exec::CancelToken;
use stream::{ClaudeEvent, ClaudeResult, ClaudeVerdict, RateLimitObservation};

/// The name looked up on `PATH`.
pub const CLAUDE_BINARY: &str = "claude";
/// The file the definition body is written to inside the run directory.
pub const PROMPT_FILE: &str = "system-prompt.md";
/// How long `claude auth status` may take.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(30);
/// Time between SIGTERM and SIGKILL when a run is stopped.
pub const STOP_GRACE: Duration = Duration::from_secs(2);
/// How often waits re-check cancellation.
const POLL: Duration = Duration::from_millis(20);
/// Longest tool input or result rendered into an attachment event.
const SUMMARY_LIMIT: usize = 200;

/// What the pointer in sign-in errors says.
pub const SIGN_IN_HINT: &str =
    "sign in with `claude auth login` (or `/login claude-code` in Rho), then retry";

/// Why a claude-cli run could not start or finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClaudeError {
    /// No `claude` executable on the child's `PATH`.
    #[error(
        "the `claude` binary was not found on PATH; install Claude Code (npm install -g \
         @anthropic-ai/claude-code) and {SIGN_IN_HINT}"
    )]
    NotInstalled,
    /// `claude auth status` said the user is not signed in (or failed).
    #[error("Claude Code is not signed in ({detail}); {SIGN_IN_HINT}")]
    SignedOut {
        /// What `claude auth status` printed or how it failed.
        detail: String,
    },
    /// A process could not be started or waited for.
    #[error("cannot {action} `{}`", binary.display())]
    Spawn {
        /// What was attempted.
        action: &'static str,
        /// The binary.
        binary: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The run directory could not be written.
    #[error(transparent)]
    RunDirectory(#[from] DelegationError),
}

/// One claude-cli run to execute.
#[derive(Debug)]
pub struct ClaudeRunRequest<'a> {
    /// The bound launch data (flags, tools, prompt policy).
    pub launch: &'a ClaudeLaunch,
    /// The task, written to Claude's stdin.
    pub prompt: &'a str,
    /// The project directory Claude works in.
    pub cwd: &'a Path,
    /// The child's complete environment (see [`environment::child_environment`]).
    pub env: Vec<(OsString, OsString)>,
    /// Stops the run.
    pub cancel: CancelToken,
    /// Wall-clock limit, if any.
    pub timeout: Option<Duration>,
}

/// How a claude-cli run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaudeRunOutcome {
    /// The final status, as written to `result.json`.
    pub status: RunStatus,
    /// The final `result` message, if one arrived.
    pub result: Option<ClaudeResult>,
    /// Rate-limit windows observed during the run.
    pub rate_limits: Vec<RateLimitObservation>,
    /// The child's exit status, when it exited by itself or was reaped.
    pub exit_code: Option<i32>,
}

/// Finds `claude` on the `PATH` of `env`.
pub fn find_claude(env: &[(OsString, OsString)]) -> Result<PathBuf, ClaudeError> {
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .ok_or(ClaudeError::NotInstalled)?;
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(CLAUDE_BINARY))
        .find(|candidate| is_executable(candidate))
        .ok_or(ClaudeError::NotInstalled)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `claude auth status`: success when it exits 0.
pub fn check_auth(
    binary: &Path,
    cwd: &Path,
    env: &[(OsString, OsString)],
) -> Result<(), ClaudeError> {
    let mut child = Command::new(binary)
        .args(["auth", "status"])
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|source| spawn_error("start", binary, source))?;
    let deadline = Instant::now() + AUTH_TIMEOUT;
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|source| spawn_error("wait for", binary, source))?
        {
            break status;
        }
        if Instant::now() >= deadline {
            kill_group(&child, Signal::SIGKILL);
            let _ = child.wait();
            return Err(ClaudeError::SignedOut {
                detail: format!(
                    "`claude auth status` did not answer within {}s",
                    AUTH_TIMEOUT.as_secs()
                ),
            });
        }
        std::thread::sleep(POLL);
    };
    if status.success() {
        return Ok(());
    }
    let mut said = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.by_ref().take(4096).read_to_string(&mut said);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.by_ref().take(4096).read_to_string(&mut said);
    }
    let first = said
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no output");
    Err(ClaudeError::SignedOut {
        detail: format!(
            "`claude auth status` exited with {}: {first}",
            describe(status)
        ),
    })
}

fn spawn_error(action: &'static str, binary: &Path, source: std::io::Error) -> ClaudeError {
    if source.kind() == std::io::ErrorKind::NotFound {
        return ClaudeError::NotInstalled;
    }
    ClaudeError::Spawn {
        action,
        binary: binary.to_owned(),
        source,
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => "an unknown status".to_owned(),
    }
}

fn kill_group(child: &Child, signal: Signal) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // The child leads its own group (process_group(0)); ESRCH means it is already gone.
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

/// Runs one claude-cli agent to its end, reporting into `run` (whose status starts as
/// `status`). Errors before the spawn (missing binary, signed out) are also written to
/// `result.json` as `error` before they are returned.
pub fn run_claude(
    home: &RhoHome,
    run: &RunDirectory,
    mut status: RunStatus,
    request: &ClaudeRunRequest<'_>,
) -> Result<ClaudeRunOutcome, ClaudeError> {
    let started = Instant::now();
    let prepared = find_claude(&request.env).and_then(|binary| {
        check_auth(&binary, request.cwd, &request.env)?;
        Ok(binary)
    });
    let binary = match prepared {
        Ok(binary) => binary,
        Err(e) => {
            fail(run, &mut status, RunState::Error, e.to_string())?;
            return Err(e);
        }
    };
    let prompt_file = match request.launch.prompt_file_contents() {
        Some(body) => run.write_private_file(PROMPT_FILE, body.as_bytes())?,
        None => run.path().join(PROMPT_FILE),
    };
    let log = run.create_log()?;
    let mut child = match Command::new(&binary)
        .args(request.launch.args(&prompt_file))
        .current_dir(request.cwd)
        .env_clear()
        .envs(request.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(source) => {
            let e = spawn_error("start", &binary, source);
            fail(run, &mut status, RunState::Error, e.to_string())?;
            return Err(e);
        }
    };
    tracing::debug!(pid = child.id(), run = run.id(), "claude started");
    status.transition(RunState::Running);
    run.write_status(&status)?;
    run.append_event(AttachEventKind::State {
        state: RunState::Running,
        detail: None,
    })?;

    // The prompt goes in on its own thread: a large prompt must not block reading stdout.
    if let Some(mut stdin) = child.stdin.take() {
        let prompt = request.prompt.to_owned();
        std::thread::spawn(move || {
            let _ = stdin.write_all(prompt.as_bytes());
        });
    }

    // Stops the group on cancellation or timeout while the reader below blocks on stdout.
    let stopped = Arc::new(AtomicBool::new(false));
    let timed_out = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let pgid = i32::try_from(child.id()).ok().map(Pid::from_raw);
    let watcher = {
        let (stopped, timed_out, finished) = (stopped.clone(), timed_out.clone(), finished.clone());
        let cancel = request.cancel.clone();
        let timeout = request.timeout;
        std::thread::spawn(move || {
            watch(
                pgid, &cancel, timeout, started, &stopped, &timed_out, &finished,
            );
        })
    };

    let mut result: Option<ClaudeResult> = None;
    let mut rate_limits = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if line.last() != Some(&b'\n') {
                // A last line without its newline is a truncated message: it decides nothing.
                tracing::warn!(run = run.id(), "claude stream ended inside a line");
                break;
            }
            for event in stream::decode_line(&line) {
                apply(run, &mut status, &event)?;
                match event {
                    ClaudeEvent::Result(r) => result = Some(r),
                    ClaudeEvent::RateLimit(r) => rate_limits.push(r),
                    _ => {}
                }
            }
        }
    }
    let exit = child
        .wait()
        .map_err(|source| spawn_error("wait for", &binary, source))?;
    // Whatever the leader left behind in its group goes with it.
    kill_group(&child, Signal::SIGKILL);
    finished.store(true, Ordering::SeqCst);
    let _ = watcher.join();

    if !rate_limits.is_empty()
        && let Err(e) = limits::record(home, &rate_limits)
    {
        tracing::warn!("cannot record Claude rate-limit windows: {e}");
    }
    let (state, error) = if stopped.load(Ordering::SeqCst) {
        let why = if timed_out.load(Ordering::SeqCst) {
            format!(
                "timed out after {}s; the claude process group was stopped",
                request.timeout.map_or(0, |t| t.as_secs())
            )
        } else {
            "cancelled; the claude process group was stopped".to_owned()
        };
        let state = if timed_out.load(Ordering::SeqCst) {
            RunState::Error
        } else {
            RunState::Stopped
        };
        (state, Some(why))
    } else {
        match stream::verdict(result.as_ref()) {
            ClaudeVerdict::Success(answer) => {
                if !exit.success() {
                    tracing::warn!(
                        run = run.id(),
                        "claude reported success, then exited with {}",
                        describe(exit)
                    );
                }
                status.result = Some(answer);
                (RunState::Ok, None)
            }
            ClaudeVerdict::Error(why) => (RunState::Error, Some(why)),
            ClaudeVerdict::NoResult => (
                RunState::Error,
                Some(format!(
                    "claude exited with {} without a final result message (truncated stream); \
                     see {}",
                    describe(exit),
                    run.path()
                        .join(crate::runtime::delegation::rundir::LOG_FILE)
                        .display()
                )),
            ),
        }
    };
    fail(run, &mut status, state, error.unwrap_or_default())?;
    Ok(ClaudeRunOutcome {
        status,
        result,
        rate_limits,
        exit_code: exit.code(),
    })
}

/// Writes the terminal status (and its attachment event). An empty `why` leaves `error` unset.
fn fail(
    run: &RunDirectory,
    status: &mut RunStatus,
    state: RunState,
    why: String,
) -> Result<(), DelegationError> {
    status.transition(state);
    let detail = (!why.is_empty()).then_some(why);
    if state != RunState::Ok {
        status.error.clone_from(&detail);
    }
    run.write_status(status)?;
    run.append_event(AttachEventKind::State {
        state: status.state,
        detail,
    })
}

fn watch(
    pgid: Option<Pid>,
    cancel: &CancelToken,
    timeout: Option<Duration>,
    started: Instant,
    stopped: &AtomicBool,
    timed_out: &AtomicBool,
    finished: &AtomicBool,
) {
    while !finished.load(Ordering::SeqCst) {
        let expired = timeout.is_some_and(|t| started.elapsed() >= t);
        if cancel.is_cancelled() || expired {
            timed_out.store(expired && !cancel.is_cancelled(), Ordering::SeqCst);
            stopped.store(true, Ordering::SeqCst);
            let Some(pgid) = pgid else { return };
            let _ = killpg(pgid, Signal::SIGTERM);
            let grace = Instant::now();
            while grace.elapsed() < STOP_GRACE && !finished.load(Ordering::SeqCst) {
                std::thread::sleep(POLL);
            }
            let _ = killpg(pgid, Signal::SIGKILL);
            return;
        }
        std::thread::sleep(POLL);
    }
}

/// Folds one stream event into the status and the attachment stream.
fn apply(
    run: &RunDirectory,
    status: &mut RunStatus,
    event: &ClaudeEvent,
) -> Result<(), DelegationError> {
    match event {
        ClaudeEvent::Init { session_id, model } => {
            status.claude_session_id.clone_from(session_id);
            status.claude_model.clone_from(model);
            run.write_status(status)?;
        }
        ClaudeEvent::TextDelta(text) => run.append_event(AttachEventKind::Text {
            text: text.clone(),
            partial: true,
        })?,
        ClaudeEvent::Text(text) => {
            status.last_text = Some(text.clone());
            run.append_event(AttachEventKind::Text {
                text: text.clone(),
                partial: false,
            })?;
            run.write_status(status)?;
        }
        ClaudeEvent::ToolUse { name, input } => {
            status.last_activity = Some(format!("tool {name}"));
            run.append_event(AttachEventKind::ToolUse {
                name: name.clone(),
                summary: clip(&input.to_string()),
            })?;
            run.write_status(status)?;
        }
        ClaudeEvent::ToolResult { is_error, text } => {
            run.append_event(AttachEventKind::ToolResult {
                is_error: *is_error,
                summary: clip(text),
            })?;
        }
        ClaudeEvent::RateLimit(r) => run.append_event(AttachEventKind::RateLimit {
            window: r.window.clone(),
            status: r.status.clone(),
            resets_at: r.resets_at,
        })?,
        ClaudeEvent::Result(r) => {
            if r.session_id.is_some() {
                status.claude_session_id.clone_from(&r.session_id);
            }
            status.turns = r.num_turns.unwrap_or(status.turns);
            status.total_cost_usd = r.total_cost_usd;
            status.input_tokens = Some(r.usage.total_input());
            status.output_tokens = Some(r.usage.output_tokens);
            status.cache_read_input_tokens = Some(r.usage.cache_read_input_tokens);
            status.cache_creation_input_tokens = Some(r.usage.cache_creation_input_tokens);
            run.append_event(AttachEventKind::Usage {
                input_tokens: r.usage.total_input(),
                output_tokens: r.usage.output_tokens,
                cache_read_input_tokens: r.usage.cache_read_input_tokens,
                cache_creation_input_tokens: r.usage.cache_creation_input_tokens,
            })?;
        }
        ClaudeEvent::Unparsed(line) => {
            tracing::warn!(
                run = run.id(),
                "claude printed a line that is not JSON: {}",
                clip(line)
            );
        }
    }
    Ok(())
}

fn clip(text: &str) -> String {
    let one_line = text.replace(['\n', '\r'], " ");
    if one_line.chars().count() <= SUMMARY_LIMIT {
        return one_line;
    }
    let mut clipped: String = one_line.chars().take(SUMMARY_LIMIT).collect();
    clipped.push('…');
    clipped
}
