//! The interactive session's driver: read a line, run a turn while rendering its events,
//! save the conversation, repeat.
//!
//! Invariant: one agent for the whole session — chosen at start, stored in the session
//! header with its fingerprint, never switched; a resumed session runs only if that agent
//! still has the same fingerprint. Everything a turn adds to the conversation is appended to
//! `session.jsonl` when the turn ends, cancelled turns included, so resume sees exactly the
//! conversation the model saw.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use rustyline::error::ReadlineError;
use serde_json::json;

use super::commands::{self, Input, SlashCommand};
use super::render::Renderer;
use super::store::{self, SESSION_FORMAT, SessionMeta, SessionRecord, SessionStore, SessionWriter};
use crate::agents::{Catalog, CatalogSources};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::cli::session_args::{RootPlace, SessionArgs};
use crate::config::Config;
use crate::paths::{self, RhoHome};
use crate::runtime::agent_loop::{LoopEvent, Session, SessionLimits, TurnEnd};
use crate::runtime::launch;
use crate::runtime::provider::Message;
use crate::runtime::transcript::Transcript;
use crate::workflow::exec::CancelToken;

/// Model steps allowed per interactive turn.
pub const MAX_STEPS_PER_TURN: u32 = 100;

/// How long a second Ctrl-C waits for the cancelled turn to end before exiting anyway.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// The prompt shown when waiting for input.
const PROMPT: &str = "› ";

/// Set while the current turn is being cancelled; the session clears it when a new turn
/// starts. Clones share the flag.
#[derive(Clone, Debug, Default)]
pub struct TurnCancelled(Arc<AtomicBool>);

