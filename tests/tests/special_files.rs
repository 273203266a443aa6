//! A FIFO where a user file belongs (configuration, hooks) is refused by type; `rho` never
//! blocks opening it. A regression would hang, so each run is killed after a generous
//! deadline and then fails the test (a guard, not a timing assertion).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rho_e2e::{Sandbox, copy_tree, stderr};

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

fn run_with_guard(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rho");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("poll rho").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rho blocked on a FIFO");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect output")
}

fn hello(sandbox: &Sandbox) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    copy_tree(&example, &sandbox.workspace);
    std::fs::create_dir_all(&sandbox.home).expect("create RHO_HOME");
}

#[test]
fn a_fifo_config_file_is_refused_without_blocking() {
    let sandbox = Sandbox::new();
    hello(&sandbox);
    mkfifo(&sandbox.home.join("config.toml"));
    let out = run_with_guard(sandbox.rho(&[
        "workflow",
        "run",
        ".rho/workflows/hello/workflow.star",
        "--yes",
    ]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("config.toml: not a regular file"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_fifo_hooks_file_is_refused_without_blocking() {
    let sandbox = Sandbox::new();
    hello(&sandbox);
    mkfifo(&sandbox.home.join("hooks.toml"));
    let out = run_with_guard(sandbox.rho(&[
        "workflow",
        "run",
        ".rho/workflows/hello/workflow.star",
        "--yes",
    ]));
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("hooks.toml: not a regular file"),
        "{}",
        stderr(&out)
    );
    let runs = sandbox.home.join("workflows/runs");
    let started = std::fs::read_dir(&runs).map(|d| d.count()).unwrap_or(0);
    assert_eq!(started, 0, "nothing may run when the hooks cannot be read");
}
