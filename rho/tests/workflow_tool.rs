//! The model-facing `workflow` tool, called in-process through the tool registry: golden
//! summaries of every action (IDs, digests and temporary paths filtered), the byte bound at
//! its edges, consent that fails closed, background runs with completion notices, and the
//! permission mode deciding before anything runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod run_support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rho::config::Config;
use rho::paths::RhoHome;
use rho::permissions::{HostAuthorizer, SharedHostAuthorizer};
use rho::tools::workflow::WorkflowTool;
use rho::tools::{
    ConfirmAnswer, ConfirmRequest, ToolContext, ToolError, ToolHost, ToolNotice, ToolOutput,
    ToolRegistry,
};
use rho::workflow::plan::ProcessSettings;
use rho_policy::{Decider, ModeSelection, ModeSource, PermissionMode};
use run_support::{Env, node, worker_bin};
use serde_json::{Value, json};

/// A host that answers confirmations from a script and collects notices.
struct TestHost {
    accept: bool,
    asked: Mutex<Vec<ConfirmRequest>>,
    notices: Mutex<Vec<ToolNotice>>,
    arrived: Condvar,
}

impl TestHost {
    fn new(accept: bool) -> Arc<Self> {
        Arc::new(TestHost {
            accept,
            asked: Mutex::new(Vec::new()),
            notices: Mutex::new(Vec::new()),
            arrived: Condvar::new(),
        })
    }

    /// The completion notice of `run_id`, waiting up to a minute for it.
    fn notice_for(&self, run_id: &str) -> ToolNotice {
        let deadline = Instant::now() + Duration::from_mins(1);
        let mut notices = self.notices.lock().unwrap();
        loop {
            if let Some(n) = notices
                .iter()
                .find(|n| n.structured["run_id"] == json!(run_id))
            {
                return n.clone();
            }
            let left = deadline
                .checked_duration_since(Instant::now())
                .unwrap_or_else(|| panic!("no completion notice for {run_id}"));
            notices = self.arrived.wait_timeout(notices, left).unwrap().0;
        }
    }
}

impl ToolHost for TestHost {
    fn confirm(&self, request: &ConfirmRequest) -> ConfirmAnswer {
        self.asked.lock().unwrap().push(request.clone());
        if self.accept {
            ConfirmAnswer::Accepted
        } else {
            ConfirmAnswer::Refused {
                reason: "the user declined the confirmation".to_owned(),
            }
        }
    }

    fn notify(&self, notice: ToolNotice) {
        self.notices.lock().unwrap().push(notice);
        self.arrived.notify_all();
    }
}

struct Fixture {
    env: Env,
    registry: ToolRegistry,
    tool: WorkflowTool,
}

impl Fixture {
    fn new() -> Self {
        let env = Env::new();
        copy_dir(&repo_root().join("examples/hello"), &env.ws);
        let tool = WorkflowTool::new(ProcessSettings {
            worker: Some(worker_bin().into_os_string()),
            sandbox: None,
            search_path: Some("/usr/bin:/bin".into()),
            trust_project_agents: None,
        });
        let registry = ToolRegistry::builder().with(tool.clone()).build().unwrap();
        Fixture {
            env,
            registry,
            tool,
        }
    }

    fn ctx(&self, mode: PermissionMode, host: Arc<TestHost>) -> ToolContext {
        let home = RhoHome::at(
            &self.env.home,
            self.env.home.parent().map(Path::to_path_buf),
        );
        let config = Config::empty(self.env.home.join("config.toml"));
        let mut authorizer =
            HostAuthorizer::for_process(mode, &home, &config, &self.env.ws).unwrap();
        authorizer.set_responder(None);
        ToolContext::new(
            self.env.ws.clone(),
            home,
            Arc::new(config),
            ModeSelection {
                mode,
                source: ModeSource::Flag,
            },
            Arc::new(SharedHostAuthorizer::new(authorizer)),
            host,
        )
    }

    fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        self.registry.call("workflow", args, ctx)
    }

    /// Replaces what differs between runs: IDs, digests, the temporary directory, times.
    fn normalize(&self, text: &str, ids: &[(&str, &str)]) -> String {
        let mut out = text.replace(self.env.home.to_str().unwrap(), "$RHO_HOME");
        out = out.replace(self.env.ws.to_str().unwrap(), "$WORKSPACE");
        for (id, name) in ids {
            out = out.replace(id, name);
        }
        let mut cleaned = String::new();
        let mut rest = out.as_str();
        while let Some(at) = rest.find("sha256:") {
            cleaned.push_str(&rest[..at]);
            let hex_len = rest[at + 7..]
                .chars()
                .take_while(char::is_ascii_hexdigit)
                .count();
            cleaned.push_str("sha256:<digest>");
            rest = &rest[at + 7 + hex_len..];
        }
        cleaned.push_str(rest);
        cleaned
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Compares `actual` with `tests/golden/workflow_tool/<name>.txt`; `UPDATE_GOLDEN=1` rewrites
/// the file instead.
fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/workflow_tool")
        .join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    assert_eq!(actual, expected, "golden file {}", path.display());
}

