//! Per-key checks of a definition's frontmatter: each field is read into its typed value with
//! its line, or reported once and marked broken so that rules depending on it are skipped.
//!
//! Invariant: a key is either recorded with a usable value or reported, never both.

use std::collections::BTreeSet;

use super::super::frontmatter::{Diagnostic, Field, ScalarStyle, Value, YamlKind};
use super::values::{ModelPolicy, PromptPolicy, Reasoning, Runtime};
use super::{DESCRIPTION_RULE, ID_RULE, KEYS};

/// Field values after per-key checks, each with its line.
#[derive(Default)]
pub(super) struct RawFields {
    pub(super) id: Option<(usize, String)>,
    pub(super) description: Option<(usize, String)>,
    pub(super) runtime: Option<(usize, Runtime)>,
    pub(super) prompt: Option<(usize, PromptPolicy)>,
    pub(super) model_policy: Option<(usize, ModelPolicy)>,
    pub(super) model: Option<(usize, String)>,
    pub(super) provider: Option<(usize, String)>,
    pub(super) auth: Option<(usize, String)>,
    pub(super) reasoning: Option<(usize, Reasoning)>,
    pub(super) tools: Option<(usize, RawTools)>,
    pub(super) inherit_claude_config: Option<(usize, bool)>,
    /// Known keys that are present in the file but have no usable value (already reported).
    pub(super) broken: BTreeSet<String>,
}

pub(super) enum RawTools {
    All,
    List(Vec<String>),
}

impl RawFields {
    pub(super) fn is_broken(&self, key: &str) -> bool {
        self.broken.contains(key)
    }

    /// Checks one field and records its value; on failure the problem is reported and the key
    /// marked broken.
    pub(super) fn take(&mut self, field: &Field, problems: &mut Vec<Diagnostic>) {
        if let Err(d) = self.take_value(field, problems) {
            if KEYS.contains(&field.key.as_str()) {
                self.broken.insert(field.key.clone());
            }
            problems.push(d);
        }
    }

    fn take_value(
        &mut self,
        field: &Field,
        problems: &mut Vec<Diagnostic>,
    ) -> Result<(), Diagnostic> {
        let line = field.line;
        let key = field.key.as_str();
        if !KEYS.contains(&key) {
            return Err(unknown_key(line, key));
        }
        if field.value.is_missing() {
            return Err(Diagnostic::keyed(
                line,
                key,
                format!("missing value: `{key}` needs {}", self.rule(key)),
            ));
        }
        match key {
            "id" => self.id = Some((line, string(field)?)),
            "description" => self.description = Some((line, string(field)?)),
            "runtime" => {
                let r = one_of(
                    field,
                    &[("rho", Runtime::Rho), ("claude-cli", Runtime::ClaudeCli)],
                    "rho | claude-cli",
                )?;
                self.runtime = Some((line, r));
            }
            "prompt" => {
                let p = one_of(
                    field,
                    &[
                        ("extend", PromptPolicy::Extend),
                        ("replace", PromptPolicy::Replace),
                    ],
                    "extend | replace",
                )?;
                self.prompt = Some((line, p));
            }
            "model-policy" => {
                let p = one_of(
                    field,
                    &[
                        ("inherit", ModelPolicy::Inherit),
                        ("prefer", ModelPolicy::Prefer),
                        ("require", ModelPolicy::Require),
                        ("select", ModelPolicy::Select),
                    ],
                    "inherit | prefer | require | select",
                )?;
                self.model_policy = Some((line, p));
            }
            "model" => self.model = Some((line, word(field)?)),
            "provider" => self.provider = Some((line, word(field)?)),
            "auth" => self.auth = Some((line, word(field)?)),
            "reasoning" => {
                let choices: Vec<_> = Reasoning::ALL.iter().map(|r| (r.as_str(), *r)).collect();
                let claude = matches!(self.runtime, Some((_, Runtime::ClaudeCli)));
                let allowed = reasoning_choices(claude);
                self.reasoning = Some((line, one_of(field, &choices, &allowed)?));
            }
            "tools" => self.tools = Some((line, tools(field, problems)?)),
            _ => self.inherit_claude_config = Some((line, boolean(field)?)),
        }
        Ok(())
    }

    /// What `key` takes, for messages (given the runtime read so far).
    fn rule(&self, key: &str) -> String {
        let claude = matches!(self.runtime, Some((_, Runtime::ClaudeCli)));
        match key {
            "id" => ID_RULE.to_owned(),
            "description" => DESCRIPTION_RULE.to_owned(),
            "runtime" => "one of rho | claude-cli".to_owned(),
            "prompt" => "one of extend | replace".to_owned(),
            "model-policy" if claude => "one of inherit | select".to_owned(),
            "model-policy" => "one of inherit | prefer | require | select".to_owned(),
            "model" if claude => "a Claude model name without whitespace (such as opus)".to_owned(),
            "model" => "a model name without whitespace, or @alias".to_owned(),
            "provider" => {
                "a configured provider name without whitespace (runtime rho only)".to_owned()
            }
            "auth" => {
                "an auth profile of the provider, such as xai-oauth (runtime rho only)".to_owned()
            }
            "reasoning" => format!("one of {}", reasoning_choices(claude)),
            "tools" if claude => {
                "a list of Claude Code tools such as [Read, Grep, \"Bash(git *)\"]".to_owned()
            }
            "tools" => "`all` or a list of Rho capabilities such as [read_file, grep]".to_owned(),
            _ => "`true` or `false`".to_owned(),
        }
    }
}

