//! Both wire protocols against the loopback scripted model server: streamed text and tool
//! calls, the local-server quirks, retries honouring `retry-after`, and every failure ending
//! with a clear error that never shows the key.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

use std::time::{Duration, Instant};

use rho::runtime::provider::retry::RetryPolicy;
use rho::runtime::provider::{
    ApiKey, Endpoint, Message, ModelChoice, ModelClient, ModelRequest, ProviderError, StopReason,
    StreamEvent, ToolSpec, WireProtocol,
};
use rho_e2e::model_server::{ModelServer, Reply, ScriptedTurn};
use serde_json::json;

const KEY: &str = "sk-test-secret-0123456789";

fn client(server: &ModelServer, protocol: WireProtocol, first_party: bool) -> ModelClient {
    let base_url = format!("{}/v1", server.base_url());
    let choice = ModelChoice {
        endpoint: Endpoint {
            provider: "scripted".into(),
            protocol,
            base_url,
            key: Some(ApiKey::new(KEY)),
            first_party,
        },
        model: "m-1".into(),
        reasoning: None,
    };
    let http = rho::runtime::provider::http_client().unwrap();
    ModelClient::new(choice, http).with_retry(RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        max_retry_after: Duration::from_secs(5),
    })
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "read_file".into(),
        description: "Reads a file".into(),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }]
}

fn run(
    client: &ModelClient,
) -> (
    Result<rho::runtime::provider::ModelTurn, ProviderError>,
    Vec<StreamEvent>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let messages = [Message::User {
        text: "hello".into(),
    }];
    let tools = tools();
    let mut events = Vec::new();
    let result = rt.block_on(client.complete(
        ModelRequest {
            system: "be brief",
            messages: &messages,
            tools: &tools,
            max_tokens: 512,
        },
        &mut |e| events.push(e),
    ));
    (result, events)
}

#[test]
fn anthropic_stream_with_parallel_tool_calls() {
    let server = ModelServer::start([Reply::Turn(
        ScriptedTurn::text("Reading both.")
            .with_tool_call("read_file", &json!({"path": "a.txt"}))
            .with_tool_call("read_file", &json!({"path": "b.txt"})),
    )]);
    let (turn, events) = run(&client(&server, WireProtocol::AnthropicMessages, true));
    let turn = turn.unwrap();
    assert_eq!(turn.text, "Reading both.");
    assert_eq!(turn.stop, StopReason::ToolUse);
    assert_eq!(turn.tool_calls.len(), 2);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&turn.tool_calls[1].arguments).unwrap(),
        json!({"path": "b.txt"})
    );
    assert!(events.contains(&StreamEvent::TextDelta("Readin".into())));
    let req = &server.model_requests()[0];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.header("x-api-key"), Some(KEY));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    let body = req.json();
    assert_eq!(body["stream"], true);
    assert_eq!(body["system"], "be brief");
    assert_eq!(body["tools"][0]["name"], "read_file");
    assert_eq!(body["messages"][0]["content"][0]["text"], "hello");
}

#[test]
fn openai_custom_host_quirks_are_filled_in() {
    let server = ModelServer::start([Reply::Turn(
        ScriptedTurn::text("ok")
            .with_raw_tool_call(None, "read_file", r#"{"path":"x"}"#, Some(3))
            .with_raw_tool_call(None, "read_file", "", Some(7))
            .without_ids(),
    )]);
    let (turn, _) = run(&client(&server, WireProtocol::OpenAiChat, false));
    let turn = turn.unwrap();
    assert_eq!(turn.tool_calls.len(), 2);
    assert_eq!(turn.tool_calls[0].arguments, r#"{"path":"x"}"#);
    assert_eq!(turn.tool_calls[1].arguments, "{}");
    assert!(!turn.tool_calls[0].id.is_empty());
    assert_ne!(turn.tool_calls[0].id, turn.tool_calls[1].id);
    let req = &server.model_requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), Some(&*format!("Bearer {KEY}")));
    assert_eq!(req.json()["messages"][0]["role"], "system");
    assert_eq!(req.json()["stream_options"]["include_usage"], true);
}

