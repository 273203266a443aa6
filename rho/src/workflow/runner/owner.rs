//! The owner loop: the single thread that holds `mutation.lock`, writes the journal, runs
//! scheduling passes and starts workers, and tells the run-level observers (hooks on
//! `workflow_started`, `workflow_completed`, `workflow_failed`, `workflow_cancelled`) what
//! happened, journaling their failures as `hook_failed` without acting on them.
//!
//! Invariant: every state change goes journal-first (`append` then `apply` to the in-memory
//! state, so memory always equals a replay of the journal); the journal is synced once per
//! pass that launches, and a worker's attempt starts nothing before that sync succeeded (its
//! gate), so a durable `launch_intended` precedes every process; `state.json` is written only for a durable prefix of the journal.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use rho_ipc::data::Data;
use rho_ipc::program::{Execution, FrozenProgram, ROOT_SCOPE_ID};
use rho_policy::HookEventName;
use rho_policy::hooks::HostLabels;

use super::ahead::{Ahead, DirsAhead, Made};
use super::authorize::HookFailure;
use super::pool::WorkerPool;
use super::worker::{self, DurableGate, Finished, Shared, Work, WorkerMsg};
use super::{ProgressSink, RunError, signals, template};
use crate::workflow::exec::CancelToken;
use crate::workflow::journal::Journal;
use crate::workflow::scheduler;
use crate::workflow::state::{
    EventKind, ExportValue, HookFailureRecord, Lifecycle, NodeState, Outcome, ScopeResult, State,
    apply,
};
use crate::workflow::store::ids;
use crate::workflow::store::runs::RunDir;

/// How long the owner waits for a worker before it looks for cancellation again (the spec
/// asks for pickup within 100 ms).
const POLL: Duration = Duration::from_millis(50);

/// How often at most the owner looks for a cancellation request file while it is busy (a
/// signal is seen at every step). With [`POLL`] this keeps pickup well within the spec's
/// 100 ms, and spares a run of short nodes a file lookup per step.
const CANCEL_FILE_EVERY: Duration = Duration::from_millis(10);

/// Journal records between two snapshots.
const SNAPSHOT_EVERY: u64 = 1024;

/// What the loop ended with.
pub(super) struct Ended {
    pub outcome: Outcome,
    pub cancelled_by: Option<String>,
    /// Cancellation requests (from `cancel`) this owner completed: their acknowledgements
    /// are published once the run lock is released, never before.
    pub acknowledge: Vec<String>,
}

pub(super) struct Owner<'p> {
    pub run: Arc<RunDir>,
    pub program: Arc<FrozenProgram>,
    pub journal: Journal,
    pub state: State,
    pub shared: Arc<Shared>,
    pub progress: &'p mut dyn ProgressSink,
    pub watch_signals: bool,
    tx: Sender<WorkerMsg>,
    rx: Receiver<WorkerMsg>,
    active: HashMap<String, CancelToken>,
    snapshot_seq: u64,
    cancelling: Option<String>,
    /// The program's node index, so a pass does not look nodes up by id.
    scheduler: scheduler::Scheduler,
    /// The order of the latest classifier counters journaled by this owner.
    counters_order: u64,
    /// The threads attempts run on.
    pool: WorkerPool,
    /// Whether the state changed, since the last scheduling pass, in a way a pass reads
    /// (anything but the records of the pass itself and the kinds that change no node
    /// state: `launched`, counters, hook failures, snapshots).
    pass_needed: bool,
    /// Makes the directories of nodes still to run ahead of their launches.
    ahead: Option<DirsAhead>,
    /// Every node's state in program order, kept current record by record for the passes.
    node_states: scheduler::NodeStates,
    /// When the owner last looked for a cancellation request file.
    cancel_file_checked: Option<Instant>,
}

struct Job {
    index: usize,
    attempt: u32,
    work: Work,
}

