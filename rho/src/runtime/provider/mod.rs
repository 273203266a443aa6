//! Model providers: the two wire protocols rho speaks (Anthropic Messages, OpenAI Chat
//! Completions), streamed, with tool calls, retries and clear errors.
//!
//! The conversation types here are protocol-neutral; `anthropic` and `openai` turn them into
//! request bodies and turn streamed events back into a [`ModelTurn`], as pure functions.
//! [`ModelClient`] owns the HTTP side and the retry loop.
//!
//! Invariant: an API key lives only in an [`ApiKey`], whose `Debug` is redacted and which has
//! no `Display` and no `Serialize`; it leaves the process only as a request header. Errors
//! carry the provider's name and status, never the key.

pub mod anthropic;
pub mod openai;
pub mod retry;
pub mod select;
pub mod sse;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agents::Reasoning;
use retry::{RetryDecision, RetryPolicy};
use sse::SseDecoder;

/// A secret API key. Never printed, never serialized, never stored.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(Arc<str>);

impl ApiKey {
    /// Wraps a key read from the environment.
    pub fn new(key: &str) -> Self {
        Self(Arc::from(key.trim()))
    }

    /// The key, for the one place that sends it (a request header).
    fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// The wire protocol of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WireProtocol {
    /// Anthropic Messages (`POST {base}/messages`).
    AnthropicMessages,
    /// OpenAI Chat Completions (`POST {base}/chat/completions`).
    OpenAiChat,
}

/// Where and how to reach one provider.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The provider name (`openai`, `anthropic`, or a custom host's name).
    pub provider: String,
    /// Its wire protocol.
    pub protocol: WireProtocol,
    /// The API base, ending in `/v1` (no trailing slash).
    pub base_url: String,
    /// The key, when one is configured.
    pub key: Option<ApiKey>,
    /// First-party providers are strict about their streams; custom hosts get the local-server
    /// quirks filled in (missing tool-call ids, sparse indexes, empty arguments).
    pub first_party: bool,
}

/// A resolved model: provider, model id and reasoning level.
#[derive(Debug, Clone)]
pub struct ModelChoice {
    /// Where to send requests.
    pub endpoint: Endpoint,
    /// The provider's model id.
    pub model: String,
    /// The reasoning level, if one is selected.
    pub reasoning: Option<Reasoning>,
}

impl ModelChoice {
    /// `provider/model`, for display and transcripts.
    pub fn label(&self) -> String {
        format!("{}/{}", self.endpoint.provider, self.model)
    }
}

/// One tool call a model made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id the result must quote.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The arguments as the model wrote them (JSON text, not necessarily valid).
    pub arguments: String,
}

/// The result of one tool call, sent back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call it answers.
    pub call_id: String,
    /// The tool name (OpenAI-compatible servers like to see it).
    pub name: String,
    /// The text the model sees.
    pub content: String,
    /// Whether the tool failed (or was denied).
    pub is_error: bool,
}

/// A reasoning block a provider asks to be sent back verbatim (Anthropic thinking).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thinking {
    /// The reasoning text.
    pub text: String,
    /// The provider's signature over it.
    pub signature: String,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// The user's words.
    User {
        /// The text.
        text: String,
    },
    /// A model turn.
    Assistant {
        /// Reasoning blocks to replay.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        thinking: Vec<Thinking>,
        /// The text.
        text: String,
        /// The tool calls.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// Results of the previous turn's tool calls.
    ToolResults {
        /// In call order.
        results: Vec<ToolResult>,
    },
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolSpec {
    /// The name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub input_schema: Value,
}

/// What one model request sends.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The system prompt.
    pub system: &'a str,
    /// The conversation so far.
    pub messages: &'a [Message],
    /// The tools offered.
    pub tools: &'a [ToolSpec],
    /// The output token cap.
    pub max_tokens: u32,
}

/// Why a model turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished.
    EndTurn,
    /// The model wants tool results.
    ToolUse,
    /// The output token cap cut it.
    MaxTokens,
    /// Something else the provider reported.
    Other(String),
}

/// Token usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens read from a cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to a cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Adds another request's usage.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

/// A finished model turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelTurn {
    /// Reasoning blocks to replay.
    pub thinking: Vec<Thinking>,
    /// Reasoning text without a signature (OpenAI-compatible `reasoning_content`).
    pub reasoning_text: String,
    /// The text.
    pub text: String,
    /// The tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Why it ended.
    pub stop: StopReason,
    /// Its usage.
    pub usage: Usage,
}

