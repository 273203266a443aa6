//! End-to-end tests of the hardened worker: each runs the real binary with a cleared
//! environment and piped stdio, reads its hardening report, inspects it from outside
//! (`/proc/<pid>`) and asks it to attempt forbidden operations.
//!
//! Tests skip, with a printed reason, only when the kernel lacks Landlock, and fail instead
//! when `CI` or `RHO_REQUIRE_SANDBOX=1` is set.
#![allow(unsafe_code)]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};

use rho_ipc::frame::{read_message, write_message};
use rho_ipc::message::{
    Envelope, HardeningReport, HostMessage, ModuleResponse, PROTOCOL_VERSION, PlanRequest,
    PlanResponse, ProbeResult, ProtectionStatus, SandboxMode, SandboxProbe, WorkerMessage,
};
use rho_planner_worker::sandbox::{PROTECTIONS, landlock};

const WORKER: &str = env!("CARGO_BIN_EXE_rho-planner-worker");
const EXIT_REFUSED: i32 = 3;

/// A running worker whose hardening report has been read.
struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: ChildStdout,
    report: HardeningReport,
}

impl Worker {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(WORKER);
        command
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn the worker");
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let envelope: Envelope<WorkerMessage> =
            read_message(&mut stdout).expect("the first frame is readable");
        assert_eq!(envelope.protocol_version, PROTOCOL_VERSION);
        let WorkerMessage::Hardening(report) = envelope.message else {
            panic!(
                "first message is not the hardening report: {:?}",
                envelope.message
            );
        };
        Self {
            child,
            stdin,
            stdout,
            report,
        }
    }

    fn protection(&self, name: &str) -> &ProtectionStatus {
        self.report
            .protections
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no protection {name} in {:?}", self.report))
    }

    fn probe(mut self, probe: SandboxProbe) -> (ProbeResult, ExitStatus) {
        let mut stdin = self.stdin.take().expect("stdin is piped");
        let expected = probe.clone();
        write_message(&mut stdin, &Envelope::new(HostMessage::Probe(probe)))
            .expect("send the probe");
        let envelope: Envelope<WorkerMessage> =
            read_message(&mut self.stdout).expect("the probe answer is readable");
        let WorkerMessage::ProbeResult(result) = envelope.message else {
            panic!("expected a probe result, got {:?}", envelope.message);
        };
        assert_eq!(result.probe, expected);
        drop(stdin);
        let status = self.child.wait().expect("wait for the worker");
        (result, status)
    }

    /// Waits for a worker that must exit on its own, without being sent anything (stdin
    /// stays open, so a worker that tried to read its request would never exit).
    fn wait_without_input(mut self) -> (ExitStatus, String) {
        let status = self.child.wait().expect("wait for the worker");
        let mut stderr = String::new();
        std::io::Read::read_to_string(
            self.child.stderr.as_mut().expect("stderr is piped"),
            &mut stderr,
        )
        .expect("read stderr");
        drop(self.stdin.take());
        (status, stderr)
    }
}

/// Whether a missing kernel feature must fail the test instead of skipping it: `CI` is set
/// or `RHO_REQUIRE_SANDBOX=1` (as `.ci/run` does).
fn sandbox_required() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
        || std::env::var_os("RHO_REQUIRE_SANDBOX").is_some_and(|v| v == "1")
}

/// `true` when the kernel has the Landlock ABI a required-mode worker needs; otherwise the
/// calling test fails where the sandbox is required, and elsewhere prints loudly why it is
/// skipped.
fn landlock_available(test: &str) -> bool {
    let reason = match landlock::kernel_abi() {
        Ok(abi) if abi >= landlock::DEFAULT_MINIMUM_ABI => return true,
        Ok(abi) => format!(
            "kernel Landlock ABI {abi} is below the required {}",
            landlock::DEFAULT_MINIMUM_ABI
        ),
        Err(error) => format!("the kernel has no Landlock ({error})"),
    };
    assert!(
        !sandbox_required(),
        "{test}: {reason}, and CI or RHO_REQUIRE_SANDBOX=1 requires it"
    );
    eprintln!("SKIPPING {test}: {reason}; set CI or RHO_REQUIRE_SANDBOX=1 to make this a failure");
    false
}

