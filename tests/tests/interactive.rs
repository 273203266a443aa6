//! The interactive session driven through a pseudo-terminal against the loopback scripted
//! model server: streamed text, Ctrl-C during a slow stream (a second one exits), and resume
//! (with the refusals for a changed agent definition and for switching agents).
//!
//! `rho` runs under `setsid --ctty` so the pseudo-terminal is its controlling terminal and a
//! `^C` typed on it is a real SIGINT from the terminal driver.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::pty::{Winsize, openpty};
use rho_e2e::model_server::{ModelServer, Reply, ScriptedTurn};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

/// A private data directory and workspace (a git repository) with a config pointing at the
/// scripted model server.
struct Sandbox {
    _dir: tempfile::TempDir,
    home: PathBuf,
    workspace: PathBuf,
}

impl Sandbox {
    fn new(server: &ModelServer) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let workspace = dir.path().join("work");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::write(
            home.join("config.toml"),
            format!(
                "[model]\nprovider = \"local\"\nmodel = \"scripted\"\nauth = \"none\"\n\n\
                 [providers.custom.local]\nbase_url = \"{}/v1\"\n",
                server.base_url()
            ),
        )
        .unwrap();
        let out = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&workspace)
            .output()
            .unwrap();
        assert!(out.status.success());
        Sandbox {
            _dir: dir,
            home,
            workspace: workspace.canonicalize().unwrap(),
        }
    }
}

/// `rho` on a pseudo-terminal.
struct Terminal {
    master: File,
    child: Child,
    seen: String,
    /// Where the next `expect` starts looking.
    cursor: usize,
}

