//! The OpenAI Chat Completions protocol: request bodies and the streamed chunk parser.
//!
//! Invariant: pure. First-party OpenAI streams are held to the protocol (every tool call
//! has an id and an index); custom hosts get the local-server quirks filled in — a missing
//! id is generated, sparse or missing indexes are mapped to calls in order of appearance,
//! empty arguments become `{}` — so the tool loop can continue.

use serde_json::{Value, json};

use super::{
    Message, ModelChoice, ModelRequest, ModelTurn, StopReason, StreamEvent, StreamFailure,
    ToolCall, Usage, sse::SseEvent,
};
use crate::agents::Reasoning;

/// The `reasoning_effort` value sent for a level; `None` leaves the field out.
pub fn reasoning_effort(reasoning: Option<Reasoning>, first_party: bool) -> Option<&'static str> {
    match reasoning? {
        // Custom hosts are told explicitly; OpenAI treats a missing field as its default.
        Reasoning::Off if first_party => None,
        Reasoning::Off => Some("none"),
        Reasoning::Minimal => Some("minimal"),
        Reasoning::Low => Some("low"),
        Reasoning::Medium => Some("medium"),
        Reasoning::High => Some("high"),
        Reasoning::Xhigh | Reasoning::Max => Some("xhigh"),
    }
}

/// The request body for one streamed turn.
pub fn request_body(request: &ModelRequest<'_>, choice: &ModelChoice) -> Value {
    let first_party = choice.endpoint.first_party;
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in request.messages {
        match message {
            Message::User { text } => messages.push(json!({"role": "user", "content": text})),
            Message::Assistant {
                text, tool_calls, ..
            } => {
                let mut m = json!({"role": "assistant",
                                   "content": if text.is_empty() { Value::Null } else { json!(text) }});
                if !tool_calls.is_empty() {
                    m["tool_calls"] = tool_calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}})
                        })
                        .collect();
                }
                messages.push(m);
            }
            Message::ToolResults { results } => {
                for r in results {
                    messages.push(json!({"role": "tool", "tool_call_id": r.call_id,
                                         "name": r.name, "content": r.content}));
                }
            }
        }
    }
    let mut body = json!({
        "model": choice.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if first_party {
        body["max_completion_tokens"] = json!(request.max_tokens);
    } else {
        body["max_tokens"] = json!(request.max_tokens);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {"name": t.name,
                        "description": t.description, "parameters": t.input_schema}})
            })
            .collect();
    }
    if let Some(effort) = reasoning_effort(choice.reasoning, first_party) {
        body["reasoning_effort"] = json!(effort);
    }
    body
}

#[derive(Debug, Default)]
struct Slot {
    index: Option<u64>,
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Assembles a turn from streamed chunks.
#[derive(Debug)]
pub struct StreamParser {
    strict: bool,
    done: bool,
    saw_chunk: bool,
    text: String,
    reasoning: String,
    slots: Vec<Slot>,
    finish: Option<String>,
    usage: Usage,
}

impl StreamParser {
    /// A parser; `strict` for first-party OpenAI.
    pub fn new(strict: bool) -> Self {
        Self {
            strict,
            done: false,
            saw_chunk: false,
            text: String::new(),
            reasoning: String::new(),
            slots: Vec::new(),
            finish: None,
            usage: Usage::default(),
        }
    }

