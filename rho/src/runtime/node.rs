//! Agent nodes of workflows on the rho runtime: the frozen setup (system prompt, model,
//! reasoning, capabilities) becomes a session whose transcript lives in the attempt
//! directory, bounded by the node's timeout and the run's cancellation.
//!
//! Invariant: the node runs with what was frozen at plan time — the definition is not read
//! again — and only the frozen capabilities are offered as tools.

use std::path::PathBuf;

use rho_ipc::program::{Access, AgentRuntime, AgentSetup, Schema};
use rho_policy::hooks::HostLabels;
use rho_policy::{ModeSelection, ModeSource, PermissionMode};
use serde_json::{Value, json};

use super::agent_loop::{Session, SessionLimits, TurnEnd};
use super::host::{HostRequest, tool_host};
use super::provider::select::{self, ModelOverrides};
use super::provider::{ModelClient, http_client};
use super::transcript::Transcript;
use crate::agents::Reasoning;
use crate::agents::binder::BoundModel;
use crate::agents::definition::ModelPolicy;
use crate::config::Config;
use crate::paths::RhoHome;
use crate::workflow::runner::agent::{AgentExecutor, AgentRequest, AgentResult};
use crate::workflow::state::NodeState;

/// Runs agent nodes on the rho runtime.
pub struct RuntimeAgentExecutor {
    home: RhoHome,
    config: Config,
    workspace: PathBuf,
    permission_mode: PermissionMode,
}

impl std::fmt::Debug for RuntimeAgentExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeAgentExecutor")
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl RuntimeAgentExecutor {
    /// An executor for the runs of `workspace`.
    pub fn new(
        home: RhoHome,
        config: Config,
        workspace: PathBuf,
        permission_mode: PermissionMode,
    ) -> Self {
        Self {
            home,
            config,
            workspace,
            permission_mode,
        }
    }

    fn client(&self, setup: &AgentSetup) -> Result<ModelClient, String> {
        let env = |name: &str| select::process_env(name);
        let policy = match setup.model_policy.as_str() {
            "prefer" => ModelPolicy::Prefer,
            "require" => ModelPolicy::Require,
            "select" => ModelPolicy::Select,
            _ => ModelPolicy::Inherit,
        };
        let bound = match (&setup.model, policy) {
            (Some(model), p) if p != ModelPolicy::Inherit => BoundModel::Pinned {
                policy: p,
                provider: setup.provider.clone(),
                model: model.clone(),
                alias: None,
            },
            _ => BoundModel::Inherit,
        };
        let reasoning = setup.reasoning.as_deref().and_then(Reasoning::parse);
        let parent = select::conversation_model(&self.config, &ModelOverrides::default(), &env);
        let choice = select::agent_model(&self.config, &setup.id, &bound, reasoning, parent, &env)
            .map_err(|e| e.to_string())?;
        Ok(ModelClient::new(choice, http_client()?))
    }
}

/// The instruction appended to a node's prompt when its output is typed.
pub fn output_instruction(schema: &Schema) -> String {
    let schema = match schema {
        Schema::StdoutJson { schema } => schema,
        other => other,
    };
    format!(
        "\n\nWhen you are done, reply with exactly one JSON value and nothing else (no prose, \
         no code fence). It must match this JSON Schema:\n{}",
        json_schema(schema)
    )
}

/// The JSON Schema rendering of a frozen output schema.
pub fn json_schema(schema: &Schema) -> Value {
    match schema {
        Schema::Null => json!({"type": "null"}),
        Schema::Bool => json!({"type": "boolean"}),
        Schema::Integer => json!({"type": "integer"}),
        Schema::String => json!({"type": "string"}),
        Schema::Enum { members } => {
            json!({"enum": members.iter().map(rho_ipc::data::Data::to_json).collect::<Vec<_>>()})
        }
        Schema::List { items } => json!({"type": "array", "items": json_schema(items)}),
        Schema::Record { fields } => {
            let properties: serde_json::Map<String, Value> = fields
                .iter()
                .map(|(k, f)| (k.clone(), json_schema(&f.schema)))
                .collect();
            let required: Vec<&String> = fields
                .iter()
                .filter(|(_, f)| !f.optional)
                .map(|(k, _)| k)
                .collect();
            json!({"type": "object", "properties": properties, "required": required,
                   "additionalProperties": false})
        }
        Schema::StdoutJson { schema } => json_schema(schema),
    }
}

fn failure(reason: impl Into<String>) -> AgentResult {
    AgentResult {
        state: NodeState::Failure,
        reason: Some(reason.into()),
        output: None,
    }
}

