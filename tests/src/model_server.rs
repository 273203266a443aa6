//! A loopback model server that plays scripted models over the two wire protocols rho
//! speaks: the Anthropic Messages API (`POST /v1/messages`, also `?beta=true`, as the real
//! Claude Code CLI calls it) and OpenAI Chat Completions (`POST /v1/chat/completions`).
//!
//! A test queues [`Reply`]s; each model request takes the next one and renders it in the
//! protocol of the request, streamed (server-sent events over a chunked body) when the
//! request asks for `"stream": true`, as one JSON document otherwise. Every request is
//! recorded so a test can assert exactly what reached the model.
//!
//! Invariant: the server never invents a model turn. When the script is exhausted it answers
//! HTTP 500 with a message saying so, so a test that makes one request too many fails loudly
//! instead of looping on a made-up answer.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One scripted tool call of a model turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedToolCall {
    /// The call id; `None` generates one (`toolu_N` / `call_N`).
    pub id: Option<String>,
    /// The tool name.
    pub name: String,
    /// The arguments as JSON text (not necessarily valid, to script a broken model).
    pub arguments: String,
    /// The OpenAI `index` to send; `None` numbers calls 0, 1, 2 ... A sparse index (5, 9) is a
    /// quirk of some local servers.
    pub index: Option<u32>,
}

/// One scripted assistant turn: optional reasoning, text, then tool calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedTurn {
    /// Reasoning text (Anthropic `thinking` block, OpenAI-compatible `reasoning_content`).
    pub reasoning: Option<String>,
    /// The text, as the chunks to stream.
    pub text: Vec<String>,
    /// Tool calls, in order (two or more are parallel calls).
    pub tool_calls: Vec<ScriptedToolCall>,
    /// Pause before each streamed event (a slow model).
    pub chunk_delay: Duration,
    /// Pieces the tool-call arguments are split into when streamed (at least 1).
    pub argument_pieces: usize,
    /// End with `max_tokens` / `length` instead of the natural stop reason.
    pub truncated: bool,
    /// Usage to report: (input tokens, output tokens).
    pub usage: (u64, u64),
    /// Leave tool-call ids out of OpenAI chunks (a quirk of some local servers; the
    /// Anthropic side always sends one).
    pub omit_ids: bool,
}

impl ScriptedTurn {
    /// A turn that answers with `text`, streamed in small chunks.
    pub fn text(text: &str) -> Self {
        Self {
            text: split_text(text, 6),
            ..Self::empty()
        }
    }

    /// A turn with nothing in it yet (add tool calls or text).
    pub fn empty() -> Self {
        Self {
            reasoning: None,
            text: Vec::new(),
            tool_calls: Vec::new(),
            chunk_delay: Duration::ZERO,
            argument_pieces: 3,
            truncated: false,
            usage: (12, 7),
            omit_ids: false,
        }
    }

    /// A turn that only calls one tool.
    pub fn tool_call(name: &str, arguments: &Value) -> Self {
        Self::empty().with_tool_call(name, arguments)
    }

    /// Adds a tool call with JSON arguments.
    #[must_use]
    pub fn with_tool_call(self, name: &str, arguments: &Value) -> Self {
        self.with_raw_tool_call(None, name, &arguments.to_string(), None)
    }

    /// Adds a tool call with explicit id, raw argument text and OpenAI index.
    #[must_use]
    pub fn with_raw_tool_call(
        mut self,
        id: Option<&str>,
        name: &str,
        arguments: &str,
        index: Option<u32>,
    ) -> Self {
        self.tool_calls.push(ScriptedToolCall {
            id: id.map(str::to_owned),
            name: name.to_owned(),
            arguments: arguments.to_owned(),
            index,
        });
        self
    }

    /// Sets the text chunks exactly.
    #[must_use]
    pub fn with_text_chunks(mut self, chunks: &[&str]) -> Self {
        self.text = chunks.iter().map(|c| (*c).to_owned()).collect();
        self
    }

