//! How a hook's run becomes a verdict: its exit, its bounded output and its JSON answer.
//!
//! Invariant: only a well-formed `continue` answer from a cleanly exiting hook continues;
//! everything else is a denial naming the hook.

use std::time::Duration;

use crate::approval::HookVerdict;

use super::HOOK_OUTPUT_LIMIT;

/// How a hook process ended, as observed by the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookRun {
    /// It exited with `code`. `stdout` holds at most [`HOOK_OUTPUT_LIMIT`] + 1 bytes (the host
    /// stops reading there, which is enough to see it was too long); likewise `stderr`.
    Exited {
        /// Exit status.
        code: i32,
        /// Captured standard output.
        stdout: Vec<u8>,
        /// Captured standard error.
        stderr: Vec<u8>,
    },
    /// It was killed by `signal`.
    Signaled {
        /// Signal number.
        signal: i32,
    },
    /// It was killed after its timeout.
    TimedOut {
        /// The declared timeout.
        after: Duration,
    },
    /// It could not be started.
    SpawnFailed {
        /// The OS error.
        detail: String,
    },
}

/// The verdict of one `before_tool_use` hook run.
///
/// Exit 0 must come with a valid answer on stdout ([`parse_hook_response`]). Exit 2 denies:
/// the reason is taken from a valid deny answer on stdout, else from stderr, else the status.
/// Any other ending denies with a reason saying how the hook ended.
pub fn hook_verdict(hook_id: &str, run: &HookRun) -> HookVerdict {
    let deny = |reason: String| HookVerdict::Deny {
        hook_id: hook_id.to_owned(),
        reason,
    };
    match run {
        HookRun::Exited {
            code: 0, stdout, ..
        } => parse_hook_response(hook_id, stdout),
        HookRun::Exited {
            code: 2,
            stdout,
            stderr,
        } => match response_decision(stdout) {
            Ok(Decision::Deny(Some(reason))) if !reason.trim().is_empty() => deny(reason),
            _ => {
                let text = bounded_text(stderr);
                if text.is_empty() {
                    deny("hook exited with status 2".to_owned())
                } else {
                    deny(text)
                }
            }
        },
        HookRun::Exited { code, .. } => deny(format!("hook failed: exited with status {code}")),
        HookRun::Signaled { signal } => deny(format!("hook crashed: killed by signal {signal}")),
        HookRun::TimedOut { after } => {
            deny(format!("hook timed out after {}ms", after.as_millis()))
        }
        HookRun::SpawnFailed { detail } => deny(format!("hook could not start: {detail}")),
    }
}

pub(super) fn bounded_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(HOOK_OUTPUT_LIMIT)]);
    text.trim().to_owned()
}

pub(super) enum Decision {
    Continue,
    Deny(Option<String>),
}

/// Parses a `before_tool_use` answer: exactly `{"version":1,"decision":"continue"}` or
/// `{"version":1,"decision":"deny","reason":"..."}` (reason optional), at most
/// [`HOOK_OUTPUT_LIMIT`] bytes. Anything else denies, naming the hook.
pub fn parse_hook_response(hook_id: &str, stdout: &[u8]) -> HookVerdict {
    let deny = |reason: String| HookVerdict::Deny {
        hook_id: hook_id.to_owned(),
        reason,
    };
    match response_decision(stdout) {
        Ok(Decision::Continue) => HookVerdict::Continue,
        Ok(Decision::Deny(Some(reason))) if !reason.trim().is_empty() => deny(reason),
        Ok(Decision::Deny(_)) => deny(format!("hook `{hook_id}` denied without a reason")),
        Err(problem) => deny(format!(
            "hook `{hook_id}` gave an invalid answer: {problem}"
        )),
    }
}

pub(super) fn response_decision(stdout: &[u8]) -> Result<Decision, String> {
    if stdout.len() > HOOK_OUTPUT_LIMIT {
        return Err(format!(
            "output exceeds {HOOK_OUTPUT_LIMIT} bytes (at least {} bytes)",
            stdout.len()
        ));
    }
    if stdout.iter().all(u8::is_ascii_whitespace) {
        return Err("no output".to_owned());
    }
    let value: serde_json::Value =
        serde_json::from_slice(stdout).map_err(|err| format!("malformed JSON: {err}"))?;
    let object = value.as_object().ok_or("expected a JSON object")?;
    // `Value` keeps the last of duplicate keys; a hook's answer must not be ambiguous.
    serde_json::from_slice::<UniqueObject>(stdout).map_err(|err| err.to_string())?;
    if let Some(key) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "version" | "decision" | "reason"))
    {
        return Err(format!("unknown field `{key}`"));
    }
    match object.get("version") {
        None => return Err("missing `version`".to_owned()),
        Some(v) if v.as_u64() == Some(1) => {}
        Some(v) => return Err(format!("unsupported version {v}; expected 1")),
    }
    let reason = match object.get("reason") {
        None => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(format!("`reason` must be a string, got {other}")),
    };
    match object.get("decision").map(|d| (d, d.as_str())) {
        None => Err("missing `decision`".to_owned()),
        Some((_, Some("continue"))) if reason.is_some() => {
            Err("`reason` is only allowed with decision `deny`".to_owned())
        }
        Some((_, Some("continue"))) => Ok(Decision::Continue),
        Some((_, Some("deny"))) => Ok(Decision::Deny(reason)),
        Some((d, _)) => Err(format!(
            "unknown decision {d}; expected \"continue\" or \"deny\""
        )),
    }
}

/// A JSON object whose keys are all distinct (parsing fails on a repeated key).
struct UniqueObject;

