//! The Anthropic Messages protocol: request bodies and the streamed event parser.
//!
//! Invariant: pure; the event parser reports any event out of the documented order
//! (`message_start`, blocks opened, delta'd and closed by index, `message_delta`,
//! `message_stop`) as malformed instead of guessing.

use serde_json::{Value, json};

use super::{
    Message, ModelChoice, ModelRequest, ModelTurn, StopReason, StreamEvent, StreamFailure,
    Thinking, ToolCall, Usage, arguments_object, sse::SseEvent,
};
use crate::agents::Reasoning;

/// The `anthropic-version` header value.
pub const API_VERSION: &str = "2023-06-01";

/// The thinking budget for a reasoning level (`None`: thinking off).
pub fn thinking_budget(reasoning: Option<Reasoning>) -> Option<u32> {
    match reasoning? {
        Reasoning::Off => None,
        Reasoning::Minimal => Some(1024),
        Reasoning::Low => Some(2048),
        Reasoning::Medium => Some(8192),
        Reasoning::High => Some(16_384),
        Reasoning::Xhigh => Some(32_768),
        Reasoning::Max => Some(63_999),
    }
}

/// The request body for one streamed turn.
pub fn request_body(request: &ModelRequest<'_>, choice: &ModelChoice) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    for message in request.messages {
        match message {
            Message::User { text } => {
                messages.push(json!({"role": "user", "content": [{"type": "text", "text": text}]}));
            }
            Message::Assistant {
                thinking,
                text,
                tool_calls,
            } => {
                let mut content = Vec::new();
                for block in thinking {
                    content.push(json!({"type": "thinking", "thinking": block.text,
                                        "signature": block.signature}));
                }
                if !text.is_empty() {
                    content.push(json!({"type": "text", "text": text}));
                }
                for call in tool_calls {
                    content.push(json!({"type": "tool_use", "id": call.id, "name": call.name,
                                        "input": arguments_object(&call.arguments)}));
                }
                if content.is_empty() {
                    content.push(json!({"type": "text", "text": "(no answer)"}));
                }
                messages.push(json!({"role": "assistant", "content": content}));
            }
            Message::ToolResults { results } => {
                let content: Vec<Value> = results
                    .iter()
                    .map(|r| {
                        json!({"type": "tool_result", "tool_use_id": r.call_id,
                               "content": r.content, "is_error": r.is_error})
                    })
                    .collect();
                messages.push(json!({"role": "user", "content": content}));
            }
        }
    }
    let mut max_tokens = request.max_tokens;
    let mut body = json!({
        "model": choice.model,
        "messages": messages,
        "stream": true,
    });
    if !request.system.is_empty() {
        body["system"] = json!(request.system);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description,
                            "input_schema": t.input_schema})
            })
            .collect();
    }
    if let Some(budget) = thinking_budget(choice.reasoning) {
        // The output cap must leave room for the answer after the thinking.
        max_tokens = max_tokens.max(budget + 4096);
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    }
    body["max_tokens"] = json!(max_tokens);
    body
}

#[derive(Debug)]
enum Block {
    Text,
    Thinking {
        text: String,
        signature: String,
    },
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    Other,
}

/// Assembles a turn from streamed events.
#[derive(Debug, Default)]
pub struct StreamParser {
    started: bool,
    done: bool,
    open: Vec<(u64, Block)>,
    text: String,
    thinking: Vec<Thinking>,
    tool_calls: Vec<ToolCall>,
    stop: Option<StopReason>,
    usage: Usage,
}

fn field<'a>(value: &'a Value, pointer: &str) -> Result<&'a Value, StreamFailure> {
    value
        .pointer(pointer)
        .ok_or_else(|| StreamFailure::Malformed(format!("an event lacks `{pointer}`: {value}")))
}

fn str_field<'a>(value: &'a Value, pointer: &str) -> Result<&'a str, StreamFailure> {
    field(value, pointer)?
        .as_str()
        .ok_or_else(|| StreamFailure::Malformed(format!("`{pointer}` is not a string")))
}

fn usage_from(value: &Value, usage: &mut Usage) {
    let get = |k: &str| value.get(k).and_then(Value::as_u64);
    if let Some(v) = get("input_tokens") {
        usage.input_tokens = v;
    }
    if let Some(v) = get("output_tokens") {
        usage.output_tokens = v;
    }
    if let Some(v) = get("cache_read_input_tokens") {
        usage.cache_read_tokens = v;
    }
    if let Some(v) = get("cache_creation_input_tokens") {
        usage.cache_write_tokens = v;
    }
}

fn stop_reason(text: &str) -> StopReason {
    match text {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_owned()),
    }
}

