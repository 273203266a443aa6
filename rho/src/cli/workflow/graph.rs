//! `rho workflow graph PLAN_ID|RUN_ID|FILE`: draws the frozen node graph as Mermaid or DOT,
//! each node labelled with its name and kind (and, for a run, its current state); edges run
//! from a need to the node that needs it.
//!
//! Invariant: the drawing is a pure function of the frozen program (a stored plan, a run's
//! own verified copy, or a workflow file planned without storing) and, for a run, of the
//! state `status` would report; nodes in node-id order, so it is stable. It never takes a
//! run's lock.

use std::fmt::Write as _;

use std::collections::BTreeMap;

use clap::{Args, ValueEnum};
use rho_ipc::program::FrozenProgram;

use super::{Context, InputArgs, parse_inputs, plan_error, print_out, store_error, warn};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::workflow::state::NodeState;
use crate::workflow::store::StoreError;
use crate::workflow::store::plans;
use crate::workflow::store::runs::{self, StoredManifest};

/// Drawing formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GraphFormat {
    /// A Mermaid flowchart.
    Mermaid,
    /// Graphviz DOT.
    Dot,
}

/// Draw a plan's, a run's (with node states) or a workflow file's node graph.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// A plan or run id (or unique prefix), or a workflow file (`.star`).
    #[arg(value_name = "PLAN_ID|RUN_ID|FILE")]
    pub target: String,
    #[command(flatten)]
    pub inputs: InputArgs,
    /// Drawing format.
    #[arg(long, value_enum, default_value = "mermaid")]
    pub format: GraphFormat,
}

/// Runs `rho workflow graph`.
pub fn run_graph(args: &GraphArgs) -> CliResult {
    let located = super::workspace()?;
    let target = super::target(&located, &args.target)?;
    let program = if let super::Target::File(path) = &target {
        let inputs = parse_inputs(&args.inputs.inputs)?;
        let ctx = Context::from_env()?;
        let planned = ctx.plan(path, &inputs).map_err(|e| plan_error(&e))?;
        warn(&planned.warnings());
        planned.program
    } else {
        if !args.inputs.inputs.is_empty() {
            return Err(CliError::invalid(
                "--input applies to a workflow file, not to a stored plan",
            ));
        }
        let home =
            crate::paths::RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
        let id = match plans::resolve(&home, &args.target) {
            Ok(id) => id,
            Err(StoreError::UnknownId { .. }) => {
                // Not a plan: a run, drawn with the states `status` reports.
                let (program, states) = run_graph_input(&home, &args.target)?;
                let text = draw(args.format, &program, Some(&states));
                print_out(&text)?;
                return Ok(ExitCode::Success);
            }
            Err(e) => return Err(store_error(&e)),
        };
        let stored = plans::load(&home, &id).map_err(|e| store_error(&e))?;
        warn(&crate::workflow::plan::recorded_sandbox_warnings(
            &stored.manifest.sandbox,
        ));
        stored.program
    };
    let text = draw(args.format, &program, None);
    print_out(&text)?;
    Ok(ExitCode::Success)
}

/// Node states by node id, for a run's drawing.
pub type NodeStates = BTreeMap<String, NodeState>;

/// A run's verified program and the node states `status` would report (a format-1 run is
/// refused: its program is not in a format this build reads).
fn run_graph_input(
    home: &crate::paths::RhoHome,
    target: &str,
) -> Result<(FrozenProgram, NodeStates), CliError> {
    let located = super::workspace()?;
    // The target was tried as a plan first: say that neither kind matched.
    let id = runs::resolve(home, target)
        .map_err(|e| super::unknown_target(&located, target, &e, "plan or run"))?;
    let (run, inspection) =
        crate::workflow::runner::inspect(home, &id).map_err(|e| super::run::run_error(&e))?;
    let manifest = match &inspection.manifest {
        StoredManifest::Current(m) => m,
        StoredManifest::Legacy(_) => {
            return Err(store_error(&StoreError::Legacy {
                kind: "run",
                id: id.clone(),
            }));
        }
    };
    let program = run.load_program(manifest).map_err(|e| store_error(&e))?;
    let states = inspection
        .state
        .as_ref()
        .map(|s| {
            s.root()
                .tasks
                .iter()
                .map(|(id, t)| (id.clone(), t.state))
                .collect()
        })
        .unwrap_or_default();
    Ok((program, states))
}

