//! The loopback model server as a process, for tests that need it outside their own
//! process (a real agent client pointed at it, a shell script).
//!
//! Usage: `rho-model-server SCRIPT.json [--record FILE] [--api-key KEY]`
//!
//! `SCRIPT.json` is a JSON list of replies in the format of
//! [`rho_e2e::model_server::Reply::from_json`]. The server prints its base URL
//! (`http://127.0.0.1:PORT`) as the first line of standard output and serves until its
//! standard input closes or it is killed. With `--record`, each request is appended to FILE
//! as a JSON line as it arrives.

use std::io::Read;
use std::process::ExitCode;

use rho_e2e::model_server::{ModelServer, ModelServerOptions, Reply};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut script_path = None;
    let mut options = ModelServerOptions::default();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--record" => options.record_to = args.next().map(Into::into),
            "--api-key" => options.required_api_key = args.next(),
            _ if script_path.is_none() => script_path = Some(arg),
            other => {
                eprintln!("rho-model-server: unexpected argument `{other}`");
                return ExitCode::from(2);
            }
        }
    }
    let Some(script_path) = script_path else {
        eprintln!("usage: rho-model-server SCRIPT.json [--record FILE] [--api-key KEY]");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(&script_path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("rho-model-server: cannot read {script_path}: {e}");
            return ExitCode::from(2);
        }
    };
    let parsed: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("rho-model-server: {script_path}: not JSON: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(list) = parsed.as_array() else {
        eprintln!("rho-model-server: {script_path}: the script must be a JSON list of replies");
        return ExitCode::from(2);
    };
    let mut replies = Vec::new();
    for (i, item) in list.iter().enumerate() {
        match Reply::from_json(item) {
            Ok(reply) => replies.push(reply),
            Err(e) => {
                eprintln!("rho-model-server: {script_path}: reply {i}: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let server = ModelServer::start_with(replies, options);
    println!("{}", server.base_url());
    // Serve until stdin closes (the parent went away) or a signal ends us.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(server);
    ExitCode::SUCCESS
}
