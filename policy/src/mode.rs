//! Permission modes, their authority order, and how one mode is selected for a process.
//!
//! Invariant: the order is by authority — `plan` < `supervised` < `allow_edits` < `auto` <
//! `bypass` — and [`narrow`] never returns a mode with more authority than either input, so
//! current settings can only narrow a frozen plan.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::PolicyError;

/// How much a run may do without asking; see `policy.md` for the decision table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// Everything is allowed (still subject to `before_tool_use` hooks).
    Bypass,
    /// Tracked workspace edits are allowed; other work is judged by a classifier, then a human.
    Auto,
    /// Tracked workspace edits are allowed; other work needs a human's approval.
    AllowEdits,
    /// Nothing runs: every operation is denied.
    Plan,
    /// Every operation needs a human's approval.
    Supervised,
}

impl PermissionMode {
    /// Every mode, narrowest first.
    pub const ALL: [PermissionMode; 5] = [
        PermissionMode::Plan,
        PermissionMode::Supervised,
        PermissionMode::AllowEdits,
        PermissionMode::Auto,
        PermissionMode::Bypass,
    ];

    /// The mode used when nothing selects one (as in Rho; outputs say so, so the open posture
    /// stays visible).
    pub const DEFAULT: PermissionMode = PermissionMode::Bypass;

    /// Rank by authority: 0 for `plan` up to 4 for `bypass`. The order is explicit here rather
    /// than taken from the declaration order, so reordering variants cannot widen anything.
    pub const fn authority(self) -> u8 {
        match self {
            PermissionMode::Plan => 0,
            PermissionMode::Supervised => 1,
            PermissionMode::AllowEdits => 2,
            PermissionMode::Auto => 3,
            PermissionMode::Bypass => 4,
        }
    }

    /// The spelling used on the command line, in the environment, config and outputs.
    pub const fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Bypass => "bypass",
            PermissionMode::Auto => "auto",
            PermissionMode::AllowEdits => "allow_edits",
            PermissionMode::Plan => "plan",
            PermissionMode::Supervised => "supervised",
        }
    }
}

impl PartialOrd for PermissionMode {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PermissionMode {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.authority().cmp(&other.authority())
    }
}

impl fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PermissionMode {
    type Err = PolicyError;

    /// Accepts exactly the five lowercase spellings; no trimming, no aliases, so a typo is
    /// reported instead of silently selecting another mode.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PermissionMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == s)
            .ok_or_else(|| PolicyError::UnknownPermissionMode {
                value: s.to_owned(),
            })
    }
}

/// The narrower of a frozen plan's mode and the current one: current policy can only narrow.
pub fn narrow(frozen: PermissionMode, current: PermissionMode) -> PermissionMode {
    frozen.min(current)
}

/// Which setting selected the permission mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModeSource {
    /// `--permission-mode`.
    Flag,
    /// `RHO_PERMISSION_MODE`.
    Environment,
    /// `[behavior] permission_mode` in `$RHO_HOME/config.toml`.
    Config,
    /// Nothing was set; [`PermissionMode::DEFAULT`] applies.
    Default,
}

impl fmt::Display for ModeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModeSource::Flag => "--permission-mode",
            ModeSource::Environment => "RHO_PERMISSION_MODE",
            ModeSource::Config => "[behavior] permission_mode in config.toml",
            ModeSource::Default => "default",
        })
    }
}

/// The selected mode and the setting that won, so outputs can say
/// `permission mode bypass (default)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeSelection {
    /// The mode in force.
    pub mode: PermissionMode,
    /// Where it came from.
    pub source: ModeSource,
}

impl fmt::Display for ModeSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "permission mode {} ({})", self.mode, self.source)
    }
}

