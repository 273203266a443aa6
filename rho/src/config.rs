//! The user configuration, `$RHO_HOME/config.toml`.
//!
//! ```toml
//! [model]                             # the conversation model (Rho-compatible)
//! provider = "vllm"                   # openai | anthropic | a [providers.custom.NAME]
//! model = "qwen2.5-coder"             # a model id, "provider/model", or "@alias"
//! auth = "none"                       # none | NAME-api-key | api-key | anthropic-api-key
//! reasoning = "high"                  # off | minimal | low | medium | high | xhigh | max
//!
//! [model.aliases]
//! deep = "anthropic/claude-opus-4-8"  # "provider/model", or a bare id on [model].provider
//!
//! [providers.custom.vllm]             # an OpenAI-compatible host; key from RHO_VLLM_API_KEY
//! base_url = "http://127.0.0.1:8000/v1"
//!
//! [behavior]
//! permission_mode = "auto"            # bypass | auto | allow_edits | plan | supervised
//! classifier = ["/usr/local/bin/rho-classify", "--strict"]   # argv asked first in `auto`
//!
//! [models.aliases]
//! fast = "openai/gpt-4o-mini"         # "provider/model": split at the first `/`
//! deep = { provider = "local", model = "qwen3-coder", reasoning = "high" }
//!
//! [providers.openai]
//! base_url = "https://api.openai.com/v1"
//! api_key_env = "OPENAI_API_KEY"      # the key is read from this variable, never stored
//!
//! [environment]
//! exclude = ["MY_SECRET_*"]           # more names kept away from workflow nodes
//! allow = ["CI_JOB_TOKEN"]            # names passed although a credential pattern matches
//!
//! [budgets]
//! node_count = 2000                   # planning budgets by name (checked by the planner)
//!
//! [scheduler]
//! max_parallel_nodes = 4
//! max_parallel_agents = 4
//! max_parallel_commands = 4
//! ```
//!
//! Invariant: a missing file is the default configuration, and a present file is accepted
//! only when every key is known and every value valid; errors name the file, the line and the
//! key. The configuration holds names of environment variables, never secrets.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr as _;

use rho_policy::PermissionMode;
use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

use crate::agents::Reasoning;
use crate::paths::RhoHome;

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read {}", file.display())]
    Read {
        /// The configuration file.
        file: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML, or a key is unknown or has the wrong type.
    #[error("{}:{line}:{column}: {message}", file.display())]
    Syntax {
        /// The configuration file.
        file: PathBuf,
        /// 1-based line (1 when the parser gave no position).
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's description.
        message: String,
    },
    /// A value is well-typed but not allowed.
    #[error("{}: `{key}`: {problem}", file.display())]
    Value {
        /// The configuration file.
        file: PathBuf,
        /// The dotted key at fault (`models.aliases.fast`).
        key: String,
        /// What is wrong and what is allowed.
        problem: String,
    },
}

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// The file it was loaded from (or would have been).
    pub file: PathBuf,
    /// `[behavior]`.
    pub behavior: Behavior,
    /// `[models.aliases]`, by alias name (without `@`).
    pub model_aliases: BTreeMap<String, ModelAlias>,
    /// `[providers.<name>]`.
    pub providers: BTreeMap<String, Provider>,
    /// `[environment]`.
    pub environment: Environment,
    /// `[budgets]`: planning budget overrides by name.
    pub budgets: BTreeMap<String, u64>,
    /// `[scheduler]`.
    pub scheduler: Scheduler,
    /// `[model]`: the selected conversation model.
    pub model: ModelSettings,
    /// `[providers.custom.<name>]`: OpenAI-compatible hosts, by name.
    pub custom_providers: BTreeMap<String, CustomProvider>,
}

/// `[model]`: what the conversation runs on unless a definition or flag says otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelSettings {
    /// The provider name.
    pub provider: Option<String>,
    /// The model: an id, `provider/model`, or `@alias`.
    pub model: Option<String>,
    /// The auth profile (`none`, `NAME-api-key`, `api-key`, `anthropic-api-key`).
    pub auth: Option<String>,
    /// The reasoning level.
    pub reasoning: Option<Reasoning>,
}