fn draw(format: GraphFormat, program: &FrozenProgram, states: Option<&NodeStates>) -> String {
    match format {
        GraphFormat::Mermaid => mermaid_with_states(program, states),
        GraphFormat::Dot => dot_with_states(program, states),
    }
}

fn label(node: &rho_ipc::program::Node, state: Option<NodeState>) -> String {
    let mut label = format!("{} ({}", node.id, node.kind().as_str());
    if node.when.is_some() {
        label.push_str(", conditional");
    }
    if node.allow_failure {
        label.push_str(", allow_failure");
    }
    if node.access == rho_ipc::program::Access::ReadOnly {
        label.push_str(", read_only");
    }
    if node.network == rho_ipc::program::Network::None {
        label.push_str(", network none");
    }
    label.push(')');
    if let Some(state) = state {
        label.push_str(": ");
        label.push_str(state.as_str());
    }
    label
}

/// Fill colours of node states (shared by both formats).
fn state_colour(state: NodeState) -> &'static str {
    match state {
        NodeState::Pending | NodeState::Ready => "#eeeeee",
        NodeState::Running => "#cfe2ff",
        NodeState::Success => "#c8e6c9",
        NodeState::Failure | NodeState::Denial => "#ffcdd2",
        NodeState::Cancellation | NodeState::Blocked => "#ffe0b2",
        NodeState::Skipped => "#f5f5f5",
    }
}

const ALL_STATES: [NodeState; 9] = [
    NodeState::Pending,
    NodeState::Ready,
    NodeState::Running,
    NodeState::Success,
    NodeState::Failure,
    NodeState::Denial,
    NodeState::Cancellation,
    NodeState::Skipped,
    NodeState::Blocked,
];

/// A Mermaid flowchart (node ids are prefixed so names such as `end` are not keywords).
pub fn mermaid(program: &FrozenProgram) -> String {
    mermaid_with_states(program, None)
}

/// A Mermaid flowchart whose nodes also show (and are styled by) their run state.
pub fn mermaid_with_states(program: &FrozenProgram, states: Option<&NodeStates>) -> String {
    let mut out = String::from("flowchart TD\n");
    for node in &program.root.nodes {
        let state = states.and_then(|s| s.get(&node.id).copied());
        let _ = writeln!(out, "  n_{}[\"{}\"]", node.id, label(node, state));
    }
    for node in &program.root.nodes {
        for need in &node.needs {
            let _ = writeln!(out, "  n_{need} --> n_{}", node.id);
        }
    }
    if let Some(states) = states {
        for state in ALL_STATES {
            let members: Vec<String> = program
                .root
                .nodes
                .iter()
                .filter(|n| states.get(&n.id) == Some(&state))
                .map(|n| format!("n_{}", n.id))
                .collect();
            if !members.is_empty() {
                let _ = writeln!(
                    out,
                    "  classDef {state} fill:{}\n  class {} {state}",
                    state_colour(state),
                    members.join(",")
                );
            }
        }
    }
    out
}

/// A Graphviz digraph.
pub fn dot(program: &FrozenProgram) -> String {
    dot_with_states(program, None)
}

/// A Graphviz digraph whose nodes also show (and are filled by) their run state.
pub fn dot_with_states(program: &FrozenProgram, states: Option<&NodeStates>) -> String {
    let mut out = format!(
        "digraph \"{}\" {{\n  rankdir=LR;\n  node [shape=box];\n",
        program.name
    );
    for node in &program.root.nodes {
        let state = states.and_then(|s| s.get(&node.id).copied());
        match state {
            Some(state) => {
                let _ = writeln!(
                    out,
                    "  \"{}\" [label=\"{}\", style=filled, fillcolor=\"{}\"];",
                    node.id,
                    label(node, Some(state)),
                    state_colour(state)
                );
            }
            None => {
                let _ = writeln!(out, "  \"{}\" [label=\"{}\"];", node.id, label(node, None));
            }
        }
    }
    for node in &program.root.nodes {
        for need in &node.needs {
            let _ = writeln!(out, "  \"{need}\" -> \"{}\";", node.id);
        }
    }
    out.push_str("}\n");
    out
}
