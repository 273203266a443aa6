//! Registry and permission-path tests with small local tools.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rho_policy::{
    ApprovalAnswer, ApprovalContext, ApprovalResponder, Decider, HookScope, HookSet, ModeSelection,
    ModeSource, OperationClass, PermissionMode, PermissionRequest, parse_hooks_file,
};
use serde_json::{Value, json};

use super::*;
use crate::config::Config;
use crate::paths::RhoHome;
use crate::permissions::{
    HostAuthorizer, HostEnvironment, ProcessHookRunner, SharedHostAuthorizer,
};

/// A tool that counts its calls and starts "a process" (it only says so).
#[derive(Default)]
struct Echo {
    calls: AtomicUsize,
    class: Option<OperationClass>,
}

impl Tool for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }
    fn description(&self) -> &'static str {
        "Echoes its text."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "options": {
                    "type": "object",
                    "properties": {"loud": {"type": "boolean"}},
                    "additionalProperties": false
                }
            },
            "required": ["text"],
            "additionalProperties": false
        })
    }
    fn capability(&self) -> &'static str {
        "echo"
    }
    fn permission_requests(
        &self,
        args: &Value,
        _ctx: &ToolContext,
    ) -> Result<Vec<ToolPermission>, ToolError> {
        Ok(vec![ToolPermission::new(
            self.class.unwrap_or(OperationClass::Process),
            format!("echo {}", args["text"]),
        )])
    }
    fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Args {
            text: String,
            #[allow(dead_code)]
            options: Option<Value>,
        }
        self.calls.fetch_add(1, Ordering::SeqCst);
        let args: Args = parse_args("echo", &args)?;
        Ok(ToolOutput::new(
            args.text.clone(),
            json!({"text": args.text}),
        ))
    }
}

struct Approve(Arc<Mutex<Vec<String>>>, bool);

impl ApprovalResponder for Approve {
    fn ask(&mut self, req: PermissionRequest<'_>, _context: &ApprovalContext) -> ApprovalAnswer {
        self.0.lock().unwrap().push(req.to_string());
        if self.1 {
            ApprovalAnswer::Approve
        } else {
            ApprovalAnswer::Deny {
                reason: "declined in test".into(),
            }
        }
    }
}

fn context(
    dir: &Path,
    mode: PermissionMode,
    hooks: HookSet,
    responder: Option<Box<dyn ApprovalResponder + Send>>,
) -> ToolContext {
    let env = HostEnvironment::from_vars([("PATH", "/usr/bin:/bin")]);
    let runner = ProcessHookRunner::new(hooks, dir, dir, env);
    let host = HostAuthorizer::new(mode, runner, None, responder);
    ToolContext::new(
        dir.to_path_buf(),
        RhoHome::at(dir.join("home"), None),
        Arc::new(Config::empty(dir.join("home/config.toml"))),
        ModeSelection {
            mode,
            source: ModeSource::Flag,
        },
        Arc::new(SharedHostAuthorizer::new(host)),
        Arc::new(HeadlessHost),
    )
}

fn registry(tool: Echo) -> (ToolRegistry, Arc<Echo>) {
    let tool = Arc::new(tool);
    let registry = ToolRegistry::builder()
        .with_shared(tool.clone())
        .build()
        .unwrap();
    (registry, tool)
}

#[test]
fn registry_lists_names_and_schemas() {
    let (registry, _) = registry(Echo::default());
    let specs = registry.specs();
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0].name, "echo");
    assert_eq!(specs[0].input_schema["additionalProperties"], false);
    assert_eq!(registry.names(), vec!["echo"]);
}

#[test]
fn unknown_fields_and_missing_fields_are_named_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (registry, tool) = registry(Echo::default());
    let ctx = context(dir.path(), PermissionMode::Bypass, HookSet::default(), None);

    let err = registry
        .call("echo", json!({"text": "hi", "colour": "red"}), &ctx)
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::InvalidArguments { field, .. } if field == "colour"),
        "{err}"
    );
    assert!(err.to_string().contains("unknown field `colour`"), "{err}");

    let err = registry.call("echo", json!({}), &ctx).unwrap_err();
    assert!(
        matches!(&err, ToolError::InvalidArguments { field, .. } if field == "text"),
        "{err}"
    );

    let err = registry
        .call(
            "echo",
            json!({"text": "x", "options": {"loud": "yes"}}),
            &ctx,
        )
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::InvalidArguments { field, .. } if field == "options.loud"),
        "{err}"
    );
    let err = registry
        .call(
            "echo",
            json!({"text": "x", "options": {"quiet": true}}),
            &ctx,
        )
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::InvalidArguments { field, .. } if field == "options.quiet"),
        "{err}"
    );

    let err = registry.call("nope", json!({}), &ctx).unwrap_err();
    assert_eq!(err.to_string(), "unknown tool `nope`; available: echo");
    assert_eq!(tool.calls.load(Ordering::SeqCst), 0);
}

