//! The terminal approval responder: asks a human on stderr and reads the answer from stdin.
//!
//! It exists only when both stdin and stderr are terminals; a headless process has no
//! responder, so the modes that need a human fail closed in policy. While it waits it polls
//! stdin in short slices, so a run that is being cancelled ([`PromptAbandon`]) stops asking
//! at once; and it shares the terminal with a live progress line through [`terminal`]: while
//! a prompt is open nothing else draws.
//!
//! Invariant: only an explicit `y` or `yes` approves; an empty line, any other text, end of
//! input, a read error or an abandoned prompt denies. Every text shown comes from the
//! request and is escaped, so a crafted argument or path cannot move the cursor or rewrite
//! the prompt.

use std::io::{BufRead, IsTerminal as _, Read as _, Write};
use std::os::fd::{AsFd as _, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use rho_policy::{
    ApprovalAnswer, ApprovalContext, ApprovalReason, ApprovalResponder, PermissionRequest,
};

/// The reason recorded when the human says anything but yes.
pub const PROMPT_DENIAL: &str = "denied by the user at the prompt";

/// The reason recorded when the prompt was given up because the run is being cancelled.
pub const PROMPT_ABANDONED: &str = "the run was cancelled while approval was being asked";

/// The longest answer line read; the rest of a longer line is not consumed as a later answer.
const ANSWER_LIMIT: u64 = 256;

/// How long one wait for input lasts before the prompt looks for abandonment again.
const WAIT_SLICE_MS: u16 = 25;

/// Set once a run is being cancelled: the prompt open now gives up, and none is shown again.
/// Clones share the flag (the owner sets it, the responder reads it).
#[derive(Debug, Clone, Default)]
pub struct PromptAbandon(Arc<AtomicBool>);

impl PromptAbandon {
    /// A flag that is not set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives up the prompt in progress and every later one.
    pub fn abandon(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`Self::abandon`] was called.
    pub fn is_abandoned(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// What shares the terminal with an approval prompt: a live progress line (drawn on stdout
/// and erased with `\r`, which would wipe out a prompt's question). Both sides take the
/// lock around what they draw, so a redraw can never land after the prompt was shown.
#[derive(Debug)]
pub struct TerminalShare {
    prompt_open: bool,
    live_line: bool,
}

static TERMINAL: Mutex<TerminalShare> = Mutex::new(TerminalShare {
    prompt_open: false,
    live_line: false,
});

/// The terminal's sharing state, locked (one terminal per process).
pub fn terminal() -> MutexGuard<'static, TerminalShare> {
    TERMINAL.lock().unwrap_or_else(PoisonError::into_inner)
}

impl TerminalShare {
    /// Whether an approval prompt is open: a live view must not draw.
    pub fn prompt_open(&self) -> bool {
        self.prompt_open
    }

    /// Whether a live line is on the terminal now (the prompt erases it before asking).
    pub fn live_line(&self) -> bool {
        self.live_line
    }

    /// Records whether a live line is on the terminal.
    pub fn set_live_line(&mut self, drawn: bool) {
        self.live_line = drawn;
    }
}

/// Marks a prompt open for as long as it lives.
struct OpenPrompt;

impl OpenPrompt {
    /// Opens a prompt; returns whether a live line must be erased first.
    fn enter() -> (Self, bool) {
        let mut share = terminal();
        share.prompt_open = true;
        let erase = std::mem::replace(&mut share.live_line, false);
        (OpenPrompt, erase)
    }
}

impl Drop for OpenPrompt {
    fn drop(&mut self) {
        terminal().prompt_open = false;
    }
}

/// Prompts on the controlling terminal.
#[derive(Debug)]
pub struct TerminalResponder {
    abandon: PromptAbandon,
}

impl TerminalResponder {
    /// A responder when stdin and stderr are both terminals; `None` when headless.
    pub fn detect() -> Option<Self> {
        (std::io::stdin().is_terminal() && std::io::stderr().is_terminal()).then(|| {
            TerminalResponder {
                abandon: PromptAbandon::new(),
            }
        })
    }

    /// The flag that makes this responder give up (see [`PromptAbandon`]).
    pub fn abandon_flag(&self) -> PromptAbandon {
        self.abandon.clone()
    }
}

impl ApprovalResponder for TerminalResponder {
    fn ask(&mut self, req: PermissionRequest<'_>, context: &ApprovalContext) -> ApprovalAnswer {
        if self.abandon.is_abandoned() {
            return abandoned();
        }
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        let mut output = std::io::stderr().lock();
        let (_open, erase_live) = OpenPrompt::enter();
        // A second handle to poll on: `input` is borrowed by the prompt meanwhile.
        let fd = std::io::stdin();
        prompt_until(&mut input, &mut output, req, context, erase_live, || {
            wait_for_input(fd.as_fd(), &self.abandon)
        })
    }
}

/// How waiting for an answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Input (or end of input, or an error) is there: read the answer.
    Ready,
    /// The prompt was abandoned: stop asking.
    Abandoned,
}

/// Waits in short slices until `fd` is readable or `abandon` is set.
pub fn wait_for_input(fd: BorrowedFd<'_>, abandon: &PromptAbandon) -> Wait {
    loop {
        if abandon.is_abandoned() {
            return Wait::Abandoned;
        }
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(WAIT_SLICE_MS)) {
            Ok(0) | Err(Errno::EINTR) => {}
            // Readable, hung up or in error: the read tells which, and only a `y` approves.
            Ok(_) | Err(_) => return Wait::Ready,
        }
    }
}

