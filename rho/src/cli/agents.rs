//! `rho agents`: list the catalog, validate definition files, print the frontmatter schema.
//!
//! Invariant: `list` shows exactly the catalog planning would use from this directory (same
//! sources, same trust decision), and `validate` uses the same parser as discovery. `list
//! --json` also shows, per agent, what binding it for a workflow node would grant and withhold.
//! Exit codes: a file that cannot be read is an I/O problem (1); a file that reads but breaks a
//! rule is invalid (2). `list` shows every usable agent even when some definition files are
//! broken, names each skipped file, and then exits 2.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use rho_policy::{CurrentTrust, TrustKind, TrustOverrides, TrustStore};
use serde_json::json;

use super::exit::{CliError, CliResult, ExitCode};
use crate::agents::binder::{WithheldTool, claude_tools, rho_capabilities};
use crate::agents::{
    AgentError, Catalog, CatalogEntry, CatalogSources, HostCapabilities, Invocation,
    ModelSelection, Reasoning, Runtime, ToolRequest, fingerprint, load_definition_file, schema,
};
use crate::paths::{self, RhoHome};
use crate::workflow::plan::agents::workflow_host_capabilities;

/// Inspect and validate agent definitions.
#[derive(Debug, Args)]
pub struct AgentsArgs {
    #[command(subcommand)]
    command: AgentsCommand,
}

#[derive(Debug, Subcommand)]
enum AgentsCommand {
    /// List the agent catalog: id, source, runtime, tools and fingerprint.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also load `<DIR>/agents/*.md`, as planning a workflow in DIR would.
        #[arg(long, value_name = "DIR")]
        workflow_dir: Option<PathBuf>,
    },
    /// Check definition files; prints `ok` or every problem as `file:line: key: message`.
    Validate {
        /// Definition files to check.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Print the JSON Schema of the definition frontmatter.
    Schema,
}

/// Runs `rho agents`.
pub fn run_agents(args: AgentsArgs) -> CliResult {
    match args.command {
        AgentsCommand::List { json, workflow_dir } => list(json, workflow_dir),
        AgentsCommand::Validate { files } => validate(&files),
        AgentsCommand::Schema => {
            let text = serde_json::to_string_pretty(&schema::frontmatter_schema())
                .map_err(|e| CliError::operational(format!("cannot render the schema: {e}")))?;
            print_out(&format!("{text}\n"))?;
            Ok(ExitCode::Success)
        }
    }
}

