//! The durable state of one run and the journal events that change it.
//!
//! `State` is what `state.json` holds and what `status` shows; [`Event`] is one journal record.
//! The only way to change a `State` is [`apply`], and [`replay`] folds a journal into a state,
//! so the snapshot, the owner's in-memory view and a replay of `events.jsonl` are the same
//! thing computed at different times.
//!
//! Invariant: `apply` is pure and total (an event that names an unknown node or attempt is a
//! journal inconsistency reported as [`StateError`], never a panic), and
//! `state.last_event_sequence` is the `seq` of the last event folded in.

use std::collections::BTreeMap;
use std::fmt;

use rho_ipc::data::Data;
use rho_ipc::program::ROOT_SCOPE_ID;
use rho_policy::EscalationCounters;
use serde::{Deserialize, Serialize};

/// Version of the `state.json` shape.
pub const STATE_FORMAT_VERSION: u32 = 1;

/// The state of one node (task instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Not decided yet: some need is not terminal.
    Pending,
    /// Decided to run; waiting for capacity or checkout access.
    Ready,
    /// An attempt is intended or running.
    Running,
    /// The last attempt succeeded.
    Success,
    /// The last attempt failed (exit, timeout, verification, output validation).
    Failure,
    /// Policy, a hook, a classifier or a human refused the node.
    Denial,
    /// The node was stopped by cancellation.
    Cancellation,
    /// Its condition evaluated false, or (without a condition) a need was skipped.
    Skipped,
    /// A required input or dependency result is unavailable.
    Blocked,
}

impl NodeState {
    /// Terminal states are final until an explicit resume or recovery.
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            NodeState::Pending | NodeState::Ready | NodeState::Running
        )
    }

    /// The lowercase name used in JSON, conditions and status.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Pending => "pending",
            NodeState::Ready => "ready",
            NodeState::Running => "running",
            NodeState::Success => "success",
            NodeState::Failure => "failure",
            NodeState::Denial => "denial",
            NodeState::Cancellation => "cancellation",
            NodeState::Skipped => "skipped",
            NodeState::Blocked => "blocked",
        }
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The lifecycle of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    /// Created, no owner has driven it yet.
    Planned,
    /// An owner drives it.
    Running,
    /// Cancellation was requested; the owner is cleaning up.
    Cancelling,
    /// The root scope closed with an outcome.
    Completed,
    /// An attempt's fate is uncertain; an explicit recovery action is needed.
    NeedsRecovery,
}

impl Lifecycle {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Planned => "planned",
            Lifecycle::Running => "running",
            Lifecycle::Cancelling => "cancelling",
            Lifecycle::Completed => "completed",
            Lifecycle::NeedsRecovery => "needs_recovery",
        }
    }
}

impl fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of a workflow (of its root scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every node is fine (skipped counts as fine; allowed failures are ignored).
    Success,
    /// A node without `allow_failure` failed.
    Failure,
    /// A node without `allow_failure` was denied.
    Denial,
    /// A node was cancelled.
    Cancellation,
    /// A node without `allow_failure` was blocked.
    Blocked,
}

impl Outcome {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Denial => "denial",
            Outcome::Cancellation => "cancellation",
            Outcome::Blocked => "blocked",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a command attempt's process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExitRecord {
    /// Exited with a code.
    Code {
        /// The exit code.
        code: i32,
    },
    /// Killed by a signal it did not catch.
    Signal {
        /// The signal number.
        signal: i32,
    },
    /// Stopped by the runner after its timeout.
    Timeout {
        /// The timeout that elapsed.
        seconds: u64,
    },
    /// Stopped by cancellation.
    Cancelled,
    /// Ended in a way that fits none of the above.
    Abnormal {
        /// What happened.
        reason: String,
    },
}

impl fmt::Display for ExitRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitRecord::Code { code } => write!(f, "code {code}"),
            ExitRecord::Signal { signal } => write!(f, "signal {signal}"),
            ExitRecord::Timeout { seconds } => write!(f, "timeout after {seconds}s"),
            ExitRecord::Cancelled => f.write_str("cancellation"),
            ExitRecord::Abnormal { reason } => write!(f, "abnormal: {reason}"),
        }
    }
}

/// A stored artifact: run-relative path, sizes and digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Path relative to the run directory (`nodes/build/attempts/1/stdout`).
    pub path: String,
    /// Bytes kept on disk.
    pub retained_bytes: u64,
    /// Bytes the process wrote (all of them, retained or not).
    pub observed_bytes: u64,
    /// Whether bytes were dropped because of the retention bound.
    pub truncated: bool,
    /// `sha256:<hex>` of the retained bytes.
    pub sha256: String,
}