impl StreamParser {
    /// Whether `message_stop` arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Handles one event.
    pub fn on_event(
        &mut self,
        event: &SseEvent,
        sink: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), StreamFailure> {
        let value: Value = serde_json::from_str(&event.data).map_err(|e| {
            StreamFailure::Malformed(format!("an event's data is not JSON ({e}): {}", event.data))
        })?;
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or("");
        if kind != "message_start" && kind != "error" && kind != "ping" && !self.started {
            return Err(StreamFailure::Malformed(format!(
                "`{kind}` before `message_start`"
            )));
        }
        match kind {
            "message_start" => {
                self.started = true;
                if let Some(usage) = value.pointer("/message/usage") {
                    usage_from(usage, &mut self.usage);
                }
            }
            "error" => {
                let message = value
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("unspecified error")
                    .to_owned();
                let retryable = matches!(
                    value.pointer("/error/type").and_then(Value::as_str),
                    Some("overloaded_error" | "api_error" | "rate_limit_error")
                );
                return Err(StreamFailure::Reported { message, retryable });
            }
            "content_block_start" => {
                let index = field(&value, "/index")?.as_u64().unwrap_or(u64::MAX);
                let block = field(&value, "/content_block")?;
                let block = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = block.get("text").and_then(Value::as_str)
                            && !t.is_empty()
                        {
                            self.text.push_str(t);
                            sink(StreamEvent::TextDelta(t.to_owned()));
                        }
                        Block::Text
                    }
                    Some("thinking") => Block::Thinking {
                        text: String::new(),
                        signature: String::new(),
                    },
                    Some("tool_use") => {
                        let name = str_field(block, "/name")?.to_owned();
                        sink(StreamEvent::ToolCallStarted { name: name.clone() });
                        Block::ToolUse {
                            id: str_field(block, "/id")?.to_owned(),
                            name,
                            json: String::new(),
                        }
                    }
                    _ => Block::Other,
                };
                if self.open.iter().any(|(i, _)| *i == index) {
                    return Err(StreamFailure::Malformed(format!(
                        "content block {index} started twice"
                    )));
                }
                self.open.push((index, block));
            }
            "content_block_delta" => {
                let index = field(&value, "/index")?.as_u64().unwrap_or(u64::MAX);
                let delta = field(&value, "/delta")?;
                let Some((_, block)) = self.open.iter_mut().find(|(i, _)| *i == index) else {
                    return Err(StreamFailure::Malformed(format!(
                        "a delta for content block {index}, which is not open"
                    )));
                };
                match (delta.get("type").and_then(Value::as_str), block) {
                    (Some("text_delta"), Block::Text) => {
                        let t = str_field(delta, "/text")?;
                        self.text.push_str(t);
                        sink(StreamEvent::TextDelta(t.to_owned()));
                    }
                    (Some("thinking_delta"), Block::Thinking { text, .. }) => {
                        let t = str_field(delta, "/thinking")?;
                        text.push_str(t);
                        sink(StreamEvent::ReasoningDelta(t.to_owned()));
                    }
                    (Some("signature_delta"), Block::Thinking { signature, .. }) => {
                        signature.push_str(str_field(delta, "/signature")?);
                    }
                    (Some("input_json_delta"), Block::ToolUse { json, .. }) => {
                        json.push_str(str_field(delta, "/partial_json")?);
                    }
                    (_, Block::Other) => {}
                    (kind, _) => {
                        return Err(StreamFailure::Malformed(format!(
                            "delta type {kind:?} does not fit content block {index}"
                        )));
                    }
                }
            }
            "content_block_stop" => {
                let index = field(&value, "/index")?.as_u64().unwrap_or(u64::MAX);
                let Some(pos) = self.open.iter().position(|(i, _)| *i == index) else {
                    return Err(StreamFailure::Malformed(format!(
                        "content block {index} stopped but never started"
                    )));
                };
                match self.open.remove(pos).1 {
                    Block::Thinking { text, signature } => {
                        self.thinking.push(Thinking { text, signature });
                    }
                    Block::ToolUse { id, name, json } => {
                        let arguments = if json.trim().is_empty() {
                            "{}".to_owned()
                        } else {
                            json
                        };
                        self.tool_calls.push(ToolCall {
                            id,
                            name,
                            arguments,
                        });
                    }
                    Block::Text | Block::Other => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = value.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(stop_reason(reason));
                }
                if let Some(usage) = value.get("usage") {
                    usage_from(usage, &mut self.usage);
                }
            }
            "message_stop" => self.done = true,
            // `ping` and newer event types are skipped, as the protocol asks clients to.
            _ => {}
        }
        Ok(())
    }

    /// The assembled turn; an error when the stream ended early.
    pub fn finish(self) -> Result<ModelTurn, String> {
        if !self.done {
            return Err("the stream ended before `message_stop`".to_owned());
        }
        if let Some((index, _)) = self.open.first() {
            return Err(format!("content block {index} was never stopped"));
        }
        let stop = self.stop.unwrap_or(StopReason::EndTurn);
        Ok(ModelTurn {
            thinking: self.thinking,
            reasoning_text: String::new(),
            text: self.text,
            tool_calls: self.tool_calls,
            stop,
            usage: self.usage,
        })
    }
}

