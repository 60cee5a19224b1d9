//! `ctxd sessions [DIR]`: one row per session file under an agent's session directory.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use ctxd_core::report;
use serde::Serialize;

use crate::cli::SessionsArgs;
use crate::load;
use crate::store::StoreChoice;

#[derive(Debug, Serialize)]
struct Row {
    path: String,
    agent: Option<&'static str>,
    id: Option<String>,
    started_at: Option<String>,
    turns: usize,
    bytes: u64,
    /// The largest context the session reached: provider-reported where it has usage.
    peak_context: u64,
    peak_source: &'static str,
    model: Option<String>,
    title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The directories agents keep their sessions in, under `home`.
fn default_dirs(home: &Path) -> Vec<PathBuf> {
    [
        ".claude/projects",
        ".pi/agent/sessions",
        ".codex/sessions",
        ".gemini/tmp",
    ]
    .iter()
    .map(|d| home.join(d))
    .filter(|d| d.is_dir())
    .collect()
}

pub fn run(args: &SessionsArgs, store: &StoreChoice) -> anyhow::Result<()> {
    if args.stored || store.explicit {
        return run_store(args, store);
    }
    let dirs = match &args.dir {
        Some(dir) => {
            if !dir.is_dir() {
                anyhow::bail!("{}: not a directory", dir.display());
            }
            vec![dir.clone()]
        }
        None => {
            let home = dirs::home_dir().context("no home directory to look for sessions in")?;
            default_dirs(&home)
        }
    };
    let mut files = Vec::new();
    for dir in &dirs {
        collect(dir, &mut files, 0);
    }
    let mut rows: Vec<Row> = files.iter().map(|f| row(f)).collect();
    rows.sort_by(|a, b| b.started_at.cmp(&a.started_at).then(a.path.cmp(&b.path)));
    rows.truncate(args.limit);

    let mut out = std::io::stdout().lock();
    if args.json {
        for r in &rows {
            serde_json::to_writer(&mut out, r)?;
            writeln!(out)?;
        }
        return Ok(());
    }
    if rows.is_empty() {
        let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        writeln!(
            out,
            "no sessions found (searched: {})",
            if searched.is_empty() {
                "no agent directory exists".into()
            } else {
                searched.join(", ")
            }
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<14} {:<20} {:>6} {:>9} {:>8}  FILE",
        "AGENT", "START", "TURNS", "SIZE", "PEAK"
    )?;
    for r in &rows {
        let start = r
            .started_at
            .as_deref()
            .map_or("-", |s| s.get(..19).unwrap_or(s));
        let peak = if r.error.is_some() {
            "error".to_owned()
        } else {
            report::text::tokens(r.peak_context)
        };
        writeln!(
            out,
            "{:<14} {:<20} {:>6} {:>9} {:>8}  {}",
            r.agent.unwrap_or("?"),
            start,
            r.turns,
            human_bytes(r.bytes),
            peak,
            r.path
        )?;
    }
    Ok(())
}

/// Session-looking files under `dir` (JSONL, trajectories, and Gemini CLI's JSON: `session-*.json`
/// or any `.json` in a `chats` directory), depth-limited, links not followed.
fn collect(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) {
    if depth > 8 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(ty) = entry.file_type() else { continue };
        let path = entry.path();
        if ty.is_dir() {
            collect(&path, out, depth + 1);
        } else if ty.is_file() {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let in_chats = dir.file_name().is_some_and(|d| d == "chats");
            if name.ends_with(".jsonl")
                || name.ends_with(".traj")
                || name.ends_with(".traj.json")
                || (name.ends_with(".json") && (in_chats || name.starts_with("session-")))
            {
                out.push(path);
            }
        }
    }
}

