//! `HostAuthorizer` end to end without a run: modes, headless fail-closed, a scripted human,
//! and a real classifier executable.

// Test helpers outside `#[test]` functions unwrap too: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rho::config::Config;
use rho::paths::RhoHome;
use rho::permissions::{
    ClassifierCommand, HostAuthorizer, HostEnvironment, ProcessHookRunner, SharedHostAuthorizer,
    load_hooks,
};
use rho::workflow::runner::authorize::{CommandAuthorizer, Verdict};
use rho_policy::{
    ApprovalAnswer, ApprovalContext, ApprovalReason, ApprovalResponder, CommandRequest, Decider,
    EscalationCounters, ExecutableIdentity, PermissionMode, PermissionRequest,
};
use tempfile::TempDir;

struct Fixture {
    _dir: TempDir,
    home: RhoHome,
    workspace: PathBuf,
    scratch: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (home, workspace, scratch) = (root.join("home"), root.join("ws"), root.join("scratch"));
    for d in [&home, &workspace, &scratch] {
        fs::create_dir(d).unwrap();
    }
    Fixture {
        _dir: dir,
        home: RhoHome::at(home, None),
        workspace,
        scratch,
    }
}

impl Fixture {
    fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.scratch.join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// A user hook that touches `marker` and continues.
    fn marker_hook(&self, marker: &Path) {
        let script = self.script(
            "mark.sh",
            "touch \"$1\"\necho '{\"version\":1,\"decision\":\"continue\"}'",
        );
        fs::write(
            self.home.root().join("hooks.toml"),
            format!(
                "version = 1\n[[hook]]\nid = \"mark\"\non = \"before_tool_use\"\ncommand = [{:?}, {:?}]\ntimeout = \"10s\"\n",
                script.display().to_string(),
                marker.display().to_string()
            ),
        )
        .unwrap();
    }

    fn hooks(&self) -> ProcessHookRunner {
        let env = env();
        let loaded = load_hooks(&self.home, &self.workspace, &env).unwrap();
        ProcessHookRunner::new(loaded.hooks, &self.workspace, self.home.root(), env)
    }

    fn classifier(&self, body: &str) -> ClassifierCommand {
        let script = self.script("classify.sh", body);
        ClassifierCommand::new(
            vec![
                script.display().to_string(),
                self.scratch.join("request.json").display().to_string(),
            ],
            self.home.root(),
            &self.workspace,
            env(),
        )
    }

    fn request(&self) -> CommandRequest {
        CommandRequest {
            run_id: "run-1".to_owned(),
            plan_digest: "ab".repeat(32),
            node_id: "deploy".to_owned(),
            attempt: 1,
            executable: ExecutableIdentity {
                path: PathBuf::from("/usr/bin/rsync"),
                sha256: "cd".repeat(32),
            },
            interpreter: None,
            argv: vec!["rsync".to_owned(), "-a".to_owned()],
            cwd: self.workspace.clone(),
            environment_policy: "minimal".to_owned(),
            timeout_ms: 1000,
            output_limit_bytes: 1024,
        }
    }
}

fn env() -> HostEnvironment {
    HostEnvironment::from_vars([("PATH", "/usr/bin:/bin"), ("CLASSIFIER_SECRET", "s3cret")])
}

/// A human who answers from a script and remembers what they were asked.
#[derive(Clone, Default)]
struct ScriptedHuman {
    answers: Arc<Mutex<Vec<ApprovalAnswer>>>,
    asked: Arc<Mutex<Vec<(String, ApprovalContext)>>>,
}

impl ScriptedHuman {
    fn answering(answers: Vec<ApprovalAnswer>) -> Self {
        ScriptedHuman {
            answers: Arc::new(Mutex::new(answers)),
            ..Default::default()
        }
    }
}

impl ApprovalResponder for ScriptedHuman {
    fn ask(&mut self, req: PermissionRequest<'_>, context: &ApprovalContext) -> ApprovalAnswer {
        let PermissionRequest::Command(req) = req else {
            panic!("only command nodes are asked about here");
        };
        self.asked
            .lock()
            .unwrap()
            .push((req.node_id.clone(), context.clone()));
        self.answers.lock().unwrap().remove(0)
    }
}

