//! The `rho` command: parse arguments, set up logging, run one subcommand and map its result
//! to a documented exit code (see `cli::exit`).

use std::process::ExitCode;

fn main() -> ExitCode {
    rho::cli::main()
}