fn abandoned() -> ApprovalAnswer {
    ApprovalAnswer::Deny {
        reason: PROMPT_ABANDONED.to_owned(),
    }
}

/// Shows the request on `output`, reads one line from `input` and turns it into an answer.
pub fn prompt<'a>(
    input: &mut impl BufRead,
    output: &mut impl Write,
    req: impl Into<PermissionRequest<'a>>,
    context: &ApprovalContext,
) -> ApprovalAnswer {
    prompt_until(input, output, req.into(), context, false, || Wait::Ready)
}

/// [`prompt`], reading only once `wait` says input is there; when it says the prompt was
/// abandoned, the answer is a refusal and nothing is read. `erase_live` replaces the line
/// the cursor is on (a live progress line) instead of starting below it.
pub fn prompt_until(
    input: &mut impl BufRead,
    output: &mut impl Write,
    req: PermissionRequest<'_>,
    context: &ApprovalContext,
    erase_live: bool,
    wait: impl FnOnce() -> Wait,
) -> ApprovalAnswer {
    if write_request(output, req, context, erase_live).is_err() {
        // Nobody saw the question, so nobody can have approved it.
        return ApprovalAnswer::Deny {
            reason: "the approval prompt could not be shown".to_owned(),
        };
    }
    if wait() == Wait::Abandoned {
        let _ = writeln!(output, "cancelled");
        return abandoned();
    }
    let answer = read_answer(input);
    if matches!(answer.as_deref(), Some("y" | "yes")) {
        let _ = writeln!(output, "approved");
        ApprovalAnswer::Approve
    } else {
        let _ = writeln!(output, "denied");
        ApprovalAnswer::Deny {
            reason: PROMPT_DENIAL.to_owned(),
        }
    }
}

/// One answer line, lowercased and trimmed; `None` at end of input, on a read error, or for a
/// line longer than [`ANSWER_LIMIT`] (whose remainder is skipped, so it cannot answer the
/// next prompt).
fn read_answer(input: &mut impl BufRead) -> Option<String> {
    let mut line = Vec::new();
    let read = input
        .by_ref()
        .take(ANSWER_LIMIT)
        .read_until(b'\n', &mut line)
        .ok()?;
    if read == 0 {
        return None;
    }
    if !line.ends_with(b"\n") && read as u64 == ANSWER_LIMIT {
        skip_line(input);
        return None;
    }
    Some(String::from_utf8_lossy(&line).trim().to_ascii_lowercase())
}

fn skip_line(input: &mut impl BufRead) {
    loop {
        let (consumed, done) = match input.fill_buf() {
            Ok([]) | Err(_) => return,
            Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            },
        };
        input.consume(consumed);
        if done {
            return;
        }
    }
}