/// Whether project agent definitions of `workspace` may load: trusted in
/// `$RHO_HOME/trust.json`, or `RHO_TRUST_PROJECT_AGENTS=1` for this process.
pub fn project_agents_trusted(home: &RhoHome, workspace: &Path) -> Result<bool, CliError> {
    let file = home.root().join("trust.json");
    let store = match std::fs::read(&file) {
        Ok(bytes) => {
            TrustStore::from_json(&file, &bytes).map_err(|e| CliError::invalid(e.to_string()))?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => TrustStore::new(),
        Err(e) => {
            return Err(CliError::operational(format!(
                "cannot read {}: {e}",
                file.display()
            )));
        }
    };
    let overrides = TrustOverrides::from_env_values(
        std::env::var("RHO_TRUST_PROJECT_AGENTS").ok().as_deref(),
        std::env::var("RHO_TRUST_PROJECT_HOOKS").ok().as_deref(),
    );
    let current = CurrentTrust::resolve(&store, workspace.to_path_buf(), overrides);
    Ok(current.allows(TrustKind::ProjectAgents))
}

/// Whether an agent error is an I/O problem (a file or directory could not be read) rather
/// than an invalid definition.
fn is_io(err: &AgentError) -> bool {
    match err {
        AgentError::Read { .. } => true,
        AgentError::Catalog { errors } => errors.iter().all(is_io),
        _ => false,
    }
}

/// The exit code for an agent error: unreadable files are operational, the rest invalid.
fn agent_error(err: &AgentError) -> CliError {
    let code = if is_io(err) {
        ExitCode::Operational
    } else {
        ExitCode::Invalid
    };
    CliError::with_code(code, crate::workflow::plan::error_chain(err))
}

fn list(as_json: bool, workflow_dir: Option<PathBuf>) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let workspace = paths::current_workspace().map_err(|e| CliError::operational(e.to_string()))?;
    let trusted = project_agents_trusted(&home, &workspace)?;
    let mut sources = CatalogSources::new(&home, Some(workspace), trusted);
    if let Some(dir) = workflow_dir {
        sources = sources.with_workflow_dir(dir);
    }
    let catalog = Catalog::discover(&sources).map_err(|e| agent_error(&e))?;
    if let Some(dir) = catalog.ignored_project_dir() {
        tracing::warn!(
            "project agent definitions in {} are ignored: this workspace is not trusted (trust \
             it with `rho trust add`, or set RHO_TRUST_PROJECT_AGENTS=1 for one process)",
            dir.display()
        );
    }
    let text = if as_json {
        list_json(&catalog, &workflow_host_capabilities())?
    } else {
        list_table(&catalog)
    };
    print_out(&text)?;
    // Skipped definitions do not hide the rest of the catalog, but they are errors: each is
    // named, and the command fails so scripts notice.
    let problems = catalog.problems();
    if problems.is_empty() {
        return Ok(ExitCode::Success);
    }
    let lines: Vec<String> = problems
        .iter()
        .map(|p| match &p.id {
            Some(id) => format!(
                "skipped agent `{id}` ({} definitions): {}",
                p.level, p.message
            ),
            None => format!("skipped {} agent definitions: {}", p.level, p.message),
        })
        .collect();
    Err(CliError::invalid(format!(
        "{}\n{} definition problem(s); the other agents are listed and usable",
        lines.join("\n"),
        problems.len()
    )))
}

fn tools_column(entry: &CatalogEntry) -> String {
    match &entry.definition.tools {
        ToolRequest::AllHost => "all".to_owned(),
        tools if tools.names().is_empty() => "-".to_owned(),
        tools => tools.describe(),
    }
}

