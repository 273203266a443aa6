//! The root option `--config FILE` (Rho 1.47's `rho --config FILE ...`), and the process-wide
//! view of the root options that subcommands without a [`SessionArgs`] parameter read.
//!
//! The other root options Rho accepts before the subcommand (`--permission-mode`,
//! `--provider`, `--model`, `--reasoning`, `--agent`, `--no-subagents`) are the global
//! [`SessionArgs`]; `--config` is global here too, so it may also follow the subcommand (Rho
//! takes it only before; accepting it after is an extension). It selects the configuration
//! file instead of `$RHO_HOME/config.toml` for every subcommand that reads configuration; a
//! missing file is the default configuration, as `$RHO_HOME/config.toml` is.
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
}

/// What the subcommands read of the root options.
#[derive(Debug, Clone, Default)]
pub struct InstalledRoot {
    /// `--config`.
    pub config: Option<PathBuf>,
    /// The root `--permission-mode` (a subcommand's own flag wins over it).
    pub permission_mode: Option<String>,
}

static ROOT: OnceLock<InstalledRoot> = OnceLock::new();

/// Installs the parsed root options (the first call wins; later calls change nothing).
pub fn install(options: RootOptions, session: &SessionArgs) {
    let _ = ROOT.set(InstalledRoot {
        config: options.config,
        permission_mode: session.permission_mode.clone(),
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
    /// `$RHO_HOME/config.toml`.
    pub fn load_config(&self, home: &RhoHome) -> Result<Config, ConfigError> {
        match &self.config {
            Some(file) => Config::load_file(file),
            None => Config::load(home),
        }
    }
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
