//! The classifier executable configured with `[behavior] classifier = ["/path/to/exe",
//! "args"...]`, asked first in `auto` mode.
//!
//! Protocol. The classifier runs from its argv (never through a shell) in the workspace
//! directory, with the request (a `CommandRequest` or a `ToolRequest`) as one JSON document
//! on stdin and a minimal environment (`PATH`, `HOME`, `LANG`, `LC_ALL`, `LC_CTYPE`, `TZ` when set, and
//! `RHO_IN_CLASSIFIER=1`). It answers on stdout, within [`DEFAULT_CLASSIFIER_TIMEOUT`] and
//! at most 8 KiB:
//!
//! - `{"version":1,"decision":"allow"}` with exit status 0 allows;
//! - `{"version":1,"decision":"deny","reason":"..."}` with exit status 0 or 2 denies, and exit
//!   status 2 alone denies too (the reason is then taken from stderr).
//!
//! Unlike a hook, which can only `continue` (not object) or deny, a classifier grants, so the
//! positive word is `allow`: a hook script reused as a classifier by mistake answers
//! `continue`, which is malformed here and therefore a denial rather than a grant.
//!
//! Invariant: only a clean exit with a well-formed `allow` answer allows; a timeout, crash,
//! other exit status, missing, oversized or malformed answer is
//! [`ClassifierAnswer::Error`], which policy counts as a denial.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rho_policy::hooks::{HOOK_BASE_ENV, HOOK_OUTPUT_LIMIT};
use rho_policy::{Classifier, ClassifierAnswer, HookRun, PermissionRequest};

use super::HostEnvironment;
use super::spawn::{HelperProcess, run_helper};

/// How long the classifier may take to answer.
pub const DEFAULT_CLASSIFIER_TIMEOUT: Duration = Duration::from_mins(1);
/// The most bytes of answer accepted.
pub const CLASSIFIER_OUTPUT_LIMIT: usize = HOOK_OUTPUT_LIMIT;

/// The configured classifier executable; the host's [`Classifier`].
#[derive(Clone, Debug)]
pub struct ClassifierCommand {
    argv: Vec<String>,
    base: PathBuf,
    cwd: PathBuf,
    env: HostEnvironment,
    timeout: Duration,
}

impl ClassifierCommand {
    /// The classifier `argv` (from the configuration), a relative program path resolved
    /// against `base` (`$RHO_HOME`), run in `cwd` (the workspace) with variables picked from
    /// `env`.
    pub fn new(argv: Vec<String>, base: &Path, cwd: &Path, env: HostEnvironment) -> Self {
        ClassifierCommand {
            argv,
            base: base.to_path_buf(),
            cwd: cwd.to_path_buf(),
            env,
            timeout: DEFAULT_CLASSIFIER_TIMEOUT,
        }
    }

    /// Overrides the answer timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The configured argv.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    fn environment(&self) -> Vec<(String, OsString)> {
        let mut vars: Vec<(String, OsString)> = HOOK_BASE_ENV
            .iter()
            .filter_map(|name| {
                self.env
                    .lookup(name)
                    .map(|value| ((*name).to_owned(), value))
            })
            .collect();
        vars.push(("RHO_IN_CLASSIFIER".to_owned(), OsString::from("1")));
        vars
    }
}

impl Classifier for ClassifierCommand {
    fn classify(&mut self, req: PermissionRequest<'_>) -> ClassifierAnswer {
        let Some((program, args)) = self.argv.split_first() else {
            return ClassifierAnswer::Error {
                detail: "the classifier command is empty".to_owned(),
            };
        };
        let document = match req.to_json().and_then(|value| serde_json::to_vec(&value)) {
            Ok(bytes) => bytes,
            Err(err) => {
                return ClassifierAnswer::Error {
                    detail: format!("cannot encode the request: {err}"),
                };
            }
        };
        let path = Path::new(program);
        let program = if program.contains('/') && path.is_relative() {
            self.base.join(path)
        } else {
            path.to_path_buf()
        };
        let env = self.environment();
        let run = run_helper(&HelperProcess {
            program: &program,
            args,
            cwd: &self.cwd,
            env: &env,
            stdin: &document,
            timeout: self.timeout,
            keep_bytes: CLASSIFIER_OUTPUT_LIMIT + 1,
        });
        let answer = classifier_answer(&run);
        tracing::debug!(request = %req, ?answer, "classifier answered");
        answer
    }
}

/// How one classifier run ended, as an answer (see the module docs for the protocol).
pub fn classifier_answer(run: &HookRun) -> ClassifierAnswer {
    let error = |detail: String| ClassifierAnswer::Error { detail };
    match run {
        HookRun::Exited {
            code: 0, stdout, ..
        } => match parse_answer(stdout) {
            Ok(answer) => answer,
            Err(problem) => error(format!("invalid answer: {problem}")),
        },
        HookRun::Exited {
            code: 2,
            stdout,
            stderr,
        } => {
            let reason = match parse_answer(stdout) {
                Ok(ClassifierAnswer::Deny { reason }) if !reason.trim().is_empty() => reason,
                _ => {
                    let text = bounded_text(stderr);
                    if text.is_empty() {
                        "classifier exited with status 2".to_owned()
                    } else {
                        text
                    }
                }
            };
            ClassifierAnswer::Deny { reason }
        }
        HookRun::Exited { code, stderr, .. } => {
            let text = bounded_text(stderr);
            if text.is_empty() {
                error(format!("exited with status {code}"))
            } else {
                error(format!("exited with status {code}: {text}"))
            }
        }
        HookRun::Signaled { signal } => error(format!("killed by signal {signal}")),
        HookRun::TimedOut { after } => error(format!("timed out after {}ms", after.as_millis())),
        HookRun::SpawnFailed { detail } => error(format!("could not start: {detail}")),
    }
}

