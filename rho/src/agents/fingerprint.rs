//! The semantic fingerprint (v2) of an agent definition.
//!
//! `sha256:` + lowercase hex of SHA-256 over the domain tag `rho-agent-fingerprint\0v2\0`
//! followed by the canonical CBOR encoding of the behavioural fields: runtime, prompt policy,
//! trimmed body, effective model policy, model, provider, reasoning, tools (Rho capability
//! aliases mapped to one name, sorted and de-duplicated: their order and spelling carry no
//! meaning) and `inherit_claude_config`.
//!
//! Invariant: only behaviour enters the hash. The id, the description, the file path, key
//! order, quoting, comments, whitespace around the body and defaults written out explicitly
//! never change it; any change to a behavioural field always does. Plans and sessions store
//! it, so changing what goes in is a format change (bump the tag).

use serde::Serialize;

use super::AgentError;
use super::definition::{AgentDefinition, ModelSelection, ToolRequest};

/// The domain tag hashed before the canonical encoding.
pub const FINGERPRINT_DOMAIN: &[u8] = b"rho-agent-fingerprint\0v2\0";

#[derive(Serialize)]
struct FingerprintInput<'a> {
    runtime: &'static str,
    prompt: &'static str,
    body: &'a str,
    model_policy: &'static str,
    model: Option<&'a str>,
    provider: Option<&'a str>,
    reasoning: Option<&'static str>,
    /// `true` for "every host capability" (rho `tools: all` or omitted).
    tools_all: bool,
    tools: Vec<String>,
    inherit_claude_config: bool,
    /// Only an explicit `auth` enters the hash, so definitions without one keep the
    /// fingerprint they had before the key existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    auth: Option<&'a str>,
}

