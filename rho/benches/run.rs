//! Benchmark (not a test): 1,000 independent trivial command nodes and a 1,000-node chain
//! through `rho workflow run FILE --yes`, against the same DAGs under `ninja -j1`; prints the
//! ratio, the per-node cost at 200 vs 1,000 nodes, and the time of `status --output json` on
//! the finished 1,000-node run. `RHO_CONTAINMENT` is passed to `rho` (`subreaper` measures
//! the containment fallback). Run with `cargo bench -p rho --bench run` after building the
//! release binaries (`cargo build --release -p rho -p rho-planner-worker`).
//!
//! Every figure is the median of `RHO_BENCH_REPS` runs (default 5), rho and ninja alike, with
//! the repetitions interleaved so load from other processes falls on both; the rho/ninja
//! ratio is the median of the per-repetition (paired) ratios, so a burst of load during one
//! repetition weighs on one pair, not on one side. Every temporary
//! directory lives until the end: on ext4 without a journal, inode allocation skips inodes
//! freed in the last ~30 s one by one, so deleting a finished 1,000-node run right before
//! the next timed run made that run pay for the previous one's cleanup.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

mod shared;
use shared::children_cpu;

use std::fmt::Write as _;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where `rho` and `rho-planner-worker` are: `RHO_BENCH_BIN_DIR` when set (to compare two
/// builds with the same harness), else this build's `target/release`.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RHO_BENCH_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/run-xxxx -> target/release
    let target = exe
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let release = target.join("release");
    if release.join("rho").exists() {
        return release;
    }
    // `cargo bench --profile dev`: the profile's own binaries, one level above deps/.
    exe.parent()
        .and_then(Path::parent)
        .map_or(release, Path::to_path_buf)
}

fn workflow(n: usize, chain: bool) -> String {
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let needs = if chain && i > 0 {
            format!(", needs = [\"n{:04}\"]", i - 1)
        } else {
            String::new()
        };
        nodes.push(format!(
            "command(name = \"n{i:04}\", argv = [\"true\"], cwd = \".\", timeout_seconds = 60, max_output_bytes = 1024{needs})"
        ));
    }
    format!(
        "def build(inputs):\n    return workflow(name = \"bench\", nodes = [{}])\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
        nodes.join(",\n        ")
    )
}

fn ninja_file(n: usize, chain: bool) -> String {
    // One process per edge, like the rho nodes (`true`), as in the reference figures.
    let mut out = String::from("rule t\n  command = true\n");
    for i in 0..n {
        if chain && i > 0 {
            let _ = writeln!(out, "build o{i}: t | o{}", i - 1);
        } else {
            let _ = writeln!(out, "build o{i}: t");
        }
    }
    out
}

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("ws")).expect("ws");
        std::fs::create_dir(dir.path().join("home")).expect("home");
        Setup { dir }
    }
    fn ws(&self) -> PathBuf {
        self.dir
            .path()
            .join("ws")
            .canonicalize()
            .expect("canonical")
    }
    fn rho(&self, args: &[&str]) -> (Duration, std::process::Output) {
        let bins = bin_dir();
        let start = Instant::now();
        let mut command = Command::new(bins.join("rho"));
        command
            .args(args)
            .current_dir(self.ws())
            .env_clear()
            .env("RHO_HOME", self.dir.path().join("home"))
            .env("PATH", "/usr/bin:/bin")
            .env("RHO_PLANNER_WORKER", bins.join("rho-planner-worker"));
        // `RHO_CONTAINMENT=subreaper` measures the fallback where cgroups are delegated.
        if let Some(mode) = std::env::var_os("RHO_CONTAINMENT") {
            command.env("RHO_CONTAINMENT", mode);
        }
        let out = command.output().expect("rho runs");
        (start.elapsed(), out)
    }
}

