//! Agent definitions: the typed, validated form of a definition file, and the rules of the
//! agent definition schema (value sets, per-runtime model, reasoning and tool rules).
//!
//! Invariant: an [`AgentDefinition`] only exists when every rule holds, and it stores the
//! *effective* values (runtime resolved, model policy resolved, tools defaulted), so two files
//! that mean the same thing produce equal definitions whatever their formatting.

use std::collections::BTreeSet;
use std::fmt;

use super::frontmatter::{self, Diagnostic, Field, ScalarStyle, Value, YamlKind};

/// The frontmatter keys a definition may use.
/// (`inherit_claude_config` is spelled with underscores, unlike `model-policy`: both spellings
/// are fixed by the definition schema.)
pub const KEYS: [&str; 10] = [
    "id",
    "description",
    "runtime",
    "prompt",
    "model-policy",
    "model",
    "provider",
    "reasoning",
    "tools",
    INHERIT_CLAUDE_CONFIG,
];

const INHERIT_CLAUDE_CONFIG: &str = "inherit_claude_config";

/// The built-in Rho capability names (extension names are allowed too; they must be supplied
/// by the host to bind).
pub const RHO_CAPABILITIES: [&str; 19] = [
    "agent",
    "agents",
    "apply_patch",
    "bash",
    "edit_file",
    "fetch_content",
    "get_search_content",
    "glob",
    "grep",
    "list_dir",
    "powershell",
    "process",
    "questionnaire",
    "read_file",
    "rho",
    "shell",
    "skill",
    "web_search",
    "write_file",
];

/// Longest id, in characters.
pub const MAX_ID_LEN: usize = 64;
/// Longest description, in Unicode scalar values.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// The execution harness of an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Runtime {
    /// Rho's own in-process agent loop.
    Rho,
    /// The installed `claude` binary, delegated only.
    ClaudeCli,
}

impl Runtime {
    /// The frontmatter spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rho => "rho",
            Self::ClaudeCli => "claude-cli",
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the body relates to the base coding prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PromptPolicy {
    /// Base prompt, then the body (if any).
    Extend,
    /// The body is the whole system prompt.
    Replace,
}

impl PromptPolicy {
    /// The frontmatter spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Extend => "extend",
            Self::Replace => "replace",
        }
    }
}

/// How strongly a pinned model is requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelPolicy {
    /// Keep the parent's provider and model.
    Inherit,
    /// Use the model when it is available, else the parent's.
    Prefer,
    /// Use the model or fail.
    Require,
    /// Use the model (the default meaning of a bare `model:`).
    Select,
}

impl ModelPolicy {
    /// The frontmatter spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Inherit => "inherit",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::Select => "select",
        }
    }
}

/// The effective model choice of a definition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ModelSelection {
    /// No model of its own: the parent's (rho) or Claude's default (claude-cli).
    Inherit,
    /// A model pinned with a policy (never `Inherit`).
    Pinned {
        /// `Prefer`, `Require` or `Select`.
        policy: ModelPolicy,
        /// The model as written (`@alias` on rho, a Claude model name on claude-cli).
        model: String,
        /// The provider, rho only.
        provider: Option<String>,
    },
}

impl ModelSelection {
    /// The effective policy.
    pub fn policy(&self) -> ModelPolicy {
        match self {
            Self::Inherit => ModelPolicy::Inherit,
            Self::Pinned { policy, .. } => *policy,
        }
    }
}

/// Reasoning effort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reasoning {
    /// No reasoning (rho only).
    Off,
    /// Minimal reasoning (rho only).
    Minimal,
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
    /// Extra high.
    Xhigh,
    /// Maximum.
    Max,
}

impl Reasoning {
    /// Every value, in increasing effort.
    pub const ALL: [Self; 7] = [
        Self::Off,
        Self::Minimal,
        Self::Low,
        Self::Medium,
        Self::High,
        Self::Xhigh,
        Self::Max,
    ];

    /// The frontmatter spelling (also Claude's `--effort` value).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
            Self::Xhigh => "xhigh",
            Self::Max => "max",
        }
    }

    /// Parses the frontmatter spelling.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

