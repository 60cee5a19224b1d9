//! `ctxd report FILE...`

use std::io::{IsTerminal, Write};

use ctxd_core::report::{self, Report};
use serde::Serialize;

use crate::cli::ReportArgs;
use crate::load;

/// The JSON form: the report plus where it came from and what the import skipped.
#[derive(Serialize)]
struct FileReport<'a> {
    file: String,
    import_warnings: Vec<String>,
    #[serde(flatten)]
    report: &'a Report,
}

pub fn run(args: &ReportArgs) -> anyhow::Result<()> {
    let options = report::Options {
        at_turn: args.at,
        largest: args.largest,
        window: args.window,
    };
    let interactive =
        !args.json && !args.text && args.files.len() == 1 && std::io::stdout().is_terminal();
    let mut stdout = std::io::stdout().lock();
    for (i, path) in args.files.iter().enumerate() {
        let import = load::import(path)?;
        for w in &import.warnings {
            eprintln!("ctxd: {}: {w}", path.display());
        }
        let tokenizer = load::tokenizer(&import.session);
        let report = report::build(&import.session, &tokenizer, &options);
        if args.json {
            let doc = FileReport {
                file: path.display().to_string(),
                import_warnings: import.warnings.iter().map(ToString::to_string).collect(),
                report: &report,
            };
            serde_json::to_writer(&mut stdout, &doc)?;
            writeln!(stdout)?;
        } else if interactive {
            drop(stdout);
            let reload = || -> anyhow::Result<Report> {
                let import = load::import(path)?;
                let tokenizer = load::tokenizer(&import.session);
                Ok(report::build(&import.session, &tokenizer, &options))
            };
            return crate::tui::run(report, &path.display().to_string(), reload);
        } else {
            if i > 0 {
                writeln!(stdout, "\n{}\n", "=".repeat(72))?;
            }
            writeln!(stdout, "{}", path.display())?;
            stdout.write_all(report::text::render(&report).as_bytes())?;
        }
    }
    Ok(())
}
