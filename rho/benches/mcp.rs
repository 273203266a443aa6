//! Benchmark (not a test): the round-trip time of a `workflow` `status` call over MCP on a
//! finished 1,000-node run. A 1,000-node run is made with `rho workflow run FILE --yes`, then
//! `rho mcp` is started as an MCP client would start it, initialized over raw JSON-RPC lines,
//! and asked for the run's status `RHO_BENCH_CALLS` times (default 200); the figures are the
//! median, the 90th percentile and the best round trip, and the ratio of the median to the
//! 5 ms goal. The server keeps the last run state it decoded, so the first status call of a
//! session (which decodes `state.json`) is also timed, in 10 fresh sessions. A `tools/list`
//! round trip is printed for comparison (no store access). Never fails on a figure.
//!
//! Run with `cargo bench --workspace --bench mcp` after `cargo build --release --workspace`;
//! `RHO_BENCH_BIN_DIR` points at other binaries. Without release binaries it times the
//! binaries of the profile it was built in (`--profile dev`: `target/debug`) and says so.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RHO_BENCH_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/mcp-xxxx
    let profile = exe
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let release = profile
        .parent()
        .map(|t| t.join("release"))
        .unwrap_or_default();
    if release.join("rho").exists() && release.join("rho-planner-worker").exists() {
        release
    } else {
        println!(
            "note: no release binaries; timing the binaries in {} (not release figures)",
            profile.display()
        );
        profile
    }
}

fn workflow(n: usize) -> String {
    let nodes: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "command(name = \"n{i:04}\", argv = [\"true\"], cwd = \".\", timeout_seconds = 60, max_output_bytes = 1024)"
            )
        })
        .collect();
    format!(
        "def build(inputs):\n    return workflow(name = \"bench\", nodes = [{}])\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
        nodes.join(",\n        ")
    )
}

struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Session {
    fn start(bins: &Path, home: &Path, ws: &Path) -> Self {
        let mut child = Command::new(bins.join("rho"))
            .arg("mcp")
            .current_dir(ws)
            .env_clear()
            .env("RHO_HOME", home)
            .env("HOME", home.parent().unwrap())
            .env("PATH", "/usr/bin:/bin")
            .env("RHO_PLANNER_WORKER", bins.join("rho-planner-worker"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start rho mcp");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut session = Session {
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        session.request(
            "initialize",
            &json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "rho-bench", "version": "0"}
            }),
        );
        session.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        session
    }

    fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends one request and returns its result, skipping notifications.
    fn request(&mut self, method: &str, params: &Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "rho mcp exited"
            );
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == json!(id) {
                assert!(message.get("error").is_none(), "{message}");
                return message["result"].clone();
            }
        }
    }

    fn timed(&mut self, calls: usize, method: &str, params: &Value) -> Vec<Duration> {
        let mut times = Vec::with_capacity(calls);
        for _ in 0..calls {
            let started = Instant::now();
            let result = self.request(method, params);
            times.push(started.elapsed());
            assert_ne!(result["isError"], json!(true), "{result}");
        }
        times.sort();
        times
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Closing stdin ends the server.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn report(label: &str, times: &[Duration]) -> f64 {
    let median = times[times.len() / 2];
    let p90 = times[times.len() * 9 / 10];
    println!(
        "{label}: median {:.2} ms, p90 {:.2} ms, best {:.2} ms over {} calls",
        ms(median),
        ms(p90),
        ms(times[0]),
        times.len()
    );
    ms(median)
}

fn main() {
    let bins = bin_dir();
    if !bins.join("rho").is_file() {
        println!(
            "mcp bench: {} has no rho binary; build it (cargo build --release -p rho -p \
             rho-planner-worker) or set RHO_BENCH_BIN_DIR",
            bins.display()
        );
        return;
    }
    let calls: usize = std::env::var("RHO_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
        .max(10);
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    std::fs::write(ws.join("bench.star"), workflow(1000)).unwrap();
    let started = Instant::now();
    let out = Command::new(bins.join("rho"))
        .args([
            "workflow",
            "run",
            "bench.star",
            "--yes",
            "--output",
            "jsonl",
        ])
        .current_dir(&ws)
        .env_clear()
        .env("RHO_HOME", &home)
        .env("HOME", dir.path())
        .env("PATH", "/usr/bin:/bin")
        .env("RHO_PLANNER_WORKER", bins.join("rho-planner-worker"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_id = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .and_then(|v| v["run_id"].as_str().map(str::to_owned))
        })
        .unwrap();
    println!(
        "mcp bench: 1,000-node run {run_id} made in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let status_call =
        json!({"name": "workflow", "arguments": {"action": "status", "run_id": run_id}});
    // A server keeps the last run state it decoded: the first status call of a session
    // decodes state.json, later ones for the same bytes do not. Both are reported.
    let mut first = Vec::new();
    for _ in 0..10 {
        let mut fresh = Session::start(&bins, &home, &ws);
        first.extend(fresh.timed(1, "tools/call", &status_call));
    }
    first.sort();
    let mut session = Session::start(&bins, &home, &ws);
    // Warm-up: the first call pays for page-cache misses.
    session.timed(3, "tools/call", &status_call);
    let list = session.timed(calls, "tools/list", &json!({}));
    let status = session.timed(
        calls,
        "tools/call",
        &json!({"name": "workflow", "arguments": {"action": "status", "run_id": run_id}}),
    );
    report("tools/list round trip", &list);
    report(
        "first workflow status call of a session (decodes state.json)",
        &first,
    );
    let median = report("workflow status round trip (1,000 nodes)", &status);
    println!(
        "goal: status round trip <= 5 ms; median / goal = {:.2}",
        median / 5.0
    );
}
