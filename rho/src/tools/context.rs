//! What a tool call runs with: the workspace, the data directory, the permission path, the
//! host's confirmation and notification channel, and a cancellation token.
//!
//! Invariant: a tool reaches the user only through [`ToolHost`]; when the host cannot ask
//! anyone, [`ToolHost::confirm`] refuses, so consent is never assumed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rho_policy::hooks::HostLabels;
use rho_policy::{ApprovalResponder, ModeSelection, PermissionMode};

use crate::config::Config;
use crate::paths::RhoHome;
use crate::permissions::SharedHostAuthorizer;

/// The default bound on a tool's model-facing summary, in bytes.
pub const DEFAULT_SUMMARY_LIMIT: usize = 64_000;

/// A cooperative cancellation flag shared by a caller and a blocking tool.
///
/// Blocking tools poll [`CancelToken::is_cancelled`] between steps, or sleep with
/// [`CancelToken::wait`], which wakes as soon as the token is cancelled. Clones share the flag.
#[derive(Clone, Debug, Default)]
pub struct CancelToken {
    inner: Arc<CancelInner>,
}

#[derive(Debug, Default)]
struct CancelInner {
    cancelled: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl CancelToken {
    /// A fresh, uncancelled token.
    pub fn new() -> Self {
        CancelToken::default()
    }

    /// Cancels: every clone sees it, and every [`CancelToken::wait`] returns.
    pub fn cancel(&self) {
        let _guard = self
            .inner
            .lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.inner.cancelled.store(true, Ordering::SeqCst);
        self.inner.wake.notify_all();
    }

    /// Whether the call should stop.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Sleeps up to `timeout`, returning early (with `true`) when cancelled.
    pub fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut guard = self
            .inner
            .lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.is_cancelled() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            guard = self
                .inner
                .wake
                .wait_timeout(guard, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// Something a tool needs a person to consent to explicitly, such as running one exact
/// program digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfirmRequest {
    /// The tool asking.
    pub tool: String,
    /// The question, one line: `Run workflow plan <ID> (<DIGEST>)?`.
    pub question: String,
    /// What consenting covers and does not cover, for the person deciding.
    pub detail: String,
}

/// The host's answer to a [`ConfirmRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfirmAnswer {
    /// A person explicitly accepted.
    Accepted,
    /// Anything else: declined, cancelled, an error, a timeout, no one to ask. The reason says
    /// which.
    Refused {
        /// Why there is no consent.
        reason: String,
    },
}

/// A message a tool delivers after its call returned (a background run finished).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolNotice {
    /// The tool that started the work.
    pub tool: String,
    /// What happened, machine-readable (`workflow_completed`).
    pub kind: String,
    /// The model-facing text, within the summary limit.
    pub summary: String,
    /// The structured form.
    pub structured: serde_json::Value,
}

/// The front end a tool runs under: an MCP server, the agent runtime, a test.
///
/// Implementations must be usable from blocking threads (tools are synchronous).
pub trait ToolHost: Send + Sync {
    /// Asks a person to consent to `request`, blocking until answered. Must fail closed: when
    /// no one can answer (headless, the client lacks the capability, an error, a timeout) the
    /// answer is [`ConfirmAnswer::Refused`] with the reason.
    fn confirm(&self, request: &ConfirmRequest) -> ConfirmAnswer;

    /// Delivers `notice` to whoever drives the session (an MCP notification, the agent loop's
    /// next turn). Must not block for long; delivery failures are the host's to log.
    fn notify(&self, notice: ToolNotice);

    /// A responder for the "require approval" step of the permission path (a human deciding
    /// on one tool call or command node), reaching the same person as [`ToolHost::confirm`];
    /// `None` when no one can be asked, so modes that need a human fail closed.
    fn approval_responder(&self) -> Option<Box<dyn ApprovalResponder + Send>> {
        None
    }
}

/// A host with no one to ask: every confirmation is refused, notices are logged.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeadlessHost;

impl ToolHost for HeadlessHost {
    fn confirm(&self, request: &ConfirmRequest) -> ConfirmAnswer {
        ConfirmAnswer::Refused {
            reason: format!(
                "no one can answer the confirmation `{}` in this session (headless); \
                 confirmation fails closed",
                request.question
            ),
        }
    }

