//! `agent` and `agents`: delegation for the rho runtime. `agent` hands a self-contained task to
//! a fresh child agent of the catalog and waits for its final result (or, in interactive
//! sessions, starts it in the background and returns its run id at once); `agents` lists,
//! inspects, stops and messages the children of this session.
//!
//! Invariant: both tools work only through the session's
//! [`DelegationManager`](crate::runtime::delegation::manager::DelegationManager), which binds
//! every child as a delegated invocation (no `agent`/`agents` of its own, the parent's
//! permission mode, its own tools, cancellation, usage and run directory). A child's own actions
//! go through its own permission path; delegating is stated as a read so hooks see it.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::runtime::delegation::manager::{DelegateError, DelegationManager};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, ToolPermission, parse_args};

const AGENT: &str = "agent";
const AGENTS: &str = "agents";

fn delegate_error(tool: &str, err: DelegateError) -> ToolError {
    match err {
        DelegateError::UnknownAgent { .. } => ToolError::invalid(tool, "agent_id", err.to_string()),
        DelegateError::BackgroundUnavailable => {
            ToolError::invalid(tool, "background", err.to_string())
        }
        DelegateError::UnknownRun { .. } => ToolError::invalid(tool, "id", err.to_string()),
        DelegateError::BadMessage { .. } => ToolError::invalid(tool, "message", err.to_string()),
        other => ToolError::failed(tool, other.to_string()),
    }
}

/// The `agent` tool.
#[derive(Debug, Clone)]
pub struct AgentTool {
    manager: DelegationManager,
}

