//! The planner conversation after hardening: one request in, one answer out, with any
//! number of module requests in between.
//!
//! Invariant: every frame read is version-checked before its payload is used, and the
//! worker sends exactly one final message (`ProbeResult` or `Planned`) per conversation.

use std::io::{Read, Write};

use rho_ipc::budget::{BudgetOverrun, Budgets};
use rho_ipc::frame::{FrameError, MAX_FRAME_BYTES, write_frame, write_message};
use rho_ipc::message::{
    Diagnostic, Envelope, HostMessage, ModuleResponse, PlanResponse, WorkerMessage,
};

use crate::dsl::{self, DslError};

/// Why the conversation could not be completed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A frame could not be read or written, or carried another protocol version.
    #[error("planner conversation failed")]
    Frame(#[from] FrameError),
    /// The host sent a message that does not fit the conversation at this point.
    #[error("host sent a {got} message where {expected} was expected")]
    Unexpected {
        /// What the worker was waiting for.
        expected: &'static str,
        /// What arrived.
        got: &'static str,
    },
    /// Evaluation could not produce an answer.
    #[error("evaluation failed")]
    Evaluation(#[from] DslError),
}

fn kind(message: &HostMessage) -> &'static str {
    match message {
        HostMessage::Plan(_) => "plan",
        HostMessage::Module(_) => "module",
        HostMessage::Probe(_) => "probe",
    }
}

fn read_host<R: Read>(input: &mut R) -> Result<HostMessage, FrameError> {
    rho_ipc::message::read_envelope(input)
}

/// Sends the final answer. An answer too large for one frame is the workflow's fault (it
/// built a program the host could not accept either): it becomes a `program_bytes` budget
/// diagnostic, with the effective limit (the frame limit when the budget is larger).
fn send_answer<W: Write>(
    output: &mut W,
    answer: PlanResponse,
    budgets: &Budgets,
) -> Result<(), SessionError> {
    let payload =
        rho_ipc::canonical::to_canonical_bytes(&Envelope::new(WorkerMessage::Planned(answer)))
            .map_err(FrameError::from)?;
    let measured = u64::try_from(payload.len()).unwrap_or(u64::MAX);
    if measured <= u64::from(MAX_FRAME_BYTES) {
        write_frame(output, &payload)?;
        return Ok(());
    }
    let overrun = BudgetOverrun {
        name: "program_bytes".to_owned(),
        limit: budgets.program_bytes.min(u64::from(MAX_FRAME_BYTES)),
        measured,
    };
    let mut diagnostic = Diagnostic::budget(overrun);
    diagnostic.message.push_str(
        " (the evaluated workflow, encoded for the host, is larger than one planner frame)",
    );
    write_message(
        output,
        &Envelope::new(WorkerMessage::Planned(PlanResponse::Diagnostics(vec![
            diagnostic,
        ]))),
    )?;
    Ok(())
}

/// Serves one conversation: reads the first host message and answers it. With
/// `probes_only` (a worker started with a protection left out for `rho doctor`) a plan
/// request is refused unread.
pub fn serve<R: Read, W: Write>(
    mut input: R,
    mut output: W,
    probes_only: bool,
) -> Result<(), SessionError> {
    // The evaluation thread builds the Starlark globals while the request is on its way.
    // A worker that answers probes only never evaluates and does not start it.
    let evaluator = (!probes_only).then(dsl::Evaluator::start);
    match read_host(&mut input)? {
        other @ HostMessage::Plan(_) if probes_only => {
            return Err(SessionError::Unexpected {
                expected: "probe (this worker left a protection out)",
                got: kind(&other),
            });
        }
        HostMessage::Probe(probe) => {
            let result = crate::sandbox::probe::run(&probe);
            write_message(
                &mut output,
                &Envelope::new(WorkerMessage::ProbeResult(result)),
            )?;
        }
        HostMessage::Plan(request) => {
            // A frame error inside the loader ends evaluation; keep it to report it as such.
            let mut broken: Option<SessionError> = None;
            let evaluator = evaluator.unwrap_or_else(dsl::Evaluator::start)?;
            let answer = evaluator.evaluate(&request, |module_request| {
                let label = module_request.label.clone();
                let exchange = || -> Result<ModuleResponse, SessionError> {
                    write_message(
                        &mut output,
                        &Envelope::new(WorkerMessage::LoadModule(module_request)),
                    )?;
                    match read_host(&mut input)? {
                        HostMessage::Module(response) => Ok(response),
                        other => Err(SessionError::Unexpected {
                            expected: "module",
                            got: kind(&other),
                        }),
                    }
                };
                exchange().map_err(|error| {
                    let reason = error.to_string();
                    broken = Some(error);
                    DslError::ModuleTransport { label, reason }
                })
            });
            if let Some(error) = broken {
                return Err(error);
            }
            send_answer(&mut output, answer?, &request.budgets)?;
        }
        other @ HostMessage::Module(_) => {
            return Err(SessionError::Unexpected {
                expected: "plan or probe",
                got: kind(&other),
            });
        }
    }
    Ok(())
}