/// One Claude Code tool entry: `Name` or `Name(specifier)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaudeToolEntry {
    /// The tool name (`Read`, `Bash`, `mcp__server__tool`).
    pub base: String,
    /// The text between the outer parentheses, when present.
    pub specifier: Option<String>,
}

impl ClaudeToolEntry {
    /// Parses one entry, explaining what is wrong.
    pub fn parse(entry: &str) -> Result<Self, String> {
        let (base, specifier) = match entry.find('(') {
            Some(open) => {
                let inner = entry[open..]
                    .strip_prefix('(')
                    .and_then(|s| s.strip_suffix(')'))
                    .ok_or_else(|| {
                        format!("`{entry}`: a specifier ends the entry: `Name(specifier)`")
                    })?;
                (&entry[..open], Some(inner))
            }
            None => (entry, None),
        };
        if base.is_empty() {
            return Err(format!("`{entry}`: the tool name before `(` is empty"));
        }
        if !base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!(
                "`{entry}`: a Claude tool name has only letters, digits, `_` and `-`"
            ));
        }
        // A leading `-` would make the entry look like an option to the `claude` command line.
        if base.starts_with('-') {
            return Err(format!(
                "`{entry}`: a Claude tool name cannot start with `-`"
            ));
        }
        // An empty specifier (`Bash()`) is accepted: the entry grammar only asks for balanced
        // parentheses and no commas.
        if let Some(spec) = specifier {
            if spec.contains(',') {
                return Err(format!(
                    "`{entry}`: commas are not allowed inside a specifier (Claude's tool list \
                     grammar cannot carry them); split it into separate entries"
                ));
            }
            let mut depth: i64 = 0;
            for c in spec.chars() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                if depth < 0 {
                    break;
                }
            }
            if depth != 0 {
                return Err(format!(
                    "`{entry}`: parentheses in the specifier are not balanced"
                ));
            }
        }
        Ok(Self {
            base: base.to_owned(),
            specifier: specifier.map(str::to_owned),
        })
    }
}

impl fmt::Display for ClaudeToolEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.specifier {
            Some(spec) => write!(f, "{}({spec})", self.base),
            None => f.write_str(&self.base),
        }
    }
}

/// The effective tool request of a definition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ToolRequest {
    /// rho: every capability the host supplies (`tools` omitted or `tools: all`).
    AllHost,
    /// rho: an allowlist of capability names, in declared order, without duplicates.
    Rho(Vec<String>),
    /// claude-cli: Claude Code tool entries, in declared order (empty when omitted).
    Claude(Vec<ClaudeToolEntry>),
}

