//! The root options `--config FILE` and `--auth PROFILE` (Rho 1.47's `rho --config FILE
//! --auth PROFILE ...`), and the process-wide view of the root options that subcommands
//! without a [`SessionArgs`] parameter read.
//!
//! The other root options Rho accepts before the subcommand (`--permission-mode`,
//! `--provider`, `--model`, `--reasoning`, `--agent`, `--no-subagents`) are the global
//! [`SessionArgs`]; `--config` and `--auth` are global here too, so they may also follow the
//! subcommand (Rho takes them only before; accepting them after is an extension). `--config`
//! selects the configuration file instead of `$RHO_HOME/config.toml` for every subcommand
//! that reads configuration; a missing file is the default configuration, as
//! `$RHO_HOME/config.toml` is. `--auth` overrides `[model] auth` for this invocation, for the
//! provider selected (`--provider`, else `[model] provider`), with the same value rules;
//! unlike Rho it is never saved (rho has no `--save`).
//!
//! Invariant: the options are installed once, before the subcommand runs, and never change
//! afterwards.

use std::path::PathBuf;
use std::sync::OnceLock;

use clap::Args;

use super::session_args::SessionArgs;
use crate::config::{Config, ConfigError};
use crate::paths::RhoHome;

/// Options given before (or, being global, after) the subcommand that are not session options.
#[derive(Debug, Clone, Default, Args)]
pub struct RootOptions {
    /// Configuration file to use instead of `$RHO_HOME/config.toml`.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Auth profile for this invocation's provider (`none`, `NAME-api-key`, `api-key`,
    /// `anthropic-api-key`, or another profile Rho 1.47 knows).
    #[arg(long, global = true, value_name = "PROFILE", value_parser = parse_auth_profile)]
    pub auth: Option<String>,
}

/// Rho's parse-time rule: a profile Rho knows, `none`, or `NAME-api-key` for a custom host.
fn parse_auth_profile(value: &str) -> Result<String, String> {
    let custom = value
        .strip_suffix("-api-key")
        .is_some_and(|name| !name.is_empty() && !name.chars().any(char::is_whitespace));
    if value == "none" || custom || crate::agents::auth::known_profiles().contains(&value) {
        return Ok(value.to_owned());
    }
    Err(format!(
        "unknown auth profile `{value}`; expected none, NAME-api-key or one of: {}",
        crate::agents::auth::known_profiles().join(", ")
    ))
}

/// What the subcommands read of the root options.
#[derive(Debug, Clone, Default)]
pub struct InstalledRoot {
    /// `--config`.
    pub config: Option<PathBuf>,
    /// The root `--permission-mode` (a subcommand's own flag wins over it).
    pub permission_mode: Option<String>,
    /// `--auth`.
    pub auth: Option<String>,
    /// `--provider` (the provider `--auth` applies to).
    pub provider: Option<String>,
}

static ROOT: OnceLock<InstalledRoot> = OnceLock::new();

/// Installs the parsed root options (the first call wins; later calls change nothing).
pub fn install(options: RootOptions, session: &SessionArgs) {
    let _ = ROOT.set(InstalledRoot {
        config: options.config,
        permission_mode: session.permission_mode.clone(),
        auth: options.auth,
        provider: session.provider.clone(),
    });
}

/// The root options of this process (all unset when none were installed, as in library
/// use and unit tests).
pub fn options() -> &'static InstalledRoot {
    ROOT.get_or_init(InstalledRoot::default)
}

impl InstalledRoot {
    /// The permission mode flag in force: the subcommand's own flag, else the root one.
    pub fn permission_mode<'a>(&'a self, subcommand: Option<&'a str>) -> Option<&'a str> {
        subcommand.or(self.permission_mode.as_deref())
    }

    /// Loads the configuration this process uses: the `--config` file, else
    /// `$RHO_HOME/config.toml`, with `--auth` applied.
    pub fn load_config(&self, home: &RhoHome) -> Result<Config, ConfigError> {
        let mut config = match &self.config {
            Some(file) => Config::load_file(file)?,
            None => Config::load(home)?,
        };
        if let Some(auth) = &self.auth {
            apply_auth(&mut config, auth, self.provider.as_deref())?;
        }
        Ok(config)
    }
}