impl<'p> Owner<'p> {
    pub(super) fn new(
        run: Arc<RunDir>,
        program: Arc<FrozenProgram>,
        journal: Journal,
        state: State,
        shared: Arc<Shared>,
        progress: &'p mut dyn ProgressSink,
        watch_signals: bool,
    ) -> Self {
        let (tx, rx) = channel();
        let snapshot_seq = state.last_event_sequence;
        let scheduler = scheduler::Scheduler::new(&program);
        let node_states = scheduler.node_states(&program, state.root());
        Owner {
            run,
            program,
            journal,
            state,
            shared,
            progress,
            watch_signals,
            tx,
            rx,
            active: HashMap::new(),
            snapshot_seq,
            cancelling: None,
            scheduler,
            counters_order: 0,
            pool: WorkerPool::new(),
            pass_needed: true,
            ahead: None,
            node_states,
            cancel_file_checked: None,
        }
    }

    /// Journals one event, folds it into the state and reports it.
    pub(super) fn record(&mut self, kind: EventKind) -> Result<(), RunError> {
        let event = self.journal.append(kind)?;
        apply(&mut self.state, &event)?;
        // A record about one node changes that node's state only; any other is read whole.
        match record_node(&event.kind) {
            Some(node) => self
                .scheduler
                .refresh(&mut self.node_states, self.state.root(), node),
            None => {
                self.node_states = self.scheduler.node_states(&self.program, self.state.root());
            }
        }
        if !matches!(
            event.kind,
            EventKind::Launched { .. }
                | EventKind::EscalationCounters { .. }
                | EventKind::HookFailed { .. }
                | EventKind::SnapshotWritten { .. }
        ) {
            self.pass_needed = true;
        }
        crate::workflow::crashpoint::reached_named("record", event.kind.name());
        self.progress.event(&event, &self.state);
        Ok(())
    }

    /// Makes the journal durable and writes the snapshot for it.
    pub(super) fn checkpoint(&mut self) -> Result<(), RunError> {
        self.journal.sync()?;
        self.snapshot()
    }

    /// Writes the snapshot of a durable journal, then journals the snapshot's digest (handed
    /// to the kernel, made durable with the next sync): `status` trusts a snapshot the
    /// journal vouches for and reads only the records after it. Losing that record costs a
    /// reader a full replay, never a wrong state.
    fn snapshot(&mut self) -> Result<(), RunError> {
        let sha256 = self.run.write_state(&self.state)?;
        self.snapshot_seq = self.state.last_event_sequence;
        self.record(EventKind::SnapshotWritten { sha256 })?;
        self.journal.write()?;
        Ok(())
    }

    /// Runs the observers of a run-level event and journals their failures; they change
    /// nothing else.
    pub(super) fn observe(&mut self, event: HookEventName) -> Result<(), RunError> {
        let labels = HostLabels {
            workflow_run_id: Some(self.run.id().to_owned()),
            plan_digest: Some(self.shared.program_digest.clone()),
            node_id: None,
            attempt: None,
        };
        // Hooks may take a while: what happened before them is shown first.
        self.progress.flush();
        let failures = self.shared.observer.observe(event, &labels);
        self.record_hook_failures(event, None, None, failures)
    }

    fn record_hook_failures(
        &mut self,
        event: HookEventName,
        node: Option<&str>,
        attempt: Option<u32>,
        failures: Vec<HookFailure>,
    ) -> Result<(), RunError> {
        for f in failures {
            self.record(EventKind::HookFailed {
                failure: HookFailureRecord {
                    event: event.as_str().to_owned(),
                    hook_id: f.hook_id,
                    scope: f.scope,
                    node: node.map(str::to_owned),
                    attempt,
                    detail: f.detail,
                },
            })?;
        }
        Ok(())
    }

    /// Drives the run until the root scope closes.
    pub(super) fn drive(&mut self) -> Result<Ended, RunError> {
        let ended = self.drive_passes();
        self.progress.flush();
        // The scratch directories kept for reuse go with the run, however it ended (an
        // attempt still running removes its own when it ends).
        self.shared.confinements.clear();
        ended
    }