impl TurnCancelled {
    /// Marks the current turn cancelled: an open question denies at once.
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// A new turn starts.
    pub fn clear(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    /// Whether the current turn is being cancelled.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// What the interactive session was started with.
#[derive(Debug, Clone, Default)]
pub struct InteractiveOptions {
    /// `--resume ID`: continue a saved session (id or unique prefix).
    pub resume: Option<String>,
    /// `--prompt TEXT`: send this first.
    pub prompt: Option<String>,
}

/// The state of a running interactive session.
struct Interactive {
    home: RhoHome,
    config: Config,
    workspace: PathBuf,
    catalog: Catalog,
    session_args: SessionArgs,
    agent_id: String,
    fingerprint: String,
    model_label: String,
    session: Session,
    session_dir: PathBuf,
    store: SessionStore,
    writer: Option<SessionWriter>,
    saved: usize,
    turn_cancelled: TurnCancelled,
}

/// Runs `rho` (no subcommand) on a terminal.
pub fn run_interactive(options: InteractiveOptions, session_args: &SessionArgs) -> CliResult {
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        return Err(CliError::invalid(
            "the interactive session needs a terminal on stdin and stdout; use `rho run` for \
             automation",
        ));
    }
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let store = SessionStore::new(home.root());
    let current = paths::current_workspace().map_err(|e| CliError::operational(e.to_string()))?;
    let resumed = match &options.resume {
        Some(id) => {
            let dir = store
                .find(&current, id)
                .map_err(|e| CliError::invalid(crate::tools::workspace::error_chain(&e)))?;
            let loaded = store::load(&dir)
                .map_err(|e| CliError::invalid(crate::tools::workspace::error_chain(&e)))?;
            if !loaded.meta.workspace.is_dir() {
                return Err(CliError::invalid(format!(
                    "session {} belongs to the workspace `{}`, which no longer exists; its \
                     transcript is kept in {}",
                    loaded.meta.id,
                    loaded.meta.workspace.display(),
                    dir.display()
                )));
            }
            Some(loaded)
        }
        None => None,
    };
    let workspace = resumed
        .as_ref()
        .map_or(current, |l| l.meta.workspace.clone());
    let config = crate::cli::root::options()
        .load_config(&home)
        .map_err(|e| CliError::invalid(e.to_string()))?;
    let trusted = crate::cli::agents::project_agents_trusted(&home, &workspace)?;
    let catalog = Catalog::discover(&CatalogSources::new(
        &home,
        Some(workspace.clone()),
        trusted,
    ))
    .map_err(|e| CliError::invalid(crate::workflow::plan::error_chain(&e)))?;

    let agent_id = match (&resumed, &session_args.agent) {
        (Some(loaded), Some(asked)) if *asked != loaded.meta.agent_id => {
            return Err(CliError::invalid(format!(
                "session {} is bound to agent `{}`; switching agents inside a session is not \
                 supported (start a new session with `rho --agent {asked}`)",
                loaded.meta.id, loaded.meta.agent_id
            )));
        }
        (Some(loaded), _) => loaded.meta.agent_id.clone(),
        (None, Some(asked)) => asked.clone(),
        (None, None) => launch::DEFAULT_AGENT.to_owned(),
    };
    if let Some(loaded) = &resumed {
        check_fingerprint(&catalog, &loaded.meta)?;
    }
    let turn_cancelled = TurnCancelled::default();
    let mut interactive = Interactive::start(
        home,
        config,
        workspace,
        catalog,
        session_args.clone(),
        agent_id,
        store,
        resumed,
        turn_cancelled,
    )?;
    interactive.run(options.prompt)
}

/// Refuses a resume when the session's agent is gone or its definition changed.
fn check_fingerprint(catalog: &Catalog, meta: &SessionMeta) -> Result<(), CliError> {
    let Some(entry) = catalog.get(&meta.agent_id) else {
        return Err(CliError::invalid(format!(
            "session {} is bound to agent `{}`, which is no longer defined; it cannot be \
             resumed",
            meta.id, meta.agent_id
        )));
    };
    if entry.fingerprint != meta.fingerprint {
        return Err(CliError::invalid(format!(
            "session {} cannot be resumed: the definition of agent `{}` changed since the \
             session started (fingerprint {} then, {} now, from {}); start a new session",
            meta.id,
            meta.agent_id,
            meta.fingerprint,
            entry.fingerprint,
            entry.display_path()
        )));
    }
    Ok(())
}

impl Interactive {
    #[allow(clippy::too_many_arguments)]
    fn start(
        home: RhoHome,
        config: Config,
        workspace: PathBuf,
        catalog: Catalog,
        session_args: SessionArgs,
        agent_id: String,
        store: SessionStore,
        resumed: Option<store::LoadedSession>,
        turn_cancelled: TurnCancelled,
    ) -> Result<Self, CliError> {
        let mut overrides = session_args.overrides()?;
        if overrides.model.is_none()
            && let Some(model) = resumed.as_ref().and_then(|l| l.model.clone())
        {
            overrides.model = Some(model);
        }
        let mode_selection = session_args.mode_selection(&config)?;
        let permission_mode = mode_selection.mode;
        let place = RootPlace {
            home: &home,
            config: &config,
            workspace: &workspace,
            catalog: &catalog,
        };
        let prepared = session_args
            .prepare_root(&place, &agent_id, &overrides, permission_mode)
            .map_err(|e| CliError::invalid(crate::workflow::plan::error_chain(&e)))?;
        let (session_id, session_dir, transcript, messages, writer) = if let Some(loaded) = resumed
        {
            {
                let transcript = Transcript::reopen(&loaded.dir).map_err(|e| {
                    CliError::operational(format!(
                        "cannot reopen the session transcript in {}: {e}",
                        loaded.dir.display()
                    ))
                })?;
                let messages: Vec<Message> = loaded
                    .messages
                    .iter()
                    .map(|m| serde_json::from_value(m.clone()))
                    .collect::<Result<_, _>>()
                    .map_err(|e| {
                        CliError::invalid(format!(
                            "session {}: a saved message cannot be read: {e}",
                            loaded.meta.id
                        ))
                    })?;
                let writer = SessionWriter::reopen(&loaded.dir)
                    .map_err(|e| CliError::operational(crate::tools::workspace::error_chain(&e)))?;
                (
                    loaded.meta.id,
                    loaded.dir,
                    transcript,
                    messages,
                    Some(writer),
                )
            }
        } else {
            {
                let (id, dir) = launch::new_session_dir(&home, &workspace);
                let transcript = Transcript::create(&dir).map_err(|e| {
                    CliError::operational(format!(
                        "cannot create the session transcript in {}: {e}",
                        dir.display()
                    ))
                })?;
                (id, dir, transcript, Vec::new(), None)
            }
        };
        let tools = session_args.root_tools(
            &place,
            &prepared,
            mode_selection,
            &overrides,
            &session_id,
            Some(super::approval::interaction(turn_cancelled.clone())),
        )?;
        let model_label = prepared.client.choice().label();
        let fingerprint = prepared.bound.fingerprint.clone();
        let saved = messages.len();
        let mut session = Session::start(
            session_id,
            prepared.client,
            tools,
            prepared.system_prompt,
            SessionLimits {
                max_steps: MAX_STEPS_PER_TURN,
                ..SessionLimits::default()
            },
            transcript,
            json!({
                "invocation": "interactive",
                "agent_id": agent_id,
                "agent_fingerprint": fingerprint,
                "workspace": workspace,
                "permission_mode": permission_mode.to_string(),
            }),
        )
        .map_err(|e| CliError::operational(format!("cannot write the session transcript: {e}")))?;
        session.restore(messages);
        println!(
            "rho · agent {agent_id} · {model_label} · permission mode {permission_mode} · {}",
            workspace.display()
        );
        if saved > 0 {
            println!("resumed session {} ({saved} messages)", session.id);
        }
        println!("/help for commands, Ctrl-C cancels a turn, /exit leaves");
        Ok(Interactive {
            home,
            config,
            workspace,
            catalog,
            session_args,
            agent_id,
            fingerprint,
            model_label,
            session,
            session_dir,
            store,
            writer,
            saved,
            turn_cancelled,
        })
    }