/// Plans (untimed), then times `run PLAN --yes`. Returns (seconds, run id, its setup); the
/// CPU seconds the run used (rho and its nodes) are added to `cpu`.
fn time_rho(n: usize, chain: bool, cpu: &mut Vec<f64>) -> (f64, String, Setup) {
    let setup = Setup::new();
    std::fs::write(setup.ws().join("wf.star"), workflow(n, chain)).expect("write");
    let (_, plan) = setup.rho(&["workflow", "plan", "wf.star"]);
    assert!(
        plan.status.success(),
        "plan failed: {}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let plan_id = String::from_utf8_lossy(&plan.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("plan_id: "))
        .expect("plan id")
        .to_owned();
    let before = children_cpu();
    let (elapsed, out) = setup.rho(&["workflow", "run", &plan_id, "--yes"]);
    cpu.push(children_cpu() - before);
    assert!(
        out.status.success(),
        "run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_id = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("run_id: "))
        .expect("run id")
        .to_owned();
    (elapsed.as_secs_f64(), run_id, setup)
}

/// Times `ninja -j1` on the same DAG; the directory is returned so it outlives the timing.
fn ninja_available() -> bool {
    Command::new("ninja")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Installs ninja from the distribution's packages (the comparison the issue asks for).
fn install_ninja() -> bool {
    println!("ninja not found: installing ninja-build with apt-get");
    let quiet = |cmd: &mut Command| cmd.status().is_ok_and(|s| s.success());
    let _ = quiet(Command::new("apt-get").args(["update", "-qq"]));
    quiet(Command::new("apt-get").args(["install", "-y", "-qq", "ninja-build"]))
        && ninja_available()
}

fn time_ninja(n: usize, chain: bool, cpu: &mut Vec<f64>) -> Option<(f64, tempfile::TempDir)> {
    let dir = tempfile::tempdir().ok()?;
    std::fs::write(dir.path().join("build.ninja"), ninja_file(n, chain)).ok()?;
    let before = children_cpu();
    let start = Instant::now();
    let out = Command::new("ninja")
        .arg("-j1")
        .arg("-C")
        .arg(dir.path())
        .output()
        .ok()?;
    let elapsed = start.elapsed().as_secs_f64();
    cpu.push(children_cpu() - before);
    out.status.success().then_some((elapsed, dir))
}

/// The median of some timings (the mean of the middle two for an even count).
fn median(times: &[f64]) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        f64::midpoint(sorted[n / 2 - 1], sorted[n / 2])
    }
}

fn main() {
    if !bin_dir().join("rho").exists() || !bin_dir().join("rho-planner-worker").exists() {
        println!(
            "skipping: build release binaries first: cargo build --release -p rho -p rho-planner-worker"
        );
        return;
    }
    println!("binaries: {}", bin_dir().display());
    let ninja = ninja_available() || install_ninja();
    if !ninja {
        println!(
            "ninja is not installed and could not be installed from the distribution \
             (`apt-get install -y ninja-build`); rho figures only"
        );
    }
    let reps: usize = std::env::var("RHO_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(5);
    // Kept to the end (see the module note on freed inodes).
    let mut keep_rho: Vec<Setup> = Vec::new();
    let mut keep_ninja: Vec<tempfile::TempDir> = Vec::new();
    for (label, chain) in [("independent", false), ("chain", true)] {
        let (mut rho_1000, mut rho_200, mut ninja_1000) = (Vec::new(), Vec::new(), Vec::new());
        // CPU seconds of each 1000-node run (rho with its nodes; ninja with its commands).
        let (mut rho_cpu, mut ninja_cpu, mut scratch_cpu) = (Vec::new(), Vec::new(), Vec::new());
        // (rho, ninja) of the same repetition.
        let mut pairs: Vec<f64> = Vec::new();
        let mut status_run: Option<(String, usize)> = None;
        for _ in 0..reps {
            let (t, run_id, setup) = time_rho(1000, chain, &mut rho_cpu);
            rho_1000.push(t);
            status_run.get_or_insert((run_id, keep_rho.len()));
            keep_rho.push(setup);
            let (t, _, setup) = time_rho(200, chain, &mut scratch_cpu);
            rho_200.push(t);
            keep_rho.push(setup);
            if ninja && let Some((n, dir)) = time_ninja(1000, chain, &mut ninja_cpu) {
                ninja_1000.push(n);
                pairs.push(rho_1000[rho_1000.len() - 1] / n);
                keep_ninja.push(dir);
            }
        }
        let (r1000, r200) = (median(&rho_1000), median(&rho_200));
        println!(
            "{label}: rho 1000 nodes {r1000:.2}s ({:.2} ms/node); 200 nodes {r200:.2}s ({:.2} ms/node); per-node ratio 1000/200 = {:.2} (median of {reps})",
            r1000 / 1000.0 * 1000.0,
            r200 / 200.0 * 1000.0,
            (r1000 / 1000.0) / (r200 / 200.0)
        );
        if !ninja_1000.is_empty() {
            let n = median(&ninja_1000);
            println!(
                "{label}: ninja -j1 1000 nodes {n:.2}s (median); rho/ninja = {:.2} (median of \
                 {} paired ratios; goal 1.2)",
                median(&pairs),
                pairs.len()
            );
            // Wall time on a shared machine includes waiting for a core; CPU time is the
            // work itself (the nodes' own processes included on both sides).
            let (rc, nc) = (median(&rho_cpu), median(&ninja_cpu));
            println!(
                "{label}: CPU per node rho {:.3} ms, ninja {:.3} ms (medians); rho/ninja CPU = {:.2}",
                rc,
                nc,
                rc / nc
            );
        }
        if !chain && let Some((run_id, index)) = status_run {
            let setup = &keep_rho[index];
            for output in ["json", "text"] {
                let mut times = Vec::new();
                for _ in 0..5 {
                    let (t, out) = setup.rho(&["workflow", "status", &run_id, "--output", output]);
                    assert!(out.status.success());
                    times.push(t.as_secs_f64());
                }
                println!(
                    "status --output {output} on the 1000-node run: {:.1} ms (median of 5; goal 5 ms)",
                    median(&times) * 1000.0
                );
            }
        }
    }
}
