//! What the interactive session prints: the assistant's text as it streams, one compact line
//! per tool call and one per result, errors and turn footers.
//!
//! Invariant: every byte that came from the model, a tool or a file passes through
//! [`sanitize`] before reaching the terminal, so no answer can move the cursor, change
//! colours, set the window title or otherwise rewrite what the user sees; and every piece of
//! streamed text is flushed as soon as it is written.

use std::io::{self, Write};

use serde_json::Value;

/// Longest argument preview on a tool-call line, in characters.
const ARG_PREVIEW: usize = 120;

/// Result lines shown under a tool call before the rest is counted.
const RESULT_LINES: usize = 4;

/// Replaces control characters other than newline and tab (escape sequences, carriage
/// returns, backspaces, bells) with visible `^X` / `\u{..}` forms.
pub fn sanitize(text: &str) -> String {
    crate::terminal::escape_controls_keep_lines(text).into_owned()
}

/// The one-line preview of a tool call's arguments: the argument a person recognizes the
/// call by (`command`, `path`, `pattern`, the patch's first file), else compact JSON.
pub fn call_preview(tool: &str, args: &Value) -> String {
    let field = |name: &str| args.get(name).and_then(Value::as_str);
    let text = match tool {
        "bash" | "shell" => field("command").map(str::to_owned),
        "grep" | "glob" => field("pattern").map(|p| match field("path") {
            Some(path) => format!("{p}  in {path}"),
            None => p.to_owned(),
        }),
        "apply_patch" => field("input").map(|input| {
            let files: Vec<&str> = input
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("*** Add File: ")
                        .or_else(|| l.strip_prefix("*** Update File: "))
                        .or_else(|| l.strip_prefix("*** Delete File: "))
                })
                .collect();
            files.join(", ")
        }),
        _ => field("path").map(str::to_owned),
    };
    let text = text.unwrap_or_else(|| args.to_string());
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate_chars(&sanitize(&one_line), ARG_PREVIEW)
}

fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Writes the session's output to a terminal (or any writer, in tests).
#[derive(Debug)]
pub struct Renderer<W: Write> {
    out: W,
    /// The cursor is in the middle of a line of assistant text.
    mid_line: bool,
}

impl<W: Write> Renderer<W> {
    /// A renderer writing to `out`.
    pub fn new(out: W) -> Self {
        Renderer {
            out,
            mid_line: false,
        }
    }

    /// The writer (tests read what was printed).
    pub fn into_inner(self) -> W {
        self.out
    }

    fn end_line(&mut self) -> io::Result<()> {
        if self.mid_line {
            self.out.write_all(b"\n")?;
            self.mid_line = false;
        }
        Ok(())
    }

    /// A piece of streamed assistant text.
    pub fn text(&mut self, delta: &str) -> io::Result<()> {
        if delta.is_empty() {
            return Ok(());
        }
        let clean = sanitize(delta);
        self.out.write_all(clean.as_bytes())?;
        self.mid_line = !clean.ends_with('\n');
        self.out.flush()
    }

    /// A tool call about to run.
    pub fn tool_call(&mut self, tool: &str, args: &Value) -> io::Result<()> {
        self.end_line()?;
        writeln!(
            self.out,
            "● {}  {}",
            sanitize(tool),
            call_preview(tool, args)
        )?;
        self.out.flush()
    }

    /// A tool call's result: the first lines of its model-facing summary.
    pub fn tool_result(&mut self, ok: bool, summary: &str) -> io::Result<()> {
        self.end_line()?;
        let clean = sanitize(summary);
        let lines: Vec<&str> = clean.lines().collect();
        let label = if ok { "ok" } else { "error" };
        if lines.is_empty() {
            writeln!(self.out, "  └ {label}")?;
        }
        for (i, line) in lines.iter().take(RESULT_LINES).enumerate() {
            let prefix = if i == 0 {
                format!("  └ {label}: ")
            } else {
                "    ".to_owned()
            };
            writeln!(self.out, "{prefix}{}", truncate_chars(line, 160))?;
        }
        if lines.len() > RESULT_LINES {
            writeln!(self.out, "    … {} more lines", lines.len() - RESULT_LINES)?;
        }
        self.out.flush()
    }

    /// A notice from the session itself (cancellation, a slash command's answer).
    pub fn notice(&mut self, text: &str) -> io::Result<()> {
        self.end_line()?;
        writeln!(self.out, "{}", sanitize(text))?;
        self.out.flush()
    }

    /// An error that ended the turn.
    pub fn error(&mut self, text: &str) -> io::Result<()> {
        self.end_line()?;
        writeln!(self.out, "error: {}", sanitize(text))?;
        self.out.flush()
    }

    /// The end of a turn.
    pub fn turn_end(&mut self) -> io::Result<()> {
        self.end_line()?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escape_sequences_are_made_visible() {
        assert_eq!(sanitize("a\x1b[2Jb\r\n\tc\x07"), "a^[[2Jb^M\n\tc^G");
        assert_eq!(sanitize("\u{9b}31m"), "\\u{9b}31m");
    }

    #[test]
    fn previews_pick_the_telling_argument() {
        assert_eq!(
            call_preview("bash", &json!({"command": "cargo  test\n-q"})),
            "cargo test -q"
        );
        assert_eq!(
            call_preview("read_file", &json!({"path": "src/lib.rs"})),
            "src/lib.rs"
        );
        assert_eq!(
            call_preview("grep", &json!({"pattern": "fn main", "path": "src"})),
            "fn main in src"
        );
        assert_eq!(
            call_preview(
                "apply_patch",
                &json!({"input": "*** Begin Patch\n*** Update File: a.rs\n*** Add File: b.rs\n"})
            ),
            "a.rs, b.rs"
        );
        let long = "x".repeat(500);
        assert_eq!(
            call_preview("bash", &json!({ "command": long }))
                .chars()
                .count(),
            ARG_PREVIEW
        );
    }

    #[test]
    fn tool_lines_start_on_a_fresh_line_and_results_are_bounded() {
        let mut r = Renderer::new(Vec::new());
        r.text("Let me look").unwrap();
        r.tool_call("read_file", &json!({"path": "a.txt"})).unwrap();
        r.tool_result(true, "1\n2\n3\n4\n5\n6").unwrap();
        r.tool_result(false, "denied by policy").unwrap();
        let out = String::from_utf8(r.into_inner()).unwrap();
        assert_eq!(
            out,
            "Let me look\n● read_file  a.txt\n  └ ok: 1\n    2\n    3\n    4\n    … 2 more lines\n  └ error: denied by policy\n"
        );
    }
}
