//! Kernel confinement for read-only and network-denied processes: a Landlock ruleset and a
//! seccomp filter, prepared before the fork and applied by the child right before `exec`.
//!
//! Three steps, so each can be checked on its own:
//! 1. [`plan`] decides, from what is asked ([`ConfinementRequest`]) and what the kernel
//!    offers ([`KernelSupport`]), which rights the kernel handles, which rules grant some
//!    back, and what the seccomp filter refuses. It is pure and unit-tested.
//! 2. [`Confinement::prepare`] turns a plan into a Landlock ruleset descriptor and a compiled
//!    BPF program. It allocates and opens paths, so it runs in the parent.
//! 3. [`Confinement::apply_in_child`] only makes system calls on that prepared state
//!    (`no_new_privs`, `landlock_restrict_self`, `seccomp`), so it is safe between `fork`
//!    and `exec`: in the executor's spawner, or in a `pre_exec` hook installed with
//!    [`Confinement::install`] on a `std::process::Command` (what the agent tools use).
//!
//! A workflow run prepares these once and reuses them ([`NodeConfinements`]): one scratch
//! directory with its ruleset per concurrent confined attempt, handed on only empty, and one
//! compiled filter per plan, which the executor installs once on a launcher thread whose
//! children inherit it ([`Confinement::apply_in_child_under_inherited_filter`]).
//!
//! What read-only means: every file system right Landlock knows is handled; reading and
//! executing are granted everywhere, every write right only beneath the attempt's scratch
//! directory, and writing (not creating) `/dev/null`. Landlock cannot limit metadata
//! changes, so the filter refuses `chmod`, `chown`, timestamp and extended-attribute calls
//! and the inode-flag `ioctl`s everywhere (the scratch directory included), plus the calls
//! that change the machine rather than a file (modules, clock, hostname, swap, reboot).
//! Where the ABI has scopes, signals to processes outside the node are refused too.
//!
//! `network = "none"`: Landlock refuses TCP `bind` and `connect` where the ABI has network
//! rights (4 and later); the filter refuses every other socket family and type except Unix
//! sockets (UDP, raw, packet, netlink), TCP Fast Open sends, and `io_uring` (whose socket
//! operations seccomp cannot see). Without Landlock network rights the filter refuses IP
//! sockets outright.
//!
//! Invariant: nothing is downgraded silently. When the kernel cannot enforce what is asked,
//! [`plan`] fails with the missing feature named, and the caller runs nothing.

#[cfg(target_os = "linux")]
pub mod filter;
mod pool;
#[cfg(target_os = "linux")]
mod sys;

#[cfg(target_os = "linux")]
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rho_ipc::program::{Access, Network, Node, NodeKind};

pub use pool::{NodeConfinements, ScratchLease};
#[cfg(target_os = "linux")]
pub use sys::ChildFailure;

/// The step of [`Confinement::apply_in_child`] that failed and the errno the kernel gave.
#[cfg(not(target_os = "linux"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildFailure {
    /// The step.
    pub step: &'static str,
    /// The error number.
    pub errno: i32,
}

/// Raises the lowest Landlock ABI that confinement accepts (an integer). Operators use it to
/// insist on a newer kernel; tests use it to stand for a kernel without enough Landlock, the
/// way the planner worker's `--require-landlock-abi` does.
pub const REQUIRE_ABI_VAR: &str = "RHO_REQUIRE_LANDLOCK_ABI";

/// The lowest ABI that can enforce read-only access: ABI 3 adds `Truncate`, so from there on
/// no path-based change to a file escapes Landlock.
pub const READ_ONLY_MINIMUM_ABI: u32 = 3;

/// The ABI whose rights are handled when the kernel has it: 5 completes the file system
/// rights (`IoctlDev`), 4 adds TCP, 6 adds scopes. Later ABIs add nothing we use.
pub const TARGET_ABI: u32 = 6;