/// Picks the mode: the flag, else `RHO_PERMISSION_MODE`, else `[behavior] permission_mode`,
/// else [`PermissionMode::DEFAULT`].
///
/// The first setting present decides, and it must be valid: an invalid flag is an error even
/// when the environment holds a valid mode, and an empty string is an invalid value rather than
/// "unset" (falling through to the default would silently select the widest mode). The host
/// passes `None` only for a setting that is absent.
pub fn select_mode(
    flag: Option<&str>,
    env: Option<&str>,
    config: Option<&str>,
) -> Result<ModeSelection, PolicyError> {
    let candidates = [
        (ModeSource::Flag, flag),
        (ModeSource::Environment, env),
        (ModeSource::Config, config),
    ];
    for (source, value) in candidates {
        if let Some(value) = value {
            let mode = value.parse().map_err(|_| PolicyError::InvalidModeSetting {
                origin: source,
                value: value.to_owned(),
            })?;
            return Ok(ModeSelection { mode, source });
        }
    }
    Ok(ModeSelection {
        mode: PermissionMode::DEFAULT,
        source: ModeSource::Default,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_by_authority_narrowest_first() {
        use PermissionMode::{AllowEdits, Auto, Bypass, Plan, Supervised};
        assert!(Plan < Supervised);
        assert!(Supervised < AllowEdits);
        assert!(AllowEdits < Auto);
        assert!(Auto < Bypass);
        let mut shuffled = [Bypass, Plan, Auto, Supervised, AllowEdits];
        shuffled.sort();
        assert_eq!(shuffled, PermissionMode::ALL);
    }

    #[test]
    fn every_mode_round_trips_through_text_and_serde() {
        for mode in PermissionMode::ALL {
            assert_eq!(mode.to_string().parse::<PermissionMode>().unwrap(), mode);
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
            assert_eq!(serde_json::from_str::<PermissionMode>(&json).unwrap(), mode);
        }
        assert_eq!(PermissionMode::AllowEdits.to_string(), "allow_edits");
    }

    #[test]
    fn unknown_mode_names_value_and_lists_allowed() {
        for bad in ["", "Bypass", " auto", "allow-edits", "allowedits", "yolo"] {
            let err = bad.parse::<PermissionMode>().unwrap_err();
            let msg = err.to_string();
            assert!(
                matches!(err, PolicyError::UnknownPermissionMode { ref value } if value == bad)
            );
            assert!(msg.contains(&format!("`{bad}`")), "{msg}");
            for mode in PermissionMode::ALL {
                assert!(msg.contains(mode.as_str()), "{msg}");
            }
        }
        assert!(serde_json::from_str::<PermissionMode>("\"allow-edits\"").is_err());
    }

    #[test]
    fn narrow_takes_the_lesser_authority_in_either_order() {
        for a in PermissionMode::ALL {
            for b in PermissionMode::ALL {
                let n = narrow(a, b);
                assert_eq!(n, narrow(b, a));
                assert!(n <= a && n <= b);
                assert!(n == a || n == b);
            }
        }
        assert_eq!(
            narrow(PermissionMode::Supervised, PermissionMode::Bypass),
            PermissionMode::Supervised
        );
        assert_eq!(
            narrow(PermissionMode::Auto, PermissionMode::Plan),
            PermissionMode::Plan
        );
    }

    #[test]
    fn flag_beats_env_beats_config_beats_default() {
        let sel = select_mode(Some("plan"), Some("auto"), Some("supervised")).unwrap();
        assert_eq!(
            sel,
            ModeSelection {
                mode: PermissionMode::Plan,
                source: ModeSource::Flag
            }
        );
        let sel = select_mode(None, Some("auto"), Some("supervised")).unwrap();
        assert_eq!(
            sel,
            ModeSelection {
                mode: PermissionMode::Auto,
                source: ModeSource::Environment
            }
        );
        let sel = select_mode(None, None, Some("supervised")).unwrap();
        assert_eq!(
            sel,
            ModeSelection {
                mode: PermissionMode::Supervised,
                source: ModeSource::Config
            }
        );
        let sel = select_mode(None, None, None).unwrap();
        assert_eq!(
            sel,
            ModeSelection {
                mode: PermissionMode::Bypass,
                source: ModeSource::Default
            }
        );
        assert_eq!(sel.to_string(), "permission mode bypass (default)");
    }

    #[test]
    fn invalid_setting_is_an_error_naming_its_source_even_if_a_later_one_is_valid() {
        let err = select_mode(Some("yolo"), Some("plan"), None).unwrap_err();
        assert!(matches!(
            err,
            PolicyError::InvalidModeSetting { origin: ModeSource::Flag, ref value } if value == "yolo"
        ));
        assert!(err.to_string().contains("--permission-mode"), "{err}");

        let err = select_mode(None, Some(""), Some("plan")).unwrap_err();
        assert!(matches!(
            err,
            PolicyError::InvalidModeSetting {
                origin: ModeSource::Environment,
                ..
            }
        ));
        assert!(err.to_string().contains("RHO_PERMISSION_MODE"), "{err}");

        let err = select_mode(None, None, Some("Plan")).unwrap_err();
        assert!(
            err.to_string().contains("[behavior] permission_mode"),
            "{err}"
        );
        assert!(err.to_string().contains("allow_edits"), "{err}");
    }
}
