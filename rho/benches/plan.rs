//! Planning benchmark (not a test): for a 3-, 200- and 1,000-node workflow, the median wall
//! time of a whole `rho workflow validate` and `rho workflow plan` process, and the planner
//! worker's spawn-plus-hardening overhead (time from spawn to its hardening report).
//!
//! ```sh
//! cargo build --release -p rho-planner-worker && cargo bench -p rho --bench plan
//! ```
//!
//! Goals: hardened worker ready in under 5 ms (median); `validate` of 3 nodes under 10 ms;
//! `plan` of 1,000 nodes under 50 ms.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rho::workflow::plan::worker::{Conversation, WorkerCommand};
use rho_ipc::budget::Budgets;

const RUNS: usize = 21;

fn rho_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rho"))
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

fn time_rho(ws: &Path, home: &Path, args: &[&str]) -> Duration {
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let started = Instant::now();
        let output = Command::new(rho_bin())
            .args(args)
            .current_dir(ws)
            .env_clear()
            .env("RHO_HOME", home)
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        samples.push(started.elapsed());
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    median(samples)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let worker = rho_bin().with_file_name("rho-planner-worker");
    if !worker.is_file() {
        eprintln!(
            "{} is missing: build it with the same profile first (cargo build --release -p rho-planner-worker)",
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