/// Makes `auth` the invocation's `[model] auth` for `provider` (else `[model] provider`),
/// checked as the key is checked in the file; the error names `--auth`.
fn apply_auth(config: &mut Config, auth: &str, provider: Option<&str>) -> Result<(), ConfigError> {
    let bad = |problem: String| ConfigError::Value {
        file: config.file.clone(),
        key: "--auth".to_owned(),
        problem,
    };
    let Some(provider) = provider
        .or(config.model.provider.as_deref())
        .map(str::to_owned)
    else {
        return Err(bad(format!(
            "`{auth}` needs a provider: pass --provider or set [model] provider"
        )));
    };
    let allowed = crate::config::auth_profiles_for(&provider);
    if !allowed.iter().any(|a| a == auth) {
        return Err(bad(format!(
            "`{auth}` is not an auth profile of provider `{provider}`; allowed: {}",
            allowed.join(", ")
        )));
    }
    config.model.provider = Some(provider);
    config.model.auth = Some(auth.to_owned());
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::{Parser, Subcommand};

    use super::*;

    #[derive(Debug, Parser)]
    struct Probe {
        #[command(flatten)]
        root: RootOptions,
        #[command(flatten)]
        session: SessionArgs,
        #[command(subcommand)]
        command: Option<Sub>,
    }

    #[derive(Debug, Subcommand)]
    enum Sub {
        Workflow,
    }

    #[test]
    fn every_rho_root_option_parses_before_the_subcommand() {
        let probe = Probe::try_parse_from([
            "rho",
            "--config",
            "/tmp/c.toml",
            "--permission-mode",
            "plan",
            "--provider",
            "anthropic",
            "--model",
            "m",
            "--reasoning",
            "xhigh",
            "--agent",
            "reviewer",
            "--no-subagents",
            "workflow",
        ])
        .unwrap();
        assert_eq!(probe.root.config, Some(PathBuf::from("/tmp/c.toml")));
        let s = probe.session;
        assert_eq!(s.permission_mode.as_deref(), Some("plan"));
        assert_eq!(s.provider.as_deref(), Some("anthropic"));
        assert_eq!(s.model.as_deref(), Some("m"));
        assert_eq!(s.reasoning.as_deref(), Some("xhigh"));
        assert_eq!(s.agent.as_deref(), Some("reviewer"));
        assert!(s.no_subagents);
        assert!(matches!(probe.command, Some(Sub::Workflow)));
    }

    #[test]
    fn auth_parses_as_rho_parses_it() {
        for good in [
            "none",
            "vllm-api-key",
            "anthropic-api-key",
            "api-key",
            "xai-oauth",
        ] {
            let probe = Probe::try_parse_from(["rho", "--auth", good, "workflow"]).unwrap();
            assert_eq!(probe.root.auth.as_deref(), Some(good));
        }
        for bad in ["magic", "-api-key", "", "my host-api-key"] {
            let arg = format!("--auth={bad}");
            let err = Probe::try_parse_from(["rho", arg.as_str()])
                .unwrap_err()
                .to_string();
            assert!(err.contains("--auth"), "{bad}: {err}");
        }
    }

    #[test]
    fn auth_applies_to_the_selected_provider_or_says_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let home = RhoHome::at(dir.path().join("home"), None);
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "[model]\nprovider = \"local\"\nmodel = \"m\"\n\n[providers.custom.local]\nbase_url = \"http://127.0.0.1:9/v1\"\n",
        )
        .unwrap();
        let root = |auth: &str, provider: Option<&str>| InstalledRoot {
            config: Some(file.clone()),
            auth: Some(auth.to_owned()),
            provider: provider.map(str::to_owned),
            ..InstalledRoot::default()
        };
        let config = root("none", None).load_config(&home).unwrap();
        assert_eq!(config.model.auth.as_deref(), Some("none"));
        let config = root("anthropic-api-key", Some("anthropic"))
            .load_config(&home)
            .unwrap();
        assert_eq!(config.model.provider.as_deref(), Some("anthropic"));
        assert_eq!(config.model.auth.as_deref(), Some("anthropic-api-key"));
        let err = root("api-key", None)
            .load_config(&home)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`--auth`") && err.contains("local-api-key"),
            "{err}"
        );
        let bare = InstalledRoot {
            auth: Some("none".into()),
            ..InstalledRoot::default()
        };
        let err = bare.load_config(&home).unwrap_err().to_string();
        assert!(err.contains("needs a provider"), "{err}");
    }

    #[test]
    fn config_may_follow_the_subcommand() {
        let probe = Probe::try_parse_from(["rho", "workflow", "--config", "/tmp/c.toml"]).unwrap();
        assert_eq!(probe.root.config, Some(PathBuf::from("/tmp/c.toml")));
    }

    #[test]
    fn the_subcommand_flag_wins_over_the_root_one() {
        let r = InstalledRoot {
            permission_mode: Some("plan".into()),
            ..InstalledRoot::default()
        };
        assert_eq!(r.permission_mode(Some("auto")), Some("auto"));
        assert_eq!(r.permission_mode(None), Some("plan"));
        assert_eq!(InstalledRoot::default().permission_mode(None), None);
    }

    #[test]
    fn config_selects_the_file_and_a_missing_one_is_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let home = RhoHome::at(dir.path().join("home"), None);
        let file = dir.path().join("elsewhere.toml");
        let r = InstalledRoot {
            config: Some(file.clone()),
            ..InstalledRoot::default()
        };
        assert_eq!(r.load_config(&home).unwrap().file, file);
        std::fs::write(&file, "[behavior]\npermission_mode = \"nonsense\"\n").unwrap();
        let err = r.load_config(&home).unwrap_err().to_string();
        assert!(err.contains("elsewhere.toml"), "{err}");
    }
}
