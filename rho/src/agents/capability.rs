//! Rho 1.47's capability vocabulary: the names a `tools:` list may use, and the aliases that
//! name one capability.
//!
//! Rho renamed its file tools and kept the old names working: `write` and `write_file` are one
//! capability, and `edit`, `edit_file`, `apply_patch`, `hashline` and `str_replace` are one
//! capability (the host picks the model-facing edit tool). Definitions that differ only in
//! which alias they use behave the same, so they have the same fingerprint; binding grants the
//! host's tool of that name when the host supplies it, else the canonical tool.
//!
//! Invariant: [`canonical`] is idempotent and maps every alias of one capability to one name.

/// The canonical name of the write capability (our tool's name).
pub const WRITE: &str = "write_file";
/// The canonical name of the edit capability (our tool's name).
pub const EDIT: &str = "edit_file";

/// The canonical name of a capability: aliases map to [`WRITE`] or [`EDIT`], every other name
/// to itself.
pub fn canonical(name: &str) -> &str {
    match name {
        "write" | "write_file" => WRITE,
        "edit" | "edit_file" | "apply_patch" | "hashline" | "str_replace" => EDIT,
        other => other,
    }
}

/// Whether two names are aliases of one capability.
pub fn same(a: &str, b: &str) -> bool {
    canonical(a) == canonical(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_share_one_capability() {
        assert!(same("write", "write_file"));
        for edit in [
            "edit",
            "edit_file",
            "apply_patch",
            "hashline",
            "str_replace",
        ] {
            assert_eq!(canonical(edit), EDIT);
            assert_eq!(canonical(canonical(edit)), EDIT);
        }
        assert!(!same("write", "edit"));
        assert_eq!(canonical("read_file"), "read_file");
    }
}
