//! Freezing: from the evaluated workflow (untrusted, from the worker) to the `FrozenProgram`
//! that a run executes. Re-runs every graph check (`checks`), resolves executables,
//! interpreters and working directories (`resolve`) and agents (the catalog), checks access
//! claims and the template and program budgets, and normalizes everything that carries no
//! meaning in its order.
//!
//! Invariant: the result depends only on the sources, inputs, catalog, configuration and
//! file identities — never on the clock, the data directory or the workspace's location —
//! so the same inputs always freeze to the same bytes.

use std::collections::BTreeMap;

use rho_ipc::budget::Budgets;
use rho_ipc::evaluated::{EvaluatedExecution, EvaluatedNode, EvaluatedWorkflow};
use rho_ipc::message::Diagnostic;
use rho_ipc::program::{
    Access, AgentRuntime, AgentSetup, AgentSource, EnvironmentPolicy, Execution, FrozenProgram,
    Network, Node, PROGRAM_FORMAT_VERSION, PlannerIdentity, ROOT_SCOPE_ID, RootScope,
    SchedulerSettings, SourceEntry, Template, TrustRequirement,
};

use super::checks;
use super::resolve::{ResolveError, Resolver};
use crate::confinement::{self, ConfinementRequest, KernelSupport};

/// The planner's name in every program.
pub const PLANNER_NAME: &str = "rho-planner";

/// The environment policy: the built-in credential patterns plus `exclude` (from
/// `[environment] exclude`), and `allow` (from `[environment] allow`); see
/// [`crate::permissions::credentials`].
pub fn environment_policy(exclude: &[String], allow: &[String]) -> EnvironmentPolicy {
    crate::permissions::credentials::environment_policy(exclude, allow)
}

/// Resolves an agent id to its frozen setup (the catalog, bound for a workflow node).
pub trait AgentResolver {
    /// The setup of `id`, or a message saying why it cannot be used.
    fn resolve(&mut self, id: &str) -> Result<AgentSetup, String>;
}

/// Everything freezing needs besides the workflow.
pub struct FreezeContext<'r, 'w> {
    /// The budgets in force.
    pub budgets: &'r Budgets,
    /// Executable and directory resolution.
    pub resolver: &'r mut Resolver<'w>,
    /// Agent resolution.
    pub agents: &'r mut dyn AgentResolver,
    /// The environment policy.
    pub environment: EnvironmentPolicy,
    /// Scheduler capacity.
    pub scheduler: SchedulerSettings,
    /// The source manifest, sorted by label.
    pub sources: Vec<SourceEntry>,
}

/// The planner identity of this build.
pub fn planner_identity() -> PlannerIdentity {
    PlannerIdentity {
        name: PLANNER_NAME.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    }
}

/// Checks and freezes a workflow; every problem found is returned as a diagnostic.
pub fn freeze(
    workflow: &EvaluatedWorkflow,
    ctx: FreezeContext<'_, '_>,
) -> Result<FrozenProgram, Vec<Diagnostic>> {
    let budgets = ctx.budgets;
    let diagnostics = checks::structure(workflow, budgets);
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }
    let needs = checks::needs_map(workflow);
    if let Some(cycle) = checks::find_cycle(&needs) {
        let span = workflow
            .nodes
            .iter()
            .find(|n| n.name == cycle[0])
            .and_then(|n| n.span.clone());
        return Err(vec![
            Diagnostic::new("cycle", format!("dependency cycle: {}", cycle.join(" -> "))).at(span),
        ]);
    }
    let diagnostics = checks::semantics(workflow, budgets);
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }

    let mut diagnostics = Vec::new();
    let mut agents: BTreeMap<String, AgentSetup> = BTreeMap::new();
    let mut agent_errors: BTreeMap<String, String> = BTreeMap::new();
    let mut nodes = Vec::with_capacity(workflow.nodes.len());
    for node in &workflow.nodes {
        match freeze_node(
            node,
            &needs,
            budgets,
            ctx.resolver,
            ctx.agents,
            &mut agents,
            &mut agent_errors,
        ) {
            Ok(frozen) => nodes.push(frozen),
            // Out of time: every later node would fail the same way; report it once.
            Err(d) if d.iter().any(is_wall_time) => {
                return Err(d.into_iter().filter(is_wall_time).collect());
            }
            Err(mut d) => diagnostics.append(&mut d),
        }
    }
    // A read-only or network-denied node is only planned where this kernel can enforce it;
    // the runner checks again before every launch.
    let mut kernel: Option<Result<KernelSupport, String>> = None;
    for (frozen, node) in nodes.iter().zip(&workflow.nodes) {
        let request = ConfinementRequest::for_node(frozen);
        if request.is_empty() {
            continue;
        }
        let support =
            kernel.get_or_insert_with(|| KernelSupport::detect().map_err(|e| e.to_string()));
        let refusal = match support {
            Ok(support) => confinement::plan(request, support)
                .err()
                .map(|e| e.to_string()),
            Err(e) => Some(e.clone()),
        };
        if let Some(why) = refusal {
            let field = if request.read_only {
                "access"
            } else {
                "network"
            };
            diagnostics.push(node_diag(node, field, why));
        }
    }
    let mut scheduler = ctx.scheduler;
    if let Some(commands) = workflow.max_parallel_commands {
        if commands == 0 || commands > 1024 {
            diagnostics.push(
                Diagnostic::new(
                    "invalid_argument",
                    format!(
                        "workflow(max_parallel_commands) must be between 1 and 1024, got {commands}"
                    ),
                )
                .at(workflow.span.clone()),
            );
        }
        // The workflow's own capacity wins over the configured one; the total limit grows
        // with it, or it would silently cap what the workflow asked for.
        scheduler.max_parallel_commands = commands;
        scheduler.max_parallel_nodes = scheduler.max_parallel_nodes.max(commands);
    }
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }
    nodes.sort_by(|a, b| a.id.cmp(&b.id));
    let trust = TrustRequirement {
        project_agents: agents.values().any(|a| a.source == AgentSource::Project),
    };
    Ok(FrozenProgram {
        format_version: PROGRAM_FORMAT_VERSION,
        planner: planner_identity(),
        name: workflow.name.clone(),
        root: RootScope {
            id: ROOT_SCOPE_ID.to_owned(),
            inputs: workflow.inputs.clone(),
            bound_inputs: workflow.bound_inputs.clone(),
            exports: checks::export_schemas(workflow),
            nodes,
        },
        agents,
        environment: ctx.environment,
        scheduler,
        budgets: budgets.clone(),
        sources: ctx.sources,
        trust,
    })
}

