//! The planner conversation after hardening: one request in, one answer out, with any
//! number of module requests in between.
//!
//! Invariant: every frame read is version-checked before its payload is used, and the
//! worker sends exactly one final message (`ProbeResult` or `Planned`) per conversation.

use std::io::{Read, Write};

use rho_ipc::frame::{FrameError, write_message};
use rho_ipc::message::{Envelope, HostMessage, ModuleResponse, WorkerMessage};

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

/// Serves one conversation: reads the first host message and answers it.
pub fn serve<R: Read, W: Write>(mut input: R, mut output: W) -> Result<(), SessionError> {
    match read_host(&mut input)? {
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
            let answer = dsl::evaluate(&request, |module_request| {
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
            write_message(&mut output, &Envelope::new(WorkerMessage::Planned(answer?)))?;
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
