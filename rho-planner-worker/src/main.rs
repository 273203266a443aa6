//! The `rho-planner-worker` executable: harden, report, then serve one conversation.
//!
//! Invariant: nothing is read from stdin before [`sandbox::harden`] has run and its report
//! has been sent; a refused worker exits without reading at all.

use std::io::Write;
use std::process::ExitCode;

use rho_ipc::frame::{read_message, write_message};
use rho_ipc::message::{Envelope, HostMessage, PROTOCOL_VERSION, WorkerMessage};
use rho_planner_worker::sandbox::{self, probe};

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
            eprintln!("rho-planner-worker: {}", error.chain());
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let report = sandbox::harden(args.mode, &args.options);
    let refused = report.refused.clone();
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = write_message(&mut stdout, &Envelope::new(WorkerMessage::Hardening(report)))
    {
        eprintln!("rho-planner-worker: cannot send the hardening report: {error}");
        return ExitCode::from(EXIT_REPORT_FAILED);
    }
    if let Some(reason) = refused {
        eprintln!("rho-planner-worker: refusing to evaluate: {reason}");
        return ExitCode::from(EXIT_REFUSED);
    }
    let mut stdin = std::io::stdin().lock();
    let request: Envelope<HostMessage> = match read_message(&mut stdin) {
        Ok(request) => request,
        Err(error) => {
            eprintln!("rho-planner-worker: {error}");
            return ExitCode::from(EXIT_SESSION_FAILED);
        }
    };
    if request.protocol_version != PROTOCOL_VERSION {
        eprintln!("rho-planner-worker: protocol version {} unsupported", request.protocol_version);
        return ExitCode::from(EXIT_SESSION_FAILED);
    }
    let HostMessage::Probe(p) = request.message else {
        eprintln!("rho-planner-worker: only probes are served by this build");
        return ExitCode::from(EXIT_SESSION_FAILED);
    };
    let handle = std::thread::Builder::new()
        .name("probe".to_owned())
        .stack_size(512 << 20)
        .spawn(move || probe::run(&p));
    let result = match handle.map(std::thread::JoinHandle::join) {
        Ok(Ok(result)) => result,
        _ => return ExitCode::from(EXIT_SESSION_FAILED),
    };
    if write_message(&mut stdout, &Envelope::new(WorkerMessage::ProbeResult(result))).is_err() {
        return ExitCode::from(EXIT_SESSION_FAILED);
    }
    let _ = stdout.flush();
    ExitCode::SUCCESS
}