    /// Sets reasoning text.
    #[must_use]
    pub fn with_reasoning(mut self, text: &str) -> Self {
        self.reasoning = Some(text.to_owned());
        self
    }

    /// Pauses before each streamed event.
    #[must_use]
    pub fn with_chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// Reports a truncated answer (`max_tokens` / `length`).
    #[must_use]
    pub fn truncated(mut self) -> Self {
        self.truncated = true;
        self
    }

    /// Leaves tool-call ids out of OpenAI chunks.
    #[must_use]
    pub fn without_ids(mut self) -> Self {
        self.omit_ids = true;
        self
    }

    /// Sets the usage figures reported.
    #[must_use]
    pub fn with_usage(mut self, input: u64, output: u64) -> Self {
        self.usage = (input, output);
        self
    }
}

/// What the server does with one model request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Answer with a model turn.
    Turn(ScriptedTurn),
    /// Answer with an HTTP error status and the protocol's error document.
    Status {
        /// The status code (429, 500, 503 ...).
        status: u16,
        /// The `retry-after` header, in seconds.
        retry_after: Option<u64>,
        /// The error message.
        message: String,
    },
    /// Start streaming the turn, then drop the connection after `after_events` events
    /// (without ending the chunked body): a stream cut in the middle.
    Cut {
        /// The turn whose stream is cut.
        turn: ScriptedTurn,
        /// Events written before the cut.
        after_events: usize,
    },
    /// Stream the turn's first `after_events` events, then an in-stream error event
    /// (Anthropic `event: error`, OpenAI a `data:` error object).
    StreamError {
        /// The turn whose stream fails.
        turn: ScriptedTurn,
        /// Events written before the error.
        after_events: usize,
        /// The error message.
        message: String,
    },
    /// Write a stream line that is not valid JSON after `after_events` events.
    Garbage {
        /// The turn whose stream breaks.
        turn: ScriptedTurn,
        /// Events written before the garbage.
        after_events: usize,
    },
    /// Read the request and answer nothing for this long (then close): a hung model.
    Hang(Duration),
    /// Decide the reply from the request body (a model that reads a tool result, such as an
    /// id, and uses it in its next call). The reply it returns is played as if scripted; a
    /// `Respond` returned from a `Respond` is an error answered with HTTP 500.
    Respond(Responder),
}

/// A reply computed from the request body: see [`Reply::Respond`].
#[derive(Clone)]
pub struct Responder(Arc<dyn Fn(&Value) -> Reply + Send + Sync>);

impl Responder {
    /// Wraps a function of the request's JSON body.
    pub fn new(respond: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        Self(Arc::new(respond))
    }
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Responder(..)")
    }
}

impl PartialEq for Responder {
    /// Two responders are equal when they are the same function object.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Responder {}

impl Reply {
    /// A text turn.
    pub fn text(text: &str) -> Self {
        Self::Turn(ScriptedTurn::text(text))
    }

    /// A turn calling one tool.
    pub fn tool_call(name: &str, arguments: &Value) -> Self {
        Self::Turn(ScriptedTurn::tool_call(name, arguments))
    }

    /// An HTTP error.
    pub fn status(status: u16, message: &str) -> Self {
        Self::Status {
            status,
            retry_after: None,
            message: message.to_owned(),
        }
    }

    /// 429 with `retry-after: seconds`.
    pub fn rate_limited(seconds: u64) -> Self {
        Self::Status {
            status: 429,
            retry_after: Some(seconds),
            message: "rate limited by the scripted model".to_owned(),
        }
    }

