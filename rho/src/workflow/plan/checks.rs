//! Graph and type checks over the evaluated workflow, re-done by the host because the
//! worker's output is untrusted: names, node and edge budgets, needs, cycles, references
//! (ancestors only, paths the referenced schema allows), conditions, schemas and exports.
//!
//! Invariant: these checks are pure (no I/O) and run before anything is resolved, so a
//! workflow that fails them never touches an executable or the store; each problem becomes
//! a diagnostic that names the node (and the need, reference or budget) at fault.

use std::collections::{BTreeMap, HashMap};

use rho_ipc::budget::Budgets;
use rho_ipc::data::Data;
use rho_ipc::evaluated::{EvaluatedExecution, EvaluatedNode, EvaluatedWorkflow, SourceSpan};
use rho_ipc::message::Diagnostic;
use rho_ipc::program::{Condition, Reference, Schema, Template};

/// The terminal node states a `status(...)` reference can read.
pub const TERMINAL_STATES: [&str; 6] = [
    "success",
    "failure",
    "denial",
    "cancellation",
    "skipped",
    "blocked",
];

/// Whether `name` is a valid workflow, node or input name: 1 to 63 ASCII bytes, first
/// `a-z`, then `a-z`, `0-9`, `_`, `-`.
pub fn is_valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes[1..]
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

fn diag(code: &str, message: String, span: Option<&SourceSpan>) -> Diagnostic {
    Diagnostic::new(code, message).at(span.cloned())
}

fn budget_diag(
    budgets: &Budgets,
    name: &'static str,
    measured: u64,
    span: Option<&SourceSpan>,
) -> Option<Diagnostic> {
    budgets
        .check(name, measured)
        .err()
        .map(|overrun| Diagnostic::budget(overrun).at(span.cloned()))
}

/// Output streams each node may retain, each up to its `max_output_bytes`: stdout and
/// stderr for commands and shells; an agent's runtime output is bounded the same way.
pub const RETAINED_STREAMS_PER_NODE: u64 = 2;

/// The most output a run of `workflow` can retain: for every node, its streams times its
/// `max_output_bytes` (saturating), checked against `retained_output_total_bytes`.
pub fn retained_output_bound(workflow: &EvaluatedWorkflow) -> u64 {
    workflow.nodes.iter().fold(0_u64, |sum, node| {
        sum.saturating_add(
            node.max_output_bytes
                .saturating_mul(RETAINED_STREAMS_PER_NODE),
        )
    })
}