/// The v2 semantic fingerprint of `definition`.
pub fn fingerprint(definition: &AgentDefinition) -> Result<String, AgentError> {
    let (model, provider) = match &definition.model {
        ModelSelection::Inherit => (None, None),
        ModelSelection::Pinned {
            model, provider, ..
        } => (Some(model.as_str()), provider.as_deref()),
    };
    // Rho's aliases (`write` for `write_file`, `str_replace` for `edit_file`, ...) name one
    // capability, so they fingerprint alike.
    let mut tools: Vec<String> = match &definition.tools {
        ToolRequest::Rho(_) => definition
            .tools
            .names()
            .iter()
            .map(|n| super::capability::canonical(n).to_owned())
            .collect(),
        _ => definition.tools.names(),
    };
    tools.sort();
    tools.dedup();
    let input = FingerprintInput {
        runtime: definition.runtime.as_str(),
        prompt: definition.prompt.as_str(),
        body: definition.body.trim(),
        model_policy: definition.model.policy().as_str(),
        model,
        provider,
        reasoning: definition.reasoning.map(super::Reasoning::as_str),
        tools_all: definition.tools == ToolRequest::AllHost,
        tools,
        inherit_claude_config: definition.inherit_claude_config,
        auth: definition.auth.as_deref(),
    };
    let encoded =
        rho_ipc::canonical::to_canonical_bytes(&input).map_err(|e| AgentError::Fingerprint {
            agent: definition.id.clone(),
            message: e.to_string(),
        })?;
    let mut bytes = Vec::with_capacity(FINGERPRINT_DOMAIN.len() + encoded.len());
    bytes.extend_from_slice(FINGERPRINT_DOMAIN);
    bytes.extend_from_slice(&encoded);
    Ok(format!("sha256:{}", rho_ipc::digest::sha256_hex(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::parse_definition;

    fn fp(text: &str) -> String {
        let def = parse_definition(text, "probe").unwrap_or_else(|e| panic!("{text}: {e:?}"));
        fingerprint(&def).unwrap()
    }

    const BASE: &str = "---\nid: probe\ndescription: d\nmodel: m1\nprovider: p1\nreasoning: high\n\
                        tools: [read_file, grep]\n---\nDo the thing.\n";

    #[test]
    fn fingerprint_has_the_tagged_sha256_form() {
        let f = fp(BASE);
        assert!(f.starts_with("sha256:"));
        assert_eq!(f.len(), "sha256:".len() + 64);
        assert!(
            f[7..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }

    #[test]
    fn fingerprint_ignores_formatting_and_identity() {
        let base = fp(BASE);
        let variants = [
            // key order, quoting, comments, blank lines, explicit defaults, tool order
            "---\n# comment\ntools: [grep, 'read_file']\nreasoning: \"high\"\n\nprovider: p1\n\
             model: 'm1'\ndescription: another description\nid: other-id\nruntime: rho\n\
             prompt: extend\nmodel-policy: select\ninherit_claude_config: false\n---\n\n\n  \
             Do the thing.  \n\n",
            // CRLF line endings
            "---\r\nid: probe\r\ndescription: d\r\nmodel: m1\r\nprovider: p1\r\nreasoning: high\r\n\
             tools: [read_file, grep]\r\n---\r\nDo the thing.\r\n",
        ];
        for v in variants {
            assert_eq!(fp(v), base, "{v}");
        }
        // The file stem (path) does not enter either.
        let def = parse_definition(BASE, "elsewhere").unwrap();
        assert_eq!(fingerprint(&def).unwrap(), base);
    }

    #[test]
    fn fingerprint_changes_with_every_behavioural_field() {
        let base = fp(BASE);
        let changed = [
            ("body", BASE.replace("Do the thing.", "Do another thing.")),
            (
                "prompt",
                BASE.replace("id: probe\n", "id: probe\nprompt: replace\n"),
            ),
            ("model", BASE.replace("model: m1", "model: m2")),
            ("provider", BASE.replace("provider: p1", "provider: p2")),
            (
                "model-policy",
                BASE.replace("id: probe\n", "id: probe\nmodel-policy: require\n"),
            ),
            (
                "reasoning",
                BASE.replace("reasoning: high", "reasoning: low"),
            ),
            ("reasoning unset", BASE.replace("reasoning: high\n", "")),
            ("tools", BASE.replace("[read_file, grep]", "[read_file]")),
            ("tools all", BASE.replace("[read_file, grep]", "all")),
            ("tools empty", BASE.replace("[read_file, grep]", "[]")),
        ];
        let mut seen = vec![base.clone()];
        for (what, text) in changed {
            let f = fp(&text);
            assert!(!seen.contains(&f), "{what} did not change the fingerprint");
            seen.push(f);
        }
    }

    #[test]
    fn runtime_and_claude_settings_change_the_fingerprint() {
        let claude = "---\ndescription: d\nruntime: claude-cli\ntools: [Read]\n---\nB\n";
        let rho = "---\ndescription: d\ntools: [read_file]\n---\nB\n";
        let inherit = claude.replace("tools:", "inherit_claude_config: true\ntools:");
        let empty_tools_claude = "---\ndescription: d\nruntime: claude-cli\n---\nB\n";
        let empty_tools_rho = "---\ndescription: d\ntools: []\n---\nB\n";
        let all = [
            fp(claude),
            fp(rho),
            fp(&inherit),
            fp(empty_tools_claude),
            fp(empty_tools_rho),
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn model_policy_written_out_matches_its_default() {
        let implicit = "---\ndescription: d\n---\n";
        let explicit = "---\ndescription: d\nmodel-policy: inherit\n---\n";
        assert_eq!(fp(implicit), fp(explicit));
        let claude_implicit = "---\ndescription: d\nruntime: claude-cli\nmodel: opus\n---\n";
        let claude_explicit =
            "---\ndescription: d\nruntime: claude-cli\nmodel-policy: select\nmodel: opus\n---\n";
        assert_eq!(fp(claude_implicit), fp(claude_explicit));
    }
}