#[test]
fn headless_supervised_and_allow_edits_are_denied_by_policy_before_any_hook_runs() {
    let fx = fixture();
    let marker = fx.scratch.join("hook-ran");
    fx.marker_hook(&marker);
    for mode in [PermissionMode::Supervised, PermissionMode::AllowEdits] {
        let mut host = HostAuthorizer::new(mode, fx.hooks(), None, None);
        assert!(!host.has_responder());
        let auth = host.authorize(&fx.request());
        assert!(!auth.allowed, "{mode}: {auth}");
        assert_eq!(auth.decided_by, Decider::Policy);
        assert_eq!(auth.mode, mode);
        assert!(
            auth.reason.contains("no approval responder is available"),
            "{auth}"
        );
    }
    assert!(
        !marker.exists(),
        "a hook ran for a request policy had already denied"
    );
}

#[test]
fn plan_mode_denies_and_bypass_allows_by_policy() {
    let fx = fixture();
    let auth =
        HostAuthorizer::new(PermissionMode::Plan, fx.hooks(), None, None).authorize(&fx.request());
    assert!(!auth.allowed);
    assert_eq!(auth.decided_by, Decider::Policy);
    assert!(
        auth.reason.contains("plan forbids process execution"),
        "{auth}"
    );

    let auth = HostAuthorizer::new(PermissionMode::Bypass, fx.hooks(), None, None)
        .authorize(&fx.request());
    assert!(auth.allowed, "{auth}");
    assert_eq!(auth.decided_by, Decider::Policy);
}

#[test]
fn supervised_with_a_responder_runs_hooks_then_asks_the_human() {
    let fx = fixture();
    let marker = fx.scratch.join("hook-ran");
    fx.marker_hook(&marker);
    let human = ScriptedHuman::answering(vec![
        ApprovalAnswer::Approve,
        ApprovalAnswer::Deny {
            reason: "denied by the user at the prompt".to_owned(),
        },
    ]);
    let mut host = HostAuthorizer::new(
        PermissionMode::Supervised,
        fx.hooks(),
        None,
        Some(Box::new(human.clone())),
    );
    let auth = host.authorize(&fx.request());
    assert!(auth.allowed, "{auth}");
    assert_eq!(auth.decided_by, Decider::Human);
    assert!(
        marker.exists(),
        "the hook did not run before the human was asked"
    );

    let auth = host.authorize(&fx.request());
    assert!(!auth.allowed);
    assert_eq!(auth.decided_by, Decider::Human);
    assert_eq!(auth.reason, "denied by the user at the prompt");

    let asked = human.asked.lock().unwrap();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].0, "deploy");
    assert_eq!(asked[0].1.mode, PermissionMode::Supervised);
    assert_eq!(asked[0].1.reason, ApprovalReason::ModeRequiresApproval);
}

#[test]
fn classifier_executable_allows_and_receives_the_request_json() {
    let fx = fixture();
    let classifier = fx.classifier(
        "cat > \"$1\"\nenv >> \"$1.env\"\necho '{\"version\":1,\"decision\":\"allow\"}'",
    );
    let mut host = HostAuthorizer::new(PermissionMode::Auto, fx.hooks(), Some(classifier), None);
    let auth = host.authorize(&fx.request());
    assert!(auth.allowed, "{auth}");
    assert_eq!(auth.decided_by, Decider::Classifier);

    let sent: CommandRequest =
        serde_json::from_slice(&fs::read(fx.scratch.join("request.json")).unwrap()).unwrap();
    assert_eq!(sent, fx.request());
    let seen_env = fs::read_to_string(fx.scratch.join("request.json.env")).unwrap();
    assert!(
        seen_env.lines().any(|l| l == "RHO_IN_CLASSIFIER=1"),
        "{seen_env}"
    );
    assert!(!seen_env.contains("CLASSIFIER_SECRET"), "{seen_env}");
}

