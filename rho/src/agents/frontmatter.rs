//! The strict frontmatter reader: splits a definition file into its frontmatter fields and its
//! Markdown body, accepting only a small, unambiguous subset of YAML.
//!
//! Accepted, line by line between an opening and a closing line that are exactly `---`:
//!
//! - `key: value` at column 0 (no indentation, so no nested maps);
//! - a block list after a key with nothing after its colon, as Rho 1.47 accepts for `tools:`:
//!   lines `- item` that all share one indentation (`  - read_file`; column 1 works too, as
//!   in YAML), each item a plain or quoted scalar;
//! - blank lines, and comment lines whose first character is `#`;
//! - values: a plain scalar, a `'single-quoted'` scalar (`''` stands for one quote), a
//!   `"double-quoted"` scalar (escapes `\"`, `\\`, `\/`, `\n`, `\r`, `\t`, `\uXXXX`), or a flow
//!   list `[a, "b", 'c']` whose items are plain or quoted scalars.
//!
//! Rejected with a located diagnostic: tabs or spaces used for indentation, duplicate keys,
//! nested maps (`{`), nested lists, a `- item` line that follows no `key:` line or is
//! indented differently from the items before it, anchors, aliases, tags, block
//! scalars, multi-line quoted scalars, trailing comments (` #` after a value: quote the value
//! instead), a `: ` inside a plain scalar, and unknown escapes. A key with nothing after the
//! colon (`key:`) is read, as YAML reads it, as an empty plain scalar (null); the definition
//! layer rejects it with a message about what that key takes.
//!
//! Recovery: [`parse_recovering`] keeps every line that parsed when other lines did not, so
//! the definition layer can still check the good lines and report every problem of a file at
//! once. Only a broken file shape (no opening or no closing `---`) stops before the lines.
//!
//! One deliberate difference from YAML: a plain scalar may start with `@`, so that
//! `model: @fast` names a model alias as the agent documentation writes it.
//!
//! Invariant: whatever this module accepts, a YAML 1.2 reader would read the same way (except
//! for the `@` rule above); [`Scalar::to_json`] reports that YAML reading, so the published
//! JSON Schema can be checked against exactly what a user wrote.

use std::fmt;

/// One problem in a definition file, located by its 1-based line and, when known, its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// 1-based line number in the file.
    pub line: usize,
    /// The frontmatter key at fault, when the problem belongs to one.
    pub key: Option<String>,
    /// What is wrong and what is allowed instead.
    pub message: String,
}

impl Diagnostic {
    /// A problem on `line` that belongs to frontmatter key `key`.
    pub fn keyed(line: usize, key: &str, message: impl Into<String>) -> Self {
        Self {
            line,
            key: Some(key.to_owned()),
            message: message.into(),
        }
    }

    /// A problem on `line` that belongs to no single key (file shape, syntax).
    pub fn unkeyed(line: usize, message: impl Into<String>) -> Self {
        Self {
            line,
            key: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{}: {key}: {}", self.line, self.message),
            None => write!(f, "{}: {}", self.line, self.message),
        }
    }
}

/// How a scalar was written; quoting decides whether YAML reads it as a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarStyle {
    /// Unquoted text.
    Plain,
    /// `'...'`.
    SingleQuoted,
    /// `"..."`.
    DoubleQuoted,
}

/// A scalar value after unquoting and unescaping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scalar {
    /// The text, unescaped; plain scalars are trimmed.
    pub text: String,
    /// How it was written.
    pub style: ScalarStyle,
}

/// The type a YAML 1.2 (core schema) reader gives a scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YamlKind {
    /// A string.
    String,
    /// `true` or `false` (also `True`, `TRUE`, `False`, `FALSE`).
    Bool,
    /// `null`, `Null`, `NULL` or `~`.
    Null,
    /// An integer or a float (including `.inf` and `.nan`).
    Number,
}

impl YamlKind {
    /// A short name for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::String => "a string",
            Self::Bool => "a boolean",
            Self::Null => "null",
            Self::Number => "a number",
        }
    }
}

impl Scalar {
    /// The type YAML gives this scalar: quoted scalars are always strings.
    pub fn yaml_kind(&self) -> YamlKind {
        if self.style != ScalarStyle::Plain {
            return YamlKind::String;
        }
        plain_kind(&self.text)
    }