/// `[providers.custom.<name>]`: a user-defined Chat Completions host.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomProvider {
    /// The API base, normally ending in `/v1`.
    pub base_url: String,
    /// A models.dev catalog slug to borrow metadata from (kept for compatibility).
    #[serde(default)]
    pub catalog: Option<String>,
    /// `model-id` when the host's ids are `provider/model` catalog ids.
    #[serde(default)]
    pub catalog_mode: Option<String>,
}

/// The first-party providers rho knows without configuration.
pub const BUILTIN_PROVIDERS: [&str; 2] = ["openai", "anthropic"];

/// The auth profiles `[model] auth` (and the root `--auth`) may name for `provider`.
pub fn auth_profiles_for(provider: &str) -> Vec<String> {
    match provider {
        "openai" => vec!["api-key".to_owned()],
        "anthropic" => vec!["anthropic-api-key".to_owned()],
        custom => vec!["none".to_owned(), format!("{custom}-api-key")],
    }
}

/// The environment variable holding a custom host's key: `RHO_<NAME>_API_KEY`, the name
/// upper-cased with hyphens turned into underscores.
pub fn custom_key_variable(name: &str) -> String {
    format!(
        "RHO_{}_API_KEY",
        name.to_ascii_uppercase().replace('-', "_")
    )
}

/// `[behavior]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Behavior {
    /// The configured permission mode, if any.
    pub permission_mode: Option<PermissionMode>,
    /// The classifier executable's argv (no shell), asked first in `auto` mode; see
    /// `permissions::classifier` for its protocol.
    pub classifier: Option<Vec<String>>,
}

/// What a model alias stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelAlias {
    /// The provider name (a `[providers.<name>]` section).
    pub provider: String,
    /// The provider's model name.
    pub model: String,
    /// A default reasoning level for this model, used when a definition sets none.
    pub reasoning: Option<Reasoning>,
}

/// `[providers.<name>]`: an OpenAI-compatible chat-completions endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    /// The API base URL (`http://` or `https://`).
    pub base_url: String,
    /// The environment variable holding the API key; `None` for servers without one.
    #[serde(default)]
    pub api_key_env: Option<String>,
}

/// `[environment]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    /// Extra variable names or `PREFIX*` / `*SUFFIX` patterns never passed to workflow nodes.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Variable names or patterns passed to workflow nodes although a credential pattern
    /// would withhold them.
    #[serde(default)]
    pub allow: Vec<String>,
}

/// `[scheduler]`: capacity settings; `None` keeps the default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scheduler {
    /// Nodes running at once.
    pub max_parallel_nodes: Option<u32>,
    /// Agent nodes running at once.
    pub max_parallel_agents: Option<u32>,
    /// Command nodes running at once.
    pub max_parallel_commands: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileModel {
    #[serde(default)]
    behavior: BehaviorModel,
    #[serde(default)]
    models: ModelsModel,
    #[serde(default)]
    providers: ProvidersModel,
    #[serde(default)]
    model: ModelModel,
    #[serde(default)]
    environment: Environment,
    #[serde(default)]
    budgets: BTreeMap<String, u64>,
    #[serde(default)]
    scheduler: Scheduler,
}

#[derive(Default)]
struct ProvidersModel {
    custom: BTreeMap<String, CustomProvider>,
    legacy: BTreeMap<String, Provider>,
}