    /// Whether `[DONE]` arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Handles one event.
    pub fn on_event(
        &mut self,
        event: &SseEvent,
        sink: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), StreamFailure> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let value: Value = serde_json::from_str(data)
            .map_err(|e| StreamFailure::Malformed(format!("a chunk is not JSON ({e}): {data}")))?;
        if let Some(error) = value.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_owned);
            return Err(StreamFailure::Reported {
                message,
                retryable: true,
            });
        }
        self.saw_chunk = true;
        if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
            let get = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
            self.usage.input_tokens = get("prompt_tokens");
            self.usage.output_tokens = get("completion_tokens");
            self.usage.cache_read_tokens = usage
                .pointer("/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
        }
        let Some(choices) = value.get("choices").and_then(Value::as_array) else {
            if self.strict && value.get("usage").is_none() {
                return Err(StreamFailure::Malformed(format!(
                    "a chunk without `choices`: {data}"
                )));
            }
            return Ok(());
        };
        for choice in choices {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.get("delta") {
                self.delta(delta, sink)?;
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(reason.to_owned());
            }
        }
        Ok(())
    }

    fn delta(
        &mut self,
        delta: &Value,
        sink: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), StreamFailure> {
        for key in ["reasoning_content", "reasoning"] {
            if let Some(t) = delta.get(key).and_then(Value::as_str)
                && !t.is_empty()
            {
                self.reasoning.push_str(t);
                sink(StreamEvent::ReasoningDelta(t.to_owned()));
            }
        }
        if let Some(t) = delta.get("content").and_then(Value::as_str)
            && !t.is_empty()
        {
            self.text.push_str(t);
            sink(StreamEvent::TextDelta(t.to_owned()));
        }
        let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) else {
            return Ok(());
        };
        for call in calls {
            let index = call.get("index").and_then(Value::as_u64);
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            if self.strict && index.is_none() {
                return Err(StreamFailure::Malformed(format!(
                    "a tool-call delta without an index: {call}"
                )));
            }
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            let slot = self.slot_for(index, id, name.is_some());
            let slot = &mut self.slots[slot];
            if slot.id.is_none()
                && let Some(id) = id
            {
                slot.id = Some(id.to_owned());
            }
            if let Some(name) = name
                && slot.name.is_empty()
            {
                name.clone_into(&mut slot.name);
                sink(StreamEvent::ToolCallStarted {
                    name: name.to_owned(),
                });
            }
            if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                slot.arguments.push_str(args);
            }
        }
        Ok(())
    }

    /// The slot a tool-call delta belongs to: by index, else by id, else (no index, no id)
    /// a new call when it names a tool and the last call otherwise.
    fn slot_for(&mut self, index: Option<u64>, id: Option<&str>, names_tool: bool) -> usize {
        if let Some(index) = index
            && let Some(pos) = self.slots.iter().position(|s| s.index == Some(index))
        {
            // Some hosts reuse an index for a second call with a new id.
            let reused =
                id.is_some_and(|id| self.slots[pos].id.as_deref().is_some_and(|old| old != id));
            if !reused {
                return pos;
            }
        }
        if let Some(id) = id
            && let Some(pos) = self.slots.iter().position(|s| s.id.as_deref() == Some(id))
        {
            return pos;
        }
        if index.is_none() && !names_tool && !self.slots.is_empty() {
            return self.slots.len() - 1;
        }
        self.slots.push(Slot {
            index,
            ..Slot::default()
        });
        self.slots.len() - 1
    }

    /// The assembled turn; an error when the stream ended early or a call is incomplete.
    pub fn finish(self) -> Result<ModelTurn, String> {
        if !self.done && self.finish.is_none() {
            return Err("the stream ended before a finish reason and `[DONE]`".to_owned());
        }
        if !self.saw_chunk {
            return Err("the stream held no chunk".to_owned());
        }
        let mut tool_calls = Vec::new();
        for (n, slot) in self.slots.into_iter().enumerate() {
            if slot.name.is_empty() {
                return Err(format!("tool call {n} has no function name"));
            }
            let id = match slot.id {
                Some(id) => id,
                None if self.strict => return Err(format!("tool call {n} has no id")),
                None => format!("call_rho_{n}"),
            };
            let arguments = if slot.arguments.trim().is_empty() {
                "{}".to_owned()
            } else {
                slot.arguments
            };
            tool_calls.push(ToolCall {
                id,
                name: slot.name,
                arguments,
            });
        }
        let stop = match self.finish.as_deref() {
            Some("length") => StopReason::MaxTokens,
            Some("tool_calls" | "function_call") => StopReason::ToolUse,
            // Some hosts say `stop` after tool calls.
            _ if !tool_calls.is_empty() => StopReason::ToolUse,
            Some("stop") | None => StopReason::EndTurn,
            Some(other) => StopReason::Other(other.to_owned()),
        };
        Ok(ModelTurn {
            thinking: Vec::new(),
            reasoning_text: self.reasoning,
            text: self.text,
            tool_calls,
            stop,
            usage: self.usage,
        })
    }
}