/// Who refused a node, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenialRecord {
    /// `policy`, `hook <id>`, `classifier`, `human`.
    pub decided_by: String,
    /// Why, in words fit for `status`.
    pub reason: String,
    /// The permission mode in force.
    pub mode: String,
}

/// Where an attempt is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptPhase {
    /// `launch_intended` is durable; a process may or may not have started.
    Intended,
    /// The process started (pid known).
    Launched,
    /// The attempt ended and its outcome is stored.
    Finished,
    /// The owner died while the attempt was intended or running: its fate is unknown.
    InterruptedUncertain,
}

/// The identity of a started process, enough to tell whether it still exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    /// The process id.
    pub pid: i32,
    /// Its process group (the node's tree).
    pub pgid: i32,
    /// Its start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_time: u64,
}

/// One attempt of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1-based attempt number.
    pub number: u32,
    /// Where the attempt is.
    pub phase: AttemptPhase,
    /// The started process, once known.
    pub process: Option<ProcessIdentity>,
    /// The cgroup (hierarchy path) holding the attempt's whole process tree, named before
    /// the process started; recovery and `delete` check it is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// How the process ended.
    pub exit: Option<ExitRecord>,
    /// The node state this attempt ended in.
    pub state: Option<NodeState>,
    /// Why the attempt ended as it did (failure reason, skipped reason, uncertainty).
    pub reason: Option<String>,
    /// Captured stdout.
    pub stdout: Option<Artifact>,
    /// Captured stderr.
    pub stderr: Option<Artifact>,
    /// The validated output value as stored (`output.json`).
    pub output: Option<Artifact>,
    /// The denial, for an attempt that policy refused.
    pub denial: Option<DenialRecord>,
    /// Unix milliseconds when the attempt was intended.
    pub intended_at_ms: u64,
    /// Unix milliseconds when it finished.
    pub finished_at_ms: Option<u64>,
}

/// A node's durable record inside its scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// Current state.
    pub state: NodeState,
    /// Why the node is in that state (decisions, failures).
    pub reason: Option<String>,
    /// Every attempt, oldest first.
    #[serde(deserialize_with = "attempts_exactly")]
    pub attempts: Vec<Attempt>,
}

/// Reads a task's attempts into a vector no larger than they need. Serde's own sequence
/// reader starts at room for four (JSON gives no length), and an attempt is ~0.5 KB: a
/// 1,000-node `state.json` (one attempt each) then took ~2 MB of fresh memory instead of
/// ~0.5 MB, and `status` spent more time faulting those pages in than decoding.
fn attempts_exactly<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Attempt>, D::Error> {
    struct Attempts;
    impl<'de> serde::de::Visitor<'de> for Attempts {
        type Value = Vec<Attempt>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of attempts")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let Some(first) = seq.next_element()? else {
                return Ok(Vec::new());
            };
            let mut attempts = Vec::with_capacity(seq.size_hint().map_or(1, |more| more + 1));
            attempts.push(first);
            while let Some(next) = seq.next_element()? {
                attempts.push(next);
            }
            Ok(attempts)
        }
    }
    deserializer.deserialize_seq(Attempts)
}

/// A completed node: final state and the attempt that produced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    /// The terminal state.
    pub state: NodeState,
    /// The attempt, when one ran.
    pub attempt: Option<u32>,
}

/// One resolved export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportValue {
    /// The value; `null` when the reference was unavailable.
    pub value: Data,
    /// Whether the reference resolved.
    pub available: bool,
    /// Why it is unavailable.
    pub note: Option<String>,
}

/// A closed scope's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeResult {
    /// The outcome.
    pub outcome: Outcome,
    /// The resolved named exports.
    pub exports: BTreeMap<String, ExportValue>,
}

/// The state of one scope: tasks, the values references read, and its result once closed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeState {
    /// Tasks by task instance id.
    pub tasks: BTreeMap<String, Task>,
    /// Validated outputs by node.
    pub outputs: BTreeMap<String, Data>,
    /// Exit codes of command nodes whose process exited with a code.
    pub command_exits: BTreeMap<String, i64>,
    /// Terminal nodes.
    pub completions: BTreeMap<String, Completion>,
    /// Present once the scope closed.
    pub result: Option<ScopeResult>,
}

impl ScopeState {
    /// The state of a node, if the scope has it.
    pub fn node_state(&self, node: &str) -> Option<NodeState> {
        self.tasks.get(node).map(|t| t.state)
    }
}

