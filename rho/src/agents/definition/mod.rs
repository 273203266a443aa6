//! Agent definitions: the typed, validated form of a definition file, and the rules of the
//! agent definition schema (value sets, per-runtime model, reasoning and tool rules).
//!
//! Invariant: an [`AgentDefinition`] only exists when every rule holds, and it stores the
//! *effective* values (runtime resolved, model policy resolved, tools defaulted), so two files
//! that mean the same thing produce equal definitions whatever their formatting.

mod fields;
mod model;
mod tools;
mod values;

pub use values::{
    ClaudeToolEntry, ModelPolicy, ModelSelection, PromptPolicy, Reasoning, Runtime, ToolRequest,
};

use super::frontmatter::{self, Diagnostic, Field};
use fields::{RawFields, unknown_key};
use model::{claude_model, rho_model};
use tools::{claude_tools, rho_tools};

/// The frontmatter keys a definition may use.
/// (`inherit_claude_config` is spelled with underscores, unlike `model-policy`: both spellings
/// are fixed by the definition schema.)
pub const KEYS: [&str; 11] = [
    "id",
    "description",
    "runtime",
    "prompt",
    "model-policy",
    "model",
    "provider",
    "auth",
    "reasoning",
    "tools",
    INHERIT_CLAUDE_CONFIG,
];

const INHERIT_CLAUDE_CONFIG: &str = "inherit_claude_config";

/// The built-in Rho capability names (extension names are allowed too; they must be supplied
/// by the host to bind).
pub const RHO_CAPABILITIES: [&str; 25] = [
    "advisor",
    "agent",
    "agents",
    "apply_patch",
    "bash",
    "edit",
    "edit_file",
    "fetch_content",
    "get_search_content",
    "glob",
    "grep",
    "hashline",
    "list_dir",
    "powershell",
    "process",
    "questionnaire",
    "read_file",
    "rho",
    "shell",
    "skill",
    "str_replace",
    "web_search",
    "workflow",
    "write",
    "write_file",
];

/// Longest id, in characters.
pub const MAX_ID_LEN: usize = 64;
/// Longest description, in Unicode scalar values.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// A validated agent definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDefinition {
    /// The stable identifier (from `id:` or the file stem).
    pub id: String,
    /// The trimmed description shown by the agent tool.
    pub description: String,
    /// The execution harness.
    pub runtime: Runtime,
    /// How the body is used.
    pub prompt: PromptPolicy,
    /// The trimmed Markdown body.
    pub body: String,
    /// The effective model choice.
    pub model: ModelSelection,
    /// Reasoning effort; `None` inherits.
    pub reasoning: Option<Reasoning>,
    /// The effective tool request.
    pub tools: ToolRequest,
    /// claude-cli only: load the user's full Claude settings.
    pub inherit_claude_config: bool,
    /// rho only, with a pinned model: Rho 1.47's `auth` profile (which credentials of the
    /// provider to use), checked by [`super::auth::check`].
    pub auth: Option<String>,
}

/// Checks an id against the schema: 1-64 lowercase ASCII letters and digits in groups joined
/// by single hyphens.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

pub(super) const ID_RULE: &str = "1-64 characters: lowercase ASCII letters and digits, joined by single \
                       hyphens (no leading, trailing or double hyphen)";

