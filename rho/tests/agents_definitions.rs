//! Table tests for the agent definition schema: one case per rule (accept and reject), each
//! also checked against the published frontmatter JSON Schema so that the parser never accepts
//! what the schema rejects.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

use std::path::Path;

use rho::agents::builtin::BUILTIN_DEFINITIONS;
use rho::agents::frontmatter;
use rho::agents::schema::frontmatter_schema;
use rho::agents::{
    AgentError, ModelPolicy, ModelSelection, PromptPolicy, Reasoning, Runtime, ToolRequest,
    load_definition_text,
};

enum Expect {
    Ok,
    /// Rejected with a diagnostic at `line` for `key` whose message contains the needle.
    Err(usize, &'static str, &'static str),
}

struct Case {
    name: &'static str,
    file: &'static str,
    text: String,
    expect: Expect,
}

fn doc(frontmatter: &str, body: &str) -> String {
    format!("---\n{frontmatter}\n---\n{body}")
}

fn ok(name: &'static str, fm: &str, body: &str) -> Case {
    Case {
        name,
        file: "probe.md",
        text: doc(fm, body),
        expect: Expect::Ok,
    }
}

fn bad(
    name: &'static str,
    fm: &str,
    body: &str,
    line: usize,
    key: &'static str,
    needle: &'static str,
) -> Case {
    Case {
        name,
        file: "probe.md",
        text: doc(fm, body),
        expect: Expect::Err(line, key, needle),
    }
}

const D: &str = "description: d";