/// Landlock file system rights (`LANDLOCK_ACCESS_FS_*`).
pub mod fs_access {
    /// Execute a file.
    pub const EXECUTE: u64 = 1 << 0;
    /// Open a file for writing.
    pub const WRITE_FILE: u64 = 1 << 1;
    /// Open a file for reading.
    pub const READ_FILE: u64 = 1 << 2;
    /// List a directory.
    pub const READ_DIR: u64 = 1 << 3;
    /// Remove a directory.
    pub const REMOVE_DIR: u64 = 1 << 4;
    /// Unlink a file.
    pub const REMOVE_FILE: u64 = 1 << 5;
    /// Create a character device.
    pub const MAKE_CHAR: u64 = 1 << 6;
    /// Create a directory.
    pub const MAKE_DIR: u64 = 1 << 7;
    /// Create a regular file (or hard link).
    pub const MAKE_REG: u64 = 1 << 8;
    /// Create a Unix socket.
    pub const MAKE_SOCK: u64 = 1 << 9;
    /// Create a FIFO.
    pub const MAKE_FIFO: u64 = 1 << 10;
    /// Create a block device.
    pub const MAKE_BLOCK: u64 = 1 << 11;
    /// Create a symbolic link.
    pub const MAKE_SYM: u64 = 1 << 12;
    /// Link or rename across directories (ABI 2).
    pub const REFER: u64 = 1 << 13;
    /// Truncate a file (ABI 3).
    pub const TRUNCATE: u64 = 1 << 14;
    /// `ioctl` on a device (ABI 5).
    pub const IOCTL_DEV: u64 = 1 << 15;
}

/// Landlock network rights (`LANDLOCK_ACCESS_NET_*`, ABI 4).
pub mod net_access {
    /// Bind a TCP socket.
    pub const BIND_TCP: u64 = 1 << 0;
    /// Connect a TCP socket.
    pub const CONNECT_TCP: u64 = 1 << 1;
}

/// Landlock scopes (`LANDLOCK_SCOPE_*`, ABI 6).
pub mod scope {
    /// Connect to an abstract Unix socket created outside the domain.
    pub const ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
    /// Signal a process outside the domain.
    pub const SIGNAL: u64 = 1 << 1;
}

/// Every file system right of `abi`.
pub fn fs_rights(abi: u32) -> u64 {
    use fs_access::{IOCTL_DEV, MAKE_SYM, REFER, TRUNCATE};
    let mut rights = (MAKE_SYM << 1) - 1; // ABI 1: bits 0..=12
    if abi >= 2 {
        rights |= REFER;
    }
    if abi >= 3 {
        rights |= TRUNCATE;
    }
    if abi >= 5 {
        rights |= IOCTL_DEV;
    }
    rights
}

/// Why a confinement cannot be planned, prepared or applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfinementError {
    /// The kernel cannot enforce what was asked; nothing may run.
    #[error("{what} cannot be enforced by this kernel: {reason}")]
    Unsupported {
        /// `access = "read_only"` or `network = "none"`.
        what: &'static str,
        /// What is missing and what the kernel offers instead.
        reason: String,
    },
    /// `RHO_REQUIRE_LANDLOCK_ABI` is not a positive integer.
    #[error("{REQUIRE_ABI_VAR} must be a positive integer, not `{value}`")]
    BadRequirement {
        /// The value found.
        value: String,
    },
    /// A path a rule needs could not be opened.
    #[error("cannot open {path} for a Landlock rule")]
    Open {
        /// The path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A Landlock or seccomp system call failed while preparing.
    #[error("{call} failed")]
    Syscall {
        /// The call.
        call: &'static str,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
    /// The seccomp filter could not be built.
    #[cfg(target_os = "linux")]
    #[error("cannot build the seccomp filter")]
    Filter {
        /// The compiler's error.
        #[source]
        source: seccompiler::Error,
    },
}

/// What a process must be confined to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConfinementRequest {
    /// Writes only to the scratch directory and `/dev/null`.
    pub read_only: bool,
    /// No network but Unix sockets.
    pub deny_network: bool,
}

impl ConfinementRequest {
    /// The read-only ruleset with the network allowed (a read-only agent's `bash`).
    pub const READ_ONLY: Self = Self {
        read_only: true,
        deny_network: false,
    };

    /// What a frozen node asks for. Agents are confined per tool call, not here.
    pub fn for_node(node: &Node) -> Self {
        let command = matches!(node.kind(), NodeKind::Command | NodeKind::Shell);
        Self {
            read_only: command && node.access == Access::ReadOnly,
            deny_network: command && node.network == Network::None,
        }
    }

    /// Nothing to enforce.
    pub fn is_empty(self) -> bool {
        !self.read_only && !self.deny_network
    }

    fn what(self) -> &'static str {
        if self.read_only {
            "access = \"read_only\""
        } else {
            "network = \"none\""
        }
    }
}

