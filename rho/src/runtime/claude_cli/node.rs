//! Agent nodes whose frozen setup says `claude-cli`: the launch data is rebuilt from the
//! confirmed program's setup (never from the definition file as it is now), the run reports
//! into a run directory inside the attempt directory (so `rho attach` can follow the node), and
//! an output schema asks for exactly one JSON value as the final answer.
//!
//! Invariant: the node succeeds only when the `result` message reported success and, with an
//! output schema, the answer parses as exactly one JSON value; the runner then validates it
//! against the schema. Supervised and allow-edits modes refuse before anything is spawned.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rho_ipc::data::Data;
use rho_ipc::program::{AgentRuntime, AgentSetup};
use rho_policy::PermissionMode;

use super::{ClaudeRunRequest, run_claude};
use crate::agents::binder::{ClaudeLaunch, ClaudePrompt};
use crate::agents::{ClaudeToolEntry, Reasoning};
use crate::paths::RhoHome;
use crate::runtime::delegation::rundir::RunDirectory;
use crate::runtime::delegation::status::{RunRuntime, RunState, RunStatus};
use crate::workflow::runner::agent::{AgentExecutor, AgentRequest, AgentResult};
use crate::workflow::state::NodeState;
use crate::workflow::store::fs::PrivateDir;

/// The Claude tool that never reaches the child (nested subagents escape rho's pools).
const TASK: &str = "Task";

/// What every claude-cli node of one run shares.
#[derive(Debug, Clone)]
pub struct ClaudeNodeContext {
    /// The data directory (run index, observed limits).
    pub home: RhoHome,
    /// The workspace Claude works in.
    pub workspace: PathBuf,
    /// The permission mode the run is under.
    pub mode: PermissionMode,
    /// The child's environment (see [`super::environment::child_environment`]).
    pub env: Vec<(OsString, OsString)>,
    /// Wall-clock limit of one attempt, when the node has one.
    pub timeout: Option<Duration>,
}

/// Rebuilds the claude-cli launch data from a frozen setup under `mode`.
pub fn launch_from_setup(
    setup: &AgentSetup,
    mode: PermissionMode,
    max_turns: Option<u32>,
) -> Result<ClaudeLaunch, String> {
    if setup.runtime != AgentRuntime::ClaudeCli {
        return Err(format!("agent `{}` does not run on claude-cli", setup.id));
    }
    let permission_mode = match mode {
        PermissionMode::Plan => "plan",
        PermissionMode::Auto | PermissionMode::Bypass => "dontAsk",
        PermissionMode::Supervised | PermissionMode::AllowEdits => {
            return Err(format!(
                "agent `{}` runs on claude-cli, which cannot ask for approval under `claude -p`; \
                 permission mode {mode} refuses to spawn it (use plan or auto)",
                setup.id
            ));
        }
    };
    let mut tools: Vec<String> = Vec::new();
    let mut allowed_tools = Vec::new();
    for entry in &setup.capabilities {
        let parsed = ClaudeToolEntry::parse(entry)
            .map_err(|e| format!("agent `{}`: frozen tool entry {e}", setup.id))?;
        if parsed.base == TASK {
            continue;
        }
        if !tools.contains(&parsed.base) {
            tools.push(parsed.base.clone());
        }
        allowed_tools.push(entry.clone());
    }
    let prompt = match (setup.prompt_policy.as_str(), setup.system_prompt.is_empty()) {
        ("replace", _) => ClaudePrompt::Replace(setup.system_prompt.clone()),
        (_, true) => ClaudePrompt::None,
        (_, false) => ClaudePrompt::Append(setup.system_prompt.clone()),
    };
    let effort = match setup.reasoning.as_deref() {
        None => None,
        Some(text) => Some(Reasoning::parse(text).ok_or_else(|| {
            format!(
                "agent `{}`: frozen reasoning `{text}` is not a level",
                setup.id
            )
        })?),
    };
    Ok(ClaudeLaunch {
        permission_mode,
        tools,
        allowed_tools,
        setting_sources: if setup.inherit_claude_config {
            "user,project,local"
        } else {
            "project"
        },
        prompt,
        model: setup.model.clone(),
        effort,
        max_turns,
        inherit_claude_config: setup.inherit_claude_config,
        withheld: Vec::new(),
    })
}

fn result(state: NodeState, reason: impl Into<String>) -> AgentResult {
    AgentResult {
        state,
        reason: Some(reason.into()),
        output: None,
    }
}

/// Runs one attempt of a claude-cli agent node to its end.
pub fn run_claude_node(ctx: &ClaudeNodeContext, request: &AgentRequest) -> AgentResult {
    let Some(setup) = &request.setup else {
        return result(
            NodeState::Failure,
            format!(
                "agent `{}` has no frozen setup in the program",
                request.agent
            ),
        );
    };
    let launch = match launch_from_setup(setup, ctx.mode, None) {
        Ok(launch) => launch,
        Err(why)
            if matches!(
                ctx.mode,
                PermissionMode::Supervised | PermissionMode::AllowEdits
            ) =>
        {
            return result(NodeState::Denial, why);
        }
        Err(why) => return result(NodeState::Failure, why),
    };
    let run = match open_run(&ctx.home, &request.attempt_dir, setup) {
        Ok(run) => run,
        Err(why) => return result(NodeState::Failure, why),
    };
    let status = RunStatus::starting(&setup.id, Some(&setup.fingerprint), RunRuntime::ClaudeCli);
    let outcome = run_claude(
        &ctx.home,
        &run,
        status,
        &ClaudeRunRequest {
            launch: &launch,
            prompt: &request.prompt,
            cwd: &ctx.workspace,
            env: ctx.env.clone(),
            cancel: request.cancel.clone(),
            timeout: Some(
                ctx.timeout
                    .map_or(request.timeout, |t| t.min(request.timeout)),
            ),
        },
    );
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => {
            return result(
                NodeState::Failure,
                format!("claude-cli run {}: {e}", run.id()),
            );
        }
    };
    let status = outcome.status;
    match status.state {
        RunState::Ok => {
            let answer = status.result.unwrap_or_default();
            if request.output.is_none() {
                return AgentResult {
                    state: NodeState::Success,
                    reason: None,
                    output: None,
                };
            }
            match parse_single_json(&answer) {
                Ok(value) => AgentResult {
                    state: NodeState::Success,
                    reason: None,
                    output: Some(value),
                },
                Err(why) => result(NodeState::Failure, why),
            }
        }
        RunState::Stopped => result(
            NodeState::Cancellation,
            status.error.unwrap_or_else(|| "cancelled".to_owned()),
        ),
        RunState::Error | RunState::Starting | RunState::Running => result(
            NodeState::Failure,
            status
                .error
                .unwrap_or_else(|| "the claude-cli run did not finish".to_owned()),
        ),
    }
}

