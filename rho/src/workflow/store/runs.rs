//! The run store: `$RHO_HOME/workflows/runs/<RUN_ID>/` with `manifest.json` (format 2),
//! `graph.json` and `program.cbor` copied from the plan, `events.jsonl` (the journal),
//! `state.json` (a snapshot of the journal), `mutation.lock` (held by the owner),
//! `cancel.json` (a pending cancellation request), `cancel-acknowledged-<REQUEST_ID>.json`
//! (its answer, published after the owner let go) and `nodes/<NODE>/attempts/<N>/` for
//! attempt records and artifacts.
//!
//! Invariant: a run directory appears under its id complete, with a durable journal whose
//! first record is `run_created`, or not at all; the program a run executes is always the
//! copy in the run, re-checked against the manifest's digest on every load, so deleting or
//! altering the plan cannot change a run. Storage knows nothing of who drives a run: taking
//! `mutation.lock` is offered here, deciding when to take it is the owner's business.

use std::fs::File;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag, openat};
use nix::sys::stat::{Mode, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use rho_ipc::digest::{graph_digest, program_digest_of_bytes};
use rho_ipc::program::{FrozenProgram, PROGRAM_FORMAT_VERSION};
use rho_policy::{PermissionMode, TrustRequirement};
use serde::{Deserialize, Serialize};

use super::StoreError;
use super::fs::{PrivateDir, TEMP_PREFIX, sync_files};
use super::ids::{is_id, new_id, resolve_prefix};
use super::plans::{GraphDocument, StoredPlan, WorkspaceIdentity, workflows_dir};
use crate::paths::RhoHome;
use crate::workflow::journal::encode_line;
use crate::workflow::state::{Event, EventKind, State, apply};

/// The run manifest format this build writes.
pub const RUN_MANIFEST_FORMAT: u32 = 2;

/// Largest document read back (manifest, graph, program, state).
const MAX_DOCUMENT_BYTES: u64 = 512 * 1024 * 1024;

/// The journal file name.
pub const EVENTS_FILE: &str = "events.jsonl";
/// The snapshot file name.
pub const STATE_FILE: &str = "state.json";
/// The owner's lock file name.
pub const LOCK_FILE: &str = "mutation.lock";
/// A pending cancellation request.
pub const CANCEL_FILE: &str = "cancel.json";
/// The name prefix of a published acknowledgement: `cancel-acknowledged-<REQUEST_ID>.json`.
const CANCEL_ACK_PREFIX: &str = "cancel-acknowledged-";

/// How consent to the digest was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConfirmationMethod {
    /// `--yes` on the command line.
    #[serde(rename = "--yes")]
    Yes,
    /// `y`/`yes` at the interactive prompt.
    #[serde(rename = "prompt")]
    Prompt,
    /// An explicit accept from the host of a tool call (an MCP client's elicitation, an
    /// interactive agent session's prompt).
    #[serde(rename = "host")]
    Host,
}

/// The consent a run was created under: one digest, one run, nothing more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Confirmation {
    /// The exact `program_digest` consented to.
    pub digest: String,
    /// How.
    pub method: ConfirmationMethod,
    /// RFC 3339 UTC time of consent.
    pub at: String,
}

/// The authority a run was created under, recorded so that resume can only narrow it:
/// the permission mode its nodes were authorized under, and the project trust it relied on
/// (the plan's, plus project hooks that were active).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunPolicy {
    /// The permission mode selected when the run was created.
    pub permission_mode: PermissionMode,
    /// The project trust the run relied on when it was created.
    pub trust: TrustRequirement,
}

/// `manifest.json` of a run (format 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunManifest {
    /// [`RUN_MANIFEST_FORMAT`].
    pub format: u32,
    /// The run id.
    pub run_id: String,
    /// The plan it was created from.
    pub plan_id: String,
    /// RFC 3339 UTC creation time.
    pub created_at: String,
    /// `program_digest` of `program.cbor`.
    pub program_digest: String,
    /// `graph_digest` of the program.
    pub graph_digest: String,
    /// The workspace it runs in.
    pub workspace: WorkspaceIdentity,
    /// The consent (to the digest only: it grants nothing else).
    pub confirmation: Confirmation,
    /// The mode and trust the run was created under; absent in runs made before they were
    /// recorded (such runs are not resumed, since nothing says how far they may go).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<RunPolicy>,
    /// The workflow name.
    pub name: String,
    /// Number of nodes.
    pub node_count: u64,
    /// How the planner worker was protected when the run's plan was made, copied from the
    /// plan so a degraded sandbox is still reported after the plan is deleted. Absent in
    /// runs created before it was copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<super::plans::SandboxRecord>,
}

