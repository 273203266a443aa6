//! Where this process sits in the cgroup v2 hierarchy: pure parsers for
//! `/proc/self/cgroup` and `/proc/self/mountinfo`, and the names rho gives its cgroups.
//!
//! Invariant: a path handed out is relative to the hierarchy's root and made only of
//! components that cannot climb (`..`) or be empty, so joining it to a mount point stays
//! inside the mount.

use std::path::PathBuf;

/// The cgroup v2 path of this process (`0::<path>` in `/proc/self/cgroup`).
pub(crate) fn own_cgroup(proc_self_cgroup: &str) -> Option<String> {
    proc_self_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(|path| path.trim_end_matches(" (deleted)").to_owned())
        .filter(|path| path.starts_with('/'))
}

/// A mounted cgroup v2 hierarchy as `/proc/self/mountinfo` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    /// The path of the hierarchy this mount shows at its mount point (`/` unless bound
    /// from inside or seen through a cgroup namespace).
    pub(crate) root: String,
    /// Where it is mounted.
    pub(crate) mount_point: PathBuf,
}

/// Every `cgroup2` mount, in file order.
pub(crate) fn cgroup2_mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            if right.split_whitespace().next()? != "cgroup2" {
                return None;
            }
            let fields: Vec<&str> = left.split_whitespace().collect();
            Some(Mount {
                root: unescape(fields.get(3)?),
                mount_point: PathBuf::from(unescape(fields.get(4)?)),
            })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 4 <= bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value = bytes[i + 1..i + 4]
                .iter()
                .fold(0_u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            if let Ok(byte) = u8::try_from(value) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The directory of cgroup `path` (hierarchy-relative) through the first mount that shows
/// it, or `None` when no mount does.
pub(crate) fn directory_of(mounts: &[Mount], path: &str) -> Option<PathBuf> {
    if !is_clean(path) {
        return None;
    }
    mounts.iter().find_map(|mount| {
        let rest = if mount.root == "/" {
            path
        } else {
            let rest = path.strip_prefix(mount.root.as_str())?;
            if !(rest.is_empty() || rest.starts_with('/')) {
                return None;
            }
            rest
        };
        let rest = rest.trim_start_matches('/');
        Some(if rest.is_empty() {
            mount.mount_point.clone()
        } else {
            mount.mount_point.join(rest)
        })
    })
}

/// An absolute hierarchy path without empty, `.` or `..` components (the root `/` is clean).
pub(crate) fn is_clean(path: &str) -> bool {
    path == "/"
        || (path.starts_with('/')
            && path[1..]
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".."))
}

/// The name of the directory one owner process keeps its cgroups in.
pub(crate) fn owner_dir_name(pid: i32, start_time_ticks: u64) -> String {
    format!("rho-{pid}-{start_time_ticks}")
}

/// The owner (pid, start time) an owner directory name stands for.
pub(crate) fn parse_owner_dir_name(name: &str) -> Option<(i32, u64)> {
    let (pid, start) = name.strip_prefix("rho-")?.split_once('-')?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// A cgroup name for `label` that is always a valid, single, bounded directory name:
/// the label itself when it is short and plain, otherwise a digest of it.
pub fn cgroup_name(label: &str) -> String {
    let plain = !label.is_empty()
        && label.len() <= 160
        && !label.starts_with('.')
        && !label.starts_with("cgroup.")
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if plain {
        label.to_owned()
    } else {
        let digest = rho_ipc::digest::sha256_tagged(label.as_bytes());
        let hex = digest.trim_start_matches("sha256:");
        format!("h-{}", &hex[..32.min(hex.len())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cgroup_is_the_unified_line() {
        let text = "9:name=systemd:/\n4:memory:/x/y\n0::/user.slice/a.scope\n";
        assert_eq!(own_cgroup(text).as_deref(), Some("/user.slice/a.scope"));
        assert_eq!(own_cgroup("0::/\n").as_deref(), Some("/"));
        assert_eq!(own_cgroup("4:memory:/x\n"), None, "v1 only");
        assert_eq!(own_cgroup("0::relative\n"), None);
    }

    #[test]
    fn cgroup2_mounts_are_found_with_their_root_and_unescaped_point() {
        let text = "22 27 0:21 / /proc rw - proc proc rw\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                    50 31 0:38 /a\\040b /mnt/cg\\040two rw shared:3 - cgroup2 none rw\n";
        let mounts = cgroup2_mounts(text);
        assert_eq!(
            mounts,
            vec![
                Mount {
                    root: "/".to_owned(),
                    mount_point: PathBuf::from("/sys/fs/cgroup/unified"),
                },
                Mount {
                    root: "/a b".to_owned(),
                    mount_point: PathBuf::from("/mnt/cg two"),
                },
            ]
        );
    }

    #[test]
    fn directories_resolve_through_a_mount_that_shows_the_path() {
        let mounts = vec![
            Mount {
                root: "/sub".to_owned(),
                mount_point: PathBuf::from("/m1"),
            },
            Mount {
                root: "/".to_owned(),
                mount_point: PathBuf::from("/m2"),
            },
        ];
        assert_eq!(
            directory_of(&mounts, "/sub/x"),
            Some(PathBuf::from("/m1/x"))
        );
        assert_eq!(directory_of(&mounts, "/sub"), Some(PathBuf::from("/m1")));
        assert_eq!(
            directory_of(&mounts, "/subway"),
            Some(PathBuf::from("/m2/subway")),
            "a sibling with the same prefix is not under /sub"
        );
        assert_eq!(directory_of(&mounts, "/"), Some(PathBuf::from("/m2")));
        assert_eq!(directory_of(&mounts, "/a/../b"), None);
        assert_eq!(directory_of(&mounts[..1], "/other"), None);
    }

    #[test]
    fn clean_paths_cannot_climb() {
        assert!(is_clean("/"));
        assert!(is_clean("/a/b"));
        assert!(!is_clean("/a//b"));
        assert!(!is_clean("/a/.."));
        assert!(!is_clean("a/b"));
        assert!(!is_clean("/a/"));
    }

    #[test]
    fn owner_dir_names_round_trip() {
        let name = owner_dir_name(42, 1234);
        assert_eq!(name, "rho-42-1234");
        assert_eq!(parse_owner_dir_name(&name), Some((42, 1234)));
        assert_eq!(parse_owner_dir_name("rho-x-1"), None);
        assert_eq!(parse_owner_dir_name("other"), None);
    }

    #[test]
    fn cgroup_names_are_plain_or_digested() {
        assert_eq!(cgroup_name("run.build.1"), "run.build.1");
        for odd in ["", "..", "a/b", "cgroup.procs", ".hidden", &"x".repeat(200)] {
            let name = cgroup_name(odd);
            assert!(
                name.starts_with("h-") && name.len() == 34,
                "{odd:?} -> {name}"
            );
        }
        assert_ne!(cgroup_name("a/b"), cgroup_name("a/c"));
    }
}
