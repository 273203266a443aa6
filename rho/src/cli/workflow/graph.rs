//! `rho workflow graph PLAN_ID|FILE`: draws the frozen node graph as Mermaid or DOT, each
//! node labelled with its name and kind; edges run from a need to the node that needs it.
//!
//! Invariant: the drawing is a pure function of the frozen program (a stored plan, or a
//! workflow file planned without storing), in node-id order, so it is stable across runs.

use std::fmt::Write as _;
use std::path::Path;

use clap::{Args, ValueEnum};
use rho_ipc::program::FrozenProgram;

use super::{Context, InputArgs, parse_inputs, plan_error, print_out, store_error, warn};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::workflow::store::plans;

/// Drawing formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GraphFormat {
    /// A Mermaid flowchart.
    Mermaid,
    /// Graphviz DOT.
    Dot,
}

/// Draw a plan's (or a workflow file's) node graph.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// A plan id (or unique prefix), or a workflow file (`.star`).
    #[arg(value_name = "PLAN_ID|FILE")]
    pub target: String,
    #[command(flatten)]
    pub inputs: InputArgs,
    /// Drawing format.
    #[arg(long, value_enum, default_value = "mermaid")]
    pub format: GraphFormat,
}

/// Runs `rho workflow graph`.
pub fn run_graph(args: &GraphArgs) -> CliResult {
    let path = Path::new(&args.target);
    let is_file = path.extension().is_some_and(|e| e == "star") || path.is_file();
    let program = if is_file {
        let inputs = parse_inputs(&args.inputs.inputs)?;
        let ctx = Context::from_env()?;
        let planned = ctx.plan(path, inputs).map_err(|e| plan_error(&e))?;
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
        let id = plans::resolve(&home, &args.target).map_err(|e| store_error(&e))?;
        let stored = plans::load(&home, &id).map_err(|e| store_error(&e))?;
        warn(&crate::workflow::plan::sandbox_warnings(
            &stored.manifest.sandbox.mode,
            &stored
                .manifest
                .sandbox
                .missing
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        ));
        stored.program
    };
    let text = match args.format {
        GraphFormat::Mermaid => mermaid(&program),
        GraphFormat::Dot => dot(&program),
    };
    print_out(&text)?;
    Ok(ExitCode::Success)
}

fn label(node: &rho_ipc::program::Node) -> String {
    let mut label = format!("{} ({}", node.id, node.kind().as_str());
    if node.when.is_some() {
        label.push_str(", conditional");
    }
    if node.allow_failure {
        label.push_str(", allow_failure");
    }
    label.push(')');
    label
}

/// A Mermaid flowchart (node ids are prefixed so names such as `end` are not keywords).
pub fn mermaid(program: &FrozenProgram) -> String {
    let mut out = String::from("flowchart TD\n");
    for node in &program.root.nodes {
        let _ = writeln!(out, "  n_{}[\"{}\"]", node.id, label(node));
    }
    for node in &program.root.nodes {
        for need in &node.needs {
            let _ = writeln!(out, "  n_{need} --> n_{}", node.id);
        }
    }
    out
}

/// A Graphviz digraph.
pub fn dot(program: &FrozenProgram) -> String {
    let mut out = format!(
        "digraph \"{}\" {{\n  rankdir=LR;\n  node [shape=box];\n",
        program.name
    );
    for node in &program.root.nodes {
        let _ = writeln!(out, "  \"{}\" [label=\"{}\"];", node.id, label(node));
    }
    for node in &program.root.nodes {
        for need in &node.needs {
            let _ = writeln!(out, "  \"{need}\" -> \"{}\";", node.id);
        }
    }
    out.push_str("}\n");
    out
}
