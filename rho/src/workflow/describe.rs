//! A frozen program in words: what consent to a digest actually covers (nodes, needs,
//! conditions, argv, cwd, frozen executables and interpreters with short digests, agents,
//! access, timeouts, bounds, inputs, exports, environment, sources). Used by
//! `rho workflow show`, by the confirmation prompt's "show" answer, and by the tool.
//!
//! Invariant: a pure function of the program (no I/O); every string that came from the
//! workflow has its terminal control characters made visible, so a plan cannot rewrite the
//! screen it is reviewed on.

use std::fmt::Write as _;

use rho_ipc::data::Data;
use rho_ipc::program::{
    Access, Condition, Execution, FileLocation, FrozenExecutable, FrozenProgram, InputType,
    Network, Reference, Schema, Template, TemplatePart,
};

use crate::terminal::escape_controls;

fn escape(text: &str) -> String {
    escape_controls(text).into_owned()
}

/// The longest prompt or shell source shown inline (characters).
const INLINE_TEXT: usize = 600;

/// The root nodes in the order a reader follows them: every node after the nodes it needs,
/// otherwise in the program's order, which is by id (a stable topological order; a node on
/// a cycle, which planning refuses, comes last rather than being lost).
pub fn node_order(program: &FrozenProgram) -> Vec<String> {
    let nodes = &program.root.nodes;
    let index: std::collections::HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), i))
        .collect();
    if index.len() != nodes.len() {
        // Planning refuses duplicate ids; the literal rule still orders such a program.
        return node_order_by_scan(program);
    }
    // The rule below (the first node in program order whose needs are all placed, else the
    // first unplaced one), as a topological sort that keeps the placeable nodes in a heap
    // by program position: O(n log n + edges) instead of a scan per placement.
    let mut unmet = vec![0_usize; nodes.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        let mut needs: Vec<&str> = node
            .needs
            .iter()
            .map(String::as_str)
            .filter(|need| *need != node.id)
            .collect();
        needs.sort_unstable();
        needs.dedup();
        unmet[i] = needs.len();
        for need in needs {
            // A need naming no node is never met: the node waits for the fallback.
            if let Some(&j) = index.get(need) {
                dependents[j].push(i);
            }
        }
    }
    let mut placeable: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = unmet
        .iter()
        .enumerate()
        .filter(|(_, n)| **n == 0)
        .map(|(i, _)| std::cmp::Reverse(i))
        .collect();
    let mut placed = vec![false; nodes.len()];
    let mut first_unplaced = 0;
    let mut order: Vec<String> = Vec::with_capacity(nodes.len());
    while order.len() < nodes.len() {
        let next = loop {
            match placeable.pop() {
                Some(std::cmp::Reverse(i)) if placed[i] => {}
                Some(std::cmp::Reverse(i)) => break i,
                None => {
                    while placed[first_unplaced] {
                        first_unplaced += 1;
                    }
                    break first_unplaced;
                }
            }
        };
        placed[next] = true;
        order.push(nodes[next].id.clone());
        for &dependent in &dependents[next] {
            unmet[dependent] -= 1;
            if unmet[dependent] == 0 && !placed[dependent] {
                placeable.push(std::cmp::Reverse(dependent));
            }
        }
    }
    order
}

/// [`node_order`]'s rule applied literally, one scan per placement.
fn node_order_by_scan(program: &FrozenProgram) -> Vec<String> {
    let nodes = &program.root.nodes;
    let mut placed: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    let mut order: Vec<String> = Vec::with_capacity(nodes.len());
    while order.len() < nodes.len() {
        let next = nodes.iter().find(|n| {
            !placed.contains(n.id.as_str())
                && n.needs
                    .iter()
                    .all(|need| placed.contains(need.as_str()) || need == &n.id)
        });
        let Some(node) = next.or_else(|| nodes.iter().find(|n| !placed.contains(n.id.as_str())))
        else {
            break;
        };
        placed.insert(&node.id);
        order.push(node.id.clone());
    }
    order
}