/// Parses a whole (not streamed) response.
pub fn parse_whole(value: &Value, strict: bool) -> Result<ModelTurn, String> {
    let message = value
        .pointer("/choices/0/message")
        .ok_or("the response has no `choices[0].message`")?;
    let mut parser = StreamParser::new(strict);
    let mut sink = |_: StreamEvent| {};
    let mut delta = message.clone();
    if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for (i, call) in calls.iter_mut().enumerate() {
            if call.get("index").is_none() {
                call["index"] = json!(i);
            }
        }
    }
    let chunk = json!({"choices": [{"index": 0, "delta": delta,
                                    "finish_reason": value.pointer("/choices/0/finish_reason")}],
                       "usage": value.get("usage")});
    parser
        .on_event(
            &SseEvent {
                event: None,
                data: chunk.to_string(),
            },
            &mut sink,
        )
        .map_err(|f| match f {
            StreamFailure::Malformed(d) => d,
            StreamFailure::Reported { message, .. } => message,
        })?;
    parser.done = true;
    parser.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(delta: &Value, finish: &Value) -> SseEvent {
        SseEvent {
            event: None,
            data: json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                .to_string(),
        }
    }

    fn done() -> SseEvent {
        SseEvent {
            event: None,
            data: "[DONE]".into(),
        }
    }

    #[test]
    fn parallel_calls_with_split_arguments_are_assembled() {
        let mut p = StreamParser::new(true);
        let mut sink = |_: StreamEvent| {};
        for e in [
            chunk(&json!({"role": "assistant", "content": "ok"}), &Value::Null),
            chunk(
                &json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "read_file", "arguments": ""}}]}),
                &Value::Null,
            ),
            chunk(
                &json!({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "bash", "arguments": "{\"co"}}]}),
                &Value::Null,
            ),
            chunk(
                &json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":\"x\"}"}}]}),
                &Value::Null,
            ),
            chunk(
                &json!({"tool_calls": [{"index": 1, "function": {"arguments": "mmand\":\"ls\"}"}}]}),
                &Value::Null,
            ),
            chunk(&json!({}), &json!("tool_calls")),
            done(),
        ] {
            p.on_event(&e, &mut sink).unwrap();
        }
        let turn = p.finish().unwrap();
        assert_eq!(turn.text, "ok");
        assert_eq!(turn.stop, StopReason::ToolUse);
        assert_eq!(turn.tool_calls.len(), 2);
        assert_eq!(turn.tool_calls[0].arguments, "{\"path\":\"x\"}");
        assert_eq!(turn.tool_calls[1].id, "b");
        assert_eq!(turn.tool_calls[1].arguments, "{\"command\":\"ls\"}");
    }

    #[test]
    fn custom_hosts_get_missing_ids_and_sparse_indexes_filled_in() {
        let mut p = StreamParser::new(false);
        let mut sink = |_: StreamEvent| {};
        for e in [
            chunk(
                &json!({"tool_calls": [{"index": 5, "function": {"name": "glob", "arguments": ""}}]}),
                &Value::Null,
            ),
            chunk(
                &json!({"tool_calls": [{"index": 9, "function": {"name": "list_dir"}}]}),
                &Value::Null,
            ),
            chunk(
                &json!({"tool_calls": [{"index": 5, "function": {"arguments": "{\"pattern\":\"*\"}"}}]}),
                &Value::Null,
            ),
            chunk(&json!({}), &json!("stop")),
            done(),
        ] {
            p.on_event(&e, &mut sink).unwrap();
        }
        let turn = p.finish().unwrap();
        assert_eq!(turn.tool_calls.len(), 2);
        assert_eq!(turn.tool_calls[0].name, "glob");
        assert_eq!(turn.tool_calls[0].arguments, "{\"pattern\":\"*\"}");
        assert_eq!(turn.tool_calls[1].arguments, "{}");
        assert_ne!(turn.tool_calls[0].id, turn.tool_calls[1].id);
        assert_eq!(turn.stop, StopReason::ToolUse);
    }

    #[test]
    fn first_party_streams_stay_strict() {
        let mut p = StreamParser::new(true);
        let mut sink = |_: StreamEvent| {};
        p.on_event(
            &chunk(&json!({"tool_calls": [{"index": 0, "function": {"name": "glob", "arguments": "{}"}}]}),
                &json!("tool_calls"),
            ),
            &mut sink,
        )
        .unwrap();
        p.on_event(&done(), &mut sink).unwrap();
        assert!(p.finish().unwrap_err().contains("no id"));
    }

    #[test]
    fn a_stream_without_an_end_is_an_error() {
        let mut p = StreamParser::new(false);
        let mut sink = |_: StreamEvent| {};
        p.on_event(&chunk(&json!({"content": "par"}), &Value::Null), &mut sink)
            .unwrap();
        assert!(p.finish().is_err());
    }

    #[test]
    fn reasoning_effort_follows_the_host_kind() {
        assert_eq!(reasoning_effort(Some(Reasoning::Off), false), Some("none"));
        assert_eq!(reasoning_effort(Some(Reasoning::Off), true), None);
        assert_eq!(reasoning_effort(Some(Reasoning::High), true), Some("high"));
        assert_eq!(reasoning_effort(None, false), None);
    }
}
