//! Which model a run talks to: `[model]` in the configuration, command-line overrides,
//! `@alias` references, and a bound agent's pinned model with its policy.
//!
//! Invariant: keys are read from the environment at resolution time into an [`ApiKey`]
//! and nowhere else; the configuration only ever names variables.

use std::path::PathBuf;

use super::{ApiKey, Endpoint, ModelChoice, WireProtocol};
use crate::agents::Reasoning;
use crate::agents::binder::BoundModel;
use crate::agents::definition::ModelPolicy;
use crate::config::{Config, custom_key_variable};

/// Command-line selections (`--provider`, `--model`, `--reasoning`) for one invocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelOverrides {
    /// `--provider`.
    pub provider: Option<String>,
    /// `--model` (an id, `provider/model` or `@alias`).
    pub model: Option<String>,
    /// `--reasoning`.
    pub reasoning: Option<Reasoning>,
}

/// Why no model could be selected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SelectError {
    /// Nothing selects a model.
    #[error(
        "no model selected: set `model` (and `provider`) under [model] in {}, or pass --model",
        config.display()
    )]
    NoModel {
        /// The configuration file.
        config: PathBuf,
    },
    /// A model id without a provider.
    #[error(
        "model `{model}` names no provider: write `provider/{model}`, set [model].provider in \
         {}, or pass --provider",
        config.display()
    )]
    NoProvider {
        /// The model as given.
        model: String,
        /// The configuration file.
        config: PathBuf,
    },
    /// The provider is neither built in nor configured.
    #[error(
        "unknown provider `{provider}`: known are openai, anthropic and the \
         [providers.custom.NAME] hosts of {}",
        config.display()
    )]
    UnknownProvider {
        /// The provider.
        provider: String,
        /// The configuration file.
        config: PathBuf,
    },
    /// `@alias` names nothing.
    #[error("`@{alias}` names no alias in [model.aliases] of {}", config.display())]
    UnknownAlias {
        /// The alias, without `@`.
        alias: String,
        /// The configuration file.
        config: PathBuf,
    },
    /// A required key is missing.
    #[error(
        "provider `{provider}` needs an API key: set {variable} in the environment (rho never \
         stores keys)"
    )]
    MissingKey {
        /// The provider.
        provider: String,
        /// The variable to set.
        variable: String,
    },
    /// A base-URL override is not a URL rho accepts.
    #[error("{variable}: `{value}` must be an http:// or https:// URL without a query")]
    BadBaseUrl {
        /// The variable.
        variable: String,
        /// Its value.
        value: String,
    },
    /// An agent requires a model that is not available.
    #[error("agent `{agent}` requires model `{model}`, which is not available: {reason}")]
    RequiredUnavailable {
        /// The agent.
        agent: String,
        /// The model.
        model: String,
        /// Why.
        reason: String,
    },
}

/// Reads an environment variable (injected so tests need no process environment).
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment, for production callers.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn checked_base(variable: &str, value: &str) -> Result<String, SelectError> {
    let trimmed = value.trim().trim_end_matches('/');
    if !(trimmed.starts_with("http://") || trimmed.starts_with("https://"))
        || trimmed.contains('?')
        || trimmed.contains('#')
    {
        return Err(SelectError::BadBaseUrl {
            variable: variable.to_owned(),
            value: value.to_owned(),
        });
    }
    Ok(trimmed.to_owned())
}