/// `sha256:0123456789ab`: the algorithm and the first 12 hex digits.
pub fn short_digest(digest: &str) -> &str {
    let cut = digest.find(':').map_or(12, |i| i + 13);
    digest.get(..cut).unwrap_or(digest)
}

/// Describes `program`, headed by `what` (`plan <ID>` or `run <ID>`) and its digest.
pub fn describe(program: &FrozenProgram, what: &str, digest: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{what}: workflow `{}` ({} node{})",
        escape(&program.name),
        program.root.nodes.len(),
        if program.root.nodes.len() == 1 {
            ""
        } else {
            "s"
        }
    );
    let _ = writeln!(out, "program_digest: {digest}");
    inputs(&mut out, program);
    let _ = writeln!(out, "nodes:");
    for node in &program.root.nodes {
        let kind = match &node.execution {
            Execution::Agent { .. } => "agent",
            Execution::Command { .. } => "command",
            Execution::Shell { .. } => "shell",
        };
        let access = match node.access {
            Access::ReadOnly => "read-only",
            Access::Mutating => "mutating",
        };
        let network = match node.network {
            Network::Allowed => "",
            Network::None => ", network none",
        };
        let _ = writeln!(
            out,
            "  {} ({kind}, {access}{network}, timeout {}s, keeps {} bytes per stream{})",
            escape(&node.id),
            node.timeout_seconds,
            node.max_output_bytes,
            if node.allow_failure {
                ", allow_failure"
            } else {
                ""
            }
        );
        if !node.needs.is_empty() {
            let _ = writeln!(out, "    needs: {}", escape(&node.needs.join(", ")));
        }
        if let Some(when) = &node.when {
            let _ = writeln!(out, "    when: {}", condition(when));
        }
        match &node.execution {
            Execution::Command {
                program: exe,
                argv0,
                args,
                cwd,
            } => {
                let mut argv = vec![quote(argv0)];
                argv.extend(args.iter().map(template));
                let _ = writeln!(out, "    argv: {}", argv.join(" "));
                executable(&mut out, exe);
                let _ = writeln!(out, "    cwd: {}", escape(&cwd.path));
            }
            Execution::Shell {
                program: exe,
                executable: shell,
                arguments,
                command,
                cwd,
            } => {
                let mut argv = vec![quote(shell)];
                argv.extend(arguments.iter().map(|a| quote(a)));
                let _ = writeln!(out, "    shell: {} <source>", argv.join(" "));
                let _ = writeln!(out, "    source: {}", clip(&quote(command)));
                executable(&mut out, exe);
                let _ = writeln!(out, "    cwd: {}", escape(&cwd.path));
            }
            Execution::Agent { agent, prompt } => {
                let _ = writeln!(out, "    agent: {}", escape(agent));
                let _ = writeln!(out, "    prompt: {}", clip(&template(prompt)));
            }
        }
        if let Some(schema) = &node.output {
            let _ = writeln!(out, "    output: {}", schema_text(schema));
        }
    }
    if !program.agents.is_empty() {
        let _ = writeln!(out, "agents:");
        for (id, a) in &program.agents {
            let _ = writeln!(
                out,
                "  {} ({:?} runtime, from {:?}, fingerprint {}{})",
                escape(id),
                a.runtime,
                a.source,
                short_digest(&a.fingerprint),
                if a.read_only { ", read-only" } else { "" }
            );
            let model = [
                a.provider.as_deref(),
                a.model.as_deref(),
                a.reasoning.as_deref(),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>();
            if !model.is_empty() {
                let _ = writeln!(out, "    model: {}", escape(&model.join(" / ")));
            }
            if !a.capabilities.is_empty() {
                let _ = writeln!(
                    out,
                    "    capabilities: {}",
                    escape(&a.capabilities.join(", "))
                );
            }
        }
    }
    if !program.root.exports.is_empty() {
        let _ = writeln!(out, "exports:");
        for (name, export) in &program.root.exports {
            let _ = writeln!(
                out,
                "  {} = {} ({})",
                escape(name),
                reference(&export.reference),
                schema_text(&export.schema)
            );
        }
    }
    let _ = writeln!(
        out,
        "environment: {} (withheld: {})",
        escape(&program.environment.name),
        escape(&program.environment.exclude.join(", "))
    );
    let _ = writeln!(
        out,
        "scheduler: up to {} nodes at once ({} agents, {} commands)",
        program.scheduler.max_parallel_nodes,
        program.scheduler.max_parallel_agents,
        program.scheduler.max_parallel_commands
    );
    if program.trust.project_agents {
        let _ = writeln!(out, "trust: needs this workspace's project agents trusted");
    }
    let _ = writeln!(out, "sources:");
    for s in &program.sources {
        let _ = writeln!(
            out,
            "  {} ({} bytes, {})",
            escape(&s.label),
            s.size,
            short_digest(&s.digest)
        );
    }
    out
}

