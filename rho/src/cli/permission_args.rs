//! The `--permission-mode` flag of the subcommands that run nodes (`run`, `resume`, `mcp`).
//! The front end's type: the host policy (`permissions`) only ever sees the text.

/// The `--permission-mode` flag, to `#[command(flatten)]`.
///
/// The value is kept as text and checked by [`crate::permissions::select_permission_mode`],
/// so an unknown mode is reported the same way whichever setting holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct PermissionArgs {
    /// Permission mode: bypass, auto, allow_edits, plan or supervised (overrides
    /// RHO_PERMISSION_MODE and `[behavior] permission_mode`).
    #[arg(long = "permission-mode", value_name = "MODE")]
    pub permission_mode: Option<String>,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Probe {
        #[command(flatten)]
        permissions: PermissionArgs,
    }

    #[test]
    fn flag_parses_as_text_for_selection() {
        let probe = Probe::try_parse_from(["probe", "--permission-mode", "allow_edits"]).unwrap();
        assert_eq!(
            probe.permissions.permission_mode.as_deref(),
            Some("allow_edits")
        );
        let probe = Probe::try_parse_from(["probe"]).unwrap();
        assert_eq!(probe.permissions, PermissionArgs::default());
    }
}