/// A manifest as found on disk: this build's format, or the format-1 shape of Rho 1.47,
/// kept verbatim (listed, shown and deletable, never run).
#[allow(clippy::large_enum_variant, reason = "one manifest per command")]
#[derive(Debug, Clone, PartialEq)]
pub enum StoredManifest {
    /// Format 2.
    Current(RunManifest),
    /// `"schema_version": 1`, as written.
    Legacy(serde_json::Value),
}

impl StoredManifest {
    /// The run id it records.
    pub fn run_id(&self) -> String {
        match self {
            StoredManifest::Current(m) => m.run_id.clone(),
            StoredManifest::Legacy(v) => v["run_id"].as_str().unwrap_or_default().to_owned(),
        }
    }

    /// Creation time for sorting (RFC 3339 or the legacy nanoseconds as text).
    pub fn created_sort_key(&self) -> String {
        match self {
            StoredManifest::Current(m) => m.created_at.clone(),
            StoredManifest::Legacy(v) => super::plans::legacy_created_at(v),
        }
    }
}

/// The message every mutating command gives for a format-1 store entry.
pub fn legacy_refusal(run_id: &str) -> String {
    StoreError::Legacy {
        kind: "run",
        id: run_id.to_owned(),
    }
    .to_string()
}

/// Opens `$RHO_HOME/workflows/runs` (creating it when `create`).
pub fn runs_dir(home: &RhoHome, create: bool) -> Result<Option<PrivateDir>, StoreError> {
    let Some(workflows) = workflows_dir(home, create)? else {
        return Ok(None);
    };
    if create {
        Ok(Some(workflows.ensure_private_dir("runs")?))
    } else {
        workflows.open_private_dir("runs")
    }
}

/// Every stored run id, sorted.
pub fn run_ids(home: &RhoHome) -> Result<Vec<String>, StoreError> {
    let Some(runs) = runs_dir(home, false)? else {
        return Ok(Vec::new());
    };
    Ok(runs
        .list_entries()?
        .into_iter()
        .filter(|n| is_id(n))
        .collect())
}

/// Resolves a run id or unique prefix.
pub fn resolve(home: &RhoHome, prefix: &str) -> Result<String, StoreError> {
    let ids = run_ids(home)?;
    resolve_prefix("run", prefix, ids.iter().map(String::as_str))
}

/// Opens run `id` (a full id).
pub fn open(home: &RhoHome, id: &str) -> Result<RunDir, StoreError> {
    let unknown = || StoreError::UnknownId {
        kind: "run",
        prefix: id.to_owned(),
    };
    if !is_id(id) {
        return Err(unknown());
    }
    let runs = runs_dir(home, false)?.ok_or_else(unknown)?;
    let dir = runs.open_private_dir(id)?.ok_or_else(unknown)?;
    Ok(RunDir {
        dir,
        id: id.to_owned(),
        nodes: std::sync::OnceLock::new(),
    })
}

/// Manifests of every stored run, newest first.
pub fn list(home: &RhoHome) -> Result<Vec<StoredManifest>, StoreError> {
    let mut out = Vec::new();
    for id in run_ids(home)? {
        let run = open(home, &id)?;
        out.push(run.manifest()?);
    }
    out.sort_by(|a, b| {
        b.created_sort_key()
            .cmp(&a.created_sort_key())
            .then_with(|| a.run_id().cmp(&b.run_id()))
    });
    Ok(out)
}