impl ToolRequest {
    /// A short human rendering: `all`, or the comma-separated names.
    pub fn describe(&self) -> String {
        match self {
            Self::AllHost => "all".to_owned(),
            Self::Rho(names) => names.join(","),
            Self::Claude(entries) => entries
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// The entries as strings (empty for `AllHost`).
    pub fn names(&self) -> Vec<String> {
        match self {
            Self::AllHost => Vec::new(),
            Self::Rho(names) => names.clone(),
            Self::Claude(entries) => entries.iter().map(ToString::to_string).collect(),
        }
    }
}

/// A validated agent definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDefinition {
    /// The stable identifier (from `id:` or the file stem).
    pub id: String,
    /// The trimmed description shown by the agent tool.
    pub description: String,
    /// The execution harness.
    pub runtime: Runtime,
    /// How the body is used.
    pub prompt: PromptPolicy,
    /// The trimmed Markdown body.
    pub body: String,
    /// The effective model choice.
    pub model: ModelSelection,
    /// Reasoning effort; `None` inherits.
    pub reasoning: Option<Reasoning>,
    /// The effective tool request.
    pub tools: ToolRequest,
    /// claude-cli only: load the user's full Claude settings.
    pub inherit_claude_config: bool,
}

/// Checks an id against the schema: 1-64 lowercase ASCII letters and digits in groups joined
/// by single hyphens.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

const ID_RULE: &str = "1-64 characters: lowercase ASCII letters and digits, joined by single \
                       hyphens (no leading, trailing or double hyphen)";

/// Parses and validates a whole definition file. `file_stem` supplies the id when the
/// frontmatter has none. Every problem found is returned, each located by line and key: syntax
/// problems of some lines do not stop the checks of the lines that parsed.
///
/// A key that is present but whose value cannot be used (a syntax error, a wrong type, an
/// unknown value) is reported once: the rules that depend on it are skipped rather than
/// reported against a guessed default. In particular an unusable `runtime` skips the
/// runtime-specific model, reasoning, tool and `inherit_claude_config` rules.
pub fn parse_definition(text: &str, file_stem: &str) -> Result<AgentDefinition, Vec<Diagnostic>> {
    let parsed = frontmatter::parse_recovering(text)?;
    let fm = &parsed.frontmatter;
    let mut problems = parsed.problems.clone();
    let mut raw = RawFields::default();

    for (line, key) in &parsed.failed_keys {
        if !KEYS.contains(&key.as_str()) {
            problems.push(unknown_key(*line, key));
        }
    }
    for d in &parsed.problems {
        if let Some(key) = &d.key
            && KEYS.contains(&key.as_str())
            && fm.get(key).is_none()
        {
            raw.broken.insert(key.clone());
        }
    }

    // The runtime decides which values other keys may take, so it is read first.
    let (runtime_field, other_fields): (Vec<&Field>, Vec<&Field>) =
        fm.fields.iter().partition(|f| f.key == "runtime");
    for field in runtime_field.into_iter().chain(other_fields) {
        raw.take(field, &mut problems);
    }

    let id = if let Some((line, id)) = &raw.id {
        if !is_valid_id(id) {
            problems.push(Diagnostic::keyed(
                *line,
                "id",
                format!("`{id}` is invalid: {ID_RULE}"),
            ));
        }
        id.clone()
    } else {
        if !raw.is_broken("id") && !is_valid_id(file_stem) {
            problems.push(Diagnostic::keyed(
                1,
                "id",
                format!(
                    "no `id` is set and the file name `{file_stem}` is not a valid id \
                     ({ID_RULE}); rename the file or set `id:`"
                ),
            ));
        }
        file_stem.to_owned()
    };

    let description = match &raw.description {
        None => {
            if !raw.is_broken("description") {
                problems.push(Diagnostic::keyed(
                    1,
                    "description",
                    format!("is required: {DESCRIPTION_RULE}"),
                ));
            }
            String::new()
        }
        Some((line, text)) => {
            let trimmed = text.trim();
            if trimmed.is_empty() {
                problems.push(Diagnostic::keyed(
                    *line,
                    "description",
                    format!("is empty; it needs {DESCRIPTION_RULE} after trimming"),
                ));
            } else if text.chars().count() > MAX_DESCRIPTION_CHARS {
                // The untrimmed length is checked so that every accepted file also satisfies the
                // published JSON Schema, which sees the value before trimming.
                problems.push(Diagnostic::keyed(
                    *line,
                    "description",
                    format!(
                        "is {} characters long; at most {MAX_DESCRIPTION_CHARS} are allowed",
                        text.chars().count()
                    ),
                ));
            }
            trimmed.to_owned()
        }
    };

    let runtime = raw.runtime.map_or(Runtime::Rho, |(_, r)| r);
    let prompt = raw.prompt.map_or(PromptPolicy::Extend, |(_, p)| p);
    let body = fm.body.trim().to_owned();
    if let (Some((line, PromptPolicy::Replace)), true) = (raw.prompt, body.is_empty()) {
        problems.push(Diagnostic::keyed(
            line,
            "prompt",
            "`replace` needs a non-empty Markdown body after the closing `---` (it becomes the \
             whole system prompt); use `extend` to keep the base prompt",
        ));
    }

    // Runtime-specific rules; dropped when the runtime itself is unusable (reported already).
    let mut by_runtime = Vec::new();
    let model = match runtime {
        Runtime::Rho => rho_model(&raw, &mut by_runtime),
        Runtime::ClaudeCli => claude_model(&raw, &mut by_runtime),
    };

    let reasoning = raw.reasoning.map(|(line, r)| {
        if runtime == Runtime::ClaudeCli && matches!(r, Reasoning::Off | Reasoning::Minimal) {
            by_runtime.push(Diagnostic::keyed(
                line,
                "reasoning",
                format!(
                    "`{}` is not available on runtime claude-cli (it maps to Claude's --effort); \
                     allowed: low, medium, high, xhigh, max, or omit it for Claude's default",
                    r.as_str()
                ),
            ));
        }
        r
    });

    let tools = match runtime {
        Runtime::Rho => rho_tools(raw.tools.as_ref(), &mut by_runtime),
        Runtime::ClaudeCli => claude_tools(raw.tools.as_ref(), &mut by_runtime),
    };

    let inherit_claude_config = match raw.inherit_claude_config {
        Some((line, true)) if runtime != Runtime::ClaudeCli => {
            by_runtime.push(Diagnostic::keyed(
                line,
                INHERIT_CLAUDE_CONFIG,
                "`true` is only allowed with runtime: claude-cli (it loads the user's Claude \
                 settings)",
            ));
            true
        }
        Some((_, value)) => value,
        None => false,
    };
    if !raw.is_broken("runtime") {
        problems.extend(by_runtime);
    }

    if problems.is_empty() {
        Ok(AgentDefinition {
            id,
            description,
            runtime,
            prompt,
            body,
            model,
            reasoning,
            tools,
            inherit_claude_config,
        })
    } else {
        problems.sort_by_key(|d| d.line);
        Err(problems)
    }
}

const DESCRIPTION_RULE: &str = "1-1024 characters of text (shown by the agent tool)";

/// Field values after per-key checks, each with its line.
#[derive(Default)]
struct RawFields {
    id: Option<(usize, String)>,
    description: Option<(usize, String)>,
    runtime: Option<(usize, Runtime)>,
    prompt: Option<(usize, PromptPolicy)>,
    model_policy: Option<(usize, ModelPolicy)>,
    model: Option<(usize, String)>,
    provider: Option<(usize, String)>,
    reasoning: Option<(usize, Reasoning)>,
    tools: Option<(usize, RawTools)>,
    inherit_claude_config: Option<(usize, bool)>,
    /// Known keys that are present in the file but have no usable value (already reported).
    broken: BTreeSet<String>,
}

enum RawTools {
    All,
    List(Vec<String>),
}

impl RawFields {
    fn is_broken(&self, key: &str) -> bool {
        self.broken.contains(key)
    }