/// Names, counts, bounds and needs. When these fail, later checks are skipped.
pub fn structure(workflow: &EvaluatedWorkflow, budgets: &Budgets) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let wf_span = workflow.span.as_ref();
    if !is_valid_name(&workflow.name) {
        out.push(diag(
            "invalid_name",
            format!("workflow name `{}` is invalid: use 1 to 63 of a-z, 0-9, `_`, `-`, starting with a letter", workflow.name),
            wf_span,
        ));
    }
    if let Some(d) = budget_diag(budgets, "node_count", workflow.nodes.len() as u64, wf_span) {
        out.push(d);
        return out;
    }
    let mut seen: HashMap<&str, &EvaluatedNode> = HashMap::with_capacity(workflow.nodes.len());
    for node in &workflow.nodes {
        let span = node.span.as_ref();
        if !is_valid_name(&node.name) {
            out.push(diag(
                "invalid_name",
                format!("node name `{}` is invalid: use 1 to 63 of a-z, 0-9, `_`, `-`, starting with a letter", node.name),
                span,
            ));
        }
        if let Some(first) = seen.insert(node.name.as_str(), node) {
            let at = first.span.as_ref().map_or_else(String::new, |s| {
                format!(" (first defined at {})", span_text(s))
            });
            out.push(diag(
                "duplicate_node",
                format!("duplicate node name `{}`{at}", node.name),
                span,
            ));
        }
        if node.timeout_seconds == 0 {
            out.push(diag(
                "timeout",
                format!(
                    "node `{}`: timeout_seconds must be a positive integer",
                    node.name
                ),
                span,
            ));
        } else if let Some(d) =
            budget_diag(budgets, "node_timeout_seconds", node.timeout_seconds, span)
        {
            out.push(prefixed(d, &node.name));
        }
        if node.max_output_bytes == 0 {
            out.push(diag(
                "output_bound",
                format!(
                    "node `{}`: max_output_bytes must be a positive integer",
                    node.name
                ),
                span,
            ));
        } else if let Some(d) = budget_diag(
            budgets,
            "retained_output_per_stream_bytes",
            node.max_output_bytes,
            span,
        ) {
            out.push(prefixed(d, &node.name));
        }
    }
    if let Some(mut d) = budget_diag(
        budgets,
        "retained_output_total_bytes",
        retained_output_bound(workflow),
        wf_span,
    ) {
        d.message = format!(
            "{} (the sum over all nodes of {RETAINED_STREAMS_PER_NODE} streams times max_output_bytes)",
            d.message
        );
        out.push(d);
    }
    let mut edges: u64 = 0;
    for node in &workflow.nodes {
        let mut needs: Vec<&str> = node.needs.iter().map(String::as_str).collect();
        needs.sort_unstable();
        needs.dedup();
        edges += needs.len() as u64;
        for need in needs {
            if need == node.name {
                out.push(diag(
                    "cycle",
                    format!(
                        "dependency cycle: {0} -> {0} (node `{0}` needs itself)",
                        node.name
                    ),
                    node.span.as_ref(),
                ));
            } else if !seen.contains_key(need) {
                out.push(diag(
                    "unknown_need",
                    format!("node `{}` needs unknown node `{need}`", node.name),
                    node.span.as_ref(),
                ));
            }
        }
    }
    if let Some(d) = budget_diag(budgets, "edge_count", edges, wf_span) {
        out.push(d);
    }
    out
}

fn prefixed(mut d: Diagnostic, node: &str) -> Diagnostic {
    d.message = format!("node `{node}`: {}", d.message);
    d
}

/// `label:line:column` without the `//` of the label.
pub fn span_text(span: &SourceSpan) -> String {
    format!(
        "{}:{}:{}",
        span.label.strip_prefix("//").unwrap_or(&span.label),
        span.line,
        span.column
    )
}

/// Needs as sorted, de-duplicated lists, by node name (names known to be valid and unique).
pub fn needs_map(workflow: &EvaluatedWorkflow) -> BTreeMap<&str, Vec<&str>> {
    workflow
        .nodes
        .iter()
        .map(|n| {
            let mut needs: Vec<&str> = n.needs.iter().map(String::as_str).collect();
            needs.sort_unstable();
            needs.dedup();
            (n.name.as_str(), needs)
        })
        .collect()
}

/// Finds one dependency cycle and returns it as a path `a -> b -> a` (iterative DFS in name
/// order, so the cycle reported is deterministic).
pub fn find_cycle(needs: &BTreeMap<&str, Vec<&str>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let mut marks: HashMap<&str, Mark> = needs.keys().map(|k| (*k, Mark::New)).collect();
    for start in needs.keys() {
        if marks[start] != Mark::New {
            continue;
        }
        let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
        marks.insert(start, Mark::Active);
        while let Some((node, next)) = stack.pop() {
            let children = needs.get(node).map_or(&[][..], Vec::as_slice);
            if let Some(child) = children.get(next) {
                stack.push((node, next + 1));
                match marks.get(child).copied() {
                    Some(Mark::New) => {
                        marks.insert(child, Mark::Active);
                        stack.push((child, 0));
                    }
                    Some(Mark::Active) => {
                        let pos = stack.iter().position(|(n, _)| n == child).unwrap_or(0);
                        let mut cycle: Vec<String> =
                            stack[pos..].iter().map(|(n, _)| (*n).to_owned()).collect();
                        cycle.push((*child).to_owned());
                        return Some(cycle);
                    }
                    _ => {}
                }
            } else {
                marks.insert(node, Mark::Done);
            }
        }
    }
    None
}