/// Deletes run `id` unless another process holds its `mutation.lock` or `survivors` (asked
/// under the lock) names a process of the run that may still be alive. The lock is held
/// while the run is renamed out of sight, so no owner can start on a half-deleted run.
pub fn delete(
    home: &RhoHome,
    id: &str,
    survivors: impl FnOnce(&RunDir) -> Result<Vec<String>, String>,
) -> Result<(), DeleteError> {
    let run = open(home, id)?;
    let Some(lock) = run.try_lock()? else {
        return Err(DeleteError::Owned {
            run_id: id.to_owned(),
        });
    };
    let alive = survivors(&run).map_err(|reason| DeleteError::Unverifiable {
        run_id: id.to_owned(),
        reason,
    })?;
    if !alive.is_empty() {
        return Err(DeleteError::StillAlive {
            run_id: id.to_owned(),
            what: alive.join("; "),
        });
    }
    let runs = runs_dir(home, false)?.ok_or_else(|| StoreError::UnknownId {
        kind: "run",
        prefix: id.to_owned(),
    })?;
    let doomed = format!("{TEMP_PREFIX}delete-{id}");
    runs.rename_noreplace(id, &doomed)?;
    runs.sync()?;
    drop(lock);
    drop(run);
    runs.remove_tree(&doomed)?;
    runs.sync()?;
    Ok(())
}

/// Why a run could not be deleted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeleteError {
    /// Another process owns the run.
    #[error(
        "run {run_id} is owned by a running process (its mutation.lock is held); cancel it first"
    )]
    Owned {
        /// The run.
        run_id: String,
    },
    /// A process of an attempt that never finished may still be running (its owner died):
    /// deleting the run would hide it.
    #[error("cannot delete run {run_id}: {what} is still alive; stop it first")]
    StillAlive {
        /// The run.
        run_id: String,
        /// Which attempts and processes.
        what: String,
    },
    /// Whether a process of the run is still alive could not be established.
    #[error("cannot delete run {run_id}: cannot tell whether its processes are gone: {reason}")]
    Unverifiable {
        /// The run.
        run_id: String,
        /// Why.
        reason: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Creates a run from a verified plan: copies the program, writes the manifest, the journal
/// with its `run_created` record and the matching snapshot, all synced, then renames the
/// directory into place. Returns the open run and its first events.
pub fn create(
    home: &RhoHome,
    plan: &StoredPlan,
    workspace: WorkspaceIdentity,
    confirmation: Confirmation,
    policy: RunPolicy,
) -> Result<(RunDir, RunManifest, Vec<Event>), StoreError> {
    let runs = runs_dir(home, true)?
        .ok_or_else(|| StoreError::io("create", home.workflows(), std::io::ErrorKind::NotFound))?;
    let run_id = new_id();
    let manifest = RunManifest {
        format: RUN_MANIFEST_FORMAT,
        run_id: run_id.clone(),
        plan_id: plan.manifest.plan_id.clone(),
        created_at: super::timestamp_now(),
        program_digest: plan.program_digest.clone(),
        graph_digest: plan.manifest.graph_digest.clone(),
        workspace,
        confirmation,
        policy: Some(policy),
        sandbox: Some(plan.manifest.sandbox.clone()),
        name: plan.program.name.clone(),
        node_count: plan.program.root.nodes.len() as u64,
    };
    let created = Event {
        seq: 1,
        at_ms: crate::workflow::journal::now_ms(),
        kind: EventKind::RunCreated {
            run_id: run_id.clone(),
            program_digest: plan.program_digest.clone(),
            nodes: plan
                .program
                .root
                .nodes
                .iter()
                .map(|n| n.id.clone())
                .collect(),
        },
    };
    let mut state = State::empty();
    apply(&mut state, &created).map_err(|e| StoreError::Corrupt {
        path: runs.entry_path(&run_id),
        problem: e.to_string(),
    })?;

    let temp_name = format!("{TEMP_PREFIX}{run_id}");
    let temp = runs.create_private_dir(&temp_name)?;
    let result = write_run_files(&temp, plan, &manifest, &created, &state)
        .and_then(|()| runs.rename_noreplace(&temp_name, &run_id))
        .and_then(|()| runs.sync());
    if let Err(error) = result {
        let _ = runs.remove_tree(&temp_name);
        return Err(error);
    }
    drop(temp);
    let run = open(home, &run_id)?;
    Ok((run, manifest, vec![created]))
}

fn write_run_files(
    dir: &PrivateDir,
    plan: &StoredPlan,
    manifest: &RunManifest,
    created: &Event,
    state: &State,
) -> Result<(), StoreError> {
    let document = GraphDocument {
        program: plan.program.clone(),
        program_digest: plan.program_digest.clone(),
        graph_digest: plan.manifest.graph_digest.clone(),
    };
    let graph_json = json_bytes(&document, &dir.entry_path("graph.json"))?;
    let manifest_json = json_bytes(manifest, &dir.entry_path("manifest.json"))?;
    let state_json = json_bytes(state, &dir.entry_path(STATE_FILE))?;
    let line = encode_line(created).map_err(|e| StoreError::Corrupt {
        path: dir.entry_path(EVENTS_FILE),
        problem: format!("cannot encode run_created: {e}"),
    })?;
    dir.create_private_dir("nodes")?;
    let mut files: Vec<(PathBuf, File)> = vec![
        (
            dir.entry_path("program.cbor"),
            dir.create_file("program.cbor", &plan.program_bytes)?,
        ),
        (
            dir.entry_path("graph.json"),
            dir.create_file("graph.json", &graph_json)?,
        ),
        (
            dir.entry_path(EVENTS_FILE),
            dir.create_file(EVENTS_FILE, line.as_bytes())?,
        ),
        (
            dir.entry_path(STATE_FILE),
            dir.create_file(STATE_FILE, &state_json)?,
        ),
        (dir.entry_path(LOCK_FILE), dir.create_file(LOCK_FILE, b"")?),
        (
            dir.entry_path("manifest.json"),
            dir.create_file("manifest.json", &manifest_json)?,
        ),
    ];
    let fd = dir
        .fd()
        .try_clone_to_owned()
        .map_err(|e| StoreError::io("open", dir.path(), e))?;
    files.push((dir.path().to_owned(), File::from(fd)));
    sync_files(&files)
}

fn json_bytes<T: Serialize>(value: &T, path: &Path) -> Result<Vec<u8>, StoreError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| StoreError::Corrupt {
        path: path.to_owned(),
        problem: format!("cannot serialize: {e}"),
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// A pending cancellation request (`cancel.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// The request id `cancel` reports.
    pub request_id: String,
    /// RFC 3339 UTC time of the request.
    pub requested_at: String,
}

/// A published acknowledgement of a cancellation request
/// (`cancel-acknowledged-<REQUEST_ID>.json`): the owner stopped everything, stored the
/// outcomes, wrote the final state and released the run before writing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelAcknowledgement {
    /// The request acknowledged.
    pub request_id: String,
    /// Always `acknowledged`.
    pub state: String,
    /// RFC 3339 UTC time of the acknowledgement.
    pub acknowledged_at: String,
}

