//! The model-facing tool layer: the [`Tool`] trait every tool implements, the [`ToolRegistry`]
//! front ends call, and the one permission path tool calls share with workflow nodes.
//!
//! Invariant: a tool's [`Tool::call`] runs only after its arguments passed its JSON Schema
//! (unknown fields rejected) and every permission request it stated for those arguments was
//! allowed by the same `rho_policy::Authorizer` path command nodes take — mode, then
//! `before_tool_use` hooks, then classifier or human. A denial returns
//! [`ToolError::Denied`] naming who denied and why, and nothing runs.
//!
//! # Writing a tool
//!
//! A tool is a type implementing [`Tool`], usually in its own module (`tools/process.rs`,
//! `tools/workflow.rs`, ...). Everything is synchronous: a tool blocks its thread, and async
//! front ends (the MCP server, the agent loop) call the registry from `spawn_blocking`. A tool
//! that may block for long (waiting for output, a child process, a lock) polls
//! [`ToolContext::cancel`] between steps or sleeps with [`CancelToken::wait`], and returns
//! [`ToolError::Cancelled`] when it fires.
//!
//! 1. [`Tool::name`], [`Tool::description`]: what the model sees. Names are lowercase
//!    `snake_case` and unique in a registry.
//! 2. [`Tool::input_schema`]: a JSON Schema (draft 2020-12) of the argument object. It must be
//!    `"type": "object"` with `"additionalProperties": false` (the registry refuses to
//!    register anything else), so an unknown field is an error naming it. The registry
//!    validates every call against it before anything else happens; errors name the field
//!    (`inputs.target`). Rules the schema cannot express (a field only allowed with one
//!    action) are checked in [`Tool::permission_requests`] or [`Tool::call`] with
//!    [`ToolError::invalid`]. [`parse_args`] turns the validated `Value` into a typed struct.
//! 3. [`Tool::capability`]: the capability name an agent must hold to be given the tool
//!    (`process`, `workflow`, `read_file`, ...; see `agents::definition::RHO_CAPABILITIES`).
//! 4. [`Tool::permission_requests`]: for validated arguments, what the call would do, as
//!    [`ToolPermission`]s: the operation class (a read — allowed in every mode —, a tracked
//!    workspace edit, another write, process execution), a one-line summary a person can
//!    judge, and optionally the working directory and the input hooks see. State the class
//!    honestly: it is what policy decides on. A call that only reads still states a
//!    [`OperationClass::Read`] request so `before_tool_use` hooks see it. Return several
//!    requests when a call does several things; each must be allowed.
//! 5. [`Tool::call`]: does the work and returns a [`ToolOutput`]: a model-facing text
//!    `summary` (bounded by [`ToolContext::summary_limit`]; see [`summary`]) and a
//!    `structured` JSON value for clients that read structure. Failures are [`ToolError`]s.
//!
//! Register tools with [`ToolRegistry::builder`]; call them with [`ToolRegistry::call`], which
//! runs the whole path.
//!
//! Workspace tools touch the workspace only through [`workspace`] (no symbolic link followed,
//! atomic writes) and run processes only through their own bounded launchers.

pub mod agent;
pub mod apply_patch;
pub mod bash;
pub mod context;
pub mod edit_file;
pub mod error;
pub mod glob;
pub mod grep;
pub mod list_dir;
pub mod process;
pub mod read_file;
pub mod summary;
pub mod workflow;
pub mod workspace;
pub mod write_file;

use std::collections::BTreeMap;
use std::sync::Arc;

use rho_policy::{OperationClass, ToolRequest};
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use context::{
    CancelToken, ConfirmAnswer, ConfirmRequest, DEFAULT_SUMMARY_LIMIT, HeadlessHost, ToolContext,
    ToolHost, ToolNotice,
};
pub use error::ToolError;

/// The workspace tools, in name order: `apply_patch`, `bash`, `edit_file`, `glob`, `grep`,
/// `list_dir`, `read_file`, `write_file`. Front ends register the ones a session's binding
/// granted.
pub fn workspace_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(apply_patch::ApplyPatch),
        Arc::new(bash::Bash::default()),
        Arc::new(edit_file::EditFile),
        Arc::new(glob::Glob),
        Arc::new(grep::Grep),
        Arc::new(list_dir::ListDir),
        Arc::new(read_file::ReadFile),
        Arc::new(write_file::WriteFile),
    ]
}

/// The largest argument document the registry accepts, in bytes of its JSON form; bigger
/// calls are refused before validation (the bound also caps what hooks are sent).
pub const MAX_ARGUMENT_BYTES: usize = 256 * 1024;

