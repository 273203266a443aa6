//! One attempt of one node, on its own thread: the node's observational hooks,
//! authorization, checkout access, verification, spawn, supervision and output validation
//! for commands; the agent executor for agents. The worker reports to the owner over a
//! channel (including classifier counters and hook failures) and never writes the journal.
//!
//! Invariant: nothing of an attempt (its process, its agent) starts before the owner made
//! its `launch_intended` durable (the worker prepares meanwhile, then waits for the pass's
//! [`DurableGate`]), and the process identity reaches the journal while the process may
//! still run: the owner journals it when it started the process from the gate, else the
//! worker reports `Launched` before waiting. Once its attempt is cancelled, whatever ends
//! the attempt before a process runs (a refusal from an abandoned prompt included) ends it
//! in `cancellation`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use rho_ipc::data::Data;
use rho_ipc::digest::sha256_tagged;
use rho_ipc::program::{Execution, FrozenProgram, Node, Schema};
use rho_policy::hooks::HostLabels;
use rho_policy::{CommandRequest, ExecutableIdentity, HookEventName, InterpreterIdentity};

use super::agent::{AgentExecutor, AgentRequest};
use super::authorize::{CommandAuthorizer, CountersUpdate, HookFailure, RunObserver, Verdict};
use super::output::parse_stdout_json;
use crate::confinement::{Confinement, ConfinementRequest, NodeConfinements, ScratchLease};
use crate::workflow::checkout::{CheckoutError, CheckoutLock};
use crate::workflow::exec::{self, CancelToken, CommandExit, CommandSpec, StreamArtifact};
use crate::workflow::identity::{display_location, workspace_path};
use crate::workflow::plan::error_chain;
use crate::workflow::state::{Artifact, DenialRecord, ExitRecord, NodeState, ProcessIdentity};
use crate::workflow::store::StoreError;
use crate::workflow::store::fs::PrivateDir;
use crate::workflow::store::runs::RunDir;

/// One attempt's directory, created and opened at most once however many artifacts the
/// attempt writes (each opening walks and checks every level of the store).
struct AttemptDir<'a> {
    run: &'a RunDir,
    node: &'a str,
    attempt: u32,
    dir: std::cell::OnceCell<PrivateDir>,
}

impl<'a> AttemptDir<'a> {
    fn new(run: &'a RunDir, node: &'a str, attempt: u32) -> Self {
        Self {
            run,
            node,
            attempt,
            dir: std::cell::OnceCell::new(),
        }
    }

    fn get(&self) -> Result<&PrivateDir, StoreError> {
        if let Some(dir) = self.dir.get() {
            return Ok(dir);
        }
        let dir = self.run.attempt_dir(self.node, self.attempt)?;
        Ok(self.dir.get_or_init(|| dir))
    }
}

/// What an attempt leaves to do once it reported its end (off the path to the next launch).
#[derive(Default)]
struct Tail {
    /// The attempt's cgroup, killed and checked empty before its leader was reaped: removed
    /// here.
    cgroup: Option<crate::containment::Cgroup>,
}

impl Tail {
    fn finish(&mut self) {
        if let Some(cgroup) = self.cgroup.take()
            && let Err(e) = cgroup.remove()
        {
            tracing::warn!("{e}");
        }
    }
}

/// What every worker of one run shares.
pub(super) struct Shared {
    pub run: Arc<RunDir>,
    pub program: Arc<FrozenProgram>,
    pub program_digest: String,
    pub workspace: PathBuf,
    /// The workspace directory and node directories recorded with the run, checked at
    /// every launch.
    pub workspace_identity: crate::workflow::store::plans::WorkspaceIdentity,
    pub env: Arc<Vec<(OsString, OsString)>>,
    pub authorizer: Arc<dyn CommandAuthorizer>,
    pub observer: Arc<dyn RunObserver>,
    pub agents: Arc<dyn AgentExecutor>,
    pub checkout: Option<Arc<CheckoutLock>>,
    /// The run's sealed copies of its frozen executables, each verified at its first use.
    pub executables: exec::VerifiedExecutables,
    /// Confined nodes' scratch directories and prepared confinements, reused across attempts.
    pub confinements: NodeConfinements,
}

/// Opened by the owner once the `launch_intended` records of a scheduling pass are durable
/// (or could not be made so). A worker prepares its attempt meanwhile (authorization,
/// checkout access, verification, directories) and waits for it right before anything of
/// the attempt starts, so the owner's sync and the preparation overlap while no process
/// ever precedes its durable record.
///
/// A command prepared before the gate opened is handed to the gate ([`DurableGate::start`])
/// and the owner starts it on its own thread right after the sync ([`DurableGate::open`]),
/// then journals its process: on the path from the sync to the process there is then no
/// wake-up of the worker, and the owner is not woken again for the `launched` record. The
/// owner's thread lives until the run ends, after every attempt's process is gone, so the
/// child's parent-death signal may be bound to it. A command prepared after the gate
/// opened is started by its worker, as an agent always is.
#[derive(Default)]
pub(super) struct DurableGate {
    state: std::sync::Mutex<GateState>,
    opened: std::sync::Condvar,
}