/// A cancellation request as the run knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRecord {
    /// The request id given to `cancel`.
    pub request_id: String,
    /// Whether the owner finished its cleanup for the request (journaled while it still held
    /// the run). `cancel` reports `acknowledged` only later, once the owner has also released
    /// the run and published the acknowledgement next to it.
    #[serde(alias = "acknowledged")]
    pub completed: bool,
}

/// The process that owns (drives) the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRecord {
    /// Its pid.
    pub pid: i32,
    /// Its start time (clock ticks since boot), so a recycled pid is not mistaken for it.
    pub start_time: u64,
    /// The permission mode it authorizes nodes under.
    pub permission_mode: String,
}

/// An observational hook that failed; recorded, never acted on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookFailureRecord {
    /// The event the hook observed (`workflow_started`, `workflow_node_finished`, ...).
    pub event: String,
    /// The hook's `id`.
    pub hook_id: String,
    /// `user` or `project`.
    pub scope: String,
    /// The node, for node events.
    pub node: Option<String>,
    /// The node's attempt, for node events.
    pub attempt: Option<u32>,
    /// How it failed.
    pub detail: String,
}

/// The durable state of a run (`state.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// [`STATE_FORMAT_VERSION`].
    pub format_version: u32,
    /// The run.
    pub run_id: String,
    /// Incremented by every applied event.
    pub revision: u64,
    /// The lifecycle.
    pub lifecycle: Lifecycle,
    /// Scopes by id; this release has only `s0`.
    pub scopes: BTreeMap<String, ScopeState>,
    /// The latest cancellation request.
    pub cancel: Option<CancelRecord>,
    /// The current owner, while one drives the run.
    pub owner: Option<OwnerRecord>,
    /// `seq` of the last event folded in.
    pub last_event_sequence: u64,
    /// The classifier's escalation counters after its latest decision in this run (restored
    /// by resume, so a restart cannot reset them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<EscalationCounters>,
    /// Observational hooks that failed, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hook_failures: Vec<HookFailureRecord>,
}

impl State {
    /// The state before any event: no run yet.
    pub fn empty() -> Self {
        State {
            format_version: STATE_FORMAT_VERSION,
            run_id: String::new(),
            revision: 0,
            lifecycle: Lifecycle::Planned,
            scopes: BTreeMap::new(),
            cancel: None,
            owner: None,
            last_event_sequence: 0,
            escalation: None,
            hook_failures: Vec::new(),
        }
    }

    /// The root scope (empty before `run_created`).
    pub fn root(&self) -> &ScopeState {
        static EMPTY: std::sync::OnceLock<ScopeState> = std::sync::OnceLock::new();
        self.scopes
            .get(ROOT_SCOPE_ID)
            .unwrap_or_else(|| EMPTY.get_or_init(ScopeState::default))
    }

    /// Uncertain attempts still waiting for a recovery decision, as `(node, attempt)`: the
    /// latest attempt of a node that is still `running`. Once recovery reset the node (or a
    /// newer attempt replaced it) the uncertain attempt stays in the history but asks for
    /// nothing, so a later resume never recovers (and reruns) that node again.
    pub fn uncertain_attempts(&self) -> Vec<(&str, &Attempt)> {
        let mut out = Vec::new();
        for (id, task) in &self.root().tasks {
            if let Some(attempt) = task.attempts.last()
                && attempt.phase == AttemptPhase::InterruptedUncertain
                && task.state == NodeState::Running
            {
                out.push((id.as_str(), attempt));
            }
        }
        out
    }

    /// Attempts that are intended or launched but not finished, as `(node, attempt)`.
    pub fn open_attempts(&self) -> Vec<(&str, &Attempt)> {
        let mut out = Vec::new();
        for (id, task) in &self.root().tasks {
            if let Some(attempt) = task.attempts.last()
                && matches!(
                    attempt.phase,
                    AttemptPhase::Intended | AttemptPhase::Launched
                )
            {
                out.push((id.as_str(), attempt));
            }
        }
        out
    }
}

/// One journal record: a sequence number, a wall-clock stamp (display only, never used to
/// decide) and what happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Contiguous from 1.
    pub seq: u64,
    /// Unix milliseconds when it was recorded.
    pub at_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What a journal record says happened.
