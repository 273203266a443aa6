//! Exact string replacement in a file's text, the core of `edit_file`. Pure.
//!
//! Invariant: the text changes only where `old_string` occurs exactly (CRLF and LF treated
//! alike); an absent or ambiguous match changes nothing and says why.

/// Why a replacement was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplaceError {
    /// `old_string` is empty.
    #[error("argument `old_string` is empty; use write_file to create or rewrite a file")]
    EmptyOld,
    /// `old_string` and `new_string` are the same.
    #[error("arguments `old_string` and `new_string` are identical; nothing would change")]
    NoChange,
    /// `old_string` does not occur.
    #[error("`old_string` was not found in `{path}`{hint}")]
    NotFound {
        /// The file.
        path: String,
        /// A hint when a whitespace-insensitive match exists.
        hint: String,
    },
    /// `old_string` occurs more than once and `replace_all` is not set.
    #[error(
        "`old_string` occurs {count} times in `{path}`; add surrounding lines to make it unique \
         or set `replace_all`"
    )]
    Ambiguous {
        /// The file.
        path: String,
        /// How many times it occurs.
        count: usize,
    },
}

/// The result of a replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    /// The new text.
    pub text: String,
    /// How many occurrences were replaced.
    pub count: usize,
    /// 1-based line of the first replacement in the new text.
    pub first_line: usize,
}

/// Replaces `old` with `new` in `text` (the content of `path`): exactly once unless
/// `replace_all`. Newlines in `old` and `new` match and take the file's style: a file whose
/// line endings are all CRLF keeps CRLF.
pub fn replace(
    text: &str,
    old: &str,
    new: &str,
    replace_all: bool,
    path: &str,
) -> Result<Replaced, ReplaceError> {
    if old.is_empty() {
        return Err(ReplaceError::EmptyOld);
    }
    let old = old.replace("\r\n", "\n");
    let new = new.replace("\r\n", "\n");
    if old == new {
        return Err(ReplaceError::NoChange);
    }
    let crlf = text.contains("\r\n") && !text.replace("\r\n", "").contains('\n');
    let body = if crlf {
        text.replace("\r\n", "\n")
    } else {
        text.to_owned()
    };
    let count = body.matches(old.as_str()).count();
    if count == 0 {
        let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let hint = if !squash(&old).is_empty() && squash(&body).contains(&squash(&old)) {
            " (a match exists when whitespace is ignored: copy the exact indentation and line \
             breaks from read_file)"
                .to_owned()
        } else {
            String::new()
        };
        return Err(ReplaceError::NotFound {
            path: path.to_owned(),
            hint,
        });
    }
    if count > 1 && !replace_all {
        return Err(ReplaceError::Ambiguous {
            path: path.to_owned(),
            count,
        });
    }
    let first = body.find(old.as_str()).unwrap_or(0);
    let first_line = body[..first].matches('\n').count() + 1;
    let replaced = body.replace(old.as_str(), &new);
    let text = if crlf {
        replaced.replace('\n', "\r\n")
    } else {
        replaced
    };
    Ok(Replaced {
        text,
        count,
        first_line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_a_unique_match() {
        let r = replace("a\nb\nc\n", "b", "B", false, "f").unwrap();
        assert_eq!(r.text, "a\nB\nc\n");
        assert_eq!((r.count, r.first_line), (1, 2));
    }

    #[test]
    fn ambiguity_needs_replace_all() {
        assert_eq!(
            replace("x x", "x", "y", false, "f"),
            Err(ReplaceError::Ambiguous {
                path: "f".into(),
                count: 2
            })
        );
        assert_eq!(replace("x x", "x", "y", true, "f").unwrap().text, "y y");
    }

    #[test]
    fn refusals_say_why() {
        assert_eq!(
            replace("a", "", "b", false, "f"),
            Err(ReplaceError::EmptyOld)
        );
        assert_eq!(
            replace("a", "a", "a", false, "f"),
            Err(ReplaceError::NoChange)
        );
        let err = replace("fn  main()", "fn main()", "x", false, "f").unwrap_err();
        assert!(err.to_string().contains("whitespace is ignored"), "{err}");
        let err = replace("abc", "zzz", "x", false, "f").unwrap_err();
        assert_eq!(err.to_string(), "`old_string` was not found in `f`");
    }

    #[test]
    fn crlf_files_match_lf_strings_and_keep_crlf() {
        let r = replace("one\r\ntwo\r\n", "one\ntwo", "1\n2", false, "f").unwrap();
        assert_eq!(r.text, "1\r\n2\r\n");
    }
}
