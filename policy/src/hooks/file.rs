//! The `hooks.toml` format: parsing and validating one hooks file into a [`HooksFile`], with
//! errors that name the file, the hook and the field at fault.
//!
//! Invariant: a project file's hook can only name its program by an absolute or relative path,
//! never by a bare name looked up on `PATH`.

use std::path::Path;
use std::time::Duration;

use crate::PolicyError;

use super::{
    HOOK_FIELDS, HOOKS_FILE_VERSION, HookEventName, HookScope, HookSpec, HooksFile,
    MAX_HOOK_TIMEOUT,
};

/// Parses and validates one hooks file. `file` is only used in messages.
pub fn parse_hooks_file(
    file: &Path,
    text: &str,
    scope: HookScope,
) -> Result<HooksFile, PolicyError> {
    let table: toml::Table = toml::from_str(text).map_err(|err| {
        let (line, column) = err
            .span()
            .map_or((1, 1), |span| line_column(text, span.start));
        PolicyError::HooksSyntax {
            file: file.to_path_buf(),
            line,
            column,
            message: err.message().to_owned(),
        }
    })?;
    let file_error = |field: &str, problem: String| PolicyError::HooksFile {
        file: file.to_path_buf(),
        field: field.to_owned(),
        problem,
    };

    let mut version_seen = false;
    let mut raw_hooks: &[toml::Value] = &[];
    for (key, value) in &table {
        match key.as_str() {
            "version" => {
                if value.as_integer() != Some(HOOKS_FILE_VERSION) {
                    return Err(file_error(
                        "version",
                        format!("unsupported value {}; expected `version = 1`", show(value)),
                    ));
                }
                version_seen = true;
            }
            "hook" => match value.as_array() {
                Some(items) => raw_hooks = items,
                None => {
                    return Err(file_error(
                        "hook",
                        "expected an array of `[[hook]]` tables".to_owned(),
                    ));
                }
            },
            other => {
                return Err(file_error(
                    other,
                    "unknown key; expected `version` or `[[hook]]`".into(),
                ));
            }
        }
    }
    if !version_seen {
        return Err(file_error(
            "version",
            "missing; expected `version = 1`".to_owned(),
        ));
    }

    let mut hooks: Vec<HookSpec> = Vec::with_capacity(raw_hooks.len());
    for (index, raw) in raw_hooks.iter().enumerate() {
        let hook = parse_hook(file, scope, index, raw)?;
        if hooks.iter().any(|h| h.id == hook.id) {
            return Err(PolicyError::HookField {
                file: file.to_path_buf(),
                hook: hook.id,
                field: "id".to_owned(),
                problem: "duplicate id; each hook in a file needs its own".to_owned(),
            });
        }
        hooks.push(hook);
    }
    Ok(HooksFile {
        path: file.to_path_buf(),
        scope,
        hooks,
    })
}