#[test]
fn classifier_executable_denies_with_its_reason_and_counts_the_denial() {
    let fx = fixture();
    let classifier = fx.classifier(
        "echo '{\"version\":1,\"decision\":\"deny\",\"reason\":\"writes outside the workspace\"}'",
    );
    let mut host = HostAuthorizer::new(PermissionMode::Auto, fx.hooks(), Some(classifier), None);
    let auth = host.authorize(&fx.request());
    assert!(!auth.allowed);
    assert_eq!(auth.decided_by, Decider::Classifier);
    assert_eq!(auth.reason, "writes outside the workspace");
    assert_eq!(host.counters().consecutive_denials(), 1);
    assert_eq!(host.counters().total_denials(), 1);
}

#[test]
fn a_crashing_or_slow_classifier_counts_as_a_denial() {
    let fx = fixture();
    let crash = fx.classifier("kill -KILL $$");
    let auth = HostAuthorizer::new(PermissionMode::Auto, fx.hooks(), Some(crash), None)
        .authorize(&fx.request());
    assert!(!auth.allowed);
    assert_eq!(auth.decided_by, Decider::Classifier);
    assert!(
        auth.reason
            .contains("classifier failed: killed by signal 9"),
        "{auth}"
    );

    let slow = fx
        .classifier("sleep 300")
        .with_timeout(Duration::from_secs(1));
    let auth = HostAuthorizer::new(PermissionMode::Auto, fx.hooks(), Some(slow), None)
        .authorize(&fx.request());
    assert!(!auth.allowed);
    assert!(auth.reason.contains("timed out"), "{auth}");

    // A hook's `continue` is not a grant from a classifier.
    let hooky = fx.classifier("echo '{\"version\":1,\"decision\":\"continue\"}'");
    let auth = HostAuthorizer::new(PermissionMode::Auto, fx.hooks(), Some(hooky), None)
        .authorize(&fx.request());
    assert!(!auth.allowed, "{auth}");
}

#[test]
fn three_consecutive_classifier_denials_escalate_to_the_human() {
    let fx = fixture();
    let classifier = fx.classifier("echo 'not sure' >&2; exit 2");
    let human = ScriptedHuman::answering(vec![ApprovalAnswer::Approve]);
    let mut host = HostAuthorizer::new(
        PermissionMode::Auto,
        fx.hooks(),
        Some(classifier),
        Some(Box::new(human.clone())),
    );
    for _ in 0..2 {
        let auth = host.authorize(&fx.request());
        assert_eq!(
            (auth.allowed, &auth.decided_by),
            (false, &Decider::Classifier),
            "{auth}"
        );
        assert_eq!(auth.reason, "not sure");
    }
    let auth = host.authorize(&fx.request());
    assert!(auth.allowed, "{auth}");
    assert_eq!(auth.decided_by, Decider::Human);
    let asked = human.asked.lock().unwrap();
    assert!(matches!(
        &asked[0].1.reason,
        ApprovalReason::ClassifierEscalation { consecutive_denials: 3, total_denials: 3, classifier_reason }
            if classifier_reason == "not sure"
    ));
    assert_eq!(host.counters().total_denials(), 3);
}

#[test]
fn restored_counters_carry_escalation_across_a_resume() {
    let fx = fixture();
    let classifier = fx.classifier("exit 2");
    // Two denials were journaled before the restart; the next one escalates, and headless
    // that is a denial saying a responder is needed.
    let mut counters = EscalationCounters::new();
    counters.record_denial();
    counters.record_denial();
    let mut host = HostAuthorizer::new(PermissionMode::Auto, fx.hooks(), Some(classifier), None)
        .with_counters(counters);
    let auth = host.authorize(&fx.request());
    assert!(!auth.allowed);
    assert!(auth.reason.contains("escalation to a human"), "{auth}");
    assert_eq!(host.counters().consecutive_denials(), 3);
}

#[test]
fn auto_without_classifier_headless_fails_closed() {
    let fx = fixture();
    let auth =
        HostAuthorizer::new(PermissionMode::Auto, fx.hooks(), None, None).authorize(&fx.request());
    assert!(!auth.allowed);
    assert_eq!(auth.decided_by, Decider::Policy);
    assert!(
        auth.reason.contains("no classifier is configured"),
        "{auth}"
    );
}