impl std::fmt::Debug for DurableGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableGate").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct GateState {
    /// `None` until the owner opened the gate; then whether the records are durable.
    durable: Option<bool>,
    /// Commands handed over before the gate opened, by ticket.
    parked: Vec<(u64, ParkedCommand)>,
    /// What the owner's start of a handed-over command gave, by ticket.
    started: Vec<(u64, Result<exec::RunningCommand, exec::ExecError>)>,
    next_ticket: u64,
}

/// A prepared command waiting for the owner to start it.
struct ParkedCommand {
    node: String,
    attempt: u32,
    command: exec::PreparedCommand,
}

/// A process the owner started from the gate, to journal as `launched`.
pub(super) struct StartedByOwner {
    pub node: String,
    pub attempt: u32,
    pub process: ProcessIdentity,
}

/// How a prepared command got past the gate.
enum Passed {
    /// The records could not be made durable: nothing was started.
    NotDurable,
    /// Started on this worker's thread; its `launched` record is the worker's to report.
    ByWorker(Result<exec::RunningCommand, exec::ExecError>),
    /// Started by the owner, which journaled its `launched` record.
    ByOwner(Result<exec::RunningCommand, exec::ExecError>),
}

impl DurableGate {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records whether the pass's records are durable, starts (on the calling thread, the
    /// owner's) every command handed over before, and wakes every waiting worker. Returns
    /// the processes started, for the owner to journal.
    pub(super) fn open(&self, durable: bool) -> Vec<StartedByOwner> {
        let parked = {
            let mut state = self.lock();
            state.durable = Some(durable);
            std::mem::take(&mut state.parked)
        };
        let mut journal = Vec::new();
        let mut started = Vec::with_capacity(parked.len());
        if durable {
            for (ticket, parked) in parked {
                let result = launch_past_gate(parked.command);
                if let Ok(running) = &result {
                    journal.push(StartedByOwner {
                        node: parked.node,
                        attempt: parked.attempt,
                        process: running.process(),
                    });
                }
                started.push((ticket, result));
            }
        } else {
            // Dropping a prepared command starts nothing; its workers find it gone.
            drop(parked);
        }
        let mut state = self.lock();
        state.started.extend(started);
        self.opened.notify_all();
        journal
    }

