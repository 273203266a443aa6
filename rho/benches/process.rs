//! Background process manager benchmark (not a test; prints figures, never fails):
//!
//! - poll latency of new output: a child prints the wall clock every 10 ms and a poller
//!   blocked in `poll(wait_seconds = 1)` measures how long each line took to reach it;
//! - peak memory while a child writes 100 MB as fast as it can (resident set above the
//!   baseline, sampled, and the kernel's high-water mark after a reset), and the rate;
//! - start-to-first-snapshot time of a trivial command.
//!
//! ```sh
//! cargo bench -p rho --bench process
//! ```
//!
//! Goals: new output visible within 10 ms (median and 95th percentile); memory at most
//! 2 MiB above the 1 MiB retention limit.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rho::process::{ProcessConfig, ProcessLimits, ProcessManager, Stream};

const MIB: f64 = 1024.0 * 1024.0;

fn manager(root: &std::path::Path) -> ProcessManager {
    ProcessManager::new(ProcessConfig::new(root, &[])).unwrap()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index]
}

/// A field of `/proc/self/status` in kB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn poll_latency(manager: &ProcessManager) {
    const LINES: usize = 300;
    let started = manager
        .start("while :; do date +%s%N; sleep 0.01; done", None)
        .unwrap();
    let mut cursor = Some(started.next_cursor);
    let mut latencies_ms = Vec::with_capacity(LINES);
    let mut pending = String::new();
    while latencies_ms.len() < LINES {
        let snap = manager
            .poll(
                &started.process_id,
                cursor,
                Duration::from_secs(1),
                usize::MAX,
            )
            .unwrap();
        let now_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        cursor = Some(snap.next_cursor);
        for chunk in snap.chunks.iter().filter(|c| c.stream == Stream::Stdout) {
            pending.push_str(&chunk.text);
        }
        while let Some((line, rest)) = pending.split_once('\n') {
            if let Ok(written_ns) = line.trim().parse::<u128>() {
                latencies_ms.push(now_ns.saturating_sub(written_ns) as f64 / 1e6);
            }
            pending = rest.to_owned();
        }
    }
    manager.stop(&started.process_id).unwrap();
    latencies_ms.sort_by(f64::total_cmp);
    let median = percentile(&latencies_ms, 0.5);
    let p95 = percentile(&latencies_ms, 0.95);
    println!(
        "poll latency of new output ({LINES} lines, one per 10 ms): median {median:.3} ms, \
         p95 {p95:.3} ms, max {:.3} ms; goal <= 10 ms: median {:.2}x, p95 {:.2}x of the goal",
        latencies_ms.last().unwrap(),
        median / 10.0,
        p95 / 10.0
    );
}

fn memory_of_100_mb(manager: &ProcessManager) {
    let limit = ProcessLimits::default().max_output_bytes as f64;
    // Reset the high-water mark so it covers only this measurement.
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let baseline = status_kib("VmRSS:");
    let peak = Arc::new(AtomicU64::new(baseline));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(status_kib("VmRSS:"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let begin = Instant::now();
    let started = manager
        .start("head -c 100000000 /dev/zero | tr '\\0' x", None)
        .unwrap();
    let mut cursor = None;
    loop {
        // From the newest cursor, so each wait ends on new output or on the exit.
        let snap = manager
            .poll(&started.process_id, cursor, Duration::from_secs(30), 0)
            .unwrap();
        if snap.state.is_terminal() {
            break;
        }
        cursor = Some(snap.available_cursor);
    }
    let elapsed = begin.elapsed();
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let sampled = peak.load(Ordering::Relaxed).saturating_sub(baseline) as f64 * 1024.0;
    let hwm = status_kib("VmHWM:").saturating_sub(baseline) as f64 * 1024.0;
    let snap = manager
        .poll(&started.process_id, Some(0), Duration::ZERO, usize::MAX)
        .unwrap();
    let retained: usize = snap.chunks.iter().map(|c| c.text.len()).sum();
    println!(
        "100 MB of output: {:.2} s ({:.0} MB/s); retained {:.3} MiB in {} chunks, dropped {} bytes",
        elapsed.as_secs_f64(),
        100.0 / elapsed.as_secs_f64(),
        retained as f64 / MIB,
        snap.chunks.len(),
        snap.dropped_bytes
    );
    println!(
        "peak resident memory above baseline: sampled {:.3} MiB{}; goal <= retention {:.0} MiB + 2 MiB: \
         {:.3} MiB above the retention limit ({:.2}x of the 2 MiB allowance)",
        sampled / MIB,
        if reset {
            format!(", high-water mark {:.3} MiB", hwm / MIB)
        } else {
            String::new()
        },
        limit / MIB,
        (sampled.max(hwm) - limit) / MIB,
        (sampled.max(hwm) - limit) / (2.0 * MIB)
    );
}

fn start_cost(manager: &ProcessManager) {
    let mut samples = Vec::new();
    for _ in 0..30 {
        let begin = Instant::now();
        manager.start("true", None).unwrap();
        samples.push(begin.elapsed().as_secs_f64() * 1000.0);
    }
    samples.sort_by(f64::total_cmp);
    println!(
        "start of a trivial command until its exited snapshot: median {:.3} ms, p95 {:.3} ms",
        percentile(&samples, 0.5),
        percentile(&samples, 0.95)
    );
}

fn main() {
    let dir = std::env::temp_dir();
    let manager = manager(&dir);
    poll_latency(&manager);
    memory_of_100_mb(&manager);
    start_cost(&manager);
}
