//! `rho mcp`: serves the tool registry over the Model Context Protocol on stdio (`rmcp`).
//!
//! Invariant: a confirmation (running an exact program digest) or an approval is granted only
//! when the client answered an elicitation with an explicit `accept` that checks the consent
//! box; a decline, a cancel, an error, a timeout, a missing elicitation capability or no
//! session all refuse. Tool calls run on blocking threads through the same registry and
//! permission path as every other front end; when stdin closes, the server stops what it
//! started (background workflow runs are cancelled through the store) before it exits.

// Logging notifications are deprecated for the 2026 protocol revision but are how the
// 2025-11-25 clients served here receive notices (completion of background runs).
#![allow(deprecated)]

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rho_policy::{
    ApprovalAnswer, ApprovalContext, ApprovalResponder, ModeSelection, PermissionMode,
    PermissionRequest,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, DiscoverResult,
    ElicitRequestParams, ElicitationAction, ElicitationSchema, Implementation, ListToolsResult,
    LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool as McpTool,
};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::{Value, json};
use tokio::runtime::Handle;

use crate::tools::{
    CancelToken, ConfirmAnswer, ConfirmRequest, ToolContext, ToolHost, ToolNotice, ToolRegistry,
};

/// How long a person gets to answer a confirmation before it counts as refused.
pub const ELICITATION_TIMEOUT: Duration = Duration::from_mins(5);

/// The protocol revisions served: up to `2025-11-25`, what current clients negotiate through
/// `initialize` (Claude Code 2.1, the Python SDK). The `2026-07-28` inline lifecycle forbids
/// server-to-client requests, which consent by elicitation needs, so it is not offered.
pub fn supported_versions() -> &'static [ProtocolVersion] {
    ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25)
}

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpServeError {
    /// The async runtime could not be built.
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    /// The client never completed the `initialize` handshake (or stdin closed first).
    #[error("the MCP handshake failed: {0}")]
    Handshake(String),
    /// The session ended abnormally.
    #[error("the MCP session ended abnormally: {0}")]
    Session(String),
}

/// The client session as the blocking tool threads see it: the peer (set once the client
/// initialized) and the runtime to reach it from.
#[derive(Clone)]
pub struct McpHost {
    peer: Arc<Mutex<Option<Peer<RoleServer>>>>,
    runtime: Handle,
    timeout: Duration,
}

impl std::fmt::Debug for McpHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHost")
            .field("connected", &self.peer().is_some())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The outcome of one elicitation, in words fit for a refusal.
fn elicit_consent(host: &McpHost, message: String) -> Result<(), String> {
    let Some(peer) = host.peer() else {
        return Err("no MCP client session is connected to ask".to_owned());
    };
    if peer
        .peer_info()
        .is_none_or(|info| info.capabilities.elicitation.is_none())
    {
        return Err(
            "the MCP client did not declare the elicitation capability, so no one can be asked \
             (confirmation fails closed)"
                .to_owned(),
        );
    }
    if !peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        return Err(
            "the MCP client does not support form elicitation, so no one can be asked \
             (confirmation fails closed)"
                .to_owned(),
        );
    }
    let schema: ElicitationSchema = ElicitationSchema::builder()
        .required_bool_with("confirm", |b| {
            b.title("I consent")
                .description("Check to consent; anything else refuses.")
        })
        .description("Consent to exactly what is described, once.")
        .build_unchecked();
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    };
    let answer = host.runtime.block_on(async move {
        peer.create_elicitation_with_timeout(params, Some(host.timeout))
            .await
    });
    match answer {
        Ok(result) => match result.action {
            ElicitationAction::Accept => {
                let confirmed = result
                    .content
                    .as_ref()
                    .and_then(|c| c.get("confirm"))
                    .and_then(Value::as_bool)
                    == Some(true);
                if confirmed {
                    Ok(())
                } else {
                    Err(
                        "the client accepted without checking `confirm`, which is not consent"
                            .to_owned(),
                    )
                }
            }
            ElicitationAction::Decline => Err("the user declined the confirmation".to_owned()),
            ElicitationAction::Cancel => Err(
                "the client cancelled the confirmation (a non-interactive client such as \
                 `claude -p` cancels every question, since no person can answer)"
                    .to_owned(),
            ),
            other => Err(format!(
                "the client answered `{other:?}`, which is not an explicit accept"
            )),
        },
        Err(err) => Err(format!(
            "the confirmation could not be completed ({err}), so it counts as refused"
        )),
    }
}

