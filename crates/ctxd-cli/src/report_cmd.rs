//! `ctxd report FILE...`

use std::io::{IsTerminal, Write};

use anyhow::Context;

use ctxd_core::model::Session;
use ctxd_core::report::{self, Report};
use serde::Serialize;

use crate::cli::ReportArgs;
use crate::load;
use crate::store::StoreChoice;

/// The JSON form: the report plus where it came from and what the import skipped.
#[derive(Serialize)]
struct FileReport<'a> {
    file: String,
    import_warnings: Vec<String>,
    #[serde(flatten)]
    report: &'a Report,
}

/// Where a report's session comes from: a file, or a session in the store (by key or id).
fn load_source(
    arg: &std::path::Path,
    store: &StoreChoice,
) -> anyhow::Result<(String, Session, Vec<String>)> {
    // No store there (given or default): the argument can only be a file.
    if arg.exists() || !store.exists() {
        let import = load::import(arg)?;
        let warnings = import.warnings.iter().map(ToString::to_string).collect();
        return Ok((arg.display().to_string(), import.session, warnings));
    }
    let engine = store.open_existing()?;
    let name = arg.display().to_string();
    let session = crate::store::find_stored(&engine, &name)
        .with_context(|| format!("{name}: no such file"))?;
    Ok((format!("{name} (store)"), session, Vec::new()))
}

pub fn run(args: &ReportArgs, store: &StoreChoice) -> anyhow::Result<()> {
    let options = report::Options {
        at_turn: args.at,
        largest: args.largest,
        window: args.window,
    };
    let interactive =
        !args.json && !args.text && args.files.len() == 1 && std::io::stdout().is_terminal();
    let mut stdout = std::io::stdout().lock();
    for (i, path) in args.files.iter().enumerate() {
        let (name, session, warnings) = load_source(path, store)?;
        for w in &warnings {
            eprintln!("ctxd: {name}: {w}");
        }
        let tokenizer = load::tokenizer(&session);
        let report = report::build(&session, &tokenizer, &options);
        if args.json {
            let doc = FileReport {
                file: name.clone(),
                import_warnings: warnings,
                report: &report,
            };
            serde_json::to_writer(&mut stdout, &doc)?;
            writeln!(stdout)?;
        } else if interactive {
            drop(stdout);
            let reload = || -> anyhow::Result<Report> {
                let (_, session, _) = load_source(path, store)?;
                let tokenizer = load::tokenizer(&session);
                Ok(report::build(&session, &tokenizer, &options))
            };
            return crate::tui::run(report, &name, reload);
        } else {
            if i > 0 {
                writeln!(stdout, "\n{}\n", "=".repeat(72))?;
            }
            writeln!(stdout, "{name}")?;
            stdout.write_all(report::text::render(&report).as_bytes())?;
        }
    }
    Ok(())
}
