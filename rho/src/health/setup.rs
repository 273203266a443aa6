//! What a run depends on besides the planner sandbox: the configuration parses, the data
//! directory is private, and the agent runtimes can start (a configured provider has its key
//! variable, `claude` is installed and signed in).
//!
//! Invariant: key variables are reported as set or not set, never with their values; an
//! optional runtime nobody selected is a warning, a selected one that cannot start fails.

use std::ffi::OsString;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;

use crate::config::{BUILTIN_PROVIDERS, Config, ConfigError, custom_key_variable};
use crate::runtime::claude_cli;

use super::{Check, CheckStatus};

/// The configuration file parses (a missing file is the default configuration).
pub fn check_config(file: &Path, loaded: &Result<Config, ConfigError>) -> Check {
    match loaded {
        Ok(_) if file.exists() => Check::ok("config", file.display().to_string(), "parses"),
        Ok(_) => Check::ok(
            "config",
            file.display().to_string(),
            "absent: the defaults apply",
        ),
        Err(error) => Check::not_ok(
            "config",
            file.display().to_string(),
            CheckStatus::Failed,
            crate::workflow::plan::error_chain(error),
            "fix the file at the place named (see the README's configuration keys), or move it \
             aside to use the defaults",
        ),
    }
}

/// How command trees are contained here (see [`crate::containment`]): a cgroup v2 per tree,
/// else the subreaper fallback; failed when `RHO_CONTAINMENT` is unusable or neither works
/// (a detached descendant could then outlive its node).
pub fn check_containment() -> Check {
    use crate::containment::{self, Mode};
    const NAME: &str = "process-tree containment";
    let fix = "unset RHO_CONTAINMENT or set it to `auto` or `subreaper`";
    let mode = match containment::mode() {
        Ok(mode) => mode,
        Err(e) => {
            return Check::not_ok("containment", NAME, CheckStatus::Failed, e.to_string(), fix);
        }
    };
    let cgroup = match containment::owner_root() {
        Ok(root) => {
            return Check::ok(
                "containment",
                NAME,
                format!("a cgroup v2 per tree below {}", root.path()),
            );
        }
        Err(e) => e,
    };
    let why = if mode == Mode::Subreaper {
        "selected by RHO_CONTAINMENT=subreaper".to_owned()
    } else {
        format!("no cgroup: {cgroup}")
    };
    match containment::tracked::available() {
        Ok(()) => Check::ok(
            "containment",
            NAME,
            format!("subreaper fallback: descendants recorded by identity and tag ({why})"),
        ),
        Err(e) => Check::not_ok(
            "containment",
            NAME,
            CheckStatus::Failed,
            format!("none: {why}; and the subreaper fallback is unavailable: {e}"),
            "delegate a writable cgroup v2 hierarchy to this user (a systemd user slice), or \
             use a kernel with CONFIG_PROC_CHILDREN",
        ),
    }
}

/// The data directory (`RHO_HOME`) is a directory owned by this user with no group or
/// other permissions; a missing one is created private on first use. `euid` is this
/// process's effective user.
pub fn check_data_directory(root: &Path, euid: u32) -> Check {
    let name = root.display().to_string();
    let meta = match std::fs::metadata(root) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Check::ok(
                "data_directory",
                name,
                "absent: created with mode 0700 when first needed",
            );
        }
        Err(e) => {
            return Check::not_ok(
                "data_directory",
                name.clone(),
                CheckStatus::Failed,
                format!("cannot inspect it: {e}"),
                format!("make {name} readable by you, or set RHO_HOME to another directory"),
            );
        }
    };
    let mode = meta.permissions().mode() & 0o7777;
    if !meta.is_dir() {
        return Check::not_ok(
            "data_directory",
            name.clone(),
            CheckStatus::Failed,
            "not a directory",
            format!("remove {name} or set RHO_HOME to a directory"),
        );
    }
    if meta.uid() != euid {
        return Check::not_ok(
            "data_directory",
            name.clone(),
            CheckStatus::Failed,
            format!("owned by uid {}, not by you (uid {euid})", meta.uid()),
            format!("chown {euid} {name}, or set RHO_HOME to a directory of your own"),
        );
    }
    if mode & 0o077 != 0 {
        return Check::not_ok(
            "data_directory",
            name.clone(),
            CheckStatus::Failed,
            format!("mode {mode:04o} lets others in (plans, runs and trust must be private)"),
            format!("chmod 700 {name}"),
        );
    }
    Check::ok("data_directory", name, format!("private (mode {mode:04o})"))
}

fn is_set(env: &[(OsString, OsString)], name: &str) -> bool {
    env.iter().any(|(k, v)| k == name && !v.is_empty())
}