impl<'de> serde::Deserialize<'de> for UniqueObject {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = UniqueObject;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<UniqueObject, A::Error> {
                let mut seen = std::collections::BTreeSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    if !seen.insert(key.clone()) {
                        return Err(serde::de::Error::custom(format_args!(
                            "duplicate field `{key}`"
                        )));
                    }
                }
                Ok(UniqueObject)
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deny_reason(v: HookVerdict) -> String {
        match v {
            HookVerdict::Deny { hook_id, reason } => {
                assert_eq!(hook_id, "guard");
                reason
            }
            HookVerdict::Continue => panic!("expected a denial"),
        }
    }

    #[test]
    fn response_continue_and_deny() {
        assert_eq!(
            parse_hook_response("guard", br#"{"version":1,"decision":"continue"}"#),
            HookVerdict::Continue
        );
        assert_eq!(
            parse_hook_response("guard", b"{\"decision\":\"continue\",\"version\":1}\n"),
            HookVerdict::Continue
        );
        let reason = deny_reason(parse_hook_response(
            "guard",
            br#"{"version":1,"decision":"deny","reason":"rm -rf is off limits"}"#,
        ));
        assert_eq!(reason, "rm -rf is off limits");
        let reason = deny_reason(parse_hook_response(
            "guard",
            br#"{"version":1,"decision":"deny"}"#,
        ));
        assert_eq!(reason, "hook `guard` denied without a reason");
    }

    #[test]
    fn any_other_response_denies_naming_the_hook() {
        let too_big = format!(
            "{{\"version\":1,\"decision\":\"continue\"}}{}",
            " ".repeat(HOOK_OUTPUT_LIMIT)
        );
        let cases: [(&[u8], &str); 14] = [
            (
                br#"{"version":1,"decision":"deny","decision":"continue"}"#,
                "duplicate field `decision`",
            ),
            (
                br#"{"version":1,"version":1,"decision":"continue"}"#,
                "duplicate field `version`",
            ),
            (b"", "no output"),
            (b"  \n", "no output"),
            (b"ok", "malformed JSON"),
            (br#"{"version":1,"decision":"continue""#, "malformed JSON"),
            (b"[1]", "expected a JSON object"),
            (
                br#"{"version":2,"decision":"continue"}"#,
                "unsupported version 2",
            ),
            (
                br#"{"version":"1","decision":"continue"}"#,
                "unsupported version \"1\"",
            ),
            (br#"{"decision":"continue"}"#, "missing `version`"),
            (
                br#"{"version":1,"decision":"allow"}"#,
                "unknown decision \"allow\"",
            ),
            (br#"{"version":1}"#, "missing `decision`"),
            (
                br#"{"version":1,"decision":"continue","extra":true}"#,
                "unknown field `extra`",
            ),
            (too_big.as_bytes(), "output exceeds 8192 bytes"),
        ];
        for (stdout, want) in cases {
            let reason = deny_reason(parse_hook_response("guard", stdout));
            assert!(
                reason.starts_with("hook `guard` gave an invalid answer: "),
                "{reason}"
            );
            assert!(reason.contains(want), "{reason} should contain {want}");
        }
        let reason = deny_reason(parse_hook_response(
            "guard",
            br#"{"version":1,"decision":"continue","reason":"x"}"#,
        ));
        assert!(
            reason.contains("only allowed with decision `deny`"),
            "{reason}"
        );
        let reason = deny_reason(parse_hook_response(
            "guard",
            br#"{"version":1,"decision":"deny","reason":5}"#,
        ));
        assert!(reason.contains("`reason` must be a string"), "{reason}");
    }

    #[test]
    fn process_endings_map_to_verdicts() {
        let exited = |code: i32, stdout: &[u8], stderr: &[u8]| HookRun::Exited {
            code,
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
        };
        assert_eq!(
            hook_verdict(
                "guard",
                &exited(0, br#"{"version":1,"decision":"continue"}"#, b"")
            ),
            HookVerdict::Continue
        );
        assert!(deny_reason(hook_verdict("guard", &exited(0, b"", b""))).contains("no output"));
        assert_eq!(
            deny_reason(hook_verdict(
                "guard",
                &exited(
                    2,
                    br#"{"version":1,"decision":"deny","reason":"json reason"}"#,
                    b"stderr reason"
                )
            )),
            "json reason"
        );
        assert_eq!(
            deny_reason(hook_verdict(
                "guard",
                &exited(2, b"", b"  blocked by guard\n")
            )),
            "blocked by guard"
        );
        assert_eq!(
            deny_reason(hook_verdict("guard", &exited(2, b"", b""))),
            "hook exited with status 2"
        );
        // Exit 2 never allows, even with a continue answer on stdout.
        assert_eq!(
            deny_reason(hook_verdict(
                "guard",
                &exited(2, br#"{"version":1,"decision":"continue"}"#, b"")
            )),
            "hook exited with status 2"
        );
        assert_eq!(
            deny_reason(hook_verdict(
                "guard",
                &exited(1, br#"{"version":1,"decision":"continue"}"#, b"")
            )),
            "hook failed: exited with status 1"
        );
        assert_eq!(
            deny_reason(hook_verdict("guard", &HookRun::Signaled { signal: 9 })),
            "hook crashed: killed by signal 9"
        );
        assert_eq!(
            deny_reason(hook_verdict(
                "guard",
                &HookRun::TimedOut {
                    after: Duration::from_secs(2)
                }
            )),
            "hook timed out after 2000ms"
        );
        assert_eq!(
            deny_reason(hook_verdict(
                "guard",
                &HookRun::SpawnFailed {
                    detail: "No such file or directory".into()
                }
            )),
            "hook could not start: No such file or directory"
        );
    }
}
