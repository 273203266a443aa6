//! `bash`: runs one foreground shell command in the workspace and returns its output.
//!
//! Invariant: the command runs only after its process-execution request was allowed, with
//! the host environment minus every credential `rho` keeps from child processes (its own
//! provider keys included), stdin closed, a wall-clock timeout and bounded output; on
//! timeout or cancellation its whole tree is killed, descendants that left the process
//! group included (see [`shell`]).

pub mod output;
pub mod shell;

use std::ffi::OsString;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use crate::confinement::ScratchConfinement;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, ToolPermission, parse_args};
use shell::{ShellEnd, ShellRequest, child_environment, run_shell};

const NAME: &str = "bash";

/// Timeout when the call gives none, in seconds.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 120;
/// The longest timeout a call may ask for, in seconds.
pub const MAX_TIMEOUT_SECONDS: u64 = 3_600;
/// Output bytes kept (head and tail) at most.
pub const MAX_OUTPUT_BYTES: usize = 32 * 1024;

/// The `bash` tool.
#[derive(Clone, Debug, Default)]
pub struct Bash {
    /// The environment commands inherit from (before credentials are removed); the
    /// process's own when `None`.
    host_env: Option<Vec<(OsString, OsString)>>,
    /// The kernel confinement every command runs under (a read-only agent).
    confinement: Option<Arc<ScratchConfinement>>,
}

impl Bash {
    /// A `bash` tool whose commands inherit from `vars` instead of the process environment
    /// (credentials are still removed).
    pub fn with_host_environment(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        Bash {
            host_env: Some(vars.into_iter().collect()),
            confinement: None,
        }
    }

    /// A `bash` tool whose commands run under `confinement` (writes only to its scratch
    /// directory, which is their `TMPDIR`), enforced by the kernel.
    pub fn confined(confinement: Arc<ScratchConfinement>) -> Self {
        Bash {
            host_env: None,
            confinement: Some(confinement),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    command: String,
    timeout_seconds: Option<u64>,
}

fn validate(args: &Args) -> Result<Duration, ToolError> {
    if args.command.trim().is_empty() {
        return Err(ToolError::invalid(NAME, "command", "the command is empty"));
    }
    if args.command.contains('\0') {
        return Err(ToolError::invalid(
            NAME,
            "command",
            "the command contains a NUL byte",
        ));
    }
    let seconds = args.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS);
    if seconds == 0 || seconds > MAX_TIMEOUT_SECONDS {
        return Err(ToolError::invalid(
            NAME,
            "timeout_seconds",
            format!("{seconds} is outside 1..={MAX_TIMEOUT_SECONDS}"),
        ));
    }
    Ok(Duration::from_secs(seconds))
}

impl Tool for Bash {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "Runs a bash command in the workspace root and returns its combined stdout and \
         stderr (long output keeps its start and end) and exit status. Stdin is closed. The \
         command and everything it starts are killed at `timeout_seconds` (default 120). Use \
         the process tool for servers and other long-running work."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The bash script to run."},
                "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_SECONDS, "description": "Wall-clock limit; default 120."}
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }

    fn capability(&self) -> &'static str {
        NAME
    }

    fn permission_requests(
        &self,
        args: &Value,
        _ctx: &ToolContext,
    ) -> Result<Vec<ToolPermission>, ToolError> {
        let args: Args = parse_args(NAME, args)?;
        validate(&args)?;
        Ok(vec![ToolPermission::new(
            rho_policy::OperationClass::Process,
            format!("run `{}`", args.command),
        )])
    }

    fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(NAME, &args)?;
        let timeout = validate(&args)?;
        let host_env = match &self.host_env {
            Some(vars) => vars.clone(),
            None => std::env::vars_os().collect(),
        };
        let mut env = child_environment(host_env, &ctx.config().environment.exclude);
        if let Some(confinement) = &self.confinement {
            env = confinement.environment(env);
        }
        let cancel = ctx.cancel().clone();
        let outcome = run_shell(
            &ShellRequest {
                command: &args.command,
                cwd: ctx.workspace(),
                env: &env,
                timeout,
                output_limit: MAX_OUTPUT_BYTES
                    .min(ctx.summary_limit().saturating_sub(256))
                    .max(1024),
                confinement: self
                    .confinement
                    .as_ref()
                    .map(|c| Arc::clone(c.confinement())),
            },
            &|| cancel.is_cancelled(),
        )
        .map_err(|e| {
            ToolError::failed(
                NAME,
                format!("cannot run `{SHELL}`: {e}", SHELL = shell::SHELL),
            )
        })?;
        let (status, exit_code) = match outcome.end {
            ShellEnd::Exited(code) => (format!("exit code {code}"), Some(code)),
            ShellEnd::Signaled(signal) => (format!("killed by signal {signal}"), None),
            ShellEnd::TimedOut => (
                format!(
                    "timed out after {}s; the command and its process group were killed",
                    timeout.as_secs()
                ),
                None,
            ),
            ShellEnd::Cancelled => {
                return Err(ToolError::Cancelled {
                    tool: NAME.to_owned(),
                });
            }
        };
        let mut summary = outcome.output.render();
        if !summary.is_empty() && !summary.ends_with('\n') {
            summary.push('\n');
        }
        if outcome.pipe_held {
            summary.push_str(
                "[a process that left the command's process group still holds its output; \
                 reading stopped]\n",
            );
        }
        let _ = writeln!(summary, "[{status}, {:.1}s]", outcome.elapsed.as_secs_f64());
        Ok(ToolOutput::new(
            summary,
            json!({
                "exit_code": exit_code,
                "status": match outcome.end {
                    ShellEnd::Exited(_) => "exited",
                    ShellEnd::Signaled(_) => "signaled",
                    ShellEnd::TimedOut => "timed_out",
                    ShellEnd::Cancelled => "cancelled",
                },
                "output_bytes": outcome.output.total(),
                "omitted_bytes": outcome.output.omitted(),
                "elapsed_ms": u64::try_from(outcome.elapsed.as_millis()).unwrap_or(u64::MAX),
            }),
        ))
    }
}
