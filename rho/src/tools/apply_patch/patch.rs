//! The Codex patch format: parsing a patch document and applying its update chunks to a
//! file's text. Pure: no file system access.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: docs/new.md
//! +first line
//! *** Update File: src/app.py
//! *** Move to: src/main.py
//! @@ def greet():
//! -    print("hi")
//! +    print("hello")
//! *** Delete File: old.txt
//! *** End Patch
//! ```
//!
//! Invariant: a chunk is applied only where its old lines (context and removals) occur in
//! order after the previous chunk; matching tries exact lines, then lines with trailing
//! whitespace ignored, then with surrounding whitespace ignored — never anything looser — and
//! a chunk that matches nowhere fails the whole patch.

use std::fmt;

/// Why a patch document is invalid or does not apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatchError {
    /// The document breaks the format at a line.
    #[error("patch line {line}: {problem}")]
    Syntax {
        /// 1-based line of the patch document.
        line: usize,
        /// What is wrong there.
        problem: String,
    },
    /// An update chunk's `@@` context line occurs nowhere after the previous chunk.
    #[error("`{path}` chunk {chunk}: context line `{context}` not found")]
    ContextNotFound {
        /// The file being updated.
        path: String,
        /// 1-based chunk number within the file's section.
        chunk: usize,
        /// The `@@` context text.
        context: String,
    },
    /// An update chunk's old lines occur nowhere after the previous chunk.
    #[error("`{path}` chunk {chunk}: these lines were not found in the file:\n{expected}")]
    LinesNotFound {
        /// The file being updated.
        path: String,
        /// 1-based chunk number within the file's section.
        chunk: usize,
        /// The old lines (context and removals) that were expected, one per line.
        expected: String,
    },
}

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    /// Create a file that must not exist yet.
    Add {
        /// Workspace-relative path.
        path: String,
        /// The new file's content (each `+` line followed by a newline).
        contents: String,
    },
    /// Delete an existing file.
    Delete {
        /// Workspace-relative path.
        path: String,
    },
    /// Change an existing file, optionally moving it.
    Update {
        /// Workspace-relative path.
        path: String,
        /// New workspace-relative path, when the file moves.
        move_to: Option<String>,
        /// The changes, in file order.
        chunks: Vec<Chunk>,
    },
}

impl FileOp {
    /// The path the operation names first.
    pub fn path(&self) -> &str {
        match self {
            FileOp::Add { path, .. } | FileOp::Delete { path } | FileOp::Update { path, .. } => {
                path
            }
        }
    }
}

/// One `@@` chunk of an update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chunk {
    /// The text after `@@ `, a line to find before the chunk's old lines.
    pub context: Option<String>,
    /// Context and removed lines, in order.
    pub old: Vec<String>,
    /// Context and added lines, in order.
    pub new: Vec<String>,
    /// The chunk is anchored at the end of the file (`*** End of File`).
    pub end_of_file: bool,
}

/// A parsed patch document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// The operations in document order.
    pub ops: Vec<FileOp>,
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const EOF_MARK: &str = "*** End of File";

