//! The full authorization path of one request: policy decision, `before_tool_use` hooks,
//! then approval by a classifier and/or a human, through traits the host implements.
//!
//! Invariant: an [`Authorization`] is `allowed` only if the mode did not deny, every hook
//! continued, and — when approval was required — a classifier or human actually approved;
//! every other path (no responder, a classifier error, a hook crash) is a denial that records
//! who denied and why.
//!
//! Order of the steps, and why:
//!
//! 1. The mode's decision ([`decide`]). A policy denial ends here: hooks are not consulted,
//!    because a hook can only deny and so could not change the outcome. The same holds when
//!    approval is required but no approver can exist (headless `supervised`/`allow_edits`, or
//!    headless `auto` without a classifier): the request fails closed as a policy denial.
//! 2. The `before_tool_use` hooks, for every request that can still run — on a plain allow
//!    too. They run before approval so that nobody is asked to approve (and the classifier's
//!    denial counters do not move for) a request a hook vetoes anyway.
//! 3. Approval, only for "require approval": in `auto` the classifier first, a human after
//!    escalation; otherwise a human.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::decision::{ApprovalRoute, PolicyDecision, decide};
use crate::mode::PermissionMode;
use crate::request::{CommandRequest, OperationClass, PermissionRequest, ToolRequest};

/// A human's answer to an approval prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// Run it.
    Approve,
    /// Do not run it. The host also answers this when the prompt could not be completed
    /// (input closed, interrupted), with a reason saying so.
    Deny {
        /// The human's reason, or the host's account of why no answer came.
        reason: String,
    },
}

/// The classifier's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassifierAnswer {
    /// The request may run.
    Allow,
    /// The request may not run.
    Deny {
        /// The classifier's reason.
        reason: String,
    },
    /// The classifier could not answer (crash, timeout, malformed output); counts as a denial.
    Error {
        /// What went wrong.
        detail: String,
    },
}

/// The combined answer of the `before_tool_use` hooks for one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum HookVerdict {
    /// Every matching hook continued (or none matched).
    Continue,
    /// A hook denied, or failed and so counts as denying; the first denial wins.
    Deny {
        /// The hook's `id`.
        hook_id: String,
        /// The hook's reason or the failure that stands for it.
        reason: String,
    },
}

/// Why a human is being asked; shown in the prompt so the human knows what they decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalReason {
    /// The mode requires a human's approval for this class of operation.
    ModeRequiresApproval,
    /// `auto` mode with no classifier configured asks the human directly.
    NoClassifier,
    /// The classifier denied this request and its denials reached an escalation threshold, so
    /// a human decides instead.
    ClassifierEscalation {
        /// The classifier's reason for denying this request.
        classifier_reason: String,
        /// Consecutive classifier denials in this run, this one included.
        consecutive_denials: u32,
        /// Total classifier denials in this run, this one included.
        total_denials: u32,
    },
}

/// What the human is told besides the request itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalContext {
    /// The mode in force.
    pub mode: PermissionMode,
    /// The class of operation being approved.
    pub class: OperationClass,
    /// Why a human is asked.
    pub reason: ApprovalReason,
}

/// Asks a human (the host's terminal prompt, an MCP client's elicitation, or another
/// interactive front end).
pub trait ApprovalResponder {
    /// Asks whether `req` (a command node or a tool call) may run. Blocks until answered; any
    /// failure to get an answer is a [`ApprovalAnswer::Deny`] saying why.
    fn ask(&mut self, req: PermissionRequest<'_>, context: &ApprovalContext) -> ApprovalAnswer;
}

/// The configured classifier (an executable or a model provider).
pub trait Classifier {
    /// Judges `req` (a command node or a tool call).
    fn classify(&mut self, req: PermissionRequest<'_>) -> ClassifierAnswer;
}

/// Runs the eligible `before_tool_use` hooks in order (user file first) and reports the first
/// denial, or `Continue`.
pub trait HookRunner {
    /// Runs the hooks whose `tools` matcher accepts `req`'s tool name.
    fn before_tool_use(&mut self, req: PermissionRequest<'_>) -> HookVerdict;
}

/// The hook runner for a process with no eligible `before_tool_use` hook.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHooks;

impl HookRunner for NoHooks {
    fn before_tool_use(&mut self, _req: PermissionRequest<'_>) -> HookVerdict {
        HookVerdict::Continue
    }
}

/// The host's implementations for one authorization.
pub struct Approvers<'a> {
    /// The human approval responder; `None` when headless.
    pub responder: Option<&'a mut dyn ApprovalResponder>,
    /// The configured classifier; `None` when none is configured.
    pub classifier: Option<&'a mut dyn Classifier>,
    /// The `before_tool_use` hooks; [`NoHooks`] when there are none.
    pub hooks: &'a mut dyn HookRunner,
}

/// Classifier denial counts for one run; they decide when classifier denials escalate to a
/// human.
///
/// Escalation is not a mode switch: the classifier is still asked first, but once either count
/// reaches its limit, a classifier denial is no longer final — a human (when a responder
/// exists) decides that request. A classifier allow resets the consecutive count, so a run of
/// three denials in a row escalates until the classifier allows something again; the total
/// never resets, so after twenty denials every later denial of the run escalates. Human
/// answers do not move the counts: they measure the classifier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EscalationCounters {
    consecutive_denials: u32,
    total_denials: u32,
}

impl EscalationCounters {
    /// Consecutive classifier denials that escalate to a human.
    pub const CONSECUTIVE_LIMIT: u32 = 3;
    /// Total classifier denials in one run that escalate to a human.
    pub const TOTAL_LIMIT: u32 = 20;