/// Parses a whole (not streamed) response.
pub fn parse_whole(value: &Value) -> Result<ModelTurn, String> {
    let content = value
        .get("content")
        .and_then(Value::as_array)
        .ok_or("the response has no `content` list")?;
    let mut turn = ModelTurn {
        thinking: Vec::new(),
        reasoning_text: String::new(),
        text: String::new(),
        tool_calls: Vec::new(),
        stop: value
            .get("stop_reason")
            .and_then(Value::as_str)
            .map_or(StopReason::EndTurn, stop_reason),
        usage: Usage::default(),
    };
    if let Some(usage) = value.get("usage") {
        usage_from(usage, &mut turn.usage);
    }
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => turn
                .text
                .push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("thinking") => turn.thinking.push(Thinking {
                text: block
                    .get("thinking")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                signature: block
                    .get("signature")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            }),
            Some("tool_use") => turn.tool_calls.push(ToolCall {
                id: block
                    .get("id")
                    .and_then(Value::as_str)
                    .ok_or("a tool_use block has no id")?
                    .to_owned(),
                name: block
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or("a tool_use block has no name")?
                    .to_owned(),
                arguments: block.get("input").map_or("{}".to_owned(), Value::to_string),
            }),
            _ => {}
        }
    }
    Ok(turn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::provider::{Endpoint, ToolResult, ToolSpec, WireProtocol};

    fn ev(data: &Value) -> SseEvent {
        SseEvent {
            event: data["type"].as_str().map(str::to_owned),
            data: data.to_string(),
        }
    }

    #[test]
    fn a_streamed_tool_call_is_assembled_from_split_arguments() {
        let mut p = StreamParser::default();
        let mut seen = Vec::new();
        let mut sink = |e: StreamEvent| seen.push(e);
        for data in [
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 9}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "grep", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"pat"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "tern\": \"x\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 4}}),
            json!({"type": "message_stop"}),
        ] {
            p.on_event(&ev(&data), &mut sink).unwrap();
        }
        let turn = p.finish().unwrap();
        assert_eq!(turn.text, "Hi");
        assert_eq!(turn.stop, StopReason::ToolUse);
        assert_eq!(turn.tool_calls[0].arguments, "{\"pattern\": \"x\"}");
        assert_eq!(turn.usage.input_tokens, 9);
        assert_eq!(turn.usage.output_tokens, 4);
        assert_eq!(seen[0], StreamEvent::TextDelta("Hi".into()));
    }

    #[test]
    fn out_of_order_events_are_malformed_and_early_end_is_an_error() {
        let mut sink = |_: StreamEvent| {};
        let mut p = StreamParser::default();
        assert!(matches!(
            p.on_event(
                &ev(&json!({"type": "content_block_stop", "index": 0})),
                &mut sink
            ),
            Err(StreamFailure::Malformed(_))
        ));
        let mut p = StreamParser::default();
        p.on_event(
            &ev(&json!({"type": "message_start", "message": {}})),
            &mut sink,
        )
        .unwrap();
        assert!(
            p.on_event(
                &ev(&json!({"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "x"}})),
                &mut sink
            )
            .is_err()
        );
        assert!(p.finish().is_err());
    }

    #[test]
    fn the_body_carries_tools_results_and_thinking() {
        let choice = ModelChoice {
            endpoint: Endpoint {
                provider: "anthropic".into(),
                protocol: WireProtocol::AnthropicMessages,
                base_url: "http://x/v1".into(),
                key: None,
                first_party: true,
            },
            model: "claude-test".into(),
            reasoning: Some(Reasoning::High),
        };
        let messages = [
            Message::User { text: "go".into() },
            Message::Assistant {
                thinking: vec![],
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: "t1".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a\"}".into(),
                }],
            },
            Message::ToolResults {
                results: vec![ToolResult {
                    call_id: "t1".into(),
                    name: "read_file".into(),
                    content: "text".into(),
                    is_error: false,
                }],
            },
        ];
        let tools = [ToolSpec {
            name: "read_file".into(),
            description: "reads".into(),
            input_schema: json!({"type": "object"}),
        }];
        let body = request_body(
            &ModelRequest {
                system: "sys",
                messages: &messages,
                tools: &tools,
                max_tokens: 1000,
            },
            &choice,
        );
        assert_eq!(body["system"], "sys");
        assert_eq!(body["messages"][1]["content"][0]["input"]["path"], "a");
        assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "t1");
        assert_eq!(body["thinking"]["budget_tokens"], 16_384);
        assert!(body["max_tokens"].as_u64().unwrap() > 16_384);
        assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    }
}