#[allow(clippy::too_many_lines)]
fn cases() -> Vec<Case> {
    let long_desc = "x".repeat(1024);
    let too_long_desc = "x".repeat(1025);
    let id64 = "a".repeat(64);
    let id65 = "a".repeat(65);
    vec![
        // --- file shape and common fields -------------------------------------------------
        ok("minimal definition: description only", D, ""),
        ok(
            "seed rho example",
            "id: security-review\ndescription: Reviews changes for security defects\n\
             runtime: rho\nmodel-policy: inherit\nreasoning: high\n\
             tools: [read_file, list_dir, bash]",
            "Review the requested changes. Do not modify files.\n",
        ),
        ok(
            "seed claude example",
            "id: claude-planner\ndescription: Plans with Claude Code on the user subscription\n\
             runtime: claude-cli\nmodel: claude-opus-5\nreasoning: high\n\
             tools: [Read, Edit, \"Bash(git *)\"]\ninherit_claude_config: false",
            "Produce a short plan. Prefer reading before editing.\n",
        ),
        ok(
            "comments and blank lines",
            "# note\n\nid: a-1\n\n# more\ndescription: d",
            "",
        ),
        ok(
            "id with digits and single hyphens",
            "id: a1-b2-3\ndescription: d",
            "",
        ),
        ok("id of 64 characters", &format!("id: {id64}\n{D}"), ""),
        bad(
            "id of 65 characters",
            &format!("id: {id65}\n{D}"),
            "",
            2,
            "id",
            "1-64",
        ),
        bad(
            "id with uppercase",
            "id: Reviewer\ndescription: d",
            "",
            2,
            "id",
            "lowercase",
        ),
        bad(
            "id with underscore",
            "id: a_b\ndescription: d",
            "",
            2,
            "id",
            "lowercase",
        ),
        bad(
            "id with double hyphen",
            "id: a--b\ndescription: d",
            "",
            2,
            "id",
            "double hyphen",
        ),
        bad(
            "id with leading hyphen",
            "id: \"-a\"\ndescription: d",
            "",
            2,
            "id",
            "leading",
        ),
        bad(
            "id with trailing hyphen",
            "id: a-\ndescription: d",
            "",
            2,
            "id",
            "trailing",
        ),
        bad(
            "id that YAML reads as a number",
            "id: 123\ndescription: d",
            "",
            2,
            "id",
            "number",
        ),
        ok("quoted numeric id", "id: \"123\"\ndescription: d", ""),
        bad(
            "missing description",
            "id: a",
            "",
            1,
            "description",
            "required",
        ),
        bad(
            "empty description",
            "description: \"\"",
            "",
            2,
            "description",
            "needs 1-1024 characters",
        ),
        bad(
            "description without a value",
            "description:",
            "",
            2,
            "description",
            "missing value: `description` needs 1-1024 characters",
        ),
        bad(
            "id without a value",
            "id:\ndescription: d",
            "",
            2,
            "id",
            "missing value: `id` needs 1-64 characters",
        ),
        bad(
            "blank description",
            "description: \"   \"",
            "",
            2,
            "description",
            "empty",
        ),
        ok("description trimmed", "description: \"  padded  \"", ""),
        ok(
            "description of 1024 characters",
            &format!("description: {long_desc}"),
            "",
        ),
        bad(
            "description of 1025 characters",
            &format!("description: {too_long_desc}"),
            "",
            2,
            "description",
            "at most 1024",
        ),
        bad(
            "description read as a boolean",
            "description: true",
            "",
            2,
            "description",
            "boolean",
        ),
        bad(
            "description read as null",
            "description: null",
            "",
            2,
            "description",
            "null",
        ),
        bad(
            "description as a list",
            "description: [a]",
            "",
            2,
            "description",
            "not a list",
        ),
        bad(
            "unknown key",
            "description: d\ncolor: blue",
            "",
            3,
            "color",
            "unknown key",
        ),
        bad(
            "misspelled key",
            "description: d\nmodel_policy: inherit",
            "",
            3,
            "model_policy",
            "did you mean `model-policy`",
        ),
        bad(
            "duplicate key",
            "description: d\ndescription: e",
            "",
            3,
            "description",
            "duplicate",
        ),
        ok("runtime rho", "description: d\nruntime: rho", ""),
        ok(
            "runtime claude-cli",
            "description: d\nruntime: claude-cli",
            "",
        ),
        bad(
            "unknown runtime",
            "description: d\nruntime: docker",
            "",
            3,
            "runtime",
            "rho | claude-cli",
        ),
        ok(
            "prompt extend with empty body",
            "description: d\nprompt: extend",
            "",
        ),
        ok(
            "prompt replace with body",
            "description: d\nprompt: replace",
            "Whole prompt.\n",
        ),
        bad(
            "prompt replace without body",
            "description: d\nprompt: replace",
            "\n  \n",
            3,
            "prompt",
            "non-empty Markdown body",
        ),
        bad(
            "unknown prompt",
            "description: d\nprompt: append",
            "",
            3,
            "prompt",
            "extend | replace",
        ),
        bad(
            "unknown model-policy",
            "description: d\nmodel-policy: always",
            "",
            3,
            "model-policy",
            "inherit | prefer | require | select",
        ),
        bad(
            "empty model",
            "description: d\nmodel: \"\"",
            "",
            3,
            "model",
            "empty",
        ),
        bad(
            "model with whitespace",
            "description: d\nmodel: \"gpt 4\"",
            "",
            3,
            "model",
            "whitespace",
        ),
        bad(
            "provider with whitespace",
            "description: d\nmodel: m\nprovider: 'open ai'",
            "",
            4,
            "provider",
            "whitespace",
        ),
        bad(
            "unknown reasoning",
            "description: d\nreasoning: extreme",
            "",
            3,
            "reasoning",
            "off | minimal",
        ),
        bad(
            "reasoning as a list",
            "description: d\nreasoning: [low]",
            "",
            3,
            "reasoning",
            "not a list; allowed: off | minimal | low | medium | high | xhigh | max",
        ),
        bad(
            "reasoning read as a boolean",
            "description: d\nreasoning: false",
            "",
            3,
            "reasoning",
            "boolean",
        ),
        // --- rho model rules -------------------------------------------------------------------
        ok("rho: no model inherits", "description: d", ""),
        ok(
            "rho: inherit policy alone",
            "description: d\nmodel-policy: inherit",
            "",
        ),
        ok(
            "rho: model alone is select",
            "description: d\nmodel: gpt-4o",
            "",
        ),
        ok(
            "rho: model with provider",
            "description: d\nmodel: gpt-4o\nprovider: openai",
            "",
        ),
        ok(
            "rho: prefer with model",
            "description: d\nmodel-policy: prefer\nmodel: m",
            "",
        ),
        ok(
            "rho: require with @alias",
            "description: d\nmodel-policy: require\nmodel: @fast",
            "",
        ),
        ok(
            "rho: select with model and provider",
            "description: d\nmodel-policy: select\nmodel: m\nprovider: p",
            "",
        ),
        ok(
            "rho: unicode model name",
            "description: d\nmodel: modèle-1",
            "",
        ),
        bad(
            "rho: inherit with model",
            "description: d\nmodel-policy: inherit\nmodel: m",
            "",
            4,
            "model",
            "must be omitted",
        ),
        bad(
            "rho: inherit with provider",
            "description: d\nmodel-policy: inherit\nprovider: p",
            "",
            4,
            "provider",
            "must be omitted",
        ),
        bad(
            "rho: prefer without model",
            "description: d\nmodel-policy: prefer",
            "",
            3,
            "model-policy",
            "needs a `model`",
        ),
        bad(
            "rho: require without model",
            "description: d\nmodel-policy: require",
            "",
            3,
            "model-policy",
            "needs a `model`",
        ),
        bad(
            "rho: select without model",
            "description: d\nmodel-policy: select",
            "",
            3,
            "model-policy",
            "needs a `model`",
        ),
        bad(
            "rho: provider without model",
            "description: d\nprovider: p",
            "",
            3,
            "provider",
            "needs a `model`",
        ),
        bad(
            "rho: bare @",
            "description: d\nmodel: \"@\"",
            "",
            3,
            "model",
            "alias name",
        ),
        // The binder checks that the alias resolves to this provider (agents_binder.rs).
        ok(
            "rho: @alias with provider",
            "description: d\nmodel: @fast\nprovider: p",
            "",
        ),
        ok(
            "rho: prefer with @alias and provider",
            "description: d\nmodel-policy: prefer\nmodel: @fast\nprovider: openai",
            "",
        ),
        // --- rho reasoning ---------------------------------------------------------------------
        ok("rho: reasoning off", "description: d\nreasoning: off", ""),
        ok(
            "rho: reasoning minimal",
            "description: d\nreasoning: minimal",
            "",
        ),
        ok("rho: reasoning low", "description: d\nreasoning: low", ""),
        ok(
            "rho: reasoning medium",
            "description: d\nreasoning: medium",
            "",
        ),
        ok(
            "rho: reasoning xhigh",
            "description: d\nreasoning: xhigh",
            "",
        ),
        ok("rho: reasoning max", "description: d\nreasoning: max", ""),
        // --- rho tools -------------------------------------------------------------------------
        ok("rho: tools all", "description: d\ntools: all", ""),
        ok(
            "rho: tools quoted all",
            "description: d\ntools: \"all\"",
            "",
        ),
        ok("rho: empty tool list", "description: d\ntools: []", ""),
        ok(
            "rho: every built-in capability",
            &format!(
                "description: d\ntools: [{}]",
                rho::agents::definition::RHO_CAPABILITIES.join(", ")
            ),
            "",
        ),
        ok(
            "rho: extension capability",
            "description: d\ntools: [read_file, my_ext]",
            "",
        ),
        bad(
            "rho: tools as a bare name",
            "description: d\ntools: read_file",
            "",
            3,
            "tools",
            "not a tool list",
        ),
        bad(
            "rho: duplicate tool",
            "description: d\ntools: [grep, grep]",
            "",
            3,
            "tools",
            "listed twice",
        ),
        bad(
            "rho: empty tool name",
            "description: d\ntools: [\"\"]",
            "",
            3,
            "tools",
            "empty tool name",
        ),
        bad(
            "rho: numeric tool name",
            "description: d\ntools: [1]",
            "",
            3,
            "tools",
            "number",
        ),
        bad(
            "rho: all inside a list",
            "description: d\ntools: [all]",
            "",
            3,
            "tools",
            "`tools: all`",
        ),
        bad(
            "rho: Claude tool names",
            "description: d\ntools: [Read, Grep]",
            "",
            3,
            "tools",
            "Claude Code tool names",
        ),
        bad(
            "rho: mixed vocabularies",
            "description: d\ntools: [read_file, Read]",
            "",
            3,
            "tools",
            "mixes",
        ),
        bad(
            "rho: malformed capability",
            "description: d\ntools: [read.file]",
            "",
            3,
            "tools",
            "not a capability name",
        ),
        bad(
            "rho: inherit_claude_config true",
            "description: d\ninherit_claude_config: true",
            "",
            3,
            "inherit_claude_config",
            "only allowed with runtime: claude-cli",
        ),
        ok(
            "rho: inherit_claude_config false",
            "description: d\ninherit_claude_config: false",
            "",
        ),
        // --- booleans --------------------------------------------------------------------------
        bad(
            "boolean spelled yes",
            "description: d\nruntime: claude-cli\ninherit_claude_config: yes",
            "",
            4,
            "inherit_claude_config",
            "only `true` or `false`",
        ),
        bad(
            "boolean spelled True",
            "description: d\nruntime: claude-cli\ninherit_claude_config: True",
            "",
            4,
            "inherit_claude_config",
            "only `true` or `false`",
        ),
        bad(
            "boolean quoted",
            "description: d\nruntime: claude-cli\ninherit_claude_config: \"true\"",
            "",
            4,
            "inherit_claude_config",
            "without quotes",
        ),
        // --- claude-cli model rules ------------------------------------------------------------
        ok(
            "claude: no model",
            "description: d\nruntime: claude-cli",
            "",
        ),
        ok(
            "claude: inherit",
            "description: d\nruntime: claude-cli\nmodel-policy: inherit",
            "",
        ),
        ok(
            "claude: model alone",
            "description: d\nruntime: claude-cli\nmodel: opus",
            "",
        ),
        ok(
            "claude: select with model",
            "description: d\nruntime: claude-cli\nmodel-policy: select\nmodel: claude-opus-5",
            "",
        ),
        bad(
            "claude: inherit with model",
            "description: d\nruntime: claude-cli\nmodel-policy: inherit\nmodel: opus",
            "",
            5,
            "model",
            "must be omitted",
        ),
        bad(
            "claude: select without model",
            "description: d\nruntime: claude-cli\nmodel-policy: select",
            "",
            4,
            "model-policy",
            "needs a `model`",
        ),
        bad(
            "claude: prefer",
            "description: d\nruntime: claude-cli\nmodel-policy: prefer\nmodel: opus",
            "",
            4,
            "model-policy",
            "inherit | select",
        ),
        bad(
            "claude: require",
            "description: d\nruntime: claude-cli\nmodel-policy: require\nmodel: opus",
            "",
            4,
            "model-policy",
            "inherit | select",
        ),
        bad(
            "claude: @alias model",
            "description: d\nruntime: claude-cli\nmodel: @fast",
            "",
            4,
            "model",
            "@alias",
        ),
        bad(
            "claude: provider",
            "description: d\nruntime: claude-cli\nmodel: opus\nprovider: anthropic",
            "",
            5,
            "provider",
            "not allowed with runtime: claude-cli",
        ),
        bad(
            "claude: provider alone",
            "description: d\nruntime: claude-cli\nprovider: a",
            "",
            4,
            "provider",
            "not allowed",
        ),
        // --- claude-cli reasoning --------------------------------------------------------------
        ok(
            "claude: reasoning low",
            "description: d\nruntime: claude-cli\nreasoning: low",
            "",
        ),
        ok(
            "claude: reasoning medium",
            "description: d\nruntime: claude-cli\nreasoning: medium",
            "",
        ),
        ok(
            "claude: reasoning xhigh",
            "description: d\nruntime: claude-cli\nreasoning: xhigh",
            "",
        ),
        ok(
            "claude: reasoning max",
            "description: d\nruntime: claude-cli\nreasoning: max",
            "",
        ),
        bad(
            "claude: reasoning off",
            "description: d\nruntime: claude-cli\nreasoning: off",
            "",
            4,
            "reasoning",
            "low, medium",
        ),
        bad(
            "claude: reasoning minimal",
            "description: d\nruntime: claude-cli\nreasoning: minimal",
            "",
            4,
            "reasoning",
            "--effort",
        ),
        // --- claude-cli tools ------------------------------------------------------------------
        ok(
            "claude: no tools",
            "description: d\nruntime: claude-cli",
            "",
        ),
        ok(
            "claude: empty tool list",
            "description: d\nruntime: claude-cli\ntools: []",
            "",
        ),
        ok(
            "claude: names and specifiers",
            "description: d\nruntime: claude-cli\ntools: [Read, Glob, Grep, \"Bash(git *)\", mcp__server__tool, 'Bash(echo \"(x)\")']",
            "",
        ),
        ok(
            "claude: plain specifier with a space",
            "description: d\nruntime: claude-cli\ntools: [Bash(git log)]",
            "",
        ),
        ok(
            "claude: inherit_claude_config true",
            "description: d\nruntime: claude-cli\ninherit_claude_config: true",
            "",
        ),
        bad(
            "claude: tools all",
            "description: d\nruntime: claude-cli\ntools: all",
            "",
            4,
            "tools",
            "`tools: all` is not allowed on runtime claude-cli",
        ),
        bad(
            "claude: all inside a list",
            "description: d\nruntime: claude-cli\ntools: [Read, all]",
            "",
            4,
            "tools",
            "`all` in the list: `tools: all` is not allowed on runtime claude-cli",
        ),
        bad(
            "claude: reasoning as a list",
            "description: d\nruntime: claude-cli\nreasoning: [high]",
            "",
            4,
            "reasoning",
            "not a list; allowed: low | medium | high | xhigh | max",
        ),
        ok(
            "claude: empty specifier",
            "description: d\nruntime: claude-cli\ntools: [Bash(), \"Edit()\"]",
            "",
        ),
        bad(
            "claude: Rho capability names",
            "description: d\nruntime: claude-cli\ntools: [read_file]",
            "",
            4,
            "tools",
            "`read_file` is a Rho capability name",
        ),
        bad(
            "claude: mixed vocabularies",
            "description: d\nruntime: claude-cli\ntools: [Read, grep]",
            "",
            4,
            "tools",
            "mixes",
        ),
        bad(
            "claude: comma in specifier",
            "description: d\nruntime: claude-cli\ntools: [\"Bash(a, b)\"]",
            "",
            4,
            "tools",
            "commas",
        ),
        bad(
            "claude: unbalanced specifier",
            "description: d\nruntime: claude-cli\ntools: [\"Bash(a\"]",
            "",
            4,
            "tools",
            "specifier",
        ),
        bad(
            "claude: nested unbalanced",
            "description: d\nruntime: claude-cli\ntools: [\"Bash(a))\"]",
            "",
            4,
            "tools",
            "not balanced",
        ),
        bad(
            "claude: empty base name",
            "description: d\nruntime: claude-cli\ntools: [\"(x)\"]",
            "",
            4,
            "tools",
            "empty",
        ),
        bad(
            "claude: bad base name",
            "description: d\nruntime: claude-cli\ntools: [\"Re ad\"]",
            "",
            4,
            "tools",
            "letters, digits",
        ),
        bad(
            "claude: option-like name",
            "description: d\nruntime: claude-cli\ntools: [-rm]",
            "",
            4,
            "tools",
            "cannot start with `-`",
        ),
        bad(
            "claude: duplicate entry",
            "description: d\nruntime: claude-cli\ntools: [Read, Read]",
            "",
            4,
            "tools",
            "listed twice",
        ),
        // --- syntax of the YAML subset -------------------------------------------------------
        bad(
            "nested map",
            "description: d\nmodel: {name: m}",
            "",
            3,
            "model",
            "nested maps",
        ),
        // Rho 1.47 writes tool lists as indented blocks.
        ok(
            "block list",
            "description: d\ntools:\n  - read_file\n  - grep",
            "",
        ),
        ok(
            "block list at column 1",
            "description: d\ntools:\n- read_file",
            "",
        ),
        bad(
            "empty block list",
            "description: d\ntools:",
            "",
            3,
            "tools",
            "missing value: `tools` needs `all` or a list",
        ),
        ok(
            "auth profile of the provider",
            "description: d\nmodel: grok-4\nprovider: xai\nauth: xai-oauth",
            "",
        ),
        bad(
            "auth without a pinned model",
            "description: d\nauth: xai-oauth",
            "",
            3,
            "auth",
            "needs a pinned `model`",
        ),
        bad(
            "auth of another provider",
            "description: d\nmodel: m\nprovider: anthropic\nauth: xai-oauth",
            "",
            5,
            "auth",
            "not valid for provider `anthropic`",
        ),
        bad(
            "trailing comment",
            "description: d # note",
            "",
            2,
            "description",
            "comments",
        ),
    ]
}