/// Parses a patch document. Paths must be workspace-relative without `..`.
pub fn parse(input: &str) -> Result<Patch, PatchError> {
    let lines: Vec<&str> = input.trim().lines().collect();
    let syntax = |line: usize, problem: &str| PatchError::Syntax {
        line,
        problem: problem.to_owned(),
    };
    // Models sometimes wrap the document in a shell heredoc; accept exactly that wrapper.
    let (lines, offset) = match (lines.first(), lines.last()) {
        (Some(first), Some(last))
            if first.trim_start().starts_with("<<") && lines.len() >= 2 && {
                let tag = first
                    .trim_start()
                    .trim_start_matches("<<")
                    .trim_matches(['\'', '"']);
                last.trim() == tag.trim()
            } =>
        {
            (&lines[1..lines.len() - 1], 1)
        }
        _ => (&lines[..], 0),
    };
    let number = |i: usize| i + 1 + offset;
    if lines.first().map(|l| l.trim()) != Some(BEGIN) {
        return Err(syntax(
            number(0),
            "the patch must start with `*** Begin Patch`",
        ));
    }
    if lines.len() < 2 || lines.last().map(|l| l.trim()) != Some(END) {
        return Err(syntax(
            number(lines.len().saturating_sub(1)),
            "the patch must end with `*** End Patch`",
        ));
    }
    let body = &lines[1..lines.len() - 1];
    let mut ops = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line_no = number(i + 1);
        let line = body[i];
        if let Some(path) = line.strip_prefix(ADD) {
            let path = check_path(path, line_no)?;
            i += 1;
            let mut contents = String::new();
            while i < body.len() && !body[i].starts_with("*** ") {
                let Some(text) = body[i].strip_prefix('+') else {
                    return Err(syntax(
                        number(i + 1),
                        "every line of an added file must start with `+`",
                    ));
                };
                contents.push_str(text);
                contents.push('\n');
                i += 1;
            }
            ops.push(FileOp::Add { path, contents });
        } else if let Some(path) = line.strip_prefix(DELETE) {
            ops.push(FileOp::Delete {
                path: check_path(path, line_no)?,
            });
            i += 1;
        } else if let Some(path) = line.strip_prefix(UPDATE) {
            let path = check_path(path, line_no)?;
            i += 1;
            let mut move_to = None;
            if let Some(dest) = body.get(i).and_then(|l| l.strip_prefix(MOVE)) {
                move_to = Some(check_path(dest, number(i + 1))?);
                i += 1;
            }
            let mut chunks: Vec<Chunk> = Vec::new();
            let mut current: Option<Chunk> = None;
            while i < body.len() {
                let text = body[i];
                if text.trim_end() == EOF_MARK {
                    let Some(mut chunk) = current.take() else {
                        return Err(syntax(number(i + 1), "`*** End of File` outside a chunk"));
                    };
                    chunk.end_of_file = true;
                    chunks.push(chunk);
                    i += 1;
                    continue;
                }
                if text.starts_with("*** ") {
                    break;
                }
                if let Some(rest) = text.strip_prefix("@@") {
                    if let Some(done) = current.take() {
                        chunks.push(done);
                    }
                    let context = rest.strip_prefix(' ').unwrap_or(rest);
                    current = Some(Chunk {
                        context: (!context.trim().is_empty()).then(|| context.to_owned()),
                        ..Chunk::default()
                    });
                    i += 1;
                    continue;
                }
                if current.is_none() && chunks.is_empty() {
                    // The first chunk may omit its `@@` line.
                    current = Some(Chunk::default());
                }
                let Some(chunk) = current.as_mut() else {
                    return Err(syntax(
                        number(i + 1),
                        "a chunk must start with `@@` after `*** End of File`",
                    ));
                };
                if text.is_empty() {
                    chunk.old.push(String::new());
                    chunk.new.push(String::new());
                } else if let Some(rest) = text.strip_prefix(' ') {
                    chunk.old.push(rest.to_owned());
                    chunk.new.push(rest.to_owned());
                } else if let Some(rest) = text.strip_prefix('-') {
                    chunk.old.push(rest.to_owned());
                } else if let Some(rest) = text.strip_prefix('+') {
                    chunk.new.push(rest.to_owned());
                } else {
                    return Err(syntax(
                        number(i + 1),
                        "a chunk line must start with ` `, `-` or `+` (or be `@@`)",
                    ));
                }
                i += 1;
            }
            if let Some(chunk) = current.take() {
                chunks.push(chunk);
            }
            if chunks.iter().all(|c| c.old.is_empty() && c.new.is_empty()) && move_to.is_none() {
                return Err(syntax(line_no, "`*** Update File` without any change"));
            }
            ops.push(FileOp::Update {
                path,
                move_to,
                chunks,
            });
        } else {
            return Err(syntax(
                line_no,
                "expected `*** Add File: `, `*** Delete File: ` or `*** Update File: `",
            ));
        }
    }
    if ops.is_empty() {
        return Err(syntax(number(0), "the patch changes no file"));
    }
    Ok(Patch { ops })
}

/// A patch path must be relative, non-empty, and free of `..` parts.
fn check_path(path: &str, line: usize) -> Result<String, PatchError> {
    let path = path.trim();
    let problem = if path.is_empty() {
        Some("empty path")
    } else if path.starts_with('/') {
        Some("patch paths must be workspace-relative, not absolute")
    } else if path.split('/').any(|part| part == "..") {
        Some("patch paths must not contain `..`")
    } else if path.contains('\0') {
        Some("the path contains a NUL byte")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(PatchError::Syntax {
            line,
            problem: format!("`{path}`: {problem}"),
        }),
        None => Ok(path.to_owned()),
    }
}

