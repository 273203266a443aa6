//! The plan store: `$RHO_HOME/workflows/plans/<PLAN_ID>/` with `manifest.json` (format 2),
//! `graph.json` (the program as JSON for inspection, with both digests), `program.cbor` (the
//! canonical bytes `program_digest` covers) and `sources/<digest-hex>.star`.
//!
//! Plans whose manifest has `"schema_version": 1` (written by Rho 1.47) are kept verbatim:
//! listed and deletable, never loaded for running ([`StoreError::Legacy`]).
//!
//! Invariant: a plan directory appears under its id complete or not at all (it is written
//! under a temporary name, synced, then renamed into place), and a loaded plan is returned
//! only when `program.cbor` still hashes to the digest its manifest records and `graph.json`
//! describes that same program.

use std::fs::File;
use std::path::PathBuf;

use rho_ipc::digest::{graph_digest, program_digest_of_bytes};
use rho_ipc::message::{ProtectionStatus, SandboxMode};
use rho_ipc::program::{FrozenProgram, SourceEntry};
use serde::{Deserialize, Serialize};

use super::StoreError;
use super::fs::{PrivateDir, TEMP_PREFIX, sync_files};
use super::ids::{is_id, new_id, resolve_prefix};
use crate::paths::RhoHome;

/// The manifest format this build writes and reads.
pub const MANIFEST_FORMAT: u32 = 2;

/// Largest `manifest.json` or `graph.json` read back.
const MAX_DOCUMENT_BYTES: u64 = 512 * 1024 * 1024;

/// The workspace a plan was made in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceIdentity {
    /// Device and inode of each node's working directory (by its workspace-relative path)
    /// when it was planned, checked at every launch. Kept here, not in the program, so the
    /// program digest stays the same for a copy of the workspace.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub directories: std::collections::BTreeMap<String, DirectoryIdentity>,
    /// Canonical absolute path.
    pub path: String,
    /// `st_dev` of the workspace directory.
    pub device: u64,
    /// `st_ino` of the workspace directory.
    pub inode: u64,
}

/// A directory's device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectoryIdentity {
    /// `st_dev`.
    pub device: u64,
    /// `st_ino`.
    pub inode: u64,
}

impl WorkspaceIdentity {
    /// The same workspace directory (path, device, inode), whatever was recorded inside.
    pub fn same_directory(&self, other: &Self) -> bool {
        (&self.path, self.device, self.inode) == (&other.path, other.device, other.inode)
    }
}

/// How the planner worker was protected while it evaluated the sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxRecord {
    /// `required` or `best-effort`.
    pub mode: SandboxMode,
    /// Protections that were not applied (empty for a fully hardened worker).
    pub missing: Vec<String>,
    /// Every protection as the worker reported it.
    pub protections: Vec<ProtectionStatus>,
}

/// `manifest.json` of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanManifest {
    /// [`MANIFEST_FORMAT`].
    pub format: u32,
    /// The plan id.
    pub plan_id: String,
    /// RFC 3339 UTC creation time.
    pub created_at: String,
    /// `program_digest` of `program.cbor`.
    pub program_digest: String,
    /// `graph_digest` of the program.
    pub graph_digest: String,
    /// The workspace planned in.
    pub workspace: WorkspaceIdentity,
    /// Every source served to the planner, sorted by label.
    pub sources: Vec<SourceEntry>,
    /// The workflow name.
    pub name: String,
    /// Number of nodes.
    pub node_count: u64,
    /// The planner's protections.
    pub sandbox: SandboxRecord,
}

/// `graph.json`: the frozen document, for inspection (the digest is over CBOR, not this).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphDocument {
    /// The program.
    pub program: FrozenProgram,
    /// Its `program_digest`.
    pub program_digest: String,
    /// Its `graph_digest`.
    pub graph_digest: String,
}

/// A plan manifest as found on disk: this build's format, or the format-1 shape of Rho 1.47
/// kept verbatim (listed and deletable, never run).
#[allow(clippy::large_enum_variant, reason = "one manifest per entry")]
#[derive(Debug, Clone, PartialEq)]
pub enum StoredPlanManifest {
    /// Format 2.
    Current(PlanManifest),
    /// `"schema_version": 1`, as written.
    Legacy(serde_json::Value),
}

impl StoredPlanManifest {
    /// The plan id it records.
    pub fn plan_id(&self) -> &str {
        match self {
            StoredPlanManifest::Current(m) => &m.plan_id,
            StoredPlanManifest::Legacy(v) => v["plan_id"].as_str().unwrap_or_default(),
        }
    }

