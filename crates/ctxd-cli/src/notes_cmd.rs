//! `ctxd notes write|append|read|list|search|rm|mv|stale`: notes for people, through the same
//! engine methods as the model's tools.
//!
//! Addresses follow the notes grammar (bare = the `--session` home, `@project/` needs
//! `--project`, `@self/` needs `--agent`, `@model/` needs `--model`). `write` and `append` take
//! the text as an argument, or from stdin when it is absent or `-`; stdin must be UTF-8. Any
//! refusal (bad address, over-limit note, invalid UTF-8) is one line and exit 2, nothing written.

use std::io::{IsTerminal, Read, Write};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use ctxd_core::notes::list::{self, Direction, ListOrder, OrderBy};
use ctxd_core::notes::render;
use ctxd_engine::Caller;
use serde::Serialize;

use crate::store::StoreChoice;

/// Who the command acts as: the homes its addresses resolve to.
#[derive(Debug, Args)]
pub struct CallerArgs {
    /// The session whose notes bare paths address: its id or key, as `ctxd sessions --stored`
    /// lists them (as for `report`, `stats`, `history`, `recall` and `mcp`). Without
    /// --key-env the command acts as that session's tenant (a gateway session's notes are its
    /// client's).
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// The agent `@self/` resolves to.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// The model `@model/` resolves to.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// The project `@project/` resolves to (its key, e.g. the repository path).
    #[arg(long, value_name = "KEY")]
    pub project: Option<String>,
    /// Act as the tenant of the API key in environment variable NAME (the key your agent
    /// sends through the gateway: your own notes and sessions). The key itself is never an
    /// argument. Default: the local tenant (`ctxd import`, keyless clients).
    #[arg(long, value_name = "NAME")]
    pub key_env: Option<String>,
    /// Print JSON (one object).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum NotesCommand {
    /// Create or replace a note.
    Write {
        /// The note: `todo.md` (the --session's), `@project/todo.md` (--project's),
        /// `@human/prefs.md`, `@self/...` (--agent's), `@agents/NAME/...`, `@model/...`
        /// (--model's), `@models/NAME/...`.
        address: String,
        /// The text (default: read stdin; `-` too).
        text: Option<String>,
        #[command(flatten)]
        who: CallerArgs,
    },
    /// Append to a note, creating it when absent.
    Append {
        /// The note: `todo.md` (the --session's), `@project/todo.md` (--project's),
        /// `@human/prefs.md`, `@self/...` (--agent's), `@agents/NAME/...`, `@model/...`
        /// (--model's), `@models/NAME/...`.
        address: String,
        /// The text (default: read stdin; `-` too).
        text: Option<String>,
        #[command(flatten)]
        who: CallerArgs,
    },
    /// Print a note, or an inclusive line range (negative lines count from the end).
    Read {
        /// The note: `todo.md` (the --session's), `@project/todo.md` (--project's),
        /// `@human/prefs.md`, `@self/...` (--agent's), `@agents/NAME/...`, `@model/...`
        /// (--model's), `@models/NAME/...`.
        address: String,
        /// The first line to print (1-based; negative counts from the end).
        #[arg(long, value_name = "LINE", allow_negative_numbers = true)]
        start: Option<i64>,
        /// The last line to print (inclusive).
        #[arg(long, value_name = "LINE", allow_negative_numbers = true)]
        stop: Option<i64>,
        #[command(flatten)]
        who: CallerArgs,
    },
    /// List notes under an address prefix (one home), or in every home given.
    List {
        /// An address prefix, e.g. `@project/` or `@human/plans/` (default: every home the
        /// flags name, and @human/).
        prefix: Option<String>,
        /// name, created_at or updated_at.
        #[arg(long, default_value = "name")]
        order_by: String,
        /// ascending or descending.
        #[arg(long, default_value = "ascending")]
        order: String,
        /// At most this many notes.
        #[arg(long, value_name = "N")]
        max: Option<i64>,
        #[command(flatten)]
        who: CallerArgs,
    },
    /// Lines containing a literal, case-sensitive query.
    Search {
        /// The literal text to find (case-sensitive).
        query: String,
        /// Search only under this address prefix (as for `list`).
        #[arg(long)]
        prefix: Option<String>,
        /// At most this many matching lines.
        #[arg(long, value_name = "N")]
        max: Option<i64>,
        #[command(flatten)]
        who: CallerArgs,
    },
    /// Delete a note (its text stays in the store's versions).
    Rm {
        /// The note: `todo.md` (the --session's), `@project/todo.md` (--project's),
        /// `@human/prefs.md`, `@self/...` (--agent's), `@agents/NAME/...`, `@model/...`
        /// (--model's), `@models/NAME/...`.
        address: String,
        #[command(flatten)]
        who: CallerArgs,
    },
    /// Rename or move a note (also to another home).
    Mv {
        /// The note's address (as for `write`).
        from: String,
        /// Its new address, in any home.
        to: String,
        #[command(flatten)]
        who: CallerArgs,
    },
    /// Mark a note stale (out of the boot's index), or fresh with --clear.
    Stale {
        /// The note: `todo.md` (the --session's), `@project/todo.md` (--project's),
        /// `@human/prefs.md`, `@self/...` (--agent's), `@agents/NAME/...`, `@model/...`
        /// (--model's), `@models/NAME/...`.
        address: String,
        /// Mark it fresh again.
        #[arg(long)]
        clear: bool,
        #[command(flatten)]
        who: CallerArgs,
    },
}