    /// Parses a reply from the JSON script format the standalone binary reads:
    /// `{"text": "..", "reasoning": "..", "tool_calls": [{"name": .., "arguments": {..},
    /// "id": .., "index": ..}], "chunk_delay_ms": N}`, `{"status": 429, "retry_after": 1,
    /// "message": ".."}`, `{"cut": TURN, "after_events": N}`, `{"hang_ms": N}`.
    pub fn from_json(value: &Value) -> Result<Self, String> {
        let obj = value
            .as_object()
            .ok_or_else(|| format!("a scripted reply must be an object, got {value}"))?;
        if let Some(status) = obj.get("status") {
            let status = status
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .ok_or("`status` must be an HTTP status code")?;
            return Ok(Self::Status {
                status,
                retry_after: obj.get("retry_after").and_then(Value::as_u64),
                message: obj
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("scripted error")
                    .to_owned(),
            });
        }
        if let Some(ms) = obj.get("hang_ms") {
            let ms = ms.as_u64().ok_or("`hang_ms` must be a number")?;
            return Ok(Self::Hang(Duration::from_millis(ms)));
        }
        let after_events =
            usize::try_from(obj.get("after_events").and_then(Value::as_u64).unwrap_or(3))
                .map_err(|e| e.to_string())?;
        if let Some(turn) = obj.get("cut") {
            return Ok(Self::Cut {
                turn: turn_from_json(turn)?,
                after_events,
            });
        }
        Ok(Self::Turn(turn_from_json(value)?))
    }
}

fn turn_from_json(value: &Value) -> Result<ScriptedTurn, String> {
    let mut turn = ScriptedTurn::empty();
    if let Some(text) = value.get("text") {
        turn.text = match text {
            Value::String(s) => split_text(s, 6),
            Value::Array(parts) => parts
                .iter()
                .map(|p| {
                    p.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| "text chunks must be strings".to_owned())
                })
                .collect::<Result<_, _>>()?,
            _ => return Err("`text` must be a string or a list of strings".to_owned()),
        };
    }
    if let Some(r) = value.get("reasoning").and_then(Value::as_str) {
        turn.reasoning = Some(r.to_owned());
    }
    turn.omit_ids = value.get("omit_ids").and_then(Value::as_bool) == Some(true);
    if let Some(ms) = value.get("chunk_delay_ms").and_then(Value::as_u64) {
        turn.chunk_delay = Duration::from_millis(ms);
    }
    if let Some(calls) = value.get("tool_calls") {
        let calls = calls.as_array().ok_or("`tool_calls` must be a list")?;
        for call in calls {
            let name = call
                .get("name")
                .and_then(Value::as_str)
                .ok_or("a tool call needs a `name`")?;
            let arguments = match call.get("arguments") {
                Some(Value::String(raw)) => raw.clone(),
                Some(other) => other.to_string(),
                None => "{}".to_owned(),
            };
            turn.tool_calls.push(ScriptedToolCall {
                id: call.get("id").and_then(Value::as_str).map(str::to_owned),
                name: name.to_owned(),
                arguments,
                index: call
                    .get("index")
                    .and_then(Value::as_u64)
                    .and_then(|i| u32::try_from(i).ok()),
            });
        }
    }
    Ok(turn)
}

