//! The binder: capability intersection, alias resolution, the claude-cli flag mapping, the
//! read-only rule and the frozen setup.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

use std::collections::BTreeSet;
use std::path::Path;

use rho::agents::{
    AgentError, BindRequest, BoundAgent, BoundModel, BoundRuntime, Catalog, CatalogEntry,
    ClaudeLaunch, HostCapabilities, Invocation, ModelPolicy, Reasoning, SourceLevel,
    WithheldReason, bind, fingerprint, is_read_only, load_definition_text, to_agent_setup,
};
use rho::config::Config;
use rho_ipc::program::{AgentRuntime, AgentSource};
use rho_policy::PermissionMode;

const ALL_HOST: [&str; 12] = [
    "agent",
    "agents",
    "bash",
    "edit_file",
    "glob",
    "grep",
    "list_dir",
    "process",
    "read_file",
    "rho",
    "web_search",
    "write_file",
];

fn entry(text: &str) -> CatalogEntry {
    let definition = load_definition_text(Path::new("/defs/probe.md"), text).unwrap();
    let fingerprint = fingerprint(&definition).unwrap();
    CatalogEntry {
        definition,
        level: SourceLevel::RhoHome,
        path: None,
        fingerprint,
        overrides: vec![],
    }
}

fn config() -> Config {
    Config::parse(
        Path::new("/h/config.toml"),
        r#"
[providers.openai]
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"

[providers.local]
base_url = "http://127.0.0.1:8080/v1"

[models.aliases]
fast = "openai/gpt-4o-mini"
deep = { provider = "local", model = "qwen3-coder", reasoning = "high" }
"#,
    )
    .unwrap()
}

struct Ctx {
    config: Config,
    host: HostCapabilities,
    invocation: Invocation,
    mode: PermissionMode,
    max_turns: Option<u32>,
}

impl Ctx {
    fn new(host: &[&str]) -> Self {
        Self {
            config: config(),
            host: HostCapabilities::new(host.iter().copied()),
            invocation: Invocation::Delegated,
            mode: PermissionMode::Auto,
            max_turns: None,
        }
    }

    fn bind(&self, text: &str) -> Result<BoundAgent, AgentError> {
        self.bind_entry(&entry(text))
    }

    fn bind_entry(&self, e: &CatalogEntry) -> Result<BoundAgent, AgentError> {
        bind(
            e,
            &BindRequest {
                config: &self.config,
                capabilities: &self.host,
                invocation: self.invocation,
                permission_mode: self.mode,
                max_turns: self.max_turns,
            },
        )
    }
}

fn caps(bound: &BoundAgent) -> Vec<&str> {
    match &bound.runtime {
        BoundRuntime::Rho(r) => r.capabilities.iter().map(String::as_str).collect(),
        BoundRuntime::Claude(_) => panic!("not a rho agent"),
    }
}

fn withheld(bound: &BoundAgent) -> Vec<(&str, WithheldReason)> {
    bound
        .withheld()
        .iter()
        .map(|w| (w.name.as_str(), w.reason))
        .collect()
}

fn claude(bound: &BoundAgent) -> &ClaudeLaunch {
    match &bound.runtime {
        BoundRuntime::Claude(c) => c,
        BoundRuntime::Rho(_) => panic!("not a claude agent"),
    }
}

fn args(launch: &ClaudeLaunch, prompt_file: &str) -> Vec<String> {
    launch
        .args(Path::new(prompt_file))
        .into_iter()
        .map(|a| a.into_string().unwrap())
        .collect()
}