    /// Checks one field and records its value; on failure the problem is reported and the key
    /// marked broken.
    fn take(&mut self, field: &Field, problems: &mut Vec<Diagnostic>) {
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
fn reasoning_choices(claude: bool) -> String {
    Reasoning::ALL
        .iter()
        .filter(|r| !claude || !matches!(r, Reasoning::Off | Reasoning::Minimal))
        .map(|r| r.as_str())
        .collect::<Vec<_>>()
        .join(" | ")
}

fn unknown_key(line: usize, key: &str) -> Diagnostic {
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
fn string(field: &Field) -> Result<String, Diagnostic> {
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
fn word(field: &Field) -> Result<String, Diagnostic> {
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
fn one_of<T: Copy>(field: &Field, choices: &[(&str, T)], allowed: &str) -> Result<T, Diagnostic> {
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

fn boolean(field: &Field) -> Result<bool, Diagnostic> {
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
fn tools(field: &Field, problems: &mut Vec<Diagnostic>) -> Result<RawTools, Diagnostic> {
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

/// Whether the model-selection keys all have usable values (else their combinations are not
/// checked: the unusable one is reported already).
fn model_keys_usable(raw: &RawFields) -> bool {
    !["model-policy", "model", "provider"]
        .iter()
        .any(|k| raw.is_broken(k))
}

fn rho_model(raw: &RawFields, problems: &mut Vec<Diagnostic>) -> ModelSelection {
    if let Some((line, model)) = &raw.model
        && model == "@"
    {
        problems.push(Diagnostic::keyed(
            *line,
            "model",
            "`@` must be followed by an alias name",
        ));
    }
    // An `@alias` may come with a `provider`: the binder then requires the alias to resolve to
    // that provider (see `binder`), so the pair is a checked statement, never a silent override.
    let mut combinations = Vec::new();
    let selection = match (raw.model_policy, &raw.model, &raw.provider) {
        (None, None, None) => ModelSelection::Inherit,
        (None, None, Some((line, _))) => {
            combinations.push(Diagnostic::keyed(
                *line,
                "provider",
                "needs a `model` (without one the parent's provider and model are kept)",
            ));
            ModelSelection::Inherit
        }
        (Some((line, ModelPolicy::Inherit)), model, provider) => {
            for (key, present) in [("model", model), ("provider", provider)] {
                if let Some((l, _)) = present {
                    combinations.push(Diagnostic::keyed(
                        *l,
                        key,
                        format!(
                            "must be omitted with model-policy: inherit (line {line}), which \
                             keeps the parent's provider and model; or use prefer, require or \
                             select"
                        ),
                    ));
                }
            }
            ModelSelection::Inherit
        }
        (Some((line, policy)), None, _) => {
            combinations.push(Diagnostic::keyed(
                line,
                "model-policy",
                format!("`{}` needs a `model`", policy.as_str()),
            ));
            ModelSelection::Inherit
        }
        (policy, Some((_, model)), provider) => ModelSelection::Pinned {
            policy: policy.map_or(ModelPolicy::Select, |(_, p)| p),
            model: model.clone(),
            provider: provider.as_ref().map(|(_, p)| p.clone()),
        },
    };
    if model_keys_usable(raw) {
        problems.extend(combinations);
    }
    selection
}

fn claude_model(raw: &RawFields, problems: &mut Vec<Diagnostic>) -> ModelSelection {
    if let Some((line, _)) = &raw.provider {
        problems.push(Diagnostic::keyed(
            *line,
            "provider",
            "is not allowed with runtime: claude-cli (Claude Code uses its own sign-in); remove \
             it, or use runtime: rho to pick a provider",
        ));
    }
    if let Some((line, model)) = &raw.model
        && model.starts_with('@')
    {
        problems.push(Diagnostic::keyed(
            *line,
            "model",
            format!(
                "`{model}`: Rho @alias models are not resolved for runtime: claude-cli; write a \
                 Claude model name or Claude alias (such as `opus`)"
            ),
        ));
    }
    if let Some((line, p @ (ModelPolicy::Prefer | ModelPolicy::Require))) = raw.model_policy {
        problems.push(Diagnostic::keyed(
            line,
            "model-policy",
            format!(
                "`{}` is not available on runtime: claude-cli; allowed: inherit | select",
                p.as_str()
            ),
        ));
        return ModelSelection::Inherit;
    }
    let mut combinations = Vec::new();
    let selection = match (raw.model_policy, &raw.model) {
        (Some((line, ModelPolicy::Inherit)), Some((mline, _))) => {
            combinations.push(Diagnostic::keyed(
                *mline,
                "model",
                format!(
                    "must be omitted with model-policy: inherit (line {line}), which keeps \
                     Claude's default model"
                ),
            ));
            ModelSelection::Inherit
        }
        (Some((line, ModelPolicy::Select)), None) => {
            combinations.push(Diagnostic::keyed(
                line,
                "model-policy",
                "`select` needs a `model`",
            ));
            ModelSelection::Inherit
        }
        (_, None) => ModelSelection::Inherit,
        (_, Some((_, model))) => ModelSelection::Pinned {
            policy: ModelPolicy::Select,
            model: model.clone(),
            provider: None,
        },
    };
    if model_keys_usable(raw) {
        problems.extend(combinations);
    }
    selection
}

/// Whether an entry is written the Claude Code way (`Read`, `Bash(git *)`).
fn looks_like_claude_tool(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_uppercase()) || name.contains('(')
}

fn is_rho_capability_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// Checks a `rho`-runtime tool list; every bad entry is reported.
fn rho_tools(tools: Option<&(usize, RawTools)>, problems: &mut Vec<Diagnostic>) -> ToolRequest {
    let Some((line, tools)) = tools else {
        return ToolRequest::AllHost;
    };
    let RawTools::List(names) = tools else {
        return ToolRequest::AllHost;
    };
    let claude: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| looks_like_claude_tool(n))
        .collect();
    let rho: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !looks_like_claude_tool(n))
        .collect();
    let mut problem = |msg: String| problems.push(Diagnostic::keyed(*line, "tools", msg));
    if !claude.is_empty() && !rho.is_empty() {
        problem(format!(
            "mixes Rho capability names ({}) and Claude Code tool names ({}); runtime rho takes \
             only Rho capabilities",
            rho.join(", "),
            claude.join(", ")
        ));
    } else if !claude.is_empty() {
        problem(format!(
            "{} {}; runtime rho takes Rho capabilities such as read_file, grep, bash (or set \
             runtime: claude-cli)",
            claude.join(", "),
            if claude.len() == 1 {
                "is a Claude Code tool name"
            } else {
                "are Claude Code tool names"
            }
        ));
    }
    for name in rho {
        if name == "all" {
            problem(
                "`all` inside a list is not a capability; write `tools: all` (without brackets) \
                 for every capability the host supplies"
                    .into(),
            );
        } else if !is_rho_capability_name(name) {
            problem(format!(
                "`{name}` is not a capability name: lowercase letters, digits, `_` and `-`, \
                 starting with a letter"
            ));
        }
    }
    ToolRequest::Rho(names.clone())
}

/// Why `all` is refused in a claude-cli tool list.
const CLAUDE_ALL_REFUSED: &str = "`tools: all` is not allowed on runtime claude-cli; list Claude \
                                  Code tools such as [Read, Grep, \"Bash(git *)\"], or omit `tools` \
                                  for no tools";

/// Checks a `claude-cli` tool list; every bad entry is reported.
fn claude_tools(tools: Option<&(usize, RawTools)>, problems: &mut Vec<Diagnostic>) -> ToolRequest {
    let Some((line, tools)) = tools else {
        return ToolRequest::Claude(Vec::new());
    };
    let mut problem = |msg: String| problems.push(Diagnostic::keyed(*line, "tools", msg));
    let RawTools::List(names) = tools else {
        problem(CLAUDE_ALL_REFUSED.into());
        return ToolRequest::Claude(Vec::new());
    };
    let is_rho = |n: &str| RHO_CAPABILITIES.contains(&n);
    let mixed = names.iter().any(|n| is_rho(n)) && names.iter().any(|n| n != "all" && !is_rho(n));
    let mut entries = Vec::with_capacity(names.len());
    for name in names {
        if name == "all" {
            problem(format!("`all` in the list: {CLAUDE_ALL_REFUSED}"));
        } else if is_rho(name) {
            problem(format!(
                "{}`{name}` is a Rho capability name; runtime claude-cli takes Claude Code tool \
                 entries such as Read, Edit, Bash(git *)",
                if mixed {
                    "mixes Rho and Claude tool names: "
                } else {
                    ""
                },
            ));
        } else {
            match ClaudeToolEntry::parse(name) {
                Ok(entry) => entries.push(entry),
                Err(msg) => problem(msg),
            }
        }
    }
    ToolRequest::Claude(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        for good in ["a", "a-b", "0", "abc-123-x", &"a".repeat(64)] {
            assert!(is_valid_id(good), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a--b",
            "A",
            "a_b",
            "a b",
            "é",
            &"a".repeat(65),
        ] {
            assert!(!is_valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn claude_entries() {
        let e = ClaudeToolEntry::parse("Bash(git *)").unwrap();
        assert_eq!(
            (e.base.as_str(), e.specifier.as_deref()),
            ("Bash", Some("git *"))
        );
        assert_eq!(e.to_string(), "Bash(git *)");
        assert!(ClaudeToolEntry::parse("mcp__srv__tool").is_ok());
        assert!(ClaudeToolEntry::parse("Bash(echo (a) \"b\")").is_ok());
        for empty in ["Bash()", "Bash( )", "Bash(())"] {
            let e = ClaudeToolEntry::parse(empty).unwrap();
            assert_eq!(e.base, "Bash");
            assert_eq!(e.to_string(), empty);
        }
        for (bad, why) in [
            ("Bash(a, b)", "commas"),
            ("Bash(a", "specifier ends"),
            ("Bash(a))", "not balanced"),
            ("Bash(a)x", "specifier ends"),
            ("Bash())(", "specifier ends"),
            ("(x)", "empty"),
            ("Re ad", "letters, digits"),
            ("-rm", "cannot start with `-`"),
        ] {
            let err = ClaudeToolEntry::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

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
