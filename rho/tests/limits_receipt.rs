//! The limits receipt (`limits/receipt.json`): the accepted value of every planning budget
//! and, for each worst-case workflow of `limits/corpus/*.star`, the budget it trips, the
//! measured figure and the exact error `rho workflow validate` prints.
//!
//! This test re-measures everything and fails when the receipt is stale. To accept new
//! figures, run it with `RHO_UPDATE_RECEIPT=1` and review the diff:
//!
//! ```sh
//! RHO_UPDATE_RECEIPT=1 cargo test -p rho --test limits_receipt
//! ```
//!
//! Corpus files may start with directives: `# receipt-budget: NAME=VALUE` (a `[budgets]`
//! override for that case) and `# receipt-modules: chain N | fan N | big BYTES` (modules
//! generated under `//limits/generated/`). Figures are what the budgets report, never
//! timings: the wall-time case records its limit and the error with the measured
//! milliseconds masked as `<ms>` (and without a location, which depends on who stopped it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod plan_support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plan_support::{Env, write_file};
use rho_ipc::budget::Budgets;
use serde_json::{Value, json};

fn limits_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../limits")
}

/// Parsed directives of one corpus file.
struct Case {
    name: String,
    text: String,
    budgets: BTreeMap<String, u64>,
    modules: Option<(String, u64)>,
}

fn parse_case(path: &Path) -> Case {
    let text = std::fs::read_to_string(path).unwrap();
    let mut budgets = BTreeMap::new();
    let mut modules = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# receipt-budget:") {
            let (name, value) = rest.trim().split_once('=').expect("NAME=VALUE");
            budgets.insert(name.trim().to_owned(), value.trim().parse().unwrap());
        } else if let Some(rest) = line.strip_prefix("# receipt-modules:") {
            let (kind, n) = rest.trim().split_once(' ').expect("KIND N");
            modules = Some((kind.to_owned(), n.trim().parse().unwrap()));
        }
    }
    let name = path.file_stem().unwrap().to_string_lossy().into_owned();
    Case {
        name,
        text,
        budgets,
        modules,
    }
}

/// Writes the generated modules of a case into the workspace.
fn generate_modules(ws: &Path, kind: &str, n: u64) {
    let dir = ws.join("limits/generated");
    match kind {
        "chain" => {
            for i in 0..n {
                let text = if i + 1 < n {
                    format!(
                        "load(\"//limits/generated/m{}.star\", w = \"v\")\nv = w + 1\n",
                        i + 1
                    )
                } else {
                    "v = 0\n".to_owned()
                };
                write_file(&dir.join(format!("m{i}.star")), &text);
            }
        }
        "fan" => {
            let mut hub = String::new();
            for i in 0..n {
                let _ = writeln!(hub, "load(\"//limits/generated/m{i}.star\", v{i} = \"v\")");
                write_file(&dir.join(format!("m{i}.star")), &format!("v = {i}\n"));
            }
            hub.push_str("v = 0\n");
            write_file(&dir.join("hub.star"), &hub);
        }
        "big" => {
            let mut text = String::from("v = 0\n");
            let len = usize::try_from(n).unwrap();
            while text.len() < len {
                text.push_str(
                    "# padding padding padding padding padding padding padding padding\n",
                );
            }
            text.truncate(len - 1);
            text.push('\n');
            write_file(&dir.join("big.star"), &text);
        }
        other => panic!("unknown receipt-modules kind `{other}`"),
    }
}

/// Runs one case and returns its receipt entry.
fn measure(case: &Case) -> Value {
    let env = Env::new();
    let file = format!("limits/corpus/{}.star", case.name);
    env.write(&file, &case.text);
    if let Some((kind, n)) = &case.modules {
        generate_modules(&env.ws, kind, *n);
    }
    if !case.budgets.is_empty() {
        let mut config = String::from("[budgets]\n");
        for (k, v) in &case.budgets {
            let _ = writeln!(config, "{k} = {v}");
        }
        env.config(&config);
    }
    let run = env.rho(&["workflow", "validate", &file]);
    let error = run
        .stderr
        .trim()
        .strip_prefix("error: ")
        .unwrap_or(run.stderr.trim())
        .to_owned();
    let (budget, limit, measured) = parse_overrun(&error).unwrap_or_else(|| {
        panic!(
            "case {}: no budget error (exit {}): {}",
            case.name, run.code, run.stderr
        )
    });
    let wall = budget == "planner_wall_ms";
    if wall {
        assert!(
            measured > limit,
            "wall time measured {measured} within the limit {limit}"
        );
    }
    json!({
        "case": case.name,
        "file": file,
        "config": case.budgets,
        "budget": budget,
        "limit": limit,
        "measured": if wall { Value::Null } else { json!(measured) },
        "exit_code": run.code,
        "error": if wall { mask_measured(&error) } else { error },
    })
}