    /// Creation time as RFC 3339 (the legacy nanoseconds converted).
    pub fn created_at(&self) -> String {
        match self {
            StoredPlanManifest::Current(m) => m.created_at.clone(),
            StoredPlanManifest::Legacy(v) => legacy_created_at(v),
        }
    }

    /// The canonical workspace path it was made in, when recorded.
    pub fn workspace_path(&self) -> Option<&str> {
        match self {
            StoredPlanManifest::Current(m) => Some(&m.workspace.path),
            StoredPlanManifest::Legacy(v) => legacy_workspace_path(v),
        }
    }
}

/// Whether a manifest document is the format-1 shape of Rho 1.47.
pub fn is_legacy_manifest(value: &serde_json::Value) -> bool {
    value
        .get("schema_version")
        .and_then(serde_json::Value::as_u64)
        == Some(1)
}

/// `created_at_unix_nanos` of a format-1 manifest as RFC 3339.
pub fn legacy_created_at(value: &serde_json::Value) -> String {
    let nanos = value["created_at_unix_nanos"].as_u64().unwrap_or(0);
    super::format_timestamp(
        nanos / 1_000_000_000,
        u32::try_from((nanos / 1_000_000) % 1000).unwrap_or(0),
    )
}

/// The workspace path of a format-1 manifest's `workspace_identity` (an object with a `path`,
/// or the path itself).
pub fn legacy_workspace_path(value: &serde_json::Value) -> Option<&str> {
    let identity = &value["workspace_identity"];
    identity["path"].as_str().or_else(|| identity.as_str())
}

/// A source to store with a plan.
#[derive(Debug, Clone, Copy)]
pub struct SourceText<'a> {
    /// Its manifest entry (label, size, digest).
    pub entry: &'a SourceEntry,
    /// Its text.
    pub text: &'a str,
}

/// Everything needed to store a new plan.
#[derive(Debug, Clone)]
pub struct NewPlan<'a> {
    /// The program.
    pub program: &'a FrozenProgram,
    /// Its canonical encoding.
    pub program_bytes: &'a [u8],
    /// `program_digest` of `program_bytes`.
    pub program_digest: &'a str,
    /// `graph_digest` of the program.
    pub graph_digest: &'a str,
    /// Source texts.
    pub sources: Vec<SourceText<'a>>,
    /// The workspace.
    pub workspace: WorkspaceIdentity,
    /// The planner's protections.
    pub sandbox: SandboxRecord,
}

/// A plan read back from the store and verified.
#[derive(Debug, Clone)]
pub struct StoredPlan {
    /// Its manifest.
    pub manifest: PlanManifest,
    /// The decoded program.
    pub program: FrozenProgram,
    /// The canonical bytes (what the digest covers).
    pub program_bytes: Vec<u8>,
    /// `program_digest`, recomputed from the bytes (equal to the manifest's).
    pub program_digest: String,
}

/// Opens `$RHO_HOME/workflows` (creating it when `create`); `None` when it does not exist.
pub fn workflows_dir(home: &RhoHome, create: bool) -> Result<Option<PrivateDir>, StoreError> {
    let Some(root) = PrivateDir::open_home(home.root(), create)? else {
        return Ok(None);
    };
    if create {
        Ok(Some(root.ensure_private_dir("workflows")?))
    } else {
        root.open_private_dir("workflows")
    }
}

/// Opens `$RHO_HOME/workflows/plans` (creating it when `create`).
pub fn plans_dir(home: &RhoHome, create: bool) -> Result<Option<PrivateDir>, StoreError> {
    let Some(workflows) = workflows_dir(home, create)? else {
        return Ok(None);
    };
    if create {
        Ok(Some(workflows.ensure_private_dir("plans")?))
    } else {
        workflows.open_private_dir("plans")
    }
}

/// The file name of a stored source: the hex of its digest plus `.star`.
pub fn source_file_name(digest: &str) -> String {
    format!("{}.star", digest.strip_prefix("sha256:").unwrap_or(digest))
}

/// Stores a new plan and returns its manifest. Nothing is left behind on failure.
pub fn store(home: &RhoHome, plan: &NewPlan<'_>) -> Result<PlanManifest, StoreError> {
    let plans = plans_dir(home, true)?
        .ok_or_else(|| StoreError::io("create", home.workflows(), std::io::ErrorKind::NotFound))?;
    let plan_id = new_id();
    let manifest = PlanManifest {
        format: MANIFEST_FORMAT,
        plan_id: plan_id.clone(),
        created_at: super::timestamp_now(),
        program_digest: plan.program_digest.to_owned(),
        graph_digest: plan.graph_digest.to_owned(),
        workspace: plan.workspace.clone(),
        sources: plan.program.sources.clone(),
        name: plan.program.name.clone(),
        node_count: plan.program.root.nodes.len() as u64,
        sandbox: plan.sandbox.clone(),
    };
    let temp_name = format!("{TEMP_PREFIX}{plan_id}");
    let temp = plans.create_private_dir(&temp_name)?;
    let result = write_plan_files(&temp, plan, &manifest)
        .and_then(|()| plans.rename_noreplace(&temp_name, &plan_id))
        .and_then(|()| plans.sync());
    if let Err(error) = result {
        let _ = plans.remove_tree(&temp_name);
        return Err(error);
    }
    Ok(manifest)
}