    /// The JSON value a YAML 1.2 reader would produce for this scalar.
    pub fn to_json(&self) -> serde_json::Value {
        match self.yaml_kind() {
            YamlKind::String => serde_json::Value::String(self.text.clone()),
            YamlKind::Null => serde_json::Value::Null,
            YamlKind::Bool => serde_json::Value::Bool(self.text.eq_ignore_ascii_case("true")),
            YamlKind::Number => number_json(&self.text),
        }
    }
}

/// A frontmatter value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `key: scalar`.
    Scalar(Scalar),
    /// `key: [a, b]`.
    List(Vec<Scalar>),
}

impl Value {
    /// Whether this is `key:` with nothing after the colon (YAML null).
    pub fn is_missing(&self) -> bool {
        matches!(self, Self::Scalar(s) if s.style == ScalarStyle::Plain && s.text.is_empty())
    }

    /// The JSON value a YAML 1.2 reader would produce.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::Scalar(s) => s.to_json(),
            Self::List(items) => {
                serde_json::Value::Array(items.iter().map(Scalar::to_json).collect())
            }
        }
    }
}

/// One `key: value` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The key as written.
    pub key: String,
    /// 1-based line number.
    pub line: usize,
    /// The value.
    pub value: Value,
}

/// A definition file split into fields and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontmatter {
    /// Fields in file order; keys are unique.
    pub fields: Vec<Field>,
    /// The Markdown after the closing `---` line, untrimmed.
    pub body: String,
    /// 1-based line number of the closing `---`.
    pub closing_line: usize,
}

impl Frontmatter {
    /// The field named `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.key == key)
    }

    /// The frontmatter as the JSON object a YAML reader would produce (what the published JSON
    /// Schema describes).
    pub fn to_json(&self) -> serde_json::Value {
        let map = self
            .fields
            .iter()
            .map(|f| (f.key.clone(), f.value.to_json()))
            .collect();
        serde_json::Value::Object(map)
    }
}

/// What [`parse_recovering`] read: the lines that parsed, and the problems of the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The fields of every line that parsed (the first occurrence of a duplicated key).
    pub frontmatter: Frontmatter,
    /// Every syntax problem, in line order.
    pub problems: Vec<Diagnostic>,
    /// Keys written at column 1 whose line did not parse, with their line: the key exists in
    /// the file but has no usable value.
    pub failed_keys: Vec<(usize, String)>,
}

/// Splits `text` into frontmatter fields and body; any syntax problem fails the whole file,
/// and every one of them is returned.
pub fn parse(text: &str) -> Result<Frontmatter, Vec<Diagnostic>> {
    let parsed = parse_recovering(text)?;
    if parsed.problems.is_empty() {
        Ok(parsed.frontmatter)
    } else {
        Err(parsed.problems)
    }
}

/// Splits `text` into frontmatter fields and body, keeping the lines that parsed next to the
/// problems of those that did not. Fails outright only when the file shape is broken (no
/// opening or closing `---` line), since then no line can be trusted to be frontmatter.
pub fn parse_recovering(text: &str) -> Result<Parsed, Vec<Diagnostic>> {
    let lines = split_lines(text);
    match lines.first() {
        Some((first, _)) if *first == "---" => {}
        Some((first, _)) if first.starts_with('\u{feff}') => {
            return Err(vec![Diagnostic::unkeyed(
                1,
                "the file starts with a byte-order mark; save it as UTF-8 without one so that \
                 the first line is exactly `---`",
            )]);
        }
        _ => {
            return Err(vec![Diagnostic::unkeyed(
                1,
                "a definition must start with a line that is exactly `---`, followed by \
                 frontmatter and a closing `---` line",
            )]);
        }
    }
    let Some(closing_index) = lines
        .iter()
        .skip(1)
        .position(|(l, _)| *l == "---")
        .map(|i| i + 1)
    else {
        return Err(vec![Diagnostic::unkeyed(
            1,
            "the frontmatter is never closed: add a line that is exactly `---` after the last \
             key",
        )]);
    };

    let mut fields: Vec<Field> = Vec::new();
    let mut problems = Vec::new();
    let mut failed_keys = Vec::new();
    let mut index = 1;
    while index < closing_index {
        let (line, _) = lines[index];
        let number = index + 1;
        index += 1;
        match parse_line(line, number) {
            Ok(None) => {}
            Ok(Some(mut field)) => {
                if field.value.is_missing() {
                    let (items, consumed) =
                        block_list(&lines[index..closing_index], index + 1, &field.key);
                    index += consumed;
                    match items {
                        Ok(Some(items)) => field.value = Value::List(items),
                        Ok(None) => {}
                        Err(d) => {
                            failed_keys.push((number, field.key.clone()));
                            problems.push(d);
                            continue;
                        }
                    }
                }
                if let Some(first) = fields.iter().find(|f| f.key == field.key) {
                    problems.push(Diagnostic::keyed(
                        number,
                        &field.key,
                        format!(
                            "duplicate key (first set on line {}); set each key once",
                            first.line
                        ),
                    ));
                } else {
                    fields.push(field);
                }
            }
            Err(d) => {
                if let Some(key) = &d.key
                    && line.starts_with(key.as_str())
                {
                    failed_keys.push((number, key.clone()));
                }
                problems.push(d);
            }
        }
    }
    let body_start = lines[closing_index].1;
    Ok(Parsed {
        frontmatter: Frontmatter {
            fields,
            body: text[body_start..].to_owned(),
            closing_line: closing_index + 1,
        },
        problems,
        failed_keys,
    })
}