/// `(budget, limit, measured)` from `planning budget NAME exceeded: accepted limit L,
/// requested or measured M`.
fn parse_overrun(text: &str) -> Option<(String, u64, u64)> {
    let rest = &text[text.find("planning budget ")? + "planning budget ".len()..];
    let (name, rest) = rest.split_once(" exceeded: accepted limit ")?;
    let (limit, rest) = rest.split_once(", requested or measured ")?;
    let measured: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((name.to_owned(), limit.parse().ok()?, measured.parse().ok()?))
}

/// The wall-time error without its timing: the measured milliseconds are masked, and so is
/// the location (the worker's own deadline, with a source span, and the host's watchdog,
/// without one, race to report it).
fn mask_measured(error: &str) -> String {
    let error = error
        .find("planning budget ")
        .map_or(error, |start| &error[start..]);
    let marker = "requested or measured ";
    let Some(pos) = error.find(marker) else {
        return error.to_owned();
    };
    let start = pos + marker.len();
    let digits = error[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .count();
    format!("{}<ms>{}", &error[..start], &error[start + digits..])
}

fn current_receipt() -> Value {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(limits_dir().join("corpus"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "star"))
        .collect();
    entries.sort();
    let cases: Vec<Case> = entries.iter().map(|p| parse_case(p)).collect();
    // Measure in parallel: each case is its own process with its own workspace.
    let corpus: Vec<Value> = std::thread::scope(|scope| {
        let handles: Vec<_> = cases
            .iter()
            .map(|c| scope.spawn(move || measure(c)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let defaults = Budgets::default();
    let budgets: serde_json::Map<String, Value> = Budgets::NAMES
        .iter()
        .map(|n| ((*n).to_owned(), json!(defaults.get(n).unwrap())))
        .collect();
    json!({
        "format": 1,
        "command": "RHO_UPDATE_RECEIPT=1 cargo test -p rho --test limits_receipt",
        "budgets": budgets,
        "corpus": corpus,
    })
}

#[test]
fn limits_receipt_is_current() {
    let measured = current_receipt();
    let path = limits_dir().join("receipt.json");
    let text = serde_json::to_string_pretty(&measured).unwrap() + "\n";
    if std::env::var("RHO_UPDATE_RECEIPT").as_deref() == Ok("1") {
        std::fs::write(&path, &text).unwrap();
        println!("updated {}", path.display());
        return;
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    let stored: Value = serde_json::from_str(&stored).unwrap_or(Value::Null);
    if stored != measured {
        let mut report = String::from("limits/receipt.json is stale:\n");
        let empty = Vec::new();
        let old = stored["corpus"].as_array().unwrap_or(&empty);
        for case in measured["corpus"].as_array().unwrap() {
            match old.iter().find(|o| o["case"] == case["case"]) {
                Some(o) if o == case => {}
                Some(o) => {
                    let _ = writeln!(
                        report,
                        "  {}: receipt {o}\n  {}: measured {case}",
                        case["case"], case["case"]
                    );
                }
                None => {
                    let _ = writeln!(report, "  {}: new case {case}", case["case"]);
                }
            }
        }
        if stored["budgets"] != measured["budgets"] {
            let _ = writeln!(
                report,
                "  accepted budget values changed: {}",
                measured["budgets"]
            );
        }
        let _ = writeln!(
            report,
            "re-measure with: RHO_UPDATE_RECEIPT=1 cargo test -p rho --test limits_receipt"
        );
        panic!("{report}");
    }
}

#[test]
fn every_corpus_case_exits_2_naming_a_budget() {
    let receipt: Value =
        serde_json::from_str(&std::fs::read_to_string(limits_dir().join("receipt.json")).unwrap())
            .unwrap();
    for case in receipt["corpus"].as_array().unwrap() {
        assert_eq!(case["exit_code"], 2, "{case}");
        assert!(
            case["error"].as_str().unwrap().contains("planning budget"),
            "{case}"
        );
        assert!(
            Budgets::NAMES.contains(&case["budget"].as_str().unwrap()),
            "{case}"
        );
    }
}
