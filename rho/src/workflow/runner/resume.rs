//! Resuming a run: taking its owner lock, checking it against its plan and workspace, and
//! continuing it; with `recover_uncertain`, recovering attempts whose outcome is unknown.
//!
//! Invariant: a successful node is never run again, and an uncertain attempt gets a new
//! attempt only when the caller asked for recovery.

use std::sync::Arc;

use rho_ipc::program::FrozenProgram;

use super::owner::Owner;
use crate::workflow::journal::Journal;
use crate::workflow::state::{EventKind, Lifecycle, NodeState, State, replay};
use crate::workflow::store::StoreError;
use crate::workflow::store::runs::{self, Confirmation, RunDir, RunManifest, StoredManifest};

use super::{
    ProgressSink, RunContext, RunError, RunReport, check_workspace, consent_event,
    describe_attempt, own_identity, release_and_acknowledge, shared,
};

/// Options of `resume`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResumeOptions {
    /// `--recover-uncertain`: give uncertain attempts a new attempt once no process of
    /// theirs is alive.
    pub recover_uncertain: bool,
}

/// Opens a run for ownership: a current-format manifest, the run's own verified program,
/// the lock, and the journal (repairing a torn tail).
pub(super) fn open_owned(
    ctx: &RunContext,
    run_id: &str,
) -> Result<
    (
        RunDir,
        RunManifest,
        FrozenProgram,
        runs::OwnerLock,
        Journal,
        State,
    ),
    RunError,
> {
    let run = runs::open(&ctx.home, run_id)?;
    let manifest = match run.manifest()? {
        StoredManifest::Current(m) => m,
        StoredManifest::Legacy(_) => return Err(RunError::Legacy(runs::legacy_refusal(run_id))),
    };
    check_workspace(&manifest.workspace, &ctx.workspace)?;
    let program = run.load_program(&manifest)?;
    let lock = run.try_lock()?.ok_or_else(|| RunError::Owned {
        run_id: run_id.to_owned(),
    })?;
    let (journal, events) = Journal::open(&run.events_path())?;
    check_created(&run, &manifest, &program, &events)?;
    let state = replay(&events)?;
    Ok((run, manifest, program, lock, journal, state))
}

/// The journal's `run_created` must name the manifest's digest and the program's nodes: a
/// program swapped together with its manifest is still caught by the journal.
pub(super) fn check_created(
    run: &RunDir,
    manifest: &RunManifest,
    program: &FrozenProgram,
    events: &[crate::workflow::state::Event],
) -> Result<(), RunError> {
    let corrupt = |problem: String| {
        RunError::Store(StoreError::Corrupt {
            path: run.events_path(),
            problem,
        })
    };
    let Some(EventKind::RunCreated {
        program_digest,
        nodes,
        ..
    }) = events.first().map(|e| &e.kind)
    else {
        return Err(corrupt("its first record is not run_created".to_owned()));
    };
    if program_digest != &manifest.program_digest {
        return Err(corrupt(format!(
            "the run was created for program {program_digest}, but the manifest names {}",
            manifest.program_digest
        )));
    }
    if nodes.iter().ne(program.root.nodes.iter().map(|n| &n.id)) {
        return Err(corrupt(
            "the run was created with other nodes than program.cbor has".to_owned(),
        ));
    }
    Ok(())
}

