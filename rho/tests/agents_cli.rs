//! End-to-end: `rho agents schema|validate|list` run as the built binary in a cleared
//! environment with temporary HOME, RHO_HOME and workspace.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Env {
    _root: tempfile::TempDir,
    home: PathBuf,
    rho_home: PathBuf,
    workspace: PathBuf,
}

impl Env {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let env = Self {
            home: base.join("home"),
            rho_home: base.join("rho-home"),
            workspace: base.join("ws"),
            _root: root,
        };
        for dir in [&env.home, &env.rho_home, &env.workspace] {
            fs::create_dir_all(dir).unwrap();
        }
        env
    }

    fn rho(&self, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rho"));
        cmd.args(args)
            .env_clear()
            .env("HOME", &self.home)
            .env("RHO_HOME", &self.rho_home)
            .current_dir(&self.workspace);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[test]
fn schema_prints_the_frontmatter_schema() {
    let env = Env::new();
    let out = env.rho(&["agents", "schema"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    let printed: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed, rho::agents::schema::frontmatter_schema());
    assert_eq!(
        printed["$id"],
        "https://rho.dev/schemas/agent-definition-frontmatter.json"
    );
    assert_eq!(
        printed["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
}

#[test]
fn validate_reports_each_file() {
    let env = Env::new();
    let good = write(
        &env.workspace,
        "good.md",
        "---\ndescription: fine\ntools: [grep]\n---\nB\n",
    );
    let bad = write(
        &env.workspace,
        "bad.md",
        "---\ndescription: d\nruntime: claude-cli\nprovider: anthropic\ntools: all\n---\n",
    );

    let out = env.rho(&["agents", "validate", "good.md"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("ok good.md (id good, runtime rho, sha256:"),
        "{text}"
    );
    assert_eq!(stderr(&out), "");

    let out = env.rho(
        &[
            "agents",
            "validate",
            good.to_str().unwrap(),
            bad.to_str().unwrap(),
            "missing.md",
        ],
        &[],
    );
    // An unreadable file leaves the check incomplete: operational (1) wins over invalid (2).
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with(&format!("ok {} ", good.display())));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert!(
        lines[0].starts_with(&format!("error: {}:4: provider: ", bad.display())),
        "{err}"
    );
    assert!(
        lines[1].starts_with(&format!("{}:5: tools: ", bad.display())),
        "{err}"
    );
    assert!(lines[2].starts_with("cannot read missing.md"), "{err}");
    assert_eq!(
        lines[3],
        "1 of 3 definition file(s) invalid, 1 of 3 definition file(s) unreadable"
    );
}

#[test]
fn validate_exit_codes_separate_io_from_invalid() {
    let env = Env::new();
    // A missing file is an I/O problem: exit 1.
    let out = env.rho(&["agents", "validate", "nonexist.md"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert!(err.starts_with("error: cannot read nonexist.md: "), "{err}");
    assert!(
        err.ends_with("1 of 1 definition file(s) unreadable\n"),
        "{err}"
    );
    // An unreadable one too.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let locked = write(&env.workspace, "locked.md", "---\ndescription: d\n---\n");
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
        // Root reads through permissions; only check when the file really is unreadable.
        if fs::read(&locked).is_err() {
            let out = env.rho(&["agents", "validate", "locked.md"], &[]);
            assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
            assert!(stderr(&out).contains("cannot read locked.md"));
        }
    }
    // A file that reads but breaks a rule is invalid: exit 2, every problem listed.
    write(
        &env.workspace,
        "bad.md",
        "---\ndescription:\nreasoning: [low]\ncolour: red\n---\n",
    );
    let out = env.rho(&["agents", "validate", "bad.md"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert!(
        lines[0].starts_with("error: bad.md:2: description: missing value"),
        "{err}"
    );
    assert!(lines[0].contains("1-1024 characters"), "{err}");
    assert!(lines[1].starts_with("bad.md:3: reasoning: "), "{err}");
    assert!(lines[1].contains("allowed: off | minimal | low"), "{err}");
    assert!(
        lines[2].starts_with("bad.md:4: colour: unknown key"),
        "{err}"
    );
    assert_eq!(lines[3], "1 of 1 definition file(s) invalid");
}

#[test]
fn validate_needs_a_file() {
    let env = Env::new();
    let out = env.rho(&["agents", "validate"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("FILE"), "{}", stderr(&out));
}

#[test]
fn list_shows_builtins_and_user_definitions() {
    let env = Env::new();
    write(
        &env.rho_home.join("agents"),
        "planner.md",
        "---\ndescription: p\nruntime: claude-cli\ntools: [Read, \"Bash(git *)\"]\n---\n",
    );
    write(
        &env.home.join(".agents/agents"),
        "explorer.md",
        "---\ndescription: mine\n---\n",
    );
    let out = env.rho(&["agents", "list"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .collect();
    assert_eq!(rows[0], ["ID", "SOURCE", "RUNTIME", "TOOLS", "FINGERPRINT"]);
    let ids: Vec<&str> = rows[1..].iter().map(|r| r[0]).collect();
    assert_eq!(
        ids,
        ["default", "explorer", "planner", "reviewer", "worker"]
    );
    assert_eq!(&rows[1][..4], ["default", "builtin", "rho", "all"]);
    assert_eq!(&rows[2][..4], ["explorer", "user", "rho", "all"]);
    assert_eq!(
        &rows[3][..4],
        ["planner", "rho-home", "claude-cli", "Read,Bash(git"]
    );
    assert_eq!(
        &rows[4][..4],
        ["reviewer", "builtin", "rho", "read_file,list_dir,glob,grep"]
    );
    for row in &rows[1..] {
        let fp = row.last().unwrap();
        assert!(fp.starts_with("sha256:") && fp.len() == 71, "{row:?}");
    }
    assert_eq!(stderr(&out), "");
}

#[test]
fn list_json_and_project_trust() {
    let env = Env::new();
    write(
        &env.workspace.join(".agents/agents"),
        "proj.md",
        "---\ndescription: project one\n---\n",
    );

    let out = env.rho(&["agents", "list", "--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let ids: Vec<&str> = doc["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["default", "explorer", "reviewer", "worker"]);
    let ignored = env.workspace.join(".agents/agents");
    assert_eq!(doc["ignored_project_dir"], ignored.display().to_string());
    assert!(stderr(&out).contains("not trusted"), "{}", stderr(&out));

    // One-process trust.
    let out = env.rho(
        &["agents", "list", "--json"],
        &[("RHO_TRUST_PROJECT_AGENTS", "1")],
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let proj = doc["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "proj")
        .unwrap();
    assert_eq!(proj["source"], "project");
    assert_eq!(proj["path"], ignored.join("proj.md").display().to_string());
    assert_eq!(proj["tools"], "all");
    assert_eq!(proj["runtime"], "rho");
    assert_eq!(doc["ignored_project_dir"], serde_json::Value::Null);

    // Only exactly `1` trusts.
    let out = env.rho(
        &["agents", "list", "--json"],
        &[("RHO_TRUST_PROJECT_AGENTS", "true")],
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        doc["agents"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["id"] != "proj")
    );

    // Trust recorded in $RHO_HOME/trust.json.
    let mut store = rho_policy::TrustStore::new();
    store.add(env.workspace.clone()).unwrap();
    fs::write(env.rho_home.join("trust.json"), store.to_json()).unwrap();
    let out = env.rho(&["agents", "list", "--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        doc["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == "proj")
    );
}

#[test]
fn list_workflow_dir_takes_precedence() {
    let env = Env::new();
    let wf = env.workspace.join("flows/check");
    write(
        &wf.join("agents"),
        "reviewer.md",
        "---\ndescription: strict\nreasoning: max\n---\nBe strict.\n",
    );
    let out = env.rho(
        &[
            "agents",
            "list",
            "--json",
            "--workflow-dir",
            wf.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let reviewer = doc["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "reviewer")
        .unwrap();
    assert_eq!(reviewer["source"], "workflow");
    assert_eq!(reviewer["reasoning"], "max");
    assert_eq!(reviewer["overrides"][0]["source"], "builtin");
}

#[test]
fn list_json_shows_what_a_workflow_binding_withholds() {
    let env = Env::new();
    let other_shell = if cfg!(windows) { "bash" } else { "powershell" };
    write(
        &env.rho_home.join("agents"),
        "narrow.md",
        &format!("---\ndescription: n\ntools: [read_file, {other_shell}, agent]\n---\n"),
    );
    write(
        &env.rho_home.join("agents"),
        "ext.md",
        "---\ndescription: e\ntools: [read_file, my_ext]\n---\n",
    );
    write(
        &env.rho_home.join("agents"),
        "planner.md",
        "---\ndescription: p\nruntime: claude-cli\ntools: [Read, \"Bash()\", Task]\n---\n",
    );
    let out = env.rho(&["agents", "list", "--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let agent = |id: &str| {
        doc["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(
        agent("narrow")["workflow_binding"],
        serde_json::json!({
            "tools": ["read_file"],
            "withheld": [
                {"name": other_shell, "reason": "not-supplied"},
                {"name": "agent", "reason": "delegation"},
            ],
            "error": null,
        })
    );
    let ext = agent("ext")["workflow_binding"].clone();
    assert_eq!(ext["tools"], serde_json::Value::Null);
    assert!(
        ext["error"]
            .as_str()
            .unwrap()
            .contains("unknown tools my_ext"),
        "{ext}"
    );
    assert_eq!(
        agent("planner")["workflow_binding"],
        serde_json::json!({
            "tools": ["Read", "Bash()"],
            "withheld": [{"name": "Task", "reason": "delegation"}],
            "error": null,
        })
    );
    let explorer = agent("explorer")["workflow_binding"].clone();
    assert_eq!(
        explorer["tools"],
        serde_json::json!(["glob", "grep", "list_dir", "read_file"])
    );
    assert_eq!(explorer["withheld"], serde_json::json!([]));
    // `tools: all` gets the host set without delegation.
    let default = agent("default")["workflow_binding"]["tools"].clone();
    assert!(
        default
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t != "agent" && t != "agents"),
        "{default}"
    );
}

#[test]
fn list_names_an_invalid_definition_and_still_lists_the_rest() {
    let env = Env::new();
    let bad = write(
        &env.rho_home.join("agents"),
        "oops.md",
        "---\ndescription: d\ntools: [Read]\n---\n",
    );
    let out = env.rho(&["agents", "list"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).contains("default"), "{}", stdout(&out));
    assert!(!stdout(&out).contains("oops"), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "skipped agent `oops` (rho-home definitions): {}:3: tools: ",
            bad.display()
        )),
        "{err}"
    );
}