#[test]
fn requested_tools_are_intersected_with_the_host_set() {
    let request = "---\ndescription: d\ntools: [read_file, grep, write_file]\n---\n";
    let ctx = Ctx::new(&ALL_HOST);
    let bound = ctx.bind(request).unwrap();
    assert_eq!(caps(&bound), ["grep", "read_file", "write_file"]);
    assert_eq!(withheld(&bound), []);

    // A host that withholds write_file: the intersection drops it and records it.
    let narrow = Ctx::new(&["grep", "read_file", "bash"]);
    let bound = narrow.bind(request).unwrap();
    assert_eq!(caps(&bound), ["grep", "read_file"]);
    assert_eq!(
        withheld(&bound),
        [("write_file", WithheldReason::NotSupplied)]
    );
    assert_eq!(
        bound.withheld()[0].to_string(),
        "write_file (not supplied by this host)"
    );
    // Nothing left at all is still a binding: the agent simply holds no tools.
    let none = Ctx::new(&[]);
    let bound = none.bind(request).unwrap();
    assert!(caps(&bound).is_empty());
    assert_eq!(bound.withheld().len(), 3);
}

#[test]
fn tools_all_is_exactly_the_host_set_minus_delegation() {
    let ctx = Ctx::new(&ALL_HOST);
    let bound = ctx.bind("---\ndescription: d\n---\n").unwrap();
    let expected: Vec<&str> = ALL_HOST
        .iter()
        .copied()
        .filter(|t| !matches!(*t, "agent" | "agents"))
        .collect();
    assert_eq!(caps(&bound), expected);

    let mut root = Ctx::new(&ALL_HOST);
    root.invocation = Invocation::Root;
    let bound = root.bind("---\ndescription: d\ntools: all\n---\n").unwrap();
    assert_eq!(caps(&bound), ALL_HOST);
}

#[test]
fn delegated_agents_never_receive_agent_or_agents() {
    let ctx = Ctx::new(&ALL_HOST);
    let bound = ctx
        .bind("---\ndescription: d\ntools: [agent, agents, read_file]\n---\n")
        .unwrap();
    assert_eq!(caps(&bound), ["read_file"]);
    assert_eq!(
        withheld(&bound),
        [
            ("agent", WithheldReason::Delegation),
            ("agents", WithheldReason::Delegation)
        ]
    );
    assert_eq!(
        bound.withheld()[0].to_string(),
        "agent (delegated agents cannot delegate further)"
    );
    // Even when the host does not supply them, listing them is not an error for a delegate.
    let narrow = Ctx::new(&["read_file"]);
    let bound = narrow
        .bind("---\ndescription: d\ntools: [agent, read_file]\n---\n")
        .unwrap();
    assert_eq!(caps(&bound), ["read_file"]);
    // A root keeps them.
    let mut root = Ctx::new(&ALL_HOST);
    root.invocation = Invocation::Root;
    let bound = root
        .bind("---\ndescription: d\ntools: [agent, read_file]\n---\n")
        .unwrap();
    assert_eq!(caps(&bound), ["agent", "read_file"]);
    assert_eq!(withheld(&bound), []);
    // `tools: all` records nothing: it asks for what the host supplies, not for names.
    let bound = ctx.bind("---\ndescription: d\n---\n").unwrap();
    assert_eq!(withheld(&bound), []);
}

