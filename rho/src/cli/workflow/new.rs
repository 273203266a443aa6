//! `rho workflow new NAME`: writes `.rho/workflows/NAME/workflow.star`, a commented starter
//! workflow that plans as it is, so a first run is one command away.
//!
//! Invariant: it never overwrites anything (the folder's entry file is created exclusively)
//! and writes only inside the workspace.

use std::io::Write as _;
use std::path::Path;

use clap::Args;
use serde_json::json;

use super::{DocumentOutputArgs, json_text, print_out};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::workflow::locate::{ENTRY_FILE, WORKFLOWS_DIR};
use crate::workflow::plan::checks::is_valid_name;

/// Write a commented starter workflow.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The workflow's name (1 to 63 of a-z, 0-9, `_`, `-`, starting with a letter).
    #[arg(value_name = "NAME")]
    pub name: String,
    #[command(flatten)]
    pub output: DocumentOutputArgs,
}

/// Runs `rho workflow new`.
pub fn run_new(args: &NewArgs) -> CliResult {
    if !is_valid_name(&args.name) {
        return Err(CliError::invalid(format!(
            "`{}` is not a valid workflow name (1 to 63 of a-z, 0-9, `_`, `-`, starting with a \
             letter)",
            args.name
        )));
    }
    let located = super::workspace()?;
    let rel = Path::new(WORKFLOWS_DIR).join(&args.name).join(ENTRY_FILE);
    let path = located.root.join(&rel);
    let dir = path.parent().unwrap_or(&located.root);
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::operational(format!("cannot create {}: {e}", dir.display())))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                CliError::invalid(format!(
                    "{} already exists; nothing was written",
                    rel.display()
                ))
            } else {
                CliError::operational(format!("cannot create {}: {e}", path.display()))
            }
        })?;
    file.write_all(starter(&args.name).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| CliError::operational(format!("cannot write {}: {e}", path.display())))?;
    let text = if args.output.is_json() {
        json_text(&json!({ "name": args.name, "path": rel }))
    } else {
        format!(
            "wrote {}\nvalidate: rho workflow validate {name}\nrun:      rho workflow run {name}\n",
            rel.display(),
            name = args.name
        )
    };
    print_out(&text)?;
    Ok(ExitCode::Success)
}

/// The starter workflow: two command nodes, a dependency, an input, a condition and an
/// export, each explained.
pub fn starter(name: &str) -> String {
    format!(
        r#"# The `{name}` workflow. Validate it with `rho workflow validate {name}`, look at the
# frozen plan with `rho workflow plan {name}` and `rho workflow show PLAN_ID`, and run it with
# `rho workflow run {name}`. The language reference is docs/language.md in rho's repository.
#
# This file only describes work: Starlark runs while planning, never during a run, and has
# no access to files, processes, the network or the clock.

def build(inputs):
    # A command node runs one program with a fixed argv. `argv[0]` is looked up on PATH
    # when the plan is made, and the exact executable is frozen by digest.
    greet = command(
        name = "greet",
        argv = ["echo", "hello from {name}:", inputs["who"]],
        cwd = ".",                  # relative to the workspace root
        timeout_seconds = 60,       # required: no hidden defaults
        max_output_bytes = 65536,   # required: bytes kept per stream (head and tail)
    )

    # `needs` orders nodes; without `when`, a node runs only if every need succeeded.
    check = command(
        name = "check",
        needs = ["greet"],
        argv = ["true"],
        timeout_seconds = 60,
        max_output_bytes = 65536,
        # Runs only when `greet` exited with code 0 (conditions read typed state only).
        when = condition.equals(exit_code("greet"), 0),
    )

    return workflow(
        name = "{name}",
        nodes = [greet, check],
        # Exports are resolved when the run ends and shown by `rho workflow status`.
        exports = {{"greet_status": status("greet")}},
    )

# Inputs are given as `--input who=world`; without a default an input is required.
WORKFLOW = define(
    inputs = {{"who": input.string(default = "world")}},
    build = build,
)
"#
    )
}
