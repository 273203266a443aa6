//! Plan and run ids: random UUIDs (version 4) in lowercase canonical form, and the
//! unique-prefix lookup the command line accepts.
//!
//! Invariant: a prefix resolves to an id only when exactly one stored id starts with it;
//! an ambiguous or unknown prefix is an error that says which.

use super::StoreError;

/// A new random id (`xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx`, lowercase).
pub fn new_id() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// Whether `text` is an id in lowercase canonical UUID form.
pub fn is_id(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(b),
        })
}

/// Resolves `prefix` (or a whole id) against `ids`, naming `kind` (`plan`, `run`) in errors.
pub fn resolve_prefix<'a>(
    kind: &'static str,
    prefix: &str,
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<String, StoreError> {
    let valid = !prefix.is_empty()
        && prefix.len() <= 36
        && prefix
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-');
    if !valid {
        return Err(StoreError::InvalidId {
            kind,
            prefix: prefix.to_owned(),
        });
    }
    let mut matches: Vec<String> = ids
        .into_iter()
        .filter(|id| id.starts_with(prefix))
        .map(str::to_owned)
        .collect();
    matches.sort();
    matches.dedup();
    match matches.len() {
        0 => Err(StoreError::UnknownId {
            kind,
            prefix: prefix.to_owned(),
        }),
        1 => Ok(matches.remove(0)),
        _ => Err(StoreError::AmbiguousId {
            kind,
            prefix: prefix.to_owned(),
            matches,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_are_lowercase_v4() {
        let id = new_id();
        assert!(is_id(&id), "{id}");
        assert_eq!(&id[14..15], "4");
        assert!(!is_id(&id.to_uppercase()));
        assert!(!is_id("not-an-id"));
    }

    #[test]
    fn prefixes_resolve_only_when_unique() {
        let ids = [
            "abc00000-0000-4000-8000-000000000000",
            "abd00000-0000-4000-8000-000000000000",
        ];
        assert_eq!(resolve_prefix("plan", "abc", ids).unwrap(), ids[0]);
        assert_eq!(resolve_prefix("plan", ids[1], ids).unwrap(), ids[1]);
        let err = resolve_prefix("plan", "ab", ids).unwrap_err();
        assert!(matches!(&err, StoreError::AmbiguousId { matches, .. } if matches.len() == 2));
        assert!(err.to_string().contains("ambiguous"), "{err}");
        let err = resolve_prefix("plan", "ff", ids).unwrap_err();
        assert_eq!(err.to_string(), "no plan matches `ff`");
        assert!(matches!(
            resolve_prefix("plan", "../x", ids),
            Err(StoreError::InvalidId { .. })
        ));
        assert!(matches!(
            resolve_prefix("plan", "", ids),
            Err(StoreError::InvalidId { .. })
        ));
    }
}
