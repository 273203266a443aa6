//! The nesting pre-check that runs on every source before the Starlark parser sees it.
//!
//! The `starlark` parser, its validator and its compiler recurse once per level of nesting
//! with no limit of their own, and a native stack overflow aborts the whole process. This
//! scanner is a flat loop over the bytes (no recursion, no allocation proportional to the
//! depth) that measures an upper bound of the syntactic depth: open brackets, indentation
//! blocks, runs of prefix operators (`- - -x`, `not not x`) and long operator chains.
//!
//! Invariant: any source the parser could nest deeper than `limit` is rejected here first;
//! the measure may over-count (which only makes the check stricter), never under-count.

/// Where and how deep the source nests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NestingReport {
    /// The deepest nesting measured anywhere in the source.
    pub(crate) max_depth: u64,
    /// 1-based line and column where the measure first went over the limit.
    pub(crate) first_over: Option<(u32, u32)>,
}

/// How many operators of one expression level count as one level of depth. Binary operator
/// chains (`a + b + c ...`) nest the syntax tree one level per operator; grouping them keeps
/// ordinary long expressions (string concatenations of a few dozen parts) well inside the
/// budget while still bounding pathological chains of thousands of operators.
const OPERATORS_PER_LEVEL: u64 = 8;

/// The open bracket levels (index 0 is the statement level outside any bracket), each with
/// the binary operators, dots, calls and subscripts seen since its last separator.
///
/// The depth the links add, the sum over levels of `links / OPERATORS_PER_LEVEL` rounded
/// up, is kept up to date as links change, so measuring costs O(1) per byte instead of a
/// walk over every open level.
#[derive(Debug)]
struct Levels {
    links: Vec<u64>,
    link_depth: u64,
}

impl Levels {
    fn new() -> Self {
        Levels {
            links: vec![0],
            link_depth: 0,
        }
    }

    /// Open brackets.
    fn brackets(&self) -> u64 {
        (self.links.len() - 1) as u64
    }

    fn outside_brackets(&self) -> bool {
        self.links.len() == 1
    }

    fn push(&mut self) {
        self.links.push(0);
    }

    /// Closes the innermost bracket (never the statement level).
    fn pop(&mut self) {
        if self.links.len() > 1
            && let Some(links) = self.links.pop()
        {
            self.link_depth -= links.div_ceil(OPERATORS_PER_LEVEL);
        }
    }

    /// One more link on the innermost level.
    fn bump(&mut self) {
        if let Some(top) = self.links.last_mut() {
            if *top % OPERATORS_PER_LEVEL == 0 {
                self.link_depth += 1;
            }
            *top += 1;
        }
    }

    /// A separator on the innermost level.
    fn reset_top(&mut self) {
        if let Some(top) = self.links.last_mut() {
            self.link_depth -= top.div_ceil(OPERATORS_PER_LEVEL);
            *top = 0;
        }
    }

    fn link_depth(&self) -> u64 {
        debug_assert_eq!(
            self.link_depth,
            self.links
                .iter()
                .map(|l| l.div_ceil(OPERATORS_PER_LEVEL))
                .sum::<u64>()
        );
        self.link_depth
    }
}