/// One model-facing tool. See the module docs for how to write one.
pub trait Tool: Send + Sync {
    /// The name the model calls: lowercase `snake_case`, unique in a registry.
    fn name(&self) -> &'static str;

    /// What the tool does and when to use it, for the model.
    fn description(&self) -> &'static str;

    /// JSON Schema of the argument object: `"type": "object"` with
    /// `"additionalProperties": false`.
    fn input_schema(&self) -> Value;

    /// The capability an agent must hold to be given this tool.
    fn capability(&self) -> &'static str;

    /// The permission requests a call with `args` (already valid against the schema) makes.
    /// Each is authorized in order; the first denial stops the call before it runs.
    fn permission_requests(
        &self,
        args: &Value,
        ctx: &ToolContext,
    ) -> Result<Vec<ToolPermission>, ToolError>;

    /// Performs the call. Only reached once every request was allowed.
    fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;
}

/// One thing a tool call asks permission for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolPermission {
    /// What kind of effect it has; policy decides on it.
    pub operation: OperationClass,
    /// One line a person can judge: ``start `npm run dev` ``.
    pub summary: String,
    /// Where it acts; the workspace root when `None`.
    pub working_directory: Option<std::path::PathBuf>,
    /// What hooks and the classifier inspect; the call's arguments when `None`.
    pub input: Option<Value>,
}

impl ToolPermission {
    /// A request of `operation` described by `summary`, in the workspace, showing the call's
    /// arguments to hooks.
    pub fn new(operation: OperationClass, summary: impl Into<String>) -> Self {
        ToolPermission {
            operation,
            summary: summary.into(),
            working_directory: None,
            input: None,
        }
    }

    /// A read of what `summary` says (allowed in every mode; hooks still see it).
    pub fn read(summary: impl Into<String>) -> Self {
        Self::new(OperationClass::Read, summary)
    }
}

/// What a successful call returns.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    /// Text for the model, within the summary limit.
    pub summary: String,
    /// The same result as structured JSON.
    pub structured: Value,
}

impl ToolOutput {
    /// An output from its two forms.
    pub fn new(summary: impl Into<String>, structured: Value) -> Self {
        ToolOutput {
            summary: summary.into(),
            structured,
        }
    }
}

/// A tool's public description, for MCP `tools/list` and the agent runtime's tool list.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: &'static str,
    /// Its description.
    pub description: &'static str,
    /// Its argument schema.
    pub input_schema: Value,
    /// The capability it needs.
    pub capability: &'static str,
}

/// Deserializes validated arguments into a tool's typed argument struct; a mismatch the
/// schema let through becomes an argument error naming the field serde reports.
pub fn parse_args<T: DeserializeOwned>(tool: &str, args: &Value) -> Result<T, ToolError> {
    T::deserialize(args).map_err(|err| {
        let message = err.to_string();
        // serde's messages name fields as "unknown field `x`" / "missing field `x`".
        let field = message
            .split('`')
            .nth(1)
            .filter(|_| message.contains("field `"))
            .unwrap_or("(arguments)")
            .to_owned();
        ToolError::invalid(tool, field, message)
    })
}

struct Registered {
    tool: Arc<dyn Tool>,
    schema: Value,
    validator: jsonschema::Validator,
}

/// The tools one front end offers, with their compiled schemas.
pub struct ToolRegistry {
    tools: BTreeMap<&'static str, Registered>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Why a tool could not be registered (a programming error in the tool, reported at start-up).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two tools share a name.
    #[error("tool `{name}` is registered twice")]
    Duplicate {
        /// The name.
        name: &'static str,
    },
    /// A tool's schema is not an object schema that rejects unknown fields, or does not
    /// compile.
    #[error("tool `{name}` has an unusable argument schema: {problem}")]
    Schema {
        /// The tool.
        name: &'static str,
        /// What is wrong.
        problem: String,
    },
}

/// Builds a [`ToolRegistry`] from chosen tools.
#[derive(Default)]
pub struct ToolRegistryBuilder {
    tools: Vec<Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolRegistryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistryBuilder")
            .field("tools", &self.tools.len())
            .finish()
    }
}