fn list_table(catalog: &Catalog) -> String {
    let rows: Vec<[String; 5]> = catalog
        .entries()
        .map(|e| {
            [
                e.id().to_owned(),
                e.level.as_str().to_owned(),
                e.definition.runtime.as_str().to_owned(),
                tools_column(e),
                e.fingerprint.clone(),
            ]
        })
        .collect();
    let header = ["ID", "SOURCE", "RUNTIME", "TOOLS", "FINGERPRINT"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// What binding `entry` for a workflow node grants from `host`: `tools` (the bound set),
/// `withheld` (listed but left out, with the reason) and `error` (why binding the tools
/// fails). claude-cli tool lists pass through, except nested `Task`, which stays disallowed.
fn workflow_binding(entry: &CatalogEntry, host: &HostCapabilities) -> serde_json::Value {
    let listed = |withheld: &[WithheldTool]| -> Vec<serde_json::Value> {
        withheld
            .iter()
            .map(|w| json!({"name": w.name, "reason": w.reason.as_str()}))
            .collect()
    };
    let def = &entry.definition;
    if def.runtime == Runtime::ClaudeCli {
        let (allowed, withheld) = claude_tools(def);
        return json!({"tools": allowed, "withheld": listed(&withheld), "error": null});
    }
    match rho_capabilities(def, host, Invocation::Delegated) {
        Ok(grant) => {
            json!({"tools": grant.granted, "withheld": listed(&grant.withheld), "error": null})
        }
        Err(e) => json!({"tools": null, "withheld": [], "error": e.to_string()}),
    }
}

fn list_json(catalog: &Catalog, host: &HostCapabilities) -> Result<String, CliError> {
    let agents: Vec<serde_json::Value> = catalog
        .entries()
        .map(|e| {
            let def = &e.definition;
            let (model, provider) = match &def.model {
                ModelSelection::Inherit => (None, None),
                ModelSelection::Pinned { model, provider, .. } => {
                    (Some(model.clone()), provider.clone())
                }
            };
            let tools = match &def.tools {
                ToolRequest::AllHost => json!("all"),
                other => json!(other.names()),
            };
            let overrides: Vec<_> = e
                .overrides
                .iter()
                .map(|(level, path)| {
                    json!({"source": level.as_str(), "path": path.as_ref().map(|p| p.display().to_string())})
                })
                .collect();
            json!({
                "id": def.id,
                "description": def.description,
                "source": e.level.as_str(),
                "path": e.path.as_ref().map(|p| p.display().to_string()),
                "runtime": def.runtime.as_str(),
                "prompt": def.prompt.as_str(),
                "model_policy": def.model.policy().as_str(),
                "model": model,
                "provider": provider,
                "reasoning": def.reasoning.map(Reasoning::as_str),
                "tools": tools,
                "inherit_claude_config": def.inherit_claude_config,
                "fingerprint": e.fingerprint,
                "overrides": overrides,
                "workflow_binding": workflow_binding(e, host),
            })
        })
        .collect();
    let problems: Vec<serde_json::Value> = catalog
        .problems()
        .iter()
        .map(|p| {
            json!({
                "id": p.id,
                "source": p.level.as_str(),
                "path": p.path.display().to_string(),
                "message": p.message,
            })
        })
        .collect();
    let doc = json!({
        "agents": agents,
        "problems": problems,
        "ignored_project_dir": catalog.ignored_project_dir().map(|p| p.display().to_string()),
    });
    serde_json::to_string_pretty(&doc)
        .map(|s| s + "\n")
        .map_err(|e| CliError::operational(format!("cannot render JSON: {e}")))
}

fn validate(files: &[PathBuf]) -> CliResult {
    let mut out = String::new();
    let mut failures = Vec::new();
    let (mut invalid, mut unreadable) = (0, 0);
    let host = workflow_host_capabilities();
    for file in files {
        let checked = load_definition_file(file)
            .and_then(|def| fingerprint(&def).map(|f| (def, f)))
            .and_then(|(def, fp)| binds(&def, &host).map(|()| (def, fp)));
        match checked {
            Ok((def, fp)) => {
                let _ = writeln!(
                    out,
                    "ok {} (id {}, runtime {}, {fp})",
                    file.display(),
                    def.id,
                    def.runtime
                );
            }
            Err(e) => {
                if is_io(&e) {
                    unreadable += 1;
                } else {
                    invalid += 1;
                }
                failures.push(crate::workflow::plan::error_chain(&e));
            }
        }
    }
    print_out(&out)?;
    if failures.is_empty() {
        return Ok(ExitCode::Success);
    }
    let mut summary = Vec::new();
    if invalid > 0 {
        summary.push(format!(
            "{invalid} of {} definition file(s) invalid",
            files.len()
        ));
    }
    if unreadable > 0 {
        summary.push(format!(
            "{unreadable} of {} definition file(s) unreadable",
            files.len()
        ));
    }
    // A file that could not be read leaves the check incomplete: that is an I/O problem (1),
    // and it wins over invalid files (2), whose problems are still all listed.
    let code = if unreadable > 0 {
        ExitCode::Operational
    } else {
        ExitCode::Invalid
    };
    Err(CliError::with_code(
        code,
        format!("{}\n{}", failures.join("\n"), summary.join(", ")),
    ))
}

/// Validation agrees with binding: a `rho` definition whose tool names the binder cannot bind
/// (not a Rho capability, alias or host extension) is invalid, with the binder's reason.
/// Tools the host withholds (`agent` for a delegated agent) are not errors here, as they are
/// not at binding.
fn binds(def: &crate::agents::AgentDefinition, host: &HostCapabilities) -> Result<(), AgentError> {
    if def.runtime == Runtime::ClaudeCli {
        return Ok(());
    }
    rho_capabilities(def, host, Invocation::Delegated).map(|_| ())
}

fn print_out(text: &str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| CliError::operational(format!("cannot write to stdout: {e}")))
}