    fn drive_passes(&mut self) -> Result<Ended, RunError> {
        self.observe(HookEventName::WorkflowStarted)?;
        // The nodes still to run, in the order they are expected to launch, with the cgroup
        // their first attempt gets.
        let contained = crate::containment::owner_root().is_ok();
        let to_run: Vec<Ahead> = crate::workflow::describe::node_order(&self.program)
            .into_iter()
            .filter(|id| {
                self.state
                    .root()
                    .tasks
                    .get(id)
                    .is_some_and(|t| t.attempts.is_empty() && !t.state.is_terminal())
            })
            .map(|node| {
                let command = self
                    .program
                    .root
                    .nodes
                    .binary_search_by(|n| n.id.as_str().cmp(&node))
                    .is_ok_and(|i| {
                        !matches!(
                            self.program.root.nodes[i].execution,
                            Execution::Agent { .. }
                        )
                    });
                let cgroup =
                    (contained && command).then(|| attempt_cgroup(self.run.id(), &node, 1));
                Ahead { node, cgroup }
            })
            .collect();
        self.ahead = Some(DirsAhead::start(Arc::clone(&self.run), to_run));
        loop {
            while let Ok(msg) = self.rx.try_recv() {
                self.handle(msg)?;
            }
            if self.cancelling.is_none() {
                self.check_cancel()?;
            }
            let mut starts = Vec::new();
            let mut progressed = false;
            if self.cancelling.is_none() && self.pass_needed {
                let pass =
                    self.scheduler
                        .pass_with(&self.program, self.state.root(), &self.node_states);
                progressed |= !pass.decisions.is_empty();
                for d in pass.decisions {
                    self.record(EventKind::NodeStateChanged {
                        node: d.node,
                        state: d.state,
                        reason: d.reason,
                    })?;
                }
                // A pass decides pending nodes until nothing changes and launches what the
                // capacity admits, so a pass over the state its own records leave finds
                // nothing more: the next one waits for a change from elsewhere (an attempt's
                // end; one that ended while being prepared counts).
                let mut unprepared = false;
                for id in pass.launches {
                    progressed = true;
                    match self.prepare(&id)? {
                        Some(job) => starts.push(job),
                        None => unprepared = true,
                    }
                }
                self.pass_needed = unprepared;
            } else if self.cancelling.is_none() {
                debug_assert_eq!(
                    self.scheduler.pass(&self.program, self.state.root()),
                    scheduler::Pass::default(),
                    "a pass was skipped that would have decided or launched something"
                );
            } else {
                progressed |= self.cancel_unstarted()?;
            }
            // Durable before any process starts: one sync for the whole pass, made while the
            // pass's workers prepare their attempts (each waits for the gate before anything
            // of its attempt starts). A pass that starts nothing only hands its records to
            // the kernel: that survives the owner being killed, and after a machine crash an
            // unsynced record can only leave an attempt uncertain (every process is gone
            // then), never a false success. Its records become durable with the next launch,
            // a checkpoint or the close.
            self.journal.write()?;
            if !starts.is_empty() {
                let gate = Arc::new(DurableGate::default());
                for job in starts {
                    self.start(job, &gate);
                }
                let synced = self.journal.sync();
                let started = gate.open(synced.is_ok());
                synced?;
                // Started by this thread from the gate: their identity is journaled now,
                // before any message of their workers is read.
                for s in started {
                    self.record(EventKind::Launched {
                        node: s.node,
                        attempt: s.attempt,
                        process: s.process,
                    })?;
                }
            }
            // What this step printed goes out once its processes were let start.
            self.progress.flush();
            if self.journal.synced_sequence() >= self.snapshot_seq + SNAPSHOT_EVERY
                && !self.journal.has_unsynced()
            {
                self.snapshot()?;
            }
            if self.active.is_empty() {
                if let Some(outcome) = scheduler::outcome(&self.program, self.state.root()) {
                    // Workers finish their attempt's files after reporting its end: a
                    // closed run has them all.
                    self.pool.wait_idle();
                    self.remove_unused_dirs();
                    let acknowledge = self.close(outcome)?;
                    return Ok(Ended {
                        outcome,
                        cancelled_by: self.cancelling.clone(),
                        acknowledge,
                    });
                }
                if !progressed {
                    return Err(RunError::Stalled {
                        run_id: self.run.id().to_owned(),
                        pending: self
                            .state
                            .root()
                            .tasks
                            .iter()
                            .filter(|(_, t)| !t.state.is_terminal())
                            .map(|(id, _)| id.clone())
                            .collect(),
                    });
                }
                continue;
            }
            match self.rx.recv_timeout(POLL) {
                Ok(msg) => self.handle(msg)?,
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    self.progress.tick(&self.state);
                }
            }
        }
    }

    /// Stops making directories ahead and removes the ones made for nodes that never
    /// started (skipped, blocked, cancelled).
    fn remove_unused_dirs(&mut self) {
        let Some(ahead) = self.ahead.take() else {
            return;
        };
        let started = |node: &str| {
            self.state
                .root()
                .tasks
                .get(node)
                .is_some_and(|t| !t.attempts.is_empty())
        };
        let unused = ahead.finish();
        for (node, made) in unused.made {
            // A cgroup made for an attempt that started is that attempt's to remove.
            if !started(&node)
                && let Some(cgroup) = made.cgroup
                && let Err(e) = cgroup.remove()
            {
                tracing::warn!(node = %node, "cannot remove the unused cgroup: {e}");
            }
        }
        for node in unused.created {
            if !started(&node)
                && let Err(e) = self.run.remove_unused_node_dir(&node)
            {
                tracing::warn!(node = %node, "cannot remove the unused node directory: {e}");
            }
        }
    }

    fn check_cancel(&mut self) -> Result<(), RunError> {
        let request = if let Some(signal) = self.watch_signals.then(signals::received).flatten() {
            Some(format!("signal-{}", signal_name(signal)))
        } else if self.cancel_file_due() && self.run.has_cancel_request() {
            Some(match self.run.read_cancel_request()? {
                Some(r) => r.request_id,
                None => return Ok(()),
            })
        } else {
            None
        };
        if let Some(request_id) = request {
            self.begin_cancel(request_id)?;
        }
        Ok(())
    }

    /// Whether the cancellation request file is to be looked for now (the first time, then
    /// once per [`CANCEL_FILE_EVERY`]).
    fn cancel_file_due(&mut self) -> bool {
        let now = Instant::now();
        if self
            .cancel_file_checked
            .is_some_and(|at| now.duration_since(at) < CANCEL_FILE_EVERY)
        {
            return false;
        }
        self.cancel_file_checked = Some(now);
        true
    }

    /// Stops new launches, records the intent and stops every active attempt.
    pub(super) fn begin_cancel(&mut self, request_id: String) -> Result<(), RunError> {
        self.record(EventKind::CancelRequested {
            request_id: request_id.clone(),
        })?;
        self.record(EventKind::LifecycleChanged {
            lifecycle: Lifecycle::Cancelling,
        })?;
        self.journal.sync()?;
        for token in self.active.values() {
            token.cancel();
        }
        // After the tokens: a worker whose prompt is abandoned finds its attempt cancelled.
        self.shared.authorizer.abandon_approvals();
        self.cancelling = Some(request_id);
        Ok(())
    }

    /// Nodes that never started end in `cancellation` once the run is cancelling.
    fn cancel_unstarted(&mut self) -> Result<bool, RunError> {
        let unstarted: Vec<String> = self
            .state
            .root()
            .tasks
            .iter()
            .filter(|(_, t)| matches!(t.state, NodeState::Pending | NodeState::Ready))
            .map(|(id, _)| id.clone())
            .collect();
        let any = !unstarted.is_empty();
        for node in unstarted {
            self.record(EventKind::NodeStateChanged {
                node,
                state: NodeState::Cancellation,
                reason: Some("the run was cancelled before the node started".to_owned()),
            })?;
        }
        Ok(any)
    }

    fn prepare(&mut self, id: &str) -> Result<Option<Job>, RunError> {
        let program = Arc::clone(&self.program);
        let Ok(index) = program
            .root
            .nodes
            .binary_search_by(|n| n.id.as_str().cmp(id))
        else {
            return Err(RunError::Internal(format!(
                "the scheduler launched unknown node `{id}`"
            )));
        };
        let node = &program.root.nodes[index];
        let attempt = self
            .state
            .root()
            .tasks
            .get(id)
            .map_or(0, |t| u32::try_from(t.attempts.len()).unwrap_or(u32::MAX))
            .saturating_add(1);
        let budgets = &program.budgets;
        let rendered = match &node.execution {
            Execution::Command { argv0, args, .. } => {
                template::render_argv(argv0, args, self.state.root(), budgets).map(|argv| {
                    Work::Command {
                        argv,
                        cgroup: None,
                        made: None,
                    }
                })
            }
            Execution::Shell {
                executable,
                arguments,
                command,
                ..
            } => {
                let mut argv = Vec::with_capacity(arguments.len() + 2);
                argv.push(executable.clone());
                argv.extend(arguments.iter().cloned());
                argv.push(command.clone());
                let total: u64 = argv.iter().map(|a| a.len() as u64 + 1).sum();
                budgets
                    .check("expanded_argv_bytes", total)
                    .map(|()| Work::Command {
                        argv,
                        cgroup: None,
                        made: None,
                    })
                    .map_err(|o| format!("argv: {o}"))
            }
            Execution::Agent { prompt, .. } => {
                template::render_prompt(prompt, self.state.root(), budgets)
                    .map(|prompt| Work::Agent { prompt })
            }
        };
        // A command's whole tree runs in a cgroup named now, so the record that precedes
        // the process already says where to look for anything it leaves behind.
        let mut rendered = rendered;
        let mut cgroup_path = None;
        if let (Ok(Work::Command { cgroup, .. }), Ok(root)) =
            (&mut rendered, crate::containment::owner_root())
        {
            let name = attempt_cgroup(self.run.id(), id, attempt);
            cgroup_path = Some(root.child_path(&name));
            *cgroup = Some(name);
        }
        self.record(EventKind::LaunchIntended {
            node: id.to_owned(),
            attempt,
            cgroup: cgroup_path,
        })?;
        // What was made ahead for a first attempt goes to it.
        let made = match &self.ahead {
            Some(ahead) => {
                ahead.launched();
                (attempt == 1).then(|| ahead.take(id)).flatten()
            }
            None => None,
        };
        let rendered = match (rendered, made) {
            (Ok(Work::Command { argv, cgroup, .. }), made) => {
                Ok(Work::Command { argv, cgroup, made })
            }
            (
                other,
                Some(Made {
                    cgroup: Some(c), ..
                }),
            ) => {
                // Nothing of this attempt runs in it.
                if let Err(e) = c.remove() {
                    tracing::warn!(node = %id, "cannot remove the unused cgroup: {e}");
                }
                other
            }
            (other, _) => other,
        };
        match rendered {
            Ok(work) => Ok(Some(Job {
                index,
                attempt,
                work,
            })),
            Err(reason) => {
                self.finish(id, attempt, Finished::failed(reason))?;
                Ok(None)
            }
        }
    }

    fn start(&mut self, job: Job, durable: &Arc<DurableGate>) {
        let token = CancelToken::new();
        let node_id = self.program.root.nodes[job.index].id.clone();
        self.active.insert(node_id, token.clone());
        let shared = Arc::clone(&self.shared);
        let program = Arc::clone(&self.program);
        let tx = self.tx.clone();
        let durable = Arc::clone(durable);
        self.pool.run(move || {
            let node = &program.root.nodes[job.index];
            worker::run(&shared, node, job.attempt, job.work, &durable, &token, &tx);
        });
    }

    fn handle(&mut self, msg: WorkerMsg) -> Result<(), RunError> {
        match msg {
            WorkerMsg::Launched {
                node,
                attempt,
                process,
            } => self.record(EventKind::Launched {
                node,
                attempt,
                process,
            }),
            WorkerMsg::Counters(update) => {
                // Workers report concurrently: only a newer decision's counters count.
                if update.order <= self.counters_order {
                    return Ok(());
                }
                self.counters_order = update.order;
                self.record(EventKind::EscalationCounters {
                    counters: update.counters,
                })
            }
            WorkerMsg::HookFailed {
                event,
                node,
                attempt,
                failures,
            } => self.record_hook_failures(event, Some(&node), Some(attempt), failures),
            WorkerMsg::Finished {
                node,
                attempt,
                result,
            } => {
                self.active.remove(&node);
                self.finish(&node, attempt, *result)
            }
        }
    }

    fn finish(&mut self, node: &str, attempt: u32, result: Finished) -> Result<(), RunError> {
        if let Some(denial) = result.denial {
            return self.record(EventKind::NodeDenied {
                node: node.to_owned(),
                attempt,
                denial,
            });
        }
        self.record(EventKind::AttemptFinished {
            node: node.to_owned(),
            attempt,
            state: result.state.unwrap_or(NodeState::Failure),
            reason: result.reason,
            exit: result.exit,
            stdout: result.stdout,
            stderr: result.stderr,
            output: result.output,
            output_artifact: result.output_artifact,
        })
    }

    /// Closes the root scope (outcome and resolved exports) and completes the run. For a
    /// cancellation it journals `cancel_completed`, writes the final state and removes the
    /// request, and returns the request ids whose acknowledgement the caller publishes after
    /// releasing the run lock (the spec's order: release, then acknowledge).
    fn close(&mut self, outcome: Outcome) -> Result<Vec<String>, RunError> {
        let mut exports = std::collections::BTreeMap::new();
        for (name, export) in &self.program.root.exports {
            let value = match scheduler::resolve(self.state.root(), &export.reference) {
                Ok(value) => ExportValue {
                    value,
                    available: true,
                    note: None,
                },
                Err(why) => ExportValue {
                    value: Data::Null,
                    available: false,
                    note: Some(why),
                },
            };
            exports.insert(name.clone(), value);
        }
        self.record(EventKind::ScopeClosed {
            scope: ROOT_SCOPE_ID.to_owned(),
            result: ScopeResult { outcome, exports },
        })?;
        self.record(EventKind::LifecycleChanged {
            lifecycle: Lifecycle::Completed,
        })?;
        // The run is decided and durable in memory; observers learn of it while this owner
        // still holds the run, so their failures reach the journal before it closes.
        self.observe(match outcome {
            Outcome::Success => HookEventName::WorkflowCompleted,
            Outcome::Cancellation => HookEventName::WorkflowCancelled,
            Outcome::Failure | Outcome::Denial | Outcome::Blocked => HookEventName::WorkflowFailed,
        })?;
        let Some(request_id) = self.cancelling.clone() else {
            self.record(EventKind::OwnerClosed {
                reason: "completed".to_owned(),
            })?;
            self.checkpoint()?;
            return Ok(Vec::new());
        };
        // A request that `cancel` wrote while this one was being handled (or while a signal's
        // was) is answered by the same cleanup. A signal's own id has nobody waiting for it.
        let mut acknowledge: Vec<String> = Vec::new();
        if ids::is_id(&request_id) {
            acknowledge.push(request_id.clone());
        }
        if let Ok(Some(file)) = self.run.read_cancel_request()
            && file.request_id != request_id
        {
            acknowledge.push(file.request_id);
        }
        self.record(EventKind::CancelCompleted { request_id })?;
        self.record(EventKind::OwnerClosed {
            reason: "cancelled".to_owned(),
        })?;
        self.checkpoint()?;
        self.run.remove_cancel_request()?;
        Ok(acknowledge)
    }
}

/// The name (below the owner's root) of the cgroup a command attempt's tree runs in.
pub(super) fn attempt_cgroup(run_id: &str, node: &str, attempt: u32) -> String {
    format!("{run_id}.{node}.{attempt}")
}

/// The node a record is about, when it names one.
fn record_node(kind: &EventKind) -> Option<&str> {
    match kind {
        EventKind::NodeStateChanged { node, .. }
        | EventKind::LaunchIntended { node, .. }
        | EventKind::Launched { node, .. }
        | EventKind::AttemptFinished { node, .. }
        | EventKind::NodeDenied { node, .. }
        | EventKind::AttemptUncertain { node, .. } => Some(node),
        _ => None,
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}