/// Measures the nesting of `source`; `limit` only decides where `first_over` points.
pub(crate) fn measure(source: &str, limit: u64) -> NestingReport {
    let bytes = source.as_bytes();
    let mut report = NestingReport {
        max_depth: 0,
        first_over: None,
    };

    let mut levels = Levels::new();
    // Indentation widths of the open blocks.
    let mut indents: Vec<usize> = Vec::new();
    let mut unary_run: u64 = 0;
    // Whether the previous significant token ends an operand (so `-` is binary).
    let mut after_operand = false;

    let mut line: u32 = 1;
    let mut line_start = 0usize;
    let mut at_line_start = true;
    let mut i = 0usize;

    while i < bytes.len() {
        let b = bytes[i];

        if at_line_start && levels.outside_brackets() {
            at_line_start = false;
            let mut width = 0usize;
            let mut j = i;
            while j < bytes.len() && (bytes[j] == b' ' || bytes[j] == b'\t') {
                width += if bytes[j] == b'\t' { 8 - width % 8 } else { 1 };
                j += 1;
            }
            let blank = j >= bytes.len() || matches!(bytes[j], b'\n' | b'\r' | b'#');
            if !blank {
                while indents.last().is_some_and(|&w| w > width) {
                    indents.pop();
                }
                if width > indents.last().copied().unwrap_or(0) {
                    indents.push(width);
                }
            }
            i = j;
            continue;
        }

        match b {
            b'\n' => {
                line += 1;
                line_start = i + 1;
                if levels.outside_brackets() {
                    at_line_start = true;
                    levels.reset_top();
                    after_operand = false;
                }
                unary_run = 0;
                i += 1;
                continue;
            }
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'\'' | b'"' => {
                i = skip_string(bytes, i, &mut line, &mut line_start);
                after_operand = true;
                unary_run = 0;
                continue;
            }
            b'(' | b'[' | b'{' => {
                // A call or subscript also nests the tree once more than the bracket alone.
                if after_operand {
                    levels.bump();
                }
                levels.push();
                after_operand = false;
                unary_run = 0;
            }
            b')' | b']' | b'}' => {
                levels.pop();
                after_operand = true;
                unary_run = 0;
            }
            b',' | b';' | b':' | b'=' if !is_comparison_eq(bytes, i) => {
                levels.reset_top();
                after_operand = false;
                unary_run = 0;
            }
            b'-' | b'+' | b'~' if !after_operand => {
                unary_run += 1;
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'|' | b'&' | b'^' | b'<' | b'>' | b'!' | b'='
            | b'.' => {
                // `.5` style numbers are not Starlark; a dot is always an attribute link.
                levels.bump();
                after_operand = false;
                unary_run = 0;
            }
            _ if is_ident_start(b) => {
                let start = i;
                while i < bytes.len() && is_ident_continue(bytes[i]) {
                    i += 1;
                }
                let word = &bytes[start..i];
                match word {
                    b"not" => {
                        unary_run += 1;
                        after_operand = false;
                    }
                    b"and" | b"or" | b"if" | b"else" | b"in" | b"is" | b"for" => {
                        levels.bump();
                        after_operand = false;
                        unary_run = 0;
                    }
                    b"return" | b"def" | b"load" | b"lambda" | b"elif" | b"while" | b"pass"
                    | b"break" | b"continue" => {
                        after_operand = false;
                        unary_run = 0;
                    }
                    _ => {
                        after_operand = true;
                        unary_run = 0;
                    }
                }
                record(
                    &mut report,
                    depth(&levels, &indents, unary_run),
                    limit,
                    line,
                    start - line_start,
                );
                continue;
            }
            _ if b.is_ascii_digit() => {
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                after_operand = true;
                unary_run = 0;
                continue;
            }
            _ => {}
        }
        record(
            &mut report,
            depth(&levels, &indents, unary_run),
            limit,
            line,
            i - line_start,
        );
        i += 1;
    }
    report
}

/// `==`, `!=`, `<=`, `>=`: the `=` belongs to a comparison, not an assignment.
fn is_comparison_eq(bytes: &[u8], i: usize) -> bool {
    if bytes[i] != b'=' {
        return false;
    }
    let prev = i.checked_sub(1).map(|p| bytes[p]);
    let next = bytes.get(i + 1).copied();
    matches!(prev, Some(b'=' | b'!' | b'<' | b'>')) || next == Some(b'=')
}

fn depth(levels: &Levels, indents: &[usize], unary_run: u64) -> u64 {
    levels.brackets() + indents.len() as u64 + unary_run + levels.link_depth()
}

fn record(report: &mut NestingReport, depth: u64, limit: u64, line: u32, column0: usize) {
    if depth > report.max_depth {
        report.max_depth = depth;
    }
    if depth > limit && report.first_over.is_none() {
        let column = u32::try_from(column0 + 1).unwrap_or(u32::MAX);
        report.first_over = Some((line, column));
    }
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident_continue(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Skips a string literal starting at `start` (a quote); returns the index after it.
/// Unterminated strings run to the end (the parser reports them properly).
fn skip_string(bytes: &[u8], start: usize, line: &mut u32, line_start: &mut usize) -> usize {
    let quote = bytes[start];
    let triple = bytes.get(start + 1) == Some(&quote) && bytes.get(start + 2) == Some(&quote);
    let mut i = start + if triple { 3 } else { 1 };
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\\' {
            if bytes.get(i + 1) == Some(&b'\n') {
                *line += 1;
                *line_start = i + 2;
            }
            i += 2;
            continue;
        }
        if b == b'\n' {
            *line += 1;
            *line_start = i + 1;
            if !triple {
                return i;
            }
        }
        if b == quote {
            if !triple {
                return i + 1;
            }
            if bytes.get(i + 1) == Some(&quote) && bytes.get(i + 2) == Some(&quote) {
                return i + 3;
            }
        }
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brackets_count_one_level_each() {
        assert_eq!(measure("x = [1, (2, {3: 4})]\n", 100).max_depth, 3);
    }

    #[test]
    fn brackets_inside_strings_and_comments_do_not_count() {
        let src = "x = \"((((\" + '[[[' # ((((((\ny = \"\"\"\n((((\n\"\"\"\n";
        assert!(measure(src, 100).max_depth <= 2);
    }

    #[test]
    fn ten_thousand_parentheses_are_measured_not_parsed() {
        let src = format!("x = {}1{}\n", "(".repeat(10_000), ")".repeat(10_000));
        let report = measure(&src, 100);
        assert!(report.max_depth >= 10_000);
        assert_eq!(report.first_over, Some((1, 105)));
    }

    #[test]
    fn unary_runs_count() {
        let src = format!("x = {}1\n", "- ".repeat(500));
        assert!(measure(&src, 100).max_depth >= 500);
        let src = format!("x = {}True\n", "not ".repeat(500));
        assert!(measure(&src, 100).max_depth >= 500);
    }

    #[test]
    fn binary_minus_is_not_a_unary_run() {
        let src = format!("x = 1{}\n", " - 1".repeat(40));
        assert!(measure(&src, 100).max_depth <= 6);
    }

    #[test]
    fn long_operator_chains_count() {
        let src = format!("x = 1{}\n", " + 1".repeat(5_000));
        assert!(measure(&src, 100).max_depth > 100);
    }

    #[test]
    fn indentation_blocks_count() {
        let mut src = String::new();
        for level in 0..300 {
            src.push_str(&" ".repeat(level));
            src.push_str("if x:\n");
        }
        src.push_str(&" ".repeat(300));
        src.push_str("pass\n");
        assert!(measure(&src, 100).max_depth >= 300);
    }

    #[test]
    fn ordinary_workflow_is_shallow() {
        let src = "def build(inputs):\n    lint = command(name = \"lint\", argv = [\"cargo\", \"clippy\"],\n                   timeout_seconds = 600, max_output_bytes = 65536)\n    return workflow(name = \"check\", nodes = [lint])\n";
        assert!(measure(src, 100).max_depth < 10);
    }
}
