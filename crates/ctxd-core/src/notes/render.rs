//! What notes operations say back: concise, model-friendly text from their results.

use serde::Serialize;

use super::address::Home;
use super::list::{Direction, ListOrder, Listed, OrderBy};
use super::text::{bytes_label, LineHit, LineSlice};
use super::HomeScope;

/// A note as results describe it (no body).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NoteInfo {
    /// The resolved address (`plan.md`, `@agents/pi/plan.md`).
    pub address: String,
    pub scope: HomeScope,
    /// The store's home key (`session:<key>`, `agent:<name>`...).
    pub home: String,
    pub path: String,
    pub bytes: usize,
    pub lines: usize,
    pub version: i64,
    pub stale: bool,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl NoteInfo {
    /// `12 lines, 340 bytes` (+ `, stale`).
    pub fn size(&self) -> String {
        format!(
            "{} line{}, {}{}",
            self.lines,
            if self.lines == 1 { "" } else { "s" },
            bytes_label(self.bytes),
            if self.stale { ", stale" } else { "" }
        )
    }
}

impl Listed for NoteInfo {
    fn name(&self) -> &str {
        &self.address
    }
    fn created_at_ms(&self) -> i64 {
        self.created_at_ms
    }
    fn updated_at_ms(&self) -> i64 {
        self.updated_at_ms
    }
}

/// A search hit with the note it is in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SearchHit {
    pub address: String,
    #[serde(flatten)]
    pub hit: LineHit,
}