fn bounded_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(CLASSIFIER_OUTPUT_LIMIT)])
        .trim()
        .to_owned()
}

/// `Allow` or `Deny` from a well-formed answer; the problem otherwise.
fn parse_answer(stdout: &[u8]) -> Result<ClassifierAnswer, String> {
    if stdout.len() > CLASSIFIER_OUTPUT_LIMIT {
        return Err(format!("output exceeds {CLASSIFIER_OUTPUT_LIMIT} bytes"));
    }
    if stdout.iter().all(u8::is_ascii_whitespace) {
        return Err("no output".to_owned());
    }
    let value: serde_json::Value =
        serde_json::from_slice(stdout).map_err(|err| format!("malformed JSON: {err}"))?;
    let object = value.as_object().ok_or("expected a JSON object")?;
    if let Some(key) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "version" | "decision" | "reason"))
    {
        return Err(format!("unknown field `{key}`"));
    }
    match object.get("version") {
        Some(v) if v.as_u64() == Some(1) => {}
        Some(v) => return Err(format!("unsupported version {v}; expected 1")),
        None => return Err("missing `version`".to_owned()),
    }
    let reason = match object.get("reason") {
        None => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(format!("`reason` must be a string, got {other}")),
    };
    match object.get("decision").and_then(serde_json::Value::as_str) {
        Some("allow") if reason.is_none() => Ok(ClassifierAnswer::Allow),
        Some("allow") => Err("`reason` is only allowed with decision `deny`".to_owned()),
        Some("deny") => Ok(ClassifierAnswer::Deny {
            reason: reason.unwrap_or_default(),
        }),
        Some(other) => Err(format!(
            "unknown decision `{other}`; expected `allow` or `deny`"
        )),
        None => Err("missing or non-string `decision`".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32, stdout: &str, stderr: &str) -> HookRun {
        HookRun::Exited {
            code,
            stdout: stdout.into(),
            stderr: stderr.into(),
        }
    }

    #[test]
    fn allow_and_deny_answers_with_a_clean_exit() {
        assert_eq!(
            classifier_answer(&exited(0, r#"{"version":1,"decision":"allow"}"#, "")),
            ClassifierAnswer::Allow
        );
        assert_eq!(
            classifier_answer(&exited(
                0,
                r#"{"version":1,"decision":"deny","reason":"rm -rf"}"#,
                ""
            )),
            ClassifierAnswer::Deny {
                reason: "rm -rf".to_owned()
            }
        );
    }

    #[test]
    fn exit_two_denies_with_the_best_reason_available() {
        let deny = r#"{"version":1,"decision":"deny","reason":"network"}"#;
        assert_eq!(
            classifier_answer(&exited(2, deny, "ignored")),
            ClassifierAnswer::Deny {
                reason: "network".to_owned()
            }
        );
        assert_eq!(
            classifier_answer(&exited(2, "", "too risky\n")),
            ClassifierAnswer::Deny {
                reason: "too risky".to_owned()
            }
        );
        assert_eq!(
            classifier_answer(&exited(2, r#"{"version":1,"decision":"allow"}"#, "")),
            ClassifierAnswer::Deny {
                reason: "classifier exited with status 2".to_owned()
            }
        );
    }

    #[test]
    fn anything_else_is_an_error_never_an_allow() {
        let cases = [
            exited(0, r#"{"version":1,"decision":"continue"}"#, ""),
            exited(0, r#"{"version":2,"decision":"allow"}"#, ""),
            exited(0, r#"{"decision":"allow"}"#, ""),
            exited(0, r#"{"version":1,"decision":"allow","reason":"x"}"#, ""),
            exited(0, r#"{"version":1,"decision":"allow","extra":1}"#, ""),
            exited(0, "allow", ""),
            exited(0, "", ""),
            exited(
                0,
                &format!(
                    "{:width$}",
                    r#"{"version":1,"decision":"allow"}"#,
                    width = 9000
                ),
                "",
            ),
            exited(1, r#"{"version":1,"decision":"allow"}"#, "oops"),
            HookRun::Signaled { signal: 9 },
            HookRun::TimedOut {
                after: Duration::from_secs(1),
            },
            HookRun::SpawnFailed {
                detail: "ENOENT".to_owned(),
            },
        ];
        for run in cases {
            let answer = classifier_answer(&run);
            assert!(
                matches!(answer, ClassifierAnswer::Error { .. }),
                "{run:?} gave {answer:?}"
            );
        }
        let ClassifierAnswer::Error { detail } =
            classifier_answer(&exited(0, r#"{"version":1,"decision":"continue"}"#, ""))
        else {
            unreachable!()
        };
        assert!(
            detail.contains("`continue`") && detail.contains("`allow`"),
            "{detail}"
        );
    }
}