fn split_text(text: &str, piece: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    chars
        .chunks(piece.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

fn split_pieces(text: &str, pieces: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let size = chars.len().div_ceil(pieces.max(1));
    split_text(text, size)
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// `POST`, `GET` ...
    pub method: String,
    /// The request target, query included (`/v1/messages?beta=true`).
    pub path: String,
    /// Headers, names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
}

impl RecordedRequest {
    /// The body parsed as JSON (`Value::Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Shared {
    script: Mutex<VecDeque<Reply>>,
    /// Replies reserved for requests whose body contains a marker, tried before `script`.
    routed: Mutex<Vec<(String, VecDeque<Reply>)>>,
    requests: Mutex<Vec<RecordedRequest>>,
    arrived: Condvar,
    shutdown: AtomicBool,
    counter: AtomicU64,
    /// Model requests being answered now, and the most seen at once.
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    required_key: Option<String>,
    record_to: Option<std::path::PathBuf>,
    written: Mutex<Vec<WrittenEvent>>,
}

/// When the server flushed one streamed event (for latency measurements).
#[derive(Debug, Clone)]
pub struct WrittenEvent {
    /// The model request it belongs to (0 for the first one answered).
    pub request: u64,
    /// The event's kind: the SSE `event:` name, or the first delta key for OpenAI chunks.
    pub kind: String,
    /// When the write and flush returned.
    pub at: Instant,
}

/// Options for [`ModelServer::start_with`].
#[derive(Debug, Default, Clone)]
pub struct ModelServerOptions {
    /// When set, requests without this key (`x-api-key` or `Authorization: Bearer`) get 401.
    pub required_api_key: Option<String>,
    /// When set, each recorded request is also appended to this file as a JSON line.
    pub record_to: Option<std::path::PathBuf>,
}

/// A running loopback model server; stops when dropped.
pub struct ModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl ModelServer {
    /// Starts a server on `127.0.0.1:0` playing `script`.
    pub fn start(script: impl IntoIterator<Item = Reply>) -> Self {
        Self::start_with(script, ModelServerOptions::default())
    }

    /// Starts a server with options.
    pub fn start_with(
        script: impl IntoIterator<Item = Reply>,
        options: ModelServerOptions,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback model server");
        let addr = listener.local_addr().expect("model server address");
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into_iter().collect()),
            routed: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
            arrived: Condvar::new(),
            shutdown: AtomicBool::new(false),
            counter: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            required_key: options.required_api_key,
            record_to: options.record_to,
            written: Mutex::new(Vec::new()),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("model-server".to_owned())
            .spawn(move || {
                for conn in listener.incoming() {
                    if accept_shared.shutdown.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let shared = Arc::clone(&accept_shared);
                    let _ = std::thread::Builder::new()
                        .name("model-server-conn".to_owned())
                        .spawn(move || serve_connection(&shared, conn));
                }
            })
            .expect("spawn model server thread");
        Self {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT` (no trailing slash, no `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues another reply.
    pub fn push(&self, reply: Reply) {
        self.shared
            .script
            .lock()
            .expect("script lock")
            .push_back(reply);
    }

    /// Reserves `replies`, in order, for model requests whose body contains `marker` (a
    /// delegated child's system prompt, say), so concurrent sessions get their own replies.
    pub fn route(&self, marker: &str, replies: impl IntoIterator<Item = Reply>) {
        self.shared
            .routed
            .lock()
            .expect("routes lock")
            .push((marker.to_owned(), replies.into_iter().collect()));
    }

    /// The most model requests that were being answered at the same time.
    pub fn max_in_flight(&self) -> u64 {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Replies not yet played.
    pub fn remaining(&self) -> usize {
        self.shared.script.lock().expect("script lock").len()
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().expect("requests lock").clone()
    }

    /// The model requests (`/messages` or `/chat/completions`) received so far.
    pub fn model_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| is_model_path(&r.path))
            .collect()
    }

    /// When each streamed event was flushed, in order.
    pub fn written_events(&self) -> Vec<WrittenEvent> {
        self.shared.written.lock().expect("written lock").clone()
    }

    /// Forgets the recorded requests and event times (long benchmarks).
    pub fn clear_records(&self) {
        self.shared.requests.lock().expect("requests lock").clear();
        self.shared.written.lock().expect("written lock").clear();
    }

    /// Waits until at least `count` requests arrived; false on timeout.
    pub fn wait_for_requests(&self, count: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut requests = self.shared.requests.lock().expect("requests lock");
        while requests.len() < count {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            requests = self
                .shared
                .arrived
                .wait_timeout(requests, deadline - now)
                .expect("requests lock")
                .0;
        }
        true
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(handle) = self.accept.take() {
            let _ = handle.join();
        }
    }
}

fn is_model_path(path: &str) -> bool {
    let bare = path.split('?').next().unwrap_or(path);
    bare.ends_with("/messages") || bare.ends_with("/chat/completions")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Anthropic,
    OpenAi,
}

/// Counts one model request as being answered until dropped.
struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn serve_connection(shared: &Shared, stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut out = stream;
    let Some(request) = read_request(&mut reader, &mut out) else {
        return;
    };
    if let Some(path) = &shared.record_to {
        let line = json!({
            "method": request.method,
            "path": request.path,
            "headers": request.headers,
            "body": request.json(),
        });
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
    {
        let mut requests = shared.requests.lock().expect("requests lock");
        requests.push(request.clone());
        shared.arrived.notify_all();
    }
    let bare = request.path.split('?').next().unwrap_or("").to_owned();
    let protocol = if bare.ends_with("/chat/completions") || bare.ends_with("/models") {
        Protocol::OpenAi
    } else {
        Protocol::Anthropic
    };
    if let Some(key) = &shared.required_key {
        let presented = request.header("x-api-key").map(str::to_owned).or_else(|| {
            request
                .header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_owned)
        });
        if presented.as_deref() != Some(key.as_str()) {
            write_error(&mut out, protocol, 401, None, "invalid api key");
            return;
        }
    }
    if request.method == "GET" && bare.ends_with("/models") {
        let body = json!({"object": "list", "data": [
            {"id": "scripted", "object": "model", "created": 0, "owned_by": "rho-e2e"}
        ]});
        write_json(&mut out, 200, &[], &body);
        return;
    }
    if request.method == "POST" && bare.ends_with("/messages/count_tokens") {
        let tokens = u64::try_from(request.body.len() / 4).unwrap_or(u64::MAX);
        write_json(&mut out, 200, &[], &json!({"input_tokens": tokens}));
        return;
    }
    if request.method != "POST" || !is_model_path(&request.path) {
        write_error(
            &mut out,
            protocol,
            404,
            None,
            &format!("no route for {} {}", request.method, request.path),
        );
        return;
    }
    let body = request.json();
    if !body.is_object() {
        write_error(
            &mut out,
            protocol,
            400,
            None,
            "request body is not a JSON object",
        );
        return;
    }
    let streaming = body.get("stream").and_then(Value::as_bool) == Some(true);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted")
        .to_owned();
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    let routed = shared
        .routed
        .lock()
        .expect("routes lock")
        .iter_mut()
        .find(|(marker, replies)| !replies.is_empty() && request.body.contains(marker.as_str()))
        .and_then(|(_, replies)| replies.pop_front());
    let reply = routed.or_else(|| shared.script.lock().expect("script lock").pop_front());
    let Some(reply) = reply else {
        write_error(
            &mut out,
            protocol,
            500,
            None,
            "scripted model: the script is exhausted (one request more than scripted)",
        );
        return;
    };
    let reply = match reply {
        Reply::Respond(responder) => (responder.0)(&body),
        reply => reply,
    };
    let serial = shared.counter.fetch_add(1, Ordering::SeqCst);
    let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let _in_flight = InFlight(&shared.in_flight);
    let ctx = RenderContext {
        protocol,
        model,
        serial,
        include_usage,
    };
    match reply {
        Reply::Status {
            status,
            retry_after,
            message,
        } => write_error(&mut out, protocol, status, retry_after, &message),
        Reply::Respond(_) => write_error(
            &mut out,
            protocol,
            500,
            None,
            "scripted model: a responder returned another responder",
        ),
        Reply::Hang(duration) => {
            let deadline = Instant::now() + duration;
            while Instant::now() < deadline && !shared.shutdown.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Reply::Turn(turn) => {
            if streaming {
                let events = render_stream(&ctx, &turn);
                stream_events(
                    (shared, serial),
                    &mut out,
                    &events,
                    turn.chunk_delay,
                    None,
                    true,
                );
            } else {
                std::thread::sleep(turn.chunk_delay);
                write_json(&mut out, 200, &[], &render_whole(&ctx, &turn));
            }
        }
        Reply::Cut { turn, after_events } => {
            let events = render_stream(&ctx, &turn);
            let n = after_events.min(events.len().saturating_sub(1));
            stream_events(
                (shared, serial),
                &mut out,
                &events[..n],
                turn.chunk_delay,
                None,
                false,
            );
        }
        Reply::StreamError {
            turn,
            after_events,
            message,
        } => {
            let events = render_stream(&ctx, &turn);
            let n = after_events.min(events.len());
            let error = match protocol {
                Protocol::Anthropic => format!(
                    "event: error\ndata: {}\n\n",
                    json!({"type": "error", "error": {"type": "overloaded_error", "message": message}})
                ),
                Protocol::OpenAi => format!(
                    "data: {}\n\n",
                    json!({"error": {"message": message, "type": "server_error", "code": null}})
                ),
            };
            stream_events(
                (shared, serial),
                &mut out,
                &events[..n],
                turn.chunk_delay,
                Some(error),
                true,
            );
        }
        Reply::Garbage { turn, after_events } => {
            let events = render_stream(&ctx, &turn);
            let n = after_events.min(events.len());
            let garbage = match protocol {
                Protocol::Anthropic => {
                    "event: content_block_delta\ndata: {\"type\": \"content_bl\n\n".to_owned()
                }
                Protocol::OpenAi => "data: {\"id\": \"chatcmpl\", \"choices\": [\n\n".to_owned(),
            };
            stream_events(
                (shared, serial),
                &mut out,
                &events[..n],
                turn.chunk_delay,
                Some(garbage),
                true,
            );
        }
    }
}

/// Reads one HTTP/1.1 request; `None` when the peer sent nothing usable.
fn read_request(reader: &mut BufReader<TcpStream>, out: &mut TcpStream) -> Option<RecordedRequest> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            return None;
        }
        let header = header.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    if find("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
        out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").ok()?;
    }
    let mut body = Vec::new();
    if find("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        loop {
            let mut size_line = String::new();
            reader.read_line(&mut size_line).ok()?;
            let size_text = size_line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_text, 16).ok()?;
            if size == 0 {
                // Trailer section, ended by an empty line.
                loop {
                    let mut trailer = String::new();
                    if reader.read_line(&mut trailer).ok()? == 0 || trailer.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let mut chunk = vec![0; size];
            reader.read_exact(&mut chunk).ok()?;
            body.extend_from_slice(&chunk);
            let mut crlf = [0; 2];
            reader.read_exact(&mut crlf).ok()?;
        }
    } else if let Some(len) = find("content-length") {
        let len: usize = len.parse().ok()?;
        body = vec![0; len];
        reader.read_exact(&mut body).ok()?;
    }
    Some(RecordedRequest {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn status_text(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}

fn write_json(out: &mut TcpStream, status: u16, extra: &[(&str, String)], body: &Value) {
    let body = body.to_string();
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        status_text(status),
        body.len()
    );
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(body.as_bytes());
    let _ = out.flush();
}

fn write_error(
    out: &mut TcpStream,
    protocol: Protocol,
    status: u16,
    retry_after: Option<u64>,
    message: &str,
) {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    let body = match protocol {
        Protocol::Anthropic => {
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
        Protocol::OpenAi => {
            json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
        }
    };
    let mut extra = Vec::new();
    if let Some(seconds) = retry_after {
        extra.push(("retry-after", seconds.to_string()));
    }
    write_json(out, status, &extra, &body);
}

/// Writes an SSE response with a chunked body, one chunk per event. `tail` is written after
/// the events; `finish` ends the chunked body properly (otherwise the connection is dropped
/// mid-body, which clients must report as a broken stream).
fn stream_events(
    log: (&Shared, u64),
    out: &mut TcpStream,
    events: &[String],
    delay: Duration,
    tail: Option<String>,
    finish: bool,
) {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    if out.write_all(head.as_bytes()).is_err() {
        return;
    }
    let _ = out.flush();
    for event in events.iter().chain(tail.iter()) {
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let chunk = format!("{:x}\r\n{event}\r\n", event.len());
        if out.write_all(chunk.as_bytes()).is_err() || out.flush().is_err() {
            return;
        }
        let at = Instant::now();
        let kind = event_kind(event);
        log.0
            .written
            .lock()
            .expect("written lock")
            .push(WrittenEvent {
                request: log.1,
                kind,
                at,
            });
    }
    if finish {
        let _ = out.write_all(b"0\r\n\r\n");
        let _ = out.flush();
    } else {
        let _ = out.shutdown(std::net::Shutdown::Both);
    }
}

/// A short name for an event: `message_start`, `content_block_delta:text_delta`,
/// `chunk:content`, `done` ...
fn event_kind(event: &str) -> String {
    let data = event
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or("");
    if data == "[DONE]" {
        return "done".to_owned();
    }
    let value: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    if let Some(kind) = value.get("type").and_then(Value::as_str) {
        return match value.pointer("/delta/type").and_then(Value::as_str) {
            Some(delta) => format!("{kind}:{delta}"),
            None => kind.to_owned(),
        };
    }
    match value
        .pointer("/choices/0/delta")
        .and_then(Value::as_object)
        .and_then(|d| d.keys().find(|k| *k != "role").cloned())
    {
        Some(key) => format!("chunk:{key}"),
        None => "chunk".to_owned(),
    }
}

struct RenderContext {
    protocol: Protocol,
    model: String,
    serial: u64,
    include_usage: bool,
}

fn anthropic_event(kind: &str, data: &Value) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

fn openai_event(data: &Value) -> String {
    format!("data: {data}\n\n")
}

fn render_stream(ctx: &RenderContext, turn: &ScriptedTurn) -> Vec<String> {
    match ctx.protocol {
        Protocol::Anthropic => render_anthropic_stream(ctx, turn),
        Protocol::OpenAi => render_openai_stream(ctx, turn),
    }
}

fn anthropic_stop_reason(turn: &ScriptedTurn) -> &'static str {
    if turn.truncated {
        "max_tokens"
    } else if turn.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

fn anthropic_tool_id(ctx: &RenderContext, i: usize, call: &ScriptedToolCall) -> String {
    call.id
        .clone()
        .unwrap_or_else(|| format!("toolu_{:02}{:04}", ctx.serial, i))
}

fn render_anthropic_stream(ctx: &RenderContext, turn: &ScriptedTurn) -> Vec<String> {
    let mut events = Vec::new();
    let id = format!("msg_scripted_{:04}", ctx.serial);
    events.push(anthropic_event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": ctx.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": turn.usage.0, "output_tokens": 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        }}),
    ));
    events.push(anthropic_event("ping", &json!({"type": "ping"})));
    let mut index = 0;
    if let Some(reasoning) = &turn.reasoning {
        events.push(anthropic_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ));
        for piece in split_text(reasoning, 8) {
            events.push(anthropic_event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "thinking_delta", "thinking": piece}}),
            ));
        }
        events.push(anthropic_event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "signature_delta", "signature": "c2NyaXB0ZWQ="}}),
        ));
        events.push(anthropic_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    if !turn.text.is_empty() {
        events.push(anthropic_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "text", "text": ""}}),
        ));
        for piece in &turn.text {
            events.push(anthropic_event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        events.push(anthropic_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        events.push(anthropic_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": anthropic_tool_id(ctx, i, call),
                                      "name": call.name, "input": {}}}),
        ));
        for piece in split_pieces(&call.arguments, turn.argument_pieces) {
            events.push(anthropic_event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        events.push(anthropic_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    events.push(anthropic_event(
        "message_delta",
        &json!({"type": "message_delta",
                "delta": {"stop_reason": anthropic_stop_reason(turn), "stop_sequence": null},
                "usage": {"output_tokens": turn.usage.1}}),
    ));
    events.push(anthropic_event(
        "message_stop",
        &json!({"type": "message_stop"}),
    ));
    events
}

fn openai_finish_reason(turn: &ScriptedTurn) -> &'static str {
    if turn.truncated {
        "length"
    } else if turn.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

fn render_openai_stream(ctx: &RenderContext, turn: &ScriptedTurn) -> Vec<String> {
    let id = format!("chatcmpl-scripted{:04}", ctx.serial);
    let chunk = |delta: Value, finish: Value| {
        openai_event(&json!({
            "id": id, "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": ctx.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
        }))
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    if let Some(reasoning) = &turn.reasoning {
        for piece in split_text(reasoning, 8) {
            events.push(chunk(json!({"reasoning_content": piece}), Value::Null));
        }
    }
    for piece in &turn.text {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        let index = call
            .index
            .unwrap_or_else(|| u32::try_from(i).unwrap_or(u32::MAX));
        let mut first = json!({"index": index, "type": "function",
                               "function": {"name": call.name, "arguments": ""}});
        if !turn.omit_ids {
            first["id"] = json!(
                call.id
                    .clone()
                    .unwrap_or_else(|| format!("call_{:02}{:04}", ctx.serial, i))
            );
        }
        events.push(chunk(json!({"tool_calls": [first]}), Value::Null));
        for piece in split_pieces(&call.arguments, turn.argument_pieces) {
            events.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    }
    events.push(chunk(json!({}), json!(openai_finish_reason(turn))));
    if ctx.include_usage {
        events.push(openai_event(&json!({
            "id": id, "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": ctx.model, "choices": [],
            "usage": {"prompt_tokens": turn.usage.0, "completion_tokens": turn.usage.1,
                      "total_tokens": turn.usage.0 + turn.usage.1}
        })));
    }
    events.push("data: [DONE]\n\n".to_owned());
    events
}

fn render_whole(ctx: &RenderContext, turn: &ScriptedTurn) -> Value {
    let text: String = turn.text.concat();
    match ctx.protocol {
        Protocol::Anthropic => {
            let mut content = Vec::new();
            if let Some(reasoning) = &turn.reasoning {
                content.push(json!({"type": "thinking", "thinking": reasoning,
                                    "signature": "c2NyaXB0ZWQ="}));
            }
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for (i, call) in turn.tool_calls.iter().enumerate() {
                let input: Value =
                    serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
                content.push(
                    json!({"type": "tool_use", "id": anthropic_tool_id(ctx, i, call),
                                    "name": call.name, "input": input}),
                );
            }
            json!({"id": format!("msg_scripted_{:04}", ctx.serial), "type": "message",
                   "role": "assistant", "model": ctx.model, "content": content,
                   "stop_reason": anthropic_stop_reason(turn), "stop_sequence": null,
                   "usage": {"input_tokens": turn.usage.0, "output_tokens": turn.usage.1}})
        }
        Protocol::OpenAi => {
            let mut message = json!({"role": "assistant",
                                     "content": if text.is_empty() { Value::Null } else { json!(text) }});
            if let Some(reasoning) = &turn.reasoning {
                message["reasoning_content"] = json!(reasoning);
            }
            if !turn.tool_calls.is_empty() {
                let calls: Vec<Value> = turn
                    .tool_calls
                    .iter()
                    .enumerate()
                    .map(|(i, call)| {
                        let mut c = json!({"type": "function",
                                           "function": {"name": call.name, "arguments": call.arguments}});
                        c["id"] = json!(
                            call.id
                                .clone()
                                .unwrap_or_else(|| format!("call_{:02}{:04}", ctx.serial, i))
                        );
                        c
                    })
                    .collect();
                message["tool_calls"] = json!(calls);
            }
            json!({"id": format!("chatcmpl-scripted{:04}", ctx.serial),
                   "object": "chat.completion", "created": 1_700_000_000, "model": ctx.model,
                   "choices": [{"index": 0, "message": message, "logprobs": null,
                                "finish_reason": openai_finish_reason(turn)}],
                   "usage": {"prompt_tokens": turn.usage.0, "completion_tokens": turn.usage.1,
                             "total_tokens": turn.usage.0 + turn.usage.1}})
        }
    }
}
