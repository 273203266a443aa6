//! The interactive session's approval responder: asks inline, on the session's terminal,
//! whether a tool call that policy holds for approval may run.
//!
//! Invariant: only an explicit `y` or `yes` approves; anything else — another answer, end of
//! input, a read error, or the turn being cancelled (Ctrl-C) while the question is open —
//! denies. The question shows only sanitized text, so a crafted path or command cannot
//! rewrite the prompt.

use std::io::{self, Write as _};
use std::os::fd::{AsFd as _, BorrowedFd};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use rho_policy::{ApprovalAnswer, ApprovalContext, ApprovalResponder, PermissionRequest};

use super::render::sanitize;
use super::session::TurnCancelled;
use crate::runtime::host::Interaction;
use crate::tools::{ConfirmAnswer, ConfirmRequest};

/// The reason recorded when the person answers anything but yes.
pub const DECLINED: &str = "declined by the user at the prompt";

/// The reason recorded when the turn was cancelled while the question was open.
pub const CANCELLED: &str = "the turn was cancelled while approval was being asked";

/// How long one wait for input lasts before the cancellation flag is looked at again.
const WAIT_SLICE_MS: u16 = 25;

/// The longest answer read.
const ANSWER_LIMIT: usize = 256;

/// Asks on the process's terminal (stderr for the question, stdin for the answer).
#[derive(Debug)]
pub struct InlineResponder {
    cancelled: TurnCancelled,
}

impl InlineResponder {
    /// A responder that gives up when `cancelled` is set.
    pub fn new(cancelled: TurnCancelled) -> Self {
        InlineResponder { cancelled }
    }
}

/// The question, as shown.
pub fn question(req: PermissionRequest<'_>, context: &ApprovalContext) -> String {
    format!(
        "\n? allow {} [{} mode: {}]\n  y = allow once, anything else denies > ",
        sanitize(&req.to_string()).replace('\n', " "),
        context.mode,
        context.class.describe(),
    )
}

/// Parses an answer line: `y`/`yes` (any case, surrounding blanks ignored) approves.
pub fn approves(line: &str) -> bool {
    matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

impl ApprovalResponder for InlineResponder {
    fn ask(&mut self, req: PermissionRequest<'_>, context: &ApprovalContext) -> ApprovalAnswer {
        if self.cancelled.is_set() {
            return deny(CANCELLED);
        }
        let mut err = io::stderr().lock();
        let _ = err.write_all(question(req, context).as_bytes());
        let _ = err.flush();
        drop(err);
        let stdin = io::stdin();
        let answer = read_answer(stdin.as_fd(), &self.cancelled);
        let mut err = io::stderr().lock();
        match answer {
            Some(line) if approves(&line) => {
                let _ = writeln!(err, "  allowed");
                ApprovalAnswer::Approve
            }
            Some(_) => {
                let _ = writeln!(err, "  denied");
                deny(DECLINED)
            }
            None if self.cancelled.is_set() => {
                let _ = writeln!(err, "\n  cancelled");
                deny(CANCELLED)
            }
            None => {
                let _ = writeln!(err, "\n  no answer (input closed); denied");
                deny("no answer: the terminal input closed")
            }
        }
    }
}

/// How the session's tools reach the person at this terminal: inline approvals, and inline
/// consent questions (running one exact workflow digest) under the same rules — only an
/// explicit yes consents.
pub fn interaction(cancelled: TurnCancelled) -> Interaction {
    let approvals = Box::new(InlineResponder::new(cancelled.clone()));
    let consent = Box::new(move |request: &ConfirmRequest| confirm(request, &cancelled));
    Interaction { approvals, consent }
}

/// Asks `request` on the terminal; anything but `y`/`yes` refuses, with the reason.
fn confirm(request: &ConfirmRequest, cancelled: &TurnCancelled) -> ConfirmAnswer {
    if cancelled.is_set() {
        return refuse(CANCELLED);
    }
    let mut err = io::stderr().lock();
    let _ = write!(
        err,
        "\n? {}\n  {}\n  y = yes, anything else refuses > ",
        sanitize(&request.question).replace('\n', " "),
        sanitize(&request.detail).replace('\n', "\n  "),
    );
    let _ = err.flush();
    drop(err);
    let stdin = io::stdin();
    let answer = read_answer(stdin.as_fd(), cancelled);
    let mut err = io::stderr().lock();
    match answer {
        Some(line) if approves(&line) => {
            let _ = writeln!(err, "  confirmed");
            ConfirmAnswer::Accepted
        }
        Some(_) => {
            let _ = writeln!(err, "  refused");
            refuse(DECLINED)
        }
        None if cancelled.is_set() => refuse(CANCELLED),
        None => refuse("no answer: the terminal input closed"),
    }
}

fn refuse(reason: &str) -> ConfirmAnswer {
    ConfirmAnswer::Refused {
        reason: reason.to_owned(),
    }
}

fn deny(reason: &str) -> ApprovalAnswer {
    ApprovalAnswer::Deny {
        reason: reason.to_owned(),
    }
}

/// Reads one line from `fd`, byte by byte so nothing past the newline is consumed, giving up
/// when `cancelled` is set or input ends.
fn read_answer(fd: BorrowedFd<'_>, cancelled: &TurnCancelled) -> Option<String> {
    let mut line = Vec::new();
    loop {
        if cancelled.is_set() {
            return None;
        }
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(WAIT_SLICE_MS)) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(_) => return None,
        }
        let mut byte = [0_u8; 1];
        match nix::unistd::read(fd, &mut byte) {
            Ok(0) => return None,
            Ok(_) if byte[0] == b'\n' => {
                return Some(String::from_utf8_lossy(&line).into_owned());
            }
            Ok(_) => {
                if line.len() < ANSWER_LIMIT {
                    line.push(byte[0]);
                }
            }
            Err(Errno::EINTR | Errno::EAGAIN) => {}
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_yes_approves() {
        for yes in ["y", "Y", " yes ", "YES\r"] {
            assert!(approves(yes), "{yes:?}");
        }
        for no in ["", "n", "no", "yess", "y es", "sure"] {
            assert!(!approves(no), "{no:?}");
        }
    }

    #[test]
    fn an_answer_is_read_up_to_the_newline_and_cancellation_gives_up() {
        let (r, w) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&w, b"yes\nnext").unwrap();
        let flag = TurnCancelled::default();
        assert_eq!(read_answer(r.as_fd(), &flag).as_deref(), Some("yes"));
        flag.set();
        assert_eq!(read_answer(r.as_fd(), &flag), None);
        flag.clear();
        drop(w);
        assert_eq!(read_answer(r.as_fd(), &flag), None);
    }
}
