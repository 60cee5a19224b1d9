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
    /// What the tool returns: the lines, and when capped the command that shows more.
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
    let text = match engine.recall(&caller, &args.entry_id, &selection) {
        Ok(text) => for_people(&text, &args.session),
        // The engine's message names the model's tools (history_list_items).
        Err(e) if e.to_string().starts_with("No entry ") => bail!(
            "No entry {:?} in session {}: entry ids are the entry_id of `ctxd history items {}` \
             or `ctxd history search {} TEXT`, or the id in a recall line of a distilled output",
            args.entry_id,
            args.session,
            shell_word(&args.session),
            shell_word(&args.session)
        ),
        Err(e) => return Err(e.into()),
    };
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

/// The tool's text with its closing hint said as the command to type: the model reads
/// `More: recall({"entryId":"a3","offset":4})`, a person `More: ctxd recall 1 a3 --offset 4`.
fn for_people(text: &str, session: &str) -> String {
    let Some(at) = text.rfind("More: recall(") else {
        return text.to_owned();
    };
    let args = &text[at + "More: recall(".len()..];
    let Some(json) = args.strip_suffix(")]") else {
        return text.to_owned();
    };
    let Ok(serde_json::Value::Object(call)) = serde_json::from_str(json) else {
        return text.to_owned();
    };
    let mut command = format!("ctxd recall {}", shell_word(session));
    if let Some(entry) = call.get("entryId").and_then(|v| v.as_str()) {
        command.push(' ');
        command.push_str(&shell_word(entry));
    }
    for (key, flag) in [("pattern", "--pattern"), ("offset", "--offset")] {
        match call.get(key) {
            Some(serde_json::Value::String(v)) => {
                command.push_str(&format!(" {flag} {}", shell_word(v)));
            }
            Some(v @ serde_json::Value::Number(_)) => command.push_str(&format!(" {flag} {v}")),
            _ => {}
        }
    }
    format!("{}More: {command}]", &text[..at])
}

/// `word` as one shell word: as is when plainly safe, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/@%+=,".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_more_hint_is_the_command_to_type() {
        let text = "b\n\n[limit reached: showed lines 2-2 of 3. More: \
                    recall({\"entryId\":\"a3\",\"pattern\":\"\\\\.png$\",\"offset\":3})]";
        assert_eq!(
            super::for_people(text, "pi:s 1"),
            "b\n\n[limit reached: showed lines 2-2 of 3. More: \
             ctxd recall 'pi:s 1' a3 --pattern '\\.png$' --offset 3]"
        );
        assert_eq!(super::for_people("plain", "1"), "plain");
    }
}