/// The endpoint of a provider: its protocol, base URL and key.
pub fn endpoint(
    config: &Config,
    provider: &str,
    env: EnvLookup<'_>,
) -> Result<Endpoint, SelectError> {
    let auth = if config.model.provider.as_deref() == Some(provider) {
        config.model.auth.as_deref()
    } else {
        None
    };
    let required_key = |variable: &str| {
        env(variable)
            .map(|k| ApiKey::new(&k))
            .ok_or_else(|| SelectError::MissingKey {
                provider: provider.to_owned(),
                variable: variable.to_owned(),
            })
    };
    match provider {
        "openai" => {
            let base_url = match env("OPENAI_BASE_URL") {
                Some(url) => checked_base("OPENAI_BASE_URL", &url)?,
                None => "https://api.openai.com/v1".to_owned(),
            };
            Ok(Endpoint {
                provider: provider.to_owned(),
                protocol: WireProtocol::OpenAiChat,
                base_url,
                key: Some(required_key("OPENAI_API_KEY")?),
                first_party: true,
            })
        }
        "anthropic" => {
            // As in Anthropic's own SDKs and Claude Code, the override is the host root.
            let base_url = match env("ANTHROPIC_BASE_URL") {
                Some(url) => format!("{}/v1", checked_base("ANTHROPIC_BASE_URL", &url)?),
                None => "https://api.anthropic.com/v1".to_owned(),
            };
            Ok(Endpoint {
                provider: provider.to_owned(),
                protocol: WireProtocol::AnthropicMessages,
                base_url,
                key: Some(required_key("ANTHROPIC_API_KEY")?),
                first_party: true,
            })
        }
        name => {
            if let Some(host) = config.custom_providers.get(name) {
                let variable = custom_key_variable(name);
                let key = match auth {
                    Some("none") => None,
                    Some(_) => Some(required_key(&variable)?),
                    None => env(&variable).map(|k| ApiKey::new(&k)),
                };
                return Ok(Endpoint {
                    provider: name.to_owned(),
                    protocol: WireProtocol::OpenAiChat,
                    base_url: host.base_url.trim_end_matches('/').to_owned(),
                    key,
                    first_party: false,
                });
            }
            if let Some(legacy) = config.providers.get(name) {
                let key = match &legacy.api_key_env {
                    Some(variable) => Some(required_key(variable)?),
                    None => None,
                };
                return Ok(Endpoint {
                    provider: name.to_owned(),
                    protocol: WireProtocol::OpenAiChat,
                    base_url: legacy.base_url.trim_end_matches('/').to_owned(),
                    key,
                    first_party: false,
                });
            }
            Err(SelectError::UnknownProvider {
                provider: name.to_owned(),
                config: config.file.clone(),
            })
        }
    }
}

/// Splits a model reference into (provider, model, alias reasoning).
fn split_model(
    config: &Config,
    reference: &str,
    default_provider: Option<&str>,
) -> Result<(String, String, Option<Reasoning>), SelectError> {
    if let Some(alias) = reference.strip_prefix('@') {
        let resolved =
            config
                .model_aliases
                .get(alias)
                .ok_or_else(|| SelectError::UnknownAlias {
                    alias: alias.to_owned(),
                    config: config.file.clone(),
                })?;
        return Ok((
            resolved.provider.clone(),
            resolved.model.clone(),
            resolved.reasoning,
        ));
    }
    if let Some((p, m)) = reference.split_once('/')
        && config.knows_provider(p)
    {
        return Ok((p.to_owned(), m.to_owned(), None));
    }
    match default_provider {
        Some(p) => Ok((p.to_owned(), reference.to_owned(), None)),
        None => Err(SelectError::NoProvider {
            model: reference.to_owned(),
            config: config.file.clone(),
        }),
    }
}

/// The conversation model: command-line overrides over `[model]`.
pub fn conversation_model(
    config: &Config,
    overrides: &ModelOverrides,
    env: EnvLookup<'_>,
) -> Result<ModelChoice, SelectError> {
    let provider = overrides
        .provider
        .as_deref()
        .or(config.model.provider.as_deref());
    let reference = overrides
        .model
        .as_deref()
        .or(config.model.model.as_deref())
        .ok_or_else(|| SelectError::NoModel {
            config: config.file.clone(),
        })?;
    let (provider, model, alias_reasoning) = split_model(config, reference, provider)?;
    Ok(ModelChoice {
        endpoint: endpoint(config, &provider, env)?,
        model,
        reasoning: overrides
            .reasoning
            .or(config.model.reasoning)
            .or(alias_reasoning),
    })
}