/// The block list under `key` (a `key:` line with nothing after the colon): the `- item`
/// lines that follow, all at one indentation. Returns the items (`None` when no item line
/// follows, so the key stays null) and how many lines were consumed; a bad item fails the
/// key, and every item line is consumed either way so it is not read again as a key.
/// `first_number` is the 1-based number of the first line of `lines`.
fn block_list(
    lines: &[(&str, usize)],
    first_number: usize,
    key: &str,
) -> (Result<Option<Vec<Scalar>>, Diagnostic>, usize) {
    let mut items = Vec::new();
    let mut indent: Option<usize> = None;
    let mut consumed = 0;
    let mut problem = None;
    for (offset, (line, _)) in lines.iter().enumerate() {
        let number = first_number + offset;
        let trimmed = line.trim_start_matches(' ');
        let Some(rest) = trimmed.strip_prefix('-') else {
            break;
        };
        if !(rest.is_empty() || rest.starts_with(' ')) {
            break;
        }
        let this_indent = line.len() - trimmed.len();
        consumed = offset + 1;
        if problem.is_some() {
            continue;
        }
        match indent {
            None => indent = Some(this_indent),
            Some(i) if i != this_indent => {
                problem = Some(Diagnostic::keyed(
                    number,
                    key,
                    format!(
                        "list items must share one indentation: this item is indented {this_indent} spaces, the first {i}"
                    ),
                ));
                continue;
            }
            Some(_) => {}
        }
        let raw = rest.trim();
        if raw.is_empty() {
            problem = Some(Diagnostic::keyed(
                number,
                key,
                "empty list item: write `- value`",
            ));
            continue;
        }
        match parse_value(raw) {
            Ok(Value::Scalar(scalar)) => items.push(scalar),
            Ok(Value::List(_)) => {
                problem = Some(Diagnostic::keyed(
                    number,
                    key,
                    "nested lists are not accepted; each `- item` is one scalar",
                ));
            }
            Err(message) => problem = Some(Diagnostic::keyed(number, key, message)),
        }
    }
    let result = match problem {
        Some(d) => Err(d),
        None if consumed == 0 => Ok(None),
        None => Ok(Some(items)),
    };
    (result, consumed)
}

/// Splits into lines without their terminators (`\n` or `\r\n`), each with the byte offset
/// where the next line starts.
fn split_lines(text: &str) -> Vec<(&str, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let rest = &text[start..];
        let (line, advance) = match rest.find('\n') {
            Some(i) => (&rest[..i], i + 1),
            None => (rest, rest.len()),
        };
        let line = line.strip_suffix('\r').unwrap_or(line);
        start += advance;
        out.push((line, start));
    }
    out
}

