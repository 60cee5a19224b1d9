//! `ctxd import FILE...`: agent session files into the store.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use crate::load;
use crate::store::StoreChoice;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Session files (any format `ctxd report` reads).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print JSON (one object per file, one per line).
    #[arg(long)]
    pub json: bool,
}

/// The store key of an imported file: the agent's own session id when the file has one, else
/// the file's canonical path. Re-importing a grown file appends only its new entries.
fn key_for(path: &std::path::Path, session: &ctxd_core::model::Session) -> String {
    let agent = session.meta.agent.map_or("unknown", |a| a.as_str());
    match &session.meta.id {
        Some(id) => format!("{agent}:{id}"),
        None => {
            let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            format!("file:{}", canonical.display())
        }
    }
}

pub fn run(args: &ImportArgs, store: &StoreChoice) -> anyhow::Result<()> {
    let engine = store.open()?;
    let mut out = std::io::stdout().lock();
    for path in &args.files {
        let import = load::import(path)?;
        for w in &import.warnings {
            eprintln!("ctxd: {}: {w}", path.display());
        }
        let key = key_for(path, &import.session);
        let done = engine.import_session("", &key, &import.session)?;
        if args.json {
            let doc = serde_json::json!({
                "file": path.display().to_string(),
                "session": done.session.id,
                "key": done.session.key,
                "appended": done.appended,
                "already_present": done.already_present,
                "entries": done.session.entry_count,
                "warnings": import.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
            });
            serde_json::to_writer(&mut out, &doc)?;
            writeln!(out)?;
        } else {
            writeln!(
                out,
                "{}: session {} ({}): {} entries appended, {} already stored",
                path.display(),
                done.session.id,
                done.session.key,
                done.appended,
                done.already_present
            )?;
        }
    }
    Ok(())
}
