//! `ctxd history windows|items|read|search SESSION ...`: a stored session's history.
//!
//! SESSION is the store's session id (as `ctxd sessions --stored` lists it) or its key. The
//! commands run the same engine calls as the model's history tools.

use std::io::Write;

use clap::{Args, Subcommand};
use ctxd_engine::history::{ItemsQuery, ReadQuery, Scope, SearchMode, SearchQuery, WindowsQuery};
use ctxd_engine::Caller;

use crate::store::StoreChoice;

#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// The session's context windows (a window starts at the root or at a reset marker).
    Windows(WindowsArgs),
    /// Items (messages, summaries, boots), filtered, with previews.
    Items(ItemsArgs),
    /// One item's text, paged by characters.
    Read(ReadArgs),
    /// Search items' contents: literal (case-sensitive) or --ranked full-text.
    Search(SearchArgs),
}

#[derive(Debug, Args)]
pub struct Common {
    /// The session: store id or key.
    pub session: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ScopeArgs {
    /// `main` (or the session's agent name) or `subagent`.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Every branch, not only the active one.
    #[arg(long)]
    pub all_branches: bool,
}

#[derive(Debug, Args)]
pub struct WindowsArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Newest first.
    #[arg(long)]
    pub recent_first: bool,
    /// At most this many results [default: 50; at most 500].
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

#[derive(Debug, Args)]
pub struct FilterArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Only this window (an id from `ctxd history windows`).
    #[arg(long, value_name = "WINDOW_ID")]
    pub window: Option<String>,
    /// Only this role: user, assistant, tool, system, developer, summary.
    #[arg(long)]
    pub role: Option<String>,
    /// Only items that call this tool or hold its results.
    #[arg(long, value_name = "NAME")]
    pub tool: Option<String>,
    /// Newest first.
    #[arg(long)]
    pub recent_first: bool,
    /// At most this many results [default: 50; at most 500].
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

#[derive(Debug, Args)]
pub struct ItemsArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub filters: FilterArgs,
    /// Preview length per item, in characters.
    #[arg(long, value_name = "CHARS")]
    pub max_chars: Option<usize>,
    /// Skip this many matching items: the page's `next_offset` continues where it stopped.
    #[arg(long, value_name = "N")]
    pub offset: Option<usize>,
}

#[derive(Debug, Args)]
pub struct ReadArgs {
    #[command(flatten)]
    pub common: Common,
    /// The item's window (an id from `ctxd history windows`, or `window_id` in `items`).
    pub window_id: String,
    /// The item (`item_id` in `ctxd history items` or `search`).
    pub item_id: String,
    /// Start at this character.
    #[arg(long, value_name = "CHARS")]
    pub offset: Option<usize>,
    /// At most this many characters.
    #[arg(long, value_name = "CHARS")]
    pub limit: Option<usize>,
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    #[command(flatten)]
    pub common: Common,
    /// The text to find: literal and case-sensitive, or words with --ranked.
    pub query: String,
    /// Ranked full-text search (words, any case, best first) instead of a literal substring.
    #[arg(long)]
    pub ranked: bool,
    #[command(flatten)]
    pub filters: FilterArgs,
}

fn scope(a: &ScopeArgs) -> Scope {
    Scope {
        agent_name: a.agent.clone(),
        all_branches: a.all_branches,
    }
}

fn items_query(f: &FilterArgs, max_chars: Option<usize>) -> ItemsQuery {
    ItemsQuery {
        scope: scope(&f.scope),
        window_id: f.window.clone(),
        role: f.role.clone(),
        tool_name: f.tool.clone(),
        recent_first: f.recent_first,
        limit: f.limit,
        max_chars_per_item: max_chars,
        offset: None,
    }
}

/// The caller for a session named by id or key, in whichever tenant holds it (imports are the
/// local tenant; the gateway's sessions are under their clients' tenants).
pub(crate) fn caller(engine: &crate::store::StoreEngine, session: &str) -> anyhow::Result<Caller> {
    let record = crate::store::find_record(engine, session)?;
    Ok(Caller {
        tenant: record.tenant,
        session: Some(record.id),
        session_key: Some(record.key),
        agent: record.meta.agent.map(|a| a.as_str().to_owned()),
        ..Default::default()
    })
}