#[allow(
    clippy::large_enum_variant,
    reason = "records are built once and written; boxing buys nothing"
)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// The run exists, with these nodes in the root scope (all pending).
    RunCreated {
        /// The run id.
        run_id: String,
        /// The program digest consented to.
        program_digest: String,
        /// Node ids of the root scope, sorted.
        nodes: Vec<String>,
    },
    /// A process took ownership (holds `mutation.lock`).
    OwnerOpened {
        /// Its pid.
        pid: i32,
        /// Its start time in clock ticks since boot.
        start_time: u64,
        /// The permission mode nodes are authorized under.
        permission_mode: String,
        /// `run` or `resume`.
        command: String,
    },
    /// The owner let go cleanly.
    OwnerClosed {
        /// Why (`completed`, `cancelled`, `needs_recovery`, `error: ...`).
        reason: String,
    },
    /// The lifecycle changed.
    LifecycleChanged {
        /// The new lifecycle.
        lifecycle: Lifecycle,
    },
    /// The scheduler decided a pending node (`ready`, `skipped`, `blocked`), or a node was
    /// reset to `pending` by resume or recovery.
    NodeStateChanged {
        /// The node.
        node: String,
        /// The new state.
        state: NodeState,
        /// Why.
        reason: Option<String>,
    },
    /// A new attempt is about to start; durable before any process starts.
    LaunchIntended {
        /// The node.
        node: String,
        /// The attempt number.
        attempt: u32,
        /// The cgroup the attempt's process tree will run in, when the owner contains
        /// trees in cgroups.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cgroup: Option<String>,
    },
    /// The attempt's process started.
    Launched {
        /// The node.
        node: String,
        /// The attempt number.
        attempt: u32,
        /// The process.
        process: ProcessIdentity,
    },
    /// The attempt ended; the node takes `state`.
    AttemptFinished {
        /// The node.
        node: String,
        /// The attempt number.
        attempt: u32,
        /// The terminal node state.
        state: NodeState,
        /// Why (for anything but success).
        reason: Option<String>,
        /// How the process ended, when one ran.
        exit: Option<ExitRecord>,
        /// Captured stdout.
        stdout: Option<Artifact>,
        /// Captured stderr.
        stderr: Option<Artifact>,
        /// The validated output value.
        output: Option<Data>,
        /// Where the validated output is stored.
        output_artifact: Option<Artifact>,
    },
    /// Policy, a hook, a classifier or a human refused the attempt.
    NodeDenied {
        /// The node.
        node: String,
        /// The attempt number.
        attempt: u32,
        /// Who and why.
        denial: DenialRecord,
    },
    /// `cancel` asked the run to stop.
    CancelRequested {
        /// The request id.
        request_id: String,
    },
    /// Written by earlier builds where `cancel_completed` is now: the owner finished cleanup
    /// for the request. Still read, never written.
    CancelAcknowledged {
        /// The request id.
        request_id: String,
    },
    /// The owner stopped everything for the request and stored every outcome; what is left
    /// (the final snapshot, releasing the run, publishing the acknowledgement) follows.
    CancelCompleted {
        /// The request id.
        request_id: String,
    },
    /// Consent to the program digest was given for this owner (`run` or `resume`), so every
    /// consent that let a process own the run is on record.
    ConsentGiven {
        /// `run` or `resume`.
        command: String,
        /// The exact `program_digest` consented to.
        digest: String,
        /// `--yes` or `prompt`.
        method: String,
        /// RFC 3339 UTC time of consent.
        at: String,
    },
    /// A scope closed with an outcome and its resolved exports.
    ScopeClosed {
        /// The scope id.
        scope: String,
        /// Its result.
        result: ScopeResult,
    },
    /// A closed scope was reopened (resume); its result is cleared.
    ScopeReopened {
        /// The scope id.
        scope: String,
    },
    /// The attempt was intended or running when its owner died: its fate is unknown.
    AttemptUncertain {
        /// The node.
        node: String,
        /// The attempt number.
        attempt: u32,
        /// Why it is uncertain.
        reason: String,
    },
    /// The user chose to recover these uncertain nodes; each gets a new attempt.
    RecoveryStarted {
        /// The nodes reset to pending.
        nodes: Vec<String>,
    },
    /// The classifier decided a command node; its escalation counters are now these.
    EscalationCounters {
        /// Consecutive and total classifier denials in this run.
        counters: EscalationCounters,
    },
    /// An observational hook failed; the run carries on unchanged.
    HookFailed {
        /// Which hook, on which event, and how it failed.
        failure: HookFailureRecord,
    },
    /// A torn final line was cut off when the journal was opened.
    JournalRepaired {
        /// Bytes removed from the end of the file.
        dropped_bytes: u64,
    },
    /// `state.json` was replaced by the state as of the previous record. The journal vouches
    /// for those exact bytes, so a reader that finds this record near the end can start from
    /// the snapshot instead of replaying every record (a snapshot with other bytes, a hand
    /// edit or a stale copy, is checked against a full replay instead).
    SnapshotWritten {
        /// `sha256:<hex>` of the `state.json` bytes written.
        sha256: String,
    },
}