/// `[providers]`: `custom` holds the Rho-style custom hosts, every other key is a
/// `[providers.<name>]` endpoint. Read entry by entry (not flattened) so errors keep their
/// line numbers.
impl<'de> Deserialize<'de> for ProvidersModel {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ProvidersVisitor;
        impl<'de> Visitor<'de> for ProvidersVisitor {
            type Value = ProvidersModel;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of providers")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ProvidersModel, A::Error> {
                let mut model = ProvidersModel::default();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "custom" {
                        model.custom = map.next_value()?;
                    } else {
                        let provider: Provider = map.next_value()?;
                        model.legacy.insert(key, provider);
                    }
                }
                Ok(model)
            }
        }
        deserializer.deserialize_map(ProvidersVisitor)
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelModel {
    provider: Option<String>,
    model: Option<String>,
    auth: Option<String>,
    reasoning: Option<String>,
    #[serde(default)]
    aliases: BTreeMap<String, String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BehaviorModel {
    permission_mode: Option<String>,
    classifier: Option<Vec<String>>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelsModel {
    #[serde(default)]
    aliases: BTreeMap<String, AliasModel>,
}

struct AliasModel {
    provider: String,
    model: String,
    reasoning: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AliasTable {
    provider: String,
    model: String,
    #[serde(default)]
    reasoning: Option<String>,
}

impl<'de> Deserialize<'de> for AliasModel {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AliasVisitor;
        impl<'de> Visitor<'de> for AliasVisitor {
            type Value = AliasModel;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"provider/model\" or { provider = \"...\", model = \"...\" }")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<AliasModel, E> {
                match v.split_once('/') {
                    Some((provider, model)) => Ok(AliasModel {
                        provider: provider.to_owned(),
                        model: model.to_owned(),
                        reasoning: None,
                    }),
                    None => Err(E::custom(format!(
                        "model alias `{v}` must be written \"provider/model\""
                    ))),
                }
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<AliasModel, A::Error> {
                let table = AliasTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(AliasModel {
                    provider: table.provider,
                    model: table.model,
                    reasoning: table.reasoning,
                })
            }
        }
        deserializer.deserialize_any(AliasVisitor)
    }
}

impl Config {
    /// The default configuration, attributed to `file`.
    pub fn empty(file: impl Into<PathBuf>) -> Self {
        Self {
            file: file.into(),
            ..Self::default()
        }
    }

    /// Loads `$RHO_HOME/config.toml`; a missing file is the default configuration.
    pub fn load(home: &RhoHome) -> Result<Self, ConfigError> {
        Self::load_file(&home.config_file())
    }

    /// Loads a configuration file; a missing file is the default configuration.
    pub fn load_file(file: &Path) -> Result<Self, ConfigError> {
        let read_error = |source| ConfigError::Read {
            file: file.to_owned(),
            source,
        };
        // Configuration chooses the permission mode and the classifier program: it gets the
        // trust store's owner, mode and link checks.
        match read_authority_file(file, CONFIG_FILE_LIMIT) {
            Ok(Some(bytes)) if bytes.len() as u64 > CONFIG_FILE_LIMIT => {
                Err(read_error(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("the file is larger than {CONFIG_FILE_LIMIT} bytes"),
                )))
            }
            Ok(Some(bytes)) => {
                let text = String::from_utf8(bytes).map_err(|_| {
                    read_error(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "the file is not UTF-8",
                    ))
                })?;
                Self::parse(file, &text)
            }
            Ok(None) => Ok(Self::empty(file)),
            Err(source) => Err(read_error(source)),
        }
    }

    /// Parses configuration text; `file` is used in error messages.
    pub fn parse(file: &Path, text: &str) -> Result<Self, ConfigError> {
        let model: FileModel = toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map_or((1, 1), |span| line_column(text, span.start));
            ConfigError::Syntax {
                file: file.to_owned(),
                line,
                column,
                message: e.message().trim().to_owned(),
            }
        })?;
        let bad = |key: String, problem: String| ConfigError::Value {
            file: file.to_owned(),
            key,
            problem,
        };

        let permission_mode = match model.behavior.permission_mode {
            None => None,
            Some(text) => Some(PermissionMode::from_str(&text).map_err(|_| {
                bad(
                    "behavior.permission_mode".into(),
                    format!(
                        "unknown permission mode `{text}`; allowed: bypass, auto, allow_edits, \
                         plan, supervised"
                    ),
                )
            })?),
        };

        if let Some(argv) = &model.behavior.classifier {
            let problem = match argv.first() {
                None => Some("must name a program: [\"/path/to/classifier\", \"args\"...]"),
                Some(program) if program.is_empty() => Some("the program (first element) is empty"),
                Some(_) if argv.iter().any(|a| a.contains('\0')) => {
                    Some("an argument contains a NUL byte")
                }
                Some(_) => None,
            };
            if let Some(problem) = problem {
                return Err(bad("behavior.classifier".into(), problem.into()));
            }
        }

        for (name, provider) in &model.providers.legacy {
            let key = |field: &str| format!("providers.{name}.{field}");
            if !is_name(name) {
                return Err(bad(format!("providers.{name}"), NAME_RULE.into()));
            }
            if !(provider.base_url.starts_with("http://")
                || provider.base_url.starts_with("https://"))
            {
                return Err(bad(
                    key("base_url"),
                    format!("`{}` must be an http:// or https:// URL", provider.base_url),
                ));
            }
            if let Some(var) = &provider.api_key_env
                && !is_env_name(var)
            {
                return Err(bad(
                    key("api_key_env"),
                    format!(
                        "`{var}` is not an environment variable name (letters, digits and `_`, \
                         not starting with a digit); write the variable's name, not the key"
                    ),
                ));
            }
        }

        let mut model_aliases = BTreeMap::new();
        for (name, alias) in model.models.aliases {
            let key = format!("models.aliases.{name}");
            if !is_name(&name) {
                return Err(bad(key, NAME_RULE.into()));
            }
            for (what, value) in [("provider", &alias.provider), ("model", &alias.model)] {
                if value.is_empty() || value.chars().any(char::is_whitespace) {
                    return Err(bad(
                        key.clone(),
                        format!("the {what} `{value}` must be non-empty and without whitespace"),
                    ));
                }
            }
            if !model.providers.legacy.contains_key(&alias.provider) {
                return Err(bad(
                    key,
                    format!(
                        "provider `{}` has no [providers.{}] section",
                        alias.provider, alias.provider
                    ),
                ));
            }
            let reasoning = match alias.reasoning {
                None => None,
                Some(text) => Some(Reasoning::parse(&text).ok_or_else(|| {
                    bad(
                        format!("{key}.reasoning"),
                        format!(
                            "unknown reasoning `{text}`; allowed: off, minimal, low, medium, \
                             high, xhigh, max"
                        ),
                    )
                })?),
            };
            model_aliases.insert(
                name,
                ModelAlias {
                    provider: alias.provider,
                    model: alias.model,
                    reasoning,
                },
            );
        }

        for (key, patterns) in [
            ("environment.exclude", &model.environment.exclude),
            ("environment.allow", &model.environment.allow),
        ] {
            for pattern in patterns {
                let name = pattern.strip_suffix('*').unwrap_or(pattern);
                let name = name.strip_prefix('*').unwrap_or(name);
                if name.is_empty() || !is_env_name(name) {
                    return Err(bad(
                        key.into(),
                        format!(
                            "`{pattern}` is not a variable name or a `PREFIX*`, `*SUFFIX` or \
                             `*PART*` pattern"
                        ),
                    ));
                }
            }
        }

        for (field, value) in [
            ("max_parallel_nodes", model.scheduler.max_parallel_nodes),
            ("max_parallel_agents", model.scheduler.max_parallel_agents),
            (
                "max_parallel_commands",
                model.scheduler.max_parallel_commands,
            ),
        ] {
            if value == Some(0) {
                return Err(bad(
                    format!("scheduler.{field}"),
                    "must be at least 1".into(),
                ));
            }
        }

        for (name, host) in &model.providers.custom {
            let key = |field: &str| format!("providers.custom.{name}.{field}");
            if !is_custom_name(name) {
                return Err(bad(
                    format!("providers.custom.{name}"),
                    "custom provider names use lowercase letters, digits and hyphens and start \
                     with a letter"
                        .into(),
                ));
            }
            if BUILTIN_PROVIDERS.contains(&name.as_str())
                || model.providers.legacy.contains_key(name)
            {
                return Err(bad(
                    format!("providers.custom.{name}"),
                    format!("`{name}` is already a provider; choose another name"),
                ));
            }
            if let Some(problem) = base_url_problem(&host.base_url) {
                return Err(bad(key("base_url"), problem));
            }
            if host.catalog.is_some() && host.catalog_mode.is_some() {
                return Err(bad(
                    key("catalog_mode"),
                    "a host cannot set both `catalog` and `catalog_mode`".into(),
                ));
            }
            if let Some(mode) = &host.catalog_mode
                && mode != "model-id"
            {
                return Err(bad(
                    key("catalog_mode"),
                    format!("unknown catalog mode `{mode}`; allowed: model-id"),
                ));
            }
        }
        let knows = |p: &str| {
            BUILTIN_PROVIDERS.contains(&p)
                || model.providers.custom.contains_key(p)
                || model.providers.legacy.contains_key(p)
        };
        let model_reasoning = match &model.model.reasoning {
            None => None,
            Some(text) => Some(Reasoning::parse(text).ok_or_else(|| {
                bad(
                    "model.reasoning".into(),
                    format!(
                        "unknown reasoning `{text}`; allowed: off, minimal, low, medium, high, \
                         xhigh, max"
                    ),
                )
            })?),
        };
        if let Some(provider) = &model.model.provider
            && !knows(provider)
        {
            return Err(bad(
                "model.provider".into(),
                format!(
                    "unknown provider `{provider}`; known: openai, anthropic, and \
                     [providers.custom.NAME] hosts"
                ),
            ));
        }
        if let Some(auth) = &model.model.auth {
            let allowed = model
                .model
                .provider
                .as_deref()
                .map(auth_profiles_for)
                .unwrap_or_default();
            if !allowed.contains(auth) {
                return Err(bad(
                    "model.auth".into(),
                    if allowed.is_empty() {
                        format!("`{auth}` needs [model].provider to be set")
                    } else {
                        format!(
                            "unknown auth `{auth}` here; allowed: {}",
                            allowed.join(", ")
                        )
                    },
                ));
            }
        }
        if let Some(selected) = &model.model.model
            && let Some(alias) = selected.strip_prefix('@')
            && !model.model.aliases.contains_key(alias)
            && !model_aliases.contains_key(alias)
        {
            return Err(bad(
                "model.model".into(),
                format!("`{selected}` names no alias in [model.aliases]"),
            ));
        }
        for (name, value) in &model.model.aliases {
            let key = format!("model.aliases.{name}");
            if !is_name(name) {
                return Err(bad(key, NAME_RULE.into()));
            }
            if value.is_empty() || value.starts_with('@') || value.chars().any(char::is_whitespace)
            {
                return Err(bad(
                    key,
                    format!(
                        "`{value}` must be a concrete model (`provider/model` or a model id), \
                         not empty, not another alias, without whitespace"
                    ),
                ));
            }
            let (provider, id) = match value.split_once('/') {
                Some((p, m)) if knows(p) => (p.to_owned(), m.to_owned()),
                Some((p, _)) if model.model.provider.is_none() => {
                    return Err(bad(
                        key,
                        format!(
                            "unknown provider `{p}` in `{value}`; known: openai, anthropic, \
                             and [providers.custom.NAME] hosts"
                        ),
                    ));
                }
                _ => match &model.model.provider {
                    Some(p) => (p.clone(), value.clone()),
                    None => {
                        return Err(bad(
                            key,
                            format!(
                                "`{value}` names no provider; write `provider/{value}` or set \
                                 [model].provider"
                            ),
                        ));
                    }
                },
            };
            model_aliases.insert(
                name.clone(),
                ModelAlias {
                    provider,
                    model: id,
                    reasoning: None,
                },
            );
        }

        Ok(Self {
            file: file.to_owned(),
            behavior: Behavior {
                permission_mode,
                classifier: model.behavior.classifier,
            },
            model_aliases,
            model: ModelSettings {
                provider: model.model.provider,
                model: model.model.model,
                auth: model.model.auth,
                reasoning: model_reasoning,
            },
            custom_providers: model.providers.custom,
            providers: model.providers.legacy,
            environment: model.environment,
            budgets: model.budgets,
            scheduler: model.scheduler,
        })
    }
}