fn node_diag(node: &EvaluatedNode, code: &str, message: impl std::fmt::Display) -> Diagnostic {
    Diagnostic::new(code, format!("node `{}`: {message}", node.name)).at(node.span.clone())
}

fn freeze_node(
    node: &EvaluatedNode,
    needs: &BTreeMap<&str, Vec<&str>>,
    budgets: &Budgets,
    resolver: &mut Resolver<'_>,
    agent_resolver: &mut dyn AgentResolver,
    agents: &mut BTreeMap<String, AgentSetup>,
    agent_errors: &mut BTreeMap<String, String>,
) -> Result<Node, Vec<Diagnostic>> {
    let mut diagnostics = Vec::new();
    let budget = |name: &'static str, measured: u64, diagnostics: &mut Vec<Diagnostic>| {
        if let Err(overrun) = budgets.check(name, measured) {
            diagnostics.push(node_diag(node, "budget", overrun.to_string()));
            if let Some(d) = diagnostics.last_mut() {
                d.budget = Some(overrun);
            }
        }
    };
    let (execution, access) = match &node.execution {
        EvaluatedExecution::Agent { agent, prompt } => {
            let prompt = prompt.clone().normalized();
            if let Some(text) = prompt.as_literal() {
                budget("expanded_prompt_bytes", text.len() as u64, &mut diagnostics);
            }
            budget(
                "rendered_template_bytes",
                literal_bytes(&prompt),
                &mut diagnostics,
            );
            let setup = match agents.get(agent) {
                Some(setup) => Some(setup.clone()),
                None => match agent_errors.get(agent) {
                    Some(why) => {
                        diagnostics.push(node_diag(node, "agent", why.clone()));
                        None
                    }
                    None => match agent_resolver.resolve(agent) {
                        Ok(setup) => {
                            agents.insert(agent.clone(), setup.clone());
                            Some(setup)
                        }
                        Err(why) => {
                            agent_errors.insert(agent.clone(), why.clone());
                            diagnostics.push(node_diag(node, "agent", why));
                            None
                        }
                    },
                },
            };
            let access = match (node.access, &setup) {
                (Some(Access::ReadOnly), Some(setup)) if !setup.read_only => {
                    diagnostics.push(node_diag(node, "access", read_only_refusal(setup)));
                    Access::ReadOnly
                }
                (Some(access), _) => access,
                (None, _) => Access::Mutating,
            };
            (
                Execution::Agent {
                    agent: agent.clone(),
                    prompt,
                },
                access,
            )
        }
        EvaluatedExecution::Command { argv0, args, cwd } => {
            let args: Vec<Template> = args.iter().cloned().map(Template::normalized).collect();
            let static_bytes: u64 =
                argv0.len() as u64 + args.iter().map(literal_bytes).sum::<u64>();
            budget("expanded_argv_bytes", static_bytes, &mut diagnostics);
            for arg in &args {
                budget(
                    "rendered_template_bytes",
                    literal_bytes(arg),
                    &mut diagnostics,
                );
            }
            let program = resolver
                .executable(argv0)
                .map_err(|e| diagnostics.push(executable_diag(node, "executable", &e)))
                .ok();
            let cwd = resolver
                .directory(cwd)
                .map_err(|e| diagnostics.push(node_diag(node, "cwd", e.to_string())))
                .ok();
            let access = command_access(node, &mut diagnostics);
            match (program, cwd) {
                (Some(program), Some(cwd)) => (
                    Execution::Command {
                        program,
                        argv0: argv0.clone(),
                        args,
                        cwd,
                    },
                    access,
                ),
                _ => return Err(diagnostics),
            }
        }
        EvaluatedExecution::Shell {
            executable,
            arguments,
            command,
            cwd,
        } => {
            let static_bytes = executable.len() as u64
                + arguments.iter().map(|a| a.len() as u64).sum::<u64>()
                + command.len() as u64;
            budget("expanded_argv_bytes", static_bytes, &mut diagnostics);
            let program = resolver
                .executable(executable)
                .map_err(|e| diagnostics.push(executable_diag(node, "shell executable", &e)))
                .ok();
            let cwd = resolver
                .directory(cwd)
                .map_err(|e| diagnostics.push(node_diag(node, "cwd", e.to_string())))
                .ok();
            let access = command_access(node, &mut diagnostics);
            match (program, cwd) {
                (Some(program), Some(cwd)) => (
                    Execution::Shell {
                        program,
                        executable: executable.clone(),
                        arguments: arguments.clone(),
                        command: command.clone(),
                        cwd,
                    },
                    access,
                ),
                _ => return Err(diagnostics),
            }
        }
    };
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }
    let network = match (&node.execution, node.network) {
        (EvaluatedExecution::Agent { .. }, Some(Network::None)) => {
            return Err(vec![node_diag(
                node,
                "network",
                "network is accepted only on command and shell nodes",
            )]);
        }
        (_, network) => network.unwrap_or_default(),
    };
    Ok(Node {
        id: node.name.clone(),
        needs: needs
            .get(node.name.as_str())
            .map(|n| n.iter().map(|s| (*s).to_owned()).collect())
            .unwrap_or_default(),
        when: node.when.clone(),
        allow_failure: node.allow_failure,
        access,
        network,
        timeout_seconds: node.timeout_seconds,
        max_output_bytes: node.max_output_bytes,
        output: node.output.clone(),
        execution,
    })
}