impl AgentExecutor for RuntimeAgentExecutor {
    fn run(&self, request: AgentRequest) -> AgentResult {
        let Some(setup) = &request.setup else {
            return failure(format!(
                "the program has no frozen setup for agent {}; plan it again",
                request.agent
            ));
        };
        if setup.runtime != AgentRuntime::Rho {
            return failure(format!(
                "agent {} uses runtime claude-cli; this host has no claude-cli runtime",
                request.agent
            ));
        }
        let client = match self.client(setup) {
            Ok(c) => c,
            Err(e) => return failure(format!("agent {}: {e}", request.agent)),
        };
        let capabilities = setup.capabilities.iter().cloned().collect();
        let labels = HostLabels {
            workflow_run_id: Some(request.run_id.clone()),
            plan_digest: None,
            node_id: Some(request.node.clone()),
            attempt: Some(request.attempt),
        };
        let tools = match tool_host(
            &HostRequest {
                home: &self.home,
                config: &self.config,
                workspace: &self.workspace,
                capabilities: &capabilities,
                permission_mode: ModeSelection {
                    mode: self.permission_mode,
                    source: ModeSource::Flag,
                },
                no_tools: false,
                no_subagents: true,
                headless: true,
                read_only: request.access == Access::ReadOnly,
            },
            None,
            Some(labels),
            None,
        ) {
            Ok(tools) => tools,
            Err(e) => return failure(format!("agent {}: {e}", request.agent)),
        };
        let transcript = match Transcript::create(&request.attempt_dir) {
            Ok(t) => t,
            Err(e) => return failure(format!("cannot create the attempt transcript: {e}")),
        };
        let limits = SessionLimits {
            timeout: Some(request.timeout),
            ..SessionLimits::default()
        };
        let meta = json!({
            "invocation": "workflow-node",
            "run_id": request.run_id,
            "node": request.node,
            "attempt": request.attempt,
            "agent_id": setup.id,
            "agent_fingerprint": setup.fingerprint,
        });
        let session_id = format!("{}:{}:{}", request.run_id, request.node, request.attempt);
        let mut session = match Session::start(
            session_id,
            client,
            tools,
            setup.system_prompt.clone(),
            limits,
            transcript,
            meta,
        ) {
            Ok(s) => s,
            Err(e) => return failure(format!("cannot write the attempt transcript: {e}")),
        };
        let mut prompt = request.prompt.clone();
        if let Some(schema) = &request.output {
            prompt.push_str(&output_instruction(schema));
        }
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => return failure(format!("cannot start the async runtime: {e}")),
        };
        let end = runtime.block_on(session.run_turn(&prompt, &request.cancel, &mut |_| {}));
        drop(runtime);
        node_result(end, &request)
    }
}

/// The largest answer a node keeps.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Maps how the turn ended to the node's state. The raw answer is kept as `answer.txt` in
/// the attempt directory; with an output schema it must be exactly one JSON value, which the
/// runner then validates against the schema and stores as `output.json`.
fn node_result(end: TurnEnd, request: &AgentRequest) -> AgentResult {
    match end {
        TurnEnd::Completed { text } => {
            let limit = usize::try_from(request.max_output_bytes)
                .unwrap_or(usize::MAX)
                .min(MAX_ANSWER_BYTES);
            if text.len() > limit {
                return failure(format!(
                    "the answer is {} bytes, more than the {limit} bytes kept \
                     (max_output_bytes)",
                    text.len()
                ));
            }
            if let Err(e) = std::fs::write(request.attempt_dir.join("answer.txt"), &text) {
                return failure(format!("cannot store the answer: {e}"));
            }
            let output = match &request.output {
                None => None,
                Some(_) => match serde_json::from_str::<Value>(text.trim()) {
                    Ok(json) => match rho_ipc::data::Data::from_json(&json) {
                        Ok(data) => Some(data),
                        Err(e) => {
                            return failure(format!("the answer is not a valid output value: {e}"));
                        }
                    },
                    Err(e) => {
                        return failure(format!("the answer must be exactly one JSON value: {e}"));
                    }
                },
            };
            AgentResult {
                state: NodeState::Success,
                reason: None,
                output,
            }
        }
        TurnEnd::Cancelled => AgentResult {
            state: NodeState::Cancellation,
            reason: Some("cancelled; in-flight tools were stopped".to_owned()),
            output: None,
        },
        TurnEnd::TimedOut { .. } => failure(
            "timed out: the node's timeout_seconds ran out during the agent's turn; its \
             in-flight tools were stopped",
        ),
        other => failure(other.describe()),
    }
}