/// What the running kernel offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSupport {
    /// The Landlock ABI (`None`: no Landlock, or disabled at boot).
    pub landlock_abi: Option<u32>,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
    /// A minimum ABI raised by [`REQUIRE_ABI_VAR`].
    pub required_abi: Option<u32>,
}

impl KernelSupport {
    /// Asks the kernel, and reads [`REQUIRE_ABI_VAR`] from the environment.
    pub fn detect() -> Result<Self, ConfinementError> {
        let required_abi = match std::env::var_os(REQUIRE_ABI_VAR) {
            None => None,
            Some(raw) => {
                let text = raw.to_string_lossy().into_owned();
                match text.trim().parse::<u32>() {
                    Ok(n) if n > 0 => Some(n),
                    _ => return Err(ConfinementError::BadRequirement { value: text }),
                }
            }
        };
        #[cfg(target_os = "linux")]
        return Ok(Self {
            landlock_abi: sys::landlock_abi().ok(),
            seccomp: sys::seccomp_available(),
            required_abi,
        });
        // Off Linux there is neither, so every confinement fails closed in `plan`.
        #[cfg(not(target_os = "linux"))]
        Ok(Self {
            landlock_abi: None,
            seccomp: false,
            required_abi,
        })
    }

    /// One line for `doctor` and error messages.
    pub fn describe(&self) -> String {
        let landlock = match self.landlock_abi {
            Some(abi) => format!("Landlock ABI {abi}"),
            None => "no Landlock".to_owned(),
        };
        let seccomp = if self.seccomp {
            "seccomp filters"
        } else {
            "no seccomp filters"
        };
        format!("{landlock}, {seccomp}")
    }
}

/// A path a Landlock rule grants rights beneath.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleTarget {
    /// `/`: read and execute everywhere.
    Root,
    /// The attempt's scratch directory: every right.
    Scratch,
    /// `/dev/null`: read, write, truncate.
    DevNull,
}

/// One `LANDLOCK_RULE_PATH_BENEATH` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathRule {
    /// Where.
    pub target: RuleTarget,
    /// The rights granted there.
    pub access: u64,
}

/// What the seccomp filter refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FilterPlan {
    /// Metadata and machine-changing calls (read-only).
    pub deny_metadata: bool,
    /// Socket families and types (network none).
    pub deny_sockets: bool,
    /// TCP stream sockets stay creatable because Landlock refuses their `bind`/`connect`.
    pub tcp_by_landlock: bool,
}

impl FilterPlan {
    /// Whether any filter is needed.
    pub fn is_empty(&self) -> bool {
        !self.deny_metadata && !self.deny_sockets
    }
}

/// Everything the kernel will be asked to enforce, decided before anything is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfinementPlan {
    /// The Landlock ABI the rights come from (0: no ruleset).
    pub abi: u32,
    /// Handled file system rights.
    pub handled_fs: u64,
    /// Handled network rights.
    pub handled_net: u64,
    /// Scopes.
    pub scoped: u64,
    /// Rules granting rights back.
    pub rules: Vec<PathRule>,
    /// The seccomp filter.
    pub filter: FilterPlan,
}

impl ConfinementPlan {
    /// Whether a Landlock ruleset is needed.
    pub fn needs_ruleset(&self) -> bool {
        self.handled_fs != 0 || self.handled_net != 0 || self.scoped != 0
    }

    /// One line saying what is enforced, for logs and the attempt record.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.handled_fs != 0 {
            parts.push(format!(
                "Landlock ABI {}: writes only to the scratch directory and /dev/null",
                self.abi
            ));
        }
        if self.handled_net != 0 {
            parts.push(format!(
                "Landlock ABI {}: TCP bind and connect refused",
                self.abi
            ));
        }
        if self.scoped & scope::SIGNAL != 0 {
            parts.push("signals outside the node refused".to_owned());
        }
        if self.filter.deny_metadata {
            parts.push("seccomp: metadata changes refused".to_owned());
        }
        if self.filter.deny_sockets {
            parts.push(if self.filter.tcp_by_landlock {
                "seccomp: non-TCP sockets refused".to_owned()
            } else {
                "seccomp: IP and packet sockets refused".to_owned()
            });
        }
        parts.join("; ")
    }
}