impl ToolRegistryBuilder {
    /// Adds `tool`.
    #[must_use]
    pub fn with(mut self, tool: impl Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Adds a shared tool.
    #[must_use]
    pub fn with_shared(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Compiles every schema and checks names are unique.
    pub fn build(self) -> Result<ToolRegistry, RegistryError> {
        let mut tools = BTreeMap::new();
        for tool in self.tools {
            let name = tool.name();
            let schema = tool.input_schema();
            if schema.get("type") != Some(&Value::from("object"))
                || schema.get("additionalProperties") != Some(&Value::Bool(false))
            {
                return Err(RegistryError::Schema {
                    name,
                    problem: "it must be `\"type\": \"object\"` with `\"additionalProperties\": \
                              false`"
                        .to_owned(),
                });
            }
            let validator =
                jsonschema::validator_for(&schema).map_err(|err| RegistryError::Schema {
                    name,
                    problem: err.to_string(),
                })?;
            let entry = Registered {
                tool,
                schema,
                validator,
            };
            if tools.insert(name, entry).is_some() {
                return Err(RegistryError::Duplicate { name });
            }
        }
        Ok(ToolRegistry { tools })
    }
}

impl ToolRegistry {
    /// A builder.
    pub fn builder() -> ToolRegistryBuilder {
        ToolRegistryBuilder::default()
    }

    /// The registered tools' specs, sorted by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .values()
            .map(|r| ToolSpec {
                name: r.tool.name(),
                description: r.tool.description(),
                input_schema: r.schema.clone(),
                capability: r.tool.capability(),
            })
            .collect()
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.keys().copied().collect()
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|r| &r.tool)
    }

    /// Checks `args` against `name`'s schema, naming the first field at fault.
    pub fn validate(&self, name: &str, args: &Value) -> Result<(), ToolError> {
        let entry = self.entry(name)?;
        validate_against(name, &entry.validator, args)
    }

    /// Runs one call through the whole path: schema validation, the tool's permission
    /// requests through the shared authorizer (mode → hooks → approval), then the call.
    /// Blocking: async callers use `spawn_blocking`.
    pub fn call(
        &self,
        name: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let entry = self.entry(name)?;
        let tool = &entry.tool;
        let size = serde_json::to_vec(&args).map_or(usize::MAX, |bytes| bytes.len());
        if size > MAX_ARGUMENT_BYTES {
            return Err(ToolError::Limit {
                tool: name.to_owned(),
                limit: "max_argument_bytes",
                limit_value: format!("{MAX_ARGUMENT_BYTES} bytes"),
                detail: format!("the arguments are {size} bytes"),
            });
        }
        validate_against(name, &entry.validator, &args)?;
        for permission in tool.permission_requests(&args, ctx)? {
            let request = ToolRequest {
                tool: name.to_owned(),
                operation: permission.operation,
                working_directory: permission
                    .working_directory
                    .unwrap_or_else(|| ctx.workspace().to_path_buf()),
                summary: permission.summary,
                input: permission.input.unwrap_or_else(|| args.clone()),
                labels: ctx.labels().cloned(),
            };
            let authorization = ctx.authorizer().authorize_tool(&request);
            if !authorization.allowed {
                tracing::info!(tool = name, %authorization, "tool call denied");
                return Err(ToolError::denied(name, authorization));
            }
        }
        if ctx.cancel().is_cancelled() {
            return Err(ToolError::Cancelled {
                tool: name.to_owned(),
            });
        }
        tool.call(args, ctx)
    }

    fn entry(&self, name: &str) -> Result<&Registered, ToolError> {
        self.tools.get(name).ok_or_else(|| ToolError::UnknownTool {
            name: name.to_owned(),
            available: self.names().join(", "),
        })
    }
}

/// The first schema violation of `args`, as an argument error naming the field.
fn validate_against(
    tool: &str,
    validator: &jsonschema::Validator,
    args: &Value,
) -> Result<(), ToolError> {
    let Some(error) = validator.iter_errors(args).next() else {
        return Ok(());
    };
    let mut pointer = error.instance_path().as_str().to_owned();
    match error.kind() {
        jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => {
            if let Some(first) = unexpected.first() {
                pointer.push('/');
                pointer.push_str(first);
            }
            return Err(ToolError::invalid(
                tool,
                field_name(&pointer),
                format!(
                    "unknown field{} {}",
                    if unexpected.len() == 1 { "" } else { "s" },
                    unexpected
                        .iter()
                        .map(|u| format!("`{u}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        jsonschema::error::ValidationErrorKind::Required { property } => {
            pointer.push('/');
            pointer.push_str(property.as_str().unwrap_or_default());
            return Err(ToolError::invalid(
                tool,
                field_name(&pointer),
                "required field is missing",
            ));
        }
        _ => {}
    }
    Err(ToolError::invalid(
        tool,
        field_name(&pointer),
        error.to_string(),
    ))
}

/// `/inputs/target` → `inputs.target`; the root → `(arguments)`.
fn field_name(pointer: &str) -> String {
    let trimmed = pointer.trim_start_matches('/');
    if trimmed.is_empty() {
        "(arguments)".to_owned()
    } else {
        trimmed
            .split('/')
            .map(|segment| segment.replace("~1", "/").replace("~0", "~"))
            .collect::<Vec<_>>()
            .join(".")
    }
}

#[cfg(test)]
mod tests;
