//! Measures the per-node cost of verified execution: `verify` + `spawn` + `wait` of a
//! trivial command (default `/usr/bin/true`), one at a time, as a mutating node runs.
//!
//! `cargo run -p rho --release --example exec_launch_cost -- [ITERATIONS] [PATH]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rho::workflow::exec::{self, CommandExit, CommandSpec};
use rho_ipc::program::{FileIdentity, FileLocation, FrozenDirectory, FrozenExecutable};

fn freeze(path: &Path) -> FrozenExecutable {
    let canonical = path.canonicalize().unwrap();
    let bytes = std::fs::read(&canonical).unwrap();
    let meta = std::fs::metadata(&canonical).unwrap();
    FrozenExecutable {
        file: FileIdentity {
            location: FileLocation::Absolute {
                path: canonical.to_string_lossy().into_owned(),
                device: meta.dev(),
                inode: meta.ino(),
            },
            size: bytes.len() as u64,
            sha256: rho_ipc::digest::sha256_tagged(&bytes),
        },
        interpreter: None,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let iterations: usize = args.next().map_or(1000, |n| n.parse().unwrap());
    let program_path = PathBuf::from(args.next().unwrap_or_else(|| "/usr/bin/true".to_owned()));
    let workspace = tempfile::tempdir().unwrap();
    let root = workspace.path().canonicalize().unwrap();
    let artifacts = root.join("artifacts");
    std::fs::create_dir(&artifacts).unwrap();
    let program = freeze(&program_path);
    let cwd = FrozenDirectory {
        path: ".".to_owned(),
    };
    let env: Vec<(OsString, OsString)> = vec![("PATH".into(), "/usr/bin:/bin".into())];

    let mut verify_times = Vec::with_capacity(iterations);
    let mut totals = Vec::with_capacity(iterations);
    let mut spawn_times = Vec::with_capacity(iterations);
    let all = Instant::now();
    for i in 0..iterations {
        let start = Instant::now();
        let launch = exec::verify(&root, &program, &cwd).unwrap();
        let verified = start.elapsed();
        let spec = CommandSpec::new(
            vec![OsString::from("true")],
            env.clone(),
            Duration::from_mins(1),
            1 << 20,
            artifacts.join(format!("{i}.out")),
            artifacts.join(format!("{i}.err")),
        );
        let before_spawn = Instant::now();
        let running = exec::spawn(launch, spec).unwrap();
        spawn_times.push(before_spawn.elapsed());
        let outcome = running.wait();
        assert_eq!(outcome.exit, CommandExit::Code(0));
        verify_times.push(verified);
        totals.push(start.elapsed());
    }
    let wall = all.elapsed();
    let first_verify = verify_times[0];
    verify_times.sort();
    totals.sort();
    spawn_times.sort();
    println!(
        "program: {}  iterations: {iterations}",
        program_path.display()
    );
    println!(
        "verify+spawn+wait: mean {:?}  p50 {:?}  p95 {:?}  (first verify, uncached: {:?})",
        wall / u32::try_from(iterations).unwrap(),
        percentile(&totals, 0.5),
        percentile(&totals, 0.95),
        first_verify,
    );
    println!(
        "verify alone (sealed copy cached): p50 {:?}  p95 {:?}",
        percentile(&verify_times, 0.5),
        percentile(&verify_times, 0.95),
    );
    println!(
        "spawn alone (fork to successful execveat): p50 {:?}  p95 {:?}",
        percentile(&spawn_times, 0.5),
        percentile(&spawn_times, 0.95),
    );
    println!("total for {iterations}: {wall:?}");
}