/// Depth of a schema: scalars 1, lists and records one more than their deepest part;
/// `stdout_json` adds nothing.
pub fn schema_depth(schema: &Schema) -> u64 {
    match schema {
        Schema::Null | Schema::Bool | Schema::Integer | Schema::String | Schema::Enum { .. } => 1,
        Schema::List { items } => 1 + schema_depth(items),
        Schema::Record { fields } => {
            1 + fields
                .values()
                .map(|f| schema_depth(&f.schema))
                .max()
                .unwrap_or(0)
        }
        Schema::StdoutJson { schema } => schema_depth(schema),
    }
}

/// Problems with the placement and content of a schema (as a node's output when
/// `top_level`).
fn schema_problems(schema: &Schema, top_level: bool, out: &mut Vec<String>) {
    match schema {
        Schema::Enum { members } => {
            if members.is_empty() {
                out.push("schema.enum needs at least one member".to_owned());
            }
            if let Some(bad) = members.iter().find(|m| !m.is_scalar()) {
                out.push(format!(
                    "schema.enum members must be scalars, found a {}",
                    bad.kind()
                ));
            }
        }
        Schema::List { items } => schema_problems(items, false, out),
        Schema::Record { fields } => {
            for field in fields.values() {
                schema_problems(&field.schema, false, out);
            }
        }
        Schema::StdoutJson { schema } => {
            if !top_level {
                out.push(
                    "schema.stdout_json is only allowed as a command or shell node's output"
                        .to_owned(),
                );
            }
            schema_problems(schema, false, out);
        }
        Schema::Null | Schema::Bool | Schema::Integer | Schema::String => {}
    }
}

/// The schema a reference path reads, or why the path is not allowed.
pub fn schema_at<'s>(output: &'s Schema, path: &[String]) -> Result<&'s Schema, String> {
    let mut current = match output {
        Schema::StdoutJson { schema } => schema.as_ref(),
        other => other,
    };
    for (i, field) in path.iter().enumerate() {
        let Schema::Record { fields } = current else {
            let at = if i == 0 {
                "the output".to_owned()
            } else {
                format!("`{}`", path[..i].join("."))
            };
            return Err(format!(
                "{at} is {}, not a record, so it has no field `{field}`",
                describe(current)
            ));
        };
        let Some(next) = fields.get(field) else {
            let at = if i == 0 {
                "the output record".to_owned()
            } else {
                format!("record `{}`", path[..i].join("."))
            };
            let known: Vec<&str> = fields.keys().map(String::as_str).collect();
            return Err(format!(
                "{at} has no field `{field}` (fields: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        };
        current = &next.schema;
    }
    Ok(current)
}

fn describe(schema: &Schema) -> &'static str {
    match schema {
        Schema::Null => "null",
        Schema::Bool => "a bool",
        Schema::Integer => "an integer",
        Schema::String => "a string",
        Schema::Enum { .. } => "an enum",
        Schema::List { .. } => "a list",
        Schema::Record { .. } => "a record",
        Schema::StdoutJson { .. } => "stdout JSON",
    }
}

/// Reference checks need each node's kind and output schema.
struct NodeFacts<'a> {
    is_agent: bool,
    output: Option<&'a Schema>,
}

