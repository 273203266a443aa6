//! Decodes the NDJSON stream of `claude -p --output-format stream-json --verbose
//! --include-partial-messages` into events and one outcome.
//!
//! Invariant: only the final `result` message decides success, and its `is_error` wins over its
//! `subtype`; the exit status alone never turns a run into a success, and a stream that ends
//! without a `result` (truncated, killed) is a failure that says so.

use serde_json::Value;

/// Token usage as Claude reports it, cache fields kept apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClaudeUsage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_input_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_creation_input_tokens: u64,
}

impl ClaudeUsage {
    /// All input tokens, cache reads and writes included (the status file's `input_tokens`).
    pub const fn total_input(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read_input_tokens)
            .saturating_add(self.cache_creation_input_tokens)
    }

    fn from_json(value: &Value) -> Self {
        let field = |name: &str| value.get(name).and_then(Value::as_u64).unwrap_or(0);
        ClaudeUsage {
            input_tokens: field("input_tokens"),
            output_tokens: field("output_tokens"),
            cache_read_input_tokens: field("cache_read_input_tokens"),
            cache_creation_input_tokens: field("cache_creation_input_tokens"),
        }
    }
}

/// A rate-limit window Claude Code reported during the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitObservation {
    /// The window (`five_hour`, `seven_day`, ...), when named.
    pub window: Option<String>,
    /// `allowed`, `allowed_warning` or `rejected`.
    pub status: String,
    /// Unix seconds when the window resets, when reported.
    pub resets_at: Option<u64>,
}

/// One thing the stream reported, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaudeEvent {
    /// The `system/init` message: the session and the model Claude bound.
    Init {
        /// Claude's session id.
        session_id: Option<String>,
        /// The model Claude resolved.
        model: Option<String>,
    },
    /// A streamed piece of assistant text.
    TextDelta(String),
    /// A complete assistant text block.
    Text(String),
    /// The assistant called a tool.
    ToolUse {
        /// The tool's name.
        name: String,
        /// Its input, as JSON.
        input: Value,
    },
    /// A tool result came back to Claude.
    ToolResult {
        /// Whether the tool reported an error.
        is_error: bool,
        /// The result's text, when it is text.
        text: String,
    },
    /// A rate-limit window was reported.
    RateLimit(RateLimitObservation),
    /// The final `result` message.
    Result(ClaudeResult),
    /// A line that is not a JSON object (kept for the log; it decides nothing).
    Unparsed(String),
}

/// The final `result` message.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaudeResult {
    /// Whether Claude reports an error (decides over `subtype`).
    pub is_error: bool,
    /// `success`, `error_max_turns`, `error_during_execution`, ...
    pub subtype: String,
    /// The final text (the answer, or the error's text).
    pub result: Option<String>,
    /// The session id.
    pub session_id: Option<String>,
    /// Turns taken.
    pub num_turns: Option<u64>,
    /// Reported cost in US dollars.
    pub total_cost_usd: Option<f64>,
    /// Total usage of the run.
    pub usage: ClaudeUsage,
}

/// Decodes one complete line (without its newline). Blank lines and message types this
/// runtime does not use produce nothing.
pub fn decode_line(line: &[u8]) -> Vec<ClaudeEvent> {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return Vec::new();
    }
    let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(trimmed) else {
        return vec![ClaudeEvent::Unparsed(
            String::from_utf8_lossy(trimmed).into_owned(),
        )];
    };
    let message = Value::Object(message);
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    match message.get("type").and_then(Value::as_str) {
        Some("system") if message.get("subtype").and_then(Value::as_str) == Some("init") => {
            vec![ClaudeEvent::Init {
                session_id: text(&message, "session_id"),
                model: text(&message, "model"),
            }]
        }
        Some("stream_event") => {
            let event = message.get("event").unwrap_or(&Value::Null);
            let delta = event.get("delta").unwrap_or(&Value::Null);
            if event.get("type").and_then(Value::as_str) == Some("content_block_delta")
                && delta.get("type").and_then(Value::as_str) == Some("text_delta")
            {
                text(delta, "text")
                    .map(ClaudeEvent::TextDelta)
                    .into_iter()
                    .collect()
            } else {
                Vec::new()
            }
        }
        Some("assistant") => content_blocks(&message)
            .filter_map(|block| match block.get("type").and_then(Value::as_str) {
                Some("text") => text(block, "text").map(ClaudeEvent::Text),
                Some("tool_use") => Some(ClaudeEvent::ToolUse {
                    name: text(block, "name").unwrap_or_default(),
                    input: block.get("input").cloned().unwrap_or(Value::Null),
                }),
                _ => None,
            })
            .collect(),
        Some("user") => content_blocks(&message)
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
            .map(|block| ClaudeEvent::ToolResult {
                is_error: block
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                text: tool_result_text(block.get("content").unwrap_or(&Value::Null)),
            })
            .collect(),
        Some("rate_limit_event") => {
            let info = message.get("rate_limit_info").unwrap_or(&Value::Null);
            text(info, "status")
                .map(|status| {
                    ClaudeEvent::RateLimit(RateLimitObservation {
                        window: text(info, "rateLimitType"),
                        status,
                        resets_at: info.get("resetsAt").and_then(Value::as_u64),
                    })
                })
                .into_iter()
                .collect()
        }
        Some("result") => {
            let subtype = text(&message, "subtype").unwrap_or_default();
            // `is_error` decides; only when it is missing does the subtype speak.
            let is_error = message
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(subtype != "success");
            vec![ClaudeEvent::Result(ClaudeResult {
                is_error,
                result: text(&message, "result"),
                session_id: text(&message, "session_id"),
                num_turns: message.get("num_turns").and_then(Value::as_u64),
                total_cost_usd: message.get("total_cost_usd").and_then(Value::as_f64),
                usage: ClaudeUsage::from_json(message.get("usage").unwrap_or(&Value::Null)),
                subtype,
            })]
        }
        _ => Vec::new(),
    }
}