#[test]
fn unknown_tools_fail_binding_by_name_and_withheld_ones_do_not() {
    let ctx = Ctx::new(&["read_file", "grep"]);
    let err = ctx
        .bind("---\ndescription: d\ntools: [read_file, bash, my_ext, other_ext]\n---\n")
        .unwrap_err();
    match &err {
        AgentError::UnknownTools {
            agent,
            unknown,
            extensions,
        } => {
            assert_eq!(agent, "probe");
            // `bash` is a Rho capability the host withholds: not unknown.
            assert_eq!(unknown, &["my_ext", "other_ext"]);
            assert!(extensions.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "agent `probe`: unknown tools my_ext, other_ext: not Rho capabilities, and not \
         extensions this host supplies (extensions supplied: none)"
    );
    // Without the unknown names the same request binds, bash withheld.
    let bound = ctx
        .bind("---\ndescription: d\ntools: [read_file, bash]\n---\n")
        .unwrap();
    assert_eq!(caps(&bound), ["read_file"]);
    assert_eq!(withheld(&bound), [("bash", WithheldReason::NotSupplied)]);

    // An extension capability binds when the host supplies it, and the error lists the
    // extensions that are supplied.
    let ext = Ctx::new(&["read_file", "my_ext"]);
    let bound = ext
        .bind("---\ndescription: d\ntools: [my_ext]\n---\n")
        .unwrap();
    assert_eq!(caps(&bound), ["my_ext"]);
    let err = ext
        .bind("---\ndescription: d\ntools: [my_ext, their_ext]\n---\n")
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("unknown tools their_ext: not Rho capabilities, and not extensions this host supplies (extensions supplied: my_ext)"),
        "{err}"
    );
}

#[cfg(unix)]
#[test]
fn shell_resolves_to_bash_when_the_host_has_it() {
    let ctx = Ctx::new(&["bash", "read_file"]);
    let bound = ctx
        .bind("---\ndescription: d\ntools: [shell, read_file]\n---\n")
        .unwrap();
    assert_eq!(caps(&bound), ["bash", "read_file"]);

    // Without bash, `shell` is withheld under the name the definition used.
    let no_bash = Ctx::new(&["read_file", "shell"]);
    let bound = no_bash
        .bind("---\ndescription: d\ntools: [shell]\n---\n")
        .unwrap();
    assert!(caps(&bound).is_empty());
    assert_eq!(withheld(&bound), [("shell", WithheldReason::NotSupplied)]);
    assert_eq!(
        bound.withheld()[0].to_string(),
        "shell (resolves to bash, which this host does not supply)"
    );
}

#[test]
fn aliases_resolve_from_configuration() {
    let ctx = Ctx::new(&ALL_HOST);
    let bound = ctx
        .bind("---\ndescription: d\nmodel-policy: require\nmodel: @fast\n---\n")
        .unwrap();
    let BoundRuntime::Rho(rho) = &bound.runtime else {
        panic!()
    };
    assert_eq!(
        rho.model,
        BoundModel::Pinned {
            policy: ModelPolicy::Require,
            provider: Some("openai".into()),
            model: "gpt-4o-mini".into(),
            alias: Some("fast".into()),
        }
    );
    assert_eq!(rho.reasoning, None);

    // The alias supplies a default reasoning level; the definition's own level wins.
    let bound = ctx
        .bind("---\ndescription: d\nmodel: @deep\n---\n")
        .unwrap();
    let BoundRuntime::Rho(rho) = &bound.runtime else {
        panic!()
    };
    assert_eq!(rho.reasoning, Some(Reasoning::High));
    let bound = ctx
        .bind("---\ndescription: d\nmodel: @deep\nreasoning: low\n---\n")
        .unwrap();
    let BoundRuntime::Rho(rho) = &bound.runtime else {
        panic!()
    };
    assert_eq!(rho.reasoning, Some(Reasoning::Low));
}

#[test]
fn unknown_alias_and_provider_fail_binding_by_name() {
    let ctx = Ctx::new(&ALL_HOST);
    let err = ctx
        .bind("---\ndescription: d\nmodel: @nope\n---\n")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "agent `probe`: model alias `@nope` is not defined in [models.aliases] of /h/config.toml"
    );
    let err = ctx
        .bind("---\ndescription: d\nmodel: m\nprovider: azure\n---\n")
        .unwrap_err();
    assert!(matches!(&err, AgentError::UnknownProvider { provider, .. } if provider == "azure"));
    let bound = ctx
        .bind("---\ndescription: d\nmodel: m\nprovider: local\n---\n")
        .unwrap();
    let BoundRuntime::Rho(rho) = &bound.runtime else {
        panic!()
    };
    assert!(
        matches!(&rho.model, BoundModel::Pinned { provider: Some(p), alias: None, .. } if p == "local")
    );
}