/// What streams out of a model request while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// Assistant text.
    TextDelta(String),
    /// Reasoning text.
    ReasoningDelta(String),
    /// A tool call began (its arguments are still streaming).
    ToolCallStarted {
        /// The tool name.
        name: String,
    },
    /// The attempt failed retryably; text streamed so far is void.
    Retrying {
        /// The attempt that starts next (2, 3 ...).
        attempt: u32,
        /// The wait before it.
        delay: Duration,
        /// Why.
        reason: String,
    },
}

/// Why a model request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The provider needs a key and none is set.
    #[error(
        "provider `{provider}` has no API key: set {variable} in the environment (rho never \
         stores keys)"
    )]
    MissingKey {
        /// The provider.
        provider: String,
        /// The variable to set.
        variable: String,
    },
    /// The connection failed or timed out.
    #[error("provider `{provider}`: cannot reach {url}: {detail}")]
    Network {
        /// The provider.
        provider: String,
        /// The URL (never holds a key).
        url: String,
        /// What failed.
        detail: String,
    },
    /// The key was refused. The provider's message is left out: it may quote the key.
    #[error("provider `{provider}`: authentication failed (HTTP {status}); check the API key")]
    Authentication {
        /// The provider.
        provider: String,
        /// 401 or 403.
        status: u16,
    },
    /// The provider answered with an HTTP error.
    #[error("provider `{provider}`: HTTP {status}: {message}{}", attempts_note(*attempts))]
    Http {
        /// The provider.
        provider: String,
        /// The status.
        status: u16,
        /// The provider's error message (bounded).
        message: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The server asked to wait longer than the retry policy allows.
    #[error(
        "provider `{provider}`: HTTP {status} asks to retry after {}s, more than the {}s rho waits",
        wait.as_secs(), limit.as_secs()
    )]
    RetryAfterTooLong {
        /// The provider.
        provider: String,
        /// The status.
        status: u16,
        /// The requested wait.
        wait: Duration,
        /// The longest wait honoured.
        limit: Duration,
    },
    /// The stream was not what the protocol says.
    #[error("provider `{provider}`: malformed response stream: {detail}{}", attempts_note(*attempts))]
    MalformedStream {
        /// The provider.
        provider: String,
        /// What was wrong.
        detail: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The provider reported an error inside the stream.
    #[error("provider `{provider}`: error in the response stream: {message}{}", attempts_note(*attempts))]
    StreamError {
        /// The provider.
        provider: String,
        /// Its message.
        message: String,
        /// Attempts made.
        attempts: u32,
    },
}

fn attempts_note(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (after {attempts} attempts)")
    } else {
        String::new()
    }
}

impl ProviderError {
    /// Whether the failure is about credentials (reported without detail).
    pub fn is_authentication(&self) -> bool {
        matches!(self, Self::Authentication { .. } | Self::MissingKey { .. })
    }
}