impl Terminal {
    fn spawn(sandbox: &Sandbox, args: &[&str]) -> Self {
        let size = Winsize {
            ws_row: 40,
            ws_col: 200,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = openpty(Some(&size), None).unwrap();
        let slave: OwnedFd = pty.slave;
        let child = Command::new("setsid")
            .arg("--ctty")
            .arg(rho_e2e::binary("rho"))
            .args(args)
            .current_dir(&sandbox.workspace)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", sandbox.home.parent().unwrap())
            .env("RHO_HOME", &sandbox.home)
            .env("TERM", "xterm")
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .spawn()
            .unwrap();
        Terminal {
            master: File::from(pty.master),
            child,
            seen: String::new(),
            cursor: 0,
        }
    }

    /// Reads whatever arrives within `slice`.
    fn pump(&mut self, slice: Duration) {
        let mut fds = [PollFd::new(self.master.as_fd(), PollFlags::POLLIN)];
        let ms = u16::try_from(slice.as_millis()).unwrap_or(u16::MAX);
        if poll(&mut fds, PollTimeout::from(ms)).unwrap_or(0) == 0 {
            return;
        }
        let mut buf = [0_u8; 4096];
        if let Ok(n) = self.master.read(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            // rustyline asks where the cursor is; answer so it does not wait.
            if text.contains("\x1b[6n") {
                let _ = self.master.write_all(b"\x1b[1;1R");
            }
            self.seen.push_str(&text);
        }
    }

    /// Waits until `needle` appears after the last match; returns the text up to it.
    fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(at) = self.seen[self.cursor..].find(needle) {
                let start = self.cursor;
                self.cursor += at + needle.len();
                return self.seen[start..self.cursor].to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {needle:?}; the terminal shows:\n{}",
                self.seen
            );
            self.pump(Duration::from_millis(50));
        }
    }

    fn send(&mut self, text: &str) {
        self.master.write_all(text.as_bytes()).unwrap();
        self.master.flush().unwrap();
    }

    fn line(&mut self, text: &str) {
        self.expect("› ");
        self.send(text);
        self.send("\r");
    }

    /// Waits for the process to exit, draining its output; returns the exit code.
    fn wait(&mut self) -> i32 {
        let deadline = Instant::now() + WAIT;
        loop {
            self.pump(Duration::from_millis(50));
            if let Some(status) = self.child.try_wait().unwrap() {
                self.pump(Duration::from_millis(100));
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "rho did not exit; the terminal shows:\n{}",
                self.seen
            );
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn saved_session_id(text: &str) -> String {
    let marker = "resume with: rho --resume ";
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("no resume hint in:\n{text}"));
    text[at + marker.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

#[test]
fn ctrl_c_cancels_a_slow_stream_and_a_second_one_exits() {
    let slow = |text: &str| {
        Reply::Turn(
            ScriptedTurn::empty()
                .with_text_chunks(&[text, " more", " and more", " and more", " and more"])
                .with_chunk_delay(Duration::from_millis(700)),
        )
    };
    let server = ModelServer::start([
        slow("first-chunk"),
        Reply::text("after cancel"),
        slow("slow-again"),
    ]);
    let sandbox = Sandbox::new(&server);
    let mut term = Terminal::spawn(&sandbox, &[]);

    term.line("tell me a long story");
    term.expect("first-chunk");
    term.send("\x03");
    term.expect("turn cancelled");
    // The session is still usable.
    term.line("are you there?");
    term.expect("after cancel");

    term.line("another long one");
    term.expect("slow-again");
    term.send("\x03");
    std::thread::sleep(Duration::from_millis(100));
    term.send("\x03");
    assert_eq!(term.wait(), 130);
    assert!(term.seen.contains("saved; resume with"), "{}", term.seen);
}

#[test]
fn resume_continues_the_conversation_and_refuses_changed_or_switched_agents() {
    let server = ModelServer::start([
        Reply::text("Noted: the number is 42."),
        Reply::text("You told me 42."),
    ]);
    let sandbox = Sandbox::new(&server);
    let agents = sandbox.home.join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    let definition = agents.join("helper.md");
    std::fs::write(
        &definition,
        "---\ndescription: A helper\ntools: [read_file]\n---\nBe brief.\n",
    )
    .unwrap();

    let mut term = Terminal::spawn(&sandbox, &["--agent", "helper"]);
    term.expect("agent helper");
    term.line("remember the number 42");
    term.expect("Noted: the number is 42.");
    term.line("/exit");
    assert_eq!(term.wait(), 0);
    let id = saved_session_id(&term.seen);

    // Resume by a prefix: the earlier conversation goes to the model again.
    let mut term = Terminal::spawn(&sandbox, &["--resume", &id[..8]]);
    term.expect(&format!("resumed session {id}"));
    term.line("which number?");
    term.expect("You told me 42.");
    term.line("/exit");
    assert_eq!(term.wait(), 0);
    let sent = server.model_requests().last().unwrap().json().to_string();
    assert!(sent.contains("remember the number 42"), "{sent}");
    assert!(sent.contains("Noted: the number is 42."), "{sent}");

    // Switching agents on resume is refused.
    let mut term = Terminal::spawn(&sandbox, &["--resume", &id, "--agent", "default"]);
    term.expect("switching agents inside a session is not supported");
    assert_eq!(term.wait(), 2);

    // A changed definition refuses the resume.
    std::fs::write(
        &definition,
        "---\ndescription: A helper\ntools: [read_file, grep]\n---\nBe brief.\n",
    )
    .unwrap();
    let mut term = Terminal::spawn(&sandbox, &["--resume", &id]);
    term.expect("the definition of agent `helper` changed");
    assert_eq!(term.wait(), 2);
    assert_eq!(server.remaining(), 0);
}

#[test]
fn a_turn_with_a_tool_call_and_inline_approvals_answered_y_and_n() {
    let server = ModelServer::start([
        // Turn 1: write a file (approved), then answer.
        Reply::Turn(ScriptedTurn::text("Writing it.").with_tool_call(
            "write_file",
            &json!({"path": "hello.txt", "content": "hi\n"}),
        )),
        Reply::text("Done writing."),
        // Turn 2: run a command (denied), then answer.
        Reply::tool_call("bash", &json!({"command": "touch ran.txt"})),
        Reply::text("Understood, not running it."),
    ]);
    let sandbox = Sandbox::new(&server);
    let mut term = Terminal::spawn(&sandbox, &["--permission-mode", "supervised"]);
    term.expect("permission mode supervised");

    term.line("please write hello.txt");
    term.expect("Writing it.");
    term.expect("● write_file  hello.txt");
    term.expect("? allow tool `write_file` (other_write)");
    term.expect("> ");
    term.send("y\r");
    term.expect("allowed");
    term.expect("└ ok: Created `hello.txt`");
    term.expect("Done writing.");
    assert_eq!(
        std::fs::read_to_string(sandbox.workspace.join("hello.txt")).unwrap(),
        "hi\n"
    );

    term.line("now touch ran.txt");
    term.expect("● bash  touch ran.txt");
    term.expect("? allow tool `bash` (process)");
    term.expect("> ");
    term.send("n\r");
    term.expect("denied");
    term.expect("└ error: `bash` denied by human");
    term.expect("Understood, not running it.");
    assert!(!sandbox.workspace.join("ran.txt").exists());

    // The model saw the denial as the tool's result.
    let last = server.model_requests().last().unwrap().json().to_string();
    assert!(last.contains("denied by human"), "{last}");

    term.line("/exit");
    assert_eq!(term.wait(), 0);
}

/// Text only the explorer's system prompt contains.
const EXPLORER_MARKER: &str = "You are working as an explorer";

/// A reply streamed in `pieces` chunks, `delay` apart.
fn slow_reply(text: &str, delay: Duration) -> Reply {
    let pieces: Vec<&str> = text.split_inclusive(' ').collect();
    Reply::Turn(
        ScriptedTurn::text(text)
            .with_text_chunks(&pieces)
            .with_chunk_delay(delay),
    )
}

/// The delegated runs of a sandbox, in start order: `(id, run directory)`.
fn delegated_runs(sandbox: &Sandbox) -> Vec<(String, PathBuf)> {
    let text =
        std::fs::read_to_string(sandbox.home.join("subagents/index.jsonl")).unwrap_or_default();
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                v["id"].as_str().unwrap().to_owned(),
                PathBuf::from(v["dir"].as_str().unwrap()),
            )
        })
        .collect()
}