    /// Blocks until the owner opened the gate; whether the records are durable.
    fn wait(&self) -> bool {
        let mut state = self.lock();
        loop {
            if let Some(durable) = state.durable {
                return durable;
            }
            state = self
                .opened
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Starts `command` once the records are durable: on this thread when the gate is
    /// already open, else through the owner when it opens the gate.
    fn start(&self, node: &str, attempt: u32, command: exec::PreparedCommand) -> Passed {
        let mut state = self.lock();
        let ticket = match state.durable {
            Some(true) => {
                drop(state);
                return Passed::ByWorker(launch_past_gate(command));
            }
            Some(false) => return Passed::NotDurable,
            None => {
                let ticket = state.next_ticket;
                state.next_ticket += 1;
                state.parked.push((
                    ticket,
                    ParkedCommand {
                        node: node.to_owned(),
                        attempt,
                        command,
                    },
                ));
                ticket
            }
        };
        loop {
            if let Some(i) = state.started.iter().position(|(t, _)| *t == ticket) {
                return Passed::ByOwner(state.started.swap_remove(i).1);
            }
            if state.durable == Some(false) {
                return Passed::NotDurable;
            }
            state = self
                .opened
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

/// Starts a command whose `launch_intended` record is durable.
fn launch_past_gate(
    command: exec::PreparedCommand,
) -> Result<exec::RunningCommand, exec::ExecError> {
    crate::workflow::crashpoint::reached("worker:spawn");
    let running = command.launch();
    crate::workflow::crashpoint::reached("worker:spawned");
    running
}

/// Why an attempt whose record could not be made durable ends without starting.
const NOT_DURABLE: &str =
    "the attempt's launch_intended record could not be made durable; nothing was started";

/// What to run, already rendered by the owner.
pub(super) enum Work {
    /// A command or shell node with its full argv, and the name of the cgroup (below this
    /// owner's root) its tree runs in, as `launch_intended` recorded it.
    Command {
        argv: Vec<String>,
        cgroup: Option<String>,
        /// The attempt's directory and empty cgroup, when they were made ahead.
        made: Option<super::ahead::Made>,
    },
    /// An agent node with its rendered prompt.
    Agent { prompt: String },
}

/// A command attempt's rendered work.
struct CommandWork<'a> {
    argv: Vec<String>,
    cgroup: Option<&'a str>,
    /// The cgroup named `cgroup`, made ahead (empty, never used).
    made_cgroup: Option<crate::containment::Cgroup>,
}

/// A message from a worker to the owner.
pub(super) enum WorkerMsg {
    /// The attempt's process started.
    Launched {
        node: String,
        attempt: u32,
        process: ProcessIdentity,
    },
    /// The classifier decided an attempt; its counters afterwards.
    Counters(CountersUpdate),
    /// Observational hooks failed for a node event.
    HookFailed {
        event: HookEventName,
        node: String,
        attempt: u32,
        failures: Vec<HookFailure>,
    },
    /// The attempt ended.
    Finished {
        node: String,
        attempt: u32,
        result: Box<Finished>,
    },
}

/// How an attempt ended.
#[derive(Debug, Clone, Default)]
pub(super) struct Finished {
    pub state: Option<NodeState>,
    pub reason: Option<String>,
    pub exit: Option<ExitRecord>,
    pub stdout: Option<Artifact>,
    pub stderr: Option<Artifact>,
    pub output: Option<Data>,
    pub output_artifact: Option<Artifact>,
    pub denial: Option<DenialRecord>,
}

impl Finished {
    pub(super) fn failed(reason: impl Into<String>) -> Self {
        Finished {
            state: Some(NodeState::Failure),
            reason: Some(reason.into()),
            ..Self::default()
        }
    }

    /// What `status.json` shows of this end (everything but the output value itself).
    fn status_copy(&self) -> Self {
        Finished {
            state: self.state,
            reason: self.reason.clone(),
            exit: self.exit.clone(),
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
            output: None,
            output_artifact: self.output_artifact.clone(),
            denial: self.denial.clone(),
        }
    }

    fn cancelled(reason: impl Into<String>) -> Self {
        Finished {
            state: Some(NodeState::Cancellation),
            reason: Some(reason.into()),
            ..Self::default()
        }
    }
}

/// Runs one attempt to its end and reports it.
pub(super) fn run(
    shared: &Shared,
    node: &Node,
    attempt: u32,
    work: Work,
    durable: &DurableGate,
    cancel: &CancelToken,
    tx: &Sender<WorkerMsg>,
) {
    observe(
        shared,
        HookEventName::WorkflowNodeStarted,
        node,
        attempt,
        tx,
    );
    let dir = AttemptDir::new(&shared.run, &node.id, attempt);
    let mut tail = Tail::default();
    let result = match work {
        Work::Command { argv, cgroup, made } => {
            let made_cgroup = made.and_then(|made| {
                let _ = dir.dir.set(made.dir);
                made.cgroup
            });
            // Removed after the attempt's end however far it got (it may end before its
            // tree is contained: a denial, a failed verification).
            tail.cgroup.clone_from(&made_cgroup);
            let command = CommandWork {
                argv,
                cgroup: cgroup.as_deref(),
                made_cgroup,
            };
            let parts = AttemptParts {
                dir: &dir,
                durable,
                cancel,
                tx,
                tail: &mut tail,
            };
            run_command(shared, node, attempt, command, parts)
        }
        Work::Agent { prompt } => {
            if durable.wait() {
                run_agent(shared, node, attempt, &dir, prompt, cancel)
            } else {
                Finished::failed(NOT_DURABLE)
            }
        }
    };
    if shared
        .observer
        .observes(HookEventName::WorkflowNodeFinished)
    {
        // A hook told of the node's end may read its status.json: written first.
        let _ = write_status(&dir, status_json(node, attempt, &result));
        tail.finish();
        observe(
            shared,
            HookEventName::WorkflowNodeFinished,
            node,
            attempt,
            tx,
        );
        let _ = tx.send(WorkerMsg::Finished {
            node: node.id.clone(),
            attempt,
            result: Box::new(result),
        });
    } else {
        // status.json is a convenience copy of what the journal records, and creating it
        // (a new file, so an inode) is one of the costliest steps of a trivial attempt:
        // it is written while the owner already journals this attempt's end and
        // schedules the next one (its content is encoded then too, from a copy). The owner
        // waits for every worker's job to end before it closes the run, so a finished run
        // has all its status files.
        let copy = result.status_copy();
        let _ = tx.send(WorkerMsg::Finished {
            node: node.id.clone(),
            attempt,
            result: Box::new(result),
        });
        let _ = write_status(&dir, status_json(node, attempt, &copy));
        tail.finish();
    }
}

/// Runs the observers of a node event on this worker's thread (so the owner loop keeps
/// watching for cancellation) and sends their failures to the owner for the journal.
fn observe(
    shared: &Shared,
    event: HookEventName,
    node: &Node,
    attempt: u32,
    tx: &Sender<WorkerMsg>,
) {
    if !shared.observer.observes(event) {
        return;
    }
    let labels = HostLabels {
        workflow_run_id: Some(shared.run.id().to_owned()),
        plan_digest: Some(shared.program_digest.clone()),
        node_id: Some(node.id.clone()),
        attempt: Some(attempt),
    };
    let failures = shared.observer.observe(event, &labels);
    if !failures.is_empty() {
        let _ = tx.send(WorkerMsg::HookFailed {
            event,
            node: node.id.clone(),
            attempt,
            failures,
        });
    }
}

/// One command attempt's parts, each borrowed from a different owner.
struct AttemptParts<'a> {
    dir: &'a AttemptDir<'a>,
    durable: &'a DurableGate,
    cancel: &'a CancelToken,
    tx: &'a Sender<WorkerMsg>,
    tail: &'a mut Tail,
}

fn run_command(
    shared: &Shared,
    node: &Node,
    attempt: u32,
    CommandWork {
        argv,
        cgroup,
        made_cgroup,
    }: CommandWork<'_>,
    AttemptParts {
        dir: attempt_dir,
        durable,
        cancel,
        tx,
        tail,
    }: AttemptParts<'_>,
) -> Finished {
    let (program, cwd) = match &node.execution {
        Execution::Command { program, cwd, .. } | Execution::Shell { program, cwd, .. } => {
            (program, cwd)
        }
        Execution::Agent { .. } => {
            return Finished::failed("internal: an agent node reached the command path");
        }
    };
    let timeout = Duration::from_secs(node.timeout_seconds);
    let request = CommandRequest {
        run_id: shared.run.id().to_owned(),
        plan_digest: shared.program_digest.clone(),
        node_id: node.id.clone(),
        attempt,
        executable: ExecutableIdentity {
            path: PathBuf::from(display_location(
                &program.file.location,
                Some(&shared.workspace),
            )),
            sha256: program.file.sha256.trim_start_matches("sha256:").to_owned(),
        },
        // A script is run by its frozen interpreter: hooks and approvers judge what runs.
        interpreter: program
            .interpreter
            .as_ref()
            .map(|interpreter| InterpreterIdentity {
                path: PathBuf::from(display_location(
                    &interpreter.file.location,
                    Some(&shared.workspace),
                )),
                sha256: interpreter
                    .file
                    .sha256
                    .trim_start_matches("sha256:")
                    .to_owned(),
                shebang: interpreter.shebang.clone(),
                arguments: interpreter.args.clone(),
            }),
        argv: argv.clone(),
        cwd: workspace_path(&shared.workspace, &cwd.path),
        environment_policy: shared.program.environment.name.clone(),
        timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        output_limit_bytes: node.max_output_bytes,
    };
    let decision = shared.authorizer.authorize(&request);
    if let Some(update) = decision.counters {
        let _ = tx.send(WorkerMsg::Counters(update));
    }
    // Cancellation requested while authorization was pending: a prompt abandoned for it
    // answers "no", and that refusal is the cancellation's doing, not a human's or policy's.
    // Nothing is launched after a cancellation either way.
    if cancel.is_cancelled() {
        return Finished::cancelled(match decision.verdict {
            Verdict::Allow => "cancelled before the process started",
            Verdict::Deny(_) => "cancelled while the attempt was being authorized",
        });
    }
    if let Verdict::Deny(denial) = decision.verdict {
        return Finished {
            state: Some(NodeState::Denial),
            reason: Some(denial.reason.clone()),
            denial: Some(denial),
            ..Finished::default()
        };
    }

    // Checkout access: waiting honours the node's timeout and cancellation.
    let _guard = match checkout_access(shared, node, timeout, cancel) {
        Ok(guard) => guard,
        Err(finished) => return *finished,
    };
    if cancel.is_cancelled() {
        return Finished::cancelled("cancelled before the process started");
    }

    let expected = exec::ExpectedDirectories {
        workspace: Some((
            shared.workspace_identity.device,
            shared.workspace_identity.inode,
        )),
        cwd: shared
            .workspace_identity
            .directories
            .get(&cwd.path)
            .map(|d| (d.device, d.inode)),
    };
    let launch = match exec::verify_with(
        &shared.workspace,
        expected,
        program,
        cwd,
        &shared.executables,
    ) {
        Ok(launch) => launch,
        Err(e) => {
            return failed_unless_cancelled(cancel, format!("verification failed: {e}"));
        }
    };
    let dir = match attempt_dir.get() {
        Ok(dir) => dir,
        Err(e) => {
            return failed_unless_cancelled(
                cancel,
                format!("cannot create the attempt directory: {e}"),
            );
        }
    };
    // Held until the process tree is gone; what the node left in it goes with it.
    let (scratch, confinement, env) = match confine(shared, node) {
        Ok(confined) => confined,
        Err(reason) => return failed_unless_cancelled(cancel, reason),
    };
    let mut spec = CommandSpec::new(
        argv.into_iter().map(OsString::from).collect(),
        env,
        timeout,
        node.max_output_bytes,
        dir.entry_path("stdout"),
        dir.entry_path("stderr"),
    );
    spec.cancel = cancel.clone();
    spec.artifact_dir = Some(dir.shared_fd());
    spec.confinement = confinement;
    // This thread waits for the command below and lives until the run ends (the owner's
    // worker pool), as does the owner's thread, which starts the command instead when it
    // was prepared before the gate opened: the child's parent-death signal may be bound to
    // either.
    spec.launch_on_this_thread = true;
    match contain_tree(shared, node, attempt, dir, cgroup, made_cgroup) {
        Ok(tree) => {
            // Removed by this worker after it reported the attempt's end, whatever ends it.
            if let Some(c) = tree.as_ref().and_then(crate::containment::Tree::cgroup) {
                tail.cgroup = Some(c.clone());
                spec.caller_removes_cgroup = true;
            }
            spec.containment = tree;
        }
        Err(reason) => return failed_unless_cancelled(cancel, reason),
    }
    // Only a contained tree is known to be gone when the attempt ends.
    let contained = spec.containment.is_some();
    // Pipes, descriptors and strings are made while the owner makes the record durable;
    // only the start waits for it.
    let prepared = match exec::prepare(launch, spec) {
        Ok(prepared) => prepared,
        Err(e) => return failed_unless_cancelled(cancel, format!("launch failed: {e}")),
    };
    let (started, journaled) = match durable.start(&node.id, attempt, prepared) {
        Passed::NotDurable => return Finished::failed(NOT_DURABLE),
        Passed::ByWorker(started) => (started, false),
        Passed::ByOwner(started) => (started, true),
    };
    let running = match started {
        Ok(running) => running,
        Err(e) => return failed_unless_cancelled(cancel, format!("launch failed: {e}")),
    };
    if !journaled {
        let _ = tx.send(WorkerMsg::Launched {
            node: node.id.clone(),
            attempt,
            process: running.process(),
        });
    }
    let outcome = running.wait();
    if contained
        && !matches!(outcome.exit, CommandExit::Abnormal(_))
        && let Some(scratch) = scratch
    {
        scratch.release();
    }
    let stdout = artifact(&node.id, attempt, "stdout", &outcome.stdout);
    let stderr = artifact(&node.id, attempt, "stderr", &outcome.stderr);
    let (state, reason, exit) = match outcome.exit {
        CommandExit::Code(0) => (NodeState::Success, None, ExitRecord::Code { code: 0 }),
        CommandExit::Code(code) => (
            NodeState::Failure,
            Some(format!("exited with code {code}")),
            ExitRecord::Code { code },
        ),
        CommandExit::Signal(signal) => (
            NodeState::Failure,
            Some(format!("killed by signal {signal}")),
            ExitRecord::Signal { signal },
        ),
        CommandExit::Timeout => (
            NodeState::Failure,
            Some(format!(
                "timed out after {}s; the process group was stopped",
                node.timeout_seconds
            )),
            ExitRecord::Timeout {
                seconds: node.timeout_seconds,
            },
        ),
        CommandExit::Cancelled => (
            NodeState::Cancellation,
            Some("cancelled; the process group was stopped".to_owned()),
            ExitRecord::Cancelled,
        ),
        CommandExit::Abnormal(why) => (
            NodeState::Failure,
            Some(format!("abnormal end: {why}")),
            ExitRecord::Abnormal { reason: why },
        ),
    };
    let mut finished = Finished {
        state: Some(state),
        reason,
        exit: Some(exit),
        stdout,
        stderr,
        ..Finished::default()
    };
    if state == NodeState::Success
        && let Some(schema) = &node.output
    {
        match validate_stdout(dir, node, attempt, &outcome.stdout, schema) {
            Ok((value, art)) => {
                finished.output = Some(value);
                finished.output_artifact = Some(art);
            }
            Err(reason) => {
                finished.state = Some(NodeState::Failure);
                finished.reason = Some(reason);
            }
        }
    }
    finished
}

/// The containment of a command's tree: the cgroup `launch_intended` named (a tree that
/// cannot be put there does not run), else the subreaper fallback, whose record of
/// descendants is created in the attempt directory before anything runs. `None` (with a
/// warning) only where neither exists: the process group is then all there is.
fn contain_tree(
    shared: &Shared,
    node: &Node,
    attempt: u32,
    dir: &PrivateDir,
    cgroup: Option<&str>,
    made: Option<crate::containment::Cgroup>,
) -> Result<Option<crate::containment::Tree>, String> {
    use crate::containment::{self, Tree};
    if let Some(name) = cgroup {
        if let Some(made) = made {
            return Ok(Some(Tree::Cgroup(made)));
        }
        return containment::owner_root()
            .and_then(|root| root.create(name))
            .map(|c| Some(Tree::Cgroup(c)))
            .map_err(|e| format!("cannot contain the process tree: {e}"));
    }
    // An unusable RHO_CONTAINMENT value is refused, not ignored.
    containment::mode().map_err(|e| format!("cannot contain the process tree: {e}"))?;
    if let Err(e) = containment::tracked::available() {
        tracing::warn!(node = %node.id, "{e}; the node's tree is contained by its process group only");
        return Ok(None);
    }
    let name = containment::tracked::RECORD_FILE;
    let record = dir
        .create_file(name, b"")
        .map_err(|e| format!("cannot create the record of the node's processes: {e}"))?;
    let label = format!("{}.{}.{attempt}", shared.run.id(), node.id);
    containment::TrackedTree::new(&label, Some((record, dir.entry_path(name))))
        .map(|t| Some(Tree::Tracked(t)))
        .map_err(|e| format!("cannot contain the process tree: {e}"))
}

/// A node's scratch directory, confinement and environment (see [`confine`]).
type Confined<'a> = (
    Option<ScratchLease<'a>>,
    Option<Arc<Confinement>>,
    Vec<(OsString, OsString)>,
);

/// The kernel confinement of a read-only or network-denied node, its private scratch
/// directory, and the environment with `TMPDIR` (and `TMP`/`TEMP` where set) pointing into
/// it. Fails closed, naming what the kernel lacks, when the confinement cannot be enforced.
fn confine<'a>(shared: &'a Shared, node: &Node) -> Result<Confined<'a>, String> {
    let env = shared.env.as_slice();
    let lease = match shared
        .confinements
        .lease(ConfinementRequest::for_node(node))
    {
        Ok(Some(lease)) => lease,
        Ok(None) => return Ok((None, None, env.to_vec())),
        Err(e) => {
            return Err(format!("kernel confinement refused: {}", error_chain(&e)));
        }
    };
    let confinement = Arc::clone(lease.confinement());
    tracing::debug!(node = %node.id, enforced = %confinement.plan().describe(), "confined node");
    let dir = lease.scratch().as_os_str();
    let mut env: Vec<(OsString, OsString)> = env
        .iter()
        .map(|(name, value)| {
            if name == "TMP" || name == "TEMP" {
                (name.clone(), dir.to_owned())
            } else {
                (name.clone(), value.clone())
            }
        })
        .filter(|(name, _)| name != "TMPDIR")
        .collect();
    env.push(("TMPDIR".into(), dir.to_owned()));
    Ok((Some(lease), Some(confinement), env))
}

