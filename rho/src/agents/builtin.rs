//! The built-in agents (`default`, `explorer`, `reviewer`, `worker`) and the base coding
//! prompt that `prompt: extend` definitions build on.
//!
//! Invariant: built-ins are ordinary definition files compiled into the binary and parsed by
//! the same strict parser as user files, so they obey every rule a user definition does (a
//! unit test parses each one).

/// The base coding prompt: the whole system prompt of an `extend` agent with an empty body,
/// and the part an `extend` body is appended to.
pub const BASE_PROMPT: &str = include_str!("builtin/base_prompt.md");

/// The built-in definitions as `(file name, text)`, in a fixed order.
pub const BUILTIN_DEFINITIONS: [(&str, &str); 4] = [
    ("default.md", include_str!("builtin/default.md")),
    ("explorer.md", include_str!("builtin/explorer.md")),
    ("reviewer.md", include_str!("builtin/reviewer.md")),
    ("worker.md", include_str!("builtin/worker.md")),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::definition::{
        ModelSelection, PromptPolicy, Runtime, ToolRequest, parse_definition,
    };

    fn builtin(id: &str) -> crate::agents::AgentDefinition {
        let (name, text) = BUILTIN_DEFINITIONS
            .iter()
            .find(|(name, _)| name.trim_end_matches(".md") == id)
            .copied()
            .expect("built-in exists");
        parse_definition(text, name.trim_end_matches(".md")).expect("built-in parses")
    }

    #[test]
    fn every_builtin_parses_as_a_rho_extend_agent() {
        for (name, text) in BUILTIN_DEFINITIONS {
            let stem = name.trim_end_matches(".md");
            let def = parse_definition(text, stem).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(def.id, stem);
            assert_eq!(def.runtime, Runtime::Rho);
            assert_eq!(def.prompt, PromptPolicy::Extend);
            assert_eq!(def.model, ModelSelection::Inherit);
        }
    }

    #[test]
    fn builtin_tool_sets_match_their_roles() {
        let read_only = ToolRequest::Rho(
            ["read_file", "list_dir", "glob", "grep"]
                .map(str::to_owned)
                .to_vec(),
        );
        assert_eq!(builtin("explorer").tools, read_only);
        assert_eq!(builtin("reviewer").tools, read_only);
        assert_eq!(builtin("worker").tools, ToolRequest::AllHost);
        assert_eq!(builtin("default").tools, ToolRequest::AllHost);
        assert!(
            builtin("default").body.is_empty(),
            "default is the base prompt alone"
        );
        for id in ["explorer", "reviewer", "worker"] {
            assert!(builtin(id).body.len() > 200, "{id} has a real prompt");
        }
        assert!(BASE_PROMPT.len() > 500);
    }
}