    /// Fresh counters for a new run.
    pub const fn new() -> Self {
        EscalationCounters {
            consecutive_denials: 0,
            total_denials: 0,
        }
    }

    /// Classifier denials in a row since the last classifier allow.
    pub const fn consecutive_denials(&self) -> u32 {
        self.consecutive_denials
    }

    /// Classifier denials in this run.
    pub const fn total_denials(&self) -> u32 {
        self.total_denials
    }

    /// Counts a classifier denial (an error counts as one).
    pub fn record_denial(&mut self) {
        self.consecutive_denials = self.consecutive_denials.saturating_add(1);
        self.total_denials = self.total_denials.saturating_add(1);
    }

    /// Counts a classifier allow: the run of consecutive denials is over.
    pub fn record_allow(&mut self) {
        self.consecutive_denials = 0;
    }

    /// Whether a classifier denial now goes to a human.
    pub const fn is_escalated(&self) -> bool {
        self.consecutive_denials >= Self::CONSECUTIVE_LIMIT
            || self.total_denials >= Self::TOTAL_LIMIT
    }

    /// Which threshold was reached, for messages; `None` when not escalated.
    pub fn escalation_cause(&self) -> Option<String> {
        if self.consecutive_denials >= Self::CONSECUTIVE_LIMIT {
            Some(format!(
                "{} consecutive classifier denials",
                self.consecutive_denials
            ))
        } else if self.total_denials >= Self::TOTAL_LIMIT {
            Some(format!(
                "{} classifier denials in this run",
                self.total_denials
            ))
        } else {
            None
        }
    }
}

/// Who made the final decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Decider {
    /// The permission mode (including fail-closed denials for lack of an approver).
    Policy,
    /// A `before_tool_use` hook (only ever denies).
    Hook {
        /// The hook's `id`.
        id: String,
    },
    /// The classifier.
    Classifier,
    /// A human through the approval responder.
    Human,
}

impl fmt::Display for Decider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decider::Policy => f.write_str("policy"),
            Decider::Hook { id } => write!(f, "hook `{id}`"),
            Decider::Classifier => f.write_str("classifier"),
            Decider::Human => f.write_str("human"),
        }
    }
}

/// The outcome of authorizing one request; recorded in the attempt record and shown by
/// `status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Authorization {
    /// Whether the request may run.
    pub allowed: bool,
    /// Who decided; for a denial, who denied.
    pub decided_by: Decider,
    /// Why, in words fit for `status`.
    pub reason: String,
    /// The mode in force.
    pub mode: PermissionMode,
}

impl fmt::Display for Authorization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.allowed { "allowed" } else { "denied" };
        write!(
            f,
            "{verb} by {}: {} (permission mode {})",
            self.decided_by, self.reason, self.mode
        )
    }
}

/// Authorizes the requests of one run under one mode, keeping the classifier's escalation
/// counters across requests.
#[derive(Clone, Debug)]
pub struct Authorizer {
    mode: PermissionMode,
    counters: EscalationCounters,
}

impl Authorizer {
    /// A new run under `mode` (already narrowed against the frozen plan by the host).
    pub const fn new(mode: PermissionMode) -> Self {
        Authorizer {
            mode,
            counters: EscalationCounters::new(),
        }
    }

    /// Continues a run whose counters were saved.
    pub const fn with_counters(mode: PermissionMode, counters: EscalationCounters) -> Self {
        Authorizer { mode, counters }
    }

    /// The mode in force.
    pub const fn mode(&self) -> PermissionMode {
        self.mode
    }

    /// The classifier denial counters so far.
    pub const fn counters(&self) -> EscalationCounters {
        self.counters
    }

    /// Runs the full path for one `workflow_command` request (always a process).
    pub fn authorize(
        &mut self,
        req: &CommandRequest,
        approvers: &mut Approvers<'_>,
    ) -> Authorization {
        self.authorize_class(
            req.operation_class(),
            PermissionRequest::Command(req),
            approvers,
        )
    }