pub(super) fn parse_hook(
    file: &Path,
    scope: HookScope,
    index: usize,
    raw: &toml::Value,
) -> Result<HookSpec, PolicyError> {
    let position = format!("#{}", index + 1);
    let error = |hook: &str, field: &str, problem: String| PolicyError::HookField {
        file: file.to_path_buf(),
        hook: hook.to_owned(),
        field: field.to_owned(),
        problem,
    };
    let Some(table) = raw.as_table() else {
        return Err(error(
            &position,
            "hook",
            "expected a `[[hook]]` table".to_owned(),
        ));
    };

    // The id comes first so every later message can name the hook.
    let id = match table.get("id") {
        None => return Err(error(&position, "id", "missing".to_owned())),
        Some(value) => {
            let id = value.as_str().unwrap_or_default();
            if !valid_hook_id(id) {
                return Err(error(
                    &position,
                    "id",
                    format!(
                        "{} is not a valid id: use letters, digits, `_`, `-` or `.`",
                        show(value)
                    ),
                ));
            }
            id.to_owned()
        }
    };
    let error = |field: &str, problem: String| error(&id, field, problem);

    let mut on = None;
    let mut tools = None;
    let mut command = None;
    let mut timeout = None;
    let mut env = Vec::new();
    for (key, value) in table {
        match key.as_str() {
            "id" => {}
            "on" => {
                let name = value.as_str().unwrap_or_default();
                let event = HookEventName::ALL.into_iter().find(|e| e.as_str() == name);
                on = Some(event.ok_or_else(|| {
                    error(
                        "on",
                        format!(
                            "unknown event {}; expected one of {}",
                            show(value),
                            HookEventName::ALL.map(HookEventName::as_str).join(", ")
                        ),
                    )
                })?);
            }
            "tools" => {
                let list = string_list(value).map_err(|p| error("tools", p))?;
                if list.is_empty() {
                    return Err(error(
                        "tools",
                        "empty list matches nothing; omit `tools` to match every tool".into(),
                    ));
                }
                if let Some(bad) = list
                    .iter()
                    .find(|t| t.is_empty() || t.strip_suffix('*').unwrap_or(t).contains('*'))
                {
                    return Err(error(
                        "tools",
                        format!("bad matcher `{bad}`: use a tool name, `prefix*` or `*`"),
                    ));
                }
                tools = Some(list);
            }
            "command" => {
                let argv = string_list(value).map_err(|p| error("command", p))?;
                check_command(&argv, scope).map_err(|p| error("command", p))?;
                command = Some(argv);
            }
            "timeout" => {
                let text = value.as_str().ok_or_else(|| {
                    error(
                        "timeout",
                        format!("expected a string like \"2s\", got {}", show(value)),
                    )
                })?;
                timeout = Some(parse_timeout(text).map_err(|p| error("timeout", p))?);
            }
            "env" => {
                env = string_list(value).map_err(|p| error("env", p))?;
                check_env_names(&env).map_err(|p| error("env", p))?;
            }
            other => {
                return Err(error(
                    other,
                    format!("unknown field; expected one of {HOOK_FIELDS}"),
                ));
            }
        }
    }
    let on = on.ok_or_else(|| error("on", "missing".to_owned()))?;
    if tools.is_some() && on.is_observational() {
        return Err(error(
            "tools",
            format!("only applies to `before_tool_use` hooks, not `{on}`"),
        ));
    }
    Ok(HookSpec {
        on,
        tools,
        command: command.ok_or_else(|| error("command", "missing".to_owned()))?,
        timeout: timeout.ok_or_else(|| error("timeout", "missing".to_owned()))?,
        env,
        id,
        scope,
    })
}

/// A TOML value as a user would recognize it in a message.
pub(super) fn show(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(_) => "an array".to_owned(),
        toml::Value::Table(_) => "a table".to_owned(),
    }
}

pub(super) fn valid_hook_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

pub(super) fn string_list(value: &toml::Value) -> Result<Vec<String>, String> {
    let items = value
        .as_array()
        .ok_or_else(|| format!("expected a list of strings, got {}", show(value)))?;
    items
        .iter()
        .map(|item| {
            item.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("expected a list of strings, found {}", show(item)))
        })
        .collect()
}

pub(super) fn check_command(argv: &[String], scope: HookScope) -> Result<(), String> {
    let Some(program) = argv.first() else {
        return Err("empty; expected an argv list such as [\"/path/to/hook\", \"--flag\"]".into());
    };
    if program.is_empty() {
        return Err("the program (first element) is empty".to_owned());
    }
    if argv.iter().any(|arg| arg.contains('\0')) {
        return Err("an argument contains a NUL byte".to_owned());
    }
    // A project file must not be able to pick up whatever a bare name resolves to on the
    // user's PATH.
    if scope == HookScope::Project && !program.contains('/') {
        return Err(format!(
            "project hooks must name their program by path (e.g. `./{program}`), not the bare \
             PATH name `{program}`"
        ));
    }
    Ok(())
}

pub(super) fn check_env_names(names: &[String]) -> Result<(), String> {
    for (i, name) in names.iter().enumerate() {
        let mut bytes = name.bytes();
        let valid = bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return Err(format!("`{name}` is not a valid environment variable name"));
        }
        if names[..i].contains(name) {
            return Err(format!("`{name}` is listed twice"));
        }
    }
    Ok(())
}