/// Once the run is cancelling, an attempt that stops before its process ran ends in
/// `cancellation` whatever stopped it: the cancellation decides the node, not the step that
/// happened to notice.
fn failed_unless_cancelled(cancel: &CancelToken, reason: String) -> Finished {
    if cancel.is_cancelled() {
        Finished::cancelled(format!("cancelled before the process started ({reason})"))
    } else {
        Finished::failed(reason)
    }
}

fn validate_stdout(
    dir: &PrivateDir,
    node: &Node,
    attempt: u32,
    stdout: &StreamArtifact,
    schema: &Schema,
) -> Result<(Data, Artifact), String> {
    let Schema::StdoutJson { schema } = schema else {
        return Err("output schema of a command node must be stdout_json".to_owned());
    };
    if !stdout.is_complete() {
        return Err(format!(
            "stdout_json: stdout is truncated (retained {} of {} bytes observed); the whole \
             output must be one JSON value",
            stdout.retained_bytes, stdout.observed_bytes
        ));
    }
    let bytes = stdout
        .read_retained()
        .map_err(|e| format!("stdout_json: cannot read stdout: {e}"))?;
    let value = parse_stdout_json(&bytes, schema)?;
    let art = write_output(dir, node, attempt, &value)?;
    Ok((value, art))
}

