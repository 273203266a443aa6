//! The `rho-planner-worker` executable: harden, report, then serve one conversation.
//!
//! Invariant: nothing is read from stdin before [`sandbox::harden`] has run and its report
//! has been sent; a refused worker exits without reading at all.

use std::process::ExitCode;

use rho_ipc::frame::write_message;
use rho_ipc::message::{Envelope, WorkerMessage};
use rho_planner_worker::{sandbox, session};

/// Writes one line to stderr without panicking: with `RLIMIT_FSIZE` at zero a write to a
/// regular file fails (EFBIG), and `eprintln!` would turn that into a panic that hides the
/// message. The host always gives the worker a pipe; by hand, stderr may be a file.
macro_rules! complain {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// Exit status: the command line is invalid (nothing was hardened or sent).
const EXIT_USAGE: u8 = 2;
/// Exit status: a required protection is missing; the report says which.
const EXIT_REFUSED: u8 = 3;
/// Exit status: the hardening report could not be sent.
const EXIT_REPORT_FAILED: u8 = 4;
/// Exit status: the conversation after the report failed.
const EXIT_SESSION_FAILED: u8 = 1;

fn main() -> ExitCode {
    let args = match sandbox::parse_args(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(error) => {
            complain!("rho-planner-worker: {}", error.chain());
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let report = sandbox::harden(args.mode, &args.options);
    let refused = report.refused.clone();
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = write_message(
        &mut stdout,
        &Envelope::new(WorkerMessage::Hardening(report)),
    ) {
        complain!("rho-planner-worker: cannot send the hardening report: {error}");
        return ExitCode::from(EXIT_REPORT_FAILED);
    }
    if let Some(reason) = refused {
        complain!("rho-planner-worker: refusing to evaluate: {reason}");
        return ExitCode::from(EXIT_REFUSED);
    }
    // A worker with a protection left out answers probes only.
    let probes_only = args.options.omit.is_some();
    match session::serve(std::io::stdin().lock(), stdout, probes_only) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            complain!("rho-planner-worker: {}", error_chain(&error));
            ExitCode::from(EXIT_SESSION_FAILED)
        }
    }
}

/// An error and its sources on one line, for stderr (which the host keeps for diagnostics):
/// the same rendering as `rho::workflow::plan::error_chain`, which this crate cannot depend
/// on (it depends only on `rho-ipc`).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