    /// Runs the same path for one model-facing tool call, under the class the tool states.
    /// Escalation counters are shared with command requests: they measure the classifier.
    pub fn authorize_tool(
        &mut self,
        req: &ToolRequest,
        approvers: &mut Approvers<'_>,
    ) -> Authorization {
        self.authorize_class(req.operation, PermissionRequest::Tool(req), approvers)
    }

    /// The path for any operation class. Private so a command node cannot be passed off as a
    /// cheaper class: each entry point takes the class from its own request type.
    fn authorize_class(
        &mut self,
        class: OperationClass,
        req: PermissionRequest<'_>,
        approvers: &mut Approvers<'_>,
    ) -> Authorization {
        let route = match decide(self.mode, class) {
            PolicyDecision::Deny { reason } => return self.deny(Decider::Policy, reason),
            PolicyDecision::Allow => None,
            PolicyDecision::RequireApproval { via } => Some(via),
        };

        if let Some(reason) = self.unapprovable(route, class, approvers) {
            return self.deny(Decider::Policy, reason);
        }

        if let HookVerdict::Deny { hook_id, reason } = approvers.hooks.before_tool_use(req) {
            let reason = non_empty(reason, || {
                format!("hook `{hook_id}` denied without a reason")
            });
            return self.deny(Decider::Hook { id: hook_id }, reason);
        }

        match route {
            None => self.allow(
                Decider::Policy,
                format!("permission mode {} allows {}", self.mode, class.describe()),
            ),
            Some(ApprovalRoute::Human) => {
                self.ask_human(req, class, ApprovalReason::ModeRequiresApproval, approvers)
            }
            Some(ApprovalRoute::ClassifierThenHuman) => {
                self.classifier_then_human(req, class, approvers)
            }
        }
    }

    /// When approval is required but no approver can exist, the fail-closed reason.
    fn unapprovable(
        &self,
        route: Option<ApprovalRoute>,
        class: OperationClass,
        approvers: &Approvers<'_>,
    ) -> Option<String> {
        let has_responder = approvers.responder.is_some();
        let has_classifier = approvers.classifier.is_some();
        let what = class.describe();
        match route {
            Some(ApprovalRoute::Human) if !has_responder => Some(format!(
                "permission mode {} requires approval for {what} and no approval responder is \
                 available (headless runs fail closed)",
                self.mode
            )),
            Some(ApprovalRoute::ClassifierThenHuman) if !has_responder && !has_classifier => {
                Some(format!(
                    "permission mode {} requires approval for {what}; no classifier is \
                     configured and no approval responder is available (headless runs fail \
                     closed)",
                    self.mode
                ))
            }
            _ => None,
        }
    }

    fn classifier_then_human(
        &mut self,
        req: PermissionRequest<'_>,
        class: OperationClass,
        approvers: &mut Approvers<'_>,
    ) -> Authorization {
        let Some(classifier) = approvers.classifier.as_deref_mut() else {
            return self.ask_human(req, class, ApprovalReason::NoClassifier, approvers);
        };
        let denial = match classifier.classify(req) {
            ClassifierAnswer::Allow => {
                self.counters.record_allow();
                return self.allow(
                    Decider::Classifier,
                    format!("classifier allowed {}", class.describe()),
                );
            }
            ClassifierAnswer::Deny { reason } => {
                non_empty(reason, || "classifier denied without a reason".to_owned())
            }
            ClassifierAnswer::Error { detail } => format!("classifier failed: {detail}"),
        };
        self.counters.record_denial();
        let Some(cause) = self.counters.escalation_cause() else {
            return self.deny(Decider::Classifier, denial);
        };
        if approvers.responder.is_none() {
            return self.deny(
                Decider::Classifier,
                format!(
                    "{denial}; escalation to a human after {cause} needs an approval responder \
                     and none is available"
                ),
            );
        }
        let reason = ApprovalReason::ClassifierEscalation {
            classifier_reason: denial,
            consecutive_denials: self.counters.consecutive_denials(),
            total_denials: self.counters.total_denials(),
        };
        self.ask_human(req, class, reason, approvers)
    }

    fn ask_human(
        &self,
        req: PermissionRequest<'_>,
        class: OperationClass,
        reason: ApprovalReason,
        approvers: &mut Approvers<'_>,
    ) -> Authorization {
        let Some(responder) = approvers.responder.as_deref_mut() else {
            // Callers check for a responder first; failing closed keeps this total anyway.
            return self.deny(
                Decider::Policy,
                format!(
                    "permission mode {} requires approval for {} and no approval responder is \
                     available (headless runs fail closed)",
                    self.mode,
                    class.describe()
                ),
            );
        };
        let escalated = matches!(reason, ApprovalReason::ClassifierEscalation { .. });
        let context = ApprovalContext {
            mode: self.mode,
            class,
            reason,
        };
        match responder.ask(req, &context) {
            ApprovalAnswer::Approve if escalated => self.allow(
                Decider::Human,
                "approved by a human after the classifier denied it".to_owned(),
            ),
            ApprovalAnswer::Approve => self.allow(Decider::Human, "approved by a human".to_owned()),
            ApprovalAnswer::Deny { reason } => self.deny(
                Decider::Human,
                non_empty(reason, || "denied by a human".to_owned()),
            ),
        }
    }