#[test]
fn plan_mode_denies_process_by_policy_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (registry, tool) = registry(Echo::default());
    let ctx = context(dir.path(), PermissionMode::Plan, HookSet::default(), None);
    let err = registry
        .call("echo", json!({"text": "hi"}), &ctx)
        .unwrap_err();
    let ToolError::Denied {
        decided_by, reason, ..
    } = &err
    else {
        panic!("expected a denial, got {err}");
    };
    assert_eq!(*decided_by, Decider::Policy);
    assert_eq!(reason, "permission mode plan forbids process execution");
    assert_eq!(tool.calls.load(Ordering::SeqCst), 0);
}

#[test]
fn reads_run_in_plan_mode() {
    let dir = tempfile::tempdir().unwrap();
    let (registry, tool) = registry(Echo {
        class: Some(OperationClass::Read),
        ..Default::default()
    });
    let ctx = context(dir.path(), PermissionMode::Plan, HookSet::default(), None);
    let out = registry.call("echo", json!({"text": "hi"}), &ctx).unwrap();
    assert_eq!(out.summary, "hi");
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1);
}

#[test]
fn supervised_asks_the_human_with_the_tool_summary() {
    let dir = tempfile::tempdir().unwrap();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let (registry, tool) = registry(Echo::default());
    let ctx = context(
        dir.path(),
        PermissionMode::Supervised,
        HookSet::default(),
        Some(Box::new(Approve(asked.clone(), false))),
    );
    let err = registry
        .call("echo", json!({"text": "hi"}), &ctx)
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::Denied { decided_by: Decider::Human, reason, .. } if reason == "declined in test"),
        "{err}"
    );
    assert_eq!(
        asked.lock().unwrap().as_slice(),
        ["tool `echo` (process): echo \"hi\""]
    );
    assert_eq!(tool.calls.load(Ordering::SeqCst), 0);

    let ctx = context(
        dir.path(),
        PermissionMode::Supervised,
        HookSet::default(),
        Some(Box::new(Approve(asked.clone(), true))),
    );
    registry.call("echo", json!({"text": "hi"}), &ctx).unwrap();
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_real_before_tool_use_hook_sees_the_tool_call_and_can_deny_it() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen.json");
    let script = dir.path().join("guard.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat > {}\necho '{{\"version\":1,\"decision\":\"deny\",\"reason\":\"no echo here\"}}'\n",
            seen.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let text = format!(
        "version = 1\n[[hook]]\nid = \"guard\"\non = \"before_tool_use\"\ntools = [\"echo\"]\ncommand = [\"{}\"]\ntimeout = \"10s\"\n",
        script.display()
    );
    let file = parse_hooks_file(Path::new("hooks.toml"), &text, HookScope::User).unwrap();
    let hooks = HookSet::new(Some(file), None, false);
    let (registry, tool) = registry(Echo::default());
    let ctx = context(dir.path(), PermissionMode::Bypass, hooks, None);
    let err = registry
        .call("echo", json!({"text": "hi"}), &ctx)
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::Denied { decided_by: Decider::Hook { id }, reason, .. } if id == "guard" && reason == "no echo here"),
        "{err}"
    );
    assert_eq!(tool.calls.load(Ordering::SeqCst), 0);
    let event: Value = serde_json::from_slice(&std::fs::read(&seen).unwrap()).unwrap();
    assert_eq!(event["event"], "before_tool_use");
    assert_eq!(event["payload"]["tool"], "echo");
    assert_eq!(event["payload"]["operation"], "process");
    assert_eq!(event["payload"]["input"]["text"], "hi");
    assert_eq!(event["host_labels"], json!({}));
}

#[test]
fn registry_refuses_schemas_that_accept_unknown_fields() {
    struct Loose;
    impl Tool for Loose {
        fn name(&self) -> &'static str {
            "loose"
        }
        fn description(&self) -> &'static str {
            ""
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn capability(&self) -> &'static str {
            "loose"
        }
        fn permission_requests(
            &self,
            _: &Value,
            _: &ToolContext,
        ) -> Result<Vec<ToolPermission>, ToolError> {
            Ok(vec![])
        }
        fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::new("", Value::Null))
        }
    }
    let err = ToolRegistry::builder().with(Loose).build().unwrap_err();
    assert!(err.to_string().contains("additionalProperties"), "{err}");
    let err = ToolRegistry::builder()
        .with(Echo::default())
        .with(Echo::default())
        .build()
        .unwrap_err();
    assert_eq!(err.to_string(), "tool `echo` is registered twice");
}