/// The model a bound `rho` agent runs on: its pin under its policy, else the parent's.
/// `parent` is the conversation model (an error when none is configured, which only
/// matters when the agent does not pin its own).
pub fn agent_model(
    config: &Config,
    agent: &str,
    bound: &BoundModel,
    reasoning: Option<Reasoning>,
    parent: Result<ModelChoice, SelectError>,
    env: EnvLookup<'_>,
) -> Result<ModelChoice, SelectError> {
    let with_reasoning = |mut choice: ModelChoice| {
        if reasoning.is_some() {
            choice.reasoning = reasoning;
        }
        choice
    };
    let (policy, provider, model) = match bound {
        BoundModel::Inherit => return parent.map(with_reasoning),
        BoundModel::Pinned {
            policy,
            provider,
            model,
            ..
        } => (*policy, provider, model),
    };
    let parent_provider = parent.as_ref().ok().map(|c| c.endpoint.provider.clone());
    let pinned = split_model(
        config,
        model,
        provider
            .as_deref()
            .or(parent_provider.as_deref())
            .or(config.model.provider.as_deref()),
    )
    .and_then(|(p, m, _)| {
        Ok(ModelChoice {
            endpoint: endpoint(config, &p, env)?,
            model: m,
            reasoning: None,
        })
    });
    match (policy, pinned) {
        (_, Ok(choice)) => Ok(with_reasoning(choice)),
        (ModelPolicy::Prefer, Err(_)) => parent.map(with_reasoning),
        (ModelPolicy::Require, Err(e)) => Err(SelectError::RequiredUnavailable {
            agent: agent.to_owned(),
            model: model.clone(),
            reason: e.to_string(),
        }),
        (_, Err(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(text: &str) -> Config {
        Config::parse(Path::new("/h/config.toml"), text).unwrap()
    }

    fn env_with(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn a_custom_host_takes_its_key_from_rho_name_api_key() {
        let c = config(
            "[model]\nprovider = \"my-vllm\"\nmodel = \"qwen\"\nreasoning = \"low\"\n\
             [providers.custom.my-vllm]\nbase_url = \"http://127.0.0.1:8000/v1/\"\n",
        );
        let env = env_with(&[("RHO_MY_VLLM_API_KEY", "sk-local")]);
        let choice = conversation_model(&c, &ModelOverrides::default(), &env).unwrap();
        assert_eq!(choice.endpoint.base_url, "http://127.0.0.1:8000/v1");
        assert_eq!(choice.endpoint.protocol, WireProtocol::OpenAiChat);
        assert!(!choice.endpoint.first_party);
        assert_eq!(choice.endpoint.key, Some(ApiKey::new("sk-local")));
        assert_eq!(choice.model, "qwen");
        assert_eq!(choice.reasoning, Some(Reasoning::Low));
        assert!(
            !format!("{choice:?}").contains("sk-local"),
            "keys never print"
        );
        // Keyless works too.
        let none = env_with(&[]);
        let keyless = conversation_model(&c, &ModelOverrides::default(), &none).unwrap();
        assert_eq!(keyless.endpoint.key, None);
    }

    #[test]
    fn first_party_providers_need_their_key_variables() {
        let c = config("[model]\nprovider = \"anthropic\"\nmodel = \"claude-x\"\n");
        let err = conversation_model(&c, &ModelOverrides::default(), &env_with(&[])).unwrap_err();
        assert!(err.to_string().contains("ANTHROPIC_API_KEY"), "{err}");
        let env = env_with(&[
            ("ANTHROPIC_API_KEY", "k"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
        ]);
        let choice = conversation_model(&c, &ModelOverrides::default(), &env).unwrap();
        assert_eq!(choice.endpoint.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(choice.endpoint.protocol, WireProtocol::AnthropicMessages);
    }

    #[test]
    fn aliases_and_overrides_resolve() {
        let c = config(
            "[model]\nprovider = \"openai\"\nmodel = \"@deep\"\n\
             [model.aliases]\ndeep = \"anthropic/claude-deep\"\nfast = \"gpt-fast\"\n",
        );
        let env = env_with(&[("OPENAI_API_KEY", "a"), ("ANTHROPIC_API_KEY", "b")]);
        let choice = conversation_model(&c, &ModelOverrides::default(), &env).unwrap();
        assert_eq!(choice.label(), "anthropic/claude-deep");
        let over = ModelOverrides {
            model: Some("@fast".into()),
            ..ModelOverrides::default()
        };
        assert_eq!(
            conversation_model(&c, &over, &env).unwrap().label(),
            "openai/gpt-fast"
        );
        let missing = ModelOverrides {
            model: Some("@nope".into()),
            ..ModelOverrides::default()
        };
        assert!(matches!(
            conversation_model(&c, &missing, &env),
            Err(SelectError::UnknownAlias { .. })
        ));
    }

    #[test]
    fn prefer_falls_back_and_require_fails() {
        let c = config("[model]\nprovider = \"openai\"\nmodel = \"gpt\"\n");
        let env = env_with(&[("OPENAI_API_KEY", "a")]);
        let parent = || conversation_model(&c, &ModelOverrides::default(), &env);
        let pinned = |policy| BoundModel::Pinned {
            policy,
            provider: Some("anthropic".into()),
            model: "claude".into(),
            alias: None,
        };
        let preferred =
            agent_model(&c, "a", &pinned(ModelPolicy::Prefer), None, parent(), &env).unwrap();
        assert_eq!(preferred.label(), "openai/gpt");
        let required = agent_model(&c, "a", &pinned(ModelPolicy::Require), None, parent(), &env);
        assert!(
            required
                .unwrap_err()
                .to_string()
                .contains("requires model `claude`")
        );
    }
}
