//! Requesting cancellation of a run and waiting for its owner to acknowledge it.
//!
//! Invariant: `cancel` writes only the cancellation request file; `acknowledged` means the
//! owner released the run and it is free to resume.

use crate::paths::RhoHome;
use crate::workflow::state::{Lifecycle, State};
use crate::workflow::store::runs::{self, StoredManifest};

use super::RunError;
use super::inspect::inspect;

/// `cancel`'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelAnswer {
    /// The request id (absent when the run had already completed).
    pub request_id: Option<String>,
    /// `acknowledged`, `pending` or `already_completed`.
    pub cancellation_state: &'static str,
    /// The lifecycle after waiting.
    pub lifecycle: Lifecycle,
}

/// Writes a durable cancellation request (reusing a pending one) and waits up to `wait` for
/// the owner to acknowledge it.
pub fn request_cancel(
    home: &RhoHome,
    run_id: &str,
    wait: std::time::Duration,
) -> Result<CancelAnswer, RunError> {
    let (run, inspection) = inspect(home, run_id)?;
    if let StoredManifest::Legacy(_) = inspection.manifest {
        return Err(RunError::Legacy(runs::legacy_refusal(run_id)));
    }
    let state = inspection.state.unwrap_or_else(State::empty);
    if state.lifecycle == Lifecycle::Completed {
        return Ok(CancelAnswer {
            request_id: None,
            cancellation_state: "already_completed",
            lifecycle: state.lifecycle,
        });
    }
    #[allow(
        clippy::single_match_else,
        reason = "reuse or create reads side by side"
    )]
    let request_id = match run.read_cancel_request()? {
        Some(existing) => existing.request_id,
        None => {
            let request = runs::CancelRequest {
                request_id: crate::workflow::store::ids::new_id(),
                requested_at: crate::workflow::store::timestamp_now(),
            };
            run.write_cancel_request(&request)?;
            request.request_id
        }
    };
    let started = std::time::Instant::now();
    let deadline = started + wait;
    loop {
        // The owner publishes this only after it released the run: once it is seen, the
        // run can be resumed at once.
        if run.read_cancel_acknowledgement(&request_id)?.is_some() {
            let (_, now) = inspect(home, run_id)?;
            return Ok(CancelAnswer {
                request_id: Some(request_id),
                cancellation_state: "acknowledged",
                lifecycle: now.effective_lifecycle().unwrap_or(Lifecycle::Completed),
            });
        }
        let (_, now) = inspect(home, run_id)?;
        let lifecycle = now.effective_lifecycle().unwrap_or(Lifecycle::Planned);
        let state = now.state.unwrap_or_else(State::empty);
        // The owner completed this request and is releasing the run: its acknowledgement
        // follows, although the journal already shows no owner.
        let releasing = state
            .cancel
            .as_ref()
            .is_some_and(|c| c.request_id == request_id && c.completed);
        // Nobody to wait for once the recorded owner is gone (or none was ever recorded past a
        // short grace for an owner that is just starting): the next owner applies the request.
        let ownerless = !releasing
            && (now.owner_dead || (state.owner.is_none() && started.elapsed() >= NO_OWNER_GRACE));
        if ownerless || std::time::Instant::now() >= deadline {
            return Ok(CancelAnswer {
                request_id: Some(request_id),
                cancellation_state: "pending",
                lifecycle,
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}

/// How long `cancel` waits for an owner to appear when the run records none.
pub(super) const NO_OWNER_GRACE: std::time::Duration = std::time::Duration::from_millis(300);