    /// The read–run loop.
    fn run(&mut self, first: Option<String>) -> CliResult {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| CliError::operational(format!("cannot start the async runtime: {e}")))?;
        let mut editor = rustyline::DefaultEditor::new()
            .map_err(|e| CliError::operational(format!("cannot set up line editing: {e}")))?;
        let mut interrupted = false;
        if let Some(prompt) = first {
            match self.turn(&runtime, &prompt)? {
                Flow::Continue => {}
                Flow::Cancelled => interrupted = true,
                Flow::Exit => {
                    self.announce_saved();
                    return Ok(ExitCode::Success);
                }
                Flow::Interrupted => {
                    self.announce_saved();
                    return Ok(ExitCode::Interrupted);
                }
            }
        }
        loop {
            let line = match editor.readline(PROMPT) {
                Ok(line) => {
                    interrupted = false;
                    line
                }
                Err(ReadlineError::Interrupted) => {
                    if interrupted {
                        self.announce_saved();
                        return Ok(ExitCode::Interrupted);
                    }
                    interrupted = true;
                    println!("(Ctrl-C again to exit, or /exit)");
                    continue;
                }
                Err(ReadlineError::Eof) => break,
                Err(e) => {
                    return Err(CliError::operational(format!("cannot read input: {e}")));
                }
            };
            match commands::parse(&line) {
                Input::Empty => {}
                Input::Prompt(prompt) => {
                    let _ = editor.add_history_entry(line.as_str());
                    match self.turn(&runtime, &prompt)? {
                        Flow::Continue => {}
                        Flow::Cancelled => interrupted = true,
                        Flow::Exit => break,
                        Flow::Interrupted => {
                            self.announce_saved();
                            return Ok(ExitCode::Interrupted);
                        }
                    }
                }
                Input::Command(command) => {
                    let _ = editor.add_history_entry(line.as_str());
                    if self.command(command)? == Flow::Exit {
                        break;
                    }
                }
            }
        }
        self.announce_saved();
        Ok(ExitCode::Success)
    }

