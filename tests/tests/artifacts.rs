//! Artifacts as a user sees them: empty streams leave no file and no dangling path, and a
//! `stdout_json` node that prints nothing fails with a JSON reason, not an I/O error.

use rho_e2e::{Sandbox, stderr, stdout};

const WORKFLOW: &str = r#"
def build(inputs):
    quiet = command(name = "quiet", argv = ["true"], timeout_seconds = 10, max_output_bytes = 64)
    silent_json = command(
        name = "silent-json",
        argv = ["true"],
        output = schema.stdout_json(schema.record({"ok": schema.bool()})),
        timeout_seconds = 10,
        max_output_bytes = 64,
    )
    return workflow(name = "artifacts", nodes = [quiet, silent_json])

WORKFLOW = define(inputs = {}, build = build)
"#;

#[test]
fn empty_streams_record_no_artifact_and_stdout_json_reports_invalid_json() {
    let sandbox = Sandbox::new();
    sandbox.write("wf.star", WORKFLOW);
    let out = sandbox.run(&["workflow", "run", "wf.star", "--yes"]);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(3),
        "stdout:\n{text}\nstderr:\n{}",
        stderr(&out)
    );
    let run_id = text
        .lines()
        .find_map(|l| l.strip_prefix("run_id: "))
        .expect("run id line")
        .to_owned();

    // Every artifact path that rho prints exists.
    for line in text.lines().filter(|l| l.contains(" bytes · digest ")) {
        let path = line.split_whitespace().nth(1).expect("path field");
        assert!(
            std::path::Path::new(path).is_file(),
            "dangling artifact path: {line}"
        );
    }

    let status = sandbox.run(&["workflow", "status", &run_id, "--output", "json"]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status json");
    let rendered = doc.to_string();
    assert!(!rendered.contains("No such file"), "{rendered}");
    let tasks = &doc["state"]["scopes"]["s0"]["tasks"];
    let quiet = &tasks["quiet"]["attempts"][0];
    assert_eq!(quiet["state"], "success", "unexpected status shape: {doc}");
    assert!(
        quiet["stdout"].is_null(),
        "empty stdout must record no artifact: {quiet}"
    );
    let failed = &tasks["silent-json"];
    assert_eq!(failed["state"], "failure", "{failed}");
    let reason = failed["reason"].as_str().expect("a failure reason");
    assert!(reason.contains("not valid JSON"), "{reason}");
}