/// Each provider's key variable: set or not (never its value). A provider the
/// configuration selects (`[model] provider`, or an alias's provider) fails without its
/// key; the others warn.
pub fn check_providers(config: &Config, env: &[(OsString, OsString)]) -> Vec<Check> {
    let selected: Vec<&str> = config
        .model
        .provider
        .iter()
        .map(String::as_str)
        .chain(config.model_aliases.values().map(|a| a.provider.as_str()))
        .collect();
    let mut providers: Vec<(String, Option<String>)> = BUILTIN_PROVIDERS
        .iter()
        .map(|name| {
            (
                (*name).to_owned(),
                Some(format!("{}_API_KEY", name.to_ascii_uppercase())),
            )
        })
        .collect();
    providers.extend(
        config
            .custom_providers
            .keys()
            .map(|name| (name.clone(), Some(custom_key_variable(name)))),
    );
    providers.extend(
        config
            .providers
            .iter()
            .map(|(name, p)| (name.clone(), p.api_key_env.clone())),
    );
    providers
        .into_iter()
        .map(|(name, key)| {
            let check_name = format!("provider {name}");
            let Some(key) = key else {
                return Check::ok("provider", check_name, "needs no key");
            };
            if is_set(env, &key) {
                return Check::ok("provider", check_name, format!("{key} is set"));
            }
            let status = if selected.contains(&name.as_str()) {
                CheckStatus::Failed
            } else {
                CheckStatus::Warning
            };
            let used = if status == CheckStatus::Failed {
                "selected in the configuration, but "
            } else {
                ""
            };
            Check::not_ok(
                "provider",
                check_name,
                status,
                format!("{used}{key} is not set"),
                format!("export {key}=<your key> to use {name} models"),
            )
        })
        .collect()
}

/// `claude` on `PATH` and signed in (`claude auth status`), for claude-cli agents. Missing
/// or signed out is a warning: only claude-cli agents need it.
pub fn check_claude(cwd: &Path, env: &[(OsString, OsString)]) -> Check {
    let Ok(binary) = claude_cli::find_claude(env) else {
        return Check::not_ok(
            "claude",
            "claude",
            CheckStatus::Warning,
            "not found on PATH: claude-cli agents cannot run",
            "install Claude Code (npm install -g @anthropic-ai/claude-code) to run claude-cli \
             agents",
        );
    };
    let name = format!("claude ({})", binary.display());
    match claude_cli::check_auth(&binary, cwd, env) {
        Ok(()) => Check::ok("claude", name, "signed in (`claude auth status` succeeded)"),
        Err(error) => Check::not_ok(
            "claude",
            name,
            CheckStatus::Warning,
            crate::workflow::plan::error_chain(&error),
            "run `claude auth login`, or set ANTHROPIC_API_KEY, before running claude-cli \
             agents",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        vars.iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn a_selected_provider_without_its_key_fails_and_no_key_is_printed() {
        let mut config = Config::empty("/nonexistent/config.toml");
        config.model.provider = Some("anthropic".to_owned());
        let checks = check_providers(&config, &env(&[("OPENAI_API_KEY", "sk-secret-value")]));
        let anthropic = checks
            .iter()
            .find(|c| c.name == "provider anthropic")
            .unwrap();
        assert_eq!(anthropic.status, CheckStatus::Failed);
        assert!(
            anthropic.detail.contains("ANTHROPIC_API_KEY is not set"),
            "{}",
            anthropic.detail
        );
        let openai = checks.iter().find(|c| c.name == "provider openai").unwrap();
        assert_eq!(openai.status, CheckStatus::Ok);
        let text = format!("{checks:?}");
        assert!(!text.contains("sk-secret-value"), "{text}");

        config.model.provider = None;
        let checks = check_providers(&config, &env(&[]));
        assert!(checks.iter().all(|c| c.status == CheckStatus::Warning));
    }

    #[test]
    fn the_data_directory_must_be_private_and_ours() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("home");
        assert_eq!(check_data_directory(&root, 0).status, CheckStatus::Ok);
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let euid = nix::unistd::geteuid().as_raw();
        let check = check_data_directory(&root, euid);
        assert_eq!(check.status, CheckStatus::Failed);
        assert!(
            check.fix.as_deref().unwrap().starts_with("chmod 700 "),
            "{check:?}"
        );
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(check_data_directory(&root, euid).status, CheckStatus::Ok);
        assert_eq!(
            check_data_directory(&root, euid + 1).status,
            CheckStatus::Failed
        );
    }

    #[test]
    fn a_config_that_does_not_parse_fails_naming_the_place() {
        let file = Path::new("/tmp/x/config.toml");
        let loaded = Config::parse(file, "[behavior\n");
        let check = check_config(file, &loaded);
        assert_eq!(check.status, CheckStatus::Failed);
        assert!(
            check.detail.starts_with("/tmp/x/config.toml:1:"),
            "{}",
            check.detail
        );
    }
}