// Debug formatting is deliberate: it quotes and escapes control characters, so the prompt
// shows exactly what will run and a crafted path cannot drive the terminal.
#[allow(clippy::unnecessary_debug_formatting)]
fn write_request(
    output: &mut impl Write,
    req: PermissionRequest<'_>,
    context: &ApprovalContext,
    erase_live: bool,
) -> std::io::Result<()> {
    if erase_live {
        write!(output, "\r\x1b[2K")?;
    } else {
        writeln!(output)?;
    }
    let req = match req {
        PermissionRequest::Command(req) => req,
        PermissionRequest::Tool(req) => {
            writeln!(output, "rho: approval needed for tool {:?}", req.tool)?;
            writeln!(output, "  why:        {}", why(context))?;
            writeln!(output, "  call:       {:?}", req.summary)?;
            writeln!(output, "  cwd:        {:?}", req.working_directory)?;
            writeln!(output, "  mode:       {}", context.mode)?;
            write!(output, "Run it? [y/N] ")?;
            return output.flush();
        }
    };
    writeln!(
        output,
        "rho: approval needed for node {:?} (attempt {})",
        req.node_id, req.attempt
    )?;
    writeln!(output, "  why:        {}", why(context))?;
    writeln!(output, "  executable: {:?}", req.executable.path)?;
    writeln!(
        output,
        "  sha256:     {}",
        req.executable.sha256.escape_debug()
    )?;
    writeln!(output, "  argv:       {:?}", req.argv)?;
    writeln!(output, "  cwd:        {:?}", req.cwd)?;
    writeln!(output, "  mode:       {}", context.mode)?;
    write!(output, "Run it? [y/N] ")?;
    output.flush()
}