/// Parses a hook timeout: a positive whole number with unit `ms`, `s` or `m`, at most
/// [`MAX_HOOK_TIMEOUT`]. The error is the problem, for the caller to place.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let shape = || format!("`{text}` is not a duration like \"500ms\", \"2s\" or \"1m\"");
    if number.is_empty() {
        return Err(shape());
    }
    let value: u64 = number.parse().map_err(|_| shape())?;
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        _ => return Err(shape()),
    };
    let too_long = || format!("`{text}` exceeds the limit of 10m");
    let millis = value.checked_mul(millis_per_unit).ok_or_else(too_long)?;
    let duration = Duration::from_millis(millis);
    if duration.is_zero() {
        return Err(format!("`{text}` must be greater than zero"));
    }
    if duration > MAX_HOOK_TIMEOUT {
        return Err(too_long());
    }
    Ok(duration)
}

pub(super) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.split(|&b| b == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{USER_FILE, hook_table, parse, parse_err};
    use super::*;

    #[test]
    fn accepts_a_full_user_file() {
        let file = parse(USER_FILE, HookScope::User).unwrap();
        assert_eq!(file.hooks.len(), 2);
        let guard = &file.hooks[0];
        assert_eq!(guard.id, "guard");
        assert_eq!(guard.on, HookEventName::BeforeToolUse);
        assert_eq!(
            guard.tools.as_deref(),
            Some(&["workflow_command".to_owned()][..])
        );
        assert_eq!(guard.command, ["/home/me/bin/guard", "--strict"]);
        assert_eq!(guard.timeout, Duration::from_secs(2));
        assert_eq!(guard.env, ["GUARD_TOKEN"]);
        let log = &file.hooks[1];
        assert_eq!(log.on, HookEventName::WorkflowNodeFinished);
        assert_eq!(log.tools, None);
        assert_eq!(log.timeout, Duration::from_millis(500));
        assert!(log.env.is_empty());
    }

    #[test]
    fn accepts_non_ascii_and_prefix_tool_matchers() {
        let text = hook_table(
            "command = [\"/x\"]\ntimeout = \"1s\"\ntools = [\"é\", \"edit_*\", \"*\"]\n",
        );
        let hook = &parse(&text, HookScope::User).unwrap().hooks[0];
        assert_eq!(hook.tools.as_ref().unwrap().len(), 3);
    }

    #[test]
    fn version_only_file_has_no_hooks() {
        assert!(
            parse("version = 1\n", HookScope::Project)
                .unwrap()
                .hooks
                .is_empty()
        );
    }

    #[test]
    fn unknown_hook_field_names_file_hook_and_field() {
        let msg = parse_err(
            &hook_table("command = [\"/x\"]\ntimeout = \"1s\"\nshell = \"x\"\n"),
            HookScope::User,
        );
        assert_eq!(
            msg,
            "/home/me/.rho/hooks.toml: hook `h`: field `shell`: unknown field; expected one of \
             id, on, tools, command, timeout, env"
        );
    }

    #[test]
    fn unknown_top_level_key_names_file_and_key() {
        let msg = parse_err("version = 1\nhooks = []\n", HookScope::User);
        assert_eq!(
            msg,
            "/home/me/.rho/hooks.toml: field `hooks`: unknown key; expected `version` or `[[hook]]`"
        );
    }

    #[test]
    fn version_must_be_one_and_present() {
        assert!(
            parse_err("version = 2\n", HookScope::User)
                .contains("field `version`: unsupported value 2")
        );
        assert!(parse_err("version = \"1\"\n", HookScope::User).contains("field `version`"));
        assert!(
            parse_err("[[hook]]\nid = \"a\"\n", HookScope::User)
                .contains("field `version`: missing")
        );
    }

    #[test]
    fn syntax_error_names_line_and_column() {
        let err = parse("version = 1\n[[hook]]\nid = \n", HookScope::User).unwrap_err();
        let PolicyError::HooksSyntax { line, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(*line, 3, "{err}");
        assert!(
            err.to_string().starts_with("/home/me/.rho/hooks.toml:3:"),
            "{err}"
        );
    }

    #[test]
    fn missing_required_fields_are_named() {
        let cases = [
            (
                "version = 1\n[[hook]]\non = \"before_tool_use\"\n",
                "hook `#1`: field `id`: missing",
            ),
            (
                "version = 1\n[[hook]]\nid = \"a\"\ncommand = [\"/x\"]\ntimeout = \"1s\"\n",
                "hook `a`: field `on`: missing",
            ),
            (
                &hook_table("timeout = \"1s\"\n"),
                "hook `h`: field `command`: missing",
            ),
            (
                &hook_table("command = [\"/x\"]\n"),
                "hook `h`: field `timeout`: missing",
            ),
        ];
        for (text, want) in cases {
            let msg = parse_err(text, HookScope::User);
            assert!(msg.contains(want), "{msg} should contain {want}");
        }
    }

    #[test]
    fn rejects_bad_values() {
        let cases = [
            (hook_table("command = \"/x --y\"\ntimeout = \"1s\"\n"), "field `command`: expected a list of strings"),
            (hook_table("command = []\ntimeout = \"1s\"\n"), "field `command`: empty"),
            (hook_table("command = [\"\"]\ntimeout = \"1s\"\n"), "field `command`: the program (first element) is empty"),
            (hook_table("command = [\"/x\", 3]\ntimeout = \"1s\"\n"), "field `command`: expected a list of strings, found 3"),
            (hook_table("command = [\"/x\"]\ntimeout = 2\n"), "field `timeout`: expected a string"),
            (hook_table("command = [\"/x\"]\ntimeout = \"11m\"\n"), "exceeds the limit of 10m"),
            (hook_table("command = [\"/x\"]\ntimeout = \"0s\"\n"), "must be greater than zero"),
            (hook_table("command = [\"/x\"]\ntimeout = \"2 s\"\n"), "is not a duration"),
            (hook_table("command = [\"/x\"]\ntimeout = \"1s\"\nenv = [\"BAD-NAME\"]\n"), "field `env`: `BAD-NAME` is not a valid"),
            (hook_table("command = [\"/x\"]\ntimeout = \"1s\"\nenv = [\"A\", \"A\"]\n"), "`A` is listed twice"),
            (hook_table("command = [\"/x\"]\ntimeout = \"1s\"\ntools = []\n"), "field `tools`: empty list"),
            (hook_table("command = [\"/x\"]\ntimeout = \"1s\"\ntools = [\"a*b\"]\n"), "bad matcher `a*b`"),
            (hook_table("command = [\"/x\"]\ntimeout = \"1s\"\ntools = [\"**\"]\n"), "bad matcher `**`"),
            (
                "version = 1\n[[hook]]\nid = \"o\"\non = \"workflow_started\"\ntools = [\"x\"]\ncommand = [\"/x\"]\ntimeout = \"1s\"\n".to_owned(),
                "hook `o`: field `tools`: only applies to `before_tool_use`",
            ),
            (
                "version = 1\n[[hook]]\nid = \"o\"\non = \"after_tool_use\"\ncommand = [\"/x\"]\ntimeout = \"1s\"\n".to_owned(),
                "hook `o`: field `on`: unknown event \"after_tool_use\"",
            ),
            (
                "version = 1\n[[hook]]\nid = \"has space\"\n".to_owned(),
                "hook `#1`: field `id`: \"has space\" is not a valid id",
            ),
            (format!("{}\n[[hook]]\nid = \"h\"\non = \"workflow_failed\"\ncommand = [\"/y\"]\ntimeout = \"1s\"\n", hook_table("command = [\"/x\"]\ntimeout = \"1s\"\n")), "hook `h`: field `id`: duplicate id"),
        ];
        for (text, want) in cases {
            let msg = parse_err(&text, HookScope::User);
            assert!(msg.contains(want), "{msg}\n  should contain: {want}");
        }
    }

    #[test]
    fn project_hooks_must_name_program_by_path() {
        let bare = hook_table("command = [\"guard\"]\ntimeout = \"1s\"\n");
        assert!(parse(&bare, HookScope::User).is_ok());
        let msg = parse_err(&bare, HookScope::Project);
        assert!(
            msg.contains(
                "hook `h`: field `command`: project hooks must name their program by path"
            ),
            "{msg}"
        );
        let pathed = hook_table("command = [\"./.rho/guard\"]\ntimeout = \"1s\"\n");
        assert!(parse(&pathed, HookScope::Project).is_ok());
    }

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_timeout("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_timeout("1m"), Ok(Duration::from_mins(1)));
        assert_eq!(parse_timeout("10m"), Ok(MAX_HOOK_TIMEOUT));
        assert_eq!(parse_timeout("600000ms"), Ok(MAX_HOOK_TIMEOUT));
        for bad in [
            "",
            "s",
            "2",
            "1.5s",
            "-1s",
            "1h",
            "2S",
            " 2s",
            "99999999999999999999m",
            "600001ms",
        ] {
            assert!(parse_timeout(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
