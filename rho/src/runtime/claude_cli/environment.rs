//! The environment a `claude` child gets: what the Claude Code binary itself reads, and
//! nothing of rho's own.
//!
//! Invariant: built from an allowlist. Rho's provider keys (`RHO_*`, `OPENAI_*`, any other
//! provider's variables) never reach the child; the `ANTHROPIC_*` and `CLAUDE_*` variables the
//! user set are Claude Code's own configuration (its API key, base URL, config directory) and
//! pass through unchanged.

use std::ffi::{OsStr, OsString};

/// Exact names passed through: where Claude finds its home, configuration, locale, proxies
/// and certificates.
const PASSED: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "PATH",
    "SHELL",
    "TERM",
    "TZ",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "DISABLE_AUTOUPDATER",
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
];

/// Prefixes of Claude Code's own variables.
const PASSED_PREFIXES: &[&str] = &["ANTHROPIC_", "CLAUDE_CODE_", "CLAUDE_CONFIG_DIR"];

/// Whether `name` reaches the `claude` child.
pub fn passes(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    PASSED.contains(&name) || PASSED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The child's environment from `vars` (the process environment in production), in the
/// order given.
pub fn child_environment(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    vars.into_iter().filter(|(k, _)| passes(k)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_configuration_passes_and_rho_keys_do_not() {
        let vars = [
            ("HOME", "/home/u"),
            ("PATH", "/usr/bin"),
            ("ANTHROPIC_API_KEY", "sk-claude"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:1"),
            ("CLAUDE_CONFIG_DIR", "/home/u/.claude"),
            ("CLAUDE_CODE_USE_BEDROCK", "0"),
            ("RHO_LOCAL_API_KEY", "sk-rho"),
            ("OPENAI_API_KEY", "sk-openai"),
            ("GITHUB_TOKEN", "ghp"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("RHO_HOME", "/x"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = child_environment(vars);
        let names: Vec<_> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "HOME",
                "PATH",
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_BASE_URL",
                "CLAUDE_CONFIG_DIR",
                "CLAUDE_CODE_USE_BEDROCK"
            ]
        );
    }
}
