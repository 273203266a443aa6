//! Starting a run: creating its directory, journal and manifest from a confirmed plan, taking
//! the owner lock, and driving the run to its end.
//!
//! Invariant: the run's first journal records are its creation and the consent it was started
//! under, written before any node launches.

use std::sync::Arc;

use rho_policy::TrustRequirement;

use super::owner::Owner;
use crate::workflow::journal::Journal;
use crate::workflow::state::{EventKind, Lifecycle, replay};
use crate::workflow::store::plans::StoredPlan;
use crate::workflow::store::runs::{self, Confirmation, RunPolicy};

use super::{
    ProgressSink, RunContext, RunError, RunReport, check_workspace, consent_event, own_identity,
    release_and_acknowledge, shared,
};

/// Creates a run from a verified plan (consent given) and drives it to its end.
pub fn start(
    ctx: &RunContext,
    plan: &StoredPlan,
    confirmation: Confirmation,
    progress: &mut dyn ProgressSink,
) -> Result<RunReport, RunError> {
    let workspace = check_workspace(&plan.manifest.workspace, &ctx.workspace)?;
    if plan.program_digest != confirmation.digest {
        return Err(RunError::Internal(
            "consent names another digest than the plan".to_owned(),
        ));
    }
    let policy = RunPolicy {
        permission_mode: ctx.authorizer.mode(),
        trust: TrustRequirement {
            project_sources: ctx.policy_trust.project_sources,
            project_agents: plan.program.trust.project_agents || ctx.policy_trust.project_agents,
            project_hooks: ctx.policy_trust.project_hooks,
        },
    };
    let consent = consent_event("run", &confirmation);
    let (run, _manifest, _) = runs::create(&ctx.home, plan, workspace, confirmation, policy)?;
    progress.created(run.id());
    let lock = run.try_lock()?.ok_or_else(|| RunError::Owned {
        run_id: run.id().to_owned(),
    })?;
    let (journal, events) = Journal::open(&run.events_path())?;
    let state = replay(&events)?;
    for event in &events {
        progress.event(event, &state);
    }
    let run = Arc::new(run);
    let program = Arc::new(plan.program.clone());
    let shared = shared(
        ctx,
        &run,
        &program,
        &plan.program_digest,
        &plan.manifest.workspace,
    )?;
    let mut owner = Owner::new(
        Arc::clone(&run),
        program,
        journal,
        state,
        shared,
        progress,
        ctx.watch_signals,
    );
    let (pid, start_time) = own_identity();
    owner.record(EventKind::OwnerOpened {
        pid,
        start_time,
        permission_mode: ctx.authorizer.mode().as_str().to_owned(),
        command: "run".to_owned(),
    })?;
    owner.record(consent)?;
    owner.record(EventKind::LifecycleChanged {
        lifecycle: Lifecycle::Running,
    })?;
    owner.journal.sync()?;
    let ended = owner.drive()?;
    let state = owner.state.clone();
    drop(owner);
    release_and_acknowledge(&run, lock, &ended.acknowledge);
    Ok(RunReport {
        run_id: run.id().to_owned(),
        state,
        outcome: Some(ended.outcome),
        cancelled_by: ended.cancelled_by,
    })
}
