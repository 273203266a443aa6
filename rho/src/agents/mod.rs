//! Agent definitions, the catalog, the binder and the semantic fingerprint.
//!
//! A definition file is read by the strict [`frontmatter`] reader, validated into an
//! [`AgentDefinition`] ([`definition`]), discovered by precedence into a [`Catalog`]
//! ([`catalog`]), fingerprinted ([`fingerprint`]) and bound for one invocation against the
//! host's configuration and capabilities ([`binder`]).
//!
//! Invariant: nothing runs from a definition that did not pass every rule of the definition
//! schema, and binding never grants a capability the host did not supply.

pub mod auth;
pub mod binder;
pub mod builtin;
pub mod capability;
pub mod catalog;
pub mod definition;
pub mod fingerprint;
pub mod frontmatter;
pub mod schema;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub use binder::{
    BindRequest, BoundAgent, BoundModel, BoundRuntime, ClaudeLaunch, ClaudePrompt,
    HostCapabilities, Invocation, PLATFORM_SHELL, READ_ONLY_CAPABILITIES, RhoLaunch, ToolGrant,
    WithheldReason, WithheldTool, bind, is_read_only, render_prompt, to_agent_setup,
};
pub use catalog::{Catalog, CatalogEntry, CatalogProblem, CatalogSources, SourceLevel};
pub use definition::{
    AgentDefinition, ClaudeToolEntry, ModelPolicy, ModelSelection, PromptPolicy, Reasoning,
    Runtime, ToolRequest, parse_definition,
};
pub use fingerprint::fingerprint;
pub use frontmatter::Diagnostic;

/// Largest definition file accepted, in bytes.
pub const MAX_DEFINITION_BYTES: u64 = 1024 * 1024;

/// Why a definition could not be loaded, a catalog not built, or an agent not bound.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// A definition file broke one or more rules; each diagnostic names line and key.
    #[error("{}", render_diagnostics(file, diagnostics))]
    Invalid {
        /// The definition file.
        file: PathBuf,
        /// Every problem found, in line order.
        diagnostics: Vec<Diagnostic>,
    },
    /// A definition file or directory could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A definition file is larger than [`MAX_DEFINITION_BYTES`].
    #[error("{}: definition is larger than {limit} bytes", file.display())]
    TooLarge {
        /// The definition file.
        file: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// A definition file is not UTF-8 text.
    #[error("{}: definition is not UTF-8 text", file.display())]
    NotUtf8 {
        /// The definition file.
        file: PathBuf,
    },
    /// A definition entry is not a regular file (or is a symbolic link where links are refused).
    #[error("{}: {reason}", path.display())]
    NotRegular {
        /// The rejected path.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// Two definitions at one precedence level share an id.
    #[error(
        "duplicate agent id `{id}` in the {level} definitions: {} and {}",
        first.display(),
        second.display()
    )]
    DuplicateId {
        /// The shared id.
        id: String,
        /// The precedence level.
        level: SourceLevel,
        /// The file read first (in name order).
        first: PathBuf,
        /// The file read second.
        second: PathBuf,
    },
    /// Discovery found problems in several places; all of them are listed.
    #[error("{}", render_many(errors))]
    Catalog {
        /// Every problem found, in discovery order.
        errors: Vec<AgentError>,
    },
    /// The definition of this id was skipped from the catalog because it is broken (the
    /// rest of the catalog stays usable; a node naming this id fails with the problem).
    #[error("agent `{id}` cannot be used: its definition was skipped: {problem}")]
    Skipped {
        /// The requested id.
        id: String,
        /// Why its definition was skipped (file and every problem in it).
        problem: String,
    },
    /// No agent with this id is in the catalog.
    #[error("unknown agent `{id}`; available: {}", available.join(", "))]
    UnknownAgent {
        /// The requested id.
        id: String,
        /// The ids in the catalog.
        available: Vec<String>,
    },
    /// A `@alias` model names no `[models.aliases]` entry of the configuration.
    #[error(
        "agent `{agent}`: model alias `@{alias}` is not defined in [models.aliases] of {}",
        config.display()
    )]
    UnknownAlias {
        /// The agent being bound.
        agent: String,
        /// The alias name, without `@`.
        alias: String,
        /// The configuration file consulted.
        config: PathBuf,
    },
    /// A provider named by a definition or alias has no `[providers.<name>]` section.
    #[error(
        "agent `{agent}`: provider `{provider}` is not configured ([providers.{provider}] in {})",
        config.display()
    )]
    UnknownProvider {
        /// The agent being bound.
        agent: String,
        /// The provider name.
        provider: String,
        /// The configuration file consulted.
        config: PathBuf,
    },
    /// Requested tool names are neither Rho capabilities nor extensions the host supplies.
    #[error(
        "agent `{agent}`: unknown tools {}: not Rho capabilities, and not extensions this host \
         supplies (extensions supplied: {})",
        unknown.join(", "),
        if extensions.is_empty() { "none".to_owned() } else { extensions.join(", ") }
    )]
    UnknownTools {
        /// The agent being bound.
        agent: String,
        /// Every unknown name, in the definition's order.
        unknown: Vec<String>,
        /// The extension capabilities the host supplies (names outside the Rho vocabulary).
        extensions: Vec<String>,
    },
    /// An `@alias` model is written with a `provider` that is not the alias's provider.
    #[error(
        "agent `{agent}`: model alias `@{alias}` resolves to provider `{alias_provider}` in {}, \
         but the definition sets provider `{provider}`; make them agree or drop `provider`",
        config.display()
    )]
    AliasProviderMismatch {
        /// The agent being bound.
        agent: String,
        /// The alias name, without `@`.
        alias: String,
        /// The provider the alias resolves to.
        alias_provider: String,
        /// The provider the definition sets.
        provider: String,
        /// The configuration file consulted.
        config: PathBuf,
    },
    /// A claude-cli agent was bound for a root (non-delegated) invocation.
    #[error(
        "agent `{agent}` uses runtime claude-cli, which is delegated-only: launch it through \
         the agent tool or a workflow agent node"
    )]
    ClaudeNotDelegated {
        /// The agent being bound.
        agent: String,
    },
    /// A claude-cli agent cannot run under the current permission mode.
    #[error(
        "agent `{agent}` uses runtime claude-cli, which cannot run in permission mode \
         `{mode}` (claude -p cannot ask for approval); use plan or auto"
    )]
    ClaudePermissionMode {
        /// The agent being bound.
        agent: String,
        /// The refused mode.
        mode: String,
    },
    /// The canonical encoding of the fingerprint input failed.
    #[error("agent `{agent}`: cannot encode the fingerprint input: {message}")]
    Fingerprint {
        /// The agent.
        agent: String,
        /// The encoder's description.
        message: String,
    },
}

fn render_diagnostics(file: &Path, diagnostics: &[Diagnostic]) -> String {
    let mut out = String::new();
    for (i, d) in diagnostics.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = write!(out, "{}:{d}", file.display());
    }
    out
}

fn render_many(errors: &[AgentError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Parses `text` as the definition file `file`; the file stem supplies the id when none is set.
pub fn load_definition_text(file: &Path, text: &str) -> Result<AgentDefinition, AgentError> {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    parse_definition(text, &stem).map_err(|diagnostics| AgentError::Invalid {
        file: file.to_owned(),
        diagnostics,
    })
}

/// Reads and parses one definition file (following symbolic links: the caller chose the path).
pub fn load_definition_file(file: &Path) -> Result<AgentDefinition, AgentError> {
    let text = catalog::read_definition(file, true)?;
    load_definition_text(file, &text)
}
