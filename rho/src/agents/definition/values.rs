//! The value sets of the definition schema: runtimes, prompt and model policies, model
//! selections, reasoning efforts and tool requests, with their spellings.
//!
//! Invariant: every value parses from exactly the spelling it displays as.

use std::fmt;

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
