//! One verified sealed copy per frozen executable per run, through the real binary: every
//! launch of an executable in a run runs the copy verified at its first launch (one
//! verification, observed through the executor's debug event); a node cannot change the copy
//! the other launches run; a file changed on disk before its first launch is refused, and one
//! changed after it never runs in that run (the frozen digest is what runs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod run_support;

use std::os::unix::fs::PermissionsExt as _;

use run_support::{Env, code, node, text};
use sha2::{Digest as _, Sha256};

/// The executor's debug event for one verification of a frozen file.
const VERIFIED_EVENT: &str = "verified a frozen file and sealed a copy for this run";

fn workflow(nodes: &[String]) -> String {
    format!(
        "def build(inputs):\n    return workflow(name = \"sealed\", nodes = [{}])\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
        nodes.join(",\n        ")
    )
}

fn sha256_hex(bytes: &[u8]) -> String {
    let digest: [u8; 32] = Sha256::digest(bytes).into();
    rho_ipc::digest::hex(&digest)
}

impl Env {
    fn script(&self, rel: &str, body: &str) {
        self.write(rel, body);
        std::fs::set_permissions(self.ws.join(rel), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }

    /// Plans `wf.star` and runs it with the executor's debug events on stderr; returns the
    /// run's exit code, its output and the run id.
    fn run_logged(&self) -> (i32, String, String) {
        let plan_id = self.plan("wf.star");
        let before = self.run_ids();
        let out = self
            .command(&["workflow", "run", &plan_id, "--yes"])
            .env("RUST_LOG", "rho::workflow::exec=debug")
            .output()
            .unwrap();
        let id = self
            .run_ids()
            .difference(&before)
            .next()
            .expect("a run was created")
            .clone();
        (code(&out), text(&out), id)
    }

    fn stdout_of(&self, run: &str, node: &str) -> String {
        std::fs::read_to_string(
            self.run_dir(run)
                .join(format!("nodes/{node}/attempts/1/stdout")),
        )
        .unwrap_or_default()
    }
}

#[test]
fn every_launch_of_an_executable_in_a_run_uses_one_verification() {
    let env = Env::new();
    // Five nodes of `true` (two lanes may reach it at once) and two of `echo`.
    let mut nodes: Vec<String> = (0..5)
        .map(|i| node(&format!("t{i}"), "", "[\"true\"]"))
        .collect();
    nodes.push(node("e0", "", "[\"echo\", \"one\"]"));
    nodes.push(node("e1", ", needs = [\"e0\"]", "[\"echo\", \"two\"]"));
    env.write("wf.star", &workflow(&nodes));
    let (status, output, run) = env.run_logged();
    assert_eq!(status, 0, "{output}");
    let events: Vec<&str> = output
        .lines()
        .filter(|l| l.contains(VERIFIED_EVENT))
        .collect();
    assert_eq!(
        events.len(),
        2,
        "one verification per distinct executable, not per launch:\n{output}"
    );
    assert_eq!(
        events.iter().filter(|l| l.contains("/true")).count(),
        1,
        "{output}"
    );
    assert_eq!(
        events.iter().filter(|l| l.contains("/echo")).count(),
        1,
        "{output}"
    );
    assert_eq!(env.stdout_of(&run, "e1"), "two\n");
}

#[test]
fn a_node_cannot_change_the_sealed_copies_other_launches_run() {
    let env = Env::new();
    // Run with `attack`, the script tries to write into the sealed copy of its interpreter
    // (`/proc/$$/exe`) and of itself (`$0` is `/proc/self/fd/N`, the sealed script); run
    // with `check`, it prints the digests of what actually runs.
    let tool = "#!/bin/sh\n\
                if [ \"$1\" = attack ]; then\n\
                  if printf x >> /proc/$$/exe; then echo exe-written; else echo exe-refused; fi\n\
                  if printf x >> \"$0\"; then echo script-written; else echo script-refused; fi\n\
                  exit 0\n\
                fi\n\
                sha256sum < /proc/$$/exe\n\
                sha256sum < \"$0\"\n";
    env.script("bin/tool", tool);
    env.write(
        "wf.star",
        &workflow(&[
            node("attack", "", "[\"./bin/tool\", \"attack\"]"),
            node(
                "check",
                ", needs = [\"attack\"]",
                "[\"./bin/tool\", \"check\"]",
            ),
        ]),
    );
    let (status, output, run) = env.run_logged();
    assert_eq!(status, 0, "{output}");
    assert_eq!(
        env.stdout_of(&run, "attack"),
        "exe-refused\nscript-refused\n",
        "{output}"
    );
    // The later launch ran the same copies (verified once each), still holding the frozen
    // bytes: the shell the script names and the script itself.
    assert_eq!(
        output.matches(VERIFIED_EVENT).count(),
        2,
        "one verification for the script and one for its interpreter:\n{output}"
    );
    let sh = std::fs::read("/bin/sh").unwrap();
    assert_eq!(
        env.stdout_of(&run, "check"),
        format!(
            "{}  -\n{}  -\n",
            sha256_hex(&sh),
            sha256_hex(tool.as_bytes())
        ),
        "{output}"
    );
}

#[test]
fn a_changed_file_is_refused_before_its_first_launch_and_never_runs_after_it() {
    let env = Env::new();
    let original = "#!/bin/sh\necho original\n";
    let replaced = "#!/bin/sh\necho replaced\n";
    env.script("bin/tool", original);
    env.write(
        "wf.star",
        &workflow(&[
            node("first", "", "[\"./bin/tool\"]"),
            node(
                "rewrite",
                ", needs = [\"first\"]",
                &format!(
                    "[\"sh\", \"-c\", \"printf '{}' > bin/tool\"]",
                    replaced.replace('\n', "\\\\n")
                ),
            ),
            node("second", ", needs = [\"rewrite\"]", "[\"./bin/tool\"]"),
        ]),
    );

    // Changed between planning and the run: refused, naming the file and the digests.
    let plan_id = env.plan("wf.star");
    env.script("bin/tool", replaced);
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_eq!(code(&out), 3, "{}", text(&out));
    let run = env.run_ids().into_iter().next().unwrap();
    let status = env.rho(&["workflow", "status", &run, "--output", "json"]);
    let doc = String::from_utf8_lossy(&status.stdout);
    assert!(
        doc.contains("executable bin/tool changed: sha256 expected sha256:"),
        "{doc}"
    );
    assert_eq!(env.stdout_of(&run, "first"), "");

    // Changed by a node after its first launch in the run: the later launch runs the copy
    // verified at the first one, never the new content.
    env.script("bin/tool", original);
    let (status, output, run) = env.run_logged();
    assert_eq!(status, 0, "{output}");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("bin/tool")).unwrap(),
        replaced,
        "the node rewrote the file on disk"
    );
    assert_eq!(env.stdout_of(&run, "first"), "original\n");
    assert_eq!(env.stdout_of(&run, "second"), "original\n", "{output}");
}