impl EventKind {
    /// The `event` tag.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::RunCreated { .. } => "run_created",
            EventKind::OwnerOpened { .. } => "owner_opened",
            EventKind::OwnerClosed { .. } => "owner_closed",
            EventKind::LifecycleChanged { .. } => "lifecycle_changed",
            EventKind::NodeStateChanged { .. } => "node_state_changed",
            EventKind::LaunchIntended { .. } => "launch_intended",
            EventKind::Launched { .. } => "launched",
            EventKind::AttemptFinished { .. } => "attempt_finished",
            EventKind::NodeDenied { .. } => "node_denied",
            EventKind::CancelRequested { .. } => "cancel_requested",
            EventKind::CancelAcknowledged { .. } => "cancel_acknowledged",
            EventKind::CancelCompleted { .. } => "cancel_completed",
            EventKind::ConsentGiven { .. } => "consent_given",
            EventKind::ScopeClosed { .. } => "scope_closed",
            EventKind::ScopeReopened { .. } => "scope_reopened",
            EventKind::AttemptUncertain { .. } => "attempt_uncertain",
            EventKind::RecoveryStarted { .. } => "recovery_started",
            EventKind::EscalationCounters { .. } => "escalation_counters",
            EventKind::HookFailed { .. } => "hook_failed",
            EventKind::JournalRepaired { .. } => "journal_repaired",
            EventKind::SnapshotWritten { .. } => "snapshot_written",
        }
    }
}

/// Why an event cannot be applied to a state: the journal is inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The event's sequence number does not follow the state's.
    #[error("journal record {seq} does not follow record {last}")]
    Sequence {
        /// The event's `seq`.
        seq: u64,
        /// The state's `last_event_sequence`.
        last: u64,
    },
    /// The first record is not `run_created`, or a second one appeared.
    #[error("journal record {seq}: {problem}")]
    Creation {
        /// The record.
        seq: u64,
        /// What is wrong.
        problem: &'static str,
    },
    /// An event names a node the run does not have.
    #[error("journal record {seq} ({event}): unknown node `{node}`")]
    UnknownNode {
        /// The record.
        seq: u64,
        /// The event name.
        event: &'static str,
        /// The node.
        node: String,
    },
    /// An event names an attempt that is not the node's latest, or a wrong transition.
    #[error("journal record {seq} ({event}): node `{node}` attempt {attempt}: {problem}")]
    Attempt {
        /// The record.
        seq: u64,
        /// The event name.
        event: &'static str,
        /// The node.
        node: String,
        /// The attempt.
        attempt: u32,
        /// What is wrong.
        problem: &'static str,
    },
}