    fn allow(&self, decided_by: Decider, reason: String) -> Authorization {
        Authorization {
            allowed: true,
            decided_by,
            reason,
            mode: self.mode,
        }
    }

    fn deny(&self, decided_by: Decider, reason: String) -> Authorization {
        Authorization {
            allowed: false,
            decided_by,
            reason,
            mode: self.mode,
        }
    }
}

fn non_empty(reason: String, fallback: impl FnOnce() -> String) -> String {
    if reason.trim().is_empty() {
        fallback()
    } else {
        reason
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::tests::sample_request;
    use OperationClass::{OtherWrite, Process, TrackedWorkspaceEdit};
    use PermissionMode::{AllowEdits, Auto, Bypass, Plan, Supervised};

    /// A responder that answers from a script and records what it was asked.
    #[derive(Default)]
    struct ScriptedHuman {
        approve: bool,
        asked: Vec<ApprovalContext>,
    }

    impl ApprovalResponder for ScriptedHuman {
        fn ask(
            &mut self,
            _req: PermissionRequest<'_>,
            context: &ApprovalContext,
        ) -> ApprovalAnswer {
            self.asked.push(context.clone());
            if self.approve {
                ApprovalAnswer::Approve
            } else {
                ApprovalAnswer::Deny {
                    reason: "not today".to_owned(),
                }
            }
        }
    }

    /// A classifier answering from a queue (panics if asked more than scripted).
    struct ScriptedClassifier {
        answers: std::collections::VecDeque<ClassifierAnswer>,
        calls: usize,
    }

    impl ScriptedClassifier {
        fn new(answers: impl IntoIterator<Item = ClassifierAnswer>) -> Self {
            ScriptedClassifier {
                answers: answers.into_iter().collect(),
                calls: 0,
            }
        }
    }

    impl Classifier for ScriptedClassifier {
        fn classify(&mut self, _req: PermissionRequest<'_>) -> ClassifierAnswer {
            self.calls += 1;
            self.answers
                .pop_front()
                .expect("classifier asked more often than scripted")
        }
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum HookCase {
        Continues,
        Denies,
        Crashes,
    }

    struct ScriptedHooks {
        case: HookCase,
        calls: usize,
    }

    impl HookRunner for ScriptedHooks {
        fn before_tool_use(&mut self, _req: PermissionRequest<'_>) -> HookVerdict {
            self.calls += 1;
            match self.case {
                HookCase::Continues => HookVerdict::Continue,
                HookCase::Denies => HookVerdict::Deny {
                    hook_id: "guard".to_owned(),
                    reason: "no make on fridays".to_owned(),
                },
                // What the host reports for a hook process killed by a signal.
                HookCase::Crashes => crate::hooks::hook_verdict(
                    "guard",
                    &crate::hooks::HookRun::Signaled { signal: 11 },
                ),
            }
        }
    }

    fn deny_classifier(reason: &str) -> ClassifierAnswer {
        ClassifierAnswer::Deny {
            reason: reason.to_owned(),
        }
    }

    /// Expected outcome when the hook continues.
    #[derive(Clone, Copy, Debug)]
    enum Expect {
        /// Allowed by this decider; the hook was consulted.
        Allowed(fn() -> Decider),
        /// Denied by policy before the hook (hook not consulted).
        PolicyDenied,
    }

    fn policy() -> Decider {
        Decider::Policy
    }
    fn human() -> Decider {
        Decider::Human
    }

    /// mode × class × responder present/absent, when the hook continues; no classifier is
    /// configured (classifier paths are tested below).
    const TABLE: [(PermissionMode, OperationClass, Expect, Expect); 15] = [
        // mode, class, with an approving responder, headless
        (
            Bypass,
            TrackedWorkspaceEdit,
            Expect::Allowed(policy),
            Expect::Allowed(policy),
        ),
        (
            Bypass,
            OtherWrite,
            Expect::Allowed(policy),
            Expect::Allowed(policy),
        ),
        (
            Bypass,
            Process,
            Expect::Allowed(policy),
            Expect::Allowed(policy),
        ),
        (
            Auto,
            TrackedWorkspaceEdit,
            Expect::Allowed(policy),
            Expect::Allowed(policy),
        ),
        (
            Auto,
            OtherWrite,
            Expect::Allowed(human),
            Expect::PolicyDenied,
        ),
        (Auto, Process, Expect::Allowed(human), Expect::PolicyDenied),
        (
            AllowEdits,
            TrackedWorkspaceEdit,
            Expect::Allowed(policy),
            Expect::Allowed(policy),
        ),
        (
            AllowEdits,
            OtherWrite,
            Expect::Allowed(human),
            Expect::PolicyDenied,
        ),
        (
            AllowEdits,
            Process,
            Expect::Allowed(human),
            Expect::PolicyDenied,
        ),
        (
            Plan,
            TrackedWorkspaceEdit,
            Expect::PolicyDenied,
            Expect::PolicyDenied,
        ),
        (Plan, OtherWrite, Expect::PolicyDenied, Expect::PolicyDenied),
        (Plan, Process, Expect::PolicyDenied, Expect::PolicyDenied),
        (
            Supervised,
            TrackedWorkspaceEdit,
            Expect::Allowed(human),
            Expect::PolicyDenied,
        ),
        (
            Supervised,
            OtherWrite,
            Expect::Allowed(human),
            Expect::PolicyDenied,
        ),
        (
            Supervised,
            Process,
            Expect::Allowed(human),
            Expect::PolicyDenied,
        ),
    ];

    #[test]
    fn every_mode_class_responder_and_hook_combination() {
        let req = sample_request();
        let mut checked = 0;
        for (mode, class, with_responder, headless) in TABLE {
            for (has_responder, expect) in [(true, with_responder), (false, headless)] {
                for hook in [HookCase::Continues, HookCase::Denies, HookCase::Crashes] {
                    let label = format!("{mode} × {class} × responder={has_responder} × {hook:?}");
                    let mut human = ScriptedHuman {
                        approve: true,
                        ..Default::default()
                    };
                    let mut hooks = ScriptedHooks {
                        case: hook,
                        calls: 0,
                    };
                    let mut approvers = Approvers {
                        responder: if has_responder {
                            Some(&mut human)
                        } else {
                            None
                        },
                        classifier: None,
                        hooks: &mut hooks,
                    };
                    let got = Authorizer::new(mode).authorize_class(
                        class,
                        PermissionRequest::Command(&req),
                        &mut approvers,
                    );
                    assert_eq!(got.mode, mode, "{label}");
                    match expect {
                        Expect::PolicyDenied => {
                            assert!(!got.allowed, "{label}: {got}");
                            assert_eq!(got.decided_by, Decider::Policy, "{label}");
                            assert_eq!(hooks.calls, 0, "{label}: hook consulted after policy deny");
                            assert!(human.asked.is_empty(), "{label}");
                        }
                        Expect::Allowed(decider) => {
                            assert_eq!(hooks.calls, 1, "{label}: hook must run");
                            if hook == HookCase::Continues {
                                assert!(got.allowed, "{label}: {got}");
                                assert_eq!(got.decided_by, decider(), "{label}");
                                assert_eq!(
                                    human.asked.len(),
                                    usize::from(decider() == Decider::Human)
                                );
                            } else {
                                assert!(!got.allowed, "{label}: {got}");
                                assert_eq!(got.decided_by, Decider::Hook { id: "guard".into() });
                                assert!(human.asked.is_empty(), "{label}: asked after hook deny");
                            }
                        }
                    }
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 5 * 3 * 2 * 3);
    }

    #[test]
    fn plan_denies_process_execution_with_reason() {
        let mut hooks = NoHooks;
        let mut human = ScriptedHuman {
            approve: true,
            ..Default::default()
        };
        let mut approvers = Approvers {
            responder: Some(&mut human),
            classifier: None,
            hooks: &mut hooks,
        };
        let got = Authorizer::new(Plan).authorize(&sample_request(), &mut approvers);
        assert!(!got.allowed);
        assert_eq!(got.decided_by, Decider::Policy);
        assert_eq!(got.reason, "permission mode plan forbids process execution");
        assert_eq!(
            got.to_string(),
            "denied by policy: permission mode plan forbids process execution (permission mode \
             plan)"
        );
        assert!(human.asked.is_empty());
    }

    /// A hook runner that records the tool names it was asked about.
    #[derive(Default)]
    struct RecordingHooks {
        seen: Vec<(String, OperationClass)>,
        deny: bool,
    }

    impl HookRunner for RecordingHooks {
        fn before_tool_use(&mut self, req: PermissionRequest<'_>) -> HookVerdict {
            self.seen
                .push((req.tool_name().to_owned(), req.operation_class()));
            if self.deny {
                HookVerdict::Deny {
                    hook_id: "guard".to_owned(),
                    reason: "no servers today".to_owned(),
                }
            } else {
                HookVerdict::Continue
            }
        }
    }

    #[test]
    fn tool_reads_are_allowed_in_plan_and_still_seen_by_hooks() {
        use crate::request::tests::sample_tool_request;
        let mut hooks = RecordingHooks::default();
        let mut approvers = Approvers {
            responder: None,
            classifier: None,
            hooks: &mut hooks,
        };
        let req = sample_tool_request(OperationClass::Read);
        let got = Authorizer::new(Plan).authorize_tool(&req, &mut approvers);
        assert!(got.allowed, "{got}");
        assert_eq!(got.decided_by, Decider::Policy);
        assert_eq!(
            hooks.seen,
            vec![("process".to_owned(), OperationClass::Read)]
        );
    }

    #[test]
    fn tool_calls_take_the_same_path_as_command_nodes() {
        use crate::request::tests::sample_tool_request;
        let req = sample_tool_request(Process);
        // plan: denied by policy, hooks not consulted.
        let mut hooks = RecordingHooks::default();
        let mut approvers = Approvers {
            responder: None,
            classifier: None,
            hooks: &mut hooks,
        };
        let got = Authorizer::new(Plan).authorize_tool(&req, &mut approvers);
        assert_eq!(
            (got.allowed, got.decided_by.clone(), got.reason.as_str()),
            (
                false,
                Decider::Policy,
                "permission mode plan forbids process execution"
            )
        );
        assert!(hooks.seen.is_empty());
        // bypass: a hook can still deny.
        let mut hooks = RecordingHooks {
            deny: true,
            ..Default::default()
        };
        let mut approvers = Approvers {
            responder: None,
            classifier: None,
            hooks: &mut hooks,
        };
        let got = Authorizer::new(Bypass).authorize_tool(&req, &mut approvers);
        assert!(!got.allowed);
        assert_eq!(got.decided_by, Decider::Hook { id: "guard".into() });
        // supervised: the human is asked with the tool's class.
        let mut hooks = RecordingHooks::default();
        let mut human = ScriptedHuman {
            approve: false,
            ..Default::default()
        };
        let mut approvers = Approvers {
            responder: Some(&mut human),
            classifier: None,
            hooks: &mut hooks,
        };
        let got = Authorizer::new(Supervised).authorize_tool(&req, &mut approvers);
        assert_eq!((got.allowed, got.decided_by), (false, Decider::Human));
        assert_eq!(human.asked[0].class, Process);
        // headless supervised fails closed.
        let mut approvers = Approvers {
            responder: None,
            classifier: None,
            hooks: &mut hooks,
        };
        let got = Authorizer::new(Supervised).authorize_tool(&req, &mut approvers);
        assert!(!got.allowed);
        assert!(got.reason.contains("no approval responder"), "{got}");
    }

    #[test]
    fn headless_supervised_denial_says_why() {
        let mut hooks = NoHooks;
        let mut approvers = Approvers {
            responder: None,
            classifier: None,
            hooks: &mut hooks,
        };
        let got = Authorizer::new(Supervised).authorize(&sample_request(), &mut approvers);
        assert!(!got.allowed);
        assert_eq!(got.decided_by, Decider::Policy);
        assert!(
            got.reason
                .contains("supervised requires approval for process execution"),
            "{got}"
        );
        assert!(got.reason.contains("no approval responder"), "{got}");
    }

    #[test]
    fn human_denial_records_human_and_reason() {
        let mut hooks = NoHooks;
        let mut human = ScriptedHuman {
            approve: false,
            ..Default::default()
        };
        let mut approvers = Approvers {
            responder: Some(&mut human),
            classifier: None,
            hooks: &mut hooks,
        };
        let got = Authorizer::new(AllowEdits).authorize(&sample_request(), &mut approvers);
        assert!(!got.allowed);
        assert_eq!(got.decided_by, Decider::Human);
        assert_eq!(got.reason, "not today");
        assert_eq!(human.asked[0].reason, ApprovalReason::ModeRequiresApproval);
        assert_eq!(human.asked[0].class, Process);
    }

    #[test]
    fn auto_without_classifier_asks_human_directly() {
        let mut hooks = NoHooks;
        let mut human = ScriptedHuman {
            approve: true,
            ..Default::default()
        };
        let mut approvers = Approvers {
            responder: Some(&mut human),
            classifier: None,
            hooks: &mut hooks,
        };
        let got = Authorizer::new(Auto).authorize(&sample_request(), &mut approvers);
        assert!(got.allowed);
        assert_eq!(got.decided_by, Decider::Human);
        assert_eq!(human.asked[0].reason, ApprovalReason::NoClassifier);
    }

    #[test]
    fn auto_classifier_allow_needs_no_human_even_headless() {
        let mut hooks = NoHooks;
        let mut classifier = ScriptedClassifier::new([ClassifierAnswer::Allow]);
        let mut approvers = Approvers {
            responder: None,
            classifier: Some(&mut classifier),
            hooks: &mut hooks,
        };
        let got = Authorizer::new(Auto).authorize(&sample_request(), &mut approvers);
        assert!(got.allowed, "{got}");
        assert_eq!(got.decided_by, Decider::Classifier);
    }

    #[test]
    fn hook_denial_comes_before_the_classifier_and_moves_no_counter() {
        let mut hooks = ScriptedHooks {
            case: HookCase::Denies,
            calls: 0,
        };
        let mut classifier = ScriptedClassifier::new([]);
        let mut approvers = Approvers {
            responder: None,
            classifier: Some(&mut classifier),
            hooks: &mut hooks,
        };
        let mut authorizer = Authorizer::new(Auto);
        let got = authorizer.authorize(&sample_request(), &mut approvers);
        assert_eq!(got.decided_by, Decider::Hook { id: "guard".into() });
        assert_eq!(got.reason, "no make on fridays");
        assert_eq!(classifier.calls, 0);
        assert_eq!(authorizer.counters(), EscalationCounters::new());
    }

    #[test]
    fn crashed_hook_denies_naming_the_hook() {
        let mut hooks = ScriptedHooks {
            case: HookCase::Crashes,
            calls: 0,
        };
        let mut approvers = Approvers {
            responder: None,
            classifier: None,
            hooks: &mut hooks,
        };
        let got = Authorizer::new(Bypass).authorize(&sample_request(), &mut approvers);
        assert!(!got.allowed);
        assert_eq!(got.decided_by, Decider::Hook { id: "guard".into() });
        assert!(got.reason.contains("signal 11"), "{got}");
    }

    /// Runs `answers.len()` requests through one authorizer in `auto`.
    fn run_auto(
        answers: Vec<ClassifierAnswer>,
        responder: Option<&mut ScriptedHuman>,
    ) -> (Vec<Authorization>, Authorizer) {
        let n = answers.len();
        let mut classifier = ScriptedClassifier::new(answers);
        let mut hooks = NoHooks;
        let mut approvers = Approvers {
            responder: responder.map(|h| h as &mut dyn ApprovalResponder),
            classifier: Some(&mut classifier),
            hooks: &mut hooks,
        };
        let mut authorizer = Authorizer::new(Auto);
        let req = sample_request();
        let results = (0..n)
            .map(|_| authorizer.authorize(&req, &mut approvers))
            .collect();
        (results, authorizer)
    }

    #[test]
    fn third_consecutive_classifier_denial_goes_to_the_human() {
        let mut human = ScriptedHuman {
            approve: true,
            ..Default::default()
        };
        let answers = vec![
            deny_classifier("a"),
            deny_classifier("b"),
            deny_classifier("c"),
        ];
        let (results, authorizer) = run_auto(answers, Some(&mut human));
        assert_eq!(results[0].decided_by, Decider::Classifier);
        assert!(!results[0].allowed);
        assert_eq!(results[0].reason, "a");
        assert_eq!(results[1].decided_by, Decider::Classifier);
        assert!(!results[1].allowed);
        assert!(results[2].allowed, "{}", results[2]);
        assert_eq!(results[2].decided_by, Decider::Human);
        assert_eq!(
            results[2].reason,
            "approved by a human after the classifier denied it"
        );
        assert_eq!(
            human.asked,
            vec![ApprovalContext {
                mode: Auto,
                class: Process,
                reason: ApprovalReason::ClassifierEscalation {
                    classifier_reason: "c".to_owned(),
                    consecutive_denials: 3,
                    total_denials: 3,
                },
            }]
        );
        assert_eq!(authorizer.counters().consecutive_denials(), 3);
    }

    #[test]
    fn escalated_human_denial_is_recorded_as_human() {
        let mut human = ScriptedHuman {
            approve: false,
            ..Default::default()
        };
        let answers = vec![
            deny_classifier("a"),
            deny_classifier("b"),
            deny_classifier("c"),
        ];
        let (results, _) = run_auto(answers, Some(&mut human));
        assert!(!results[2].allowed);
        assert_eq!(results[2].decided_by, Decider::Human);
        assert_eq!(results[2].reason, "not today");
    }

    #[test]
    fn classifier_allow_resets_the_consecutive_count() {
        let mut human = ScriptedHuman {
            approve: true,
            ..Default::default()
        };
        let answers = vec![
            deny_classifier("1"),
            deny_classifier("2"),
            ClassifierAnswer::Allow,
            deny_classifier("3"),
            deny_classifier("4"),
            deny_classifier("5"),
        ];
        let (results, authorizer) = run_auto(answers, Some(&mut human));
        let deciders: Vec<_> = results
            .iter()
            .map(|r| (r.allowed, r.decided_by.clone()))
            .collect();
        assert_eq!(
            deciders,
            vec![
                (false, Decider::Classifier),
                (false, Decider::Classifier),
                (true, Decider::Classifier),
                (false, Decider::Classifier),
                (false, Decider::Classifier),
                (true, Decider::Human),
            ]
        );
        assert_eq!(human.asked.len(), 1);
        assert_eq!(authorizer.counters().total_denials(), 5);
    }

    #[test]
    fn twentieth_total_denial_escalates_and_stays_escalated() {
        let mut human = ScriptedHuman {
            approve: true,
            ..Default::default()
        };
        // deny, deny, allow repeated: never three in a row.
        let mut answers = Vec::new();
        for i in 0..10 {
            answers.push(deny_classifier(&format!("d{i}a")));
            answers.push(deny_classifier(&format!("d{i}b")));
            answers.push(ClassifierAnswer::Allow);
        }
        answers.push(deny_classifier("after"));
        let (results, authorizer) = run_auto(answers, Some(&mut human));
        let human_decided: Vec<usize> = results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.decided_by == Decider::Human)
            .map(|(i, _)| i)
            .collect();
        // The 20th denial is request index 28; the one after the final allow is index 30.
        assert_eq!(human_decided, vec![28, 30]);
        assert_eq!(authorizer.counters().total_denials(), 21);
        assert_eq!(authorizer.counters().consecutive_denials(), 1);
        assert!(authorizer.counters().is_escalated());
        assert!(matches!(
            human.asked[0].reason,
            ApprovalReason::ClassifierEscalation {
                total_denials: 20,
                consecutive_denials: 2,
                ..
            }
        ));
    }

    #[test]
    fn escalation_without_responder_denies_as_classifier_and_says_so() {
        let answers = vec![
            deny_classifier("a"),
            ClassifierAnswer::Error {
                detail: "timed out after 5s".to_owned(),
            },
            deny_classifier("c"),
        ];
        let (results, authorizer) = run_auto(answers, None);
        assert!(
            results
                .iter()
                .all(|r| !r.allowed && r.decided_by == Decider::Classifier)
        );
        assert_eq!(results[1].reason, "classifier failed: timed out after 5s");
        assert_eq!(
            results[2].reason,
            "c; escalation to a human after 3 consecutive classifier denials needs an approval \
             responder and none is available"
        );
        assert_eq!(authorizer.counters().consecutive_denials(), 3);
    }

    #[test]
    fn counters_persist_when_authorizer_is_rebuilt() {
        let mut counters = EscalationCounters::new();
        counters.record_denial();
        counters.record_denial();
        let json = serde_json::to_string(&counters).unwrap();
        let restored: EscalationCounters = serde_json::from_str(&json).unwrap();
        let mut human = ScriptedHuman {
            approve: true,
            ..Default::default()
        };
        let mut classifier = ScriptedClassifier::new([deny_classifier("x")]);
        let mut hooks = NoHooks;
        let mut approvers = Approvers {
            responder: Some(&mut human),
            classifier: Some(&mut classifier),
            hooks: &mut hooks,
        };
        let got =
            Authorizer::with_counters(Auto, restored).authorize(&sample_request(), &mut approvers);
        assert_eq!(got.decided_by, Decider::Human);
    }

    #[test]
    fn counters_thresholds() {
        let mut c = EscalationCounters::new();
        assert!(!c.is_escalated());
        assert_eq!(c.escalation_cause(), None);
        c.record_denial();
        c.record_denial();
        assert!(!c.is_escalated());
        c.record_denial();
        assert!(c.is_escalated());
        assert_eq!(
            c.escalation_cause().unwrap(),
            "3 consecutive classifier denials"
        );
        c.record_allow();
        assert!(!c.is_escalated());
        assert_eq!(c.total_denials(), 3);
    }

    #[test]
    fn empty_reasons_are_replaced_with_who_denied() {
        struct Silent;
        impl HookRunner for Silent {
            fn before_tool_use(&mut self, _req: PermissionRequest<'_>) -> HookVerdict {
                HookVerdict::Deny {
                    hook_id: "quiet".into(),
                    reason: String::new(),
                }
            }
        }
        let mut human = ScriptedHuman::default();
        let mut hooks = NoHooks;
        let mut classifier = ScriptedClassifier::new([deny_classifier("  ")]);
        let mut approvers = Approvers {
            responder: Some(&mut human),
            classifier: Some(&mut classifier),
            hooks: &mut hooks,
        };
        let got = Authorizer::new(Auto).authorize(&sample_request(), &mut approvers);
        assert_eq!(got.reason, "classifier denied without a reason");

        let mut approvers = Approvers {
            responder: None,
            classifier: None,
            hooks: &mut Silent,
        };
        let got = Authorizer::new(Bypass).authorize(&sample_request(), &mut approvers);
        assert_eq!(got.reason, "hook `quiet` denied without a reason");
    }

    #[test]
    fn authorization_serializes_who_denied() {
        let auth = Authorization {
            allowed: false,
            decided_by: Decider::Hook { id: "guard".into() },
            reason: "nope".into(),
            mode: AllowEdits,
        };
        let json = serde_json::to_value(&auth).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "allowed": false,
                "decided_by": {"kind": "hook", "id": "guard"},
                "reason": "nope",
                "mode": "allow_edits",
            })
        );
        assert_eq!(serde_json::from_value::<Authorization>(json).unwrap(), auth);
    }
}