impl Config {
    /// Whether `name` is a provider this configuration can reach.
    pub fn knows_provider(&self, name: &str) -> bool {
        BUILTIN_PROVIDERS.contains(&name)
            || self.custom_providers.contains_key(name)
            || self.providers.contains_key(name)
    }

    /// Every environment variable that may hold a provider key under this configuration.
    /// They are kept out of every process rho starts for a tool or a node.
    pub fn secret_variables(&self) -> Vec<String> {
        let mut names = vec!["OPENAI_API_KEY".to_owned(), "ANTHROPIC_API_KEY".to_owned()];
        names.extend(self.custom_providers.keys().map(|n| custom_key_variable(n)));
        names.extend(
            self.providers
                .values()
                .filter_map(|p| p.api_key_env.clone()),
        );
        names
    }
}

fn is_custom_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Why a provider base URL is not acceptable, if it is not.
fn base_url_problem(url: &str) -> Option<String> {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Some(format!("`{url}` must be an http:// or https:// URL"));
    };
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() {
        return Some(format!("`{url}` has no host"));
    }
    if authority.contains('@') {
        return Some(format!(
            "`{url}` must not contain credentials; put the key in the environment"
        ));
    }
    if url.contains('?') || url.contains('#') {
        return Some(format!("`{url}` must not contain a query or a fragment"));
    }
    None
}