    fn notify(&self, notice: ToolNotice) {
        tracing::info!(tool = %notice.tool, kind = %notice.kind, summary = %notice.summary, "tool notice");
    }
}

/// Everything one tool call runs with. Cheap to clone; clones share the authorizer, host and
/// cancellation token.
#[derive(Clone)]
pub struct ToolContext {
    workspace: PathBuf,
    home: RhoHome,
    config: Arc<Config>,
    mode: ModeSelection,
    authorizer: Arc<SharedHostAuthorizer>,
    host: Arc<dyn ToolHost>,
    cancel: CancelToken,
    summary_limit: usize,
    labels: Option<HostLabels>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("workspace", &self.workspace)
            .field("mode", &self.mode)
            .field("summary_limit", &self.summary_limit)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context for `workspace` (canonical) and `home`, under the permission path of
    /// `authorizer` (whose mode must be `mode.mode`), reaching the user through `host`.
    pub fn new(
        workspace: PathBuf,
        home: RhoHome,
        config: Arc<Config>,
        mode: ModeSelection,
        authorizer: Arc<SharedHostAuthorizer>,
        host: Arc<dyn ToolHost>,
    ) -> Self {
        ToolContext {
            workspace,
            home,
            config,
            mode,
            authorizer,
            host,
            cancel: CancelToken::new(),
            summary_limit: DEFAULT_SUMMARY_LIMIT,
            labels: None,
        }
    }

    /// The same context with another cancellation token (one per call).
    #[must_use]
    pub fn with_cancel(mut self, cancel: CancelToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// The same context with another summary byte limit.
    #[must_use]
    pub fn with_summary_limit(mut self, limit: usize) -> Self {
        self.summary_limit = limit;
        self
    }

    /// The same context labelled as running inside a workflow node (hooks see the labels).
    #[must_use]
    pub fn with_labels(mut self, labels: HostLabels) -> Self {
        self.labels = Some(labels);
        self
    }

    /// The canonical workspace root; tools act relative to it.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The data directory.
    pub fn home(&self) -> &RhoHome {
        &self.home
    }

    /// The loaded configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The shared configuration handle.
    pub fn config_arc(&self) -> Arc<Config> {
        Arc::clone(&self.config)
    }

    /// The permission mode in force and where it came from.
    pub fn mode(&self) -> ModeSelection {
        self.mode
    }

    /// The permission mode in force.
    pub fn permission_mode(&self) -> PermissionMode {
        self.mode.mode
    }

    /// The permission path (mode → hooks → approval) shared with workflow nodes, and the
    /// observational hook runner.
    pub fn authorizer(&self) -> &Arc<SharedHostAuthorizer> {
        &self.authorizer
    }

    /// The host's confirmation and notification channel.
    pub fn host(&self) -> &Arc<dyn ToolHost> {
        &self.host
    }

    /// This call's cancellation token.
    pub fn cancel(&self) -> &CancelToken {
        &self.cancel
    }

    /// The byte bound on model-facing summaries.
    pub fn summary_limit(&self) -> usize {
        self.summary_limit
    }

    /// Workflow labels when running inside a workflow node.
    pub fn labels(&self) -> Option<&HostLabels> {
        self.labels.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_wakes_a_waiter() {
        let token = CancelToken::new();
        let clone = token.clone();
        let waiter = std::thread::spawn(move || clone.wait(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        token.cancel();
        assert!(waiter.join().unwrap());
        assert!(token.is_cancelled());
    }

    #[test]
    fn wait_times_out_uncancelled() {
        assert!(!CancelToken::new().wait(Duration::from_millis(5)));
    }

    #[test]
    fn headless_host_refuses_confirmation() {
        let answer = HeadlessHost.confirm(&ConfirmRequest {
            tool: "workflow".into(),
            question: "Run workflow plan p (sha256:ab)?".into(),
            detail: String::new(),
        });
        let ConfirmAnswer::Refused { reason } = answer else {
            panic!("headless must refuse");
        };
        assert!(reason.contains("fails closed"), "{reason}");
    }
}
