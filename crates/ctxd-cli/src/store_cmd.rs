//! `ctxd store check`: the store's integrity, sessions and sizes (a SQLite file and its WAL).
//! `ctxd store vacuum`: a SQLite store's WAL copied back and its file rewritten without free
//! pages, refused while a gateway serves it.
//! `ctxd store copy`: every session (entries in append order, with the client's raw bytes and
//! the leaf), every note with its versions, and the store's settings (the gateway's tenant key,
//! so every credential finds its sessions in the copy), from one store to another: SQLite to
//! PostgreSQL and back.

use std::io::IsTerminal;

use anyhow::Context;
use clap::Subcommand;
use std::path::PathBuf;

use ctxd_store::{Backend, Durability, Location, NewEntry};

use crate::store::StoreChoice;

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// The store's integrity (SQLite's `integrity_check`), its sessions and its sizes: the
    /// database, and the WAL beside a SQLite file.
    Check {
        /// Print the figures as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shrink a SQLite store: its WAL copied back and emptied, the file rewritten without free
    /// pages. Refused while a gateway serves the store (stop it first).
    Vacuum {
        /// Print the sizes before and after as JSON.
        #[arg(long)]
        json: bool,
    },
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

/// A SQLite store's files and what they hold, for `check` and `vacuum`.
#[derive(Debug, Default, serde::Serialize)]
pub struct Sizes {
    pub store: String,
    pub sessions: u64,
    pub database_bytes: u64,
    /// `None` on PostgreSQL.
    pub wal_bytes: Option<u64>,
    /// `ok`, or what SQLite found wrong; `None` on PostgreSQL (the server checks its pages).
    pub integrity: Option<String>,
}

fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

fn wal_of(path: &std::path::Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

fn sessions(store: &dyn Backend) -> anyhow::Result<u64> {
    let mut n = 0;
    for tenant in store.tenants()? {
        n += store.list_sessions(&tenant)?.len() as u64;
    }
    Ok(n)
}

fn check(choice: &StoreChoice) -> anyhow::Result<Sizes> {
    let engine = choice.open_existing()?;
    let location = choice.location()?;
    let mut sizes = Sizes {
        store: location.to_string(),
        sessions: sessions(engine.store())?,
        ..Sizes::default()
    };
    if let Location::Sqlite(path) = &location {
        let sqlite = ctxd_store::SqliteStore::open(path, Durability::Normal)
            .with_context(|| format!("cannot open {}", path.display()))?;
        sizes.integrity = Some(sqlite.integrity_check()?);
        sizes.database_bytes = file_len(path);
        sizes.wal_bytes = Some(file_len(&wal_of(path)));
    }
    Ok(sizes)
}

fn print_sizes(sizes: &Sizes) {
    let wal = sizes
        .wal_bytes
        .map_or_else(String::new, |w| format!(", WAL {w} bytes"));
    let integrity = sizes
        .integrity
        .as_deref()
        .map_or_else(String::new, |i| format!("; integrity: {i}"));
    println!(
        "{}: {} sessions, database {} bytes{wal}{integrity}",
        sizes.store, sizes.sessions, sizes.database_bytes
    );
}

fn vacuum(choice: &StoreChoice) -> anyhow::Result<(Sizes, Sizes)> {
    let location = choice.location()?;
    let Location::Sqlite(path) = &location else {
        anyhow::bail!(
            "{location}: PostgreSQL keeps itself with autovacuum; to force one, run              `VACUUM (ANALYZE)` in psql"
        );
    };
    anyhow::ensure!(path.exists(), "no store at {}", path.display());
    // The gateway's own lock: held, a gateway serves the store and VACUUM would wait for it.
    let _lock = ctxd_gateway::ServeLock::acquire(path).map_err(|e| match e {
        ctxd_store::StoreError::AlreadyServed { holder, .. } => anyhow::anyhow!(
            "a gateway{holder} serves {}: stop it first (vacuum needs the store to itself)",
            path.display()
        ),
        other => anyhow::anyhow!(other),
    })?;
    let before = check(choice)?;
    anyhow::ensure!(
        before.integrity.as_deref() == Some("ok"),
        "{}: integrity check failed ({}); not vacuumed",
        path.display(),
        before.integrity.as_deref().unwrap_or_default()
    );
    let store = ctxd_store::SqliteStore::open(path, Durability::Normal)?;
    ctxd_store::Checkpointer::open(path)?.truncate()?;
    store.vacuum()?;
    ctxd_store::Checkpointer::open(path)?.truncate()?;
    drop(store);
    let after = check(choice)?;
    Ok((before, after))
}

pub fn run(cmd: &StoreCommand, choice: &StoreChoice) -> anyhow::Result<()> {
    match cmd {
        StoreCommand::Check { json } => {
            let sizes = check(choice)?;
            if *json {
                println!("{}", serde_json::to_string(&sizes)?);
            } else {
                print_sizes(&sizes);
            }
            if let Some(problem) = sizes.integrity.as_deref().filter(|i| *i != "ok") {
                anyhow::bail!("the store failed its integrity check: {problem}");
            }
            Ok(())
        }
        StoreCommand::Vacuum { json } => {
            let (before, after) = vacuum(choice)?;
            if *json {
                println!("{}", serde_json::json!({"before": before, "after": after}));
            } else {
                print!("before: ");
                print_sizes(&before);
                print!("after:  ");
                print_sizes(&after);
            }
            Ok(())
        }
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