fn write_output(
    dir: &PrivateDir,
    node: &Node,
    attempt: u32,
    value: &Data,
) -> Result<Artifact, String> {
    let mut bytes =
        serde_json::to_vec(&value.to_json()).map_err(|e| format!("cannot encode output: {e}"))?;
    bytes.push(b'\n');
    dir.create_file("output.json", &bytes)
        .map_err(|e| format!("cannot store output: {e}"))?;
    Ok(Artifact {
        path: RunDir::attempt_relative(&node.id, attempt, "output.json"),
        retained_bytes: bytes.len() as u64,
        observed_bytes: bytes.len() as u64,
        truncated: false,
        sha256: sha256_tagged(&bytes),
    })
}

/// The artifact record of a captured stream; `None` when the stream was empty, because the
/// executor creates an artifact file only when its first byte arrives.
fn artifact(node: &str, attempt: u32, name: &str, stream: &StreamArtifact) -> Option<Artifact> {
    if stream.observed_bytes == 0 {
        return None;
    }
    Some(Artifact {
        path: RunDir::attempt_relative(node, attempt, name),
        retained_bytes: stream.retained_bytes,
        observed_bytes: stream.observed_bytes,
        truncated: stream.truncated,
        sha256: stream.sha256.clone(),
    })
}

/// Waits for the node's checkout access (shared for read-only nodes, exclusive otherwise),
/// honouring its timeout and cancellation; the attempt's end when it cannot have it.
fn checkout_access(
    shared: &Shared,
    node: &Node,
    timeout: Duration,
    cancel: &CancelToken,
) -> Result<Option<crate::workflow::checkout::CheckoutGuard>, Box<Finished>> {
    let Some(lock) = &shared.checkout else {
        return Ok(None);
    };
    match lock.acquire(node.access, Some(Instant::now() + timeout), cancel) {
        Ok(guard) => Ok(Some(guard)),
        Err(CheckoutError::Cancelled { .. }) => Err(Box::new(Finished::cancelled(
            "cancelled while waiting for checkout access",
        ))),
        Err(CheckoutError::Timeout { .. }) => Err(Box::new(Finished {
            state: Some(NodeState::Failure),
            reason: Some(format!(
                "timed out after {}s waiting for checkout access",
                node.timeout_seconds
            )),
            exit: Some(ExitRecord::Timeout {
                seconds: node.timeout_seconds,
            }),
            ..Finished::default()
        })),
        Err(e) => Err(Box::new(Finished::failed(format!("checkout access: {e}")))),
    }
}

