//! Which environment variables are credentials: the names (and URL values) that rho keeps
//! away from every process it starts for a workflow node or an agent tool (`bash`,
//! `process`), whatever the user's shell exported.
//!
//! Names are matched without regard to ASCII case (`Github_Token` is `GITHUB_TOKEN`), and a
//! variable whose value is a URL carrying a password (`postgres://app:pw@db/x`) is withheld
//! whatever its name. `[environment] exclude` adds patterns; `[environment] allow` passes
//! names an exclusion would withhold, except the trust overrides, which never pass.
//!
//! Invariant: every process rho starts for a workflow or a tool gets its environment from
//! [`filter_environment`] (or [`filtered_environment`]) under one [`EnvironmentPolicy`]; no
//! spawner has its own list.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;

use rho_ipc::program::EnvironmentPolicy;

/// The policy's name in frozen programs.
pub const POLICY_NAME: &str = "inherit_except_credentials";

/// Name patterns withheld by default (`*` is any run of characters; case is ignored).
pub const BUILTIN_CREDENTIAL_PATTERNS: [&str; 40] = [
    // API keys, tokens, secrets and passwords, bare or as a suffix.
    "API_KEY",
    "APIKEY",
    "*_API_KEY",
    "*_APIKEY",
    "*_ACCESS_KEY",
    "*_SECRET_ACCESS_KEY",
    "*_PRIVATE_KEY",
    "PRIVATE_KEY",
    "TOKEN",
    "*_TOKEN",
    "*_AUTH",
    "SECRET",
    "*_SECRET",
    "SECRET_KEY",
    "*_SECRET_KEY",
    "*PASSWORD",
    "*PASSWD",
    "*_PWD",
    "*_CREDENTIAL",
    "*_CREDENTIALS",
    "*_DSN",
    "*_WEBHOOK",
    "*_WEBHOOK_URL",
    "*_COOKIE",
    "*_SESSION_KEY",
    // Whole families of model providers and well-known names.
    "ANTHROPIC_*",
    "OPENAI_*",
    "AWS_SESSION_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "NPM_TOKEN",
    "PGPASSWORD",
    "MYSQL_PWD",
    "DATABASE_URL",
    // Agents that hand out keys on request.
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
    "GNUPGHOME",
    // Trust overrides: a node must not widen what later planning trusts.
    "RHO_TRUST_PROJECT_AGENTS",
    "RHO_TRUST_PROJECT_HOOKS",
];

/// Names that `[environment] allow` can never pass.
const NEVER_ALLOWED: [&str; 2] = ["RHO_TRUST_PROJECT_AGENTS", "RHO_TRUST_PROJECT_HOOKS"];

/// The environment policy: the built-in patterns plus `exclude`, and the `allow` patterns,
/// each sorted and de-duplicated (so the frozen policy does not depend on their order).
pub fn environment_policy(exclude: &[String], allow: &[String]) -> EnvironmentPolicy {
    let mut excluded: Vec<String> = BUILTIN_CREDENTIAL_PATTERNS
        .iter()
        .map(|s| (*s).to_owned())
        .chain(exclude.iter().cloned())
        .collect();
    excluded.sort();
    excluded.dedup();
    let mut allowed: Vec<String> = allow.to_vec();
    allowed.sort();
    allowed.dedup();
    EnvironmentPolicy {
        name: POLICY_NAME.to_owned(),
        exclude: excluded,
        allow: allowed,
    }
}

/// Whether `name=value` is withheld under `policy`. A name that is not UTF-8 cannot be
/// matched reliably, so it is withheld.
pub fn is_withheld(policy: &EnvironmentPolicy, name: &OsStr, value: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return true;
    };
    if NEVER_ALLOWED
        .iter()
        .any(|never| never.eq_ignore_ascii_case(name))
    {
        return true;
    }
    policy.withholds(name, value.as_bytes())
}

/// `vars` without the credentials `policy` withholds, in their order.
pub fn filter_environment(
    policy: &EnvironmentPolicy,
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    vars.into_iter()
        .filter(|(name, value)| !is_withheld(policy, name, value))
        .collect()
}

/// This process's environment without the credentials `policy` withholds.
pub fn filtered_environment(policy: &EnvironmentPolicy) -> Vec<(OsString, OsString)> {
    filter_environment(policy, std::env::vars_os())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn withheld(policy: &EnvironmentPolicy, name: &str, value: &str) -> bool {
        is_withheld(policy, OsStr::new(name), OsStr::new(value))
    }

    #[test]
    fn the_families_of_the_audit_are_withheld_whatever_their_case() {
        let policy = environment_policy(&[], &[]);
        for name in [
            "my_api_key",
            "Github_Token",
            "API_KEY",
            "TOKEN",
            "SECRET",
            "PASSWORD",
            "STRIPE_APIKEY",
            "PGPASSWORD",
            "MYSQL_PWD",
            "SENTRY_DSN",
            "SLACK_WEBHOOK_URL",
            "SSH_AUTH_SOCK",
            "DATABASE_URL",
            "anthropic_base_url",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            "GCP_CREDENTIALS",
            "RHO_TRUST_PROJECT_HOOKS",
        ] {
            assert!(withheld(&policy, name, "x"), "{name} is passed");
        }
        for name in [
            "PATH",
            "HOME",
            "PWD",
            "OLDPWD",
            "LANG",
            "TERM",
            "CARGO_HOME",
            "TOKENIZERS_PARALLELISM",
            "KEEP_ME",
        ] {
            assert!(!withheld(&policy, name, "x"), "{name} is withheld");
        }
    }

    #[test]
    fn a_url_with_a_password_is_withheld_whatever_its_name() {
        let policy = environment_policy(&[], &[]);
        assert!(withheld(
            &policy,
            "APP_DB",
            "postgres://app:hunter2@db:5432/x"
        ));
        assert!(withheld(&policy, "HTTPS_PROXY", "http://u:p@proxy:3128"));
        assert!(!withheld(&policy, "APP_DB", "postgres://app@db:5432/x"));
        assert!(!withheld(&policy, "HOMEPAGE", "https://example.com/a:b@c"));
        assert!(!withheld(&policy, "NOTE", "mail me at a@b.c"));
    }

    #[test]
    fn configuration_adds_and_allows_but_never_passes_trust_overrides() {
        let policy = environment_policy(
            &["corp_*".to_owned()],
            &["CI_JOB_TOKEN".to_owned(), "RHO_TRUST_*".to_owned()],
        );
        assert!(withheld(&policy, "CORP_THING", "x"));
        assert!(!withheld(&policy, "ci_job_token", "x"));
        assert!(withheld(&policy, "OTHER_TOKEN", "x"));
        assert!(withheld(&policy, "RHO_TRUST_PROJECT_AGENTS", "1"));
        assert_eq!(policy.name, POLICY_NAME);
    }

    #[test]
    fn the_policy_does_not_depend_on_the_order_of_the_configuration() {
        let a = environment_policy(&["B_*".into(), "A_*".into()], &["Y".into(), "X".into()]);
        let b = environment_policy(
            &["A_*".into(), "B_*".into(), "A_*".into()],
            &["X".into(), "Y".into()],
        );
        assert_eq!(a, b);
    }

    #[test]
    fn filtering_keeps_order_and_drops_only_credentials() {
        let policy = environment_policy(&[], &[]);
        let vars = [("B", "1"), ("GH_TOKEN", "t"), ("A", "2")]
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let kept = filter_environment(&policy, vars);
        assert_eq!(
            kept,
            [("B", "1"), ("A", "2")].map(|(k, v)| (OsString::from(k), OsString::from(v)))
        );
    }
}