/// Folds one event into the state.
pub fn apply(state: &mut State, event: &Event) -> Result<(), StateError> {
    if event.seq != state.last_event_sequence + 1 {
        return Err(StateError::Sequence {
            seq: event.seq,
            last: state.last_event_sequence,
        });
    }
    let seq = event.seq;
    let name = event.kind.name();
    match &event.kind {
        EventKind::RunCreated { run_id, nodes, .. } => {
            if seq != 1 {
                return Err(StateError::Creation {
                    seq,
                    problem: "run_created after the start",
                });
            }
            state.run_id.clone_from(run_id);
            let mut scope = ScopeState::default();
            for node in nodes {
                scope.tasks.insert(
                    node.clone(),
                    Task {
                        state: NodeState::Pending,
                        reason: None,
                        attempts: Vec::new(),
                    },
                );
            }
            state.scopes.insert(ROOT_SCOPE_ID.to_owned(), scope);
        }
        _ if seq == 1 => {
            return Err(StateError::Creation {
                seq,
                problem: "the first record is not run_created",
            });
        }
        EventKind::OwnerOpened {
            pid,
            start_time,
            permission_mode,
            ..
        } => {
            state.owner = Some(OwnerRecord {
                pid: *pid,
                start_time: *start_time,
                permission_mode: permission_mode.clone(),
            });
        }
        EventKind::OwnerClosed { .. } => state.owner = None,
        EventKind::LifecycleChanged { lifecycle } => state.lifecycle = *lifecycle,
        EventKind::NodeStateChanged {
            node,
            state: new,
            reason,
        } => {
            let scope = root_mut(state);
            let task = task_mut(scope, seq, name, node)?;
            task.state = *new;
            task.reason.clone_from(reason);
            if new.is_terminal() {
                scope.completions.insert(
                    node.clone(),
                    Completion {
                        state: *new,
                        attempt: None,
                    },
                );
            } else {
                scope.completions.remove(node);
                scope.outputs.remove(node);
                scope.command_exits.remove(node);
            }
        }
        EventKind::LaunchIntended {
            node,
            attempt,
            cgroup,
        } => {
            let at = event.at_ms;
            let task = task_mut(root_mut(state), seq, name, node)?;
            let expected = u32::try_from(task.attempts.len())
                .unwrap_or(u32::MAX)
                .saturating_add(1);
            if *attempt != expected {
                return Err(attempt_err(
                    seq,
                    name,
                    node,
                    *attempt,
                    "attempt numbers must grow by one",
                ));
            }
            task.state = NodeState::Running;
            task.reason = None;
            task.attempts.push(Attempt {
                number: *attempt,
                phase: AttemptPhase::Intended,
                process: None,
                cgroup: cgroup.clone(),
                exit: None,
                state: None,
                reason: None,
                stdout: None,
                stderr: None,
                output: None,
                denial: None,
                intended_at_ms: at,
                finished_at_ms: None,
            });
        }
        EventKind::Launched {
            node,
            attempt,
            process,
        } => {
            let a = open_attempt_mut(root_mut(state), seq, name, node, *attempt)?;
            a.phase = AttemptPhase::Launched;
            a.process = Some(*process);
        }
        EventKind::AttemptFinished {
            node,
            attempt,
            state: new,
            reason,
            exit,
            stdout,
            stderr,
            output,
            output_artifact,
        } => {
            if !new.is_terminal() {
                return Err(attempt_err(
                    seq,
                    name,
                    node,
                    *attempt,
                    "finished in a non-terminal state",
                ));
            }
            let at = event.at_ms;
            let scope = root_mut(state);
            let a = open_attempt_mut(scope, seq, name, node, *attempt)?;
            a.phase = AttemptPhase::Finished;
            a.exit.clone_from(exit);
            a.state = Some(*new);
            a.reason.clone_from(reason);
            a.stdout.clone_from(stdout);
            a.stderr.clone_from(stderr);
            a.output.clone_from(output_artifact);
            a.finished_at_ms = Some(at);
            finish_task(scope, node, *new, reason.clone(), *attempt);
            if let Some(ExitRecord::Code { code }) = exit {
                scope.command_exits.insert(node.clone(), i64::from(*code));
            }
            if let Some(value) = output {
                scope.outputs.insert(node.clone(), value.clone());
            }
        }
        EventKind::NodeDenied {
            node,
            attempt,
            denial,
        } => {
            let at = event.at_ms;
            let scope = root_mut(state);
            let a = open_attempt_mut(scope, seq, name, node, *attempt)?;
            a.phase = AttemptPhase::Finished;
            a.state = Some(NodeState::Denial);
            a.reason = Some(denial.reason.clone());
            a.denial = Some(denial.clone());
            a.finished_at_ms = Some(at);
            let reason = format!("denied by {}: {}", denial.decided_by, denial.reason);
            finish_task(scope, node, NodeState::Denial, Some(reason), *attempt);
        }
        EventKind::CancelRequested { request_id } => {
            state.cancel = Some(CancelRecord {
                request_id: request_id.clone(),
                completed: false,
            });
        }
        EventKind::CancelAcknowledged { request_id }
        | EventKind::CancelCompleted { request_id } => {
            state.cancel = Some(CancelRecord {
                request_id: request_id.clone(),
                completed: true,
            });
        }
        EventKind::ScopeClosed { scope, result } => {
            state.scopes.entry(scope.clone()).or_default().result = Some(result.clone());
        }
        EventKind::ScopeReopened { scope } => {
            state.scopes.entry(scope.clone()).or_default().result = None;
        }
        EventKind::AttemptUncertain {
            node,
            attempt,
            reason,
        } => {
            let a = open_attempt_mut(root_mut(state), seq, name, node, *attempt)?;
            a.phase = AttemptPhase::InterruptedUncertain;
            a.reason = Some(reason.clone());
        }
        EventKind::RecoveryStarted { nodes } => {
            let scope = root_mut(state);
            for node in nodes {
                let task = task_mut(scope, seq, name, node)?;
                task.state = NodeState::Pending;
                task.reason = Some("recovery: a new attempt replaces an uncertain one".to_owned());
                scope.completions.remove(node);
                scope.outputs.remove(node);
                scope.command_exits.remove(node);
            }
        }
        EventKind::EscalationCounters { counters } => state.escalation = Some(*counters),
        EventKind::HookFailed { failure } => state.hook_failures.push(failure.clone()),
        EventKind::JournalRepaired { .. }
        | EventKind::ConsentGiven { .. }
        | EventKind::SnapshotWritten { .. } => {}
    }
    state.last_event_sequence = seq;
    state.revision += 1;
    Ok(())
}