/// `recover_uncertain`, uncertain ones) a new attempt, never reruns a successful node.
/// Resumes (or recovers) a run under `confirmation` (consent to the run's digest, journaled
/// with the new owner): reopens its root scope, gives cancelled nodes (and, with
/// `recover_uncertain`, uncertain ones) a new attempt, never reruns a successful node.
pub fn resume(
    ctx: &RunContext,
    run_id: &str,
    options: ResumeOptions,
    confirmation: &Confirmation,
    progress: &mut dyn ProgressSink,
) -> Result<RunReport, RunError> {
    let (run, manifest, program, lock, journal, state) = open_owned(ctx, run_id)?;
    if confirmation.digest != manifest.program_digest {
        return Err(RunError::Internal(
            "consent names another digest than the run".to_owned(),
        ));
    }
    // Current policy only narrows: the mode in force may not exceed the one recorded when
    // the run was created, and the classifier's counters carry on where they were.
    let recorded = manifest.policy.ok_or_else(|| RunError::PolicyNotRecorded {
        run_id: run_id.to_owned(),
    })?;
    let mode = ctx.authorizer.mode();
    if mode > recorded.permission_mode {
        return Err(RunError::ModeWidened {
            run_id: run_id.to_owned(),
            recorded: recorded.permission_mode,
            requested: mode,
        });
    }
    if let Some(counters) = state.escalation {
        ctx.authorizer.restore_counters(counters);
    }
    let run = Arc::new(run);
    let program = Arc::new(program);
    let shared = shared(
        ctx,
        &run,
        &program,
        &manifest.program_digest,
        &manifest.workspace,
    )?;
    progress.created(run_id);
    let mut owner = Owner::new(
        Arc::clone(&run),
        Arc::clone(&program),
        journal,
        state,
        shared,
        progress,
        ctx.watch_signals,
    );

    // An owner that never closed died: whatever it had in flight is uncertain.
    if let Some(dead) = owner.state.owner.clone() {
        let open: Vec<(String, u32)> = owner
            .state
            .open_attempts()
            .iter()
            .map(|(n, a)| ((*n).to_owned(), a.number))
            .collect();
        for (node, attempt) in &open {
            owner.record(EventKind::AttemptUncertain {
                node: node.clone(),
                attempt: *attempt,
                reason: format!(
                    "its owner (pid {}) exited uncleanly while the attempt was in flight",
                    dead.pid
                ),
            })?;
        }
        owner.record(EventKind::OwnerClosed {
            reason: format!("owner pid {} died", dead.pid),
        })?;
        if !open.is_empty() {
            owner.record(EventKind::LifecycleChanged {
                lifecycle: Lifecycle::NeedsRecovery,
            })?;
        }
    }
    let (pid, start_time) = own_identity();
    owner.record(EventKind::OwnerOpened {
        pid,
        start_time,
        permission_mode: ctx.authorizer.mode().as_str().to_owned(),
        command: "resume".to_owned(),
    })?;
    owner.record(consent_event("resume", confirmation))?;

    let uncertain: Vec<(String, crate::workflow::state::Attempt)> = owner
        .state
        .uncertain_attempts()
        .into_iter()
        .map(|(n, a)| (n.to_owned(), a.clone()))
        .collect();
    if !uncertain.is_empty() {
        let described: Vec<String> = uncertain
            .iter()
            .map(|(n, a)| describe_attempt(n, a))
            .collect();
        if !options.recover_uncertain {
            owner.record(EventKind::OwnerClosed {
                reason: "needs_recovery".to_owned(),
            })?;
            owner.checkpoint()?;
            return Err(RunError::NeedsRecovery {
                run_id: run_id.to_owned(),
                attempts: described,
            });
        }
        // Every process of those attempts must be gone, detached ones included (their
        // cgroup), before a new attempt may write beside them.
        let alive =
            super::inspect::survivors(&owner.run, uncertain.iter().map(|(n, a)| (n.as_str(), a)));
        if !alive.is_empty() {
            owner.record(EventKind::OwnerClosed {
                reason: "needs_recovery".to_owned(),
            })?;
            owner.checkpoint()?;
            return Err(RunError::StillAlive {
                run_id: run_id.to_owned(),
                what: alive.join("; "),
            });
        }
    }

    // Which tasks change: cancelled ones, recovered ones, and anything decided from them.
    let mut reset: Vec<String> = owner
        .state
        .root()
        .tasks
        .iter()
        .filter(|(_, t)| t.state == NodeState::Cancellation)
        .map(|(id, _)| id.clone())
        .collect();
    let recovered: Vec<String> = uncertain.iter().map(|(n, _)| n.clone()).collect();
    let mut changed: std::collections::BTreeSet<String> =
        reset.iter().chain(&recovered).cloned().collect();
    loop {
        let mut more = false;
        for node in &program.root.nodes {
            let s = owner.state.root().node_state(&node.id);
            if matches!(s, Some(NodeState::Blocked | NodeState::Skipped))
                && !changed.contains(&node.id)
                && node.needs.iter().any(|n| changed.contains(n))
            {
                changed.insert(node.id.clone());
                reset.push(node.id.clone());
                more = true;
            }
        }
        if !more {
            break;
        }
    }
    reset.sort();

    let nothing_to_do =
        reset.is_empty() && recovered.is_empty() && owner.state.lifecycle == Lifecycle::Completed;
    if nothing_to_do {
        owner.record(EventKind::OwnerClosed {
            reason: "already completed".to_owned(),
        })?;
        owner.checkpoint()?;
        drop(lock);
        let outcome = owner.state.root().result.as_ref().map(|r| r.outcome);
        return Ok(RunReport {
            run_id: run_id.to_owned(),
            state: owner.state.clone(),
            outcome,
            cancelled_by: None,
        });
    }
    if owner.state.root().result.is_some() {
        owner.record(EventKind::ScopeReopened {
            scope: rho_ipc::program::ROOT_SCOPE_ID.to_owned(),
        })?;
    }
    if !recovered.is_empty() {
        owner.record(EventKind::RecoveryStarted { nodes: recovered })?;
    }
    for node in reset {
        owner.record(EventKind::NodeStateChanged {
            node,
            state: NodeState::Pending,
            reason: Some("resume: decided again".to_owned()),
        })?;
    }
    // A cancellation request already handled by an earlier owner is not a new one.
    // (An owner that completed it and died before removing the file left it behind.)
    if let (Some(done), Ok(Some(file))) = (owner.state.cancel.clone(), run.read_cancel_request())
        && done.completed
        && done.request_id == file.request_id
    {
        run.remove_cancel_request()?;
    }
    owner.record(EventKind::LifecycleChanged {
        lifecycle: Lifecycle::Running,
    })?;
    owner.journal.sync()?;
    let ended = owner.drive()?;
    let state = owner.state.clone();
    drop(owner);
    release_and_acknowledge(&run, lock, &ended.acknowledge);
    Ok(RunReport {
        run_id: run_id.to_owned(),
        state,
        outcome: Some(ended.outcome),
        cancelled_by: ended.cancelled_by,
    })
}
