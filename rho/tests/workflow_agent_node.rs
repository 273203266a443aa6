//! Agent nodes of workflows on the rho runtime, driven by a loopback scripted model: the
//! typed answer is validated and feeds a downstream command node; a schema mismatch or an
//! answer that is not exactly one JSON value fails the node, with the raw answer kept apart
//! from the validated value.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

mod run_support;

use rho_e2e::model_server::{ModelServer, Reply};
use run_support::{Env, assert_snapshot_matches_journal, code, text};

const WORKFLOW: &str = r#"def build(inputs):
    review = agent(name = "review", agent = "default", prompt = "Review the change.",
                   output = schema.record({"verdict": schema.enum(["approve", "revise"])}),
                   timeout_seconds = TIMEOUT, max_output_bytes = 4096)
    record = command(name = "record", needs = ["review"],
                     argv = ["sh", "-c", template(["echo ", output("review", ["verdict"]), " > verdict.txt"])],
                     timeout_seconds = 30, max_output_bytes = 4096)
    return workflow(name = "t", nodes = [review, record])

WORKFLOW = define(inputs = {}, build = build)
"#;

fn setup(server: &ModelServer, timeout: u32) -> Env {
    let env = Env::new();
    std::fs::write(
        env.home.join("config.toml"),
        format!(
            "[model]\nprovider = \"local\"\nmodel = \"scripted-1\"\n\n\
             [providers.custom.local]\nbase_url = \"{}/v1\"\n",
            server.base_url()
        ),
    )
    .unwrap();
    std::fs::write(
        env.ws.join("wf.star"),
        WORKFLOW.replace("TIMEOUT", &timeout.to_string()),
    )
    .unwrap();
    env
}

fn find_file(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

fn only_run_dir(env: &Env) -> std::path::PathBuf {
    let runs = env.home.join("workflows").join("runs");
    let mut dirs: Vec<_> = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.pop().unwrap()
}

#[test]
fn typed_answer_feeds_the_downstream_command() {
    let server = ModelServer::start([Reply::text("{\"verdict\": \"approve\"}")]);
    let env = setup(&server, 60);
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(env.ws.join("verdict.txt")).unwrap(),
        "approve\n"
    );
    let run = only_run_dir(&env);
    let (state, _) = assert_snapshot_matches_journal(&run);
    let attempt = &state.root().tasks["review"].attempts[0];
    assert!(attempt.output.is_some(), "the validated value is recorded");
    let answer = find_file(&run, "answer.txt").expect("the raw answer is kept");
    assert_eq!(
        std::fs::read_to_string(answer).unwrap(),
        "{\"verdict\": \"approve\"}"
    );
    assert!(
        find_file(&run, "output.json").is_some(),
        "and the validated value apart"
    );
    // The prompt carried the schema, and the system prompt is the frozen one.
    let body = server.model_requests()[0].json();
    let prompt = body["messages"][1]["content"].as_str().unwrap();
    assert!(prompt.starts_with("Review the change."), "{prompt}");
    assert!(prompt.contains("\"verdict\""), "{prompt}");
}

#[test]
fn a_schema_mismatch_fails_the_node_quoting_the_path() {
    let server = ModelServer::start([Reply::text("{\"verdict\": \"maybe\"}")]);
    let env = setup(&server, 60);
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 3, "{}", text(&out));
    let run = only_run_dir(&env);
    let (state, _) = assert_snapshot_matches_journal(&run);
    let attempt = &state.root().tasks["review"].attempts[0];
    let reason = attempt.reason.clone().unwrap_or_default();
    assert!(reason.contains("$.verdict"), "{reason}");
    assert!(attempt.output.is_none());
    assert!(
        !env.ws.join("verdict.txt").exists(),
        "the downstream node never ran"
    );
}

#[test]
fn prose_around_the_json_is_not_an_answer() {
    let server = ModelServer::start([Reply::text("Here you go: {\"verdict\": \"approve\"}")]);
    let env = setup(&server, 60);
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 3, "{}", text(&out));
    let run = only_run_dir(&env);
    let (state, _) = assert_snapshot_matches_journal(&run);
    let reason = state.root().tasks["review"].attempts[0]
        .reason
        .clone()
        .unwrap_or_default();
    assert!(reason.contains("exactly one JSON value"), "{reason}");
}