fn row(path: &Path) -> Row {
    let bytes = std::fs::metadata(path).map_or(0, |m| m.len());
    let mut row = Row {
        path: path.display().to_string(),
        agent: None,
        id: None,
        started_at: None,
        turns: 0,
        bytes,
        peak_context: 0,
        peak_source: "none",
        model: None,
        title: None,
        error: None,
    };
    match load::import(path) {
        Ok(import) => {
            let session = &import.session;
            let tokenizer = load::tokenizer(session);
            let r = report::build(session, &tokenizer, &report::Options::default());
            row.agent = session.meta.agent.map(|a| a.as_str());
            row.id = session.meta.id.clone();
            row.started_at = session.meta.started_at.clone();
            row.turns = r.session.turn_count;
            row.model = r.session.model.clone();
            row.title = r.session.title.clone();
            let provider_peak = r.turns.iter().filter_map(|t| t.provider).max();
            let estimate_peak = r
                .turns
                .iter()
                .map(|t| t.estimate)
                .max()
                .unwrap_or(0)
                .max(r.composition.total);
            (row.peak_context, row.peak_source) = match provider_peak {
                Some(p) => (p, "provider"),
                None => (estimate_peak, "estimate"),
            };
        }
        Err(e) => row.error = Some(format!("{e:#}")),
    }
    row
}

fn human_bytes(n: u64) -> String {
    match n {
        0..=1023 => format!("{n} B"),
        1024..=1_048_575 => format!("{:.1} KB", n as f64 / 1024.0),
        _ => format!("{:.1} MB", n as f64 / 1_048_576.0),
    }
}

/// A tenant as a short label: `local` for the CLI's own, else the hash's first characters.
fn tenant_label(tenant: &str) -> &str {
    if tenant.is_empty() {
        "local"
    } else {
        &tenant[..tenant.len().min(10)]
    }
}

/// `ctxd sessions --stored`: the sessions in the store, most recently updated first. The
/// operator sees every tenant (imports are the local tenant; the gateway's are keyed hashes of
/// client credentials, shown shortened).
fn run_store(args: &SessionsArgs, store: &StoreChoice) -> anyhow::Result<()> {
    let engine = store.open_existing()?;
    let mut records = Vec::new();
    for tenant in engine.store().tenants()? {
        records.extend(engine.store().list_sessions(&tenant)?);
    }
    records.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.id.cmp(&a.id)));
    let mut out = std::io::stdout().lock();
    if records.is_empty() && !args.json {
        // A header alone read as a failure to list.
        writeln!(out, "no sessions in the store {}", store.location()?)?;
        return Ok(());
    }
    if !args.json {
        writeln!(
            out,
            "{:>5} {:<10} {:<14} {:<24} {:>6} {:>8} {:>8}  {:<16} KEY",
            "ID", "TENANT", "AGENT", "UPDATED", "TURNS", "ENTRIES", "PEAK", "UPSTREAM"
        )?;
    }
    for record in records.iter().take(args.limit) {
        let session = engine.store().load(record.id)?;
        let tokenizer = load::tokenizer(&session);
        let r = report::build(&session, &tokenizer, &report::Options::default());
        let peak = r
            .turns
            .iter()
            .map(|t| t.provider.unwrap_or(t.estimate))
            .max()
            .unwrap_or(r.composition.total);
        // Where its requests went: a route's name, or `-` for the API's upstream.
        let upstreams: Vec<String> = ctxd_core::savings::record::upstreams(&session)
            .into_iter()
            .map(|u| u.unwrap_or_else(|| "-".to_owned()))
            .collect();
        if args.json {
            let doc = serde_json::json!({
                "id": record.id,
                "tenant": record.tenant,
                "key": record.key,
                "agent": record.meta.agent.map(|a| a.as_str()),
                "created_at": record.created_at,
                "updated_at": record.updated_at,
                "entries": record.entry_count,
                "turns": r.session.turn_count,
                "peak_context": peak,
                "model": r.session.model,
                "upstreams": upstreams,
            });
            serde_json::to_writer(&mut out, &doc)?;
            writeln!(out)?;
        } else {
            writeln!(
                out,
                "{:>5} {:<10} {:<14} {:<24} {:>6} {:>8} {:>8}  {:<16} {}",
                record.id,
                tenant_label(&record.tenant),
                record.meta.agent.map_or("?", |a| a.as_str()),
                record.updated_at,
                r.session.turn_count,
                record.entry_count,
                report::text::tokens(peak),
                if upstreams.is_empty() {
                    "-".to_owned()
                } else {
                    upstreams.join(",")
                },
                record.key
            )?;
        }
    }
    Ok(())
}
