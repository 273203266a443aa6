//! Rho 1.47's `auth` frontmatter key: which auth profile an agent pins for its provider.
//!
//! The value rules are Rho's: only for the `rho` runtime with a model policy other than
//! `inherit`; non-empty and without whitespace; one of the auth profiles Rho knows; and, when
//! `provider` is set, a profile of that provider (OpenAI API keys and Codex sign-in are one
//! family, so either works with either provider name; the retired provider names
//! `openrouter-oauth` and `xai-oauth` carry their own profile). The profile is behaviour (it
//! selects credentials), so it is part of the fingerprint when set.
//!
//! Invariant: [`check`] accepts exactly the (provider, auth) pairs Rho 1.47 accepts for its
//! built-in providers; it never consults credentials or the network.

/// Auth profiles by provider, as Rho 1.47 registers them.
const PROFILES: &[(&str, &[&str])] = &[
    ("ollama", &["none", "ollama-api-key"]),
    (
        "ollama-cloud",
        &["ollama-cloud-api-key", "ollama-cloud-device"],
    ),
    ("openai", &["api-key"]),
    ("openai-codex", &["codex"]),
    ("anthropic", &["anthropic-api-key"]),
    ("google", &["google-api-key"]),
    ("github-copilot", &["github-copilot"]),
    ("moonshot", &["moonshot-api-key"]),
    ("poolside", &["poolside-api-key"]),
    ("openrouter", &["openrouter-api-key", "openrouter-oauth"]),
    ("kimi-code", &["kimi-oauth"]),
    ("qwen-token-plan", &["qwen-token-plan-api-key"]),
    ("meta", &["meta-api-key"]),
    ("opencode-go", &["opencode-go-api-key"]),
    ("xai", &["xai-api-key", "xai-oauth"]),
];

/// Providers that share one backend, so each accepts the other's profiles.
const FAMILIES: &[&[&str]] = &[&["openai", "openai-codex"]];

/// Retired provider names that select a provider and a profile at once.
const LEGACY_PROVIDERS: &[&str] = &["openrouter-oauth", "xai-oauth"];

/// The provider that registers `auth`.
fn provider_of(auth: &str) -> Option<&'static str> {
    PROFILES
        .iter()
        .find(|(_, profiles)| profiles.contains(&auth))
        .map(|(provider, _)| *provider)
}

fn same_family(a: &str, b: &str) -> bool {
    a == b || FAMILIES.iter().any(|f| f.contains(&a) && f.contains(&b))
}

/// Every profile Rho knows, for messages.
pub fn known_profiles() -> Vec<&'static str> {
    PROFILES
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .collect()
}

/// Checks an `auth` value (and the `provider` beside it, when set); `Err` says what is wrong
/// and what is allowed.
pub fn check(auth: &str, provider: Option<&str>) -> Result<(), String> {
    if auth.is_empty() || auth.chars().any(char::is_whitespace) {
        return Err("must be non-empty and contain no whitespace".to_owned());
    }
    let Some(owner) = provider_of(auth) else {
        return Err(format!(
            "unknown auth profile `{auth}`; known profiles: {}",
            known_profiles().join(", ")
        ));
    };
    let Some(provider) = provider else {
        return Ok(());
    };
    if LEGACY_PROVIDERS.contains(&provider) {
        // The retired name already selects its profile; Rho ignores a separate one.
        return Ok(());
    }
    if !PROFILES.iter().any(|(p, _)| *p == provider) {
        return Err(format!(
            "is not valid for provider `{provider}`: Rho 1.47 knows no provider of that name, so it has no auth profiles"
        ));
    }
    if same_family(provider, owner) {
        Ok(())
    } else {
        let own: Vec<&str> = PROFILES
            .iter()
            .filter(|(p, _)| same_family(p, provider))
            .flat_map(|(_, profiles)| profiles.iter().copied())
            .collect();
        Err(format!(
            "`{auth}` is a profile of provider `{owner}`, not valid for provider `{provider}` (its profiles: {})",
            own.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rho_pairs_are_accepted() {
        for (auth, provider) in [
            ("xai-oauth", Some("xai")),
            ("xai-oauth", None),
            ("codex", Some("openai")),
            ("api-key", Some("openai-codex")),
            ("none", Some("ollama")),
            ("openrouter-oauth", Some("openrouter-oauth")),
        ] {
            assert_eq!(check(auth, provider), Ok(()), "{auth} {provider:?}");
        }
    }

    #[test]
    fn bad_values_say_why() {
        for (auth, provider, needle) in [
            ("", None, "non-empty"),
            ("a b", None, "whitespace"),
            ("magic", None, "unknown auth profile `magic`"),
            ("xai-oauth", Some("anthropic"), "profile of provider `xai`"),
            ("xai-oauth", Some("acme"), "no provider of that name"),
        ] {
            let why = check(auth, provider).unwrap_err();
            assert!(why.contains(needle), "{auth} {provider:?}: {why}");
        }
    }
}