fn hardened_worker(test: &str) -> Option<Worker> {
    landlock_available(test).then(|| Worker::start(&[], &[]))
}

fn assert_denied(result: &ProbeResult, allowed: &[i32]) {
    assert!(
        !result.succeeded,
        "{:?} succeeded inside the sandbox",
        result.probe
    );
    let errno = result.errno.expect("a failed probe reports its errno");
    assert!(
        allowed.contains(&errno),
        "{:?} failed with errno {errno}",
        result.probe
    );
}

#[test]
fn required_worker_reports_every_protection_applied() {
    let Some(worker) = hardened_worker("required_worker_reports_every_protection_applied") else {
        return;
    };
    let report = &worker.report;
    assert_eq!(report.mode, SandboxMode::Required);
    assert_eq!(report.refused, None, "{report:?}");
    let names: Vec<&str> = report.protections.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, PROTECTIONS);
    assert!(report.missing().is_empty(), "{report:?}");
    assert!(
        worker
            .protection("landlock")
            .detail
            .contains("fully enforced"),
        "{report:?}"
    );
    assert!(
        worker
            .protection("seccomp")
            .detail
            .contains("clone3 answers ENOSYS")
    );
    let (result, status) = worker.probe(SandboxProbe::Inspect);
    assert!(status.success(), "{status}");
    assert_eq!(result.environment_len, Some(0));
}

#[test]
fn proc_status_shows_no_new_privs_seccomp_and_no_capabilities() {
    let Some(worker) =
        hardened_worker("proc_status_shows_no_new_privs_seccomp_and_no_capabilities")
    else {
        return;
    };
    // The report is sent only after the last protection: the worker is fully hardened now.
    let status = std::fs::read_to_string(format!("/proc/{}/status", worker.child.id()))
        .expect("read the worker's /proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .map_or_else(|| panic!("no {name} in {status}"), str::trim)
            .to_owned()
    };
    assert_eq!(field("NoNewPrivs"), "1");
    assert_eq!(field("Seccomp"), "2");
    assert_eq!(field("Seccomp_filters"), "2");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(field(set), "0000000000000000", "{set}");
    }
    let (_, exit) = worker.probe(SandboxProbe::Inspect);
    assert!(exit.success());
}

/// A descriptor without close-on-exec, so the spawned worker inherits it.
fn inheritable_descriptor() -> OwnedFd {
    let file = std::fs::File::open(WORKER).expect("open the worker binary");
    let fd = OwnedFd::from(file);
    // SAFETY: F_SETFD with 0 only clears FD_CLOEXEC on a descriptor this test owns.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) };
    assert_eq!(rc, 0, "clear FD_CLOEXEC");
    fd
}