fn inputs(out: &mut String, program: &FrozenProgram) {
    if program.root.inputs.is_empty() {
        return;
    }
    let _ = writeln!(out, "inputs:");
    for (name, decl) in &program.root.inputs {
        let ty = match &decl.ty {
            InputType::String => "string".to_owned(),
            InputType::Integer => "integer".to_owned(),
            InputType::Bool => "bool".to_owned(),
            InputType::Enum { members } => format!(
                "enum {}",
                members.iter().map(data).collect::<Vec<_>>().join(" | ")
            ),
        };
        let value = program
            .root
            .bound_inputs
            .get(name)
            .map_or_else(|| "-".to_owned(), data);
        let default = decl
            .default
            .as_ref()
            .map(|d| format!(", default {}", data(d)))
            .unwrap_or_default();
        let _ = writeln!(out, "  {} = {value} ({ty}{default})", escape(name));
    }
}

fn executable(out: &mut String, exe: &FrozenExecutable) {
    let _ = writeln!(
        out,
        "    executable: {} ({} bytes, {})",
        location(&exe.file.location),
        exe.file.size,
        short_digest(&exe.file.sha256)
    );
    if let Some(interp) = &exe.interpreter {
        let _ = writeln!(
            out,
            "    interpreter: {} ({} bytes, {}) from shebang {}",
            location(&interp.file.location),
            interp.file.size,
            short_digest(&interp.file.sha256),
            quote(&interp.shebang)
        );
    }
}

fn location(l: &FileLocation) -> String {
    match l {
        FileLocation::Workspace { path } => format!("{} (in the workspace)", escape(path)),
        FileLocation::Absolute { path, .. } => escape(path),
    }
}

fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        s.to_owned()
    } else {
        escape(&format!("{s:?}"))
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() <= INLINE_TEXT {
        return s.to_owned();
    }
    let total = s.chars().count();
    let mut out: String = s.chars().take(INLINE_TEXT).collect();
    let _ = write!(out, "… ({total} characters in all)");
    out
}

fn template(t: &Template) -> String {
    if let Some(text) = t.as_literal() {
        return quote(&text);
    }
    let parts: Vec<String> =
        t.0.iter()
            .map(|p| match p {
                TemplatePart::Text(text) => escape(&format!("{text:?}")),
                TemplatePart::Ref(r) => reference(r),
            })
            .collect();
    format!("template({})", parts.join(" + "))
}

/// A reference as the workflow wrote it.
pub fn reference(r: &Reference) -> String {
    match r {
        Reference::Output { node, path } => {
            let path: Vec<String> = path.iter().map(|p| format!("{p:?}")).collect();
            escape(&format!("output({node:?}, [{}])", path.join(", ")))
        }
        Reference::Status { node } => escape(&format!("status({node:?})")),
        Reference::ExitCode { node } => escape(&format!("exit_code({node:?})")),
    }
}