fn write_plan_files(
    dir: &PrivateDir,
    plan: &NewPlan<'_>,
    manifest: &PlanManifest,
) -> Result<(), StoreError> {
    let document = GraphDocument {
        program: plan.program.clone(),
        program_digest: plan.program_digest.to_owned(),
        graph_digest: plan.graph_digest.to_owned(),
    };
    let graph_json = json_bytes(&document, &dir.entry_path("graph.json"))?;
    let manifest_json = json_bytes(manifest, &dir.entry_path("manifest.json"))?;

    let sources = dir.create_private_dir("sources")?;
    let mut files: Vec<(PathBuf, File)> = Vec::with_capacity(plan.sources.len() + 5);
    let mut written = std::collections::BTreeSet::new();
    for source in &plan.sources {
        let name = source_file_name(&source.entry.digest);
        if written.insert(name.clone()) {
            files.push((
                sources.entry_path(&name),
                sources.create_file(&name, source.text.as_bytes())?,
            ));
        }
    }
    files.push((
        dir.entry_path("program.cbor"),
        dir.create_file("program.cbor", plan.program_bytes)?,
    ));
    files.push((
        dir.entry_path("graph.json"),
        dir.create_file("graph.json", &graph_json)?,
    ));
    files.push((
        dir.entry_path("manifest.json"),
        dir.create_file("manifest.json", &manifest_json)?,
    ));
    for d in [&sources, dir] {
        let fd = d
            .fd()
            .try_clone_to_owned()
            .map_err(|e| StoreError::io("open", d.path(), e))?;
        files.push((d.path().to_owned(), File::from(fd)));
    }
    sync_files(&files)
}

fn json_bytes<T: Serialize>(value: &T, path: &std::path::Path) -> Result<Vec<u8>, StoreError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| StoreError::Corrupt {
        path: path.to_owned(),
        problem: format!("cannot serialize: {e}"),
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Every stored plan id (directory names that are ids), sorted.
pub fn plan_ids(home: &RhoHome) -> Result<Vec<String>, StoreError> {
    let Some(plans) = plans_dir(home, false)? else {
        return Ok(Vec::new());
    };
    Ok(plans
        .list_entries()?
        .into_iter()
        .filter(|n| is_id(n))
        .collect())
}

/// Resolves a plan id or unique prefix.
pub fn resolve(home: &RhoHome, prefix: &str) -> Result<String, StoreError> {
    let ids = plan_ids(home)?;
    resolve_prefix("plan", prefix, ids.iter().map(String::as_str))
}

fn open_plan(home: &RhoHome, id: &str) -> Result<PrivateDir, StoreError> {
    let unknown = || StoreError::UnknownId {
        kind: "plan",
        prefix: id.to_owned(),
    };
    if !is_id(id) {
        return Err(unknown());
    }
    let plans = plans_dir(home, false)?.ok_or_else(unknown)?;
    plans.open_private_dir(id)?.ok_or_else(unknown)
}

/// Reads a manifest of either format; a format-2 manifest is checked.
fn read_stored_manifest(dir: &PrivateDir, id: &str) -> Result<StoredPlanManifest, StoreError> {
    let path = dir.entry_path("manifest.json");
    let bytes = dir.read_private("manifest.json", MAX_DOCUMENT_BYTES)?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            problem: e.to_string(),
        })?;
    if is_legacy_manifest(&value) {
        return Ok(StoredPlanManifest::Legacy(value));
    }
    let manifest: PlanManifest =
        serde_json::from_value(value).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            problem: e.to_string(),
        })?;
    if manifest.format != MANIFEST_FORMAT {
        return Err(StoreError::Corrupt {
            path,
            problem: format!(
                "manifest format {} is not supported (this build reads format {MANIFEST_FORMAT})",
                manifest.format
            ),
        });
    }
    if manifest.plan_id != id {
        return Err(StoreError::Corrupt {
            path,
            problem: format!("it names plan {} but is stored as {id}", manifest.plan_id),
        });
    }
    Ok(StoredPlanManifest::Current(manifest))
}