    /// Says where the session is saved and how to resume it.
    fn announce_saved(&self) {
        if self.writer.is_some() {
            println!(
                "session {} saved; resume with: rho --resume {}",
                self.session.id, self.session.id
            );
        }
    }

    /// Runs one turn: Ctrl-C cancels it, a second Ctrl-C exits.
    fn turn(&mut self, runtime: &tokio::runtime::Runtime, prompt: &str) -> Result<Flow, CliError> {
        self.ensure_saved_header()?;
        self.turn_cancelled.clear();
        let cancel = CancelToken::new();
        let presses = Arc::new(AtomicU32::new(0));
        let mut renderer = Renderer::new(std::io::stdout());
        let end = runtime.block_on(async {
            let watcher = tokio::spawn(watch_interrupts(
                cancel.clone(),
                self.turn_cancelled.clone(),
                Arc::clone(&presses),
            ));
            let end = self
                .session
                .run_turn(prompt, &cancel, &mut |event| {
                    render_event(&mut renderer, event);
                })
                .await;
            watcher.abort();
            end
        });
        let _ = match &end {
            TurnEnd::Completed { .. } => renderer.turn_end(),
            TurnEnd::Cancelled => renderer.notice("turn cancelled"),
            other => renderer.error(&other.describe()),
        };
        self.save_new_messages()?;
        match presses.load(Ordering::SeqCst) {
            0 => Ok(Flow::Continue),
            1 => Ok(Flow::Cancelled),
            _ => Ok(Flow::Interrupted),
        }
    }

    /// Creates `session.jsonl` on the first message.
    fn ensure_saved_header(&mut self) -> Result<(), CliError> {
        if self.writer.is_some() {
            return Ok(());
        }
        let meta = SessionMeta {
            format: SESSION_FORMAT,
            id: self.session.id.clone(),
            created_at: store::timestamp_now(),
            workspace: self.workspace.clone(),
            agent_id: self.agent_id.clone(),
            fingerprint: self.fingerprint.clone(),
        };
        let writer = self
            .store
            .create(&self.session_dir, &meta)
            .map_err(|e| CliError::operational(crate::tools::workspace::error_chain(&e)))?;
        self.writer = Some(writer);
        Ok(())
    }

    fn save_new_messages(&mut self) -> Result<(), CliError> {
        let Some(writer) = self.writer.as_mut() else {
            return Ok(());
        };
        let messages = self.session.messages();
        let records: Vec<SessionRecord> = messages[self.saved.min(messages.len())..]
            .iter()
            .map(|m| SessionRecord::Message {
                message: serde_json::to_value(m).unwrap_or_default(),
            })
            .collect();
        writer
            .append(&records)
            .map_err(|e| CliError::operational(crate::tools::workspace::error_chain(&e)))?;
        self.saved = messages.len();
        Ok(())
    }

    fn command(&mut self, command: SlashCommand) -> Result<Flow, CliError> {
        let mut out = std::io::stdout().lock();
        match command {
            SlashCommand::Exit => return Ok(Flow::Exit),
            SlashCommand::Help => {
                let _ = writeln!(out, "{}", commands::HELP);
            }
            SlashCommand::Unknown { name } => {
                let _ = writeln!(out, "unknown command `/{name}`; /help lists the commands");
            }
            SlashCommand::Agents { requested } => {
                if let Some(asked) = requested.filter(|a| *a != self.agent_id) {
                    let _ = writeln!(
                        out,
                        "this session stays on agent `{}`: switching agents inside a session \
                         is not supported. Start `rho --agent {asked}` for a new session.",
                        self.agent_id
                    );
                    return Ok(Flow::Continue);
                }
                for entry in self.catalog.entries() {
                    let def = &entry.definition;
                    let mark = if entry.id() == self.agent_id {
                        "*"
                    } else {
                        " "
                    };
                    let _ = writeln!(
                        out,
                        "{mark} {:<16} {:<10} {:<8} {}",
                        entry.id(),
                        entry.level.as_str(),
                        def.runtime.as_str(),
                        super::render::sanitize(&def.description)
                    );
                }
            }
            SlashCommand::Model { selection: None } => {
                let _ = writeln!(out, "model: {}", self.model_label);
            }
            SlashCommand::Model {
                selection: Some(model),
            } => {
                drop(out);
                self.switch_model(&model)?;
            }
        }
        Ok(Flow::Continue)
    }