/// Folds a whole journal into a state.
pub fn replay<'a>(events: impl IntoIterator<Item = &'a Event>) -> Result<State, StateError> {
    let mut state = State::empty();
    for event in events {
        apply(&mut state, event)?;
    }
    Ok(state)
}

fn root_mut(state: &mut State) -> &mut ScopeState {
    state.scopes.entry(ROOT_SCOPE_ID.to_owned()).or_default()
}

fn task_mut<'s>(
    scope: &'s mut ScopeState,
    seq: u64,
    event: &'static str,
    node: &str,
) -> Result<&'s mut Task, StateError> {
    scope
        .tasks
        .get_mut(node)
        .ok_or_else(|| StateError::UnknownNode {
            seq,
            event,
            node: node.to_owned(),
        })
}

fn open_attempt_mut<'s>(
    scope: &'s mut ScopeState,
    seq: u64,
    event: &'static str,
    node: &str,
    attempt: u32,
) -> Result<&'s mut Attempt, StateError> {
    let task = task_mut(scope, seq, event, node)?;
    match task.attempts.last_mut() {
        Some(a) if a.number == attempt => {
            if matches!(a.phase, AttemptPhase::Intended | AttemptPhase::Launched) {
                Ok(a)
            } else {
                Err(attempt_err(
                    seq,
                    event,
                    node,
                    attempt,
                    "the attempt is not open",
                ))
            }
        }
        _ => Err(attempt_err(
            seq,
            event,
            node,
            attempt,
            "not the node's latest attempt",
        )),
    }
}

fn finish_task(
    scope: &mut ScopeState,
    node: &str,
    state: NodeState,
    reason: Option<String>,
    attempt: u32,
) {
    if let Some(task) = scope.tasks.get_mut(node) {
        task.state = state;
        task.reason = reason;
    }
    scope.completions.insert(
        node.to_owned(),
        Completion {
            state,
            attempt: Some(attempt),
        },
    );
}

