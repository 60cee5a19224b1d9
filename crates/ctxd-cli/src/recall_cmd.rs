//! `ctxd recall SESSION ENTRY_ID [--pattern RE | --offset N] [--limit N] [--json]`: an entry's
//! raw content, as the model's `recall` tool returns it (the same engine call).

use std::io::Write;

use anyhow::bail;
use clap::Args;
use ctxd_core::recall::Selection;
use serde::Serialize;

use crate::store::StoreChoice;

#[derive(Debug, Args)]
pub struct RecallArgs {
    /// The session: store id or key (as `ctxd sessions --stored` lists it).
    pub session: String,
    /// The entry id (`entry_id` in `ctxd history items`, or the id in a recall note).
    pub entry_id: String,
    /// Only lines matching this regex (Rust syntax, at most 500 characters), numbered.
    #[arg(long, value_name = "RE")]
    pub pattern: Option<String>,
    /// The first line to show (1-based).
    #[arg(long, value_name = "LINE", allow_negative_numbers = true)]
    pub offset: Option<i64>,
    /// At most this many lines (matching lines with --pattern).
    #[arg(long, value_name = "LINES", allow_negative_numbers = true)]
    pub limit: Option<i64>,
    /// Print JSON: {session, entry_id, text}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Recalled<'a> {
    session: i64,
    entry_id: &'a str,
    /// What the tool returns: the lines, and a note on how to continue when capped.
    text: &'a str,
}

pub fn run(args: &RecallArgs, store: &StoreChoice) -> anyhow::Result<()> {
    // Checked here rather than by clap, whose usage errors span several lines.
    if args.pattern.is_some() && args.offset.is_some() {
        bail!("recall: give --pattern or --offset, not both (--limit goes with either)");
    }
    let selection = Selection::new(args.pattern.as_deref(), args.offset, args.limit)
        .map_err(|e| anyhow::anyhow!("recall: {e}"))?;
    let engine = store.open_existing()?;
    let caller = crate::history_cmd::caller(&engine, &args.session)?;
    let text = engine.recall(&caller, &args.entry_id, &selection)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = Recalled {
            session: caller.session.unwrap_or_default(),
            entry_id: &args.entry_id,
            text: &text,
        };
        serde_json::to_writer(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{text}")?;
    }
    Ok(())
}
