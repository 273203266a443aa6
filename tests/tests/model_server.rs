//! The loopback model server's own contract, over raw HTTP: the exact SSE framing, the
//! recorded requests, the protocol-specific quirks it can play, and its refusal to invent a
//! turn when the script is exhausted.

use std::io::{Read, Write};
use std::net::TcpStream;

use rho_e2e::model_server::{ModelServer, ModelServerOptions, Reply, ScriptedTurn};
use serde_json::json;

/// Posts `body` and returns the whole raw response (the server closes each connection).
fn post(server: &ModelServer, path: &str, headers: &[&str], body: &serde_json::Value) -> String {
    let mut conn = TcpStream::connect(server.addr()).expect("connect");
    let body = body.to_string();
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request.push_str(&body);
    conn.write_all(request.as_bytes()).expect("write");
    let mut response = String::new();
    conn.read_to_string(&mut response).expect("read");
    response
}

/// The `data:` payloads of an SSE response, chunk framing removed.
fn data_lines(response: &str) -> Vec<String> {
    response
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn anthropic_stream_has_the_documented_event_sequence() {
    let server = ModelServer::start([Reply::Turn(
        ScriptedTurn::text("hi").with_tool_call("grep", &json!({"pattern": "fn main"})),
    )]);
    let response = post(
        &server,
        "/v1/messages?beta=true",
        &["x-api-key: k"],
        &json!({"model": "m", "stream": true, "messages": []}),
    );
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    assert!(response.contains("transfer-encoding: chunked"));
    let events: Vec<&str> = response
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(
        events,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let partial: String = data_lines(&response)
        .iter()
        .filter_map(|d| {
            let v: serde_json::Value = serde_json::from_str(d).ok()?;
            v.pointer("/delta/partial_json")?
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&partial).expect("arguments"),
        json!({"pattern": "fn main"})
    );
    assert!(response.contains(r#""stop_reason":"tool_use""#));
    assert!(
        response.ends_with("0\r\n\r\n"),
        "chunked body must end properly"
    );
}

#[test]
fn openai_stream_can_omit_ids_and_use_sparse_indexes() {
    let server = ModelServer::start([Reply::Turn(
        ScriptedTurn::empty()
            .with_raw_tool_call(None, "read_file", r#"{"path":"a"}"#, Some(4))
            .with_raw_tool_call(None, "glob", r#"{"pattern":"*.rs"}"#, Some(9))
            .without_ids(),
    )]);
    let response = post(
        &server,
        "/v1/chat/completions",
        &[],
        &json!({"model": "m", "stream": true, "messages": []}),
    );
    let data = data_lines(&response);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert!(!response.contains(r#""id":"call_"#), "{response}");
    assert!(response.contains(r#""index":4"#) && response.contains(r#""index":9"#));
    assert!(response.contains(r#""finish_reason":"tool_calls""#));
}

#[test]
fn exhausted_script_is_an_error_not_an_invented_turn() {
    let server = ModelServer::start([]);
    let response = post(
        &server,
        "/v1/messages",
        &[],
        &json!({"model": "m", "messages": []}),
    );
    assert!(response.starts_with("HTTP/1.1 500"), "{response}");
    assert!(response.contains("script is exhausted"));
    assert_eq!(server.model_requests().len(), 1);
}

#[test]
fn required_key_is_checked_and_requests_are_recorded() {
    let server = ModelServer::start_with(
        [Reply::text("ok")],
        ModelServerOptions {
            required_api_key: Some("right".to_owned()),
            record_to: None,
        },
    );
    let wrong = post(
        &server,
        "/v1/chat/completions",
        &["authorization: Bearer wrong"],
        &json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
    );
    assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
    assert_eq!(server.remaining(), 1, "a refused request plays no turn");
    let right = post(
        &server,
        "/v1/chat/completions",
        &["authorization: Bearer right"],
        &json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
    );
    assert!(right.contains(r#""content":"ok""#), "{right}");
    let recorded = server.requests();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[1].json()["messages"][0]["content"], "x");
}

#[test]
fn rate_limit_carries_retry_after() {
    let server = ModelServer::start([Reply::rate_limited(3)]);
    let response = post(&server, "/v1/messages", &[], &json!({"model": "m"}));
    assert!(response.starts_with("HTTP/1.1 429"), "{response}");
    assert!(response.contains("retry-after: 3"));
    assert!(response.contains("rate_limit_error"));
}