fn one_line(text: &str) -> String {
    text.replace('\n', "⏎")
}

pub fn run(cmd: &HistoryCommand, store: &StoreChoice) -> anyhow::Result<()> {
    let engine = store.open_existing()?;
    let mut out = std::io::stdout().lock();
    match cmd {
        HistoryCommand::Windows(a) => windows(&engine, a, &mut out),
        HistoryCommand::Items(a) => items(&engine, a, &mut out),
        HistoryCommand::Read(a) => read(&engine, a, &mut out),
        HistoryCommand::Search(a) => search(&engine, a, &mut out),
    }
}

/// `value` as one line of JSON.
fn write_json(out: &mut impl Write, value: &impl serde::Serialize) -> anyhow::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

fn windows(
    engine: &crate::store::StoreEngine,
    a: &WindowsArgs,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let caller = caller(engine, &a.common.session)?;
    let page = engine.history_list_windows(
        &caller,
        &WindowsQuery {
            scope: scope(&a.scope),
            recent_first: a.recent_first,
            limit: a.limit,
        },
    )?;
    if a.common.json {
        return write_json(out, &page);
    }
    for w in &page.windows {
        let reason = w
            .reason
            .as_deref()
            .map_or(String::new(), |r| format!(" ({r})"));
        writeln!(
            out,
            "{}  #{}  {}{}  {} items  {}",
            w.window_id,
            w.number,
            w.opened_by,
            reason,
            w.items,
            w.started_at.as_deref().unwrap_or("-")
        )?;
    }
    writeln!(out, "{} windows", page.total)?;
    Ok(())
}

fn items(
    engine: &crate::store::StoreEngine,
    a: &ItemsArgs,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let caller = caller(engine, &a.common.session)?;
    let query = ItemsQuery {
        offset: a.offset,
        ..items_query(&a.filters, a.max_chars)
    };
    let page = engine.history_list_items(&caller, &query)?;
    if a.common.json {
        return write_json(out, &page);
    }
    for i in &page.items {
        let tools = if i.tools.is_empty() {
            String::new()
        } else {
            format!(" [{}]", i.tools.join(", "))
        };
        writeln!(
            out,
            "{} {} {} {}{} ({} chars): {}{}",
            i.window_id,
            i.item_id,
            i.entry_id,
            i.role,
            tools,
            i.chars,
            one_line(&i.text),
            if i.truncated { "…" } else { "" }
        )?;
    }
    if let Some(next) = page.next_offset {
        writeln!(out, "(more items: continue with --offset {next})")?;
    }
    Ok(())
}

fn read(
    engine: &crate::store::StoreEngine,
    a: &ReadArgs,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let caller = caller(engine, &a.common.session)?;
    let item = engine.history_read_item(
        &caller,
        &ReadQuery {
            window_id: Some(a.window_id.clone()),
            item_id: a.item_id.clone(),
            offset_chars: a.offset,
            limit_chars: a.limit,
        },
    )?;
    if a.common.json {
        return write_json(out, &item);
    }
    writeln!(out, "{}", item.text)?;
    if let Some(next) = item.next_offset {
        writeln!(
            out,
            "[{} of {} characters; continue with --offset {next}]",
            next, item.total_chars
        )?;
    }
    Ok(())
}

fn search(
    engine: &crate::store::StoreEngine,
    a: &SearchArgs,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let caller = caller(engine, &a.common.session)?;
    let page = engine.history_search_contents(
        &caller,
        &SearchQuery {
            query: a.query.clone(),
            mode: if a.ranked {
                SearchMode::Ranked
            } else {
                SearchMode::Literal
            },
            filters: items_query(&a.filters, None),
        },
    )?;
    if a.common.json {
        return write_json(out, &page);
    }
    for h in &page.hits {
        let score = h.score.map_or(String::new(), |s| format!(" {s:.2}"));
        writeln!(
            out,
            "{} {} {} {}{}: {}",
            h.window_id, h.item_id, h.entry_id, h.role, score, h.excerpt
        )?;
    }
    writeln!(
        out,
        "{} hits{}",
        page.hits.len(),
        if page.more {
            " (more: raise --limit)"
        } else {
            ""
        }
    )?;
    Ok(())
}