fn open_run(
    home: &RhoHome,
    attempt_dir: &Path,
    setup: &AgentSetup,
) -> Result<RunDirectory, String> {
    let parent = PrivateDir::open_home(attempt_dir, false)
        .map_err(|e| format!("cannot open the attempt directory: {e}"))?
        .ok_or_else(|| format!("the attempt directory {} is missing", attempt_dir.display()))?;
    let status = RunStatus::starting(&setup.id, Some(&setup.fingerprint), RunRuntime::ClaudeCli);
    RunDirectory::create(home, Some(&parent), &status)
        .map_err(|e| format!("cannot create the claude-cli run directory: {e}"))
}

/// The final answer as exactly one JSON value (surrounding whitespace allowed), converted to
/// workflow data; anything else is an error that shows the start of the answer.
pub fn parse_single_json(answer: &str) -> Result<Data, String> {
    let value: serde_json::Value = serde_json::from_str(answer.trim()).map_err(|e| {
        let start: String = answer.trim().chars().take(120).collect();
        format!(
            "the final answer must be exactly one JSON value matching the output schema \
             ({e}); it began: {start:?}"
        )
    })?;
    Data::from_json(&value).map_err(|e| format!("the final answer is not workflow data: {e}"))
}

/// The agent executor of a workflow run: claude-cli nodes run here, every other runtime goes
/// to `rest`.
pub struct ClaudeCliExecutor {
    ctx: ClaudeNodeContext,
    rest: std::sync::Arc<dyn AgentExecutor>,
}

impl std::fmt::Debug for ClaudeCliExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaudeCliExecutor")
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

impl ClaudeCliExecutor {
    /// Runs claude-cli nodes with `ctx`, and hands the others to `rest`.
    pub fn new(ctx: ClaudeNodeContext, rest: std::sync::Arc<dyn AgentExecutor>) -> Self {
        ClaudeCliExecutor { ctx, rest }
    }
}

impl AgentExecutor for ClaudeCliExecutor {
    fn run(&self, request: AgentRequest) -> AgentResult {
        let claude = request
            .setup
            .as_ref()
            .is_some_and(|s| s.runtime == AgentRuntime::ClaudeCli);
        if claude {
            run_claude_node(&self.ctx, &request)
        } else {
            self.rest.run(request)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rho_ipc::program::AgentSource;

    fn setup() -> AgentSetup {
        AgentSetup {
            id: "planner".into(),
            source: AgentSource::Builtin,
            fingerprint: "sha256:00".into(),
            runtime: AgentRuntime::ClaudeCli,
            prompt_policy: "extend".into(),
            system_prompt: "Be brief.".into(),
            model_policy: "select".into(),
            model: Some("opus".into()),
            provider: None,
            reasoning: Some("high".into()),
            capabilities: vec!["Bash(git *)".into(), "Read".into(), "Task".into()],
            read_only: false,
            inherit_claude_config: false,
        }
    }

    #[test]
    fn frozen_setup_rebuilds_the_launch() {
        let launch = launch_from_setup(&setup(), PermissionMode::Auto, Some(3)).unwrap();
        assert_eq!(launch.permission_mode, "dontAsk");
        assert_eq!(launch.tools, ["Bash", "Read"]);
        assert_eq!(launch.allowed_tools, ["Bash(git *)", "Read"]);
        assert_eq!(launch.prompt, ClaudePrompt::Append("Be brief.".into()));
        assert_eq!(launch.effort, Some(Reasoning::High));
        assert_eq!(launch.setting_sources, "project");
        assert_eq!(launch.max_turns, Some(3));
    }

    #[test]
    fn supervised_and_allow_edits_refuse_before_spawn() {
        for mode in [PermissionMode::Supervised, PermissionMode::AllowEdits] {
            let err = launch_from_setup(&setup(), mode, None).unwrap_err();
            assert!(err.contains("refuses to spawn"), "{err}");
        }
        assert_eq!(
            launch_from_setup(&setup(), PermissionMode::Plan, None)
                .unwrap()
                .permission_mode,
            "plan"
        );
    }

    #[test]
    fn the_answer_must_be_exactly_one_json_value() {
        assert!(parse_single_json(" {\"verdict\": \"approve\"}\n").is_ok());
        let err = parse_single_json("Here it is: {\"a\": 1}").unwrap_err();
        assert!(err.contains("exactly one JSON value"), "{err}");
        assert!(parse_single_json("{\"a\":1} {\"b\":2}").is_err());
    }
}