    /// `/model NAME`: resolves the model now (an unknown one changes nothing) and uses it
    /// from the next turn; the choice is saved with the session.
    fn switch_model(&mut self, model: &str) -> Result<(), CliError> {
        let mut overrides = self.session_args.overrides()?;
        overrides.model = Some(model.to_owned());
        overrides.provider = None;
        let permission_mode = self.session_args.permission_mode(&self.config)?;
        let place = RootPlace {
            home: &self.home,
            config: &self.config,
            workspace: &self.workspace,
            catalog: &self.catalog,
        };
        let prepared =
            self.session_args
                .prepare_root(&place, &self.agent_id, &overrides, permission_mode);
        match prepared {
            Ok(prepared) => {
                self.model_label = prepared.client.choice().label();
                self.session.set_client(prepared.client);
                self.ensure_saved_header()?;
                if let Some(writer) = self.writer.as_mut() {
                    writer
                        .append(&[SessionRecord::Model {
                            model: model.to_owned(),
                        }])
                        .map_err(|e| {
                            CliError::operational(crate::tools::workspace::error_chain(&e))
                        })?;
                }
                println!("model: {} (from the next turn)", self.model_label);
            }
            Err(e) => println!(
                "model unchanged ({}): {}",
                self.model_label,
                crate::workflow::plan::error_chain(&e)
            ),
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    /// The turn was cancelled with Ctrl-C: one more Ctrl-C at the prompt exits.
    Cancelled,
    Exit,
    /// A second Ctrl-C: leave with status 130.
    Interrupted,
}

/// The first SIGINT of a turn cancels it; the second exits the process at once.
async fn watch_interrupts(cancel: CancelToken, turn: TurnCancelled, presses: Arc<AtomicU32>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut int) = signal(SignalKind::interrupt()) else {
        return;
    };
    while int.recv().await.is_some() {
        let n = presses.fetch_add(1, Ordering::SeqCst) + 1;
        cancel.cancel();
        turn.set();
        if n == 1 {
            let _ = writeln!(
                std::io::stderr(),
                "\n^C cancelling the turn (Ctrl-C again to exit)"
            );
        } else {
            let _ = writeln!(std::io::stderr(), "\n^C exiting");
            // The turn ends on its own once its tools have stopped (the cancel above reached
            // them) and the session exits after saving; should a tool not stop in time, exit
            // anyway.
            tokio::time::sleep(EXIT_GRACE).await;
            std::process::exit(i32::from(ExitCode::Interrupted.code()));
        }
    }
}

fn render_event(renderer: &mut Renderer<std::io::Stdout>, event: &LoopEvent) {
    let _ = match event {
        LoopEvent::TextDelta { text, .. } => renderer.text(text),
        LoopEvent::TextReset { reason, .. } => renderer.notice(&format!("[retrying: {reason}]")),
        LoopEvent::ToolStarted {
            name, arguments, ..
        } => {
            let args = serde_json::from_str(arguments)
                .unwrap_or(serde_json::Value::String(arguments.clone()));
            renderer.tool_call(name, &args)
        }
        LoopEvent::ToolFinished {
            is_error, content, ..
        } => renderer.tool_result(!is_error, content),
        LoopEvent::StepStarted { .. } | LoopEvent::ReasoningDelta { .. } => Ok(()),
    };
}