/// Decides the confinement for `request` on a kernel with `support`. Pure: the same inputs
/// always give the same plan or the same refusal.
pub fn plan(
    request: ConfinementRequest,
    support: &KernelSupport,
) -> Result<ConfinementPlan, ConfinementError> {
    let mut out = ConfinementPlan {
        abi: 0,
        handled_fs: 0,
        handled_net: 0,
        scoped: 0,
        rules: Vec::new(),
        filter: FilterPlan::default(),
    };
    if request.is_empty() {
        return Ok(out);
    }
    let what = request.what();
    let kernel = support.landlock_abi;
    let required = support.required_abi;
    if let (Some(required), kernel) = (required, kernel)
        && kernel.is_none_or(|k| k < required)
    {
        return Err(ConfinementError::Unsupported {
            what,
            reason: format!(
                "Landlock ABI {required} is required ({REQUIRE_ABI_VAR}) but the kernel {}",
                provides(kernel)
            ),
        });
    }
    if !support.seccomp {
        return Err(ConfinementError::Unsupported {
            what,
            reason: "seccomp filters are unavailable (the kernel lacks CONFIG_SECCOMP_FILTER)"
                .to_owned(),
        });
    }
    let abi = kernel.map_or(0, |k| k.min(TARGET_ABI));
    if request.read_only {
        if abi < READ_ONLY_MINIMUM_ABI {
            return Err(ConfinementError::Unsupported {
                what,
                reason: format!(
                    "Landlock ABI {READ_ONLY_MINIMUM_ABI} or later is required but the kernel {}",
                    provides(kernel)
                ),
            });
        }
        out.handled_fs = fs_rights(abi);
        let mut dev_null = fs_access::READ_FILE | fs_access::WRITE_FILE | fs_access::TRUNCATE;
        if abi >= 5 {
            dev_null |= fs_access::IOCTL_DEV;
        }
        out.rules = vec![
            PathRule {
                target: RuleTarget::Root,
                access: fs_access::EXECUTE | fs_access::READ_FILE | fs_access::READ_DIR,
            },
            PathRule {
                target: RuleTarget::Scratch,
                access: out.handled_fs,
            },
            PathRule {
                target: RuleTarget::DevNull,
                access: dev_null,
            },
        ];
        if abi >= 6 {
            out.scoped |= scope::SIGNAL;
        }
        out.filter.deny_metadata = true;
    }
    if request.deny_network {
        if abi >= 4 {
            out.handled_net = net_access::BIND_TCP | net_access::CONNECT_TCP;
            out.filter.tcp_by_landlock = true;
        }
        out.filter.deny_sockets = true;
    }
    if out.needs_ruleset() {
        out.abi = abi;
    }
    Ok(out)
}

fn provides(kernel: Option<u32>) -> String {
    match kernel {
        Some(abi) => format!("provides ABI {abi}"),
        None => "has no Landlock (not built in or not enabled at boot)".to_owned(),
    }
}

/// A compiled seccomp program, shared by every confinement of a run that needs the same
/// [`FilterPlan`] (it depends on nothing else).
#[cfg(target_os = "linux")]
type SharedFilter = Arc<seccompiler::BpfProgram>;

/// A prepared confinement: a Landlock ruleset descriptor (close-on-exec) and a compiled
/// filter. Share it with `Arc`; applying it never changes it, so one prepared confinement
/// may restrict any number of children (each `landlock_restrict_self` with the same ruleset
/// descriptor gives that child its own domain built from the same rules).
#[derive(Debug)]
pub struct Confinement {
    plan: ConfinementPlan,
    #[cfg(target_os = "linux")]
    ruleset: Option<OwnedFd>,
    #[cfg(target_os = "linux")]
    filter: Option<SharedFilter>,
}

impl Confinement {
    /// Opens the rule paths (`scratch` must be an existing directory), creates the ruleset
    /// and compiles the filter. Nothing is restricted yet.
    #[cfg(target_os = "linux")]
    pub fn prepare(plan: &ConfinementPlan, scratch: &Path) -> Result<Self, ConfinementError> {
        let filter = Self::compile_filter(plan.filter)?;
        Self::prepare_with(plan, scratch, filter)
    }

    /// The program [`Confinement::prepare`] would compile for `filter` (`None`: no filter).
    #[cfg(target_os = "linux")]
    fn compile_filter(filter: FilterPlan) -> Result<Option<SharedFilter>, ConfinementError> {
        if filter.is_empty() {
            return Ok(None);
        }
        filter::compile(&filter).map(|program| Some(Arc::new(program)))
    }