fn parse_line(line: &str, number: usize) -> Result<Option<Field>, Diagnostic> {
    if line.trim().is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    if line.starts_with('\t') {
        return Err(located(
            number,
            indented_key(line),
            "tabs are not allowed for indentation; every key starts at column 1 (nested maps \
             are not accepted)",
        ));
    }
    if line.starts_with(' ') {
        return Err(located(
            number,
            indented_key(line),
            "indented line: keys start at column 1 and nested maps are not accepted; a list \
             is `key: [a, b]` or `- item` lines right under `key:`",
        ));
    }
    if line.trim_end() == "---" {
        return Err(Diagnostic::unkeyed(
            number,
            "the closing line must be exactly `---`, without trailing spaces",
        ));
    }
    if line.starts_with("- ") || line == "-" {
        return Err(Diagnostic::unkeyed(
            number,
            "a `- item` line belongs right under a `key:` line with nothing after its colon \
             (or write the list as `key: [a, b]`)",
        ));
    }
    let Some(colon) = line.find(':') else {
        return Err(Diagnostic::unkeyed(number, "expected `key: value`"));
    };
    let key = &line[..colon];
    if key.starts_with(['"', '\'']) {
        return Err(Diagnostic::unkeyed(
            number,
            "keys are written without quotes: `key: value`",
        ));
    }
    if key.is_empty() || key.chars().any(char::is_whitespace) {
        return Err(Diagnostic::unkeyed(
            number,
            "expected `key: value` with a key of one word",
        ));
    }
    let rest = &line[colon + 1..];
    if rest.starts_with('\t') {
        return Err(Diagnostic::keyed(
            number,
            key,
            "separate the key from its value with a space, not a tab",
        ));
    }
    if !rest.is_empty() && !rest.starts_with(' ') {
        return Err(Diagnostic::keyed(
            number,
            key,
            "expected a space after `:` (`key: value`)",
        ));
    }
    let raw = rest.trim();
    if raw.is_empty() {
        // YAML reads `key:` as null; the definition layer says what the key needs instead.
        return Ok(Some(Field {
            key: key.to_owned(),
            line: number,
            value: Value::Scalar(Scalar {
                text: String::new(),
                style: ScalarStyle::Plain,
            }),
        }));
    }
    let value = parse_value(raw).map_err(|m| Diagnostic::keyed(number, key, m))?;
    Ok(Some(Field {
        key: key.to_owned(),
        line: number,
        value,
    }))
}

/// A diagnostic for `key` when one is known, else an unkeyed one.
fn located(number: usize, key: Option<&str>, message: &str) -> Diagnostic {
    match key {
        Some(key) => Diagnostic::keyed(number, key, message),
        None => Diagnostic::unkeyed(number, message),
    }
}

/// The key of an indented `  key: value` line, so its diagnostic can name it.
fn indented_key(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    let key = &trimmed[..trimmed.find(':')?];
    let plausible = !key.is_empty()
        && !key.starts_with(['-', '#', '"', '\''])
        && !key.chars().any(char::is_whitespace);
    plausible.then_some(key)
}

fn parse_value(raw: &str) -> Result<Value, String> {
    match raw.chars().next() {
        Some('[') => parse_list(raw).map(Value::List),
        Some('{') => Err("nested maps are not accepted; use a scalar or a list `[a, b]`".into()),
        Some('"' | '\'') => {
            let (scalar, rest) = parse_quoted(raw)?;
            if !rest.trim().is_empty() {
                return Err(format!(
                    "unexpected text `{}` after the closing quote (comments after values are \
                     not accepted)",
                    rest.trim()
                ));
            }
            Ok(Value::Scalar(scalar))
        }
        _ => parse_plain(raw, false).map(Value::Scalar),
    }
}

/// Parses a quoted scalar at the start of `s`; returns it and the text after the closing
/// quote.
fn parse_quoted(s: &str) -> Result<(Scalar, &str), String> {
    let mut chars = s.char_indices();
    let Some((_, quote)) = chars.next() else {
        return Err("expected a quoted value".into());
    };
    let mut text = String::new();
    if quote == '\'' {
        let mut iter = chars.peekable();
        while let Some((i, c)) = iter.next() {
            if c == '\'' {
                if matches!(iter.peek(), Some((_, '\''))) {
                    iter.next();
                    text.push('\'');
                } else {
                    let scalar = Scalar {
                        text,
                        style: ScalarStyle::SingleQuoted,
                    };
                    return Ok((scalar, &s[i + 1..]));
                }
            } else {
                text.push(c);
            }
        }
        return Err(
            "unterminated single-quoted value; quoted values end on the same line \
                    (write `''` for a quote inside)"
                .into(),
        );
    }
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                let scalar = Scalar {
                    text,
                    style: ScalarStyle::DoubleQuoted,
                };
                return Ok((scalar, &s[i + 1..]));
            }
            '\\' => {
                let Some((_, e)) = chars.next() else { break };
                match e {
                    '"' => text.push('"'),
                    '\\' => text.push('\\'),
                    '/' => text.push('/'),
                    'n' => text.push('\n'),
                    'r' => text.push('\r'),
                    't' => text.push('\t'),
                    'u' => {
                        let hex: String = chars.by_ref().take(4).map(|(_, c)| c).collect();
                        let decoded = (hex.len() == 4)
                            .then(|| u32::from_str_radix(&hex, 16).ok())
                            .flatten()
                            .and_then(char::from_u32);
                        match decoded {
                            Some(ch) => text.push(ch),
                            None => {
                                return Err(format!(
                                    "invalid escape `\\u{hex}`: expected four hex digits naming \
                                     a character (surrogates are not accepted)"
                                ));
                            }
                        }
                    }
                    other => {
                        return Err(format!(
                            "unsupported escape `\\{other}` in a double-quoted value; accepted: \
                             \\\" \\\\ \\/ \\n \\r \\t \\uXXXX"
                        ));
                    }
                }
            }
            c => text.push(c),
        }
    }
    Err("unterminated double-quoted value; quoted values end on the same line".into())
}