fn schema_validator() -> jsonschema::Validator {
    jsonschema::validator_for(&frontmatter_schema()).expect("the published schema compiles")
}

#[test]
fn every_schema_rule_has_an_accept_or_reject_case() {
    let validator = schema_validator();
    let mut schema_rejections = 0;
    let mut failures = Vec::new();
    for case in cases() {
        let path = Path::new("/defs").join(case.file);
        let parsed = load_definition_text(&path, &case.text);
        match (&case.expect, &parsed) {
            (Expect::Ok, Ok(_)) => {}
            (Expect::Ok, Err(e)) => failures.push(format!("{}: expected ok, got:\n{e}", case.name)),
            (Expect::Err(..), Ok(_)) => failures.push(format!("{}: expected an error", case.name)),
            (Expect::Err(line, key, needle), Err(e)) => {
                let text = e.to_string();
                let prefix = format!("/defs/{}:{line}: {key}: ", case.file);
                let hit = text
                    .lines()
                    .any(|l| l.starts_with(&prefix) && l.contains(needle));
                if !hit {
                    failures.push(format!(
                        "{}: expected a line starting {prefix:?} mentioning {needle:?}, got:\n{text}",
                        case.name
                    ));
                }
                assert!(matches!(e, AgentError::Invalid { .. }), "{}", case.name);
            }
        }
        // Cross-check with the published schema wherever the YAML subset itself parsed.
        if let Ok(fm) = frontmatter::parse(&case.text) {
            let schema_ok = validator.is_valid(&fm.to_json());
            if parsed.is_ok() && !schema_ok {
                failures.push(format!(
                    "{}: accepted by the parser but rejected by the schema: {}",
                    case.name,
                    fm.to_json()
                ));
            }
            if !schema_ok {
                schema_rejections += 1;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing case(s):\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    // The table must exercise schema-level rejections, not only parser-only rules.
    assert!(
        schema_rejections >= 30,
        "only {schema_rejections} schema-level rejections"
    );
}

#[test]
fn builtin_definitions_validate_against_the_schema() {
    let validator = schema_validator();
    for (name, text) in BUILTIN_DEFINITIONS {
        let fm = frontmatter::parse(text).expect("built-in frontmatter parses");
        assert!(validator.is_valid(&fm.to_json()), "{name}");
    }
}

#[test]
fn id_defaults_to_a_valid_file_stem() {
    let def = load_definition_text(Path::new("/x/my-agent.md"), &doc(D, "")).unwrap();
    assert_eq!(def.id, "my-agent");
    let err = load_definition_text(Path::new("/x/My_Agent.md"), &doc(D, "")).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("/x/My_Agent.md:1: id: "), "{text}");
    assert!(text.contains("file name `My_Agent`"), "{text}");
    // An explicit id wins over the stem, so any file name works then.
    let def = load_definition_text(
        Path::new("/x/My_Agent.md"),
        &doc("id: ok\ndescription: d", ""),
    )
    .unwrap();
    assert_eq!(def.id, "ok");
}

#[test]
fn effective_values_are_resolved() {
    let def = load_definition_text(Path::new("/x/a.md"), &doc(D, "  Body text.  \n\n")).unwrap();
    assert_eq!(def.runtime, Runtime::Rho);
    assert_eq!(def.prompt, PromptPolicy::Extend);
    assert_eq!(def.model, ModelSelection::Inherit);
    assert_eq!(def.tools, ToolRequest::AllHost);
    assert_eq!(def.body, "Body text.");
    assert!(!def.inherit_claude_config);

    let def = load_definition_text(
        Path::new("/x/a.md"),
        &doc("description: d\nmodel: m\nreasoning: xhigh", ""),
    )
    .unwrap();
    assert_eq!(
        def.model,
        ModelSelection::Pinned {
            policy: ModelPolicy::Select,
            model: "m".into(),
            provider: None
        }
    );
    assert_eq!(def.reasoning, Some(Reasoning::Xhigh));

    let def = load_definition_text(
        Path::new("/x/a.md"),
        &doc("description: d\nruntime: claude-cli", ""),
    )
    .unwrap();
    assert_eq!(def.tools, ToolRequest::Claude(vec![]));
}

#[test]
fn every_problem_of_a_file_is_reported() {
    let text = doc("id: Bad\ndescription: d\nreasoning: loud\ncolor: red", "");
    let err = load_definition_text(Path::new("/x/a.md"), &text).unwrap_err();
    let lines: Vec<String> = err.to_string().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].starts_with("/x/a.md:2: id: "));
    assert!(lines[1].starts_with("/x/a.md:4: reasoning: "));
    assert!(lines[2].starts_with("/x/a.md:5: color: "));
}