/// An executable that cannot be frozen; running out of wall time while hashing it is the
/// `planner_wall_ms` budget, not a problem of the file.
fn executable_diag(node: &EvaluatedNode, what: &str, error: &ResolveError) -> Diagnostic {
    let mut diagnostic = node_diag(
        node,
        if matches!(error, ResolveError::WallTime { .. }) {
            "budget"
        } else {
            "executable"
        },
        format!("{what}: {error}"),
    );
    if let ResolveError::WallTime { overrun, .. } = error {
        diagnostic.budget = Some(overrun.clone());
    }
    diagnostic
}

fn is_wall_time(diagnostic: &Diagnostic) -> bool {
    diagnostic
        .budget
        .as_ref()
        .is_some_and(|b| b.name == "planner_wall_ms")
}

/// A command or shell node's access as written (mutating by default). Read-only is a
/// kernel guarantee there, checked against this kernel after freezing.
fn command_access(node: &EvaluatedNode, _diagnostics: &mut Vec<Diagnostic>) -> Access {
    node.access.unwrap_or(Access::Mutating)
}

fn read_only_refusal(setup: &AgentSetup) -> String {
    match setup.runtime {
        AgentRuntime::ClaudeCli => format!(
            "access read_only is not allowed: agent `{}` uses runtime claude-cli, which is always mutating",
            setup.id
        ),
        AgentRuntime::Rho => {
            let mutating: Vec<&str> = setup
                .capabilities
                .iter()
                .map(String::as_str)
                .filter(|c| !crate::agents::READ_ONLY_CAPABILITIES.contains(c))
                .collect();
            format!(
                "access read_only is not allowed: agent `{}` can write or run processes (capabilities: {})",
                setup.id,
                mutating.join(", ")
            )
        }
    }
}

fn literal_bytes(template: &Template) -> u64 {
    template
        .0
        .iter()
        .map(|p| match p {
            rho_ipc::program::TemplatePart::Text(t) => t.len() as u64,
            rho_ipc::program::TemplatePart::Ref(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_policy_is_sorted_and_keeps_builtins() {
        let policy = environment_policy(&["ZED_*".to_owned(), "OPENAI_*".to_owned()], &[]);
        assert_eq!(policy.name, "inherit_except_credentials");
        assert!(policy.exclude.windows(2).all(|w| w[0] < w[1]));
        assert!(policy.excludes("MY_API_KEY"));
        assert!(policy.excludes("ANTHROPIC_BASE_URL"));
        assert!(policy.excludes("ZED_X"));
        assert!(!policy.excludes("PATH"));
    }
}
