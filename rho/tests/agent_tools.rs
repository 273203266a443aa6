//! Agents calling tools end to end: `rho run` and workflow agent nodes against a loopback
//! scripted model, through the real tool registry and its one permission path. The model is
//! offered exactly the tools its definition was granted; reads, edits and commands run under
//! the permission mode; a denial (by mode, by a hook, or because no one can approve) reaches
//! the model as the tool's result and nothing is done.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

mod agent_support;

use agent_support::{AgentEnv, offered_tools, stderr, stdout, tool_results};
use rho_e2e::model_server::{ModelServer, Reply, ScriptedTurn};
use serde_json::json;

#[test]
fn the_default_agent_is_offered_every_host_tool() {
    let server = ModelServer::start([Reply::text("ok")]);
    let env = AgentEnv::new(&server);
    let out = env.run(&["run", "hello"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let body = server.model_requests()[0].json();
    assert_eq!(
        offered_tools(&body),
        [
            "agent",
            "agents",
            "apply_patch",
            "bash",
            "edit_file",
            "glob",
            "grep",
            "list_dir",
            "process",
            "read_file",
            "workflow",
            "write_file"
        ]
    );
    // Every offered schema is a closed object.
    for tool in body["tools"].as_array().unwrap() {
        let schema = &tool["function"]["parameters"];
        assert_eq!(schema["type"], "object", "{tool}");
        assert_eq!(schema["additionalProperties"], false, "{tool}");
    }
}

#[test]
fn no_tools_offers_none() {
    let server = ModelServer::start([Reply::text("ok")]);
    let env = AgentEnv::new(&server);
    let out = env.run(&["run", "--no-tools", "hello"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(offered_tools(&server.model_requests()[0].json()).is_empty());
}

#[test]
fn the_explorer_reads_with_its_four_tools_and_the_result_reaches_the_model() {
    let server = ModelServer::start([
        Reply::Turn(
            ScriptedTurn::text("Looking.")
                .with_tool_call("read_file", &json!({"path": "notes.txt"}))
                .with_tool_call("grep", &json!({"pattern": "needle"})),
        ),
        Reply::text("The needle is in notes.txt."),
    ]);
    let env = AgentEnv::new(&server);
    env.write("notes.txt", "hay\nneedle here\nhay\n");
    let out = env.run(&["--agent", "explorer", "run", "where is the needle?"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "The needle is in notes.txt.\n");
    let requests = server.model_requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        offered_tools(&requests[0].json()),
        ["glob", "grep", "list_dir", "read_file"]
    );
    let results = tool_results(&requests[1].json());
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains("needle here"), "{}", results[0]);
    assert!(results[1].contains("notes.txt"), "{}", results[1]);

    // The transcript records the calls and their results.
    let events = rho::runtime::transcript::read_events(&env.transcripts()[0]).unwrap();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "session.started",
            "user",
            "assistant",
            "tool.result",
            "tool.result",
            "assistant",
            "turn.ended"
        ]
    );
    env.assert_no_secret_on_disk();
}

#[test]
fn bypass_mode_writes_and_runs_commands() {
    let server = ModelServer::start([
        Reply::Turn(
            ScriptedTurn::text("")
                .with_tool_call(
                    "write_file",
                    &json!({"path": "out/hello.txt", "content": "hi\n"}),
                )
                .with_tool_call("bash", &json!({"command": "cat out/hello.txt; echo done"})),
        ),
        Reply::text("Wrote and ran."),
    ]);
    let env = AgentEnv::new(&server);
    let out = env.run(&["--permission-mode", "bypass", "run", "write it"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("out/hello.txt")).unwrap(),
        "hi\n"
    );
    let results = tool_results(&server.model_requests()[1].json());
    assert!(results[1].contains("hi\ndone"), "{}", results[1]);
    assert!(results[1].contains("exit code 0"), "{}", results[1]);
}

#[test]
fn plan_mode_denies_writes_and_commands_and_the_model_reads_why() {
    let server = ModelServer::start([
        Reply::Turn(
            ScriptedTurn::text("")
                .with_tool_call("write_file", &json!({"path": "x.txt", "content": "x"}))
                .with_tool_call("bash", &json!({"command": "touch ran.txt"})),
        ),
        Reply::text("I may not."),
    ]);
    let env = AgentEnv::new(&server);
    let out = env.run(&["--permission-mode", "plan", "run", "try"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!env.workspace.join("x.txt").exists());
    assert!(!env.workspace.join("ran.txt").exists());
    let results = tool_results(&server.model_requests()[1].json());
    for result in &results {
        assert!(result.contains("denied"), "{result}");
        assert!(result.contains("plan"), "{result}");
    }
}

#[test]
fn approvals_without_a_person_or_classifier_fail_closed() {
    for mode in ["supervised", "allow_edits", "auto"] {
        let server = ModelServer::start([
            Reply::Turn(
                ScriptedTurn::text("")
                    .with_tool_call("write_file", &json!({"path": "x.txt", "content": "x"}))
                    .with_tool_call("bash", &json!({"command": "touch ran.txt"})),
            ),
            Reply::text("Not allowed."),
        ]);
        let env = AgentEnv::new(&server);
        let out = env.run(&["--permission-mode", mode, "run", "try"]);
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        assert!(!env.workspace.join("ran.txt").exists(), "{mode}");
        let results = tool_results(&server.model_requests()[1].json());
        assert!(results[1].contains("denied"), "{mode}: {}", results[1]);
        assert!(results[1].contains("fail closed"), "{mode}: {}", results[1]);
        // An untracked new file is not a tracked edit: allow_edits asks too.
        assert!(!env.workspace.join("x.txt").exists(), "{mode}");
    }
}

#[test]
fn a_before_tool_use_hook_denies_a_read() {
    let server = ModelServer::start([
        Reply::tool_call("read_file", &json!({"path": "secret.txt"})),
        Reply::text("Refused."),
    ]);
    let env = AgentEnv::new(&server);
    env.write("secret.txt", "the secret\n");
    let hook = env.home.join("deny-hook.sh");
    std::fs::write(
        &hook,
        "#!/bin/sh\ncat >/dev/null\necho '{\"version\":1,\"decision\":\"deny\",\"reason\":\"no secrets today\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        env.home.join("hooks.toml"),
        format!(
            "version = 1\n[[hook]]\nid = \"guard\"\non = \"before_tool_use\"\ntools = [\"read_file\"]\n\
             command = [\"{}\"]\ntimeout = \"10s\"\n",
            hook.display()
        ),
    )
    .unwrap();
    let out = env.run(&["--permission-mode", "auto", "run", "read it"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = tool_results(&server.model_requests()[1].json());
    assert!(results[0].contains("no secrets today"), "{}", results[0]);
    assert!(!results[0].contains("the secret"), "{}", results[0]);
}

/// `/proc/<pid>/stat` exists and is not a zombie's.
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// An agent's `bash` call starts a sleeper in a new session (out of the call's process
/// group), then ends or times out; a second call reports whether the sleeper still runs
/// (`ALIVE`/`GONE`: checked while `rho` still runs, so it is the call's end that stopped
/// it). `containment` is `RHO_CONTAINMENT` for `rho`. Returns the sleeper's pid and the
/// second call's result.
fn bash_call_with_an_escapee(
    containment: &str,
    command: &str,
    timeout_seconds: u64,
) -> (i32, String) {
    let check = "p=$(cat esc.pid); if grep -qs '^State:[[:space:]]*[A-Y]' /proc/$p/status; \
                 then echo ALIVE; else echo GONE; fi";
    let server = ModelServer::start([
        Reply::Turn(ScriptedTurn::text("").with_tool_call(
            "bash",
            &json!({"command": command, "timeout_seconds": timeout_seconds}),
        )),
        Reply::Turn(ScriptedTurn::text("").with_tool_call("bash", &json!({"command": check}))),
        Reply::text("Done."),
    ]);
    let env = AgentEnv::new(&server);
    let mut rho = env.rho(&["--permission-mode", "bypass", "run", "start it"]);
    rho.env("RHO_CONTAINMENT", containment);
    let out = rho.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let escaped: i32 = std::fs::read_to_string(env.workspace.join("esc.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let first = tool_results(&server.model_requests()[1].json());
    assert!(first[0].contains("started"), "{}", first[0]);
    let second = tool_results(&server.model_requests()[2].json());
    (escaped, second.last().cloned().unwrap_or_default())
}

fn assert_gone((pid, checked): (i32, String)) {
    let alive = running(pid);
    if alive {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        checked.contains("GONE") && !alive,
        "the setsid descendant {pid} of a bash call outlived it: {checked}"
    );
}
const ESCAPE_THEN_EXIT: &str =
    "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > esc.pid; sleep 0.3; echo started";
const ESCAPE_THEN_HANG: &str =
    "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > esc.pid; echo started; sleep 1000";

#[test]
fn a_setsid_descendant_of_a_bash_call_dies_when_the_call_ends() {
    assert_gone(bash_call_with_an_escapee("auto", ESCAPE_THEN_EXIT, 60));
}

#[test]
fn a_setsid_descendant_of_a_bash_call_dies_at_its_timeout() {
    assert_gone(bash_call_with_an_escapee("auto", ESCAPE_THEN_HANG, 1));
}

#[test]
fn without_a_cgroup_a_setsid_descendant_of_a_bash_call_dies_when_the_call_ends() {
    assert_gone(bash_call_with_an_escapee("subreaper", ESCAPE_THEN_EXIT, 60));
}

#[test]
fn without_a_cgroup_a_setsid_descendant_of_a_bash_call_dies_at_its_timeout() {
    assert_gone(bash_call_with_an_escapee("subreaper", ESCAPE_THEN_HANG, 1));
}

/// `rho run` is killed outright while an agent's `bash` call runs a sleeper that left the
/// call's group: the exec guardian kills it (through the call's cgroup, or its tag under
/// the subreaper fallback).
fn escapee_of_a_killed_session(containment: &str) -> i32 {
    let server = ModelServer::start([
        Reply::Turn(ScriptedTurn::text("").with_tool_call(
            "bash",
            &json!({"command": ESCAPE_THEN_HANG, "timeout_seconds": 600}),
        )),
        Reply::text("Done."),
    ]);
    let env = AgentEnv::new(&server);
    let mut rho = env.rho(&["--permission-mode", "bypass", "run", "start it"]);
    rho.env("RHO_CONTAINMENT", containment)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = rho.spawn().unwrap();
    let pid_file = env.workspace.join("esc.pid");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let escaped: i32 = loop {
        if let Ok(text) = std::fs::read_to_string(&pid_file)
            && let Ok(pid) = text.trim().parse()
        {
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the call never started its sleeper"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    // The sleeper has left the call's group once `setsid` has run: wait for its session.
    while std::fs::read_to_string(format!("/proc/{escaped}/stat")).is_ok_and(|s| {
        s.rsplit(')').next().unwrap_or("").split_whitespace().nth(3) != Some(&escaped.to_string())
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "the sleeper never left the session"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id().cast_signed()),
        nix::sys::signal::Signal::SIGKILL,
    );
    child.wait().unwrap();
    escaped
}

fn assert_dies(pid: i32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while running(pid) {
        if std::time::Instant::now() > deadline {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("the setsid descendant {pid} of a bash call outlived the killed session");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn a_setsid_descendant_of_a_bash_call_dies_with_a_killed_session() {
    assert_dies(escapee_of_a_killed_session("auto"));
}

#[test]
fn without_a_cgroup_a_setsid_descendant_of_a_bash_call_dies_with_a_killed_session() {
    assert_dies(escapee_of_a_killed_session("subreaper"));
}

#[test]
fn an_unusable_containment_setting_fails_the_bash_call_naming_it() {
    let server = ModelServer::start([
        Reply::Turn(
            ScriptedTurn::text("").with_tool_call("bash", &json!({"command": "touch ran.txt"})),
        ),
        Reply::text("Done."),
    ]);
    let env = AgentEnv::new(&server);
    let mut rho = env.rho(&["--permission-mode", "bypass", "run", "run it"]);
    rho.env("RHO_CONTAINMENT", "bogus");
    let out = rho.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = tool_results(&server.model_requests()[1].json());
    assert!(
        results[0].contains("RHO_CONTAINMENT=`bogus`"),
        "{}",
        results[0]
    );
    assert!(!env.workspace.join("ran.txt").exists(), "nothing ran");
}