/// Applies `chunks` to `original` (the text of `path`). The result ends with a newline; a
/// file that used CRLF line endings keeps them.
pub fn apply_chunks(original: &str, chunks: &[Chunk], path: &str) -> Result<String, PatchError> {
    let crlf = original.contains("\r\n");
    let normalized;
    let text = if crlf {
        normalized = original.replace("\r\n", "\n");
        normalized.as_str()
    } else {
        original
    };
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    let mut replacements: Vec<(usize, usize, &[String])> = Vec::new();
    let mut next = 0;
    for (n, chunk) in chunks.iter().enumerate() {
        if let Some(context) = &chunk.context {
            let Some(at) = seek(&lines, std::slice::from_ref(context), next, false) else {
                return Err(PatchError::ContextNotFound {
                    path: path.to_owned(),
                    chunk: n + 1,
                    context: context.clone(),
                });
            };
            next = at + 1;
        }
        if chunk.old.is_empty() {
            // Pure addition: after the context line when there is one, else at the end.
            let at = if chunk.context.is_some() && !chunk.end_of_file {
                next
            } else {
                lines.len()
            };
            replacements.push((at, 0, &chunk.new));
            continue;
        }
        let mut old: &[String] = &chunk.old;
        let mut new: &[String] = &chunk.new;
        let mut found = seek(&lines, old, next, chunk.end_of_file);
        if found.is_none() && old.last().is_some_and(String::is_empty) {
            // A trailing empty context line stands for the file's final newline.
            old = &old[..old.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            found = seek(&lines, old, next, chunk.end_of_file);
        }
        let Some(start) = found else {
            return Err(PatchError::LinesNotFound {
                path: path.to_owned(),
                chunk: n + 1,
                expected: chunk.old.join("\n"),
            });
        };
        replacements.push((start, old.len(), new));
        next = start + old.len();
    }
    replacements.sort_by_key(|(start, _, _)| *start);
    let mut out: Vec<&str> = lines;
    for (start, len, new) in replacements.into_iter().rev() {
        out.splice(start..start + len, new.iter().map(String::as_str));
    }
    let mut result = out.join("\n");
    result.push('\n');
    if crlf {
        result = result.replace('\n', "\r\n");
    }
    Ok(result)
}

/// The first index at or after `start` where `pattern` occurs in `lines` (from the end when
/// `at_end`), comparing exactly, then ignoring trailing whitespace, then ignoring
/// surrounding whitespace.
fn seek(lines: &[&str], pattern: &[String], start: usize, at_end: bool) -> Option<usize> {
    if pattern.is_empty() {
        return Some(start.min(lines.len()));
    }
    if pattern.len() > lines.len() {
        return None;
    }
    let last = lines.len() - pattern.len();
    let from = if at_end { last } else { start };
    let passes: [fn(&str, &str) -> bool; 3] = [
        |a, b| a == b,
        |a, b| a.trim_end() == b.trim_end(),
        |a, b| a.trim() == b.trim(),
    ];
    for matches in passes {
        for i in from..=last {
            if pattern.iter().zip(&lines[i..]).all(|(p, l)| matches(l, p)) {
                return Some(i);
            }
        }
        if at_end {
            // An end-anchored chunk may also sit anywhere after `start` when the file grew.
            for i in start.min(last)..last {
                if pattern.iter().zip(&lines[i..]).all(|(p, l)| matches(l, p)) {
                    return Some(i);
                }
            }
        }
    }
    None
}

impl fmt::Display for FileOp {
    /// One line for summaries: `A path`, `D path`, `M path` or `M path -> dest`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileOp::Add { path, .. } => write!(f, "A {path}"),
            FileOp::Delete { path } => write!(f, "D {path}"),
            FileOp::Update {
                path,
                move_to: Some(dest),
                ..
            } => write!(f, "M {path} -> {dest}"),
            FileOp::Update { path, .. } => write!(f, "M {path}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(body: &str) -> String {
        format!("*** Begin Patch\n{body}*** End Patch\n")
    }

    #[test]
    fn parses_every_operation() {
        let p = parse(&patch(
            "*** Add File: a/new.txt\n+one\n+two\n*** Delete File: old.txt\n\
             *** Update File: src/x.rs\n*** Move to: src/y.rs\n@@ fn main() {\n-    a();\n+    b();\n \
             c();\n*** End of File\n",
        ))
        .unwrap();
        assert_eq!(
            p.ops,
            vec![
                FileOp::Add {
                    path: "a/new.txt".into(),
                    contents: "one\ntwo\n".into()
                },
                FileOp::Delete {
                    path: "old.txt".into()
                },
                FileOp::Update {
                    path: "src/x.rs".into(),
                    move_to: Some("src/y.rs".into()),
                    chunks: vec![Chunk {
                        context: Some("fn main() {".into()),
                        old: vec!["    a();".into(), "c();".into()],
                        new: vec!["    b();".into(), "c();".into()],
                        end_of_file: true,
                    }],
                },
            ]
        );
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let cases = [
            ("*** Add File: x\n", 1, "start with"),
            ("*** Begin Patch\n*** Add File: x\n+a\n", 3, "end with"),
            (
                "*** Begin Patch\n*** Add File: x\nno plus\n*** End Patch",
                3,
                "`+`",
            ),
            (
                "*** Begin Patch\n*** Add File: /etc/x\n*** End Patch",
                2,
                "absolute",
            ),
            (
                "*** Begin Patch\n*** Delete File: a/../../x\n*** End Patch",
                2,
                "`..`",
            ),
            (
                "*** Begin Patch\n*** Frobnicate: x\n*** End Patch",
                2,
                "expected",
            ),
            (
                "*** Begin Patch\n*** Update File: x\n*** End Patch",
                2,
                "without any change",
            ),
            (
                "*** Begin Patch\n*** Update File: x\n@@\n?odd\n*** End Patch",
                4,
                "start with ` `",
            ),
            ("*** Begin Patch\n*** End Patch", 1, "no file"),
        ];
        for (input, line, needle) in cases {
            match parse(input) {
                Err(PatchError::Syntax { line: got, problem }) => {
                    assert_eq!(got, line, "{input:?}: {problem}");
                    assert!(problem.contains(needle), "{input:?}: {problem}");
                }
                other => panic!("{input:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn heredoc_wrapper_is_accepted() {
        let p =
            parse("<<'EOF'\n*** Begin Patch\n*** Delete File: a\n*** End Patch\nEOF\n").unwrap();
        assert_eq!(p.ops.len(), 1);
    }

    fn update(body: &str) -> Vec<Chunk> {
        match parse(&patch(&format!("*** Update File: f\n{body}")))
            .unwrap()
            .ops
            .remove(0)
        {
            FileOp::Update { chunks, .. } => chunks,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn chunks_apply_in_order_with_context() {
        let original = "fn a() {\n    x();\n}\nfn b() {\n    x();\n}\n";
        let chunks = update("@@ fn b() {\n-    x();\n+    y();\n");
        assert_eq!(
            apply_chunks(original, &chunks, "f").unwrap(),
            "fn a() {\n    x();\n}\nfn b() {\n    y();\n}\n"
        );
        let chunks = update("@@\n-    x();\n+    z();\n@@\n-    x();\n+    w();\n");
        assert_eq!(
            apply_chunks(original, &chunks, "f").unwrap(),
            "fn a() {\n    z();\n}\nfn b() {\n    w();\n}\n"
        );
    }

    #[test]
    fn whitespace_tolerance_and_end_of_file() {
        let original = "a  \nb\nb\n";
        // Context matched ignoring trailing blanks is written as the patch gives it.
        let chunks = update("@@\n a\n-b\n+c\n");
        assert_eq!(apply_chunks(original, &chunks, "f").unwrap(), "a\nc\nb\n");
        let chunks = update("@@\n-b\n+end\n*** End of File\n");
        assert_eq!(
            apply_chunks(original, &chunks, "f").unwrap(),
            "a  \nb\nend\n"
        );
        let chunks = update("@@\n+appended\n");
        assert_eq!(apply_chunks("x", &chunks, "f").unwrap(), "x\nappended\n");
    }

    #[test]
    fn crlf_files_keep_their_line_endings() {
        let chunks = update("@@\n-two\n+TWO\n");
        assert_eq!(
            apply_chunks("one\r\ntwo\r\n", &chunks, "f").unwrap(),
            "one\r\nTWO\r\n"
        );
    }

    #[test]
    fn missing_lines_and_context_are_reported() {
        let chunks = update("@@\n-nope\n+x\n");
        assert_eq!(
            apply_chunks("a\n", &chunks, "f"),
            Err(PatchError::LinesNotFound {
                path: "f".into(),
                chunk: 1,
                expected: "nope".into()
            })
        );
        let chunks = update("@@ missing\n-a\n+b\n");
        assert!(matches!(
            apply_chunks("a\n", &chunks, "f"),
            Err(PatchError::ContextNotFound { chunk: 1, .. })
        ));
    }
}
