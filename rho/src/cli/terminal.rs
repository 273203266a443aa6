//! What the text outputs need to know about the terminal: its width (for a live line that
//! must not wrap) and whether to use colour (`NO_COLOR`, no-color.org).
//!
//! Invariant: the one `unsafe` block here only reads the window size of a descriptor this
//! process holds into a local struct; colour is off unless stdout is a terminal and
//! `NO_COLOR` is unset or empty.
#![allow(unsafe_code)]

use std::io::IsTerminal as _;
use std::os::fd::AsRawFd as _;

/// The width of the terminal on stdout, in columns (`None` when stdout is not a terminal or
/// the size is unknown).
pub fn stdout_columns() -> Option<usize> {
    let stdout = std::io::stdout();
    if !stdout.is_terminal() {
        return None;
    }
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the pointer given, which points to a live,
    // properly aligned local of that type; the descriptor is stdout, open for the whole call.
    let rc = unsafe { libc::ioctl(stdout.as_raw_fd(), libc::TIOCGWINSZ, &raw mut size) };
    (rc == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// Whether text on stdout may be coloured: a terminal, and `NO_COLOR` unset or empty.
pub fn stdout_colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// ANSI colours used by the summaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    /// Success.
    Green,
    /// Failure.
    Red,
    /// Neither (skipped, blocked, cancelled).
    Yellow,
    /// Secondary detail.
    Dim,
}

/// `text` wrapped in `colour` when `on`, else unchanged.
pub fn paint(text: &str, colour: Colour, on: bool) -> String {
    if !on {
        return text.to_owned();
    }
    let code = match colour {
        Colour::Green => "32",
        Colour::Red => "31",
        Colour::Yellow => "33",
        Colour::Dim => "2",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// Clips `text` to `width` characters (a live line that wraps cannot be erased with `\r`).
pub fn clip_to(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paint_and_clip() {
        assert_eq!(paint("ok", Colour::Green, false), "ok");
        assert_eq!(paint("ok", Colour::Red, true), "\x1b[31mok\x1b[0m");
        assert_eq!(clip_to("abcdef", 4), "abc…");
        assert_eq!(clip_to("abc", 4), "abc");
    }
}