fn content_blocks(message: &Value) -> impl Iterator<Item = &Value> {
    message
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn tool_result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// How the run ended, from the stream and the exit status together.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaudeVerdict {
    /// The result message reported success; the answer.
    Success(String),
    /// The result message reported an error; its text.
    Error(String),
    /// No result message arrived.
    NoResult,
}

/// Decides the outcome: the last `result` message if there was one.
pub fn verdict(result: Option<&ClaudeResult>) -> ClaudeVerdict {
    match result {
        None => ClaudeVerdict::NoResult,
        Some(r) if r.is_error => ClaudeVerdict::Error(match &r.result {
            Some(text) if !text.is_empty() => format!("{} ({})", text, r.subtype),
            _ => format!("claude reported an error ({})", r.subtype),
        }),
        Some(r) => ClaudeVerdict::Success(r.result.clone().unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> ClaudeEvent {
        let mut events = decode_line(line.as_bytes());
        assert_eq!(events.len(), 1, "{events:?}");
        events.remove(0)
    }

    #[test]
    fn init_text_tool_use_and_tool_results_decode() {
        assert_eq!(
            one(r#"{"type":"system","subtype":"init","session_id":"s1","model":"claude-x"}"#),
            ClaudeEvent::Init {
                session_id: Some("s1".into()),
                model: Some("claude-x".into())
            }
        );
        let events = decode_line(
            br#"{"type":"assistant","message":{"content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"Read","input":{"file_path":"a"}}]}}"#,
        );
        assert_eq!(events.len(), 2);
        assert_eq!(events[0], ClaudeEvent::Text("hi".into()));
        assert!(matches!(&events[1], ClaudeEvent::ToolUse { name, .. } if name == "Read"));
        assert_eq!(
            one(
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"body"}],"is_error":true}]}}"#
            ),
            ClaudeEvent::ToolResult {
                is_error: true,
                text: "body".into()
            }
        );
        assert_eq!(
            one(
                r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"pa"}}}"#
            ),
            ClaudeEvent::TextDelta("pa".into())
        );
    }

    #[test]
    fn is_error_wins_over_subtype() {
        let ClaudeEvent::Result(r) =
            one(r#"{"type":"result","subtype":"success","is_error":true,"result":"quota"}"#)
        else {
            panic!("not a result");
        };
        assert!(matches!(verdict(Some(&r)), ClaudeVerdict::Error(e) if e.contains("quota")));
        let ClaudeEvent::Result(r) =
            one(r#"{"type":"result","subtype":"error_max_turns","is_error":false,"result":"ok"}"#)
        else {
            panic!("not a result");
        };
        assert_eq!(verdict(Some(&r)), ClaudeVerdict::Success("ok".into()));
        let ClaudeEvent::Result(r) = one(r#"{"type":"result","subtype":"error_during_execution"}"#)
        else {
            panic!("not a result");
        };
        assert!(r.is_error, "a missing is_error falls back to the subtype");
        assert_eq!(verdict(None), ClaudeVerdict::NoResult);
    }

    #[test]
    fn usage_keeps_cache_fields_apart_and_totals_input() {
        let ClaudeEvent::Result(r) = one(
            r#"{"type":"result","subtype":"success","is_error":false,"result":"x","session_id":"s","num_turns":3,"total_cost_usd":0.25,"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":100,"cache_creation_input_tokens":7}}"#,
        ) else {
            panic!("not a result");
        };
        assert_eq!(r.usage.cache_read_input_tokens, 100);
        assert_eq!(r.usage.cache_creation_input_tokens, 7);
        assert_eq!(r.usage.total_input(), 117);
        assert_eq!(r.num_turns, Some(3));
        assert_eq!(r.total_cost_usd, Some(0.25));
    }

    #[test]
    fn rate_limits_unknown_types_and_garbage() {
        assert_eq!(
            one(
                r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1700000000,"rateLimitType":"five_hour"}}"#
            ),
            ClaudeEvent::RateLimit(RateLimitObservation {
                window: Some("five_hour".into()),
                status: "allowed_warning".into(),
                resets_at: Some(1_700_000_000),
            })
        );
        assert!(decode_line(br#"{"type":"something_new"}"#).is_empty());
        assert!(decode_line(b"   ").is_empty());
        assert!(matches!(one("not json"), ClaudeEvent::Unparsed(_)));
    }
}