/// Installs the `ring` crypto provider for rustls once per process (reqwest is built
/// without one, so the TLS stack is ours to choose).
fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error means another provider is already installed, which is just as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Builds the HTTP client used for model requests.
pub fn http_client() -> Result<reqwest::Client, String> {
    install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        // A stream that stays silent this long is dead; a healthy one pings.
        .read_timeout(Duration::from_mins(5))
        .user_agent(concat!("rho/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// The largest error body read from a provider.
const ERROR_BODY_LIMIT: usize = 16 * 1024;

/// A failure of one attempt, before the retry decision.
enum AttemptError {
    /// Worth another attempt (status, retry-after).
    Retryable {
        error: ProviderError,
        retry_after: Option<Duration>,
        status: Option<u16>,
    },
    /// Final.
    Fatal(ProviderError),
}

/// Sends model requests to one endpoint, with the retry policy.
#[derive(Debug, Clone)]
pub struct ModelClient {
    choice: ModelChoice,
    http: reqwest::Client,
    retry: RetryPolicy,
}

impl ModelClient {
    /// A client for a resolved model.
    pub fn new(choice: ModelChoice, http: reqwest::Client) -> Self {
        Self {
            choice,
            http,
            retry: RetryPolicy::default(),
        }
    }

    /// Replaces the retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The model this client talks to.
    pub fn choice(&self) -> &ModelChoice {
        &self.choice
    }

    /// Runs one model turn, streaming events to `sink`, retrying per the policy. Dropping
    /// the future cancels the request.
    pub async fn complete(
        &self,
        request: ModelRequest<'_>,
        sink: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ModelTurn, ProviderError> {
        let endpoint = &self.choice.endpoint;
        let (url, body) = match endpoint.protocol {
            WireProtocol::AnthropicMessages => (
                format!("{}/messages", endpoint.base_url),
                anthropic::request_body(&request, &self.choice),
            ),
            WireProtocol::OpenAiChat => (
                format!("{}/chat/completions", endpoint.base_url),
                openai::request_body(&request, &self.choice),
            ),
        };
        let body = serde_json::to_vec(&body).map_err(|e| ProviderError::MalformedStream {
            provider: endpoint.provider.clone(),
            detail: format!("cannot encode the request: {e}"),
            attempts: 0,
        })?;
        let mut attempt = 1;
        loop {
            match self.attempt(&url, &body, attempt, sink).await {
                Ok(turn) => return Ok(turn),
                Err(AttemptError::Fatal(error)) => return Err(error),
                Err(AttemptError::Retryable {
                    error,
                    retry_after,
                    status,
                }) => match self.retry.decide(attempt, retry_after) {
                    RetryDecision::After(delay) => {
                        tracing::warn!(
                            provider = %endpoint.provider, attempt, ?delay, %error,
                            "model request failed; retrying"
                        );
                        attempt += 1;
                        sink(StreamEvent::Retrying {
                            attempt,
                            delay,
                            reason: error.to_string(),
                        });
                        tokio::time::sleep(delay).await;
                    }
                    RetryDecision::Exhausted => return Err(error),
                    RetryDecision::TooLong(wait) => {
                        return Err(ProviderError::RetryAfterTooLong {
                            provider: endpoint.provider.clone(),
                            status: status.unwrap_or(429),
                            wait,
                            limit: self.retry.max_retry_after,
                        });
                    }
                },
            }
        }
    }

    async fn attempt(
        &self,
        url: &str,
        body: &[u8],
        attempt: u32,
        sink: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ModelTurn, AttemptError> {
        let endpoint = &self.choice.endpoint;
        let provider = endpoint.provider.clone();
        let mut builder = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body.to_vec());
        match endpoint.protocol {
            WireProtocol::AnthropicMessages => {
                builder = builder.header("anthropic-version", anthropic::API_VERSION);
                if let Some(key) = &endpoint.key {
                    builder = builder.header("x-api-key", key.expose());
                }
            }
            WireProtocol::OpenAiChat => {
                if let Some(key) = &endpoint.key {
                    builder = builder.bearer_auth(key.expose());
                }
            }
        }
        let network = |e: &reqwest::Error| ProviderError::Network {
            provider: provider.clone(),
            url: url.to_owned(),
            detail: describe_reqwest(e),
        };
        let response = builder.send().await.map_err(|e| AttemptError::Retryable {
            error: network(&e),
            retry_after: None,
            status: None,
        })?;
        let status = response.status().as_u16();
        if !response.status().is_success() {
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(retry::parse_retry_after);
            if status == 401 || status == 403 {
                return Err(AttemptError::Fatal(ProviderError::Authentication {
                    provider,
                    status,
                }));
            }
            let text = read_bounded(response, ERROR_BODY_LIMIT).await;
            let error = ProviderError::Http {
                provider: provider.clone(),
                status,
                message: error_message(&text),
                attempts: attempt,
            };
            return Err(if retry::is_retryable_status(status) {
                AttemptError::Retryable {
                    error,
                    retry_after,
                    status: Some(status),
                }
            } else {
                AttemptError::Fatal(error)
            });
        }
        let is_stream = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let malformed = |detail: String| ProviderError::MalformedStream {
            provider: provider.clone(),
            detail,
            attempts: attempt,
        };
        if !is_stream {
            // A server that ignores `stream: true` and answers one document is tolerated.
            let text = read_bounded(response, 64 * 1024 * 1024).await;
            let value: Value = serde_json::from_str(&text).map_err(|e| {
                AttemptError::Fatal(malformed(format!("the body is not JSON: {e}")))
            })?;
            let turn = match endpoint.protocol {
                WireProtocol::AnthropicMessages => anthropic::parse_whole(&value),
                WireProtocol::OpenAiChat => openai::parse_whole(&value, endpoint.first_party),
            }
            .map_err(|d| AttemptError::Fatal(malformed(d)))?;
            if !turn.text.is_empty() {
                sink(StreamEvent::TextDelta(turn.text.clone()));
            }
            return Ok(turn);
        }
        let mut decoder = SseDecoder::new();
        let mut state = StreamState::new(endpoint);
        let mut bytes = response.bytes_stream();
        while let Some(chunk) = bytes.next().await {
            let chunk = chunk.map_err(|e| AttemptError::Retryable {
                error: malformed(format!(
                    "the stream broke off before its end: {}",
                    describe_reqwest(&e)
                )),
                retry_after: None,
                status: None,
            })?;
            let events = decoder
                .feed(&chunk)
                .map_err(|d| AttemptError::Fatal(malformed(d)))?;
            for event in events {
                match state.on_event(&event, sink) {
                    Ok(()) => {}
                    Err(StreamFailure::Malformed(detail)) => {
                        return Err(AttemptError::Fatal(malformed(detail)));
                    }
                    Err(StreamFailure::Reported { message, retryable }) => {
                        let error = ProviderError::StreamError {
                            provider: provider.clone(),
                            message,
                            attempts: attempt,
                        };
                        return Err(if retryable {
                            AttemptError::Retryable {
                                error,
                                retry_after: None,
                                status: None,
                            }
                        } else {
                            AttemptError::Fatal(error)
                        });
                    }
                }
            }
            if state.is_done() {
                break;
            }
        }
        // A stream that ended properly but holds an incomplete turn is malformed for good;
        // one that stopped before its end is a cut, worth another attempt.
        let ended = state.is_done();
        state.finish().map_err(|detail| {
            if ended {
                AttemptError::Fatal(malformed(detail))
            } else {
                AttemptError::Retryable {
                    error: malformed(detail),
                    retry_after: None,
                    status: None,
                }
            }
        })
    }
}

/// How a stream failed, as a protocol parser sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamFailure {
    /// Not the protocol.
    Malformed(String),
    /// The provider reported an error event.
    Reported {
        /// Its message.
        message: String,
        /// Whether it is a transient (overload) error.
        retryable: bool,
    },
}

/// The per-protocol stream parser.
enum StreamState {
    Anthropic(anthropic::StreamParser),
    OpenAi(openai::StreamParser),
}

impl StreamState {
    fn new(endpoint: &Endpoint) -> Self {
        match endpoint.protocol {
            WireProtocol::AnthropicMessages => Self::Anthropic(anthropic::StreamParser::default()),
            WireProtocol::OpenAiChat => {
                Self::OpenAi(openai::StreamParser::new(endpoint.first_party))
            }
        }
    }

    fn on_event(
        &mut self,
        event: &sse::SseEvent,
        sink: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), StreamFailure> {
        match self {
            Self::Anthropic(p) => p.on_event(event, sink),
            Self::OpenAi(p) => p.on_event(event, sink),
        }
    }

    fn is_done(&self) -> bool {
        match self {
            Self::Anthropic(p) => p.is_done(),
            Self::OpenAi(p) => p.is_done(),
        }
    }

    fn finish(self) -> Result<ModelTurn, String> {
        match self {
            Self::Anthropic(p) => p.finish(),
            Self::OpenAi(p) => p.finish(),
        }
    }
}

/// A reqwest error without its URL query (ours have none) and with its cause chain.
fn describe_reqwest(error: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut text = if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_connect() {
        "connection failed".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

async fn read_bounded(response: reqwest::Response, limit: usize) -> String {
    let mut out = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        let room = limit.saturating_sub(out.len());
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if out.len() >= limit {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The message of a provider's error document (both protocols put it at `error.message`),
/// else the body itself, bounded.
fn error_message(body: &str) -> String {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_owned());
    let text: String = text.chars().take(500).collect();
    if text.is_empty() {
        return "no error message".to_owned();
    }
    text
}

/// Parses tool-call arguments for a protocol that needs an object (Anthropic `input`):
/// invalid JSON becomes an empty object (the tool layer reports the bad arguments).
pub fn arguments_object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::Object(serde_json::Map::new()),
    }
}