/// The reasoning values a runtime accepts, for messages.
pub(super) fn reasoning_choices(claude: bool) -> String {
    Reasoning::ALL
        .iter()
        .filter(|r| !claude || !matches!(r, Reasoning::Off | Reasoning::Minimal))
        .map(|r| r.as_str())
        .collect::<Vec<_>>()
        .join(" | ")
}

pub(super) fn unknown_key(line: usize, key: &str) -> Diagnostic {
    let normalized = key.replace('_', "-");
    let hint = KEYS
        .iter()
        .find(|k| k.replace('_', "-") == normalized || k.eq_ignore_ascii_case(key))
        .map(|k| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default();
    Diagnostic::keyed(
        line,
        key,
        format!("unknown key{hint}; allowed keys: {}", KEYS.join(", ")),
    )
}

/// A single string value (quoted, or plain text that YAML reads as a string).
pub(super) fn string(field: &Field) -> Result<String, Diagnostic> {
    match &field.value {
        Value::List(_) => Err(Diagnostic::keyed(
            field.line,
            &field.key,
            "expected a single value, not a list",
        )),
        Value::Scalar(s) => match s.yaml_kind() {
            YamlKind::String => Ok(s.text.clone()),
            kind => Err(Diagnostic::keyed(
                field.line,
                &field.key,
                format!(
                    "`{}` reads as {} in YAML, but a string is expected; quote it (\"{}\")",
                    s.text,
                    kind.describe(),
                    s.text
                ),
            )),
        },
    }
}

/// A non-empty string without whitespace (`model`, `provider`).
pub(super) fn word(field: &Field) -> Result<String, Diagnostic> {
    let text = string(field)?;
    if text.is_empty() {
        return Err(Diagnostic::keyed(
            field.line,
            &field.key,
            "must not be empty",
        ));
    }
    if text.chars().any(|c| c.is_whitespace() || c == '\u{feff}') {
        return Err(Diagnostic::keyed(
            field.line,
            &field.key,
            format!("`{text}` contains whitespace; a {} is one word", field.key),
        ));
    }
    Ok(text)
}

/// One of `choices`; every failure names what is allowed (`allowed`, such as `a | b`).
pub(super) fn one_of<T: Copy>(
    field: &Field,
    choices: &[(&str, T)],
    allowed: &str,
) -> Result<T, Diagnostic> {
    let text = string(field).map_err(|mut d| {
        d.message = format!("{}; allowed: {allowed}", d.message);
        d
    })?;
    choices
        .iter()
        .find(|(name, _)| *name == text)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            Diagnostic::keyed(
                field.line,
                &field.key,
                format!("unknown value `{text}`; allowed: {allowed}"),
            )
        })
}

pub(super) fn boolean(field: &Field) -> Result<bool, Diagnostic> {
    let problem = |msg: String| Diagnostic::keyed(field.line, &field.key, msg);
    match &field.value {
        Value::Scalar(s) if s.style == ScalarStyle::Plain && s.text == "true" => Ok(true),
        Value::Scalar(s) if s.style == ScalarStyle::Plain && s.text == "false" => Ok(false),
        Value::Scalar(s) if s.style != ScalarStyle::Plain => Err(problem(format!(
            "expected a boolean, `true` or `false` without quotes, not the string \"{}\"",
            s.text
        ))),
        Value::Scalar(s) => Err(problem(format!(
            "`{}` is not a boolean here; booleans are only `true` or `false`",
            s.text
        ))),
        Value::List(_) => Err(problem("expected `true` or `false`, not a list".into())),
    }
}

/// The `tools` value. A bad list item is reported (in `problems`) and left out, so the other
/// items are still checked against the runtime's vocabulary.
pub(super) fn tools(field: &Field, problems: &mut Vec<Diagnostic>) -> Result<RawTools, Diagnostic> {
    let problem = |msg: String| Diagnostic::keyed(field.line, &field.key, msg);
    match &field.value {
        Value::Scalar(s) if s.yaml_kind() == YamlKind::String && s.text == "all" => {
            Ok(RawTools::All)
        }
        Value::Scalar(s) => Err(problem(format!(
            "`{}` is not a tool list; write `tools: all` or a list such as `[read_file, grep]`",
            s.text
        ))),
        Value::List(items) => {
            let mut out: Vec<String> = Vec::with_capacity(items.len());
            for item in items {
                let bad = if item.yaml_kind() != YamlKind::String {
                    Some(format!(
                        "list item `{}` reads as {} in YAML; tool names are strings",
                        item.text,
                        item.yaml_kind().describe()
                    ))
                } else if item.text.is_empty() {
                    Some("empty tool name in the list".to_owned())
                } else if out.contains(&item.text) {
                    Some(format!("`{}` is listed twice", item.text))
                } else {
                    None
                };
                match bad {
                    Some(msg) => problems.push(problem(msg)),
                    None => out.push(item.text.clone()),
                }
            }
            Ok(RawTools::List(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_suggests_spelling() {
        let d = unknown_key(3, "model_policy");
        assert!(
            d.message.contains("did you mean `model-policy`"),
            "{}",
            d.message
        );
        let d = unknown_key(3, "inherit-claude-config");
        assert!(
            d.message.contains("did you mean `inherit_claude_config`"),
            "{}",
            d.message
        );
        let d = unknown_key(3, "color");
        assert!(
            d.message.contains("allowed keys: id, description"),
            "{}",
            d.message
        );
    }
}