/// Parses and validates a whole definition file. `file_stem` supplies the id when the
/// frontmatter has none. Every problem found is returned, each located by line and key: syntax
/// problems of some lines do not stop the checks of the lines that parsed.
///
/// A key that is present but whose value cannot be used (a syntax error, a wrong type, an
/// unknown value) is reported once: the rules that depend on it are skipped rather than
/// reported against a guessed default. In particular an unusable `runtime` skips the
/// runtime-specific model, reasoning, tool and `inherit_claude_config` rules.
pub fn parse_definition(text: &str, file_stem: &str) -> Result<AgentDefinition, Vec<Diagnostic>> {
    let parsed = frontmatter::parse_recovering(text)?;
    let fm = &parsed.frontmatter;
    let mut problems = parsed.problems.clone();
    let mut raw = RawFields::default();

    for (line, key) in &parsed.failed_keys {
        if !KEYS.contains(&key.as_str()) {
            problems.push(unknown_key(*line, key));
        }
    }
    for d in &parsed.problems {
        if let Some(key) = &d.key
            && KEYS.contains(&key.as_str())
            && fm.get(key).is_none()
        {
            raw.broken.insert(key.clone());
        }
    }

    // The runtime decides which values other keys may take, so it is read first.
    let (runtime_field, other_fields): (Vec<&Field>, Vec<&Field>) =
        fm.fields.iter().partition(|f| f.key == "runtime");
    for field in runtime_field.into_iter().chain(other_fields) {
        raw.take(field, &mut problems);
    }

    let id = if let Some((line, id)) = &raw.id {
        if !is_valid_id(id) {
            problems.push(Diagnostic::keyed(
                *line,
                "id",
                format!("`{id}` is invalid: {ID_RULE}"),
            ));
        }
        id.clone()
    } else {
        if !raw.is_broken("id") && !is_valid_id(file_stem) {
            problems.push(Diagnostic::keyed(
                1,
                "id",
                format!(
                    "no `id` is set and the file name `{file_stem}` is not a valid id \
                     ({ID_RULE}); rename the file or set `id:`"
                ),
            ));
        }
        file_stem.to_owned()
    };

    let description = match &raw.description {
        None => {
            if !raw.is_broken("description") {
                problems.push(Diagnostic::keyed(
                    1,
                    "description",
                    format!("is required: {DESCRIPTION_RULE}"),
                ));
            }
            String::new()
        }
        Some((line, text)) => {
            let trimmed = text.trim();
            if trimmed.is_empty() {
                problems.push(Diagnostic::keyed(
                    *line,
                    "description",
                    format!("is empty; it needs {DESCRIPTION_RULE} after trimming"),
                ));
            } else if text.chars().count() > MAX_DESCRIPTION_CHARS {
                // The untrimmed length is checked so that every accepted file also satisfies the
                // published JSON Schema, which sees the value before trimming.
                problems.push(Diagnostic::keyed(
                    *line,
                    "description",
                    format!(
                        "is {} characters long; at most {MAX_DESCRIPTION_CHARS} are allowed",
                        text.chars().count()
                    ),
                ));
            }
            trimmed.to_owned()
        }
    };

    let runtime = raw.runtime.map_or(Runtime::Rho, |(_, r)| r);
    let prompt = raw.prompt.map_or(PromptPolicy::Extend, |(_, p)| p);
    let body = fm.body.trim().to_owned();
    if let (Some((line, PromptPolicy::Replace)), true) = (raw.prompt, body.is_empty()) {
        problems.push(Diagnostic::keyed(
            line,
            "prompt",
            "`replace` needs a non-empty Markdown body after the closing `---` (it becomes the \
             whole system prompt); use `extend` to keep the base prompt",
        ));
    }

    // Runtime-specific rules; dropped when the runtime itself is unusable (reported already).
    let mut by_runtime = Vec::new();
    let model = match runtime {
        Runtime::Rho => rho_model(&raw, &mut by_runtime),
        Runtime::ClaudeCli => claude_model(&raw, &mut by_runtime),
    };

    let reasoning = raw.reasoning.map(|(line, r)| {
        if runtime == Runtime::ClaudeCli && matches!(r, Reasoning::Off | Reasoning::Minimal) {
            by_runtime.push(Diagnostic::keyed(
                line,
                "reasoning",
                format!(
                    "`{}` is not available on runtime claude-cli (it maps to Claude's --effort); \
                     allowed: low, medium, high, xhigh, max, or omit it for Claude's default",
                    r.as_str()
                ),
            ));
        }
        r
    });

    let tools = match runtime {
        Runtime::Rho => rho_tools(raw.tools.as_ref(), &mut by_runtime),
        Runtime::ClaudeCli => claude_tools(raw.tools.as_ref(), &mut by_runtime),
    };

    // Rho 1.47's `auth`: a profile for the pinned model's provider, rho runtime only.
    let auth = raw.auth.as_ref().map(|(line, auth)| {
        let problem = match (runtime, &model) {
            (Runtime::ClaudeCli, _) => Some(
                "is not valid with runtime: claude-cli (Claude Code uses its own sign-in); set \
                 model only"
                    .to_owned(),
            ),
            (Runtime::Rho, ModelSelection::Inherit) => Some(
                "needs a pinned `model` (with model-policy prefer, require or select): an \
                 inherited model keeps the parent's provider and credentials"
                    .to_owned(),
            ),
            (Runtime::Rho, ModelSelection::Pinned { provider, .. }) => {
                super::auth::check(auth, provider.as_deref()).err()
            }
        };
        if let Some(message) = problem {
            by_runtime.push(Diagnostic::keyed(*line, "auth", message));
        }
        auth.clone()
    });

    let inherit_claude_config = match raw.inherit_claude_config {
        Some((line, true)) if runtime != Runtime::ClaudeCli => {
            by_runtime.push(Diagnostic::keyed(
                line,
                INHERIT_CLAUDE_CONFIG,
                "`true` is only allowed with runtime: claude-cli (it loads the user's Claude \
                 settings)",
            ));
            true
        }
        Some((_, value)) => value,
        None => false,
    };
    if !raw.is_broken("runtime") {
        problems.extend(by_runtime);
    }

    if problems.is_empty() {
        Ok(AgentDefinition {
            id,
            description,
            runtime,
            prompt,
            body,
            model,
            reasoning,
            tools,
            inherit_claude_config,
            auth,
        })
    } else {
        problems.sort_by_key(|d| d.line);
        Err(problems)
    }
}

pub(super) const DESCRIPTION_RULE: &str = "1-1024 characters of text (shown by the agent tool)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        for good in ["a", "a-b", "0", "abc-123-x", &"a".repeat(64)] {
            assert!(is_valid_id(good), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a--b",
            "A",
            "a_b",
            "a b",
            "é",
            &"a".repeat(65),
        ] {
            assert!(!is_valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn claude_entries() {
        let e = ClaudeToolEntry::parse("Bash(git *)").unwrap();
        assert_eq!(
            (e.base.as_str(), e.specifier.as_deref()),
            ("Bash", Some("git *"))
        );
        assert_eq!(e.to_string(), "Bash(git *)");
        assert!(ClaudeToolEntry::parse("mcp__srv__tool").is_ok());
        assert!(ClaudeToolEntry::parse("Bash(echo (a) \"b\")").is_ok());
        for empty in ["Bash()", "Bash( )", "Bash(())"] {
            let e = ClaudeToolEntry::parse(empty).unwrap();
            assert_eq!(e.base, "Bash");
            assert_eq!(e.to_string(), empty);
        }
        for (bad, why) in [
            ("Bash(a, b)", "commas"),
            ("Bash(a", "specifier ends"),
            ("Bash(a))", "not balanced"),
            ("Bash(a)x", "specifier ends"),
            ("Bash())(", "specifier ends"),
            ("(x)", "empty"),
            ("Re ad", "letters, digits"),
            ("-rm", "cannot start with `-`"),
        ] {
            let err = ClaudeToolEntry::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