/// Checks and returns a plain scalar. `in_list` adds the flow-context restrictions.
fn parse_plain(raw: &str, in_list: bool) -> Result<Scalar, String> {
    let text = raw.trim();
    let mut chars = text.chars();
    let first = chars.next().ok_or_else(|| String::from("empty value"))?;
    let second = chars.next();
    if matches!(
        first,
        '&' | '*' | '!' | '|' | '>' | '%' | '`' | '#' | ',' | ']' | '}'
    ) {
        return Err(format!(
            "a plain value cannot start with `{first}` (anchors, aliases, tags, block scalars \
             and comments are not accepted); quote the value"
        ));
    }
    if matches!(first, '-' | '?' | ':') && second.is_none_or(char::is_whitespace) {
        return Err(format!(
            "a plain value cannot start with `{first}` followed by a space; quote the value"
        ));
    }
    if text.contains(" #") || text.contains("\t#") {
        return Err(
            "comments after values are not accepted; quote the value if `#` belongs \
                    to it"
                .into(),
        );
    }
    if text.contains(": ") || text.ends_with(':') || text.contains(":\t") {
        return Err("`: ` inside a plain value would start a nested map; quote the value".into());
    }
    if in_list && text.contains(['[', ']', '{', '}']) {
        return Err(
            "nested lists and maps are not accepted inside a list; quote the item if \
                    the brackets belong to it"
                .into(),
        );
    }
    Ok(Scalar {
        text: text.to_owned(),
        style: ScalarStyle::Plain,
    })
}

fn parse_list(raw: &str) -> Result<Vec<Scalar>, String> {
    let inner = raw.strip_prefix('[').unwrap_or(raw);
    let mut rest = inner.trim_start();
    let mut items = Vec::new();
    if let Some(after) = rest.strip_prefix(']') {
        return finish_list(after).map(|()| items);
    }
    loop {
        rest = rest.trim_start();
        let item_rest = if rest.starts_with(['"', '\'']) {
            let (scalar, after) = parse_quoted(rest)?;
            items.push(scalar);
            after
        } else if rest.starts_with(['[', '{']) {
            return Err("nested lists and maps are not accepted inside a list".into());
        } else {
            let end = rest.find([',', ']']).ok_or_else(|| {
                String::from("unterminated list: a list is written on one line as `[a, b]`")
            })?;
            if rest[..end].trim().is_empty() {
                return Err(
                    "empty list item; write `[a, b]` without empty entries or a \
                            trailing comma"
                        .into(),
                );
            }
            items.push(parse_plain(&rest[..end], true)?);
            &rest[end..]
        };
        let after = item_rest.trim_start();
        if let Some(next) = after.strip_prefix(',') {
            rest = next;
            if rest.trim_start().starts_with(']') {
                return Err(
                    "empty list item; write `[a, b]` without empty entries or a \
                            trailing comma"
                        .into(),
                );
            }
        } else if let Some(end) = after.strip_prefix(']') {
            return finish_list(end).map(|()| items);
        } else if after.is_empty() {
            return Err("unterminated list: a list is written on one line as `[a, b]`".into());
        } else {
            return Err(format!("expected `,` or `]` in the list, found `{after}`"));
        }
    }
}

fn finish_list(after: &str) -> Result<(), String> {
    if after.trim().is_empty() {
        Ok(())
    } else {
        Err(format!(
            "unexpected text `{}` after the list (comments after values are not accepted)",
            after.trim()
        ))
    }
}