/// A condition as an expression.
pub fn condition(c: &Condition) -> String {
    match c {
        Condition::Equals {
            reference: r,
            value,
        } => format!("{} == {}", reference(r), data(value)),
        Condition::IsOneOf {
            reference: r,
            values,
        } => format!(
            "{} in [{}]",
            reference(r),
            values.iter().map(data).collect::<Vec<_>>().join(", ")
        ),
        Condition::All { conditions } => format!(
            "all({})",
            conditions
                .iter()
                .map(condition)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Condition::Any { conditions } => format!(
            "any({})",
            conditions
                .iter()
                .map(condition)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Condition::Not { condition: inner } => format!("not({})", condition(inner)),
    }
}

fn data(d: &Data) -> String {
    escape(&d.to_string())
}

/// A schema in the workflow language's words.
pub fn schema_text(s: &Schema) -> String {
    match s {
        Schema::Null => "null".to_owned(),
        Schema::Bool => "bool".to_owned(),
        Schema::Integer => "integer".to_owned(),
        Schema::String => "string".to_owned(),
        Schema::Enum { members } => format!(
            "enum({})",
            members.iter().map(data).collect::<Vec<_>>().join(" | ")
        ),
        Schema::List { items } => format!("list({})", schema_text(items)),
        Schema::Record { fields } => format!(
            "record({{{}}})",
            fields
                .iter()
                .map(|(name, f)| format!(
                    "{}{}: {}",
                    escape(name),
                    if f.optional { "?" } else { "" },
                    schema_text(&f.schema)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Schema::StdoutJson { schema } => format!("stdout_json({})", schema_text(schema)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_digests_keep_the_algorithm() {
        assert_eq!(
            short_digest("sha256:0123456789abcdef0123"),
            "sha256:0123456789ab"
        );
        assert_eq!(short_digest("abc"), "abc");
    }

    #[test]
    fn conditions_and_words_are_escaped() {
        let c = Condition::Not {
            condition: Box::new(Condition::Equals {
                reference: Reference::ExitCode {
                    node: "a".to_owned(),
                },
                value: Data::Int(0),
            }),
        };
        assert_eq!(condition(&c), "not(exit_code(\"a\") == 0)");
        assert_eq!(quote("cargo"), "cargo");
        assert_eq!(quote("a b"), "\"a b\"");
        assert_eq!(quote("\u{1b}[2J"), "\"\\u{1b}[2J\"");
    }

    #[test]
    fn nodes_are_ordered_after_their_needs_then_as_written() {
        use crate::workflow::scheduler::tests::{command_node, program};
        // Frozen programs hold their nodes sorted by id.
        let mut program = program(
            vec![
                command_node("report", &["test", "lint"]),
                command_node("lint", &[]),
                command_node("test", &["build"]),
                command_node("build", &[]),
            ],
            rho_ipc::program::SchedulerSettings::default(),
        );
        assert_eq!(node_order(&program), ["build", "lint", "test", "report"]);
        // A cycle (refused when planning) loses no node.
        program.root.nodes[0].needs = vec!["report".to_owned()];
        assert_eq!(node_order(&program).len(), 4);
    }

    /// The heap-ordered sort gives exactly the order of the literal rule, on programs with
    /// chains, fans, cycles, needs of missing nodes, self-needs and repeated needs.
    #[test]
    fn the_fast_order_is_the_literal_rules_order() {
        use crate::workflow::scheduler::tests::{command_node, program};
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |bound: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % bound
        };
        for case in 0..300 {
            let count = 1 + next(40);
            let ids: Vec<String> = (0..count).map(|i| format!("n{i:03}")).collect();
            let nodes = ids
                .iter()
                .map(|id| {
                    let needs: Vec<String> = (0..next(4))
                        .map(|_| match next(10) {
                            0 => "missing".to_owned(),
                            1 => id.clone(),
                            _ => ids[usize::try_from(next(count)).unwrap()].clone(),
                        })
                        .collect();
                    let needs: Vec<&str> = needs.iter().map(String::as_str).collect();
                    command_node(id, &needs)
                })
                .collect();
            let program = program(nodes, rho_ipc::program::SchedulerSettings::default());
            assert_eq!(
                node_order(&program),
                node_order_by_scan(&program),
                "case {case}"
            );
        }
    }
}
