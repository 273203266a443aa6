//! The machine-readable JSON Schema (draft 2020-12) of the definition frontmatter, as printed
//! by `rho agents schema`.
//!
//! Invariant: this schema is a published contract and never accepts a frontmatter object the
//! parser rejects; the parser is stricter (runtime-specific combinations the schema cannot
//! express are enforced in [`super::definition`]). A test checks that every definition the
//! parser accepts validates against this schema.

use serde_json::{Value, json};

/// The `$id` of the schema.
pub const SCHEMA_ID: &str = "https://rho.dev/schemas/agent-definition-frontmatter.json";

/// The frontmatter JSON Schema.
pub fn frontmatter_schema() -> Value {
    let reasoning = ["off", "minimal", "low", "medium", "high", "xhigh", "max"];
    let claude_reasoning = ["low", "medium", "high", "xhigh", "max"];
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "Rho agent definition frontmatter",
        "type": "object",
        "additionalProperties": false,
        "required": ["description"],
        "properties": {
            "id": {
                "type": "string",
                "minLength": 1,
                "maxLength": super::definition::MAX_ID_LEN,
                "pattern": "^[a-z0-9]+(?:-[a-z0-9]+)*$"
            },
            "description": {
                "type": "string",
                "minLength": 1,
                "maxLength": super::definition::MAX_DESCRIPTION_CHARS
            },
            "runtime": { "type": "string", "enum": ["rho", "claude-cli"], "default": "rho" },
            "prompt": { "type": "string", "enum": ["extend", "replace"], "default": "extend" },
            "model-policy": {
                "type": "string",
                "enum": ["inherit", "prefer", "require", "select"]
            },
            "model": { "type": "string", "minLength": 1, "pattern": "^\\S+$" },
            "provider": { "type": "string", "minLength": 1, "pattern": "^\\S+$" },
            "auth": { "type": "string", "minLength": 1, "pattern": "^\\S+$" },
            "reasoning": { "type": "string", "enum": reasoning },
            "tools": {
                "oneOf": [
                    { "const": "all" },
                    {
                        "type": "array",
                        "items": { "type": "string", "minLength": 1 },
                        "uniqueItems": true
                    }
                ]
            },
            "inherit_claude_config": { "type": "boolean", "default": false }
        },
        "allOf": [
            {
                "if": {
                    "properties": { "runtime": { "const": "claude-cli" } },
                    "required": ["runtime"]
                },
                "then": {
                    "properties": {
                        "provider": false,
                        "model-policy": { "enum": ["inherit", "select"] },
                        "reasoning": { "enum": claude_reasoning },
                        "tools": {
                            "type": "array",
                            "items": { "type": "string", "minLength": 1 }
                        },
                        "inherit_claude_config": { "type": "boolean" }
                    },
                    "not": {
                        "required": ["model-policy", "model"],
                        "properties": {
                            "model-policy": { "const": "inherit" },
                            "model": true
                        }
                    }
                }
            },
            {
                "if": {
                    "properties": { "model-policy": { "const": "inherit" } },
                    "required": ["model-policy"]
                },
                "then": {
                    "not": { "anyOf": [{ "required": ["model"] }, { "required": ["provider"] }] }
                }
            },
            {
                "if": {
                    "properties": { "model-policy": { "enum": ["prefer", "require", "select"] } },
                    "required": ["model-policy"]
                },
                "then": { "required": ["model"] }
            }
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_lists_every_frontmatter_key() {
        let schema = frontmatter_schema();
        let props = schema["properties"]
            .as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>());
        let mut keys: Vec<String> = super::super::definition::KEYS
            .iter()
            .map(|k| (*k).to_owned())
            .collect();
        keys.sort();
        let mut props = props.unwrap_or_default();
        props.sort();
        assert_eq!(props, keys);
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["required"], json!(["description"]));
    }
}
