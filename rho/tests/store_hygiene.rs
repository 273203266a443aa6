//! Store hygiene through the real binary: a FIFO in place of any store file fails at once
//! with an error naming it (never hangs), the journal gets `state.json`'s owner and mode
//! checks, and `status` believes a `state.json` only when a replay of the journal agrees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

mod run_support;
use run_support::{Env, code, node, text};

/// Runs `rho args`, failing the test if it is still running after 20 s (and killing it).
fn bounded(env: &Env, args: &[&str]) -> Output {
    let mut child = env
        .command(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`rho {}` hung", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A finished one-node run; returns its id.
fn finished_run(env: &Env) -> String {
    let source = format!(
        "def build(inputs):\n    return workflow(name = \"h\", nodes = [{}], exports = {{}})\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
        node("a", "", r#"["true"]"#)
    );
    env.write("wf.star", &source);
    let plan_id = env.plan("wf.star");
    let before = env.run_ids();
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    env.run_ids().difference(&before).next().unwrap().clone()
}

fn replace_with_fifo(path: &Path) {
    std::fs::remove_file(path).unwrap();
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

#[test]
fn a_fifo_anywhere_in_a_run_fails_status_and_resume_at_once_naming_the_file() {
    for file in ["events.jsonl", "state.json", "manifest.json", "graph.json"] {
        let env = Env::new();
        let id = finished_run(&env);
        replace_with_fifo(&env.run_dir(&id).join(file));
        let mut commands = vec![vec!["workflow", "resume", id.as_str(), "--yes"]];
        if file != "graph.json" {
            // `status` never reads the graph.
            commands.push(vec!["workflow", "status", id.as_str()]);
        }
        for args in commands {
            let out = bounded(&env, &args);
            assert_ne!(code(&out), 0, "{file}: {}", text(&out));
            assert!(
                text(&out).contains(file)
                    && (text(&out).contains("regular file")
                        || text(&out).contains("not a regular")),
                "{file} with {args:?}: {}",
                text(&out)
            );
        }
    }
}

#[test]
fn a_fifo_as_trust_json_fails_trust_at_once() {
    let env = Env::new();
    let ws = env.ws.to_string_lossy().into_owned();
    let out = env.rho(&["trust", "add", &ws]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    replace_with_fifo(&env.home.join("trust.json"));
    let out = bounded(&env, &["trust", "list"]);
    assert_ne!(code(&out), 0, "{}", text(&out));
    assert!(text(&out).contains("trust.json"), "{}", text(&out));
}

#[test]
fn a_journal_others_can_read_is_refused_like_state_json() {
    let env = Env::new();
    let id = finished_run(&env);
    let journal = env.run_dir(&id).join("events.jsonl");
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = env.rho(&["workflow", "status", &id]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    assert!(
        text(&out).contains("events.jsonl") && text(&out).contains("mode 644"),
        "{}",
        text(&out)
    );
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = env.rho(&["workflow", "status", &id]);
    assert_eq!(code(&out), 0, "{}", text(&out));
}

#[test]
fn status_refuses_a_state_json_that_the_journal_does_not_back() {
    let env = Env::new();
    let id = finished_run(&env);
    let path = env.run_dir(&id).join("state.json");
    let original = std::fs::read_to_string(&path).unwrap();
    let write = |doc: &serde_json::Value| {
        std::fs::write(&path, serde_json::to_vec(doc).unwrap()).unwrap();
    };

    // A different outcome for the same journal prefix.
    let mut edited: serde_json::Value = serde_json::from_str(&original).unwrap();
    edited["scopes"]["s0"]["tasks"]["a"]["state"] = "failure".into();
    write(&edited);
    let out = env.rho(&["workflow", "status", &id]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    assert!(
        text(&out).contains("state.json") && text(&out).contains("differs from a replay"),
        "{}",
        text(&out)
    );

    // A snapshot that claims records the journal does not have.
    let mut ahead: serde_json::Value = serde_json::from_str(&original).unwrap();
    let last = ahead["last_event_sequence"].as_u64().unwrap();
    ahead["last_event_sequence"] = (last + 5).into();
    write(&ahead);
    let out = env.rho(&["workflow", "status", &id]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    assert!(
        text(&out).contains(&format!("claims journal record {}", last + 5)),
        "{}",
        text(&out)
    );

    std::fs::write(&path, &original).unwrap();
    let out = env.rho(&["workflow", "status", &id]);
    assert_eq!(code(&out), 0, "{}", text(&out));
}

/// A long-lived process (`rho mcp`) keeps the last snapshot it decoded: the same bytes are
/// not decoded again, but a hand edit or a snapshot ahead of the journal is refused as
/// without the cache, and the restored file reads as before.
#[test]
fn a_cached_snapshot_never_stands_in_for_other_bytes() {
    use rho::workflow::runner::{SnapshotCache, inspect, inspect_cached};
    let env = Env::new();
    let id = finished_run(&env);
    let home = rho::paths::RhoHome::at(env.home.clone(), None);
    let cache = SnapshotCache::new();
    let (_, plain) = inspect(&home, &id).unwrap();
    for _ in 0..2 {
        let (_, cached) = inspect_cached(&home, &id, &cache).unwrap();
        assert_eq!(cached.state, plain.state);
        assert_eq!(cached.uncertain, plain.uncertain);
    }
    let path = env.run_dir(&id).join("state.json");
    let original = std::fs::read_to_string(&path).unwrap();
    let mut edited: serde_json::Value = serde_json::from_str(&original).unwrap();
    edited["scopes"]["s0"]["tasks"]["a"]["state"] = "failure".into();
    std::fs::write(&path, serde_json::to_vec(&edited).unwrap()).unwrap();
    let refused = inspect_cached(&home, &id, &cache).unwrap_err().to_string();
    assert!(refused.contains("differs from a replay"), "{refused}");
    let mut ahead: serde_json::Value = serde_json::from_str(&original).unwrap();
    let last = ahead["last_event_sequence"].as_u64().unwrap();
    ahead["last_event_sequence"] = (last + 5).into();
    std::fs::write(&path, serde_json::to_vec(&ahead).unwrap()).unwrap();
    let refused = inspect_cached(&home, &id, &cache).unwrap_err().to_string();
    assert!(
        refused.contains(&format!("claims journal record {}", last + 5)),
        "{refused}"
    );
    std::fs::write(&path, &original).unwrap();
    let (_, again) = inspect_cached(&home, &id, &cache).unwrap();
    assert_eq!(again.state, plain.state);
}

/// The journal vouches for the exact bytes of the final snapshot, so `status` starts from
/// it and reads only the journal's end; a snapshot with other bytes (even the same state,
/// written differently) is checked against a full replay instead.
#[test]
fn status_starts_from_the_snapshot_the_journal_vouches_for() {
    let env = Env::new();
    let id = finished_run(&env);
    let dir = env.run_dir(&id);
    let journal = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(journal.lines().last().unwrap()).unwrap();
    let state_bytes = std::fs::read(dir.join("state.json")).unwrap();
    assert_eq!(last["event"], "snapshot_written", "{journal}");
    assert_eq!(
        last["sha256"].as_str().unwrap(),
        rho_ipc::digest::sha256_tagged(&state_bytes)
    );
    let state: serde_json::Value = serde_json::from_slice(&state_bytes).unwrap();
    assert_eq!(
        state["last_event_sequence"].as_u64().unwrap() + 1,
        last["seq"].as_u64().unwrap()
    );

    let vouched = "state read from the snapshot the journal vouches for";
    let status = |extra_log: &str| {
        env.command(&["workflow", "status", &id, "--output", "json"])
            .env("RUST_LOG", extra_log)
            .output()
            .unwrap()
    };
    let fast = status("rho::workflow::runner=debug");
    assert_eq!(code(&fast), 0, "{}", text(&fast));
    assert!(
        String::from_utf8_lossy(&fast.stderr).contains(vouched),
        "{}",
        text(&fast)
    );

    // The same state in other bytes: not vouched for, replayed, and the same document.
    let pretty = serde_json::to_vec_pretty(&state).unwrap();
    std::fs::write(dir.join("state.json"), &pretty).unwrap();
    let slow = status("rho::workflow::runner=debug");
    assert_eq!(code(&slow), 0, "{}", text(&slow));
    assert!(
        !String::from_utf8_lossy(&slow.stderr).contains(vouched),
        "{}",
        text(&slow)
    );
    assert_eq!(fast.stdout, slow.stdout);
}

#[test]
fn authority_files_in_rho_home_get_the_trust_stores_checks() {
    let env = Env::new();
    finished_run(&env);
    let plan_id = env.plan("wf.star");
    // A dangling hooks.toml is an error, not "no hooks".
    let hooks = env.home.join("hooks.toml");
    std::os::unix::fs::symlink(env.home.join("missing-hooks.toml"), &hooks).unwrap();
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_ne!(code(&out), 0, "{}", text(&out));
    assert!(
        text(&out).contains("hooks.toml") && text(&out).contains("dangling symbolic link"),
        "{}",
        text(&out)
    );
    std::fs::remove_file(&hooks).unwrap();

    // A configuration others may rewrite (it chooses the mode and the classifier).
    let config = env.home.join("config.toml");
    std::fs::write(&config, "").unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o664)).unwrap();
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_ne!(code(&out), 0, "{}", text(&out));
    assert!(
        text(&out).contains("config.toml") && text(&out).contains("mode 664"),
        "{}",
        text(&out)
    );
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    std::fs::remove_file(&config).unwrap();
    std::os::unix::fs::symlink(env.home.join("nowhere.toml"), &config).unwrap();
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_ne!(code(&out), 0, "{}", text(&out));
    assert!(text(&out).contains("dangling"), "{}", text(&out));
}