/// Reads a format-2 manifest; a format-1 plan is refused as [`StoreError::Legacy`].
fn read_manifest(dir: &PrivateDir, id: &str) -> Result<PlanManifest, StoreError> {
    match read_stored_manifest(dir, id)? {
        StoredPlanManifest::Current(manifest) => Ok(manifest),
        StoredPlanManifest::Legacy(_) => Err(StoreError::Legacy {
            kind: "plan",
            id: id.to_owned(),
        }),
    }
}

/// Reads the manifest of plan `id` (a full id).
pub fn manifest(home: &RhoHome, id: &str) -> Result<PlanManifest, StoreError> {
    let dir = open_plan(home, id)?;
    read_manifest(&dir, id)
}

/// Loads plan `id` (a full id) and verifies that `program.cbor` decodes strictly and hashes
/// to the manifest's `program_digest`, and that `graph.json` holds that same program and
/// its digests.
pub fn load(home: &RhoHome, id: &str) -> Result<StoredPlan, StoreError> {
    let dir = open_plan(home, id)?;
    let manifest = read_manifest(&dir, id)?;
    let path = dir.entry_path("program.cbor");
    let program_bytes = dir.read_private("program.cbor", MAX_DOCUMENT_BYTES)?;
    let digest = program_digest_of_bytes(&program_bytes);
    if digest != manifest.program_digest {
        return Err(StoreError::Corrupt {
            path,
            problem: format!(
                "its digest is {digest}, but the manifest records {}",
                manifest.program_digest
            ),
        });
    }
    let program: FrozenProgram =
        rho_ipc::canonical::from_canonical_bytes(&program_bytes).map_err(|e| {
            StoreError::Corrupt {
                path: path.clone(),
                problem: e.to_string(),
            }
        })?;
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
    let graph_path = dir.entry_path("graph.json");
    let graph_bytes = dir.read_private("graph.json", MAX_DOCUMENT_BYTES)?;
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
            problem: "it does not describe the plan's program.cbor".to_owned(),
        });
    }
    Ok(StoredPlan {
        manifest,
        program,
        program_bytes,
        program_digest: digest,
    })
}

/// Reads a stored source text of plan `id` by its digest.
pub fn source_text(home: &RhoHome, id: &str, digest: &str) -> Result<String, StoreError> {
    let dir = open_plan(home, id)?;
    let sources = dir.open_private_dir("sources")?.ok_or_else(|| {
        StoreError::io(
            "open",
            dir.entry_path("sources"),
            std::io::ErrorKind::NotFound,
        )
    })?;
    let name = source_file_name(digest);
    let bytes = sources.read_private(&name, MAX_DOCUMENT_BYTES)?;
    String::from_utf8(bytes).map_err(|_| StoreError::Corrupt {
        path: sources.entry_path(&name),
        problem: "not UTF-8".to_owned(),
    })
}

/// Manifests of every stored format-2 plan, newest first (ties by id); format-1 plans are
/// left out (see [`list_all`]).
pub fn list(home: &RhoHome) -> Result<Vec<PlanManifest>, StoreError> {
    Ok(list_all(home)?
        .into_iter()
        .filter_map(|m| match m {
            StoredPlanManifest::Current(m) => Some(m),
            StoredPlanManifest::Legacy(_) => None,
        })
        .collect())
}

/// Manifests of every stored plan of either format, newest first (ties by id).
pub fn list_all(home: &RhoHome) -> Result<Vec<StoredPlanManifest>, StoreError> {
    let Some(plans) = plans_dir(home, false)? else {
        return Ok(Vec::new());
    };
    let mut manifests = Vec::new();
    for name in plans.list_entries()? {
        if !is_id(&name) {
            continue;
        }
        let Some(dir) = plans.open_private_dir(&name)? else {
            continue;
        };
        manifests.push(read_stored_manifest(&dir, &name)?);
    }
    manifests.sort_by(|a, b| {
        b.created_at()
            .cmp(&a.created_at())
            .then_with(|| a.plan_id().cmp(b.plan_id()))
    });
    Ok(manifests)
}

/// Deletes plan `id` (a full id): renamed out of sight first, so a crash never leaves a
/// half-deleted plan under its id.
pub fn delete(home: &RhoHome, id: &str) -> Result<(), StoreError> {
    let dir = open_plan(home, id)?;
    drop(dir);
    let plans = plans_dir(home, false)?.ok_or_else(|| StoreError::UnknownId {
        kind: "plan",
        prefix: id.to_owned(),
    })?;
    let doomed = format!("{TEMP_PREFIX}delete-{id}");
    plans.rename_noreplace(id, &doomed)?;
    plans.sync()?;
    plans.remove_tree(&doomed)?;
    plans.sync()?;
    Ok(())
}
