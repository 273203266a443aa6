//! Text that reaches a terminal: the one place where control characters from untrusted
//! sources (a workflow's `fail()` message or module label, a node's output, a model's answer)
//! are made visible instead of being interpreted.
//!
//! Invariant: every text renderer passes untrusted strings through [`escape_controls`] (one
//! line) or [`escape_controls_keep_lines`] (several lines), so no workflow, file or model can
//! erase or rewrite what rho printed, retitle the window or set the clipboard (OSC 52). Escape
//! sequences rho itself draws (the live view, colours) are added after escaping.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every C0 control (newline and tab included), DEL and C1 control shown as a
/// visible form: `^X` caret notation for C0 and DEL, `\u{9b}` for C1.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    escape(text, Keep::Nothing)
}

/// Like [`escape_controls`], but tab is kept: for one line whose columns matter (a line of a
/// node's output, a source line with a caret under it).
pub fn escape_controls_keep_tabs(text: &str) -> Cow<'_, str> {
    escape(text, Keep::Tabs)
}

/// Like [`escape_controls`], but newline and tab are kept: for text that is meant to span
/// lines (error messages with several diagnostics, a node's output tail).
pub fn escape_controls_keep_lines(text: &str) -> Cow<'_, str> {
    escape(text, Keep::Lines)
}

/// Which layout controls stay as they are.
#[derive(Clone, Copy)]
enum Keep {
    Nothing,
    Tabs,
    Lines,
}

fn is_control(c: char, keep: Keep) -> bool {
    match (c, keep) {
        ('\t', Keep::Tabs | Keep::Lines) | ('\n', Keep::Lines) => false,
        (c, _) => c.is_control(),
    }
}

fn escape(text: &str, keep: Keep) -> Cow<'_, str> {
    if !text.chars().any(|c| is_control(c, keep)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !is_control(c, keep) {
            out.push(c);
            continue;
        }
        let code = u32::from(c);
        match u8::try_from(code) {
            Ok(byte) if byte < 0x20 => {
                out.push('^');
                out.push(char::from(b'@' + byte));
            }
            Ok(0x7f) => out.push_str("^?"),
            _ => {
                let _ = write!(out, "\\u{{{code:x}}}");
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        assert!(matches!(escape_controls("ok: 3 nodes é"), Cow::Borrowed(_)));
        assert!(matches!(
            escape_controls_keep_lines("a\n\tb"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn escape_sequences_become_visible() {
        // Erase the line, print a fake verdict, retitle the window, set the clipboard.
        let attack = "\u{1b}[2K\rvalid\u{1b}]0;title\u{7}\u{1b}]52;c;SGk=\u{7}";
        let shown = escape_controls(attack);
        assert_eq!(shown, "^[[2K^Mvalid^[]0;title^G^[]52;c;SGk=^G");
        assert!(!shown.chars().any(char::is_control));
    }

    #[test]
    fn c1_controls_and_del_are_escaped() {
        assert_eq!(escape_controls("a\u{9b}31mb\u{7f}"), "a\\u{9b}31mb^?");
        assert_eq!(escape_controls("\u{85}"), "\\u{85}");
    }

    #[test]
    fn newlines_and_tabs_are_kept_only_when_asked() {
        assert_eq!(escape_controls("a\nb\tc"), "a^Jb^Ic");
        assert_eq!(escape_controls_keep_lines("a\nb\tc\r"), "a\nb\tc^M");
        assert_eq!(escape_controls_keep_tabs("a\nb\tc\r"), "a^Jb\tc^M");
    }
}
