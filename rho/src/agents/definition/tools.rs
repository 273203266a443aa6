//! The per-runtime tool rules: Rho capability names for runtime rho, Claude Code tool entries
//! for runtime claude-cli, and the effective [`ToolRequest`] of each.
//!
//! Invariant: a claude-cli agent never gets `tools: all`, and a rho agent never gets a Claude
//! Code entry.

use super::super::frontmatter::Diagnostic;
use super::RHO_CAPABILITIES;
use super::fields::RawTools;
use super::values::{ClaudeToolEntry, ToolRequest};

/// Whether an entry is written the Claude Code way (`Read`, `Bash(git *)`).
pub(super) fn looks_like_claude_tool(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_uppercase()) || name.contains('(')
}

pub(super) fn is_rho_capability_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// Checks a `rho`-runtime tool list; every bad entry is reported.
pub(super) fn rho_tools(
    tools: Option<&(usize, RawTools)>,
    problems: &mut Vec<Diagnostic>,
) -> ToolRequest {
    let Some((line, tools)) = tools else {
        return ToolRequest::AllHost;
    };
    let RawTools::List(names) = tools else {
        return ToolRequest::AllHost;
    };
    let claude: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| looks_like_claude_tool(n))
        .collect();
    let rho: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !looks_like_claude_tool(n))
        .collect();
    let mut problem = |msg: String| problems.push(Diagnostic::keyed(*line, "tools", msg));
    if !claude.is_empty() && !rho.is_empty() {
        problem(format!(
            "mixes Rho capability names ({}) and Claude Code tool names ({}); runtime rho takes \
             only Rho capabilities",
            rho.join(", "),
            claude.join(", ")
        ));
    } else if !claude.is_empty() {
        problem(format!(
            "{} {}; runtime rho takes Rho capabilities such as read_file, grep, bash (or set \
             runtime: claude-cli)",
            claude.join(", "),
            if claude.len() == 1 {
                "is a Claude Code tool name"
            } else {
                "are Claude Code tool names"
            }
        ));
    }
    for name in rho {
        if name == "all" {
            problem(
                "`all` inside a list is not a capability; write `tools: all` (without brackets) \
                 for every capability the host supplies"
                    .into(),
            );
        } else if !is_rho_capability_name(name) {
            problem(format!(
                "`{name}` is not a capability name: lowercase letters, digits, `_` and `-`, \
                 starting with a letter"
            ));
        }
    }
    ToolRequest::Rho(names.clone())
}

/// Why `all` is refused in a claude-cli tool list.
pub(super) const CLAUDE_ALL_REFUSED: &str = "`tools: all` is not allowed on runtime claude-cli; list Claude \
                                  Code tools such as [Read, Grep, \"Bash(git *)\"], or omit `tools` \
                                  for no tools";

/// Checks a `claude-cli` tool list; every bad entry is reported.
pub(super) fn claude_tools(
    tools: Option<&(usize, RawTools)>,
    problems: &mut Vec<Diagnostic>,
) -> ToolRequest {
    let Some((line, tools)) = tools else {
        return ToolRequest::Claude(Vec::new());
    };
    let mut problem = |msg: String| problems.push(Diagnostic::keyed(*line, "tools", msg));
    let RawTools::List(names) = tools else {
        problem(CLAUDE_ALL_REFUSED.into());
        return ToolRequest::Claude(Vec::new());
    };
    let is_rho = |n: &str| RHO_CAPABILITIES.contains(&n);
    let mixed = names.iter().any(|n| is_rho(n)) && names.iter().any(|n| n != "all" && !is_rho(n));
    let mut entries = Vec::with_capacity(names.len());
    for name in names {
        if name == "all" {
            problem(format!("`all` in the list: {CLAUDE_ALL_REFUSED}"));
        } else if is_rho(name) {
            problem(format!(
                "{}`{name}` is a Rho capability name; runtime claude-cli takes Claude Code tool \
                 entries such as Read, Edit, Bash(git *)",
                if mixed {
                    "mixes Rho and Claude tool names: "
                } else {
                    ""
                },
            ));
        } else {
            match ClaudeToolEntry::parse(name) {
                Ok(entry) => entries.push(entry),
                Err(msg) => problem(msg),
            }
        }
    }
    ToolRequest::Claude(entries)
}