/// Why approval is asked, in words.
fn why(context: &ApprovalContext) -> String {
    let what = context.class.describe();
    match &context.reason {
        ApprovalReason::ModeRequiresApproval => {
            format!(
                "permission mode {} requires approval for {what}",
                context.mode
            )
        }
        ApprovalReason::NoClassifier => format!(
            "permission mode {} asks a classifier about {what} first, and none is configured",
            context.mode
        ),
        ApprovalReason::ClassifierEscalation {
            classifier_reason,
            consecutive_denials,
            total_denials,
        } => format!(
            "the classifier denied it ({}); after {consecutive_denials} consecutive and \
             {total_denials} total classifier denials a human decides",
            classifier_reason.escape_debug()
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::os::fd::AsFd as _;
    use std::path::PathBuf;

    use rho_policy::{CommandRequest, ExecutableIdentity, OperationClass, PermissionMode};

    use super::*;

    fn request() -> CommandRequest {
        CommandRequest {
            run_id: "run-1".to_owned(),
            plan_digest: "ab".repeat(32),
            node_id: "deploy".to_owned(),
            attempt: 2,
            executable: ExecutableIdentity {
                path: PathBuf::from("/usr/bin/rsync"),
                sha256: "cd".repeat(32),
            },
            interpreter: None,
            argv: vec![
                "rsync".to_owned(),
                "-a".to_owned(),
                "\u{1b}[2Jevil".to_owned(),
            ],
            cwd: PathBuf::from("/work/site"),
            environment_policy: "minimal".to_owned(),
            timeout_ms: 1000,
            output_limit_bytes: 1024,
        }
    }

    fn context(reason: ApprovalReason) -> ApprovalContext {
        ApprovalContext {
            mode: PermissionMode::Supervised,
            class: OperationClass::Process,
            reason,
        }
    }

    fn ask(answer: &[u8], reason: ApprovalReason) -> (ApprovalAnswer, String) {
        let mut input = Cursor::new(answer.to_vec());
        let mut output = Vec::new();
        let result = prompt(&mut input, &mut output, &request(), &context(reason));
        (result, String::from_utf8(output).unwrap())
    }

    #[test]
    fn prompt_shows_node_executable_digest_argv_cwd_mode_and_why() {
        let (_, shown) = ask(b"n\n", ApprovalReason::ModeRequiresApproval);
        assert!(shown.contains("node \"deploy\" (attempt 2)"), "{shown}");
        assert!(shown.contains("\"/usr/bin/rsync\""), "{shown}");
        assert!(shown.contains(&"cd".repeat(32)), "{shown}");
        assert!(
            shown.contains(r#"["rsync", "-a", "\u{1b}[2Jevil"]"#),
            "{shown}"
        );
        assert!(shown.contains("\"/work/site\""), "{shown}");
        assert!(shown.contains("mode:       supervised"), "{shown}");
        assert!(
            shown.contains("permission mode supervised requires approval for process execution"),
            "{shown}"
        );
        assert!(
            !shown.contains('\u{1b}'),
            "a raw escape reached the terminal: {shown:?}"
        );
    }

    #[test]
    fn only_y_or_yes_approves() {
        for yes in [&b"y\n"[..], b"yes\n", b"  YES \n", b"Y"] {
            let (answer, shown) = ask(yes, ApprovalReason::ModeRequiresApproval);
            assert_eq!(answer, ApprovalAnswer::Approve, "{yes:?}");
            assert!(shown.ends_with("approved\n"), "{shown}");
        }
        for no in [
            &b"\n"[..],
            b"n\n",
            b"no\n",
            b"yess\n",
            b"sure\n",
            b"",
            b"y es\n",
        ] {
            let (answer, _) = ask(no, ApprovalReason::ModeRequiresApproval);
            assert_eq!(
                answer,
                ApprovalAnswer::Deny {
                    reason: PROMPT_DENIAL.to_owned()
                },
                "{no:?}"
            );
        }
    }

    #[test]
    fn an_overlong_line_is_not_an_approval() {
        let mut long = vec![b' '; 300];
        long.extend_from_slice(b"yes\ny\n");
        let mut input = Cursor::new(long);
        let ctx = context(ApprovalReason::ModeRequiresApproval);
        let first = prompt(&mut input, &mut Vec::new(), &request(), &ctx);
        assert!(matches!(first, ApprovalAnswer::Deny { .. }));
        // The tail of the long line is skipped; the next line is the next answer.
        let second = prompt(&mut input, &mut Vec::new(), &request(), &ctx);
        assert_eq!(second, ApprovalAnswer::Approve);
    }

    #[test]
    fn escalation_prompt_says_the_classifier_denied_and_how_often() {
        let (_, shown) = ask(
            b"n\n",
            ApprovalReason::ClassifierEscalation {
                classifier_reason: "touches the network".to_owned(),
                consecutive_denials: 3,
                total_denials: 7,
            },
        );
        assert!(
            shown.contains("the classifier denied it (touches the network)"),
            "{shown}"
        );
        assert!(shown.contains("3 consecutive and 7 total"), "{shown}");
        let (_, shown) = ask(b"n\n", ApprovalReason::NoClassifier);
        assert!(shown.contains("none is configured"), "{shown}");
    }

    #[test]
    fn an_abandoned_prompt_denies_without_reading_an_answer() {
        let mut input = Cursor::new(b"yes\n".to_vec());
        let mut output = Vec::new();
        let answer = prompt_until(
            &mut input,
            &mut output,
            (&request()).into(),
            &context(ApprovalReason::ModeRequiresApproval),
            false,
            || Wait::Abandoned,
        );
        assert_eq!(
            answer,
            ApprovalAnswer::Deny {
                reason: PROMPT_ABANDONED.to_owned()
            }
        );
        let shown = String::from_utf8(output).unwrap();
        assert!(shown.ends_with("Run it? [y/N] cancelled\n"), "{shown}");
        assert_eq!(input.position(), 0, "the pending `yes` must stay unread");
    }

    #[test]
    fn a_prompt_over_a_live_line_erases_it_instead_of_starting_below() {
        let ask_with = |erase_live| {
            let mut output = Vec::new();
            let _ = prompt_until(
                &mut Cursor::new(b"n\n".to_vec()),
                &mut output,
                (&request()).into(),
                &context(ApprovalReason::ModeRequiresApproval),
                erase_live,
                || Wait::Ready,
            );
            String::from_utf8(output).unwrap()
        };
        assert!(ask_with(true).starts_with("\r\u{1b}[2Krho: approval needed"));
        assert!(ask_with(false).starts_with("\nrho: approval needed"));
    }

    #[test]
    fn waiting_for_input_gives_up_once_abandoned_and_sees_input_otherwise() {
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        let abandon = PromptAbandon::new();
        let setter = abandon.clone();
        let waiter = std::thread::spawn(move || {
            let wait = wait_for_input(read_end.as_fd(), &abandon);
            (wait, read_end)
        });
        setter.abandon();
        let (wait, read_end) = waiter.join().unwrap();
        assert_eq!(wait, Wait::Abandoned);

        nix::unistd::write(&write_end, b"y\n").unwrap();
        assert_eq!(
            wait_for_input(read_end.as_fd(), &PromptAbandon::new()),
            Wait::Ready
        );
        drop(write_end);
    }

    #[test]
    fn an_open_prompt_takes_the_live_line_and_pauses_redraws_until_it_closes() {
        terminal().set_live_line(true);
        let (open, erase) = OpenPrompt::enter();
        assert!(erase, "the live line is erased by the prompt");
        assert!(terminal().prompt_open());
        assert!(!terminal().live_line());
        drop(open);
        assert!(!terminal().prompt_open());
        let (open, erase) = OpenPrompt::enter();
        assert!(!erase, "nothing to erase without a live line");
        drop(open);
    }

    #[test]
    fn unwritable_prompt_denies() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("closed"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut input = Cursor::new(b"yes\n".to_vec());
        let answer = prompt(
            &mut input,
            &mut Broken,
            &request(),
            &context(ApprovalReason::ModeRequiresApproval),
        );
        assert!(matches!(answer, ApprovalAnswer::Deny { .. }));
    }
}