/// The acknowledgement file of a request id `cancel` issued (`None` for anything else, such
/// as the `signal-*` ids of SIGINT/SIGTERM, which nobody waits for).
fn cancel_ack_name(request_id: &str) -> Option<String> {
    is_id(request_id).then(|| format!("{CANCEL_ACK_PREFIX}{request_id}.json"))
}

/// The owner's exclusive hold on a run; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct OwnerLock {
    _lock: Flock<File>,
}

/// An open run directory.
#[derive(Debug)]
pub struct RunDir {
    dir: PrivateDir,
    id: String,
    /// `nodes/`, opened (and checked) by the first attempt that needs it and kept for the
    /// others.
    nodes: std::sync::OnceLock<PrivateDir>,
}

impl RunDir {
    /// The run id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The run directory's path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The checked directory.
    pub fn dir(&self) -> &PrivateDir {
        &self.dir
    }

    /// The journal's path.
    pub fn events_path(&self) -> PathBuf {
        self.dir.entry_path(EVENTS_FILE)
    }

    /// Reads the manifest (either format).
    pub fn manifest(&self) -> Result<StoredManifest, StoreError> {
        let path = self.dir.entry_path("manifest.json");
        let bytes = self.dir.read_private("manifest.json", MAX_DOCUMENT_BYTES)?;
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                path: path.clone(),
                problem: e.to_string(),
            })?;
        if super::plans::is_legacy_manifest(&value) {
            return Ok(StoredManifest::Legacy(value));
        }
        let manifest: RunManifest =
            serde_json::from_value(value).map_err(|e| StoreError::Corrupt {
                path: path.clone(),
                problem: e.to_string(),
            })?;
        if manifest.format != RUN_MANIFEST_FORMAT {
            return Err(StoreError::Corrupt {
                path,
                problem: format!(
                    "run manifest format {} is not supported (this build reads format {RUN_MANIFEST_FORMAT})",
                    manifest.format
                ),
            });
        }
        if manifest.run_id != self.id {
            return Err(StoreError::Corrupt {
                path,
                problem: format!(
                    "it names run {} but is stored as {}",
                    manifest.run_id, self.id
                ),
            });
        }
        Ok(StoredManifest::Current(manifest))
    }

    /// Loads the run's own copy of the program and checks it: the manifest's consent names
    /// its digest, `program.cbor` decodes strictly, hashes to that digest, has this build's
    /// format version and the manifest's graph digest; `graph.json` holds the same program
    /// and digests.
    pub fn load_program(&self, manifest: &RunManifest) -> Result<FrozenProgram, StoreError> {
        if manifest.confirmation.digest != manifest.program_digest {
            return Err(StoreError::Corrupt {
                path: self.dir.entry_path("manifest.json"),
                problem: format!(
                    "consent was given to {}, but the manifest names program {}",
                    manifest.confirmation.digest, manifest.program_digest
                ),
            });
        }
        let path = self.dir.entry_path("program.cbor");
        let bytes = self.dir.read_private("program.cbor", MAX_DOCUMENT_BYTES)?;
        let digest = program_digest_of_bytes(&bytes);
        if digest != manifest.program_digest {
            return Err(StoreError::Corrupt {
                path,
                problem: format!(
                    "its digest is {digest}, but the run was confirmed for {}",
                    manifest.program_digest
                ),
            });
        }
        let program: FrozenProgram =
            rho_ipc::canonical::from_canonical_bytes(&bytes).map_err(|e| StoreError::Corrupt {
                path: path.clone(),
                problem: e.to_string(),
            })?;
        if program.format_version != PROGRAM_FORMAT_VERSION {
            return Err(StoreError::Corrupt {
                path,
                problem: format!(
                    "program format {} is not supported (this build runs format {PROGRAM_FORMAT_VERSION})",
                    program.format_version
                ),
            });
        }
        let graph = graph_digest(&program).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            problem: e.to_string(),
        })?;
        if graph != manifest.graph_digest {
            return Err(StoreError::Corrupt {
                path,
                problem: format!(
                    "its graph digest is {graph}, the manifest records {}",
                    manifest.graph_digest
                ),
            });
        }
        let graph_path = self.dir.entry_path("graph.json");
        let graph_bytes = self.dir.read_private("graph.json", MAX_DOCUMENT_BYTES)?;
        let document: GraphDocument =
            serde_json::from_slice(&graph_bytes).map_err(|e| StoreError::Corrupt {
                path: graph_path.clone(),
                problem: e.to_string(),
            })?;
        if document.program != program
            || document.program_digest != digest
            || document.graph_digest != graph
        {
            return Err(StoreError::Corrupt {
                path: graph_path,
                problem: "it does not describe the run's program.cbor".to_owned(),
            });
        }
        Ok(program)
    }

    /// Reads `graph.json` as JSON (for `status`; not verified).
    pub fn graph_json(&self) -> Result<serde_json::Value, StoreError> {
        let path = self.dir.entry_path("graph.json");
        let bytes = self.dir.read_private("graph.json", MAX_DOCUMENT_BYTES)?;
        serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
            path,
            problem: e.to_string(),
        })
    }

    /// The snapshot's bytes as stored, when there is one.
    pub fn read_state_bytes(&self) -> Result<Option<Vec<u8>>, StoreError> {
        match self.dir.read_private(STATE_FILE, MAX_DOCUMENT_BYTES) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads the snapshot, when there is one.
    pub fn read_state(&self) -> Result<Option<State>, StoreError> {
        let path = self.dir.entry_path(STATE_FILE);
        let Some(bytes) = self.read_state_bytes()? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                path,
                problem: e.to_string(),
            })
    }

    /// Replaces the snapshot atomically and returns `sha256:<hex>` of the bytes written. The
    /// caller guarantees the journal is durable up to `state.last_event_sequence` (a
    /// snapshot is never ahead of the journal).
    pub fn write_state(&self, state: &State) -> Result<String, StoreError> {
        let bytes = serde_json::to_vec(state).map_err(|e| StoreError::Corrupt {
            path: self.dir.entry_path(STATE_FILE),
            problem: format!("cannot serialize: {e}"),
        })?;
        crate::workflow::crashpoint::reached("state:write");
        self.dir.write_atomic(STATE_FILE, &bytes)?;
        crate::workflow::crashpoint::reached("state:written");
        Ok(rho_ipc::digest::sha256_tagged(&bytes))
    }

    /// Takes `mutation.lock` without waiting; `None` when another process holds it.
    pub fn try_lock(&self) -> Result<Option<OwnerLock>, StoreError> {
        let path = self.dir.entry_path(LOCK_FILE);
        let fd = openat(
            self.dir.fd(),
            LOCK_FILE,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| match e {
            Errno::ELOOP => StoreError::Symlink { path: path.clone() },
            e => StoreError::io("open", &path, e),
        })?;
        let file = File::from(fd);
        let facts = crate::workflow::identity::FileFacts::of(file.as_fd())
            .map_err(|e| StoreError::io("inspect", &path, e))?;
        super::fs::check_private(&path, &facts)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(Some(OwnerLock { _lock: lock })),
            Err((_, Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, e)) => Err(StoreError::io("lock", &path, e)),
        }
    }

    /// `nodes/`, opened (creating it) once and kept.
    fn nodes(&self) -> Result<&PrivateDir, StoreError> {
        if let Some(nodes) = self.nodes.get() {
            return Ok(nodes);
        }
        let opened = self.dir.ensure_private_dir("nodes")?;
        Ok(self.nodes.get_or_init(|| opened))
    }

    fn check_node_name(&self, node: &str) -> Result<(), StoreError> {
        if node.is_empty() || node.starts_with('.') || node.contains('/') {
            return Err(StoreError::Corrupt {
                path: self.dir.entry_path("nodes"),
                problem: format!("node id `{node}` cannot name a directory"),
            });
        }
        Ok(())
    }

    /// Opens (creating) `nodes/<node>/attempts/<attempt>/`. The levels that exist already
    /// (made ahead by [`RunDir::prepare_node_dir`], or by an earlier attempt) are only
    /// opened and checked.
    pub fn attempt_dir(&self, node: &str, attempt: u32) -> Result<PrivateDir, StoreError> {
        self.check_node_name(node)?;
        let open_or_create =
            |parent: &PrivateDir, name: &str| match parent.open_private_dir(name)? {
                Some(dir) => Ok(dir),
                None => parent.ensure_private_dir(name),
            };
        let node_dir = open_or_create(self.nodes()?, node)?;
        open_or_create(
            &open_or_create(&node_dir, "attempts")?,
            &attempt.to_string(),
        )
    }

    /// Creates `nodes/<node>/attempts/1/` ahead of the node's first attempt, so the attempt
    /// finds its directory made (until it starts, an attempt directory without
    /// `status.json` is one that has not ended, as for a running attempt). Returns whether
    /// this call created `nodes/<node>/` (see [`RunDir::remove_unused_node_dir`]) and the
    /// open `attempts/1/`, which its attempt may use as [`RunDir::attempt_dir`] would
    /// return it.
    pub fn prepare_node_dir(&self, node: &str) -> Result<(bool, PrivateDir), StoreError> {
        self.check_node_name(node)?;
        let nodes = self.nodes()?;
        let created = match mkdirat(nodes.fd(), node, Mode::from_bits_truncate(0o700)) {
            Ok(()) => true,
            Err(Errno::EEXIST) => false,
            Err(e) => return Err(StoreError::io("create", nodes.entry_path(node), e)),
        };
        let first = nodes
            .open_private_dir(node)?
            .ok_or_else(|| StoreError::io("open", nodes.entry_path(node), Errno::ENOENT))?
            .ensure_private_dir("attempts")?
            .ensure_private_dir("1")?;
        Ok((created, first))
    }

    /// Removes `nodes/<node>/` when all it holds is an empty `attempts/` with at most an
    /// empty `1/` (made ahead for a node that never started). Only empty directories are
    /// removed, so anything an attempt left stays.
    pub fn remove_unused_node_dir(&self, node: &str) -> Result<(), StoreError> {
        self.check_node_name(node)?;
        let nodes = self.nodes()?;
        let Some(node_dir) = nodes.open_private_dir(node)? else {
            return Ok(());
        };
        let remove =
            |dir: &PrivateDir, name: &str| match unlinkat(dir.fd(), name, UnlinkatFlags::RemoveDir)
            {
                Ok(()) | Err(Errno::ENOENT) => Ok(true),
                Err(Errno::ENOTEMPTY | Errno::EEXIST) => Ok(false),
                Err(e) => Err(StoreError::io("remove", dir.entry_path(name), e)),
            };
        if let Some(attempts) = node_dir.open_private_dir("attempts")?
            && !remove(&attempts, "1")?
        {
            return Ok(());
        }
        if remove(&node_dir, "attempts")? {
            remove(nodes, node)?;
        }
        Ok(())
    }

    /// Reads the file `name` of an attempt directory (at most `limit` bytes) with the
    /// store's checks; `None` when the directory or the file does not exist.
    pub fn read_attempt_file(
        &self,
        node: &str,
        attempt: u32,
        name: &str,
        limit: u64,
    ) -> Result<Option<(Vec<u8>, PathBuf)>, StoreError> {
        if node.is_empty() || node.starts_with('.') || node.contains('/') {
            return Ok(None);
        }
        let Some(mut dir) = self.dir.open_private_dir("nodes")? else {
            return Ok(None);
        };
        for part in [node, "attempts", &attempt.to_string()] {
            dir = match dir.open_private_dir(part)? {
                Some(d) => d,
                None => return Ok(None),
            };
        }
        match dir.read_private(name, limit) {
            Ok(bytes) => Ok(Some((bytes, dir.entry_path(name)))),
            Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The run-relative path of a file in an attempt directory.
    pub fn attempt_relative(node: &str, attempt: u32, file: &str) -> String {
        format!("nodes/{node}/attempts/{attempt}/{file}")
    }

    /// The pending cancellation request, if any.
    pub fn read_cancel_request(&self) -> Result<Option<CancelRequest>, StoreError> {
        let path = self.dir.entry_path(CANCEL_FILE);
        match self.dir.read_private(CANCEL_FILE, 64 * 1024) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| StoreError::Corrupt {
                        path,
                        problem: e.to_string(),
                    })
            }
            Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether a cancellation request file exists (cheap: one `fstatat`).
    pub fn has_cancel_request(&self) -> bool {
        nix::sys::stat::fstatat(
            self.dir.fd(),
            CANCEL_FILE,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .is_ok()
    }

    /// Writes a cancellation request atomically.
    pub fn write_cancel_request(&self, request: &CancelRequest) -> Result<(), StoreError> {
        let bytes = json_bytes(request, &self.dir.entry_path(CANCEL_FILE))?;
        self.dir.write_atomic(CANCEL_FILE, &bytes)
    }

    /// Publishes the acknowledgement of `request_id` (atomically, 0600). Called only after
    /// the owner released `mutation.lock`, so whoever sees it can take the run at once. One
    /// file per request: a late writer can never overwrite a newer request or its answer.
    pub fn publish_cancel_acknowledgement(&self, request_id: &str) -> Result<(), StoreError> {
        let name = cancel_ack_name(request_id).ok_or_else(|| StoreError::Corrupt {
            path: self.dir.entry_path(CANCEL_FILE),
            problem: format!("request id `{request_id}` is not an id this store issues"),
        })?;
        let ack = CancelAcknowledgement {
            request_id: request_id.to_owned(),
            state: "acknowledged".to_owned(),
            acknowledged_at: super::timestamp_now(),
        };
        let bytes = json_bytes(&ack, &self.dir.entry_path(&name))?;
        self.dir.write_atomic(&name, &bytes)
    }

    /// The published acknowledgement of `request_id`, if there is one.
    pub fn read_cancel_acknowledgement(
        &self,
        request_id: &str,
    ) -> Result<Option<CancelAcknowledgement>, StoreError> {
        let Some(name) = cancel_ack_name(request_id) else {
            return Ok(None);
        };
        let path = self.dir.entry_path(&name);
        match self.dir.read_private(&name, 64 * 1024) {
            Ok(bytes) => {
                let ack: CancelAcknowledgement =
                    serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                        path: path.clone(),
                        problem: e.to_string(),
                    })?;
                if ack.request_id != request_id || ack.state != "acknowledged" {
                    return Err(StoreError::Corrupt {
                        path,
                        problem: format!("it does not acknowledge request {request_id}"),
                    });
                }
                Ok(Some(ack))
            }
            Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Removes a handled cancellation request.
    pub fn remove_cancel_request(&self) -> Result<(), StoreError> {
        match nix::unistd::unlinkat(
            self.dir.fd(),
            CANCEL_FILE,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) | Err(Errno::ENOENT) => self.dir.sync(),
            Err(e) => Err(StoreError::io(
                "remove",
                self.dir.entry_path(CANCEL_FILE),
                e,
            )),
        }
    }
}