#[test]
fn for_process_reads_the_classifier_from_config() {
    let fx = fixture();
    let config = Config::parse(
        &fx.home.config_file(),
        "[behavior]\npermission_mode = \"auto\"\nclassifier = [\"/opt/classify\", \"--fast\"]\n",
    )
    .unwrap();
    assert_eq!(
        config.behavior.classifier.as_deref(),
        Some(&["/opt/classify".to_owned(), "--fast".to_owned()][..])
    );
    let host = HostAuthorizer::for_process(PermissionMode::Auto, &fx.home, &config, &fx.workspace)
        .unwrap();
    assert!(host.has_classifier());
    assert_eq!(host.mode(), PermissionMode::Auto);

    let err = Config::parse(&fx.home.config_file(), "[behavior]\nclassifier = []\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("behavior.classifier"), "{err}");
}

#[test]
fn the_runner_seam_records_who_denied_why_and_the_mode() {
    let fx = fixture();
    let deny = fx.script(
        "deny.sh",
        "echo '{\"version\":1,\"decision\":\"deny\",\"reason\":\"frozen branch\"}'; exit 2",
    );
    fs::write(
        fx.home.root().join("hooks.toml"),
        format!(
            "version = 1\n[[hook]]\nid = \"branch\"\non = \"before_tool_use\"\ncommand = [{:?}]\ntimeout = \"10s\"\n",
            deny.display().to_string()
        ),
    )
    .unwrap();
    let seam: Arc<dyn CommandAuthorizer> = Arc::new(SharedHostAuthorizer::new(
        HostAuthorizer::new(PermissionMode::Bypass, fx.hooks(), None, None),
    ));
    assert_eq!(seam.mode(), PermissionMode::Bypass);
    let decision = seam.authorize(&fx.request());
    assert_eq!(decision.counters, None, "no classifier took part");
    let Verdict::Deny(denial) = decision.verdict else {
        panic!("a denying hook must deny through the seam");
    };
    assert_eq!(denial.decided_by, "hook `branch`");
    assert_eq!(denial.reason, "frozen branch");
    assert_eq!(denial.mode, "bypass");

    let seam = SharedHostAuthorizer::new(HostAuthorizer::new(
        PermissionMode::Supervised,
        fx.hooks(),
        None,
        None,
    ));
    let Verdict::Deny(denial) = CommandAuthorizer::authorize(&seam, &fx.request()).verdict else {
        panic!("headless supervised must deny");
    };
    assert_eq!(
        (denial.decided_by.as_str(), denial.mode.as_str()),
        ("policy", "supervised")
    );
}

#[test]
fn the_runner_seam_reports_classifier_counters_in_decision_order_and_restores_them() {
    let fx = fixture();
    let classifier =
        fx.classifier("echo '{\"version\":1,\"decision\":\"deny\",\"reason\":\"no\"}'");
    let seam = SharedHostAuthorizer::new(HostAuthorizer::new(
        PermissionMode::Auto,
        fx.hooks(),
        Some(classifier),
        None,
    ));
    let first = CommandAuthorizer::authorize(&seam, &fx.request());
    let second = CommandAuthorizer::authorize(&seam, &fx.request());
    let (Some(a), Some(b)) = (first.counters, second.counters) else {
        panic!("a classifier decision must report its counters: {first:?} {second:?}");
    };
    assert_eq!((a.order, b.order), (1, 2));
    assert_eq!(a.counters.total_denials(), 1);
    assert_eq!(b.counters.consecutive_denials(), 2);
    assert!(matches!(second.verdict, Verdict::Deny(ref d) if d.decided_by == "classifier"));

    // A resumed run continues from the journaled counters: the next denial is the third in
    // a row, which escalates (and fails closed headless, saying so).
    let resumed = SharedHostAuthorizer::new(HostAuthorizer::new(
        PermissionMode::Auto,
        fx.hooks(),
        Some(fx.classifier("echo '{\"version\":1,\"decision\":\"deny\",\"reason\":\"no\"}'")),
        None,
    ));
    resumed.restore_counters(b.counters);
    let third = CommandAuthorizer::authorize(&resumed, &fx.request());
    assert_eq!(third.counters.unwrap().counters.consecutive_denials(), 3);
    let Verdict::Deny(denial) = third.verdict else {
        panic!("the classifier denied");
    };
    assert!(denial.reason.contains("escalation"), "{}", denial.reason);
}