#[test]
fn an_alias_with_a_provider_must_agree_with_it() {
    let ctx = Ctx::new(&ALL_HOST);
    let bound = ctx
        .bind("---\ndescription: d\nmodel-policy: prefer\nmodel: @deep\nprovider: local\n---\n")
        .unwrap();
    let BoundRuntime::Rho(rho) = &bound.runtime else {
        panic!()
    };
    assert_eq!(
        rho.model,
        BoundModel::Pinned {
            policy: ModelPolicy::Prefer,
            provider: Some("local".into()),
            model: "qwen3-coder".into(),
            alias: Some("deep".into()),
        }
    );
    let err = ctx
        .bind("---\ndescription: d\nmodel: @fast\nprovider: local\n---\n")
        .unwrap_err();
    match &err {
        AgentError::AliasProviderMismatch {
            alias,
            alias_provider,
            provider,
            ..
        } => {
            assert_eq!(
                (alias.as_str(), alias_provider.as_str(), provider.as_str()),
                ("fast", "openai", "local")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "agent `probe`: model alias `@fast` resolves to provider `openai` in /h/config.toml, but \
         the definition sets provider `local`; make them agree or drop `provider`"
    );
    // A provider that is not configured at all cannot agree with any alias either.
    let err = ctx
        .bind("---\ndescription: d\nmodel: @fast\nprovider: azure\n---\n")
        .unwrap_err();
    assert!(
        matches!(&err, AgentError::AliasProviderMismatch { provider, .. } if provider == "azure"),
        "{err:?}"
    );
}

#[test]
fn read_only_rule() {
    let ctx = Ctx::new(&ALL_HOST);
    let cases = [
        ("tools: [read_file, list_dir, glob, grep]", true),
        ("tools: [read_file, web_search]", true),
        ("tools: []", true),
        // Commands of a read-only agent run under the kernel's read-only ruleset.
        ("tools: [read_file, bash]", true),
        ("tools: [read_file, write_file]", false),
        ("tools: [edit_file]", false),
        ("tools: [process]", true),
        ("tools: [bash, write_file]", false),
        ("tools: [rho]", false),
        ("tools: all", false),
    ];
    for (tools, expected) in cases {
        let bound = ctx
            .bind(&format!("---\ndescription: d\n{tools}\n---\n"))
            .unwrap();
        assert_eq!(is_read_only(&bound), expected, "{tools}");
    }
    // A root agent holding `agent` can delegate, so it is not read-only.
    let mut root = Ctx::new(&ALL_HOST);
    root.invocation = Invocation::Root;
    let bound = root
        .bind("---\ndescription: d\ntools: [read_file, agent]\n---\n")
        .unwrap();
    assert!(!is_read_only(&bound));
    // Extension capabilities have unknown effects.
    let ext = Ctx::new(&["read_file", "my_ext"]);
    let bound = ext
        .bind("---\ndescription: d\ntools: [read_file, my_ext]\n---\n")
        .unwrap();
    assert!(!is_read_only(&bound));
    // The rule judges the bound set: a mutating tool the host withholds does not count.
    let no_shell = Ctx::new(&["read_file", "grep"]);
    let bound = no_shell
        .bind("---\ndescription: d\ntools: [read_file, bash, write_file]\n---\n")
        .unwrap();
    assert!(is_read_only(&bound));
    let setup = to_agent_setup(&bound);
    assert!(setup.read_only);
    assert_eq!(setup.capabilities, ["read_file"]);
    // claude-cli is never read-only, even with reading tools only.
    let bound = ctx
        .bind("---\ndescription: d\nruntime: claude-cli\ntools: [Read]\n---\n")
        .unwrap();
    assert!(!is_read_only(&bound));
}

#[test]
fn builtin_explorer_and_reviewer_are_read_only_and_worker_is_not() {
    let ctx = Ctx::new(&ALL_HOST);
    let catalog = Catalog::builtin().unwrap();
    for (id, read_only) in [
        ("explorer", true),
        ("reviewer", true),
        ("worker", false),
        ("default", false),
    ] {
        let bound = ctx.bind_entry(catalog.resolve(id).unwrap()).unwrap();
        assert_eq!(is_read_only(&bound), read_only, "{id}");
    }
}

#[test]
fn claude_flags_follow_the_definition() {
    let mut ctx = Ctx::new(&[]);
    ctx.mode = PermissionMode::Plan;
    ctx.max_turns = Some(25);
    let bound = ctx
        .bind(
            "---\ndescription: d\nruntime: claude-cli\nmodel: claude-opus-5\nreasoning: high\n\
             tools: [Read, Edit, \"Bash(git *)\", Bash(ls), Task, \"Task(x)\"]\n\
             inherit_claude_config: true\n---\nPlan first.\n",
        )
        .unwrap();
    let launch = claude(&bound);
    assert_eq!(launch.prompt_file_contents(), Some("Plan first."));
    // Nested Task entries stay disallowed, and the binding says so.
    assert_eq!(
        withheld(&bound),
        [
            ("Task", WithheldReason::Delegation),
            ("Task(x)", WithheldReason::Delegation)
        ]
    );
    assert_eq!(
        args(launch, "/runs/abc/system-prompt.md"),
        [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--permission-mode",
            "plan",
            "--disallowedTools",
            "Task",
            "--tools",
            "Read,Edit,Bash",
            "--allowedTools",
            "Read",
            "Edit",
            "Bash(git *)",
            "Bash(ls)",
            "--setting-sources",
            "user,project,local",
            "--strict-mcp-config",
            "--append-system-prompt-file",
            "/runs/abc/system-prompt.md",
            "--model",
            "claude-opus-5",
            "--effort",
            "high",
            "--max-turns",
            "25",
        ]
    );
}

#[test]
fn claude_replace_prompt_uses_the_system_prompt_file() {
    let ctx = Ctx::new(&[]);
    let bound = ctx
        .bind("---\ndescription: d\nruntime: claude-cli\nprompt: replace\ntools: [Read]\n---\nAll of it.\n")
        .unwrap();
    let launch = claude(&bound);
    let a = args(launch, "/p");
    let flag = a.iter().position(|x| x == "--system-prompt-file").unwrap();
    assert_eq!(a[flag + 1], "/p");
    assert!(!a.iter().any(|x| x == "--append-system-prompt-file"));
    assert!(
        !a.iter().any(|x| x.contains("All of it")),
        "the body never appears on argv"
    );
    assert_eq!(launch.prompt_file_contents(), Some("All of it."));
    assert!(
        !a.iter()
            .any(|x| x == "--model" || x == "--effort" || x == "--max-turns")
    );
    let sources = a.iter().position(|x| x == "--setting-sources").unwrap();
    assert_eq!(a[sources + 1], "project");
}

#[test]
fn claude_permission_modes() {
    let text = "---\ndescription: d\nruntime: claude-cli\n---\n";
    for (mode, expected) in [
        (PermissionMode::Plan, Some("plan")),
        (PermissionMode::Auto, Some("dontAsk")),
        (PermissionMode::Bypass, Some("dontAsk")),
        (PermissionMode::Supervised, None),
        (PermissionMode::AllowEdits, None),
    ] {
        let mut ctx = Ctx::new(&[]);
        ctx.mode = mode;
        match (ctx.bind(text), expected) {
            (Ok(bound), Some(flag)) => {
                assert_eq!(claude(&bound).permission_mode, flag);
                assert!(
                    !args(claude(&bound), "/p")
                        .iter()
                        .any(|a| a == "bypassPermissions")
                );
            }
            (Err(AgentError::ClaudePermissionMode { mode: m, .. }), None) => {
                assert_eq!(m, mode.as_str());
            }
            (other, _) => panic!("{mode}: unexpected {other:?}"),
        }
    }
}

#[test]
fn claude_is_delegated_only() {
    let mut ctx = Ctx::new(&[]);
    ctx.invocation = Invocation::Root;
    let err = ctx
        .bind("---\ndescription: d\nruntime: claude-cli\n---\n")
        .unwrap_err();
    assert!(
        matches!(err, AgentError::ClaudeNotDelegated { .. }),
        "{err:?}"
    );
}

#[test]
fn rho_prompt_policy_is_rendered() {
    let ctx = Ctx::new(&ALL_HOST);
    let base = rho::agents::builtin::BASE_PROMPT.trim_end();
    let bound = ctx.bind("---\ndescription: d\n---\nAlso do X.\n").unwrap();
    let BoundRuntime::Rho(rho) = &bound.runtime else {
        panic!()
    };
    assert_eq!(rho.system_prompt, format!("{base}\n\nAlso do X."));
    let bound = ctx
        .bind("---\ndescription: d\nprompt: replace\n---\nOnly X.\n")
        .unwrap();
    let BoundRuntime::Rho(rho) = &bound.runtime else {
        panic!()
    };
    assert_eq!(rho.system_prompt, "Only X.");
}

#[test]
fn agent_setup_records_the_frozen_binding() {
    let ctx = Ctx::new(&ALL_HOST);
    let e = entry("---\ndescription: d\nmodel: @fast\ntools: [grep, read_file]\n---\nLook.\n");
    let bound = ctx.bind_entry(&e).unwrap();
    let setup = to_agent_setup(&bound);
    assert_eq!(setup.id, "probe");
    assert_eq!(setup.source, AgentSource::RhoHome);
    assert_eq!(setup.fingerprint, e.fingerprint);
    assert_eq!(setup.runtime, AgentRuntime::Rho);
    assert_eq!(setup.prompt_policy, "extend");
    assert!(setup.system_prompt.ends_with("\n\nLook."));
    assert_eq!(setup.model_policy, "select");
    assert_eq!(setup.model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(setup.provider.as_deref(), Some("openai"));
    assert_eq!(setup.reasoning, None);
    assert_eq!(setup.capabilities, ["grep", "read_file"]);
    assert!(setup.read_only);
    assert!(!setup.inherit_claude_config);

    let e = entry(
        "---\ndescription: d\nruntime: claude-cli\nmodel: opus\nreasoning: max\n\
         tools: [Read, \"Bash(git *)\"]\ninherit_claude_config: true\n---\nB\n",
    );
    let setup = to_agent_setup(&ctx.bind_entry(&e).unwrap());
    assert_eq!(setup.runtime, AgentRuntime::ClaudeCli);
    assert_eq!(setup.system_prompt, "B");
    assert_eq!(setup.model_policy, "select");
    assert_eq!(setup.model.as_deref(), Some("opus"));
    assert_eq!(setup.provider, None);
    assert_eq!(setup.reasoning.as_deref(), Some("max"));
    assert_eq!(setup.capabilities, ["Bash(git *)", "Read"]);
    assert!(!setup.read_only);
    assert!(setup.inherit_claude_config);
}

#[test]
fn bound_capabilities_never_exceed_the_host_set() {
    // Every built-in capability name, requested against every prefix of a host set: each
    // listed name is either granted (as itself, `shell` as the platform shell, a Rho alias as
    // its capability's canonical tool when the host lacks the alias) or withheld.
    let host_names: Vec<&str> = rho::agents::definition::RHO_CAPABILITIES.to_vec();
    let request = format!(
        "---\ndescription: d\ntools: [{}]\n---\n",
        host_names.join(", ")
    );
    for invocation in [Invocation::Delegated, Invocation::Root] {
        for n in 0..=host_names.len() {
            let mut ctx = Ctx::new(&host_names[..n]);
            ctx.invocation = invocation;
            let host: BTreeSet<&str> = host_names[..n].iter().copied().collect();
            for text in [request.as_str(), "---\ndescription: d\n---\n"] {
                let bound = ctx.bind(text).unwrap();
                assert!(
                    caps(&bound).iter().all(|c| host.contains(c)),
                    "host {host:?}"
                );
            }
            let bound = ctx.bind(&request).unwrap();
            let granted = caps(&bound);
            let held: Vec<&str> = bound.withheld().iter().map(|w| w.name.as_str()).collect();
            for name in &host_names {
                let concrete = if *name == "shell" {
                    rho::agents::PLATFORM_SHELL
                } else if host.contains(name) {
                    name
                } else {
                    rho::agents::capability::canonical(name)
                };
                assert!(
                    granted.contains(&concrete) != held.contains(name),
                    "{name}: granted {granted:?}, withheld {held:?}"
                );
            }
        }
    }
}