fn run_agent(
    shared: &Shared,
    node: &Node,
    attempt: u32,
    attempt_dir: &AttemptDir,
    prompt: String,
    cancel: &CancelToken,
) -> Finished {
    let Execution::Agent { agent, .. } = &node.execution else {
        return Finished::failed("internal: a command node reached the agent path");
    };
    // Like a command: mutating agents hold the checkout alone, read-only ones share it, and
    // the wait counts against the node's timeout.
    let started = Instant::now();
    let timeout = Duration::from_secs(node.timeout_seconds);
    let _guard = match checkout_access(shared, node, timeout, cancel) {
        Ok(guard) => guard,
        Err(finished) => return *finished,
    };
    if cancel.is_cancelled() {
        return Finished::cancelled("cancelled before the agent started");
    }
    let dir = match attempt_dir.get() {
        Ok(dir) => dir,
        Err(e) => return Finished::failed(format!("cannot create the attempt directory: {e}")),
    };
    let result = shared.agents.run(AgentRequest {
        run_id: shared.run.id().to_owned(),
        node: node.id.clone(),
        attempt,
        agent: agent.clone(),
        setup: shared.program.agents.get(agent).cloned(),
        prompt,
        output: node.output.clone(),
        attempt_dir: dir.path().to_owned(),
        cancel: cancel.clone(),
        timeout: timeout.saturating_sub(started.elapsed()),
        access: node.access,
        max_output_bytes: node.max_output_bytes,
    });
    let mut finished = Finished {
        state: Some(result.state),
        reason: result.reason,
        ..Finished::default()
    };
    if result.state == NodeState::Success {
        match (&node.output, result.output) {
            (Some(schema), Some(value)) => match super::output::validate(schema, &value) {
                Ok(()) => match write_output(dir, node, attempt, &value) {
                    Ok(art) => {
                        finished.output = Some(value);
                        finished.output_artifact = Some(art);
                    }
                    Err(reason) => finished = Finished::failed(reason),
                },
                Err(e) => {
                    finished = Finished::failed(format!("output does not match its schema: {e}"));
                }
            },
            (Some(_), None) => finished = Finished::failed("the agent returned no output value"),
            (None, _) => {}
        }
    }
    finished
}