const HELLO: &str = ".rho/workflows/hello/workflow.star";

fn plan_id_of(output: &ToolOutput) -> String {
    output.structured["plan_id"].as_str().unwrap().to_owned()
}

fn run_id_of(output: &ToolOutput) -> String {
    output.structured["run_id"].as_str().unwrap().to_owned()
}

#[test]
fn validate_plan_run_status_and_cancel_summaries_match_golden_files() {
    let fx = Fixture::new();
    let host = TestHost::new(true);
    let ctx = fx.ctx(PermissionMode::Bypass, host.clone());

    let validated = fx
        .call(
            &ctx,
            json!({"action": "validate", "file": HELLO, "inputs": {"who": "team"}}),
        )
        .unwrap();
    assert_eq!(validated.structured["valid"], true);
    golden("validate", &fx.normalize(&validated.summary, &[]));

    let planned = fx
        .call(
            &ctx,
            json!({"action": "plan", "file": HELLO, "inputs": {"who": "team"}}),
        )
        .unwrap();
    let plan_id = plan_id_of(&planned);
    golden(
        "plan",
        &fx.normalize(&planned.summary, &[(&plan_id, "<plan_id>")]),
    );

    let started = fx
        .call(&ctx, json!({"action": "run", "plan_id": plan_id}))
        .unwrap();
    let run_id = run_id_of(&started);
    assert!(
        started.summary.contains("started in the background"),
        "{}",
        started.summary
    );
    // Consent was asked for this exact digest.
    let asked = host.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(
        asked[0]
            .question
            .contains(&format!("plan {plan_id} (sha256:")),
        "{}",
        asked[0].question
    );

    let notice = host.notice_for(&run_id);
    assert_eq!(notice.kind, "workflow_completed");
    assert!(
        notice.summary.contains("outcome success"),
        "{}",
        notice.summary
    );
    assert!(
        notice.summary.contains("export ready = true"),
        "{}",
        notice.summary
    );
    let ids = [
        (run_id.as_str(), "<run_id>"),
        (plan_id.as_str(), "<plan_id>"),
    ];
    golden("completion_notice", &fx.normalize(&notice.summary, &ids));

    let status = fx
        .call(&ctx, json!({"action": "status", "run_id": run_id}))
        .unwrap();
    assert_eq!(status.structured["lifecycle"], "completed");
    assert_eq!(status.structured["outcome"], "success");
    golden("status", &fx.normalize(&status.summary, &ids));

    let cancelled = fx
        .call(&ctx, json!({"action": "cancel", "run_id": run_id}))
        .unwrap();
    assert_eq!(
        cancelled.structured["cancellation_state"],
        "already_completed"
    );
    golden("cancel_completed", &fx.normalize(&cancelled.summary, &ids));
}

#[test]
fn invalid_workflow_reports_diagnostics_with_file_and_line() {
    let fx = Fixture::new();
    let ctx = fx.ctx(PermissionMode::Bypass, TestHost::new(true));
    fx.env.write("bad.star", "def build(inputs):\n    return workflow(name = \"x\", nodes = [nope])\n\nWORKFLOW = define(inputs = {}, build = build)\n");
    let out = fx
        .call(&ctx, json!({"action": "validate", "file": "bad.star"}))
        .unwrap();
    assert_eq!(out.structured["valid"], false);
    golden("validate_invalid", &fx.normalize(&out.summary, &[]));
    let err = fx
        .call(&ctx, json!({"action": "plan", "file": "bad.star"}))
        .unwrap_err();
    assert!(matches!(err, ToolError::Failed { .. }), "{err}");
    assert!(err.to_string().contains("bad.star:2:"), "{err}");
    assert!(!fx.env.home.join("workflows/plans").exists() || fx.plans().is_empty());
}