fn attempt_err(
    seq: u64,
    event: &'static str,
    node: &str,
    attempt: u32,
    problem: &'static str,
) -> StateError {
    StateError::Attempt {
        seq,
        event,
        node: node.to_owned(),
        attempt,
        problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, kind: EventKind) -> Event {
        Event {
            seq,
            at_ms: 1000 + seq,
            kind,
        }
    }

    fn created(nodes: &[&str]) -> Event {
        ev(
            1,
            EventKind::RunCreated {
                run_id: "r".into(),
                program_digest: "sha256:00".into(),
                nodes: nodes.iter().map(|s| (*s).to_owned()).collect(),
            },
        )
    }

    #[test]
    fn an_uncertain_attempt_asks_for_recovery_only_until_recovery_resets_its_node() {
        let node = || "a".to_owned();
        let mut events = vec![
            created(&["a"]),
            ev(
                2,
                EventKind::LaunchIntended {
                    node: node(),
                    attempt: 1,
                    cgroup: None,
                },
            ),
            ev(
                3,
                EventKind::AttemptUncertain {
                    node: node(),
                    attempt: 1,
                    reason: "owner died".into(),
                },
            ),
        ];
        let state = replay(&events).unwrap();
        assert_eq!(state.uncertain_attempts().len(), 1);
        assert!(state.open_attempts().is_empty());
        events.push(ev(
            4,
            EventKind::RecoveryStarted {
                nodes: vec![node()],
            },
        ));
        let state = replay(&events).unwrap();
        assert!(state.uncertain_attempts().is_empty(), "recovery was chosen");
        events.push(ev(
            5,
            EventKind::LaunchIntended {
                node: node(),
                attempt: 2,
                cgroup: None,
            },
        ));
        let state = replay(&events).unwrap();
        assert!(state.uncertain_attempts().is_empty(), "superseded");
        assert_eq!(
            state.root().tasks["a"].attempts[0].phase,
            AttemptPhase::InterruptedUncertain,
            "the history keeps it"
        );
    }

    #[test]
    fn replay_tracks_attempts_exits_and_outputs() {
        let events = vec![
            created(&["a"]),
            ev(
                2,
                EventKind::LaunchIntended {
                    node: "a".into(),
                    attempt: 1,
                    cgroup: None,
                },
            ),
            ev(
                3,
                EventKind::Launched {
                    node: "a".into(),
                    attempt: 1,
                    process: ProcessIdentity {
                        pid: 10,
                        pgid: 10,
                        start_time: 5,
                    },
                },
            ),
            ev(
                4,
                EventKind::AttemptFinished {
                    node: "a".into(),
                    attempt: 1,
                    state: NodeState::Success,
                    reason: None,
                    exit: Some(ExitRecord::Code { code: 0 }),
                    stdout: None,
                    stderr: None,
                    output: Some(Data::Int(3)),
                    output_artifact: None,
                },
            ),
        ];
        let state = replay(&events).unwrap();
        let root = state.root();
        assert_eq!(root.node_state("a"), Some(NodeState::Success));
        assert_eq!(root.command_exits.get("a"), Some(&0));
        assert_eq!(root.outputs.get("a"), Some(&Data::Int(3)));
        assert_eq!(root.completions["a"].attempt, Some(1));
        assert_eq!(state.last_event_sequence, 4);
        assert_eq!(root.tasks["a"].attempts[0].process.unwrap().pid, 10);
    }

    #[test]
    fn gaps_and_foreign_nodes_are_inconsistencies() {
        let mut state = replay(&[created(&["a"])]).unwrap();
        let gap = ev(
            3,
            EventKind::LaunchIntended {
                node: "a".into(),
                attempt: 1,
                cgroup: None,
            },
        );
        assert!(matches!(
            apply(&mut state, &gap),
            Err(StateError::Sequence { seq: 3, last: 1 })
        ));
        let unknown = ev(
            2,
            EventKind::LaunchIntended {
                node: "zz".into(),
                attempt: 1,
                cgroup: None,
            },
        );
        assert!(matches!(
            apply(&mut state, &unknown),
            Err(StateError::UnknownNode { .. })
        ));
        let skip = ev(
            2,
            EventKind::LaunchIntended {
                node: "a".into(),
                attempt: 2,
                cgroup: None,
            },
        );
        assert!(matches!(
            apply(&mut state, &skip),
            Err(StateError::Attempt { .. })
        ));
        let not_first = ev(
            1,
            EventKind::LifecycleChanged {
                lifecycle: Lifecycle::Running,
            },
        );
        assert!(matches!(
            replay(&[not_first]),
            Err(StateError::Creation { .. })
        ));
    }

    #[test]
    fn event_json_names_the_kind() {
        let e = ev(
            2,
            EventKind::LaunchIntended {
                node: "a".into(),
                attempt: 1,
                cgroup: None,
            },
        );
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["event"], "launch_intended");
        assert_eq!(json["seq"], 2);
        let back: Event = serde_json::from_value(json).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn counters_and_hook_failures_replay_and_leave_nodes_alone() {
        let mut counters = EscalationCounters::new();
        counters.record_denial();
        counters.record_denial();
        let failure = HookFailureRecord {
            event: "workflow_node_finished".into(),
            hook_id: "notify".into(),
            scope: "user".into(),
            node: Some("a".into()),
            attempt: Some(1),
            detail: "exited with status 1".into(),
        };
        let events = vec![
            created(&["a"]),
            ev(2, EventKind::EscalationCounters { counters }),
            ev(
                3,
                EventKind::HookFailed {
                    failure: failure.clone(),
                },
            ),
        ];
        let state = replay(&events).unwrap();
        assert_eq!(state.escalation, Some(counters));
        assert_eq!(state.hook_failures, vec![failure]);
        assert_eq!(state.root().tasks["a"].state, NodeState::Pending);
        let json = serde_json::to_value(&events[1]).unwrap();
        assert_eq!(json["event"], "escalation_counters");
        assert_eq!(json["counters"]["consecutive_denials"], 2);
        assert_eq!(
            serde_json::to_value(&events[2]).unwrap()["event"],
            "hook_failed"
        );

        // A snapshot written before these fields existed still reads.
        let mut old = serde_json::to_value(State::empty()).unwrap();
        old.as_object_mut().unwrap().remove("escalation");
        let back: State = serde_json::from_value(old).unwrap();
        assert_eq!(back, State::empty());
    }
}