impl McpHost {
    /// A host reaching the client through the peer set later with [`McpHost::connect`].
    pub fn new(runtime: Handle) -> Self {
        McpHost {
            peer: Arc::new(Mutex::new(None)),
            runtime,
            timeout: ELICITATION_TIMEOUT,
        }
    }

    /// Records the client session (after `initialize`).
    pub fn connect(&self, peer: Peer<RoleServer>) {
        *self.peer.lock().unwrap_or_else(PoisonError::into_inner) = Some(peer);
    }

    fn peer(&self) -> Option<Peer<RoleServer>> {
        self.peer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl ToolHost for McpHost {
    fn confirm(&self, request: &ConfirmRequest) -> ConfirmAnswer {
        let message = format!("{}\n\n{}", request.question, request.detail);
        match elicit_consent(self, message) {
            Ok(()) => ConfirmAnswer::Accepted,
            Err(reason) => ConfirmAnswer::Refused { reason },
        }
    }

    fn notify(&self, notice: ToolNotice) {
        let Some(peer) = self.peer() else {
            tracing::warn!(kind = %notice.kind, "no MCP client to notify");
            return;
        };
        let mut data = json!({
            "tool": notice.tool,
            "kind": notice.kind,
            "summary": notice.summary,
        });
        data["result"] = notice.structured;
        let param = LoggingMessageNotificationParam::new(LoggingLevel::Notice, data)
            .with_logger(format!("rho.{}", notice.tool));
        self.runtime.spawn(async move {
            if let Err(err) = peer.notify_logging_message(param).await {
                tracing::warn!(error = %err, "cannot deliver a notice to the MCP client");
            }
        });
    }

    fn approval_responder(&self) -> Option<Box<dyn ApprovalResponder + Send>> {
        Some(Box::new(ElicitationResponder { host: self.clone() }))
    }
}

/// Asks the MCP client's user to approve one request (the "require approval" step).
struct ElicitationResponder {
    host: McpHost,
}

impl ApprovalResponder for ElicitationResponder {
    fn ask(&mut self, req: PermissionRequest<'_>, context: &ApprovalContext) -> ApprovalAnswer {
        let message = format!(
            "Approve {} under permission mode {}?\n\n{req}\n\nApproval covers this one \
             request only.",
            context.class.describe(),
            context.mode
        );
        match elicit_consent(&self.host, message) {
            Ok(()) => ApprovalAnswer::Approve,
            Err(reason) => ApprovalAnswer::Deny { reason },
        }
    }
}

/// The MCP server: the registry and the context every call starts from.
pub struct McpServer {
    registry: Arc<ToolRegistry>,
    base: ToolContext,
    host: McpHost,
    instructions: String,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

/// The server instructions: what the tools are for and the permission mode in force.
pub fn instructions(registry: &ToolRegistry, mode: ModeSelection, workspace: &str) -> String {
    let consequence = match mode.mode {
        PermissionMode::Bypass => {
            "every operation is allowed without asking (before_tool_use hooks still run)"
        }
        PermissionMode::Auto => {
            "reads and tracked edits are allowed; process execution is judged by the configured \
             classifier, then by you"
        }
        PermissionMode::AllowEdits => {
            "reads and tracked edits are allowed; process execution needs your approval"
        }
        PermissionMode::Plan => {
            "only reads are allowed: validate, plan and status work; run, resume, cancel and \
             processes are denied"
        }
        PermissionMode::Supervised => "reads are allowed; everything else needs your approval",
    };
    format!(
        "rho serves {} for the workspace {workspace}. Permission mode: {} ({}): {consequence}. \
         Running a workflow plan asks you to confirm its exact program digest (decline, \
         cancel or no answer refuses). Runs start in the background; their completion is sent \
         as a notification and is visible through the workflow tool's status action.",
        registry.names().join(" and "),
        mode.mode,
        mode.source,
    )
}

impl McpServer {
    /// A server for `registry`; `base` carries the workspace, mode and authorizer, and its
    /// host must be `host`.
    pub fn new(registry: Arc<ToolRegistry>, base: ToolContext, host: McpHost) -> Self {
        let instructions = instructions(
            &registry,
            base.mode(),
            &base.workspace().display().to_string(),
        );
        McpServer {
            registry,
            base,
            host,
            instructions,
        }
    }

    /// Serves on this process's stdin and stdout until the client closes stdin.
    pub async fn serve_stdio(self) -> Result<(), McpServeError> {
        let host = self.host.clone();
        let transport = rmcp::transport::io::stdio_pipes();
        let running = self
            .serve(transport)
            .await
            .map_err(|e| McpServeError::Handshake(e.to_string()))?;
        host.connect(running.peer().clone());
        let quit = running
            .waiting()
            .await
            .map_err(|e| McpServeError::Session(e.to_string()))?;
        tracing::info!(?quit, "MCP session ended");
        Ok(())
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_logging()
                .build(),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
        .with_server_info(
            Implementation::new("rho", env!("CARGO_PKG_VERSION")).with_title("rho workflows"),
        )
        .with_instructions(self.instructions.clone())
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(supported_versions())
    }

    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        // Notices are always sent at `notice` level; the requested level changes nothing.
        Ok(())
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        // The inline (2026-07-28) lifecycle is not served; the client falls back to
        // `initialize` on this error.
        Err(McpError::method_not_found::<
            rmcp::model::DiscoverRequestMethod,
        >())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.host.connect(context.peer.clone());
        let tools = self
            .registry
            .specs()
            .into_iter()
            .map(|spec| {
                let schema = match spec.input_schema {
                    Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                McpTool::new(spec.name, spec.description, Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.host.connect(context.peer.clone());
        let name = request.name.to_string();
        if self.registry.get(&name).is_none() {
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool `{name}`; available: {}",
                    self.registry.names().join(", ")
                ),
                None,
            ));
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let cancel = CancelToken::new();
        let ctx = self.base.clone().with_cancel(cancel.clone());
        let limit = self.base.summary_limit();
        let registry = Arc::clone(&self.registry);
        // The client may cancel the request (`notifications/cancelled`): the blocking call
        // sees it through its token.
        let request_ct = context.ct.clone();
        let watcher_cancel = cancel.clone();
        let watcher = tokio::spawn(async move {
            request_ct.cancelled().await;
            watcher_cancel.cancel();
        });
        let joined = tokio::task::spawn_blocking(move || registry.call(&name, args, &ctx)).await;
        watcher.abort();
        let result = match joined {
            Ok(Ok(output)) => {
                let structured = model_facing_structured(output.structured, &output.summary, limit);
                let mut result = CallToolResult::success(vec![ContentBlock::text(output.summary)]);
                result.structured_content = structured;
                result
            }
            Ok(Err(error)) => {
                let mut result = CallToolResult::error(vec![ContentBlock::text(error.to_string())]);
                result.structured_content = Some(error.to_json());
                result
            }
            Err(join) => {
                return Err(McpError::internal_error(
                    format!("the tool call did not complete: {join}"),
                    None,
                ));
            }
        };
        Ok(CallToolResponse::from(result))
    }
}

/// The structured content of a successful result, carrying the summary too.
///
/// Claude Code gives its model only `JSON.stringify(structuredContent)` when a result has
/// one, never the text block, so the line-oriented summary travels inside it as `summary`
/// (unless the tool already uses that key). When the whole document would exceed the summary
/// byte limit, only the summary and the top-level scalar members (ids, states, digests) are
/// kept, and `omitted` names the members left out: what reaches a model stays within the
/// summary's own bound (plus its JSON escaping and a few short members), whichever part of a
/// result a client forwards. A non-object result has no structured content.
fn model_facing_structured(structured: Value, summary: &str, limit: usize) -> Option<Value> {
    let Value::Object(mut members) = structured else {
        return None;
    };
    members
        .entry("summary")
        .or_insert_with(|| Value::from(summary));
    let whole = Value::Object(members);
    if encodes_within(&whole, limit) {
        return Some(whole);
    }
    let Value::Object(members) = whole else {
        return None;
    };
    let mut kept = serde_json::Map::new();
    let mut omitted = Vec::new();
    for (key, value) in members {
        let small = match &value {
            Value::Null | Value::Bool(_) | Value::Number(_) => true,
            Value::String(text) => key == "summary" || text.len() <= 512,
            Value::Array(_) | Value::Object(_) => false,
        };
        if small {
            kept.insert(key, value);
        } else {
            omitted.push(Value::from(key));
        }
    }
    kept.insert("omitted".to_owned(), Value::Array(omitted));
    Some(Value::Object(kept))
}

/// Whether `value` encodes (compact) in at most `limit` bytes. Encoding stops at the limit:
/// a 1,000-node run's status is many times larger than the limit, and encoding all of it
/// only to learn that was a tenth of the call.
fn encodes_within(value: &Value, limit: usize) -> bool {
    /// Counts bytes and refuses any past its room.
    struct Room(usize);
    impl std::io::Write for Room {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = self
                .0
                .checked_sub(bytes.len())
                .ok_or_else(|| std::io::Error::other("over the limit"))?;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(Room(limit), value).is_ok()
}

#[cfg(test)]
mod structured_tests {
    use serde_json::json;

    use super::model_facing_structured;

    #[test]
    fn the_summary_travels_in_the_structured_content() {
        let got = model_facing_structured(json!({"plan_id": "p1"}), "plan_id: p1\n", 1000);
        assert_eq!(
            got,
            Some(json!({"plan_id": "p1", "summary": "plan_id: p1\n"}))
        );
    }

    #[test]
    fn a_tool_summary_member_is_kept() {
        let got = model_facing_structured(json!({"summary": "theirs"}), "ours", 1000);
        assert_eq!(got, Some(json!({"summary": "theirs"})));
    }

    #[test]
    fn the_limit_is_the_encoded_length_exactly() {
        use super::encodes_within;
        let value = json!({"a": "b\n", "c": [1, null, {"d": true}]});
        let len = serde_json::to_string(&value).unwrap().len();
        assert!(encodes_within(&value, len));
        assert!(!encodes_within(&value, len - 1));
        assert!(!encodes_within(&value, 0));
        assert!(encodes_within(&json!({}), 2));
    }

    #[test]
    fn non_objects_have_no_structured_content() {
        assert_eq!(model_facing_structured(json!(null), "s", 1000), None);
        assert_eq!(model_facing_structured(json!([1, 2]), "s", 1000), None);
    }

    #[test]
    fn an_oversized_document_keeps_the_summary_and_scalars_and_names_what_it_left_out() {
        let nodes: Vec<_> = (0..200).map(|i| json!({"id": format!("n{i}")})).collect();
        let structured = json!({
            "run_id": "r1",
            "outcome": "success",
            "exit": 0,
            "nodes": nodes,
            "exports": {"a": 1},
            "long": "x".repeat(600),
        });
        let got =
            model_facing_structured(structured, "run_id: r1\noutcome: success\n", 1000).unwrap();
        assert_eq!(
            got,
            json!({
                "run_id": "r1",
                "outcome": "success",
                "exit": 0,
                "summary": "run_id: r1\noutcome: success\n",
                "omitted": ["exports", "long", "nodes"],
            })
        );
        assert!(got.to_string().len() <= 1000);
    }

    #[test]
    fn the_edge_of_the_limit_keeps_the_whole_document() {
        let structured = json!({"a": "b"});
        let whole = json!({"a": "b", "summary": "s"}).to_string().len();
        let kept = model_facing_structured(structured.clone(), "s", whole).unwrap();
        assert_eq!(kept["a"], "b");
        let cut = model_facing_structured(json!({"a": ["b"]}), "s", 5).unwrap();
        assert_eq!(cut["omitted"], json!(["a"]));
    }
}
