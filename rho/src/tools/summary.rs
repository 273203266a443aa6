//! Line-oriented, byte-bounded summaries for the model.
//!
//! Invariant: [`bound_lines`] never returns more than `limit` bytes (for any `limit` of at
//! least [`MIN_SUMMARY_LIMIT`]); it keeps whole lines in order while they fit, ends with a
//! notice of what it dropped, and clips — rather than drops — a single line too long to ever
//! fit on its own.

use std::fmt::Write as _;

/// The smallest limit the bound honours exactly; a smaller one is raised to it (the drop
/// notice alone needs this much).
pub const MIN_SUMMARY_LIMIT: usize = 160;

/// The marker appended to a clipped line.
const CLIP_MARK: &str = " …[clipped]";

/// Joins `lines` with a newline after each, keeping the result within `limit` bytes.
///
/// When everything fits, the result is every line. Otherwise the longest prefix of lines that
/// fits (leaving room for the notice) is kept, and a last line says how many lines and bytes
/// were dropped and the limit. A line longer than the whole budget is clipped at a character
/// boundary and marked, so a single oversized line (a long diagnostic) still says something.
pub fn bound_lines<S: AsRef<str>>(lines: &[S], limit: usize) -> String {
    let limit = limit.max(MIN_SUMMARY_LIMIT);
    let total: usize = lines.iter().map(|l| l.as_ref().len() + 1).sum();
    if total <= limit {
        let mut out = String::with_capacity(total);
        for line in lines {
            out.push_str(line.as_ref());
            out.push('\n');
        }
        return out;
    }
    // Room for the notice at its largest (every line dropped, every byte dropped).
    let reserve = notice(lines.len(), total, total, limit).len() + 1;
    let budget = limit - reserve;
    let mut out = String::new();
    let mut kept = 0;
    for line in lines {
        let line = line.as_ref();
        let room = budget - out.len();
        if line.len() < room {
            out.push_str(line);
            out.push('\n');
            kept += 1;
        } else if line.len() >= budget && room > CLIP_MARK.len() + 1 {
            // Could never fit whole: clip it into the space left.
            out.push_str(&clip(line, room - 1));
            out.push('\n');
            kept += 1;
            break;
        } else {
            break;
        }
    }
    let dropped = lines.len() - kept;
    let dropped_bytes: usize = lines[kept..].iter().map(|l| l.as_ref().len() + 1).sum();
    out.push_str(&notice(dropped, dropped_bytes, total, limit));
    out.push('\n');
    out
}

/// The drop notice.
fn notice(dropped: usize, dropped_bytes: usize, total: usize, limit: usize) -> String {
    let mut text = String::new();
    let _ = write!(
        text,
        "[summary truncated: {dropped} line{} dropped ({dropped_bytes} of {total} bytes); \
         limit {limit} bytes]",
        if dropped == 1 { "" } else { "s" }
    );
    text
}

/// `line` cut to at most `max` bytes (marker included), at a character boundary.
fn clip(line: &str, max: usize) -> String {
    let keep = max.saturating_sub(CLIP_MARK.len());
    let mut end = keep.min(line.len());
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CLIP_MARK}", &line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(n: usize, width: usize) -> Vec<String> {
        (0..n).map(|i| format!("{i:0>width$}")).collect()
    }

    #[test]
    fn exactly_at_the_limit_keeps_everything() {
        let input = lines(10, 19); // 10 × 20 bytes
        let out = bound_lines(&input, 200);
        assert_eq!(out.len(), 200);
        assert!(!out.contains("truncated"));
        assert_eq!(out.lines().count(), 10);
    }

    #[test]
    fn one_byte_over_drops_whole_lines_and_says_so() {
        let input = lines(10, 19);
        let out = bound_lines(&input, 199);
        assert!(out.len() <= 199, "{}", out.len());
        let kept: Vec<&str> = out.lines().collect();
        let notice = kept.last().unwrap();
        assert!(notice.starts_with("[summary truncated: "), "{out}");
        assert!(notice.contains("of 200 bytes"), "{notice}");
        assert!(notice.contains("limit 199 bytes"), "{notice}");
        // Every kept line is whole and in order.
        for (i, line) in kept[..kept.len() - 1].iter().enumerate() {
            assert_eq!(*line, input[i]);
        }
        let dropped = 10 - (kept.len() - 1);
        assert!(
            notice.contains(&format!("{dropped} lines dropped")),
            "{notice}"
        );
        assert!(
            notice.contains(&format!("({} of", dropped * 20)),
            "{notice}"
        );
    }

    #[test]
    fn a_line_too_long_to_ever_fit_is_clipped_not_dropped() {
        let input = vec!["short".to_owned(), "x".repeat(10_000), "after".to_owned()];
        let out = bound_lines(&input, 1_000);
        assert!(out.len() <= 1_000, "{}", out.len());
        let kept: Vec<&str> = out.lines().collect();
        assert_eq!(kept[0], "short");
        assert!(kept[1].starts_with("xxxx"), "{out}");
        assert!(kept[1].ends_with("…[clipped]"), "{out}");
        assert!(kept[2].contains("1 line dropped"), "{out}");
    }

    #[test]
    fn clipping_respects_character_boundaries() {
        let input = vec!["é".repeat(5_000)];
        let out = bound_lines(&input, 501);
        assert!(out.len() <= 501);
        assert!(out.lines().next().unwrap().ends_with("…[clipped]"));
    }

    #[test]
    fn never_exceeds_the_limit_for_any_size() {
        for limit in [MIN_SUMMARY_LIMIT, 161, 200, 333, 1_000, 4_096] {
            for width in [1, 7, 50, 159, 400, 5_000] {
                let input = lines(40, width);
                let out = bound_lines(&input, limit);
                assert!(
                    out.len() <= limit,
                    "limit {limit} width {width}: {}",
                    out.len()
                );
                assert!(out.ends_with('\n'));
            }
        }
    }

    #[test]
    fn tiny_limits_are_raised_to_the_minimum() {
        let out = bound_lines(&lines(100, 10), 1);
        assert!(out.len() <= MIN_SUMMARY_LIMIT);
        assert!(out.contains("limit 160 bytes"), "{out}");
    }
}
