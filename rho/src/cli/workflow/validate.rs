//! `rho workflow validate FILE`: plans the workflow exactly as `plan` does and reports the
//! result as text, JSON or GitHub Actions annotations, storing nothing.
//!
//! Invariant: validate never writes to the store; its verdict and diagnostics are those
//! `plan` would give for the same sources, inputs and machine.

use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use rho_ipc::message::Diagnostic;
use serde_json::json;

use super::{
    Context, InputArgs, diagnostic_json, json_text, node_count_text, parse_inputs, plan_error,
    plan_exit_code, print_out, warn,
};
use crate::cli::exit::{CliResult, ExitCode};

/// Output formats of `validate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ValidateOutput {
    /// Human-readable lines.
    Text,
    /// One JSON document.
    Json,
    /// GitHub Actions workflow commands (`::error file=...,line=...::`).
    Github,
}

/// Check a workflow file without storing anything.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The workflow file, or the name of a workflow in `.rho/workflows/`.
    #[arg(value_name = "FILE|NAME")]
    pub file: String,
    #[command(flatten)]
    pub inputs: InputArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: ValidateOutput,
    /// Same as `--output json`.
    #[arg(long, hide = true, conflicts_with = "output")]
    pub json: bool,
}

/// Runs `rho workflow validate`.
pub fn run_validate(args: &ValidateArgs) -> CliResult {
    let output = if args.json {
        ValidateOutput::Json
    } else {
        args.output
    };
    // Problems found before planning (a bad --input, an unknown workflow) still reach a JSON
    // consumer as a document and CI as an annotation.
    let prepared = parse_inputs(&args.inputs.inputs).and_then(|inputs| {
        let ctx = Context::from_env()?;
        let path = ctx.workflow_file(&args.file)?;
        Ok((ctx, path, inputs))
    });
    let (ctx, path, inputs) = match prepared {
        Ok(p) => p,
        Err(err) => {
            match output {
                ValidateOutput::Text => {}
                ValidateOutput::Json => print_out(&json_text(&json!({
                    "valid": false,
                    "warnings": [],
                    "diagnostics": [{ "code": "usage", "message": err.message }],
                })))?,
                ValidateOutput::Github => print_out(&format!(
                    "{}\n",
                    annotation(&Diagnostic::new("usage", err.message.clone()), &args.file)
                ))?,
            }
            return Err(err);
        }
    };
    let result = ctx.plan(&path, &inputs);
    let file = path.display().to_string();
    match (output, result) {
        (ValidateOutput::Text, Ok(planned)) => {
            warn(&planned.warnings());
            print_out(&format!(
                "ok: workflow `{}` is valid ({}, program_digest {})\n",
                planned.program.name,
                node_count_text(planned.program.root.nodes.len()),
                planned.program_digest
            ))?;
            Ok(ExitCode::Success)
        }
        (ValidateOutput::Text, Err(error)) => Err(plan_error(&error)),
        (ValidateOutput::Json, Ok(planned)) => {
            print_out(&json_text(&json!({
                "valid": true,
                "name": planned.program.name,
                "node_count": planned.program.root.nodes.len(),
                "program_digest": planned.program_digest,
                "graph_digest": planned.graph_digest,
                "sources": planned.program.sources,
                "warnings": planned.warnings(),
                "diagnostics": [],
            })))?;
            Ok(ExitCode::Success)
        }
        (ValidateOutput::Json, Err(error)) => {
            let diagnostics: Vec<_> = error.diagnostics().iter().map(diagnostic_json).collect();
            print_out(&json_text(&json!({
                "valid": false,
                "warnings": [],
                "diagnostics": diagnostics,
            })))?;
            Ok(plan_exit_code(&error))
        }
        (ValidateOutput::Github, Ok(planned)) => {
            let mut out = String::new();
            for w in planned.warnings() {
                let _ = writeln!(
                    out,
                    "::warning file={}::{}",
                    escape_property(&file),
                    escape_data(&w)
                );
            }
            let _ = writeln!(
                out,
                "::notice file={}::workflow `{}` is valid ({})",
                escape_property(&file),
                escape_data(&planned.program.name),
                node_count_text(planned.program.root.nodes.len())
            );
            print_out(&out)?;
            Ok(ExitCode::Success)
        }
        (ValidateOutput::Github, Err(error)) => {
            let mut out = String::new();
            for d in error.diagnostics() {
                out.push_str(&annotation(&d, &file));
                out.push('\n');
            }
            print_out(&out)?;
            Ok(plan_exit_code(&error))
        }
    }
}

/// One `::error` workflow command for a diagnostic; diagnostics without a location are
/// attached to the validated file.
pub fn annotation(d: &Diagnostic, fallback_file: &str) -> String {
    match &d.span {
        Some(span) => format!(
            "::error file={},line={},col={}::{}",
            escape_property(span.label.strip_prefix("//").unwrap_or(&span.label)),
            span.line,
            span.column,
            escape_data(&d.message)
        ),
        None => format!(
            "::error file={}::{}",
            escape_property(fallback_file),
            escape_data(&d.message)
        ),
    }
}

/// Escapes a workflow command message (GitHub's rules: `%`, CR, LF).
fn escape_data(text: &str) -> String {
    crate::terminal::escape_controls_keep_lines(text)
        .replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a workflow command property (also `:` and `,`).
fn escape_property(text: &str) -> String {
    let text = crate::terminal::escape_controls_keep_lines(text);
    escape_data(&text).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use rho_ipc::evaluated::SourceSpan;

    use super::*;

    #[test]
    fn annotations_carry_location_and_escape() {
        let d = Diagnostic::new("unknown_need", "node `a` needs unknown node `b`\n100%").at(Some(
            SourceSpan {
                label: "//.rho/w,x.star".into(),
                line: 3,
                column: 7,
            },
        ));
        assert_eq!(
            annotation(&d, "f.star"),
            "::error file=.rho/w%2Cx.star,line=3,col=7::node `a` needs unknown node `b`%0A100%25"
        );
        let d = Diagnostic::new("entry", "missing");
        assert_eq!(annotation(&d, "a.star"), "::error file=a.star::missing");
    }
}
