//! The worker's side of the protocol contract: a host that speaks another protocol version
//! is refused by name, whatever the shape of its message, and nothing is evaluated.

use std::io::Write as _;
use std::process::{Command, Stdio};

use rho_ipc::frame::{read_message, write_message};
use rho_ipc::message::{Envelope, PROTOCOL_VERSION, WorkerMessage};

/// A message this build does not know, as a newer host might send.
#[derive(serde::Serialize)]
enum FutureHostMessage {
    Compile { source: String },
}

#[test]
fn a_host_of_another_protocol_version_is_refused_by_name() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rho-planner-worker"))
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the worker");
    let mut stdout = child.stdout.take().expect("stdout");
    let report: Envelope<WorkerMessage> = read_message(&mut stdout).expect("hardening report");
    assert!(
        matches!(report.message, WorkerMessage::Hardening(_)),
        "{report:?}"
    );

    let mut stdin = child.stdin.take().expect("stdin");
    write_message(
        &mut stdin,
        &Envelope {
            protocol_version: PROTOCOL_VERSION + 1,
            message: FutureHostMessage::Compile {
                source: "WORKFLOW = 1".into(),
            },
        },
    )
    .expect("send the frame");
    stdin.flush().expect("flush");
    drop(stdin);

    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("protocol version"), "stderr: {stderr}");
    assert!(
        stderr.contains(&format!("{}", PROTOCOL_VERSION + 1)),
        "the message names the peer's version: {stderr}"
    );
}
