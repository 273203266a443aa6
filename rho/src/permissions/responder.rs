//! The terminal approval responder: asks a human on stderr and reads the answer from stdin.
//!
//! It exists only when both stdin and stderr are terminals; a headless process has no
//! responder, so the modes that need a human fail closed in policy.
//!
//! Invariant: only an explicit `y` or `yes` approves; an empty line, any other text, end of
//! input or a read error denies. Every text shown comes from the request and is escaped, so a
//! crafted argument or path cannot move the cursor or rewrite the prompt.

use std::io::{BufRead, IsTerminal as _, Read as _, Write};

use rho_policy::{
    ApprovalAnswer, ApprovalContext, ApprovalReason, ApprovalResponder, CommandRequest,
};

/// The reason recorded when the human says anything but yes.
pub const PROMPT_DENIAL: &str = "denied by the user at the prompt";

/// The longest answer line read; the rest of a longer line is not consumed as a later answer.
const ANSWER_LIMIT: u64 = 256;

/// Prompts on the controlling terminal.
#[derive(Debug)]
pub struct TerminalResponder {
    _private: (),
}

impl TerminalResponder {
    /// A responder when stdin and stderr are both terminals; `None` when headless.
    pub fn detect() -> Option<Self> {
        (std::io::stdin().is_terminal() && std::io::stderr().is_terminal())
            .then_some(TerminalResponder { _private: () })
    }
}

impl ApprovalResponder for TerminalResponder {
    fn ask(&mut self, req: &CommandRequest, context: &ApprovalContext) -> ApprovalAnswer {
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        let mut output = std::io::stderr().lock();
        prompt(&mut input, &mut output, req, context)
    }
}

/// Shows the request on `output`, reads one line from `input` and turns it into an answer.
pub fn prompt(
    input: &mut impl BufRead,
    output: &mut impl Write,
    req: &CommandRequest,
    context: &ApprovalContext,
) -> ApprovalAnswer {
    if write_request(output, req, context).is_err() {
        // Nobody saw the question, so nobody can have approved it.
        return ApprovalAnswer::Deny {
            reason: "the approval prompt could not be shown".to_owned(),
        };
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
    req: &CommandRequest,
    context: &ApprovalContext,
) -> std::io::Result<()> {
    writeln!(output)?;
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
    use std::path::PathBuf;

    use rho_policy::{ExecutableIdentity, OperationClass, PermissionMode};

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