    /// [`Confinement::prepare`] with a program compiled earlier for the same plan.
    #[cfg(target_os = "linux")]
    fn prepare_with(
        plan: &ConfinementPlan,
        scratch: &Path,
        filter: Option<SharedFilter>,
    ) -> Result<Self, ConfinementError> {
        let ruleset = if plan.needs_ruleset() {
            Some(sys::build_ruleset(plan, scratch)?)
        } else {
            None
        };
        Ok(Self {
            plan: plan.clone(),
            ruleset,
            filter,
        })
    }

    /// Off Linux nothing can be enforced: fail closed.
    #[cfg(not(target_os = "linux"))]
    pub fn prepare(plan: &ConfinementPlan, _scratch: &Path) -> Result<Self, ConfinementError> {
        let _ = plan;
        Err(ConfinementError::Unsupported {
            what: "kernel confinement",
            reason: format!("{} has no Landlock", std::env::consts::OS),
        })
    }

    /// Plans for the running kernel and prepares in one step.
    pub fn for_request(
        request: ConfinementRequest,
        scratch: &Path,
    ) -> Result<Option<Arc<Self>>, ConfinementError> {
        if request.is_empty() {
            return Ok(None);
        }
        let support = KernelSupport::detect()?;
        let plan = plan(request, &support)?;
        Self::prepare(&plan, scratch).map(|c| Some(Arc::new(c)))
    }

    /// What is enforced.
    pub fn plan(&self) -> &ConfinementPlan {
        &self.plan
    }

    /// Restricts the calling process for good: `no_new_privs`, the ruleset, the filter.
    /// Async-signal-safe (no allocation, no lock): call it in a child between `fork` and
    /// `exec`, never in the owner.
    pub fn apply_in_child(&self) -> Result<(), ChildFailure> {
        #[cfg(target_os = "linux")]
        return sys::apply(
            self.ruleset.as_ref(),
            self.filter.as_deref().map(Vec::as_slice),
        );
        #[cfg(not(target_os = "linux"))]
        Err(ChildFailure {
            step: "confinement",
            errno: 38, // ENOSYS
        })
    }

    /// The compiled seccomp program, when this confinement has one: a launcher thread that
    /// installed it on itself hands it to its children by inheritance (see
    /// [`Confinement::apply_in_child_under_inherited_filter`]).
    #[cfg(target_os = "linux")]
    pub fn filter_program(&self) -> Option<&Arc<seccompiler::BpfProgram>> {
        self.filter.as_ref()
    }

    /// Installs `program` on the calling thread alone, with `no_new_privs`: every process
    /// this thread creates afterwards inherits the filter, as if each had attached it (the
    /// kernel copies the creating thread's filter to a new process). For a thread that does
    /// nothing but create such processes; nothing else of this process is filtered.
    #[cfg(target_os = "linux")]
    pub fn filter_calling_thread(program: &seccompiler::BpfProgram) -> Result<(), ChildFailure> {
        sys::apply(None, Some(program.as_slice()))
    }

    /// [`Confinement::apply_in_child`] in a child created by a thread filtered with
    /// [`Confinement::filter_calling_thread`] and this confinement's own program: the
    /// inherited filter is checked to be in force (else the child fails closed), and only
    /// `no_new_privs` and the ruleset remain to apply. Async-signal-safe.
    #[cfg(target_os = "linux")]
    pub fn apply_in_child_under_inherited_filter(&self) -> Result<(), ChildFailure> {
        sys::check_filtered()?;
        sys::apply(self.ruleset.as_ref(), None)
    }

    /// Makes `command` apply this confinement in its child before `exec` (a `pre_exec`
    /// hook). The program is still found by path (read and execute are allowed
    /// everywhere), and `current_dir` is applied before the hook.
    #[cfg(target_os = "linux")]
    pub fn install(self: &Arc<Self>, command: &mut std::process::Command) {
        sys::install(Arc::clone(self), command);
    }
}

/// A confinement with the private scratch directory its processes may write (removed when
/// the last holder drops it): what a read-only agent's `bash` and `process` tools run under.
#[derive(Debug)]
pub struct ScratchConfinement {
    confinement: Arc<Confinement>,
    scratch: ScratchDir,
}

