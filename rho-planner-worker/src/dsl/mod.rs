//! The workflow language: Starlark globals, the evaluator with its budgets, the module
//! loader, the nesting pre-check and the bounded value converter.
//!
//! [`evaluate`] turns one [`PlanRequest`] into an [`EvaluatedWorkflow`] or diagnostics.
//! An [`Evaluator`] does the same in two steps: started before the request arrives, its
//! thread builds the globals meanwhile. The whole evaluation runs on that one dedicated
//! thread with a large explicit stack, and the calling thread answers its module requests,
//! so the loader may do I/O on handles that cannot cross threads. The evaluation thread hands its outcome over as soon
//! as it exists and only then tears down the Starlark heap and compiled code; `evaluate`
//! returns without waiting for that teardown (for a 1,000-node workflow it is several
//! milliseconds that the answer no longer waits for).
//!
//! Invariant: no Starlark source reaches the parser before the nesting pre-check, no
//! Starlark value leaves the evaluator except through the bounded converter, and every
//! problem in the sources or inputs becomes a [`Diagnostic`](rho_ipc::message::Diagnostic)
//! (never a panic or an abort); only a broken conversation is an `Err`.

mod allocator;
mod builtins;
mod convert;
mod engine;
mod fault;
mod nesting;
mod values;

use std::sync::mpsc;

use rho_ipc::evaluated::EvaluatedWorkflow;
use rho_ipc::message::{ModuleRequest, ModuleResponse, PlanRequest, PlanResponse};
use starlark::environment::Globals;

use self::engine::{Engine, Stop};
use self::values::Context;

/// Stack size of the evaluation thread. The parser, compiler and freezer recurse per level
/// of nesting; the pre-checks bound the levels, this bounds the bytes per level they may use.
/// It counts against the worker's address-space limit.
pub const EVALUATION_STACK_BYTES: usize = 256 * 1024 * 1024;

/// Why evaluation could not produce an answer at all (as opposed to diagnostics).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DslError {
    /// The loader could not obtain an answer from the host for a module request.
    #[error("module request for {label} could not be answered: {reason}")]
    ModuleTransport {
        /// The label that was requested.
        label: String,
        /// What went wrong in the conversation.
        reason: String,
    },
    /// The evaluation thread could not be started.
    #[error("cannot start the evaluation thread")]
    Thread(#[source] std::io::Error),
    /// The evaluation thread panicked; the panic message went to stderr.
    #[error("the evaluation thread panicked")]
    Panicked,
}

/// What the evaluation thread sends to the calling thread.
enum FromEvaluator {
    /// A `load()` that the host must answer.
    Load(ModuleRequest),
    /// The outcome; the thread may still be tearing down after sending it.
    Finished(Result<EvaluatedWorkflow, Stop>),
}

/// An evaluation thread started before its request: it builds the Starlark globals (most of
/// a small workflow's evaluation time: the Starlark crate parses the documentation of every
/// builtin it registers) while the request is still on its way, then waits for it.
///
/// Start it only in a hardened worker: the thread inherits the protections of the thread
/// that starts it. It reads nothing but what [`Evaluator::evaluate`] hands it.
pub struct Evaluator {
    /// Hands the request over.
    request: mpsc::Sender<PlanRequest>,
    /// Module requests and the outcome.
    events: mpsc::Receiver<FromEvaluator>,
    /// Answers to module requests.
    modules: mpsc::Sender<Result<ModuleResponse, DslError>>,
}

impl Evaluator {
    /// Starts the evaluation thread, which begins building the globals at once.
    pub fn start() -> Result<Self, DslError> {
        allocator::tune_for_evaluation();
        let (request, requested) = mpsc::channel::<PlanRequest>();
        let (to_host, from_evaluator) = mpsc::channel::<FromEvaluator>();
        let (to_evaluator, from_host) = mpsc::channel::<Result<ModuleResponse, DslError>>();
        // Not joined: after sending its outcome the thread only drops what it built, and the
        // process may end (or evaluate again) meanwhile.
        std::thread::Builder::new()
            .stack_size(EVALUATION_STACK_BYTES)
            .spawn(move || {
                let globals = builtins::globals();
                // No request: the conversation ended another way (a probe, a broken pipe).
                if let Ok(request) = requested.recv() {
                    run_on_this_thread(&request, globals, &to_host, &from_host);
                }
            })
            .map_err(DslError::Thread)?;
        Ok(Self {
            request,
            events: from_evaluator,
            modules: to_evaluator,
        })
    }

    /// Evaluates `request`, asking `loader` for each module that a `load()` names.
    ///
    /// `loader` runs on the calling thread, once per distinct label, in the order the modules
    /// are needed; its `Err` ends evaluation with that error.
    pub fn evaluate<L>(self, request: &PlanRequest, mut loader: L) -> Result<PlanResponse, DslError>
    where
        L: FnMut(ModuleRequest) -> Result<ModuleResponse, DslError>,
    {
        // A send fails only when the thread is gone (it panicked building the globals): the
        // recv below reports it.
        let _ = self.request.send(request.clone());
        loop {
            match self.events.recv() {
                Ok(FromEvaluator::Load(module_request)) => {
                    // A send fails only when the evaluator is gone; the next recv reports it.
                    let _ = self.modules.send(loader(module_request));
                }
                Ok(FromEvaluator::Finished(outcome)) => {
                    return match outcome {
                        Ok(workflow) => Ok(PlanResponse::Workflow(workflow)),
                        Err(Stop::Diagnostics(diagnostics)) => {
                            Ok(PlanResponse::Diagnostics(diagnostics))
                        }
                        Err(Stop::Transport(error)) => Err(error),
                    };
                }
                // The thread ended without an outcome: it panicked (the message went to stderr).
                Err(mpsc::RecvError) => return Err(DslError::Panicked),
            }
        }
    }
}

/// Evaluates `request`, asking `loader` for each module that a `load()` names: an
/// [`Evaluator`] started for this request alone.
pub fn evaluate<L>(request: &PlanRequest, loader: L) -> Result<PlanResponse, DslError>
where
    L: FnMut(ModuleRequest) -> Result<ModuleResponse, DslError>,
{
    Evaluator::start()?.evaluate(request, loader)
}

fn run_on_this_thread(
    request: &PlanRequest,
    globals: Globals,
    to_host: &mpsc::Sender<FromEvaluator>,
    from_host: &mpsc::Receiver<Result<ModuleResponse, DslError>>,
) {
    let context = Context::new(request.budgets.clone());
    let mut host = |module_request: ModuleRequest| {
        let label = module_request.label.clone();
        let lost = |reason: &str| DslError::ModuleTransport {
            label: label.clone(),
            reason: reason.to_owned(),
        };
        to_host
            .send(FromEvaluator::Load(module_request))
            .map_err(|_| lost("the loader thread is gone"))?;
        from_host
            .recv()
            .map_err(|_| lost("the loader thread is gone"))?
    };
    let mut finish = |workflow: EvaluatedWorkflow| {
        // The receiver is gone only if `evaluate` already returned, which it does only
        // after an outcome: nothing is left to tell.
        let _ = to_host.send(FromEvaluator::Finished(Ok(workflow)));
    };
    let mut engine = Engine::new(request.budgets.clone(), globals, &context, &mut host);
    if let Err(stop) = engine.run(request, &mut finish) {
        let _ = to_host.send(FromEvaluator::Finished(Err(stop)));
    }
}
