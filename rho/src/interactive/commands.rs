//! Slash commands typed at the interactive prompt. Pure parsing.
//!
//! Invariant: a line is a command only when its first character is `/`; anything else is a
//! prompt for the model, and an unknown command is reported, never sent to the model.

/// What one input line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A prompt for the model.
    Prompt(String),
    /// Nothing (an empty or blank line).
    Empty,
    /// A slash command.
    Command(SlashCommand),
}

/// The slash commands of the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlashCommand {
    /// `/agents`: list the catalog. With an argument naming another agent, a refusal
    /// (switching agents inside a session is not supported).
    Agents {
        /// An agent id typed after the command, if any.
        requested: Option<String>,
    },
    /// `/model`: show the model; `/model NAME` selects one for the next turns.
    Model {
        /// The model to select (`provider/model`, a bare model id or `@alias`).
        selection: Option<String>,
    },
    /// `/help`.
    Help,
    /// `/exit` (also `/quit`).
    Exit,
    /// Anything else starting with `/`.
    Unknown {
        /// The command word, without arguments.
        name: String,
    },
}

/// The help text of `/help`.
pub const HELP: &str = "\
/agents        list the agent catalog (the session's agent cannot change)
/model [NAME]  show the model, or use NAME (provider/model, model id or @alias) from the next turn
/help          this help
/exit          leave the session (it is saved and can be resumed with `rho --resume ID`)
Ctrl-C cancels the running turn; pressed again (or at an empty prompt, twice) it exits.";

/// Classifies one line typed at the prompt.
pub fn parse(line: &str) -> Input {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        return Input::Empty;
    }
    let Some(rest) = trimmed.strip_prefix('/') else {
        return Input::Prompt(line.trim_end_matches(['\n', '\r']).to_owned());
    };
    let mut words = rest.split_whitespace();
    let name = words.next().unwrap_or_default();
    let arg = words.collect::<Vec<_>>().join(" ");
    let arg = (!arg.is_empty()).then_some(arg);
    Input::Command(match name {
        "agents" | "agent" => SlashCommand::Agents { requested: arg },
        "model" => SlashCommand::Model { selection: arg },
        "help" | "?" => SlashCommand::Help,
        "exit" | "quit" => SlashCommand::Exit,
        other => SlashCommand::Unknown {
            name: other.to_owned(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_commands_and_blanks() {
        assert_eq!(parse("  "), Input::Empty);
        assert_eq!(parse("fix the bug\n"), Input::Prompt("fix the bug".into()));
        assert_eq!(
            parse("explain a/b/c"),
            Input::Prompt("explain a/b/c".into())
        );
        assert_eq!(parse("/exit"), Input::Command(SlashCommand::Exit));
        assert_eq!(
            parse("/model  openai/gpt-5 "),
            Input::Command(SlashCommand::Model {
                selection: Some("openai/gpt-5".into())
            })
        );
        assert_eq!(
            parse("/agents"),
            Input::Command(SlashCommand::Agents { requested: None })
        );
        assert_eq!(
            parse("/agents reviewer"),
            Input::Command(SlashCommand::Agents {
                requested: Some("reviewer".into())
            })
        );
        assert_eq!(
            parse("/frob x"),
            Input::Command(SlashCommand::Unknown {
                name: "frob".into()
            })
        );
    }
}