impl AgentTool {
    /// The tool over `manager`.
    pub fn new(manager: DelegationManager) -> Self {
        AgentTool { manager }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentArgs {
    agent_id: String,
    prompt: String,
    #[serde(default)]
    background: bool,
}

impl Tool for AgentTool {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn description(&self) -> &'static str {
        "Delegate a substantial, self-contained task to a fresh agent from the catalog (the \
         `agent_id` field lists them). The child starts with no memory of this conversation: \
         put every fact it needs in `prompt`. It cannot delegate further and keeps this \
         session's permission mode. A call waits for the child's final result; independent \
         agent calls issued in the same step run together. Where `background` is offered, \
         `background: true` returns a run id at once and the result arrives as a notification \
         before a later step; then end your turn instead of polling."
    }

    fn input_schema(&self) -> Value {
        let agents = self.manager.agents();
        let listing = agents
            .iter()
            .map(|(id, description)| format!("{id}: {description}"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut properties = json!({
            "agent_id": {
                "type": "string",
                "enum": agents.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(),
                "description": format!("The agent to run. Agents:\n{listing}"),
            },
            "prompt": {
                "type": "string",
                "minLength": 1,
                "description": "The self-contained task and all the context the agent needs.",
            },
        });
        if self.manager.background_allowed() {
            properties["background"] = json!({
                "type": "boolean",
                "description": "Start the run and return its id at once instead of waiting; \
                                the result is delivered later as a notification.",
            });
        }
        json!({
            "type": "object",
            "properties": properties,
            "required": ["agent_id", "prompt"],
            "additionalProperties": false,
        })
    }

    fn capability(&self) -> &'static str {
        AGENT
    }

    fn permission_requests(
        &self,
        args: &Value,
        _ctx: &ToolContext,
    ) -> Result<Vec<ToolPermission>, ToolError> {
        let args: AgentArgs = parse_args(AGENT, args)?;
        Ok(vec![ToolPermission::read(format!(
            "delegate to agent `{}`{}",
            args.agent_id,
            if args.background {
                " in the background"
            } else {
                ""
            }
        ))])
    }

    fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: AgentArgs = parse_args(AGENT, &args)?;
        if args.prompt.trim().is_empty() {
            return Err(ToolError::invalid(AGENT, "prompt", "the prompt is empty"));
        }
        let started = self
            .manager
            .spawn(
                &args.agent_id,
                &args.prompt,
                args.background,
                Some(std::sync::Arc::clone(ctx.host())),
            )
            .map_err(|e| delegate_error(AGENT, e))?;
        if args.background {
            return Ok(ToolOutput::new(
                format!(
                    "agent {id} ({agent}) started in background\nattach: rho attach {id}\n",
                    id = started.id,
                    agent = started.agent_id
                ),
                json!({"id": started.id, "agent_id": started.agent_id, "background": true}),
            ));
        }
        let (text, ok) = self
            .manager
            .wait(&started.id, ctx.cancel())
            .map_err(|e| delegate_error(AGENT, e))?;
        if ctx.cancel().is_cancelled() {
            return Err(ToolError::Cancelled {
                tool: AGENT.to_owned(),
            });
        }
        if ok {
            Ok(ToolOutput::new(
                text,
                json!({"id": started.id, "agent_id": started.agent_id, "state": "ok"}),
            ))
        } else {
            Err(ToolError::failed(AGENT, text))
        }
    }
}

/// The `agents` tool.
#[derive(Debug, Clone)]
pub struct AgentsTool {
    manager: DelegationManager,
}

impl AgentsTool {
    /// The tool over `manager`.
    pub fn new(manager: DelegationManager) -> Self {
        AgentsTool { manager }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentsArgs {
    action: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

impl AgentsArgs {
    fn id(&self) -> Result<&str, ToolError> {
        self.id.as_deref().ok_or_else(|| {
            ToolError::invalid(
                AGENTS,
                "id",
                format!("action `{}` needs the run id", self.action),
            )
        })
    }
}

impl Tool for AgentsTool {
    fn name(&self) -> &'static str {
        AGENTS
    }

    fn description(&self) -> &'static str {
        "List, check on, stop, or message the agents this session delegated to. `list` shows \
         every run; `status` reports progress of a running child (never its partial output) \
         or the whole result of a finished one; `stop` cancels a child and returns what it \
         reached; `message` sends a running rho child plain text it reads before its next \
         model request. Background results arrive on their own: to wait, end your turn."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {
                    "type": "string",
                    "enum": ["list", "status", "stop", "message"],
                    "description": "What to do.",
                },
                "id": {
                    "type": "string",
                    "description": "The run id (status, stop, message).",
                },
                "message": {
                    "type": "string",
                    "description": "Plain text for the child (message; at most 8 KiB).",
                },
            },
            "required": ["action"],
            "additionalProperties": false,
        })
    }

    fn capability(&self) -> &'static str {
        AGENTS
    }

    fn permission_requests(
        &self,
        args: &Value,
        _ctx: &ToolContext,
    ) -> Result<Vec<ToolPermission>, ToolError> {
        let args: AgentsArgs = parse_args(AGENTS, args)?;
        let target = args
            .id
            .as_deref()
            .map(|id| format!(" `{id}`"))
            .unwrap_or_default();
        Ok(vec![ToolPermission::read(format!(
            "{} delegated run{target}",
            args.action
        ))])
    }

    fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: AgentsArgs = parse_args(AGENTS, &args)?;
        let (text, structured) = match args.action.as_str() {
            "list" => (self.manager.list(), json!({"action": "list"})),
            "status" => {
                let id = args.id()?;
                let text = self
                    .manager
                    .status(id)
                    .map_err(|e| delegate_error(AGENTS, e))?;
                (text, json!({"action": "status", "id": id}))
            }
            "stop" => {
                let id = args.id()?;
                let (text, _) = self
                    .manager
                    .stop(id)
                    .map_err(|e| delegate_error(AGENTS, e))?;
                (text, json!({"action": "stop", "id": id}))
            }
            "message" => {
                let id = args.id()?;
                let message = args.message.as_deref().ok_or_else(|| {
                    ToolError::invalid(AGENTS, "message", "action `message` needs `message`")
                })?;
                self.manager
                    .message(id, message)
                    .map_err(|e| delegate_error(AGENTS, e))?;
                (
                    format!("queued the message for delegated run `{id}`"),
                    json!({"action": "message", "id": id}),
                )
            }
            other => {
                return Err(ToolError::invalid(
                    AGENTS,
                    "action",
                    format!("unknown action `{other}`: expected list, status, stop or message"),
                ));
            }
        };
        let mut text = text;
        if !text.ends_with('\n') {
            text.push('\n');
        }
        Ok(ToolOutput::new(text, structured))
    }
}