impl Fixture {
    fn plans(&self) -> Vec<String> {
        std::fs::read_dir(self.env.home.join("workflows/plans"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[test]
fn cancel_and_resume_a_background_run() {
    let fx = Fixture::new();
    let host = TestHost::new(true);
    let ctx = fx.ctx(PermissionMode::Bypass, host.clone());
    fx.env.write(
        "slow.star",
        &format!(
            "def build(inputs):\n    return workflow(name = \"slow\", nodes = [{}, {}], exports = {{}})\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
            node(
                "wait",
                "",
                r#"["sh", "-c", "if [ -e resumed ]; then echo again; else touch resumed; sleep 30; fi"]"#
            ),
            node("after", ", needs = [\"wait\"]", r#"["true"]"#),
        ),
    );
    let plan_id = plan_id_of(
        &fx.call(&ctx, json!({"action": "plan", "file": "slow.star"}))
            .unwrap(),
    );
    let run_id = run_id_of(
        &fx.call(&ctx, json!({"action": "run", "plan_id": plan_id}))
            .unwrap(),
    );
    // Wait until the node is running (its marker exists), then cancel.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fx.env.ws.join("resumed").exists() {
        assert!(Instant::now() < deadline, "the node never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let cancelled = fx
        .call(&ctx, json!({"action": "cancel", "run_id": run_id}))
        .unwrap();
    assert_eq!(
        cancelled.structured["cancellation_state"], "acknowledged",
        "{}",
        cancelled.summary
    );
    assert!(
        cancelled.summary.contains("request_id: "),
        "{}",
        cancelled.summary
    );
    let notice = host.notice_for(&run_id);
    assert!(
        notice.summary.contains("outcome cancellation"),
        "{}",
        notice.summary
    );

    host.notices.lock().unwrap().clear();
    let resumed = fx
        .call(&ctx, json!({"action": "resume", "run_id": run_id}))
        .unwrap();
    assert_eq!(run_id_of(&resumed), run_id);
    let notice = host.notice_for(&run_id);
    assert!(
        notice.summary.contains("outcome success"),
        "{}",
        notice.summary
    );
    let status = fx
        .call(&ctx, json!({"action": "status", "run_id": &run_id[..8]}))
        .unwrap();
    let ids = [
        (run_id.as_str(), "<run_id>"),
        (plan_id.as_str(), "<plan_id>"),
    ];
    golden("status_after_resume", &fx.normalize(&status.summary, &ids));
}

#[test]
fn declined_confirmation_runs_nothing_and_says_how_to_run() {
    let fx = Fixture::new();
    let host = TestHost::new(false);
    let ctx = fx.ctx(PermissionMode::Bypass, host.clone());
    let plan_id = plan_id_of(
        &fx.call(&ctx, json!({"action": "plan", "file": HELLO}))
            .unwrap(),
    );
    let err = fx
        .call(&ctx, json!({"action": "run", "plan_id": plan_id}))
        .unwrap_err();
    let ToolError::NotConfirmed { reason, .. } = &err else {
        panic!("expected a refusal, got {err}");
    };
    assert!(reason.contains("the user declined"), "{reason}");
    assert!(
        reason.contains("Nothing was run and no run was stored"),
        "{reason}"
    );
    assert!(
        reason.contains(&format!("rho workflow run {plan_id} --yes")),
        "{reason}"
    );
    assert!(fx.env.run_ids().is_empty(), "a run was stored");
    assert!(host.notices.lock().unwrap().is_empty());
}

#[test]
fn plan_mode_allows_reads_and_denies_the_run_by_policy() {
    let fx = Fixture::new();
    let host = TestHost::new(true);
    let ctx = fx.ctx(PermissionMode::Plan, host.clone());
    fx.call(&ctx, json!({"action": "validate", "file": HELLO}))
        .unwrap();
    let plan_id = plan_id_of(
        &fx.call(&ctx, json!({"action": "plan", "file": HELLO}))
            .unwrap(),
    );
    let err = fx
        .call(&ctx, json!({"action": "run", "plan_id": plan_id}))
        .unwrap_err();
    let ToolError::Denied {
        decided_by, reason, ..
    } = &err
    else {
        panic!("expected a policy denial, got {err}");
    };
    assert_eq!(*decided_by, Decider::Policy);
    assert_eq!(reason, "permission mode plan forbids process execution");
    assert!(
        host.asked.lock().unwrap().is_empty(),
        "asked despite the denial"
    );
    assert!(fx.env.run_ids().is_empty());
}

#[test]
fn arguments_are_checked_per_action_naming_the_field() {
    let fx = Fixture::new();
    let ctx = fx.ctx(PermissionMode::Bypass, TestHost::new(true));
    let cases = [
        (json!({"action": "run"}), "plan_id"),
        (
            json!({"action": "status", "plan_id": "x", "run_id": "y"}),
            "plan_id",
        ),
        (json!({"action": "validate"}), "file"),
        (json!({"action": "launch"}), "action"),
        (
            json!({"action": "plan", "file": HELLO, "inputs": {"Bad": 1}}),
            "inputs.Bad",
        ),
        (
            json!({"action": "plan", "file": HELLO, "inputs": {"who": 1.5}}),
            "inputs.who",
        ),
        (
            json!({"action": "status", "run_id": "y", "extra": 1}),
            "extra",
        ),
    ];
    for (args, field) in cases {
        let err = fx.call(&ctx, args.clone()).unwrap_err();
        assert!(
            matches!(&err, ToolError::InvalidArguments { field: f, .. } if f == field),
            "{args}: {err}"
        );
    }
    let err = fx
        .call(&ctx, json!({"action": "status", "run_id": "0000dead"}))
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::UnknownId { kind: "run", .. }),
        "{err}"
    );
}

#[test]
fn status_summary_obeys_the_byte_bound_at_its_edges() {
    let fx = Fixture::new();
    let host = TestHost::new(true);
    let ctx = fx.ctx(PermissionMode::Bypass, host.clone());
    let plan_id = plan_id_of(
        &fx.call(&ctx, json!({"action": "plan", "file": HELLO}))
            .unwrap(),
    );
    let run_id = run_id_of(
        &fx.call(&ctx, json!({"action": "run", "plan_id": plan_id}))
            .unwrap(),
    );
    host.notice_for(&run_id);
    let full = fx
        .call(&ctx, json!({"action": "status", "run_id": run_id}))
        .unwrap()
        .summary;
    let exact = ctx.clone().with_summary_limit(full.len());
    let at_limit = fx
        .call(&exact, json!({"action": "status", "run_id": run_id}))
        .unwrap()
        .summary;
    assert_eq!(at_limit, full, "a summary exactly at the limit is whole");
    let under = ctx.clone().with_summary_limit(full.len() - 1);
    let cut = fx
        .call(&under, json!({"action": "status", "run_id": run_id}))
        .unwrap()
        .summary;
    assert!(cut.len() < full.len(), "{cut}");
    let last = cut.lines().last().unwrap();
    assert!(last.starts_with("[summary truncated: "), "{cut}");
    assert!(last.contains(&format!("of {} bytes", full.len())), "{last}");
    for line in cut.lines().take(cut.lines().count() - 1) {
        assert!(
            full.lines().any(|l| l == line),
            "kept line `{line}` is not whole"
        );
    }
}

#[test]
fn shutdown_cancels_background_runs() {
    let fx = Fixture::new();
    let host = TestHost::new(true);
    let ctx = fx.ctx(PermissionMode::Bypass, host.clone());
    fx.env.write(
        "sleepy.star",
        &format!(
            "def build(inputs):\n    return workflow(name = \"sleepy\", nodes = [{}], exports = {{}})\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
            node("nap", "", r#"["sleep", "30"]"#),
        ),
    );
    let plan_id = plan_id_of(
        &fx.call(&ctx, json!({"action": "plan", "file": "sleepy.star"}))
            .unwrap(),
    );
    let run_id = run_id_of(
        &fx.call(&ctx, json!({"action": "run", "plan_id": plan_id}))
            .unwrap(),
    );
    assert_eq!(fx.tool.running(), vec![run_id.clone()]);
    let started = Instant::now();
    fx.tool.shutdown(ctx.home());
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(fx.tool.running().is_empty());
    let status = fx
        .call(&ctx, json!({"action": "status", "run_id": run_id}))
        .unwrap();
    assert_eq!(
        status.structured["outcome"], "cancellation",
        "{}",
        status.summary
    );
}

/// The tool finds a workspace workflow by its name as the command line does, and a mistyped
/// name is an invalid `file` with the closest names.
#[test]
fn workflows_are_found_by_name_with_suggestions() {
    let fx = Fixture::new();
    let ctx = fx.ctx(PermissionMode::Bypass, TestHost::new(true));
    let out = fx
        .call(&ctx, json!({"action": "validate", "file": "hello"}))
        .unwrap();
    assert_eq!(out.structured["valid"], true, "{}", out.summary);
    let err = fx
        .call(&ctx, json!({"action": "plan", "file": "helo"}))
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::InvalidArguments { field, .. } if field == "file"),
        "{err}"
    );
    assert!(err.to_string().contains("did you mean hello?"), "{err}");
    assert!(fx.plans().is_empty());
}
