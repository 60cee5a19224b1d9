//! `ctxd store copy`: every session (entries in append order, with the client's raw bytes and
//! the leaf), every note with its versions, and the store's settings (the gateway's tenant key,
//! so every credential finds its sessions in the copy), from one store to another: SQLite to
//! PostgreSQL and back.

use std::io::IsTerminal;

use anyhow::Context;
use clap::Subcommand;
use ctxd_store::{Backend, Durability, Location, NewEntry};

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy every session, note and setting into a store that has none yet.
    Copy {
        /// The store to read: a SQLite file's path or a `postgres://` URL.
        #[arg(long, value_name = "PATH|URL")]
        from: String,
        /// The store to write (created when absent; must hold no sessions or notes).
        #[arg(long, value_name = "PATH|URL")]
        to: String,
        /// Print what was copied as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Entries per appended batch: large enough to amortise a transaction, small enough that a
/// 1 MB-per-entry session stays in memory a batch at a time on the writing side.
const BATCH: usize = 256;

/// What a copy did.
#[derive(Debug, Default, serde::Serialize)]
pub struct Copied {
    pub sessions: u64,
    pub entries: u64,
    pub notes: u64,
    pub note_versions: u64,
    pub settings: u64,
}

pub fn run(cmd: &StoreCommand) -> anyhow::Result<()> {
    match cmd {
        StoreCommand::Copy { from, to, json } => {
            let (from_at, to_at) = (Location::parse(from), Location::parse(to));
            if from_at == to_at {
                anyhow::bail!("--from and --to name the same store");
            }
            if let Location::Sqlite(path) = &from_at {
                anyhow::ensure!(path.exists(), "{}: no such store", path.display());
            }
            let source = ctxd_store::open(&from_at, Durability::Normal)
                .with_context(|| format!("cannot open {from_at}"))?;
            let target = ctxd_store::open(&to_at, Durability::Normal)
                .with_context(|| format!("cannot open {to_at}"))?;
            let copied = copy(&*source, &*target)?;
            if *json {
                println!("{}", serde_json::to_string(&copied)?);
            } else {
                println!(
                    "copied {} sessions ({} entries), {} notes ({} versions), {} settings \
                     from {from_at} to {to_at}",
                    copied.sessions,
                    copied.entries,
                    copied.notes,
                    copied.note_versions,
                    copied.settings
                );
            }
            Ok(())
        }
    }
}

/// Copy everything from `source` into `target`, which must hold no sessions or notes.
pub fn copy(source: &dyn Backend, target: &dyn Backend) -> anyhow::Result<Copied> {
    let mut copied = Copied::default();
    if !target.tenants()?.is_empty() || !target.notes_dump()?.notes.is_empty() {
        anyhow::bail!(
            "{} already holds sessions or notes: copy into a new store",
            target.location()
        );
    }
    for (key, value) in source.settings()? {
        let kept = target.setting_or_insert(&key, &value)?;
        anyhow::ensure!(
            kept == value,
            "{} already has a different setting {key:?}: copy into a new store",
            target.location()
        );
        copied.settings += 1;
    }
    let mut sessions = Vec::new();
    for tenant in source.tenants()? {
        sessions.extend(source.list_sessions(&tenant)?);
    }
    // Oldest first, so the copy's own ids keep the source's order.
    sessions.sort_by_key(|r| r.id);
    let total: u64 = sessions.iter().map(|r| r.entry_count).sum();
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} entries {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    for record in &sessions {
        let session = source.load(record.id)?;
        let into = target.open_session(&record.tenant, &record.key, &record.meta)?;
        for chunk in session.entries.chunks(BATCH) {
            let batch = chunk
                .iter()
                .map(|entry| {
                    Ok(NewEntry {
                        raw: source.raw(record.id, &entry.id)?,
                        entry: entry.clone(),
                    })
                })
                .collect::<Result<Vec<_>, ctxd_store::StoreError>>()?;
            target.append(into.id, &batch, None)?;
            copied.entries += batch.len() as u64;
            if let Some(bar) = &bar {
                bar.inc(batch.len() as u64);
            }
        }
        if let Some(leaf) = &session.leaf {
            target.set_leaf(into.id, leaf)?;
        }
        copied.sessions += 1;
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let notes = source.notes_dump()?;
    target.notes_restore(&notes)?;
    copied.notes = notes.notes.len() as u64;
    copied.note_versions = notes.versions.len() as u64;
    Ok(copied)
}