/// The text argument, or stdin; UTF-8 only.
fn text_or_stdin(text: &Option<String>) -> anyhow::Result<String> {
    match text.as_deref() {
        Some(t) if t != "-" => Ok(t.to_owned()),
        _ => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut bytes)
                .context("reading stdin")?;
            String::from_utf8(bytes).map_err(|e| {
                anyhow::anyhow!(
                    "stdin is not valid UTF-8 (at byte {}): nothing written",
                    e.utf8_error().valid_up_to()
                )
            })
        }
    }
}

/// Examples for `ctxd notes --help` (README shows the same).
pub const EXAMPLES: &str = "Examples:
  ctxd notes write @project/todo.md 'run the tests' --project ~/src/app
  ctxd notes append todo.md 'and the docs' --session ID     (ids and keys: ctxd sessions --stored)
  echo 'prefer small commits' | ctxd notes write @human/prefs.md
  ctxd notes read @project/todo.md --project ~/src/app
  ctxd notes list --project ~/src/app --session KEY
  ctxd notes search tests --project ~/src/app";

/// An address or prefix that needs a flag the command lacks: the refusal names the flag (the
/// engine's message is written for the model, which has no flags).
fn needs_flag(address: &str, who: &CallerArgs, prefix: bool) -> anyhow::Result<()> {
    use ctxd_core::notes::{resolve, resolve_prefix, NoteError, Who};
    let names = Who {
        session: who.session.as_deref(),
        project: who.project.as_deref(),
        agent: who.agent.as_deref(),
        model: who.model.as_deref(),
    };
    let resolved = if prefix {
        resolve_prefix(address, &names).map(|_| ())
    } else {
        resolve(address, &names).map(|_| ())
    };
    let Err(NoteError::UnknownCaller { what, .. }) = resolved else {
        return Ok(());
    };
    let (flag, example) = match what {
        "session" => (
            "--session SESSION (a stored session's id or key: `ctxd sessions --stored`)",
            "or use another home, e.g. @project/... with --project KEY, or @human/...",
        ),
        "project" => ("--project KEY (e.g. the repository's path)", ""),
        "model's name" => ("--model NAME", ""),
        _ => ("--agent NAME", ""),
    };
    let sep = if example.is_empty() { "" } else { "; " };
    bail!("{address}: this address needs {flag}{sep}{example}")
}

fn caller(engine: &crate::store::StoreEngine, who: &CallerArgs) -> anyhow::Result<Caller> {
    let tenant = match &who.key_env {
        None => String::new(),
        Some(name) => {
            let credential = std::env::var(name).unwrap_or_default();
            if credential.trim().is_empty() {
                bail!("--key-env {name}: the environment variable {name} is not set or empty");
            }
            let key = ctxd_gateway::identity::store_tenant_key(engine.store())
                .map_err(anyhow::Error::msg)?;
            ctxd_gateway::identity::tenant_of(&key, credential.as_bytes())
        }
    };
    let mut caller = Caller {
        tenant,
        agent: who.agent.clone(),
        model: who.model.clone(),
        project: who.project.clone(),
        ..Caller::default()
    };
    if let Some(name) = &who.session {
        let record = match &who.key_env {
            // Acting as a key's tenant: the session must be one of that tenant's.
            Some(env) => {
                let store = engine.store();
                let by_id = || -> anyhow::Result<_> {
                    Ok(match name.parse::<i64>() {
                        Ok(id) => store.session(&caller.tenant, id)?,
                        Err(_) => None,
                    })
                };
                match store.find_session(&caller.tenant, name)? {
                    Some(r) => r,
                    None => by_id()?.with_context(|| {
                        format!(
                            "no session {name:?} of the API key in {env} (`ctxd sessions \
                             --stored` lists every tenant's; without --key-env the session's \
                             own tenant is used)"
                        )
                    })?,
                }
            }
            // The operator's view, as in every other command: any tenant's session by id or
            // key, and its notes are that tenant's.
            None => crate::store::find_record(engine, name)?,
        };
        caller.tenant.clone_from(&record.tenant);
        caller.session = Some(record.id);
        caller.session_key = Some(record.key);
    }
    Ok(caller)
}