/// Waits until the run's `result.json` says `state`.
fn wait_for_state(dir: &std::path::Path, state: &str) -> serde_json::Value {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("result.json"))
            && let Ok(value) = serde_json::from_str::<serde_json::Value>(&text)
            && value["state"] == state
        {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{} never reached {state}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_background_child_reports_at_the_next_turn_boundary() {
    let server = ModelServer::start([
        Reply::tool_call(
            "agent",
            &json!({"agent_id": "explorer", "prompt": "look around", "background": true}),
        ),
        Reply::text("Started it in the background."),
        Reply::text("The explorer finished: it found the README."),
    ]);
    server.route(
        EXPLORER_MARKER,
        [slow_reply(
            "found the README at the top level",
            Duration::from_millis(100),
        )],
    );
    let sandbox = Sandbox::new(&server);
    let mut term = Terminal::spawn(&sandbox, &["--permission-mode", "plan"]);
    term.line("delegate a look around");
    term.expect("Started it in the background.");
    let runs = delegated_runs(&sandbox);
    assert_eq!(runs.len(), 1);
    // The tool answered at once with the run id. The child's own request may reach the
    // server before the parent's second one: look at the parent's requests only.
    let parent: Vec<_> = server
        .model_requests()
        .into_iter()
        .filter(|r| !r.json().to_string().contains(EXPLORER_MARKER))
        .collect();
    let second = parent[1].json().to_string();
    assert!(
        second.contains(&format!(
            "agent {} (explorer) started in background",
            runs[0].0
        )),
        "{second}"
    );
    assert!(!second.contains("agent notification"), "{second}");
    let status = wait_for_state(&runs[0].1, "ok");
    assert_eq!(status["result"], "found the README at the top level");

    term.line("anything new?");
    term.expect("The explorer finished");
    let last = server.model_requests().last().unwrap().json().to_string();
    assert!(last.contains("[agent notification]"), "{}", term.seen);
    assert!(last.contains("found the README at the top level"), "{last}");
    term.line("/exit");
    assert_eq!(term.wait(), 0);
}

#[test]
fn agents_stop_cancels_a_child_and_leaving_the_session_cancels_the_rest() {
    let server = ModelServer::start([
        Reply::tool_call(
            "agent",
            &json!({"agent_id": "explorer", "prompt": "first", "background": true}),
        ),
        Reply::text("First started."),
    ]);
    let endless = "a b c d e f g h i j k l m n o p q r s t u v w x y z";
    server.route(
        EXPLORER_MARKER,
        [
            slow_reply(endless, Duration::from_secs(2)),
            slow_reply(endless, Duration::from_secs(2)),
        ],
    );
    let sandbox = Sandbox::new(&server);
    let mut term = Terminal::spawn(&sandbox, &["--permission-mode", "plan"]);
    term.line("start one");
    term.expect("First started.");
    let (first, first_dir) = delegated_runs(&sandbox).remove(0);
    wait_for_state(&first_dir, "running");

    // Stop it through `agents`.
    server.push(Reply::tool_call(
        "agents",
        &json!({"action": "stop", "id": first}),
    ));
    server.push(Reply::text("Stopped the first."));
    term.line("stop it");
    term.expect("Stopped the first.");
    let status = wait_for_state(&first_dir, "stopped");
    assert_eq!(status["agent_id"], "explorer");
    let stop_result = server.model_requests().last().unwrap().json().to_string();
    assert!(stop_result.contains("stopped"), "{stop_result}");
    assert!(stop_result.contains("unverified"), "{stop_result}");

    // A second child, followed from another process, is cancelled when the session ends.
    server.push(Reply::tool_call(
        "agent",
        &json!({"agent_id": "explorer", "prompt": "second", "background": true}),
    ));
    server.push(Reply::text("Second started."));
    term.line("start another");
    term.expect("Second started.");
    let (second, second_dir) = delegated_runs(&sandbox).remove(1);
    wait_for_state(&second_dir, "running");
    let attach = Command::new(rho_e2e::binary("rho"))
        .args(["attach", &second])
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", sandbox.home.parent().unwrap())
        .env("RHO_HOME", &sandbox.home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    term.line("/exit");
    assert_eq!(term.wait(), 0);
    wait_for_state(&second_dir, "stopped");
    let attached = attach.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&attached.stdout);
    assert!(shown.contains("stopped"), "attach saw: {shown}");
}