#[test]
fn only_stdio_descriptors_survive_an_inherited_leak() {
    if !landlock_available("only_stdio_descriptors_survive_an_inherited_leak") {
        return;
    }
    let leaked = inheritable_descriptor();
    let leaked_number = leaked.as_raw_fd();
    let worker = Worker::start(&[], &[]);
    drop(leaked);
    let close_fds = worker.protection("close_fds");
    let closed: Vec<i32> = close_fds
        .detail
        .trim_start_matches("closed inherited descriptors [")
        .trim_end_matches(']')
        .split(", ")
        .filter_map(|n| n.parse().ok())
        .collect();
    assert!(
        closed.contains(&leaked_number),
        "fd {leaked_number} not in {close_fds:?}"
    );
    let entries: BTreeSet<String> = std::fs::read_dir(format!("/proc/{}/fd", worker.child.id()))
        .expect("list the worker's descriptors")
        .map(|entry| {
            entry
                .expect("fd entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let expected: BTreeSet<String> = ["0", "1", "2"].into_iter().map(str::to_owned).collect();
    assert_eq!(entries, expected);
    let (result, exit) = worker.probe(SandboxProbe::Inspect);
    assert!(exit.success());
    assert!(result.open_fds_above_2.is_empty(), "{result:?}");
    assert_eq!(result.environment_len, Some(0));
}

#[test]
fn open_of_any_file_fails() {
    for path in ["/etc/passwd", WORKER, "/proc/self/status", "/"] {
        let Some(worker) = hardened_worker("open_of_any_file_fails") else {
            return;
        };
        let (result, exit) = worker.probe(SandboxProbe::Open {
            path: path.to_owned(),
        });
        assert_denied(&result, &[libc::EACCES, libc::EPERM]);
        assert!(exit.success());
    }
}

#[test]
fn socket_fails_with_eperm() {
    let Some(worker) = hardened_worker("socket_fails_with_eperm") else {
        return;
    };
    let (result, exit) = worker.probe(SandboxProbe::Socket);
    assert_denied(&result, &[libc::EPERM]);
    assert!(exit.success());
}

#[test]
fn execve_fails_with_eperm() {
    let Some(worker) = hardened_worker("execve_fails_with_eperm") else {
        return;
    };
    let (result, exit) = worker.probe(SandboxProbe::Execve {
        path: "/bin/true".to_owned(),
    });
    assert_denied(&result, &[libc::EPERM]);
    assert!(exit.success());
}

#[test]
fn fork_fails_with_eperm() {
    let Some(worker) = hardened_worker("fork_fails_with_eperm") else {
        return;
    };
    let (result, exit) = worker.probe(SandboxProbe::Fork);
    assert_denied(&result, &[libc::EPERM]);
    assert!(exit.success());
}

#[test]
fn non_empty_environment_makes_the_required_worker_refuse() {
    let worker = Worker::start(&[], &[("LD_PRELOAD", "")]);
    let report = worker.report.clone();
    let environment = worker.protection("empty_environment").clone();
    assert!(!environment.applied);
    assert!(environment.detail.contains("LD_PRELOAD"), "{environment:?}");
    let refused = report
        .refused
        .expect("a required worker with an environment refuses");
    assert!(refused.contains("empty_environment"), "{refused}");
    let (status, stderr) = worker.wait_without_input();
    assert_eq!(status.code(), Some(EXIT_REFUSED), "{stderr}");
    assert!(stderr.contains("empty_environment"), "{stderr}");
}

#[test]
fn unsupported_landlock_abi_makes_the_worker_refuse() {
    for mode in ["--sandbox=required", "--sandbox=best-effort"] {
        let worker = Worker::start(&[mode, "--require-landlock-abi", "99"], &[]);
        let landlock = worker.protection("landlock").clone();
        assert!(!landlock.applied);
        assert!(
            landlock.detail.contains("Landlock ABI 99 is unavailable"),
            "{landlock:?}"
        );
        let refused = worker
            .report
            .refused
            .clone()
            .expect("an unsupported ABI is refused");
        assert!(
            refused.contains("landlock") && refused.contains("99"),
            "{refused}"
        );
        let (status, stderr) = worker.wait_without_input();
        assert_eq!(status.code(), Some(EXIT_REFUSED), "{mode}: {stderr}");
    }
}

#[test]
fn best_effort_worker_with_an_environment_proceeds_and_reports_the_gap() {
    if !landlock_available("best_effort_worker_with_an_environment_proceeds_and_reports_the_gap") {
        return;
    }
    let worker = Worker::start(&["--sandbox=best-effort"], &[("RHO_TEST", "1")]);
    assert_eq!(worker.report.mode, SandboxMode::BestEffort);
    assert_eq!(worker.report.refused, None);
    assert_eq!(worker.report.missing(), vec!["empty_environment"]);
    let (result, exit) = worker.probe(SandboxProbe::Inspect);
    assert!(exit.success());
    assert_eq!(result.environment_len, Some(1));
}

#[test]
fn invalid_arguments_exit_with_usage_status_and_send_nothing() {
    let output = Command::new(WORKER)
        .arg("--sandbox=off")
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .expect("run the worker");
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--sandbox=off"), "{stderr}");
}

const ENTRY: &str = r#"
load("//lib/nodes.star", "test_node")

def build(inputs):
    words = ["w" * 100 for i in range(5000)] + ["y" * 900000]
    lint = command(name = "lint", argv = ["cargo", "clippy", str(len(words))], cwd = ".",
                   timeout_seconds = 600, max_output_bytes = 65536)
    return workflow(name = "check", nodes = [lint, test_node()])

WORKFLOW = define(inputs = {"target": input.string(default = ".")}, build = build)
"#;

const MODULE: &str = r#"
def test_node():
    return command(name = "test", argv = ["cargo", "test"], cwd = ".",
                   timeout_seconds = 60, max_output_bytes = 1000)
"#;

/// The evaluation thread is created after seccomp (clone3 → ENOSYS → clone with
/// CLONE_THREAD) and must run a real plan, with a module load, under every protection.
#[test]
fn plan_is_evaluated_on_a_thread_inside_the_sandbox() {
    let Some(mut worker) = hardened_worker("plan_is_evaluated_on_a_thread_inside_the_sandbox")
    else {
        return;
    };
    let mut stdin = worker.stdin.take().expect("stdin is piped");
    let request = PlanRequest {
        entry_label: "//.rho/workflows/check/workflow.star".to_owned(),
        entry_source: ENTRY.to_owned(),
        inputs: std::collections::BTreeMap::new(),
        budgets: rho_ipc::budget::Budgets::default(),
    };
    write_message(&mut stdin, &Envelope::new(HostMessage::Plan(request))).expect("send plan");
    let mut loads = 0;
    let answer = loop {
        let envelope: Envelope<WorkerMessage> =
            read_message(&mut worker.stdout).expect("a worker message");
        match envelope.message {
            WorkerMessage::LoadModule(module) => {
                loads += 1;
                let answer = ModuleResponse::Source {
                    label: module.label.clone(),
                    source: MODULE.to_owned(),
                };
                write_message(&mut stdin, &Envelope::new(HostMessage::Module(answer)))
                    .expect("answer the module request");
            }
            WorkerMessage::Planned(answer) => break answer,
            other => panic!("unexpected worker message {other:?}"),
        }
    };
    drop(stdin);
    assert_eq!(loads, 1);
    let PlanResponse::Workflow(workflow) = answer else {
        panic!("evaluation failed inside the sandbox: {answer:?}");
    };
    assert_eq!(workflow.name, "check");
    assert_eq!(workflow.nodes.len(), 2);
    let status = worker.child.wait().expect("wait for the worker");
    assert!(status.success(), "{status}");
}

/// A worker with a protection left out (for `rho doctor`) reports it missing and answers
/// probes, but never evaluates a workflow.
#[test]
fn a_worker_with_a_protection_left_out_never_plans() {
    if !landlock_available("a_worker_with_a_protection_left_out_never_plans") {
        return;
    }
    let worker = Worker::start(&["--sandbox=best-effort", "--omit=seccomp"], &[]);
    assert_eq!(worker.report.missing(), vec!["seccomp"]);
    assert!(
        worker
            .protection("seccomp")
            .detail
            .contains("left out on request"),
        "{:?}",
        worker.report
    );
    let mut worker = worker;
    let mut stdin = worker.stdin.take().expect("stdin is piped");
    let request = PlanRequest {
        entry_label: "//w.star".to_owned(),
        entry_source: "WORKFLOW = 1\n".to_owned(),
        inputs: std::collections::BTreeMap::new(),
        budgets: rho_ipc::budget::Budgets::default(),
    };
    write_message(&mut stdin, &Envelope::new(HostMessage::Plan(request))).expect("send plan");
    drop(stdin);
    let status = worker.child.wait().expect("wait");
    assert_eq!(status.code(), Some(1));
    assert!(read_message::<_, Envelope<WorkerMessage>>(&mut worker.stdout).is_err());

    // Landlock alone refuses a signal to a process outside the sandbox (its signal scope).
    let worker = Worker::start(&["--sandbox=best-effort", "--omit=seccomp"], &[]);
    let parent = i32::try_from(std::process::id()).unwrap();
    let (result, _) = worker.probe(SandboxProbe::Signal { pid: parent });
    assert_denied(&result, &[libc::EPERM]);
    let worker = Worker::start(&["--sandbox=best-effort", "--omit=seccomp"], &[]);
    let (result, _) = worker.probe(SandboxProbe::Inspect);
    assert_eq!(result.parent_death_signal, Some(libc::SIGKILL));
}