fn print(json: bool, value: &impl Serialize, text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, value)?;
        writeln!(out)?;
    } else if text.ends_with('\n') || text.is_empty() {
        write!(out, "{text}")?;
    } else {
        writeln!(out, "{text}")?;
    }
    Ok(())
}

pub fn run(cmd: &NotesCommand, store: &StoreChoice) -> anyhow::Result<()> {
    // Input is read and checked before the store is opened.
    let input = match cmd {
        NotesCommand::Write { text, .. } | NotesCommand::Append { text, .. } => {
            Some(text_or_stdin(text)?)
        }
        _ => None,
    };
    // An address missing its flag is refused before the store is opened (it may not exist).
    match cmd {
        NotesCommand::Write { address, who, .. }
        | NotesCommand::Append { address, who, .. }
        | NotesCommand::Read { address, who, .. }
        | NotesCommand::Rm { address, who }
        | NotesCommand::Stale { address, who, .. } => needs_flag(address, who, false)?,
        NotesCommand::Mv { from, to, who } => {
            needs_flag(from, who, false)?;
            needs_flag(to, who, false)?;
        }
        NotesCommand::List { prefix, who, .. } | NotesCommand::Search { prefix, who, .. } => {
            if let Some(p) = prefix {
                needs_flag(p, who, true)?;
            }
        }
    }
    // Only a write may create the store.
    let engine = if input.is_some() {
        store.open()?
    } else {
        store.open_existing()?
    };
    match cmd {
        NotesCommand::Write { address, who, .. } => {
            let c = caller(&engine, who)?;
            let r = engine.notes_write(&c, address, input.as_deref().unwrap_or(""))?;
            print(who.json, &r, &render::written(&r.note, r.replaced))
        }
        NotesCommand::Append { address, who, .. } => {
            let c = caller(&engine, who)?;
            let r = engine.notes_append(&c, address, input.as_deref().unwrap_or(""))?;
            print(
                who.json,
                &r,
                &render::appended(&r.note, r.added_bytes, r.created),
            )
        }
        NotesCommand::Read {
            address,
            start,
            stop,
            who,
        } => {
            let c = caller(&engine, who)?;
            let r = engine.notes_read(&c, address, *start, *stop)?;
            if who.json {
                return print(true, &r, "");
            }
            // People get the text itself, byte for byte when piped (like `cat`); the model's
            // tool adds a header.
            let mut out = std::io::stdout().lock();
            out.write_all(r.text.as_bytes())?;
            if out.is_terminal() && !r.text.is_empty() && !r.text.ends_with('\n') {
                writeln!(out)?;
            }
            Ok(())
        }
        NotesCommand::List {
            prefix,
            order_by,
            order,
            max,
            who,
        } => {
            let c = caller(&engine, who)?;
            let order = ListOrder {
                by: OrderBy::parse(order_by)?,
                direction: Direction::parse(order)?,
            };
            let r = engine.notes_list(&c, prefix.as_deref(), order, list::max_results(*max)?)?;
            print(who.json, &r, &r.text())
        }
        NotesCommand::Search {
            query,
            prefix,
            max,
            who,
        } => {
            let c = caller(&engine, who)?;
            let r = engine.notes_search(&c, query, prefix.as_deref(), list::max_results(*max)?)?;
            print(who.json, &r, &r.text())
        }
        NotesCommand::Rm { address, who } => {
            let c = caller(&engine, who)?;
            let r = engine.notes_delete(&c, address)?;
            print(who.json, &r, &render::deleted(&r))
        }
        NotesCommand::Mv { from, to, who } => {
            let c = caller(&engine, who)?;
            let r = engine.notes_rename(&c, from, to)?;
            print(who.json, &r, &render::renamed(&r.from, &r.note))
        }
        NotesCommand::Stale {
            address,
            clear,
            who,
        } => {
            let c = caller(&engine, who)?;
            let r = engine.notes_mark_stale(&c, address, !clear)?;
            print(who.json, &r, &render::stale(&r))
        }
    }
}