const NAME_RULE: &str = "names are non-empty and use letters, digits, `_`, `-` and `.`";

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The largest configuration file read.
const CONFIG_FILE_LIMIT: u64 = 1024 * 1024;

/// Reads a user-edited file (configuration, hooks): `None` when it does not exist, an error
/// when it is not a regular file; at most `limit + 1` bytes are read, so a caller can tell
/// an oversized file (longer than `limit`) and report it in its own terms.
///
/// The open never blocks: a FIFO or device put where a configuration file belongs would
/// otherwise hang `rho` at start-up, so it is opened non-blocking and refused by type.
pub fn read_user_file(file: &Path, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let handle = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(file)
    {
        Ok(handle) => handle,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !handle.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    handle
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// Reads a file that grants authority (`config.toml`, the user's `hooks.toml`) like
/// [`read_user_file`], after the checks the trust store gets: it must be this user's
/// (owner = effective uid) and writable by nobody else (no group or other write bit), and a
/// symbolic link is followed only when the link itself is this user's (or root's) and its
/// target passes the same checks. A dangling link is an error, never "no file". `None` only
/// when nothing at all is at `file`.
pub fn read_authority_file(file: &Path, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::MetadataExt as _;
    let refuse = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
    let uid = nix::unistd::geteuid().as_raw();
    let link = match std::fs::symlink_metadata(file) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if link.file_type().is_symlink() {
        if link.uid() != uid && link.uid() != 0 {
            return Err(refuse(format!(
                "it is a symbolic link owned by uid {}, not by this user (uid {uid}) or root",
                link.uid()
            )));
        }
        if let Err(e) = std::fs::metadata(file)
            && e.kind() == std::io::ErrorKind::NotFound
        {
            let target = std::fs::read_link(file).unwrap_or_default();
            return Err(refuse(format!(
                "it is a dangling symbolic link (to {})",
                target.display()
            )));
        }
    }
    let Some(bytes) = read_checked(file, limit, |meta| {
        if meta.uid() != uid {
            return Err(refuse(format!(
                "it is owned by uid {}, not by this user (uid {uid})",
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(refuse(format!(
                "its mode {:o} lets others change it (remove the group and other write bits)",
                meta.mode() & 0o7777
            )));
        }
        Ok(())
    })?
    else {
        return Err(refuse("it disappeared while being read".to_owned()));
    };
    Ok(Some(bytes))
}

/// [`read_user_file`] with `check` applied to the opened file's metadata first.
fn read_checked(
    file: &Path,
    limit: u64,
    check: impl FnOnce(&std::fs::Metadata) -> std::io::Result<()>,
) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let handle = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(file)
    {
        Ok(handle) => handle,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = handle.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    check(&meta)?;
    let mut bytes = Vec::new();
    handle
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authority_files_get_owner_mode_and_link_checks() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        assert!(read_authority_file(&file, 100).unwrap().is_none());
        std::fs::write(&file, "x = 1\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            read_authority_file(&file, 100).unwrap().unwrap(),
            b"x = 1\n"
        );

        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = read_authority_file(&file, 100).unwrap_err();
        assert!(err.to_string().contains("mode 666"), "{err}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();

        let link = dir.path().join("hooks.toml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(
            read_authority_file(&link, 100).unwrap().is_some(),
            "own link, own file"
        );
        std::fs::remove_file(&file).unwrap();
        let err = read_authority_file(&link, 100).unwrap_err();
        assert!(err.to_string().contains("dangling symbolic link"), "{err}");

        let fifo = dir.path().join("fifo.toml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read_authority_file(&fifo, 100).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");

        if nix::unistd::geteuid().is_root() {
            std::fs::write(&file, "").unwrap();
            std::os::unix::fs::chown(&file, Some(4242), None).unwrap();
            let err = read_authority_file(&file, 100).unwrap_err();
            assert!(err.to_string().contains("owned by uid 4242"), "{err}");
            let err = read_authority_file(&link, 100).unwrap_err();
            assert!(err.to_string().contains("owned by uid 4242"), "{err}");
        }
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("/h/config.toml"), text)
    }

    #[test]
    fn missing_file_is_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let home = RhoHome::at(dir.path(), None);
        let config = Config::load(&home).unwrap();
        assert_eq!(config, Config::empty(dir.path().join("config.toml")));
    }

    #[test]
    fn full_file_parses() {
        let config = parse(
            r#"
[behavior]
permission_mode = "plan"

[models.aliases]
fast = "openai/gpt-4o-mini"
router = "openai/meta/llama-3"
deep = { provider = "local", model = "qwen3", reasoning = "high" }

[providers.openai]
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"

[providers.local]
base_url = "http://127.0.0.1:8080/v1"

[environment]
exclude = ["MY_SECRET", "CORP_*"]

[budgets]
node_count = 10

[scheduler]
max_parallel_agents = 2
"#,
        )
        .unwrap();
        assert_eq!(config.behavior.permission_mode, Some(PermissionMode::Plan));
        let fast = &config.model_aliases["fast"];
        assert_eq!(
            (fast.provider.as_str(), fast.model.as_str()),
            ("openai", "gpt-4o-mini")
        );
        assert_eq!(config.model_aliases["router"].model, "meta/llama-3");
        assert_eq!(
            config.model_aliases["deep"].reasoning,
            Some(Reasoning::High)
        );
        assert_eq!(config.providers["local"].api_key_env, None);
        assert_eq!(config.environment.exclude, ["MY_SECRET", "CORP_*"]);
        assert_eq!(config.budgets["node_count"], 10);
        assert_eq!(config.scheduler.max_parallel_agents, Some(2));
    }

    fn message(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn rho_model_and_custom_provider_tables_parse() {
        let c = parse(
            "[model]\nprovider = \"vllm\"\nmodel = \"@deep\"\nauth = \"vllm-api-key\"\n\
             reasoning = \"high\"\n\n[model.aliases]\ndeep = \"anthropic/claude-x\"\n\
             fast = \"qwen-small\"\n\n[providers.custom.vllm]\n\
             base_url = \"http://127.0.0.1:8000/v1\"\n",
        )
        .unwrap();
        assert_eq!(c.model.provider.as_deref(), Some("vllm"));
        assert_eq!(c.model.reasoning, Some(Reasoning::High));
        assert_eq!(c.model_aliases["deep"].provider, "anthropic");
        assert_eq!(c.model_aliases["fast"].provider, "vllm");
        assert_eq!(c.model_aliases["fast"].model, "qwen-small");
        assert!(c.knows_provider("vllm") && c.knows_provider("openai"));
        assert!(
            c.secret_variables()
                .contains(&"RHO_VLLM_API_KEY".to_owned())
        );
        assert_eq!(custom_key_variable("my-host"), "RHO_MY_HOST_API_KEY");
    }

    #[test]
    fn bad_model_and_custom_provider_values_name_the_key() {
        for (text, key) in [
            (
                "[providers.custom.Bad_Name]\nbase_url = \"http://x/v1\"\n",
                "providers.custom.Bad_Name",
            ),
            (
                "[providers.custom.openai]\nbase_url = \"http://x/v1\"\n",
                "providers.custom.openai",
            ),
            (
                "[providers.custom.h]\nbase_url = \"http://u:p@x/v1\"\n",
                "providers.custom.h.base_url",
            ),
            (
                "[providers.custom.h]\nbase_url = \"http://x/v1?a=1\"\n",
                "providers.custom.h.base_url",
            ),
            (
                "[providers.custom.h]\nbase_url = \"http://x/v1\"\ncatalog = \"a\"\ncatalog_mode = \"model-id\"\n",
                "providers.custom.h.catalog_mode",
            ),
            ("[model]\nprovider = \"nowhere\"\n", "model.provider"),
            (
                "[model]\nprovider = \"openai\"\nauth = \"none\"\n",
                "model.auth",
            ),
            ("[model]\nmodel = \"@missing\"\n", "model.model"),
            ("[model]\nreasoning = \"lots\"\n", "model.reasoning"),
            (
                "[model.aliases]\nfast = \"bare-id\"\n",
                "model.aliases.fast",
            ),
            ("[model.aliases]\nx = \"@y\"\n", "model.aliases.x"),
        ] {
            let m = message(text);
            assert!(m.contains(&format!("`{key}`")), "{text}: {m}");
        }
    }

    #[test]
    fn unknown_keys_name_file_line_and_key() {
        let m = message("[behavior]\npermission_mode = \"plan\"\ncolour = 1\n");
        assert!(m.starts_with("/h/config.toml:3:1:"), "{m}");
        assert!(m.contains("colour"), "{m}");
        let m = message("[sheduler]\n");
        assert!(m.contains("sheduler"), "{m}");
        let m = message("[models.aliases]\nx = { provider = \"p\", model = \"m\", extra = 1 }\n");
        assert!(m.contains("extra"), "{m}");
        let m = message("[providers.p]\nbase_url = \"http://x\"\napi_key = \"sk-1\"\n");
        assert!(m.contains("api_key") && m.contains(":3:"), "{m}");
    }

    #[test]
    fn bad_values_name_the_key() {
        for (text, key, needle) in [
            (
                "[behavior]\npermission_mode = \"yolo\"\n",
                "behavior.permission_mode",
                "yolo",
            ),
            (
                "[providers.p]\nbase_url = \"ftp://x\"\n",
                "providers.p.base_url",
                "http",
            ),
            (
                "[providers.p]\nbase_url = \"http://x\"\napi_key_env = \"sk-123\"\n",
                "providers.p.api_key_env",
                "not the key",
            ),
            (
                "[models.aliases]\nfast = \"nope/m\"\n",
                "models.aliases.fast",
                "[providers.nope]",
            ),
            (
                "[providers.p]\nbase_url = \"http://x\"\n[models.aliases]\nf = { provider = \"p\", model = \"m\", reasoning = \"huge\" }\n",
                "models.aliases.f.reasoning",
                "huge",
            ),
            (
                "[environment]\nexclude = [\"A B\"]\n",
                "environment.exclude",
                "A B",
            ),
            (
                "[environment]\nallow = [\"**\"]\n",
                "environment.allow",
                "`**`",
            ),
            (
                "[scheduler]\nmax_parallel_nodes = 0\n",
                "scheduler.max_parallel_nodes",
                "at least 1",
            ),
        ] {
            let m = message(text);
            assert!(m.contains(&format!("`{key}`")), "{m}");
            assert!(m.contains(needle), "{m}");
        }
        let m = message("[models.aliases]\nfast = \"no-slash\"\n");
        assert!(m.contains("provider/model"), "{m}");
        let m = message("[budgets]\nnode_count = -1\n");
        assert!(m.contains(":2:"), "{m}");
    }
}