impl ScratchConfinement {
    /// The read-only ruleset (network allowed) over a fresh scratch directory in the system
    /// temporary directory. Fails closed where the kernel cannot enforce it.
    pub fn read_only() -> Result<Arc<Self>, ConfinementError> {
        let parent = std::env::temp_dir();
        let scratch = ScratchDir::create_in(&parent).map_err(|source| ConfinementError::Open {
            path: parent.clone(),
            source,
        })?;
        let confinement = Confinement::for_request(ConfinementRequest::READ_ONLY, scratch.path())?
            .ok_or_else(|| ConfinementError::Unsupported {
                what: "access = \"read_only\"",
                reason: "no ruleset was prepared".to_owned(),
            })?;
        Ok(Arc::new(ScratchConfinement {
            confinement,
            scratch,
        }))
    }

    /// The confinement to install in each child.
    pub fn confinement(&self) -> &Arc<Confinement> {
        &self.confinement
    }

    /// The directory the confined processes may write (their `TMPDIR`).
    pub fn scratch(&self) -> &Path {
        self.scratch.path()
    }

    /// `env` with `TMPDIR` pointing at the scratch directory.
    pub fn environment(
        &self,
        env: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        let mut vars: Vec<_> = env.into_iter().filter(|(k, _)| k != "TMPDIR").collect();
        vars.push(("TMPDIR".into(), self.scratch().as_os_str().to_owned()));
        vars
    }
}

/// A private scratch directory for one confined process tree, removed with its content when
/// dropped. Point `TMPDIR` (and tool caches) at it.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Creates a fresh directory (mode 0700) named `rho-scratch-*` inside `parent`.
    pub fn create_in(parent: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt as _;
        let mut builder = std::fs::DirBuilder::new();
        builder.mode(0o700);
        for _ in 0..16 {
            let name = format!("rho-scratch-{}", uuid::Uuid::new_v4().simple());
            let path = parent.join(name);
            match builder.create(&path) {
                Ok(()) => return Ok(Self { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "no fresh scratch directory name",
        ))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove a scratch directory");
        }
    }
}

