//! Planning benchmark (not a test): for a 3-, 200- and 1,000-node workflow, the median wall
//! time of a whole `rho workflow validate` and `rho workflow plan` process, and the planner
//! worker's spawn-plus-hardening overhead (time from spawn to its hardening report).
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench --workspace --bench plan
//! ```
//!
//! Binaries: `RHO_BENCH_BIN_DIR` when set (release binaries built elsewhere, measured by a
//! harness built in dev), else this build's own. Goals: hardened worker ready in under 5 ms
//! (median); `validate` of 3 nodes under 10 ms; `plan` of 1,000 nodes under 50 ms. The
//! 3-node `validate` is set against `rho --version`, the cost of starting the host binary
//! alone, in interleaved rounds so that load from other processes falls on both; the
//! difference is the median of the per-round differences. Figures are printed, never
//! checked: a loaded machine must not fail a build.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rho::workflow::plan::worker::{Conversation, WorkerCommand};
use rho_ipc::budget::Budgets;

const RUNS: usize = 21;

fn rho_bin() -> PathBuf {
    match std::env::var_os("RHO_BENCH_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join("rho"),
        None => PathBuf::from(env!("CARGO_BIN_EXE_rho")),
    }
}

/// A workflow of `n` nodes: a chain of groups mixing commands, a shell node with a JSON
/// output, conditions and templates, so every check does real work.
fn workflow(n: usize) -> String {
    let mut out = String::from("def build(inputs):\n    nodes = []\n");
    for i in 0..n {
        let needs = if i == 0 {
            String::new()
        } else {
            format!("\"n{}\"", i - 1)
        };
        let node = match i % 4 {
            0 => format!(
                "    nodes.append(command(name = \"n{i}\", argv = [\"echo\", \"step\", \"{i}\"], needs = [{needs}], timeout_seconds = 60, max_output_bytes = 4096))\n"
            ),
            1 => format!(
                "    nodes.append(shell(name = \"n{i}\", executable = \"sh\", arguments = [\"-c\"], command = \"printf '{{\\\"ok\\\": true}}'\", needs = [{needs}], output = schema.stdout_json(schema.record({{\"ok\": schema.bool()}})), timeout_seconds = 60, max_output_bytes = 4096))\n"
            ),
            2 => format!(
                "    nodes.append(command(name = \"n{i}\", argv = [\"printf\", \"%s\", template([\"ok=\", output(\"n{}\", [\"ok\"])])], needs = [{needs}], when = condition.equals(output(\"n{}\", [\"ok\"]), True), timeout_seconds = 60, max_output_bytes = 4096))\n",
                i - 1,
                i - 1
            ),
            _ => format!(
                "    nodes.append(command(name = \"n{i}\", argv = [\"true\"], needs = [{needs}], when = condition.is_one_of(status(\"n{}\"), [\"success\", \"skipped\"]), timeout_seconds = 60, max_output_bytes = 4096))\n",
                i - 1
            ),
        };
        out.push_str(&node);
    }
    out.push_str("    return workflow(name = \"bench\", nodes = nodes)\n\nWORKFLOW = define(inputs = {}, build = build)\n");
    out
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// One whole `rho` process, timed from spawn to exit.
fn run_rho(ws: &Path, home: &Path, args: &[&str]) -> Duration {
    let started = Instant::now();
    let output = Command::new(rho_bin())
        .args(args)
        .current_dir(ws)
        .env_clear()
        .env("RHO_HOME", home)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    elapsed
}

fn time_rho(ws: &Path, home: &Path, args: &[&str]) -> Duration {
    median((0..RUNS).map(|_| run_rho(ws, home, args)).collect())
}

/// The 3-node `validate` against `rho --version`, interleaved round by round: (validate,
/// version, median of the per-round differences).
fn validate_against_start(ws: &Path, home: &Path) -> (Duration, Duration, Duration) {
    const ROUNDS: usize = 3 * RUNS;
    let mut validate = Vec::with_capacity(ROUNDS);
    let mut version = Vec::with_capacity(ROUNDS);
    let mut difference = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let v = run_rho(ws, home, &["workflow", "validate", "bench.star"]);
        let s = run_rho(ws, home, &["--version"]);
        validate.push(v);
        version.push(s);
        difference.push(v.saturating_sub(s));
    }
    (median(validate), median(version), median(difference))
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let worker = rho_bin().with_file_name("rho-planner-worker");
    if !worker.is_file() {
        eprintln!(
            "{} is missing: build the binaries first (cargo build --workspace --bins, or set RHO_BENCH_BIN_DIR)",
            worker.display()
        );
        std::process::exit(1);
    }
    let mut report = String::new();
    let _ = writeln!(
        report,
        "rho: {}\nmedian of {RUNS} runs (whole process)\n",
        rho_bin().display()
    );

    // Spawn plus hardening: spawn the worker and wait for its first frame.
    let command =
        WorkerCommand::locate(Some(worker.as_os_str()), None, &Budgets::default()).unwrap();
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let started = Instant::now();
        let (mut conversation, report) = Conversation::start(&command).unwrap();
        samples.push(started.elapsed());
        assert!(report.refused.is_none());
        conversation.shutdown();
    }
    let _ = writeln!(
        report,
        "worker spawn + hardening report: {}",
        ms(median(samples))
    );

    for n in [3, 200, 1000] {
        let ws = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        std::fs::write(ws_path.join("bench.star"), workflow(n)).unwrap();
        let home_path = home.path().join("rho");
        if n == 3 {
            let (validate, version, difference) = validate_against_start(&ws_path, &home_path);
            let goal = Duration::from_millis(10);
            let verdict = if validate <= goal {
                "goal met".to_owned()
            } else {
                format!(
                    "{:.2}x the goal",
                    validate.as_secs_f64() / goal.as_secs_f64()
                )
            };
            let _ = writeln!(
                report,
                "validate, 3 nodes: {} (goal 10 ms: {verdict}); `rho --version`: {}; \
                 validate minus --version (paired): {}",
                ms(validate),
                ms(version),
                ms(difference)
            );
        }
        let validate = time_rho(
            &ws_path,
            &home_path,
            &["workflow", "validate", "bench.star"],
        );
        let plan = time_rho(&ws_path, &home_path, &["workflow", "plan", "bench.star"]);
        let _ = writeln!(
            report,
            "{n:>5} nodes: validate {:>10}   plan {:>10}",
            ms(validate),
            ms(plan)
        );
    }
    print!("{report}");
}
