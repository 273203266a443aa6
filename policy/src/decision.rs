//! The decision table of `policy.md`: permission mode × operation class → policy decision.
//!
//! Invariant: [`decide`] is total and pure; reads are allowed in every mode; otherwise `plan`
//! denies everything, `bypass` allows everything, and no other mode allows anything but tracked
//! workspace edits without approval.

use serde::{Deserialize, Serialize};

use crate::mode::PermissionMode;
use crate::request::OperationClass;

/// Who is asked when policy requires approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalRoute {
    /// A human, through the host's approval responder.
    Human,
    /// The configured classifier first; a human after repeated classifier denials (or
    /// directly when no classifier is configured).
    ClassifierThenHuman,
}

/// What the mode alone says about one operation, before approval and hooks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum PolicyDecision {
    /// The operation may proceed (hooks still run).
    Allow,
    /// The operation is refused outright; no one is asked.
    Deny {
        /// Why, naming the mode and the operation.
        reason: String,
    },
    /// The operation may proceed only if approved.
    RequireApproval {
        /// Who approves.
        via: ApprovalRoute,
    },
}

/// The policy decision for `class` under `mode`.
pub fn decide(mode: PermissionMode, class: OperationClass) -> PolicyDecision {
    use OperationClass::{Read, TrackedWorkspaceEdit};
    match (mode, class) {
        (_, Read)
        | (PermissionMode::Bypass, _)
        | (PermissionMode::Auto | PermissionMode::AllowEdits, TrackedWorkspaceEdit) => {
            PolicyDecision::Allow
        }
        (PermissionMode::Auto, _) => PolicyDecision::RequireApproval {
            via: ApprovalRoute::ClassifierThenHuman,
        },
        (PermissionMode::AllowEdits | PermissionMode::Supervised, _) => {
            PolicyDecision::RequireApproval {
                via: ApprovalRoute::Human,
            }
        }
        (PermissionMode::Plan, _) => PolicyDecision::Deny {
            reason: format!("permission mode plan forbids {}", class.describe()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OperationClass::{OtherWrite, Process, Read, TrackedWorkspaceEdit};
    use PermissionMode::{AllowEdits, Auto, Bypass, Plan, Supervised};

    fn approval(via: ApprovalRoute) -> PolicyDecision {
        PolicyDecision::RequireApproval { via }
    }

    #[test]
    fn table_matches_policy_md() {
        let human = approval(ApprovalRoute::Human);
        let classifier = approval(ApprovalRoute::ClassifierThenHuman);
        let expected = [
            (Bypass, TrackedWorkspaceEdit, PolicyDecision::Allow),
            (Bypass, OtherWrite, PolicyDecision::Allow),
            (Bypass, Process, PolicyDecision::Allow),
            (Auto, TrackedWorkspaceEdit, PolicyDecision::Allow),
            (Auto, OtherWrite, classifier.clone()),
            (Auto, Process, classifier),
            (AllowEdits, TrackedWorkspaceEdit, PolicyDecision::Allow),
            (AllowEdits, OtherWrite, human.clone()),
            (AllowEdits, Process, human.clone()),
            (Supervised, TrackedWorkspaceEdit, human.clone()),
            (Supervised, OtherWrite, human.clone()),
            (Supervised, Process, human),
        ];
        for (mode, class, want) in expected {
            assert_eq!(decide(mode, class), want, "{mode} × {class}");
        }
        for class in OperationClass::ALL {
            if class == Read {
                continue;
            }
            assert!(
                matches!(decide(Plan, class), PolicyDecision::Deny { .. }),
                "plan × {class}"
            );
        }
    }

    #[test]
    fn reads_are_allowed_in_every_mode() {
        for mode in PermissionMode::ALL {
            assert_eq!(decide(mode, Read), PolicyDecision::Allow, "{mode}");
        }
    }

    #[test]
    fn plan_denial_says_plan_forbids_process_execution() {
        let PolicyDecision::Deny { reason } = decide(Plan, Process) else {
            panic!("plan must deny");
        };
        assert_eq!(reason, "permission mode plan forbids process execution");
    }

    #[test]
    fn wider_mode_never_decides_more_strictly() {
        // Rank decisions: deny < human approval < classifier approval < allow.
        fn rank(d: &PolicyDecision) -> u8 {
            match d {
                PolicyDecision::Deny { .. } => 0,
                PolicyDecision::RequireApproval {
                    via: ApprovalRoute::Human,
                } => 1,
                PolicyDecision::RequireApproval {
                    via: ApprovalRoute::ClassifierThenHuman,
                } => 2,
                PolicyDecision::Allow => 3,
            }
        }
        for class in OperationClass::ALL {
            for pair in PermissionMode::ALL.windows(2) {
                assert!(
                    rank(&decide(pair[0], class)) <= rank(&decide(pair[1], class)),
                    "{} vs {} for {class}",
                    pair[0],
                    pair[1]
                );
            }
        }
    }
}
