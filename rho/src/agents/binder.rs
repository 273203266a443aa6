//! The binder: turns a catalog entry into what one invocation may run, for both runtimes.
//!
//! - `rho`: resolves `@alias` models (and their default reasoning) from the configuration,
//!   renders the prompt policy, and intersects the requested tools with the capabilities the
//!   host supplies. The host is the upper bound:
//!   - a requested Rho capability (a name of [`RHO_CAPABILITIES`]) that the host does not
//!     supply is dropped from the bound set and recorded in [`RhoLaunch::withheld`], so
//!     planning and `rho agents list` can show it: nothing disappears silently;
//!   - a requested name that is neither a Rho capability nor an extension the host supplies is
//!     unknown and fails binding ([`AgentError::UnknownTools`]), naming every such name;
//!   - `tools: all` means exactly the host set; `shell` resolves to the platform shell (`bash`
//!     on Unix, `powershell` on Windows);
//!   - delegated agents never receive `agent` or `agents`; when a definition lists them they
//!     are recorded as withheld for delegation.
//!
//!   An `@alias` model may be written together with `provider`: the provider then has to be the
//!   one the alias resolves to, else binding fails ([`AgentError::AliasProviderMismatch`]). The
//!   pair is a checked statement, not an override: sending the alias's model name to another
//!   provider's endpoint would run a model nobody configured.
//! - `claude-cli`: computes the `claude` argument vector as data (nothing is spawned here):
//!   permission mode `plan` for Plan and `dontAsk` for Auto and Bypass (never
//!   `bypassPermissions`); Supervised and AllowEdits refuse, because `claude -p` cannot route an
//!   approval request back to the user; root invocations refuse (delegated only).
//!
//! Read-only rule ([`is_read_only`]): a bound agent is read-only only on the `rho` runtime and
//! only when every capability it holds is in [`READ_ONLY_CAPABILITIES`]: reading and searching
//! files, web search and fetch, the questionnaire (asks the user, changes nothing), `skill`
//! (loads a skill's instructions), and `bash` and `process`, whose commands a read-only
//! agent runs under the kernel's read-only ruleset. Writes, patches, nested agents, `rho`
//! (workflows) and every extension capability (unknown effect) are mutating. A `claude-cli`
//! agent is never read-only: its tools are Claude's and their effects are not ours to verify.
//!
//! Invariant: the bound capability set is always a subset of the host set, and every listed
//! capability is either granted, recorded as withheld, or fails binding as unknown.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt;
use std::path::Path;

use rho_ipc::program::{AgentRuntime, AgentSetup, AgentSource};
use rho_policy::PermissionMode;

use super::catalog::{CatalogEntry, SourceLevel};
use super::definition::{
    AgentDefinition, ModelPolicy, ModelSelection, PromptPolicy, RHO_CAPABILITIES, Reasoning,
    Runtime, ToolRequest,
};
use super::{AgentError, builtin::BASE_PROMPT};
use crate::config::Config;

/// Capabilities a read-only agent may hold: they cannot change the workspace or delegate.
/// `bash` and `process` are here because a read-only agent's commands run under the
/// kernel's read-only ruleset (Landlock: writes only to a private scratch directory), so
/// read-only is enforced, not assumed.
pub const READ_ONLY_CAPABILITIES: [&str; 11] = [
    "bash",
    "fetch_content",
    "get_search_content",
    "glob",
    "grep",
    "list_dir",
    "process",
    "questionnaire",
    "read_file",
    "skill",
    "web_search",
];

/// Capabilities a delegated agent never receives.
pub const DELEGATION_CAPABILITIES: [&str; 2] = ["agent", "agents"];

/// The Claude tool that stays disallowed (nested Claude subagents would escape Rho's pool).
const CLAUDE_TASK: &str = "Task";

/// The capabilities the host can implement for this invocation (its upper bound).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCapabilities {
    tools: BTreeSet<String>,
}

