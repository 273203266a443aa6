//! Agent runtime benchmark (prints figures, never fails):
//!
//! 1. host overhead of one tool round trip with a model that answers at once: the time of a
//!    turn with N tool calls minus the same turn's model requests measured alone, per call;
//! 2. time from the scripted server flushing the first text token to the loop handing it to
//!    the printer (and the printer writing it);
//! 3. resident memory of a 200-turn session.
//!
//! Goals (from the issue): ≤ 2 ms host overhead per tool round trip, ≤ 5 ms to print the
//! first token after it arrives. Run with `cargo bench -p rho --bench runtime`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rho::runtime::agent_loop::{LoopEvent, Session, SessionLimits, ToolHost, ToolOutcome};
use rho::runtime::provider::retry::RetryPolicy;
use rho::runtime::provider::{
    Endpoint, ModelChoice, ModelClient, ToolCall, ToolSpec, WireProtocol, http_client,
};
use rho::runtime::transcript::Transcript;
use rho::workflow::exec::CancelToken;
use rho_e2e::model_server::{ModelServer, Reply, ScriptedTurn};
use serde_json::json;

struct NoopTool;

impl ToolHost for NoopTool {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "noop".into(),
            description: "does nothing".into(),
            input_schema: json!({"type": "object"}),
        }]
    }

    fn call(&self, _call: &ToolCall, _cancel: &CancelToken) -> ToolOutcome {
        ToolOutcome {
            content: "ok".into(),
            is_error: false,
        }
    }
}

fn client(server: &ModelServer, protocol: WireProtocol) -> ModelClient {
    ModelClient::new(
        ModelChoice {
            endpoint: Endpoint {
                provider: "bench".into(),
                protocol,
                base_url: format!("{}/v1", server.base_url()),
                key: None,
                first_party: false,
            },
            model: "bench".into(),
            reasoning: None,
        },
        http_client().expect("http client"),
    )
    .with_retry(RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    })
}

fn session(server: &ModelServer, dir: &std::path::Path, max_steps: u32) -> Session {
    let transcript = Transcript::create(dir).expect("transcript");
    Session::start(
        "bench".into(),
        client(server, WireProtocol::OpenAiChat),
        Arc::new(NoopTool),
        "system".into(),
        SessionLimits {
            max_steps,
            ..SessionLimits::default()
        },
        transcript,
        json!({}),
    )
    .expect("session")
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn tool_round_trip(rt: &tokio::runtime::Runtime) {
    const CALLS: u32 = 200;
    let tmp = tempfile::tempdir().expect("tempdir");
    // Turn A: CALLS tool round trips, then an answer.
    let mut script: Vec<Reply> = (0..CALLS)
        .map(|_| Reply::tool_call("noop", &json!({})))
        .collect();
    script.push(Reply::text("done"));
    let server = ModelServer::start(script);
    let mut s = session(&server, &tmp.path().join("a"), CALLS + 1);
    let cancel = CancelToken::new();
    let started = Instant::now();
    let end = rt.block_on(s.run_turn("go", &cancel, &mut |_| {}));
    let with_tools = started.elapsed();
    assert!(matches!(
        end,
        rho::runtime::agent_loop::TurnEnd::Completed { .. }
    ));

    // Baseline: the same number of model requests, each answered with text at once.
    let server = ModelServer::start((0..=CALLS).map(|_| Reply::text("done")));
    let mut s = session(&server, &tmp.path().join("b"), 1);
    let started = Instant::now();
    for _ in 0..=CALLS {
        let _ = rt.block_on(s.run_turn("go", &cancel, &mut |_| {}));
    }
    let requests_only = started.elapsed();
    let per_call = with_tools.saturating_sub(requests_only) / CALLS;
    println!(
        "tool round trip: {CALLS} calls in {:.1} ms; {} model requests alone {:.1} ms",
        with_tools.as_secs_f64() * 1e3,
        CALLS + 1,
        requests_only.as_secs_f64() * 1e3
    );
    println!(
        "  host overhead per tool round trip: {:.3} ms (goal <= 2 ms, ratio {:.2})",
        per_call.as_secs_f64() * 1e3,
        per_call.as_secs_f64() * 1e3 / 2.0
    );
    println!(
        "  whole round trip (model request + tool + result): {:.3} ms",
        (with_tools / CALLS).as_secs_f64() * 1e3
    );
}

fn first_token(rt: &tokio::runtime::Runtime) {
    const RUNS: usize = 50;
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = ModelServer::start((0..RUNS).map(|_| {
        Reply::Turn(
            ScriptedTurn::text("hello world, streamed").with_chunk_delay(Duration::from_millis(2)),
        )
    }));
    let mut s = session(&server, tmp.path(), 1);
    let cancel = CancelToken::new();
    let mut printed: Vec<Instant> = Vec::new();
    for _ in 0..RUNS {
        let mut first = None;
        let mut sink = std::io::sink();
        let _ = rt.block_on(s.run_turn("go", &cancel, &mut |e| {
            if let LoopEvent::TextDelta { text, .. } = e {
                let _ = sink.write_all(text.as_bytes());
                let _ = sink.flush();
                if first.is_none() {
                    first = Some(Instant::now());
                }
            }
        }));
        printed.push(first.expect("a token was printed"));
    }
    let written = server.written_events();
    let mut latencies: Vec<f64> = Vec::new();
    for (i, at) in printed.iter().enumerate() {
        let sent = written
            .iter()
            .find(|w| w.request == i as u64 && w.kind == "chunk:content")
            .map(|w| w.at);
        if let Some(sent) = sent {
            latencies.push(at.saturating_duration_since(sent).as_secs_f64() * 1e3);
        }
    }
    latencies.sort_by(f64::total_cmp);
    let median = latencies[latencies.len() / 2];
    let p95 = latencies[latencies.len() * 95 / 100];
    println!(
        "first streamed token: server flush -> printed, median {median:.3} ms, p95 {p95:.3} ms \
         over {} runs (goal <= 5 ms, ratio {:.2})",
        latencies.len(),
        median / 5.0
    );
}

fn memory(rt: &tokio::runtime::Runtime) {
    const TURNS: usize = 200;
    let tmp = tempfile::tempdir().expect("tempdir");
    let answer = "A paragraph of a typical answer, about a hundred and twenty bytes long, \
                  repeated for every one of the turns.";
    let server = ModelServer::start((0..TURNS).map(|_| Reply::text(answer)));
    let mut s = session(&server, tmp.path(), 1);
    let cancel = CancelToken::new();
    let before = rss_kib();
    for _ in 0..TURNS {
        let _ = rt.block_on(s.run_turn("next question, please", &cancel, &mut |_| {}));
    }
    server.clear_records();
    let after = rss_kib();
    println!(
        "200-turn session: resident {after} KiB ({} KiB more than before the turns), {} messages",
        after.saturating_sub(before),
        s.messages().len()
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    tool_round_trip(&rt);
    first_token(&rt);
    memory(&rt);
}