fn plain_kind(text: &str) -> YamlKind {
    match text {
        "true" | "True" | "TRUE" | "false" | "False" | "FALSE" => YamlKind::Bool,
        "" | "~" | "null" | "Null" | "NULL" => YamlKind::Null,
        _ if is_yaml_number(text) => YamlKind::Number,
        _ => YamlKind::String,
    }
}

/// The YAML 1.2 core schema's integer and float forms.
fn is_yaml_number(text: &str) -> bool {
    let digits = |s: &str, radix: u32| !s.is_empty() && s.chars().all(|c| c.is_digit(radix));
    if let Some(oct) = text.strip_prefix("0o") {
        return digits(oct, 8);
    }
    if let Some(hex) = text.strip_prefix("0x") {
        return digits(hex, 16);
    }
    if matches!(text, ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if matches!(unsigned, ".inf" | ".Inf" | ".INF") {
        return true;
    }
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => (&unsigned[..i], Some(&unsigned[i + 1..])),
        None => (unsigned, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (int.is_empty() && digits(frac, 10))
                || (digits(int, 10) && (frac.is_empty() || digits(frac, 10)))
        }
        None => digits(mantissa, 10),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e), 10));
    mantissa_ok && exponent_ok
}

fn number_json(text: &str) -> serde_json::Value {
    let parsed = if let Some(oct) = text.strip_prefix("0o") {
        i64::from_str_radix(oct, 8).ok()
    } else if let Some(hex) = text.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).ok()
    } else {
        text.parse::<i64>().ok()
    };
    if let Some(i) = parsed {
        return serde_json::Value::from(i);
    }
    // Non-integers (and infinities/NaN, which JSON lacks) only need to be "a number that is
    // not a string" for schema checks; a finite stand-in keeps that property.
    let f = text
        .to_ascii_lowercase()
        .replace(".inf", "inf")
        .parse::<f64>()
        .unwrap_or(0.0);
    serde_json::Number::from_f64(if f.is_finite() { f } else { f64::MAX })
        .map_or(serde_json::Value::from(0), serde_json::Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Frontmatter {
        parse(text).unwrap_or_else(|e| panic!("expected {text:?} to parse, got {e:?}"))
    }

    fn err(text: &str) -> Vec<Diagnostic> {
        parse(text).expect_err("expected a parse error")
    }

    #[test]
    fn splits_fields_and_body() {
        let fm = ok("---\nid: a\ndescription: \"x\"\n---\n\nBody here.\n");
        assert_eq!(fm.fields.len(), 2);
        assert_eq!(fm.get("id").map(|f| f.line), Some(2));
        assert_eq!(fm.body, "\nBody here.\n");
        assert_eq!(fm.closing_line, 4);
    }

    #[test]
    fn crlf_line_endings_are_accepted() {
        let fm = ok("---\r\nid: a\r\n---\r\nbody\r\n");
        assert_eq!(
            fm.get("id").map(|f| f.value.clone()),
            Some(Value::Scalar(plain("a")))
        );
        assert_eq!(fm.body, "body\r\n");
    }

    fn plain(s: &str) -> Scalar {
        Scalar {
            text: s.into(),
            style: ScalarStyle::Plain,
        }
    }

    #[test]
    fn quoted_scalars_unescape() {
        let fm = ok("---\na: \"q\\\"b\\\\s\\n\\t\\u00e9\"\nb: 'it''s'\n---\n");
        let Some(Value::Scalar(a)) = fm.get("a").map(|f| f.value.clone()) else {
            panic!()
        };
        assert_eq!(a.text, "q\"b\\s\n\té");
        let Some(Value::Scalar(b)) = fm.get("b").map(|f| f.value.clone()) else {
            panic!()
        };
        assert_eq!(b.text, "it's");
    }

    #[test]
    fn lists_take_plain_and_quoted_items() {
        let fm = ok("---\ntools: [Read, \"Bash(git *)\", 'a,b', Bash(ls -la)]\nempty: []\n---\n");
        let Some(Value::List(items)) = fm.get("tools").map(|f| f.value.clone()) else {
            panic!()
        };
        let texts: Vec<_> = items.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(texts, ["Read", "Bash(git *)", "a,b", "Bash(ls -la)"]);
        assert_eq!(
            fm.get("empty").map(|f| f.value.clone()),
            Some(Value::List(vec![]))
        );
    }

    #[test]
    fn block_lists_read_as_flow_lists() {
        // Rho 1.47 writes `tools:` followed by `  - name` lines; YAML also allows column 1.
        for text in [
            "---\ntools:\n  - read_file\n  - \"Bash(git *)\"\nid: a\n---\n",
            "---\ntools:\n- read_file\n- \"Bash(git *)\"\nid: a\n---\n",
        ] {
            let fm = ok(text);
            assert_eq!(
                fm.get("tools").map(|f| f.value.to_json()),
                Some(serde_json::json!(["read_file", "Bash(git *)"])),
                "{text}"
            );
            assert_eq!(fm.get("id").map(|f| f.line), Some(5));
        }
        // `key:` with no item under it stays null.
        assert!(
            ok("---\ntools:\nid: a\n---\n")
                .get("tools")
                .unwrap()
                .value
                .is_missing()
        );
    }

    #[test]
    fn comment_and_blank_lines_are_skipped() {
        let fm = ok("---\n# a comment\n\nid: a\n---\n");
        assert_eq!(fm.fields.len(), 1);
    }

    #[test]
    fn yaml_kinds_follow_the_core_schema() {
        for (text, kind) in [
            ("true", YamlKind::Bool),
            ("FALSE", YamlKind::Bool),
            ("yes", YamlKind::String),
            ("off", YamlKind::String),
            ("~", YamlKind::Null),
            ("null", YamlKind::Null),
            ("12", YamlKind::Number),
            ("-1.5e3", YamlKind::Number),
            ("0x1f", YamlKind::Number),
            (".inf", YamlKind::Number),
            ("4o", YamlKind::String),
            ("1.2.3", YamlKind::String),
            ("claude-opus-5", YamlKind::String),
        ] {
            assert_eq!(plain(text).yaml_kind(), kind, "{text}");
        }
        let quoted = Scalar {
            text: "true".into(),
            style: ScalarStyle::DoubleQuoted,
        };
        assert_eq!(quoted.yaml_kind(), YamlKind::String);
    }

    #[test]
    fn file_shape_errors() {
        assert!(
            err("id: a\n")[0]
                .message
                .contains("start with a line that is exactly `---`")
        );
        assert!(
            err("\u{feff}---\nid: a\n---\n")[0]
                .message
                .contains("byte-order mark")
        );
        assert!(err("---\nid: a\n")[0].message.contains("never closed"));
        assert!(
            err("---\nid: a\n--- \n---\n")[0]
                .message
                .contains("exactly `---`")
        );
    }

    #[test]
    fn syntax_errors_are_located() {
        let cases = [
            ("---\n\tid: a\n---\n", 2, Some("id"), "tabs"),
            ("---\n  id: a\n---\n", 2, Some("id"), "indented"),
            ("---\n  - a\n---\n", 2, None, "indented"),
            ("---\nid: a\n- b\n---\n", 3, None, "right under a `key:`"),
            ("---\n- a\n---\n", 2, None, "right under a `key:`"),
            (
                "---\ntools:\n  - a\n    - b\n---\n",
                4,
                Some("tools"),
                "one indentation",
            ),
            (
                "---\ntools:\n  - [a]\n---\n",
                3,
                Some("tools"),
                "nested lists",
            ),
            (
                "---\ntools:\n  -\n---\n",
                3,
                Some("tools"),
                "empty list item",
            ),
            ("---\nid:a\n---\n", 2, Some("id"), "space after"),
            ("---\nid:\ta\n---\n", 2, Some("id"), "not a tab"),
            ("---\nnot a key\n---\n", 2, None, "key: value"),
            ("---\n\"id\": a\n---\n", 2, None, "without quotes"),
            ("---\nm: {a: b}\n---\n", 2, Some("m"), "nested maps"),
            ("---\nm: [[a]]\n---\n", 2, Some("m"), "nested"),
            ("---\nm: [a, [b]]\n---\n", 2, Some("m"), "nested"),
            ("---\nm: [a,, b]\n---\n", 2, Some("m"), "empty list item"),
            ("---\nm: [a, ]\n---\n", 2, Some("m"), "empty list item"),
            ("---\nm: [a, b\n---\n", 2, Some("m"), "unterminated list"),
            ("---\nm: [a] x\n---\n", 2, Some("m"), "after the list"),
            ("---\nm: \"abc\n---\n", 2, Some("m"), "unterminated double"),
            ("---\nm: 'abc\n---\n", 2, Some("m"), "unterminated single"),
            (
                "---\nm: \"a\" # c\n---\n",
                2,
                Some("m"),
                "after the closing quote",
            ),
            ("---\nm: \"\\x\"\n---\n", 2, Some("m"), "unsupported escape"),
            ("---\nm: \"\\uD800\"\n---\n", 2, Some("m"), "surrogates"),
            ("---\nm: a # c\n---\n", 2, Some("m"), "comments"),
            ("---\nm: a: b\n---\n", 2, Some("m"), "nested map"),
            (
                "---\nm: &anchor a\n---\n",
                2,
                Some("m"),
                "cannot start with `&`",
            ),
            (
                "---\nm: *alias\n---\n",
                2,
                Some("m"),
                "cannot start with `*`",
            ),
            (
                "---\nm: !tag a\n---\n",
                2,
                Some("m"),
                "cannot start with `!`",
            ),
            ("---\nm: |\n---\n", 2, Some("m"), "cannot start with `|`"),
            ("---\nm: - a\n---\n", 2, Some("m"), "cannot start with `-`"),
        ];
        for (text, line, key, needle) in cases {
            let errors = err(text);
            let d = &errors[0];
            assert_eq!(d.line, line, "{text:?}: {d}");
            assert_eq!(d.key.as_deref(), key, "{text:?}: {d}");
            assert!(
                d.message.contains(needle),
                "{text:?}: {d} should mention {needle:?}"
            );
        }
    }

    #[test]
    fn duplicate_keys_name_both_lines() {
        let errors = err("---\nid: a\ndescription: b\nid: c\n---\n");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].line, 4);
        assert_eq!(errors[0].key.as_deref(), Some("id"));
        assert!(errors[0].message.contains("line 2"));
    }

    #[test]
    fn every_bad_line_is_reported() {
        let errors = err("---\n  a: 1\nb: {x}\n\tc: 2\n---\n");
        let lines: Vec<_> = errors.iter().map(|d| d.line).collect();
        assert_eq!(lines, [2, 3, 4]);
    }

    #[test]
    fn an_empty_value_reads_as_null() {
        let fm = ok("---\ndescription:\nid:   \n---\n");
        let field = fm.get("description").unwrap();
        assert!(field.value.is_missing());
        assert!(fm.get("id").unwrap().value.is_missing());
        assert_eq!(
            fm.to_json(),
            serde_json::json!({"description": null, "id": null})
        );
        assert!(
            !ok("---\na: \"\"\n---\n")
                .get("a")
                .unwrap()
                .value
                .is_missing()
        );
    }

    #[test]
    fn recovery_keeps_the_lines_that_parsed() {
        let text = "---\nid: a\nmodel: x # c\n  tools: [a]\nruntime: rho\nid: b\n---\nBody\n";
        let parsed = parse_recovering(text).unwrap();
        let keys: Vec<_> = parsed
            .frontmatter
            .fields
            .iter()
            .map(|f| (f.line, f.key.as_str()))
            .collect();
        assert_eq!(keys, [(2, "id"), (5, "runtime")]);
        assert_eq!(parsed.frontmatter.body, "Body\n");
        let problems: Vec<_> = parsed
            .problems
            .iter()
            .map(|d| (d.line, d.key.as_deref()))
            .collect();
        assert_eq!(
            problems,
            [(3, Some("model")), (4, Some("tools")), (6, Some("id"))]
        );
        // Only the column-1 key whose value failed counts as present-but-broken.
        assert_eq!(parsed.failed_keys, [(3, "model".to_owned())]);
        // The strict form fails with the same problems.
        assert_eq!(parse(text).unwrap_err(), parsed.problems);
        // A broken file shape still stops before the lines.
        assert!(parse_recovering("---\nid: a\n").is_err());
    }

    #[test]
    fn at_sign_starts_a_plain_alias() {
        let fm = ok("---\nmodel: @fast\n---\n");
        assert_eq!(
            fm.get("model").map(|f| f.value.clone()),
            Some(Value::Scalar(plain("@fast")))
        );
    }

    #[test]
    fn json_view_matches_yaml_reading() {
        let fm = ok("---\na: true\nb: \"true\"\nc: 12\nd: [x, 'y']\ne: null\n---\n");
        assert_eq!(
            fm.to_json(),
            serde_json::json!({"a": true, "b": "true", "c": 12, "d": ["x", "y"], "e": null})
        );
    }
}