/// `5m ago`, `in 3s` (seed `relativeTime`: the largest whole unit of d, h, m, s).
pub fn relative_time(timestamp_ms: i64, now_ms: i64) -> String {
    let seconds = (timestamp_ms - now_ms) / 1000;
    let (unit, size) = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)]
        .into_iter()
        .find(|&(unit, size)| seconds.abs() >= size || unit == "s")
        .unwrap_or(("s", 1));
    let amount = format!("{}{unit}", (seconds / size).abs());
    if seconds > 0 {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

pub fn written(note: &NoteInfo, replaced: bool) -> String {
    let what = if replaced {
        "replaced; the previous text is kept in the note's history"
    } else {
        "new note"
    };
    format!("Wrote {} ({}; {what}).", note.address, note.size())
}

pub fn appended(note: &NoteInfo, added_bytes: usize, created: bool) -> String {
    if created {
        format!("Created {} ({}).", note.address, note.size())
    } else {
        format!(
            "Appended {} to {} (now {}).",
            bytes_label(added_bytes),
            note.address,
            note.size()
        )
    }
}

/// A header line, then the lines exactly as stored.
pub fn read(note: &NoteInfo, slice: &LineSlice<'_>) -> String {
    let stale = if note.stale { ", stale" } else { "" };
    if slice.total == 0 {
        return format!("{} is empty{stale}.", note.address);
    }
    let mut out = format!(
        "{} (lines {}-{} of {}{stale}):\n",
        note.address, slice.start, slice.stop, slice.total
    );
    out.push_str(slice.text);
    out
}

fn order_label(order: ListOrder) -> String {
    let by = match order.by {
        OrderBy::Name => "name",
        OrderBy::CreatedAt => "created_at",
        OrderBy::UpdatedAt => "updated_at",
    };
    let direction = match order.direction {
        Direction::Ascending => "ascending",
        Direction::Descending => "descending",
    };
    format!("by {by}, {direction}")
}

/// `where_` names what was listed (`this session`, `@project/plans/`, `your homes`).
pub fn listing(
    notes: &[NoteInfo],
    where_: &str,
    order: ListOrder,
    more: bool,
    now_ms: i64,
) -> String {
    if notes.is_empty() {
        return format!("No notes in {where_}.");
    }
    let mut out = format!(
        "{} note{} in {where_} ({}):",
        notes.len(),
        if notes.len() == 1 { "" } else { "s" },
        order_label(order)
    );
    for n in notes {
        out.push_str(&format!(
            "\n- {} ({}, updated {})",
            n.address,
            n.size(),
            relative_time(n.updated_at_ms, now_ms)
        ));
    }
    if more {
        out.push_str("\nMore notes match: raise max_results or narrow the prefix.");
    }
    out
}

/// `grep -n` style: `address:line: text`.
pub fn search(hits: &[SearchHit], query: &str, where_: &str, truncated: bool) -> String {
    if hits.is_empty() {
        return format!("No line contains {query:?} in {where_}.");
    }
    let notes = {
        let mut seen: Vec<&str> = hits.iter().map(|h| h.address.as_str()).collect();
        seen.dedup();
        seen.len()
    };
    let mut out = format!(
        "{} matching line{} in {notes} note{} for {query:?} in {where_}:",
        hits.len(),
        if hits.len() == 1 { "" } else { "s" },
        if notes == 1 { "" } else { "s" }
    );
    for h in hits {
        out.push_str(&format!("\n{}:{}: {}", h.address, h.hit.line, h.hit.text));
    }
    if truncated {
        out.push_str("\nMore lines match: raise max_results or narrow the prefix.");
    }
    out
}

pub fn deleted(note: &NoteInfo) -> String {
    format!(
        "Deleted {} ({}); its text is kept in the note's history.",
        note.address,
        note.size()
    )
}

pub fn renamed(from: &str, note: &NoteInfo) -> String {
    format!("Renamed {from} to {} ({}).", note.address, note.size())
}

pub fn stale(note: &NoteInfo) -> String {
    if note.stale {
        format!(
            "Marked {} stale: it leaves the boot's notes index.",
            note.address
        )
    } else {
        format!("Marked {} fresh.", note.address)
    }
}

/// What `where_` says for a listing or search over one home and prefix.
pub fn where_label(home: &Home, prefix: &str) -> String {
    if prefix.is_empty() {
        home.label()
    } else {
        format!("{} under {}", home.label(), home.address(prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(address: &str, lines: usize, bytes: usize) -> NoteInfo {
        NoteInfo {
            address: address.into(),
            scope: HomeScope::Session,
            home: "session:s".into(),
            path: address.into(),
            bytes,
            lines,
            version: 1,
            stale: false,
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    #[test]
    fn relative_times() {
        assert_eq!(relative_time(0, 0), "0s ago");
        assert_eq!(relative_time(0, 59_999), "59s ago");
        assert_eq!(relative_time(0, 60_000), "1m ago");
        assert_eq!(relative_time(0, 7_200_000), "2h ago");
        assert_eq!(relative_time(0, 3 * 86_400_000), "3d ago");
        assert_eq!(relative_time(5_000, 0), "in 5s");
    }

    #[test]
    fn texts() {
        let n = info("plan.md", 1, 1);
        assert_eq!(
            written(&n, false),
            "Wrote plan.md (1 line, 1 byte; new note)."
        );
        let big = info("@project/a.md", 12, 1234);
        assert_eq!(
            appended(&big, 10, false),
            "Appended 10 bytes to @project/a.md (now 12 lines, 1,234 bytes)."
        );
        let slice = LineSlice {
            start: 2,
            stop: 3,
            total: 12,
            text: "b\nc\n",
        };
        assert_eq!(
            read(&big, &slice),
            "@project/a.md (lines 2-3 of 12):\nb\nc\n"
        );
        let list = listing(
            std::slice::from_ref(&big),
            "@project",
            ListOrder::default(),
            true,
            120_000,
        );
        assert_eq!(
            list,
            "1 note in @project (by name, ascending):\n- @project/a.md (12 lines, 1,234 bytes, updated 2m ago)\nMore notes match: raise max_results or narrow the prefix."
        );
        assert_eq!(
            listing(&[], "this session", ListOrder::default(), false, 0),
            "No notes in this session."
        );
        let hits = vec![
            SearchHit {
                address: "a".into(),
                hit: LineHit {
                    line: 3,
                    text: "x TODO".into(),
                },
            },
            SearchHit {
                address: "a".into(),
                hit: LineHit {
                    line: 9,
                    text: "TODO".into(),
                },
            },
            SearchHit {
                address: "b".into(),
                hit: LineHit {
                    line: 1,
                    text: "TODO y".into(),
                },
            },
        ];
        assert_eq!(
            search(&hits, "TODO", "this session", false),
            "3 matching lines in 2 notes for \"TODO\" in this session:\na:3: x TODO\na:9: TODO\nb:1: TODO y"
        );
    }
}