/// `status.json` of the attempt: a convenience copy of what the journal records (not
/// synced; the journal is the source of truth).
fn status_json(node: &Node, attempt: u32, result: &Finished) -> Result<Vec<u8>, String> {
    let doc = serde_json::json!({
        "node": node.id,
        "attempt": attempt,
        "state": result.state,
        "reason": result.reason,
        "exit": result.exit,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "output": result.output_artifact,
        "denial": result.denial,
    });
    serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string())
}

fn write_status(dir: &AttemptDir, status: Result<Vec<u8>, String>) -> Result<(), String> {
    let bytes = status?;
    let dir = dir.get().map_err(|e| e.to_string())?;
    dir.create_file("status.json", &bytes)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    use super::{DurableGate, Passed};
    use crate::workflow::exec::{self, CommandExit, CommandSpec, PreparedCommand};

    /// `/usr/bin/true`, verified and prepared (pipes, descriptors) but not started.
    fn prepared_true(artifacts: &std::path::Path) -> PreparedCommand {
        use rho_ipc::program::{FileIdentity, FileLocation, FrozenDirectory, FrozenExecutable};
        use std::os::unix::fs::MetadataExt as _;
        let path = std::path::Path::new("/usr/bin/true")
            .canonicalize()
            .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let program = FrozenExecutable {
            file: FileIdentity {
                location: FileLocation::Absolute {
                    path: path.to_string_lossy().into_owned(),
                    device: meta.dev(),
                    inode: meta.ino(),
                },
                size: bytes.len() as u64,
                sha256: rho_ipc::digest::sha256_tagged(&bytes),
            },
            interpreter: None,
        };
        let cwd = FrozenDirectory {
            path: ".".to_owned(),
        };
        let launch = exec::verify(artifacts, &program, &cwd).unwrap();
        let spec = CommandSpec::new(
            vec!["true".into()],
            Vec::new(),
            Duration::from_secs(30),
            1024,
            artifacts.join("stdout"),
            artifacts.join("stderr"),
        );
        exec::prepare(launch, spec).unwrap()
    }

    fn parked(gate: &DurableGate) -> usize {
        gate.lock().parked.len()
    }

    #[test]
    fn a_command_prepared_before_the_gate_opens_is_started_by_the_opener_once_durable() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("late")).unwrap();
        let gate = Arc::new(DurableGate::default());
        let worker = {
            let gate = Arc::clone(&gate);
            let prepared = prepared_true(&root);
            std::thread::spawn(move || match gate.start("n", 1, prepared) {
                Passed::ByOwner(Ok(running)) => Some((running.process(), running.wait().exit)),
                Passed::ByOwner(Err(e)) => panic!("the owner's start failed: {e}"),
                Passed::ByWorker(_) | Passed::NotDurable => None,
            })
        };
        while parked(&gate) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let started = gate.open(true);
        assert_eq!(started.len(), 1, "the opener reports what it started");
        assert_eq!((started[0].node.as_str(), started[0].attempt), ("n", 1));
        let (process, exit) = worker
            .join()
            .unwrap()
            .expect("the worker gets the command the owner started");
        assert_eq!(process, started[0].process);
        assert_eq!(exit, CommandExit::Code(0));
        // Arriving after the gate opened, a worker starts its command itself.
        let late = gate.start("m", 1, prepared_true(&root.join("late")));
        match late {
            Passed::ByWorker(Ok(running)) => assert_eq!(running.wait().exit, CommandExit::Code(0)),
            _ => panic!("a late command must be started by its worker"),
        }
    }

    #[test]
    fn nothing_handed_to_the_gate_starts_when_the_records_are_not_durable() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("late")).unwrap();
        let gate = Arc::new(DurableGate::default());
        let worker = {
            let gate = Arc::clone(&gate);
            let prepared = prepared_true(&root);
            std::thread::spawn(move || matches!(gate.start("n", 1, prepared), Passed::NotDurable))
        };
        while parked(&gate) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(gate.open(false).is_empty(), "nothing was started");
        assert!(
            worker.join().unwrap(),
            "the worker learns nothing was started"
        );
        assert!(matches!(
            gate.start("m", 1, prepared_true(&root.join("late"))),
            Passed::NotDurable
        ));
    }

    #[test]
    fn workers_wait_for_the_gate_and_learn_whether_the_records_are_durable() {
        for durable in [true, false] {
            let gate = Arc::new(DurableGate::default());
            let (tx, rx) = channel();
            let waiters: Vec<_> = (0..3)
                .map(|_| {
                    let gate = Arc::clone(&gate);
                    let tx = tx.clone();
                    std::thread::spawn(move || tx.send(gate.wait()).unwrap())
                })
                .collect();
            // Nobody gets past a closed gate.
            assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
            gate.open(durable);
            for _ in 0..3 {
                assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), durable);
            }
            for waiter in waiters {
                waiter.join().unwrap();
            }
            // A worker arriving after the gate opened passes at once.
            assert_eq!(gate.wait(), durable);
        }
    }
}
