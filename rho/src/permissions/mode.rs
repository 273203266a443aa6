//! Which permission mode this process runs with: `--permission-mode`, else
//! `RHO_PERMISSION_MODE`, else `[behavior] permission_mode` in `$RHO_HOME/config.toml`, else
//! `bypass`.
//!
//! Invariant: the first setting present decides, and an unknown value is a configuration
//! error naming where it came from (exit 2) — never a fall-through to a later setting or to
//! the default, which is the widest mode. (An unknown value in `config.toml` is already
//! rejected when the configuration is loaded, naming the file and key.)

use rho_policy::{ModeSelection, ModeSource, PermissionMode, PolicyError, select_mode};

use super::{HostEnvironment, PermissionsError};
use crate::config::Config;

/// The environment variable that selects the mode when no flag is given.
pub const PERMISSION_MODE_VAR: &str = "RHO_PERMISSION_MODE";

/// Selects the mode from the flag value, the environment snapshot and the loaded
/// configuration.
pub fn select_permission_mode(
    flag: Option<&str>,
    env: &HostEnvironment,
    config: &Config,
) -> Result<ModeSelection, PermissionsError> {
    let env_value = match env.get(PERMISSION_MODE_VAR) {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok_or_else(|| PolicyError::InvalidModeSetting {
                    origin: ModeSource::Environment,
                    value: value.to_string_lossy().into_owned(),
                })?,
        ),
    };
    let config_value = config.behavior.permission_mode.map(PermissionMode::as_str);
    Ok(select_mode(flag, env_value, config_value)?)
}

/// [`select_permission_mode`] with this process's environment.
pub fn select_process_mode(
    flag: Option<&str>,
    config: &Config,
) -> Result<ModeSelection, PermissionsError> {
    select_permission_mode(flag, &HostEnvironment::current(), config)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt as _;
    use std::path::Path;

    use super::*;

    fn config(text: &str) -> Config {
        Config::parse(Path::new("/home/u/.rho/config.toml"), text).unwrap()
    }

    fn env(value: Option<&str>) -> HostEnvironment {
        HostEnvironment::from_vars(value.map(|v| (PERMISSION_MODE_VAR, v)))
    }

    #[test]
    fn flag_then_environment_then_config_then_bypass() {
        let cfg = config("[behavior]\npermission_mode = \"supervised\"\n");
        let sel = select_permission_mode(Some("plan"), &env(Some("auto")), &cfg).unwrap();
        assert_eq!(
            (sel.mode, sel.source),
            (PermissionMode::Plan, ModeSource::Flag)
        );

        let sel = select_permission_mode(None, &env(Some("auto")), &cfg).unwrap();
        assert_eq!(
            (sel.mode, sel.source),
            (PermissionMode::Auto, ModeSource::Environment)
        );

        let sel = select_permission_mode(None, &env(None), &cfg).unwrap();
        assert_eq!(
            (sel.mode, sel.source),
            (PermissionMode::Supervised, ModeSource::Config)
        );

        let sel = select_permission_mode(None, &env(None), &config("")).unwrap();
        assert_eq!(
            (sel.mode, sel.source),
            (PermissionMode::Bypass, ModeSource::Default)
        );
        assert_eq!(sel.to_string(), "permission mode bypass (default)");
    }

    #[test]
    fn unknown_flag_value_is_a_configuration_error_naming_the_flag() {
        let err =
            select_permission_mode(Some("yolo"), &env(Some("plan")), &config("")).unwrap_err();
        assert!(matches!(err, PermissionsError::Policy(_)), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("--permission-mode") && msg.contains("`yolo`"),
            "{msg}"
        );
    }

    #[test]
    fn unknown_environment_value_is_an_error_naming_the_variable_even_with_a_config_mode() {
        let cfg = config("[behavior]\npermission_mode = \"plan\"\n");
        for bad in ["", "Auto", "allow-edits"] {
            let err = select_permission_mode(None, &env(Some(bad)), &cfg).unwrap_err();
            assert!(matches!(err, PermissionsError::Policy(_)), "{err}");
            let msg = err.to_string();
            assert!(msg.contains("RHO_PERMISSION_MODE") && msg.contains(&format!("`{bad}`")));
        }
        let raw = HostEnvironment::from_vars([(
            OsString::from(PERMISSION_MODE_VAR),
            OsString::from_vec(b"pl\xffan".to_vec()),
        )]);
        let err = select_permission_mode(None, &raw, &cfg).unwrap_err();
        assert!(err.to_string().contains("RHO_PERMISSION_MODE"), "{err}");
    }

    #[test]
    fn unknown_config_value_is_rejected_when_the_config_loads_naming_file_and_key() {
        let err = Config::parse(
            Path::new("/home/u/.rho/config.toml"),
            "[behavior]\npermission_mode = \"everything\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/home/u/.rho/config.toml"), "{err}");
        assert!(
            err.contains("behavior.permission_mode") && err.contains("everything"),
            "{err}"
        );
    }
}