impl HostCapabilities {
    /// A host set from capability names.
    pub fn new<I, S>(tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            tools: tools.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether the host supplies `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains(name)
    }

    /// The names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(String::as_str)
    }
}

/// The capability `shell` stands for on this platform.
pub const PLATFORM_SHELL: &str = if cfg!(windows) { "powershell" } else { "bash" };

/// Who is binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invocation {
    /// An interactive or automation root (`rho run --agent`).
    Root,
    /// A delegated run: the agent tool or a workflow agent node.
    Delegated,
}

/// The inputs of one binding.
#[derive(Debug, Clone, Copy)]
pub struct BindRequest<'a> {
    /// The loaded configuration (aliases, providers).
    pub config: &'a Config,
    /// The host's capability set.
    pub capabilities: &'a HostCapabilities,
    /// Root or delegated.
    pub invocation: Invocation,
    /// The permission mode the run launches under.
    pub permission_mode: PermissionMode,
    /// The step/turn cap for the run (claude-cli `--max-turns`), when configured.
    pub max_turns: Option<u32>,
}

/// A model after alias resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundModel {
    /// The parent's model (rho) or Claude's default (claude-cli).
    Inherit,
    /// A pinned model.
    Pinned {
        /// `Prefer`, `Require` or `Select`.
        policy: ModelPolicy,
        /// The provider, when one is named (rho only).
        provider: Option<String>,
        /// The provider's model name (alias resolved).
        model: String,
        /// The alias it came from, without `@`.
        alias: Option<String>,
    },
}

/// Why a capability a definition lists is not in its bound set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WithheldReason {
    /// A Rho capability this host does not supply for the invocation (the host's policy is the
    /// upper bound).
    NotSupplied,
    /// A delegation tool a delegated run never receives: `agent` or `agents` on rho, nested
    /// `Task` on claude-cli.
    Delegation,
}

impl WithheldReason {
    /// A stable spelling for JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotSupplied => "not-supplied",
            Self::Delegation => "delegation",
        }
    }
}

/// A listed capability the binding did not grant, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WithheldTool {
    /// The name as the definition lists it (`shell`, not the shell it resolves to).
    pub name: String,
    /// Why it was left out.
    pub reason: WithheldReason,
}

impl fmt::Display for WithheldTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            WithheldReason::NotSupplied if self.name == "shell" => write!(
                f,
                "shell (resolves to {PLATFORM_SHELL}, which this host does not supply)"
            ),
            WithheldReason::NotSupplied => write!(f, "{} (not supplied by this host)", self.name),
            WithheldReason::Delegation => {
                write!(
                    f,
                    "{} (delegated agents cannot delegate further)",
                    self.name
                )
            }
        }
    }
}

/// The result of intersecting a definition's tools with the host set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolGrant {
    /// The granted capabilities (a subset of the host set).
    pub granted: BTreeSet<String>,
    /// Listed capabilities left out, in the definition's order.
    pub withheld: Vec<WithheldTool>,
}

/// What a `rho`-runtime run gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RhoLaunch {
    /// The full system prompt.
    pub system_prompt: String,
    /// The resolved model.
    pub model: BoundModel,
    /// The reasoning level (the definition's, else the alias default).
    pub reasoning: Option<Reasoning>,
    /// The granted capabilities (a subset of the host set).
    pub capabilities: BTreeSet<String>,
    /// Capabilities the definition lists that were not granted (see [`WithheldTool`]).
    pub withheld: Vec<WithheldTool>,
}

/// How a claude-cli run receives the definition body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaudePrompt {
    /// Empty `extend` body: no prompt flag.
    None,
    /// Non-empty `extend` body: `--append-system-prompt-file`.
    Append(String),
    /// `replace`: `--system-prompt-file`.
    Replace(String),
}

/// What a `claude-cli` run gets: the launch data behind its argument vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeLaunch {
    /// `plan` or `dontAsk`.
    pub permission_mode: &'static str,
    /// Base tool names for `--tools` (declared order, no duplicates, no `Task`).
    pub tools: Vec<String>,
    /// Full entries for `--allowedTools` (declared order, no `Task`).
    pub allowed_tools: Vec<String>,
    /// `project`, or `user,project,local` with `inherit_claude_config`.
    pub setting_sources: &'static str,
    /// The body and how it is passed.
    pub prompt: ClaudePrompt,
    /// `--model`, byte for byte; `None` keeps Claude's default.
    pub model: Option<String>,
    /// `--effort`.
    pub effort: Option<Reasoning>,
    /// `--max-turns`.
    pub max_turns: Option<u32>,
    /// Whether the user's full Claude settings load.
    pub inherit_claude_config: bool,
    /// Listed entries left out (nested `Task`, always disallowed).
    pub withheld: Vec<WithheldTool>,
}

impl ClaudeLaunch {
    /// The text to write to the private prompt file before spawning, if any.
    pub fn prompt_file_contents(&self) -> Option<&str> {
        match &self.prompt {
            ClaudePrompt::None => None,
            ClaudePrompt::Append(body) | ClaudePrompt::Replace(body) => Some(body),
        }
    }

    /// The arguments after the program name. `prompt_file` is where the runner wrote
    /// [`Self::prompt_file_contents`] (unused when there is none); the prompt body itself never
    /// appears on the command line, and the user prompt goes to stdin.
    pub fn args(&self, prompt_file: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--permission-mode",
            self.permission_mode,
            "--disallowedTools",
            CLAUDE_TASK,
            "--tools",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        // An empty value still restricts: no ambient tools are inherited.
        args.push(self.tools.join(",").into());
        if !self.allowed_tools.is_empty() {
            args.push("--allowedTools".into());
            args.extend(self.allowed_tools.iter().map(OsString::from));
        }
        args.extend(
            [
                "--setting-sources",
                self.setting_sources,
                "--strict-mcp-config",
            ]
            .map(OsString::from),
        );
        match &self.prompt {
            ClaudePrompt::None => {}
            ClaudePrompt::Append(_) => {
                args.push("--append-system-prompt-file".into());
                args.push(prompt_file.into());
            }
            ClaudePrompt::Replace(_) => {
                args.push("--system-prompt-file".into());
                args.push(prompt_file.into());
            }
        }
        if let Some(model) = &self.model {
            args.push("--model".into());
            args.push(model.into());
        }
        if let Some(effort) = self.effort {
            args.push("--effort".into());
            args.push(effort.as_str().into());
        }
        if let Some(turns) = self.max_turns {
            args.push("--max-turns".into());
            args.push(turns.to_string().into());
        }
        args
    }
}

/// The runtime-specific launch data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundRuntime {
    /// Rho's in-process loop.
    Rho(RhoLaunch),
    /// The external `claude` binary.
    Claude(ClaudeLaunch),
}

/// An agent bound for one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundAgent {
    /// The agent id.
    pub id: String,
    /// The v2 semantic fingerprint of its definition.
    pub fingerprint: String,
    /// Where the definition came from.
    pub source: SourceLevel,
    /// The definition's prompt policy.
    pub prompt_policy: PromptPolicy,
    /// The definition's trimmed body.
    pub body: String,
    /// The launch data.
    pub runtime: BoundRuntime,
}

impl BoundAgent {
    /// The listed tools this binding left out, on either runtime.
    pub fn withheld(&self) -> &[WithheldTool] {
        match &self.runtime {
            BoundRuntime::Rho(launch) => &launch.withheld,
            BoundRuntime::Claude(launch) => &launch.withheld,
        }
    }
}

/// Binds `entry` for one invocation.
pub fn bind(entry: &CatalogEntry, request: &BindRequest<'_>) -> Result<BoundAgent, AgentError> {
    let def = &entry.definition;
    let runtime = match def.runtime {
        Runtime::Rho => BoundRuntime::Rho(bind_rho(def, request)?),
        Runtime::ClaudeCli => BoundRuntime::Claude(bind_claude(def, request)?),
    };
    Ok(BoundAgent {
        id: def.id.clone(),
        fingerprint: entry.fingerprint.clone(),
        source: entry.level,
        prompt_policy: def.prompt,
        body: def.body.clone(),
        runtime,
    })
}

/// Renders the system prompt of a `rho`-runtime definition.
pub fn render_prompt(def: &AgentDefinition) -> String {
    match (def.prompt, def.body.is_empty()) {
        (PromptPolicy::Replace, _) => def.body.clone(),
        (PromptPolicy::Extend, true) => BASE_PROMPT.trim_end().to_owned(),
        (PromptPolicy::Extend, false) => format!("{}\n\n{}", BASE_PROMPT.trim_end(), def.body),
    }
}

fn bind_rho(def: &AgentDefinition, request: &BindRequest<'_>) -> Result<RhoLaunch, AgentError> {
    let config = request.config;
    let mut reasoning = def.reasoning;
    let model =
        match &def.model {
            ModelSelection::Inherit => BoundModel::Inherit,
            ModelSelection::Pinned {
                policy,
                model,
                provider,
            } => {
                if let Some(alias) = model.strip_prefix('@') {
                    let resolved = config.model_aliases.get(alias).ok_or_else(|| {
                        AgentError::UnknownAlias {
                            agent: def.id.clone(),
                            alias: alias.to_owned(),
                            config: config.file.clone(),
                        }
                    })?;
                    if let Some(p) = provider
                        && *p != resolved.provider
                    {
                        return Err(AgentError::AliasProviderMismatch {
                            agent: def.id.clone(),
                            alias: alias.to_owned(),
                            alias_provider: resolved.provider.clone(),
                            provider: p.clone(),
                            config: config.file.clone(),
                        });
                    }
                    reasoning = reasoning.or(resolved.reasoning);
                    BoundModel::Pinned {
                        policy: *policy,
                        provider: Some(resolved.provider.clone()),
                        model: resolved.model.clone(),
                        alias: Some(alias.to_owned()),
                    }
                } else {
                    if let Some(p) = provider
                        && !config.knows_provider(p)
                    {
                        return Err(AgentError::UnknownProvider {
                            agent: def.id.clone(),
                            provider: p.clone(),
                            config: config.file.clone(),
                        });
                    }
                    BoundModel::Pinned {
                        policy: *policy,
                        provider: provider.clone(),
                        model: model.clone(),
                        alias: None,
                    }
                }
            }
        };
    let grant = rho_capabilities(def, request.capabilities, request.invocation)?;
    Ok(RhoLaunch {
        system_prompt: render_prompt(def),
        model,
        reasoning,
        capabilities: grant.granted,
        withheld: grant.withheld,
    })
}

/// Intersects the requested tools with the host set; see the module documentation.
pub fn rho_capabilities(
    def: &AgentDefinition,
    host: &HostCapabilities,
    invocation: Invocation,
) -> Result<ToolGrant, AgentError> {
    let for_delegation =
        |name: &str| invocation == Invocation::Delegated && DELEGATION_CAPABILITIES.contains(&name);
    let mut grant = ToolGrant::default();
    let mut unknown = Vec::new();
    match &def.tools {
        ToolRequest::AllHost => {
            grant.granted.extend(
                host.names()
                    .filter(|n| !for_delegation(n))
                    .map(str::to_owned),
            );
        }
        ToolRequest::Rho(names) => {
            for name in names {
                let withhold = |reason| WithheldTool {
                    name: name.clone(),
                    reason,
                };
                if for_delegation(name) {
                    grant.withheld.push(withhold(WithheldReason::Delegation));
                    continue;
                }
                // Rho's aliases bind to the host tool of that exact name when there is one,
                // else to the capability's canonical tool.
                let concrete = if name == "shell" {
                    PLATFORM_SHELL
                } else if host.contains(name) {
                    name.as_str()
                } else {
                    super::capability::canonical(name)
                };
                if host.contains(concrete) {
                    grant.granted.insert(concrete.to_owned());
                } else if RHO_CAPABILITIES.contains(&name.as_str()) {
                    grant.withheld.push(withhold(WithheldReason::NotSupplied));
                } else {
                    unknown.push(name.clone());
                }
            }
        }
        ToolRequest::Claude(_) => {
            // Unreachable through `bind` (the runtime decides), kept total for direct callers:
            // Claude tool names are not in the Rho vocabulary.
            unknown.extend(def.tools.names());
        }
    }
    if unknown.is_empty() {
        Ok(grant)
    } else {
        Err(AgentError::UnknownTools {
            agent: def.id.clone(),
            unknown,
            extensions: host
                .names()
                .filter(|n| !RHO_CAPABILITIES.contains(n))
                .map(str::to_owned)
                .collect(),
        })
    }
}

fn bind_claude(
    def: &AgentDefinition,
    request: &BindRequest<'_>,
) -> Result<ClaudeLaunch, AgentError> {
    if request.invocation == Invocation::Root {
        return Err(AgentError::ClaudeNotDelegated {
            agent: def.id.clone(),
        });
    }
    let permission_mode = match request.permission_mode {
        PermissionMode::Plan => "plan",
        PermissionMode::Auto | PermissionMode::Bypass => "dontAsk",
        mode @ (PermissionMode::Supervised | PermissionMode::AllowEdits) => {
            return Err(AgentError::ClaudePermissionMode {
                agent: def.id.clone(),
                mode: mode.as_str().to_owned(),
            });
        }
    };
    let (allowed_tools, withheld) = claude_tools(def);
    let mut tools: Vec<String> = Vec::new();
    if let ToolRequest::Claude(entries) = &def.tools {
        for entry in entries.iter().filter(|e| e.base != CLAUDE_TASK) {
            if !tools.contains(&entry.base) {
                tools.push(entry.base.clone());
            }
        }
    }
    let prompt = match (def.prompt, def.body.is_empty()) {
        (PromptPolicy::Replace, _) => ClaudePrompt::Replace(def.body.clone()),
        (PromptPolicy::Extend, true) => ClaudePrompt::None,
        (PromptPolicy::Extend, false) => ClaudePrompt::Append(def.body.clone()),
    };
    Ok(ClaudeLaunch {
        permission_mode,
        tools,
        allowed_tools,
        setting_sources: if def.inherit_claude_config {
            "user,project,local"
        } else {
            "project"
        },
        prompt,
        model: match &def.model {
            ModelSelection::Inherit => None,
            ModelSelection::Pinned { model, .. } => Some(model.clone()),
        },
        effort: def.reasoning,
        max_turns: request.max_turns,
        inherit_claude_config: def.inherit_claude_config,
        withheld,
    })
}

/// The Claude tool entries a claude-cli definition is allowed (`--allowedTools`, declared
/// order) and the ones left out: nested `Task` entries, which stay disallowed so fan-out stays
/// under Rho (recorded as withheld for delegation).
pub fn claude_tools(def: &AgentDefinition) -> (Vec<String>, Vec<WithheldTool>) {
    let mut allowed = Vec::new();
    let mut withheld = Vec::new();
    if let ToolRequest::Claude(entries) = &def.tools {
        for entry in entries {
            if entry.base == CLAUDE_TASK {
                withheld.push(WithheldTool {
                    name: entry.to_string(),
                    reason: WithheldReason::Delegation,
                });
            } else {
                allowed.push(entry.to_string());
            }
        }
    }
    (allowed, withheld)
}

/// Whether a bound agent can only read: see the module documentation.
pub fn is_read_only(bound: &BoundAgent) -> bool {
    match &bound.runtime {
        BoundRuntime::Rho(launch) => launch
            .capabilities
            .iter()
            .all(|c| READ_ONLY_CAPABILITIES.contains(&c.as_str())),
        BoundRuntime::Claude(_) => false,
    }
}

/// The frozen setup a plan records for a bound agent.
pub fn to_agent_setup(bound: &BoundAgent) -> AgentSetup {
    let source = match bound.source {
        SourceLevel::Builtin => AgentSource::Builtin,
        SourceLevel::UserAgents => AgentSource::UserAgents,
        SourceLevel::RhoHome => AgentSource::RhoHome,
        SourceLevel::Project => AgentSource::Project,
        SourceLevel::Workflow => AgentSource::Workflow,
    };
    let read_only = is_read_only(bound);
    match &bound.runtime {
        BoundRuntime::Rho(launch) => {
            let (model_policy, model, provider) = match &launch.model {
                BoundModel::Inherit => (ModelPolicy::Inherit, None, None),
                BoundModel::Pinned {
                    policy,
                    provider,
                    model,
                    ..
                } => (*policy, Some(model.clone()), provider.clone()),
            };
            AgentSetup {
                id: bound.id.clone(),
                source,
                fingerprint: bound.fingerprint.clone(),
                runtime: AgentRuntime::Rho,
                prompt_policy: bound.prompt_policy.as_str().to_owned(),
                system_prompt: launch.system_prompt.clone(),
                model_policy: model_policy.as_str().to_owned(),
                model,
                provider,
                reasoning: launch.reasoning.map(|r| r.as_str().to_owned()),
                capabilities: launch.capabilities.iter().cloned().collect(),
                read_only,
                inherit_claude_config: false,
            }
        }
        BoundRuntime::Claude(launch) => {
            let mut capabilities = launch.allowed_tools.clone();
            capabilities.sort();
            AgentSetup {
                id: bound.id.clone(),
                source,
                fingerprint: bound.fingerprint.clone(),
                runtime: AgentRuntime::ClaudeCli,
                prompt_policy: bound.prompt_policy.as_str().to_owned(),
                // Claude keeps its own base prompt; the setup records the body it is given.
                system_prompt: bound.body.clone(),
                model_policy: if launch.model.is_some() {
                    "select"
                } else {
                    "inherit"
                }
                .to_owned(),
                model: launch.model.clone(),
                provider: None,
                reasoning: launch.effort.map(|r| r.as_str().to_owned()),
                capabilities,
                read_only,
                inherit_claude_config: launch.inherit_claude_config,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::catalog::SourceLevel;
    use crate::agents::fingerprint::fingerprint;
    use crate::agents::parse_definition;

    fn entry(text: &str) -> CatalogEntry {
        let definition = parse_definition(text, "probe").unwrap_or_else(|e| panic!("{e:?}"));
        let fingerprint = fingerprint(&definition).unwrap();
        CatalogEntry {
            definition,
            level: SourceLevel::RhoHome,
            path: None,
            fingerprint,
            overrides: vec![],
        }
    }

    fn request<'a>(config: &'a Config, host: &'a HostCapabilities) -> BindRequest<'a> {
        BindRequest {
            config,
            capabilities: host,
            invocation: Invocation::Delegated,
            permission_mode: PermissionMode::Auto,
            max_turns: None,
        }
    }

    #[test]
    fn read_only_set_is_disjoint_from_mutating_capabilities() {
        for mutating in [
            "powershell",
            "shell",
            "write_file",
            "edit_file",
            "apply_patch",
            "agent",
            "agents",
            "rho",
        ] {
            assert!(!READ_ONLY_CAPABILITIES.contains(&mutating), "{mutating}");
        }
    }

    #[test]
    fn render_prompt_follows_the_policy() {
        let extend = parse_definition("---\ndescription: d\n---\nExtra.\n", "a").unwrap();
        assert_eq!(
            render_prompt(&extend),
            format!("{}\n\nExtra.", BASE_PROMPT.trim_end())
        );
        let bare = parse_definition("---\ndescription: d\n---\n", "a").unwrap();
        assert_eq!(render_prompt(&bare), BASE_PROMPT.trim_end());
        let replace =
            parse_definition("---\ndescription: d\nprompt: replace\n---\nOnly.\n", "a").unwrap();
        assert_eq!(render_prompt(&replace), "Only.");
    }

    #[test]
    fn claude_argv_for_an_empty_definition() {
        let config = Config::default();
        let host = HostCapabilities::default();
        let e = entry("---\ndescription: d\nruntime: claude-cli\n---\n");
        let bound = bind(&e, &request(&config, &host)).unwrap();
        let BoundRuntime::Claude(launch) = &bound.runtime else {
            panic!()
        };
        let args: Vec<String> = launch
            .args(Path::new("/run/prompt.md"))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            args,
            [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--include-partial-messages",
                "--permission-mode",
                "dontAsk",
                "--disallowedTools",
                "Task",
                "--tools",
                "",
                "--setting-sources",
                "project",
                "--strict-mcp-config",
            ]
        );
        assert_eq!(launch.prompt_file_contents(), None);
    }
}