#[test]
fn first_party_openai_rejects_missing_ids() {
    let server = ModelServer::start([Reply::Turn(
        ScriptedTurn::tool_call("read_file", &json!({})).without_ids(),
    )]);
    let (turn, _) = run(&client(&server, WireProtocol::OpenAiChat, true));
    let err = turn.unwrap_err();
    assert!(
        matches!(err, ProviderError::MalformedStream { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("no id"), "{err}");
}

#[test]
fn rate_limit_waits_for_retry_after_then_succeeds() {
    let server = ModelServer::start([Reply::rate_limited(1), Reply::text("after the wait")]);
    let started = Instant::now();
    let (turn, events) = run(&client(&server, WireProtocol::OpenAiChat, false));
    assert_eq!(turn.unwrap().text, "after the wait");
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "retry-after: 1 must be honoured, waited {:?}",
        started.elapsed()
    );
    assert!(matches!(
        events[0],
        StreamEvent::Retrying { attempt: 2, delay, .. } if delay == Duration::from_secs(1)
    ));
    assert_eq!(server.model_requests().len(), 2);
}

#[test]
fn server_errors_are_retried_then_reported_with_attempts() {
    let server = ModelServer::start([
        Reply::status(503, "busy"),
        Reply::status(500, "still busy"),
        Reply::status(502, "gateway down"),
    ]);
    let (turn, _) = run(&client(&server, WireProtocol::AnthropicMessages, true));
    let err = turn.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("HTTP 502") && text.contains("gateway down"),
        "{text}"
    );
    assert!(text.contains("after 3 attempts"), "{text}");
    assert!(!text.contains(KEY));
}

#[test]
fn a_cut_stream_is_retried_and_its_text_reset() {
    let server = ModelServer::start([
        Reply::Cut {
            turn: ScriptedTurn::text("never finished"),
            after_events: 3,
        },
        Reply::text("second try"),
    ]);
    let (turn, events) = run(&client(&server, WireProtocol::AnthropicMessages, true));
    assert_eq!(turn.unwrap().text, "second try");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::Retrying { attempt: 2, .. }))
    );
}

#[test]
fn a_stream_cut_every_time_fails_clearly() {
    let cut = || Reply::Cut {
        turn: ScriptedTurn::text("never finished"),
        after_events: 2,
    };
    let server = ModelServer::start([cut(), cut(), cut()]);
    let (turn, _) = run(&client(&server, WireProtocol::OpenAiChat, false));
    let err = turn.unwrap_err();
    assert!(
        matches!(err, ProviderError::MalformedStream { .. }),
        "{err}"
    );
}

#[test]
fn garbage_in_the_stream_is_malformed_and_not_retried() {
    let server = ModelServer::start([Reply::Garbage {
        turn: ScriptedTurn::text("hello there"),
        after_events: 2,
    }]);
    let (turn, _) = run(&client(&server, WireProtocol::AnthropicMessages, true));
    let err = turn.unwrap_err();
    assert!(
        err.to_string().contains("malformed response stream"),
        "{err}"
    );
    assert_eq!(server.model_requests().len(), 1);
}

#[test]
fn an_error_event_in_the_stream_is_reported() {
    let server = ModelServer::start([
        Reply::StreamError {
            turn: ScriptedTurn::text("partial"),
            after_events: 3,
            message: "overloaded right now".into(),
        },
        Reply::StreamError {
            turn: ScriptedTurn::text("partial"),
            after_events: 3,
            message: "overloaded right now".into(),
        },
        Reply::StreamError {
            turn: ScriptedTurn::text("partial"),
            after_events: 3,
            message: "overloaded right now".into(),
        },
    ]);
    let (turn, _) = run(&client(&server, WireProtocol::OpenAiChat, false));
    let err = turn.unwrap_err();
    assert!(err.to_string().contains("overloaded right now"), "{err}");
}

#[test]
fn a_refused_key_is_an_authentication_error_without_detail() {
    let server = ModelServer::start_with(
        [Reply::text("unused")],
        rho_e2e::model_server::ModelServerOptions {
            required_api_key: Some("another-key".into()),
            record_to: None,
        },
    );
    let (turn, _) = run(&client(&server, WireProtocol::OpenAiChat, false));
    let err = turn.unwrap_err();
    assert!(err.is_authentication());
    assert!(!err.to_string().contains(KEY));
    assert_eq!(server.model_requests().len(), 1, "401 is not retried");
}

#[test]
fn an_unreachable_host_is_a_network_error_naming_the_url() {
    let server = ModelServer::start([]);
    let c = client(&server, WireProtocol::OpenAiChat, false);
    drop(server);
    let (turn, _) = run(&c);
    let err = turn.unwrap_err();
    assert!(matches!(err, ProviderError::Network { .. }), "{err}");
    assert!(err.to_string().contains("/v1/chat/completions"), "{err}");
}