/// The diagnostics of `text` as `(line, key)` pairs and the full rendered error.
fn problems(text: &str) -> (Vec<(usize, Option<String>)>, String) {
    match load_definition_text(Path::new("/x/a.md"), text).unwrap_err() {
        AgentError::Invalid { diagnostics, file } => {
            assert_eq!(file, Path::new("/x/a.md"));
            let rendered = AgentError::Invalid {
                diagnostics: diagnostics.clone(),
                file,
            }
            .to_string();
            (
                diagnostics.into_iter().map(|d| (d.line, d.key)).collect(),
                rendered,
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn syntax_errors_do_not_hide_the_other_problems() {
    let text = doc(
        "id: Bad\ndescription: d # note\nruntime: claude-cli\n  model: opus\n\
         reasoning: [low]\ntools: [read_file, Read, grep, all, \"Bash(a, b)\"]\ncolour: red # x",
        "",
    );
    let (found, rendered) = problems(&text);
    let key = |k: &str| Some(k.to_owned());
    assert_eq!(
        found,
        [
            (2, key("id")),
            (3, key("description")),
            (5, key("model")),
            (6, key("reasoning")),
            (7, key("tools")),
            (7, key("tools")),
            (7, key("tools")),
            (7, key("tools")),
            (8, key("colour")),
            (8, key("colour")),
        ],
        "{rendered}"
    );
    // Every line names the file, the line and the key.
    for line in rendered.lines() {
        assert!(line.starts_with("/x/a.md:"), "{line}");
        assert!(line.split(": ").count() >= 3, "{line}");
    }
    // The description has a syntax error, so it is not also reported as missing.
    assert!(!rendered.contains("is required"), "{rendered}");
    assert!(
        rendered.contains("`read_file` is a Rho capability name"),
        "{rendered}"
    );
    assert!(
        rendered.contains("`grep` is a Rho capability name"),
        "{rendered}"
    );
    assert!(
        rendered.contains("`tools: all` is not allowed"),
        "{rendered}"
    );
    assert!(rendered.contains("commas"), "{rendered}");
    assert!(
        rendered.contains("allowed: low | medium | high | xhigh | max"),
        "{rendered}"
    );
    assert!(rendered.contains("colour: unknown key"), "{rendered}");
    assert!(!rendered.contains("`all` is a Rho"), "{rendered}");
}

#[test]
fn five_problems_give_five_diagnostics() {
    let text = doc(
        "id: a b\ndescription:\nprompt: [extend]\n\tmodel: m\ntools: [read.file]",
        "",
    );
    let (found, rendered) = problems(&text);
    let lines: Vec<usize> = found.iter().map(|(l, _)| *l).collect();
    assert_eq!(lines, [2, 3, 4, 5, 6], "{rendered}");
    assert!(found.iter().all(|(_, k)| k.is_some()), "{rendered}");
}

#[test]
fn an_unusable_value_is_reported_once() {
    // A wrong type is not also reported as a missing required field.
    let (found, rendered) = problems(&doc("description: true", ""));
    assert_eq!(found, [(2, Some("description".to_owned()))], "{rendered}");
    // An unusable runtime skips the runtime-specific rules instead of guessing `rho`.
    let (found, rendered) = problems(&doc("description: d\nruntime: docker\ntools: [Read]", ""));
    assert_eq!(found, [(3, Some("runtime".to_owned()))], "{rendered}");
    // An unusable model-policy skips the model combinations.
    let (found, rendered) = problems(&doc(
        "description: d\nmodel-policy: sometimes\nprovider: p",
        "",
    ));
    assert_eq!(found, [(3, Some("model-policy".to_owned()))], "{rendered}");
}

#[test]
fn every_bad_entry_of_a_tool_list_is_reported() {
    let (found, rendered) = problems(&doc(
        "description: d\nruntime: claude-cli\ntools: [read_file, write_file, \"Re ad\", Read, Read]",
        "",
    ));
    assert_eq!(found.len(), 4, "{rendered}");
    for needle in [
        "mixes Rho and Claude tool names: `read_file`",
        "mixes Rho and Claude tool names: `write_file`",
        "`Re ad`",
        "`Read` is listed twice",
    ] {
        assert!(rendered.contains(needle), "{needle}: {rendered}");
    }
    let (found, rendered) = problems(&doc(
        "description: d\ntools: [read.file, Bad!, grep, all]",
        "",
    ));
    assert_eq!(found.len(), 3, "{rendered}");
    assert!(
        rendered.contains("`read.file` is not a capability name"),
        "{rendered}"
    );
    assert!(
        rendered.contains("mixes Rho capability names"),
        "{rendered}"
    );
    assert!(rendered.contains("`all` inside a list"), "{rendered}");
}