/// The unit tests' rule for a kernel that lacks a protection: fail when `CI` or
/// `RHO_REQUIRE_SANDBOX=1` demands the sandbox, otherwise say loudly why the test skips.
#[cfg(test)]
pub(crate) fn skip_unless_required(missing: &str) {
    let required = std::env::var_os("CI").is_some_and(|v| !v.is_empty())
        || std::env::var_os("RHO_REQUIRE_SANDBOX").is_some_and(|v| v == "1");
    assert!(
        !required,
        "{missing}, which CI or RHO_REQUIRE_SANDBOX=1 requires"
    );
    eprintln!("SKIPPED: {missing}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(abi: Option<u32>) -> KernelSupport {
        KernelSupport {
            landlock_abi: abi,
            seccomp: true,
            required_abi: None,
        }
    }

    #[test]
    fn nothing_asked_means_nothing_enforced() {
        let plan = plan(ConfinementRequest::default(), &kernel(None)).unwrap();
        assert!(!plan.needs_ruleset());
        assert!(plan.filter.is_empty());
    }

    #[test]
    fn read_only_handles_every_right_and_grants_writes_only_to_scratch_and_dev_null() {
        let plan = plan(ConfinementRequest::READ_ONLY, &kernel(Some(7))).unwrap();
        assert_eq!(plan.abi, TARGET_ABI);
        assert_eq!(plan.handled_fs, (1 << 16) - 1, "all 16 rights of ABI 5+");
        assert_eq!(plan.handled_net, 0, "network untouched unless asked");
        assert_eq!(plan.scoped, scope::SIGNAL);
        let root = plan.rules[0];
        assert_eq!(root.target, RuleTarget::Root);
        assert_eq!(
            root.access,
            fs_access::EXECUTE | fs_access::READ_FILE | fs_access::READ_DIR
        );
        assert_eq!(root.access & fs_access::WRITE_FILE, 0);
        assert_eq!(plan.rules[1].target, RuleTarget::Scratch);
        assert_eq!(plan.rules[1].access, plan.handled_fs);
        let null = plan.rules[2];
        assert_eq!(null.target, RuleTarget::DevNull);
        assert_eq!(
            null.access & fs_access::MAKE_REG,
            0,
            "/dev/null is not a directory"
        );
        assert_ne!(null.access & fs_access::WRITE_FILE, 0);
        assert!(plan.filter.deny_metadata && !plan.filter.deny_sockets);
    }

    #[test]
    fn read_only_on_abi_3_has_truncate_but_no_device_ioctl_or_scope() {
        let plan = plan(ConfinementRequest::READ_ONLY, &kernel(Some(3))).unwrap();
        assert_eq!(plan.abi, 3);
        assert_ne!(plan.handled_fs & fs_access::TRUNCATE, 0);
        assert_eq!(plan.handled_fs & fs_access::IOCTL_DEV, 0);
        assert_eq!(plan.scoped, 0);
    }

    #[test]
    fn read_only_fails_closed_without_enough_landlock() {
        for abi in [None, Some(1), Some(2)] {
            let error = plan(ConfinementRequest::READ_ONLY, &kernel(abi)).unwrap_err();
            let text = error.to_string();
            assert!(
                text.starts_with("access = \"read_only\" cannot be enforced"),
                "{text}"
            );
            assert!(
                text.contains("Landlock ABI 3 or later is required"),
                "{text}"
            );
        }
        let error = plan(ConfinementRequest::READ_ONLY, &kernel(None)).unwrap_err();
        assert!(error.to_string().contains("has no Landlock"), "{error}");
    }

    #[test]
    fn raised_requirement_beyond_the_kernel_is_refused() {
        let support = KernelSupport {
            required_abi: Some(99),
            ..kernel(Some(7))
        };
        let error = plan(ConfinementRequest::READ_ONLY, &support).unwrap_err();
        assert_eq!(
            error.to_string(),
            "access = \"read_only\" cannot be enforced by this kernel: Landlock ABI 99 is \
             required (RHO_REQUIRE_LANDLOCK_ABI) but the kernel provides ABI 7"
        );
        let ok = KernelSupport {
            required_abi: Some(4),
            ..kernel(Some(7))
        };
        assert!(plan(ConfinementRequest::READ_ONLY, &ok).is_ok());
    }

    #[test]
    fn network_none_uses_landlock_tcp_rules_and_a_socket_filter() {
        let request = ConfinementRequest {
            read_only: false,
            deny_network: true,
        };
        let plan = plan(request, &kernel(Some(7))).unwrap();
        assert_eq!(
            plan.handled_fs, 0,
            "a mutating node keeps its file system rights"
        );
        assert_eq!(
            plan.handled_net,
            net_access::BIND_TCP | net_access::CONNECT_TCP
        );
        assert!(plan.rules.is_empty(), "no rule grants any port back");
        assert!(plan.filter.deny_sockets && plan.filter.tcp_by_landlock);
        assert!(!plan.filter.deny_metadata);
    }

    #[test]
    fn network_none_without_landlock_tcp_falls_back_to_seccomp_alone() {
        let request = ConfinementRequest {
            read_only: false,
            deny_network: true,
        };
        for abi in [None, Some(3)] {
            let plan = plan(request, &kernel(abi)).unwrap();
            assert!(!plan.needs_ruleset());
            assert!(plan.filter.deny_sockets && !plan.filter.tcp_by_landlock);
        }
    }

    #[test]
    fn without_seccomp_both_fail_closed() {
        let support = KernelSupport {
            seccomp: false,
            ..kernel(Some(7))
        };
        for request in [
            ConfinementRequest::READ_ONLY,
            ConfinementRequest {
                read_only: false,
                deny_network: true,
            },
        ] {
            let error = plan(request, &support).unwrap_err();
            assert!(error.to_string().contains("seccomp"), "{error}");
        }
    }

    #[test]
    fn abi_rights_grow_with_the_abi() {
        assert_eq!(fs_rights(1), 0x1fff);
        assert_eq!(fs_rights(2), 0x3fff);
        assert_eq!(fs_rights(3), 0x7fff);
        assert_eq!(fs_rights(4), 0x7fff);
        assert_eq!(fs_rights(5), 0xffff);
        assert_eq!(fs_rights(7), 0xffff);
    }

    #[test]
    fn scratch_dir_is_private_and_removed_with_its_content() {
        use std::os::unix::fs::PermissionsExt as _;
        let parent = tempfile::tempdir().unwrap();
        let path = {
            let scratch = ScratchDir::create_in(parent.path()).unwrap();
            let mode = std::fs::metadata(scratch.path())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700);
            std::fs::create_dir(scratch.path().join("d")).unwrap();
            std::fs::write(scratch.path().join("d/f"), b"x").unwrap();
            scratch.path().to_owned()
        };
        assert!(!path.exists());
    }
}