/// Checks a reference's target and path; returns the schema of the value it reads.
fn check_reference(
    reference: &Reference,
    nodes: &HashMap<&str, NodeFacts<'_>>,
) -> Result<Schema, String> {
    let target = reference.node();
    let Some(facts) = nodes.get(target) else {
        return Err(format!("references unknown node `{target}`"));
    };
    match reference {
        Reference::Status { .. } => Ok(Schema::Enum {
            members: TERMINAL_STATES
                .iter()
                .map(|s| Data::String((*s).to_owned()))
                .collect(),
        }),
        Reference::ExitCode { .. } => {
            if facts.is_agent {
                Err(format!(
                    "exit_code(\"{target}\"): `{target}` is an agent node; only command and shell nodes have an exit code"
                ))
            } else {
                Ok(Schema::Integer)
            }
        }
        Reference::Output { path, .. } => {
            let Some(schema) = facts.output else {
                return Err(format!(
                    "output(\"{target}\", ...): node `{target}` declares no output schema"
                ));
            };
            schema_at(schema, path).cloned().map_err(|why| {
                format!(
                    "output(\"{target}\", [{}]): {why}",
                    path.iter()
                        .map(|p| format!("\"{p}\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
        }
    }
}

/// Ancestor queries over `needs` by node index: a depth-first search from the node that
/// stops at the target, with a visit stamp per query so no set is built or cleared. A
/// reference usually names a direct need, which is answered without searching.
struct Ancestry {
    index: HashMap<String, usize>,
    needs: Vec<Vec<usize>>,
    stamp: Vec<u32>,
    query: u32,
    stack: Vec<usize>,
}

impl Ancestry {
    fn new(needs: &BTreeMap<&str, Vec<&str>>) -> Self {
        let index: HashMap<String, usize> = needs
            .keys()
            .enumerate()
            .map(|(i, n)| ((*n).to_owned(), i))
            .collect();
        let needs = needs
            .values()
            .map(|list| list.iter().filter_map(|n| index.get(*n).copied()).collect())
            .collect();
        let len = index.len();
        Self {
            index,
            needs,
            stamp: vec![0; len],
            query: 0,
            stack: Vec::new(),
        }
    }

    /// Whether `ancestor` is reachable from `node` through `needs`.
    fn is_ancestor(&mut self, node: &str, ancestor: &str) -> bool {
        let (Some(&from), Some(&target)) = (self.index.get(node), self.index.get(ancestor)) else {
            return false;
        };
        if self.needs[from].contains(&target) {
            return true;
        }
        self.query += 1;
        self.stack.clear();
        self.stack.extend_from_slice(&self.needs[from]);
        while let Some(n) = self.stack.pop() {
            if n == target {
                return true;
            }
            if self.stamp[n] != self.query {
                self.stamp[n] = self.query;
                self.stack.extend_from_slice(&self.needs[n]);
            }
        }
        false
    }
}

/// Schemas, references, conditions and exports. Assumes [`structure`] passed and the graph
/// is acyclic.
pub fn semantics(workflow: &EvaluatedWorkflow, budgets: &Budgets) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let needs = needs_map(workflow);
    let mut facts: HashMap<&str, NodeFacts<'_>> = HashMap::with_capacity(workflow.nodes.len());
    let mut schema_bytes: u64 = 0;
    for node in &workflow.nodes {
        let span = node.span.as_ref();
        let is_agent = matches!(node.execution, EvaluatedExecution::Agent { .. });
        if let Some(schema) = &node.output {
            let mut problems = Vec::new();
            schema_problems(schema, true, &mut problems);
            match (is_agent, schema) {
                (true, Schema::StdoutJson { .. }) => problems.push(
                    "schema.stdout_json is only allowed on command and shell nodes; an agent's output is a plain schema".to_owned(),
                ),
                (false, Schema::StdoutJson { .. }) | (true, _) => {}
                (false, _) => problems.push(
                    "a command or shell node's output must be schema.stdout_json(...): it describes the JSON printed on stdout".to_owned(),
                ),
            }
            for p in problems {
                out.push(diag(
                    "schema",
                    format!("node `{}`: output schema: {p}", node.name),
                    span,
                ));
            }
            if let Some(d) = budget_diag(budgets, "schema_depth", schema_depth(schema), span) {
                out.push(prefixed(d, &node.name));
            }
            schema_bytes +=
                rho_ipc::canonical::to_canonical_bytes(schema).map_or(0, |b| b.len() as u64);
        }
        facts.insert(
            node.name.as_str(),
            NodeFacts {
                is_agent,
                output: node.output.as_ref(),
            },
        );
    }
    if let Some(d) = budget_diag(
        budgets,
        "schema_bytes",
        schema_bytes,
        workflow.span.as_ref(),
    ) {
        out.push(d);
    }

    let mut ancestry = Ancestry::new(&needs);
    for node in &workflow.nodes {
        let span = node.span.as_ref();
        let mut references: Vec<(&Reference, &str)> = Vec::new();
        if let Some(condition) = &node.when {
            let depth = condition.depth() as u64;
            if let Some(d) = budget_diag(budgets, "condition_depth", depth, span) {
                out.push(prefixed(d, &node.name));
            }
            references.extend(condition.references().into_iter().map(|r| (r, "condition")));
            check_condition_values(condition, &node.name, span, &facts, &mut out);
        }
        match &node.execution {
            EvaluatedExecution::Agent { prompt, .. } => {
                references.extend(prompt.references().map(|r| (r, "prompt")));
            }
            EvaluatedExecution::Command { args, .. } => {
                references.extend(
                    args.iter()
                        .flat_map(Template::references)
                        .map(|r| (r, "argument")),
                );
            }
            EvaluatedExecution::Shell { .. } => {}
        }
        for (reference, place) in references {
            let target = reference.node();
            if let Err(why) = check_reference(reference, &facts) {
                out.push(diag(
                    "reference",
                    format!("node `{}`: {place} {why}", node.name),
                    span,
                ));
                continue;
            }
            if !ancestry.is_ancestor(&node.name, target) {
                out.push(diag(
                    "reference",
                    format!(
                        "node `{}`: {place} references `{target}`, which is not an ancestor: add `{target}` to `needs` (directly or through another need)",
                        node.name
                    ),
                    span,
                ));
            }
        }
    }
    for (name, reference) in &workflow.exports {
        if let Err(why) = check_reference(reference, &facts) {
            out.push(diag(
                "reference",
                format!("export `{name}`: {why}"),
                workflow.span.as_ref(),
            ));
        }
    }
    out
}

/// Values compared with a status must be states, with an exit code 32-bit integers (an exit
/// status is an `i32`), and with an output values its schema can produce: a comparison that
/// can never hold is a mistake, refused as Rho 1.47 refuses it.
fn check_condition_values(
    condition: &Condition,
    node: &str,
    span: Option<&SourceSpan>,
    facts: &HashMap<&str, NodeFacts<'_>>,
    out: &mut Vec<Diagnostic>,
) {
    let mut stack = vec![condition];
    while let Some(c) = stack.pop() {
        let (reference, values): (&Reference, Vec<&Data>) = match c {
            Condition::Equals { reference, value } => (reference, vec![value]),
            Condition::IsOneOf { reference, values } => (reference, values.iter().collect()),
            Condition::All { conditions } | Condition::Any { conditions } => {
                stack.extend(conditions.iter());
                continue;
            }
            Condition::Not { condition } => {
                stack.push(condition);
                continue;
            }
        };
        for value in values {
            match (reference, value) {
                (Reference::Status { node: target }, Data::String(s))
                    if !TERMINAL_STATES.contains(&s.as_str()) =>
                {
                    out.push(diag(
                        "condition",
                        format!("node `{node}`: condition compares status(\"{target}\") with \"{s}\", which is not a terminal state ({})", TERMINAL_STATES.join(", ")),
                        span,
                    ));
                }
                (Reference::Status { node: target }, other)
                    if !matches!(other, Data::String(_)) =>
                {
                    out.push(diag("condition", format!("node `{node}`: condition compares status(\"{target}\") with a {}, not a state name", other.kind()), span));
                }
                (Reference::ExitCode { node: target }, other) if !matches!(other, Data::Int(_)) => {
                    out.push(diag("condition", format!("node `{node}`: condition compares exit_code(\"{target}\") with a {}, not an integer", other.kind()), span));
                }
                (Reference::ExitCode { node: target }, Data::Int(code))
                    if i32::try_from(*code).is_err() =>
                {
                    out.push(diag(
                        "condition",
                        format!(
                            "node `{node}`: condition compares exit_code(\"{target}\") with {code}, outside the 32-bit range of exit codes ({} to {})",
                            i32::MIN,
                            i32::MAX
                        ),
                        span,
                    ));
                }
                (Reference::Output { node: target, path }, value) => {
                    // An unknown target or path is reported with the references.
                    let Ok(schema) = check_reference(reference, facts) else {
                        continue;
                    };
                    if let Err(why) = crate::workflow::runner::output::validate(&schema, value) {
                        let at = path
                            .iter()
                            .map(|p| format!("\"{p}\""))
                            .collect::<Vec<_>>()
                            .join(", ");
                        out.push(diag(
                            "condition",
                            format!(
                                "node `{node}`: condition compares output(\"{target}\", [{at}]) with {value}, which its schema can never produce ({why})"
                            ),
                            span,
                        ));
                    }
                }
                _ => {}
            }
        }
    }
}

/// The typed exports of the root scope (call after [`semantics`] passed).
pub fn export_schemas(workflow: &EvaluatedWorkflow) -> BTreeMap<String, rho_ipc::program::Export> {
    let facts: HashMap<&str, NodeFacts<'_>> = workflow
        .nodes
        .iter()
        .map(|n| {
            (
                n.name.as_str(),
                NodeFacts {
                    is_agent: matches!(n.execution, EvaluatedExecution::Agent { .. }),
                    output: n.output.as_ref(),
                },
            )
        })
        .collect();
    workflow
        .exports
        .iter()
        .filter_map(|(name, reference)| {
            check_reference(reference, &facts).ok().map(|schema| {
                (
                    name.clone(),
                    rho_ipc::program::Export {
                        reference: reference.clone(),
                        schema,
                    },
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use rho_ipc::program::RecordField;

    use super::*;

    fn node(name: &str, needs: &[&str]) -> EvaluatedNode {
        EvaluatedNode {
            name: name.to_owned(),
            needs: needs.iter().map(|s| (*s).to_owned()).collect(),
            when: None,
            allow_failure: false,
            access: None,
            network: None,
            timeout_seconds: 10,
            max_output_bytes: 100,
            output: None,
            execution: EvaluatedExecution::Command {
                argv0: "true".into(),
                args: vec![],
                cwd: ".".into(),
            },
            span: Some(SourceSpan {
                label: "//w.star".into(),
                line: 3,
                column: 5,
            }),
        }
    }

    fn workflow(nodes: Vec<EvaluatedNode>) -> EvaluatedWorkflow {
        EvaluatedWorkflow {
            name: "wf".into(),
            inputs: BTreeMap::new(),
            bound_inputs: BTreeMap::new(),
            nodes,
            exports: BTreeMap::new(),
            max_parallel_commands: None,
            span: None,
        }
    }

    #[test]
    fn names() {
        assert!(is_valid_name("a"));
        assert!(is_valid_name("build-2_x"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("2a"));
        assert!(!is_valid_name("A"));
        assert!(!is_valid_name(&"a".repeat(64)));
        assert!(is_valid_name(&"a".repeat(63)));
    }

    #[test]
    fn unknown_needs_and_duplicates_are_named() {
        let wf = workflow(vec![node("a", &["x"]), node("b", &[]), node("b", &[])]);
        let diags = structure(&wf, &Budgets::default());
        let messages: Vec<_> = diags.iter().map(|d| d.message.as_str()).collect();
        assert!(
            messages.contains(&"node `a` needs unknown node `x`"),
            "{messages:?}"
        );
        assert!(
            messages
                .iter()
                .any(|m| m.starts_with("duplicate node name `b`")),
            "{messages:?}"
        );
    }

    #[test]
    fn retained_output_total_counts_two_streams_per_node() {
        let mut agent = node("c", &[]);
        agent.execution = EvaluatedExecution::Agent {
            agent: "reviewer".into(),
            prompt: Template::text("x"),
        };
        let wf = workflow(vec![node("a", &[]), node("b", &[]), agent]);
        assert_eq!(retained_output_bound(&wf), 600);
        let mut budgets = Budgets {
            retained_output_total_bytes: 600,
            ..Budgets::default()
        };
        assert!(structure(&wf, &budgets).is_empty());
        budgets.retained_output_total_bytes = 599;
        let diags = structure(&wf, &budgets);
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert_eq!(
            diags[0]
                .budget
                .as_ref()
                .map(|b| (b.name.as_str(), b.limit, b.measured)),
            Some(("retained_output_total_bytes", 599, 600))
        );
        assert!(
            diags[0]
                .message
                .contains("2 streams times max_output_bytes")
        );
    }

    #[test]
    fn cycles_are_printed() {
        let wf = workflow(vec![
            node("a", &["c"]),
            node("b", &["a"]),
            node("c", &["b"]),
            node("d", &[]),
        ]);
        assert_eq!(find_cycle(&needs_map(&wf)).unwrap(), ["a", "c", "b", "a"]);
        let wf = workflow(vec![node("a", &[]), node("b", &["a", "a"])]);
        assert_eq!(find_cycle(&needs_map(&wf)), None);
    }

    #[test]
    fn references_must_name_ancestors_and_schema_paths() {
        let mut a = node("a", &[]);
        a.output = Some(Schema::StdoutJson {
            schema: Box::new(Schema::Record {
                fields: [(
                    "summary".to_owned(),
                    RecordField {
                        schema: Schema::String,
                        optional: false,
                    },
                )]
                .into(),
            }),
        });
        let mut b = node("b", &["a"]);
        b.when = Some(Condition::Equals {
            reference: Reference::Output {
                node: "a".into(),
                path: vec!["summary".into()],
            },
            value: Data::String("ok".into()),
        });
        let mut c = node("c", &[]);
        c.when = Some(Condition::Equals {
            reference: Reference::ExitCode { node: "a".into() },
            value: Data::Int(0),
        });
        let mut d = node("d", &["a"]);
        d.when = Some(Condition::Equals {
            reference: Reference::Output {
                node: "a".into(),
                path: vec!["missing".into()],
            },
            value: Data::Null,
        });
        let wf = workflow(vec![a, b, c, d]);
        let diags = semantics(&wf, &Budgets::default());
        assert_eq!(diags.len(), 2, "{diags:?}");
        assert!(
            diags[0]
                .message
                .contains("node `c`: condition references `a`, which is not an ancestor"),
            "{}",
            diags[0].message
        );
        assert!(
            diags[1]
                .message
                .contains("has no field `missing` (fields: summary)"),
            "{}",
            diags[1].message
        );
    }

    #[test]
    fn deep_conditions_hit_the_budget() {
        let mut c = Condition::Equals {
            reference: Reference::Status { node: "a".into() },
            value: Data::String("success".into()),
        };
        for _ in 0..9 {
            c = Condition::Not {
                condition: Box::new(c),
            };
        }
        let mut b = node("b", &["a"]);
        b.when = Some(c);
        let diags = semantics(&workflow(vec![node("a", &[]), b]), &Budgets::default());
        assert_eq!(diags.len(), 1);
        assert_eq!(
            diags[0].message,
            "node `b`: planning budget condition_depth exceeded: accepted limit 8, requested or measured 10"
        );
    }
}
