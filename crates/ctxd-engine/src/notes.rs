//! Notes tools: `notes_write`, `notes_append`, `notes_read`, `notes_list`, `notes_search`,
//! `notes_delete`, `notes_rename`, `notes_mark_stale`, and the boot's notes snapshot.
//!
//! Addresses resolve through the core's grammar ([`ctxd_core::notes::address`]); the text rules
//! (limit, lines, append, ranges, search, ordering, wording) are the core's; this module reads
//! and writes the store and composes them. Each method has a typed result (the CLI prints it as
//! text or JSON); [`call`] runs the same methods for the model and renders their text.

use serde::Serialize;
use serde_json::Value;

use ctxd_core::notes::address::{own_homes, Home, Who};
use ctxd_core::notes::list::{self, Direction, ListOrder, OrderBy};
use ctxd_core::notes::render::{self, NoteInfo, SearchHit};
use ctxd_core::notes::{resolve, resolve_prefix, text, NoteError, NoteRow, NotesSnapshot};
use ctxd_store::{NoteMeta, Store};

use crate::tools::{parameters, parse, ToolOutput, ToolSpec, Whole};
use crate::{now_ms, Caller, Engine, EngineError};

fn invalid(e: NoteError) -> EngineError {
    EngineError::Invalid(e.to_string())
}

/// The store names its refusals by path; the caller knows the note by its address.
fn at_address(e: NoteError, address: &str) -> NoteError {
    match e {
        NoteError::TooLarge { bytes, .. } => NoteError::TooLarge {
            address: address.to_owned(),
            bytes,
        },
        NoteError::NotFound { .. } => NoteError::NotFound {
            address: address.to_owned(),
        },
        NoteError::Exists { .. } => NoteError::Exists {
            address: address.to_owned(),
        },
        other => other,
    }
}

fn info(home: &Home, meta: &NoteMeta) -> NoteInfo {
    NoteInfo {
        address: home.address(&meta.path),
        scope: home.scope,
        home: meta.home.clone(),
        path: meta.path.clone(),
        bytes: meta.bytes,
        lines: meta.lines,
        version: meta.version,
        stale: meta.stale,
        created_at_ms: meta.created_at_ms,
        updated_at_ms: meta.updated_at_ms,
    }
}

/// The caller's names, owned (the session key may come from the store).
struct Names {
    session: Option<String>,
    project: Option<String>,
    agent: Option<String>,
    model: Option<String>,
}

impl Names {
    fn who(&self) -> Who<'_> {
        Who {
            session: self.session.as_deref(),
            project: self.project.as_deref(),
            agent: self.agent.as_deref(),
            model: self.model.as_deref(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct NoteWritten {
    pub note: NoteInfo,
    pub replaced: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct NoteAppended {
    pub note: NoteInfo,
    pub created: bool,
    pub added_bytes: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct NoteRead {
    pub note: NoteInfo,
    /// First and last line returned (1-based, inclusive; 0 for an empty note).
    pub start_line: usize,
    pub stop_line: usize,
    pub total_lines: usize,
    pub text: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct NoteList {
    /// What was listed (`this session`, `@project under @project/plans/`, `your homes`).
    pub r#where: String,
    pub order: ListOrder,
    pub notes: Vec<NoteInfo>,
    /// More notes matched than `max_results`.
    pub more: bool,
    /// Homes that could not be read (listing across homes only).
    pub unavailable: Vec<String>,
    pub now_ms: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct NoteSearch {
    pub r#where: String,
    pub query: String,
    pub hits: Vec<SearchHit>,
    /// More lines matched than `max_results`.
    pub truncated: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct NoteRenamed {
    pub from: String,
    pub note: NoteInfo,
}

impl NoteList {
    pub fn text(&self) -> String {
        let mut out = render::listing(
            &self.notes,
            &self.r#where,
            self.order,
            self.more,
            self.now_ms,
        );
        if !self.unavailable.is_empty() {
            out.push_str(&format!(
                "\nUnavailable (could not be read): {}.",
                self.unavailable.join(", ")
            ));
        }
        out
    }
}

impl NoteSearch {
    pub fn text(&self) -> String {
        render::search(&self.hits, &self.query, &self.r#where, self.truncated)
    }
}

/// The homes a listing or search covers: one (a prefix was given) or all the caller's own.
fn homes_for(
    prefix: Option<&str>,
    who: &Who<'_>,
) -> Result<(Vec<(Home, String)>, String), EngineError> {
    match prefix.filter(|p| !p.is_empty()) {
        Some(p) => {
            let resolved = resolve_prefix(p, who).map_err(invalid)?;
            let label = render::where_label(&resolved.home, &resolved.prefix);
            Ok((vec![(resolved.home, resolved.prefix)], label))
        }
        None => Ok((
            own_homes(who)
                .into_iter()
                .map(|h| (h, String::new()))
                .collect(),
            "your homes".to_owned(),
        )),
    }
}

impl<S: Store + ?Sized> Engine<S> {
    fn names(&self, caller: &Caller) -> Result<Names, EngineError> {
        let session = match (&caller.session_key, caller.session) {
            (Some(key), _) => Some(key.clone()),
            (None, Some(id)) => self.store.session(&caller.tenant, id)?.map(|s| s.key),
            (None, None) => None,
        };
        Ok(Names {
            session,
            project: caller.project.clone(),
            agent: caller.agent.clone(),
            model: caller.model.clone(),
        })
    }

    /// Create or replace the note at `address`.
    pub fn notes_write(
        &self,
        caller: &Caller,
        address: &str,
        body: &str,
    ) -> Result<NoteWritten, EngineError> {
        let names = self.names(caller)?;
        let a = resolve(address, &names.who()).map_err(invalid)?;
        let display = a.display();
        text::check_size(&display, body).map_err(invalid)?;
        let done = self
            .store
            .note_write(&caller.tenant, &a.home.key(), &a.path, body, now_ms())?
            .map_err(|e| invalid(at_address(e, &display)))?;
        Ok(NoteWritten {
            note: info(&a.home, &done.meta),
            replaced: done.replaced,
        })
    }

    /// Append `text` to the note at `address`, creating it when absent.
    pub fn notes_append(
        &self,
        caller: &Caller,
        address: &str,
        text_in: &str,
    ) -> Result<NoteAppended, EngineError> {
        let names = self.names(caller)?;
        let a = resolve(address, &names.who()).map_err(invalid)?;
        let display = a.display();
        // Over the limit on its own: refused before the store is touched.
        text::check_size(&display, text_in).map_err(invalid)?;
        let done = self
            .store
            .note_append(&caller.tenant, &a.home.key(), &a.path, text_in, now_ms())?
            .map_err(|e| invalid(at_address(e, &display)))?;
        Ok(NoteAppended {
            note: info(&a.home, &done.meta),
            created: done.created,
            added_bytes: done.added_bytes,
        })
    }

    /// Lines `start..=stop` of the note (see `ctxd_core::notes::text::read_lines`).
    pub fn notes_read(
        &self,
        caller: &Caller,
        address: &str,
        start: Option<i64>,
        stop: Option<i64>,
    ) -> Result<NoteRead, EngineError> {
        let names = self.names(caller)?;
        let a = resolve(address, &names.who()).map_err(invalid)?;
        let display = a.display();
        let note = self
            .store
            .note_read(&caller.tenant, &a.home.key(), &a.path)?
            .ok_or_else(|| {
                invalid(NoteError::NotFound {
                    address: display.clone(),
                })
            })?;
        let slice = text::read_lines(&display, &note.body, start, stop).map_err(invalid)?;
        Ok(NoteRead {
            note: info(&a.home, &note.meta),
            start_line: slice.start,
            stop_line: slice.stop,
            total_lines: slice.total,
            text: slice.text.to_owned(),
        })
    }

    /// Notes under `prefix` (one home), or in every home of the caller when there is none.
    pub fn notes_list(
        &self,
        caller: &Caller,
        prefix: Option<&str>,
        order: ListOrder,
        max: usize,
    ) -> Result<NoteList, EngineError> {
        let names = self.names(caller)?;
        let who = names.who();
        let (homes, label) = homes_for(prefix, &who)?;
        let single = homes.len() == 1 && prefix.is_some_and(|p| !p.is_empty());
        let mut notes = Vec::new();
        let mut unavailable = Vec::new();
        for (home, p) in &homes {
            match self
                .store
                .note_list(&caller.tenant, &home.key(), p, order, max.saturating_add(1))
            {
                Ok(metas) => notes.extend(metas.iter().map(|m| info(home, m))),
                Err(e) if single => return Err(e.into()),
                Err(_) => unavailable.push(home.label()),
            }
        }
        let more = notes.len() > max;
        list::sort_and_limit(&mut notes, order, max);
        Ok(NoteList {
            r#where: label,
            order,
            notes,
            more,
            unavailable,
            now_ms: now_ms(),
        })
    }

    /// Lines containing `query` (literal, case-sensitive), at most `max`.
    pub fn notes_search(
        &self,
        caller: &Caller,
        query: &str,
        prefix: Option<&str>,
        max: usize,
    ) -> Result<NoteSearch, EngineError> {
        text::check_query(query).map_err(invalid)?;
        let names = self.names(caller)?;
        let who = names.who();
        let (homes, label) = homes_for(prefix, &who)?;
        let mut hits = Vec::new();
        let mut truncated = false;
        'homes: for (home, p) in &homes {
            for note in self
                .store
                .note_search(&caller.tenant, &home.key(), p, query)?
            {
                let address = home.address(&note.meta.path);
                let room = max - hits.len();
                let found = text::search_lines(&note.body, query, room + 1);
                for hit in found {
                    if hits.len() == max {
                        truncated = true;
                        break 'homes;
                    }
                    hits.push(SearchHit {
                        address: address.clone(),
                        hit,
                    });
                }
            }
        }
        Ok(NoteSearch {
            r#where: label,
            query: query.to_owned(),
            hits,
            truncated,
        })
    }

    /// Delete the note; its text stays in the store's versions.
    pub fn notes_delete(&self, caller: &Caller, address: &str) -> Result<NoteInfo, EngineError> {
        let names = self.names(caller)?;
        let a = resolve(address, &names.who()).map_err(invalid)?;
        let meta = self
            .store
            .note_delete(&caller.tenant, &a.home.key(), &a.path, now_ms())?
            .ok_or_else(|| {
                invalid(NoteError::NotFound {
                    address: a.display(),
                })
            })?;
        Ok(info(&a.home, &meta))
    }

    /// Move a note to `to` (any home); refused when `to` exists.
    pub fn notes_rename(
        &self,
        caller: &Caller,
        from: &str,
        to: &str,
    ) -> Result<NoteRenamed, EngineError> {
        let names = self.names(caller)?;
        let who = names.who();
        let a = resolve(from, &who).map_err(invalid)?;
        let b = resolve(to, &who).map_err(invalid)?;
        let meta = self
            .store
            .note_rename(
                &caller.tenant,
                (&a.home.key(), &a.path),
                (&b.home.key(), &b.path),
                now_ms(),
            )?
            .map_err(|e| {
                let at = if matches!(e, NoteError::Exists { .. }) {
                    b.display()
                } else {
                    a.display()
                };
                invalid(at_address(e, &at))
            })?;
        Ok(NoteRenamed {
            from: a.display(),
            note: info(&b.home, &meta),
        })
    }

    /// Mark the note stale (it leaves the boot's index) or fresh again.
    pub fn notes_mark_stale(
        &self,
        caller: &Caller,
        address: &str,
        stale: bool,
    ) -> Result<NoteInfo, EngineError> {
        let names = self.names(caller)?;
        let a = resolve(address, &names.who()).map_err(invalid)?;
        let meta = self
            .store
            .note_set_stale(&caller.tenant, &a.home.key(), &a.path, stale, now_ms())?
            .ok_or_else(|| {
                invalid(NoteError::NotFound {
                    address: a.display(),
                })
            })?;
        Ok(info(&a.home, &meta))
    }

    /// Every home's notes for `caller`, read once (the boot's notes index is rendered from it):
    /// most recently updated first within each home. A home the caller has no name for (no
    /// session, project, agent or model) is absent; a home that fails to read is listed in
    /// `unavailable`.
    pub fn notes_snapshot(
        &self,
        caller: &Caller,
        opened_at_ms: i64,
    ) -> Result<NotesSnapshot, EngineError> {
        let names = self.names(caller)?;
        let mut snapshot = NotesSnapshot {
            opened_at_ms,
            ..Default::default()
        };
        for home in own_homes(&names.who()) {
            match self.store.note_home(&caller.tenant, &home.key()) {
                Ok(notes) => {
                    let rows = notes
                        .into_iter()
                        .map(|n| NoteRow {
                            scope: home.scope,
                            address: home.address(&n.meta.path),
                            path: n.meta.path,
                            bytes: n.meta.bytes,
                            lines: n.meta.lines,
                            updated_at_ms: n.meta.updated_at_ms,
                            stale: n.meta.stale,
                            body: n.body,
                        })
                        .collect();
                    snapshot.homes.insert(home.scope, rows);
                }
                Err(_) => snapshot.unavailable.push(home.scope),
            }
        }
        Ok(snapshot)
    }
}

// ---- the tools ----

const WRITE: &str = "notes_write";
const APPEND: &str = "notes_append";
const READ: &str = "notes_read";
const LIST: &str = "notes_list";
const SEARCH: &str = "notes_search";
const DELETE: &str = "notes_delete";
const RENAME: &str = "notes_rename";
const MARK_STALE: &str = "notes_mark_stale";

/// The tools of this module.
pub fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: WRITE,
            description: "Create or replace a note (a virtual file in your notes, not a workspace file). At most 1,000,000 UTF-8 bytes per note; the replaced text stays in the note's history.",
            parameters: parameters::<args::Write>(),
        },
        ToolSpec {
            name: APPEND,
            description: "Append text to a note, creating it when absent. A newline is inserted first when the note does not end with one.",
            parameters: parameters::<args::Append>(),
        },
        ToolSpec {
            name: READ,
            description: "Read a note, whole or an inclusive line range. Lines start at 1; negative numbers count from the end (-1 is the last line). A stop past the end reads to the end.",
            parameters: parameters::<args::Read>(),
        },
        ToolSpec {
            name: LIST,
            description: "List notes with their size and update time. With a prefix (an address prefix such as `plans/`, `@project/` or `@agents/codex/`), one home; without, all your homes.",
            parameters: parameters::<args::List>(),
        },
        ToolSpec {
            name: SEARCH,
            description: "Find the lines of your notes containing a literal, case-sensitive query; returns address:line: text.",
            parameters: parameters::<args::Search>(),
        },
        ToolSpec {
            name: DELETE,
            description: "Delete a note (its text stays in the note's history).",
            parameters: parameters::<args::Delete>(),
        },
        ToolSpec {
            name: RENAME,
            description: "Rename or move a note, also to another home (e.g. `plan.md` to `@project/plan.md`). Refused when the new address exists.",
            parameters: parameters::<args::Rename>(),
        },
        ToolSpec {
            name: MARK_STALE,
            description: "Mark a note stale (e.g. an old checkpoint you replaced): it leaves the boot's notes index but stays readable. stale=false marks it fresh again; writing a note also does.",
            parameters: parameters::<args::MarkStale>(),
        },
    ]
}

fn order(by: Option<&str>, direction: Option<&str>) -> Result<ListOrder, EngineError> {
    Ok(ListOrder {
        by: by
            .map(OrderBy::parse)
            .transpose()
            .map_err(invalid)?
            .unwrap_or_default(),
        direction: direction
            .map(Direction::parse)
            .transpose()
            .map_err(invalid)?
            .unwrap_or_default(),
    })
}

fn max(requested: Option<Whole>) -> Result<usize, EngineError> {
    list::max_results(requested.map(|w| w.0)).map_err(invalid)
}

/// Run `name` if it is one of this module's tools.
pub(crate) fn call<S: ctxd_store::Store + ?Sized>(
    engine: &Engine<S>,
    caller: &Caller,
    name: &str,
    args: &Value,
) -> Option<Result<ToolOutput, EngineError>> {
    match name {
        WRITE | APPEND | READ | LIST | SEARCH | DELETE | RENAME | MARK_STALE => {
            Some(run(engine, caller, name, args).map(ToolOutput::ok))
        }
        _ => None,
    }
}

fn run<S: Store + ?Sized>(
    engine: &Engine<S>,
    caller: &Caller,
    name: &str,
    args: &Value,
) -> Result<String, EngineError> {
    Ok(match name {
        WRITE => {
            let a: args::Write = parse(name, args)?;
            let r = engine.notes_write(caller, &a.path, &a.text)?;
            render::written(&r.note, r.replaced)
        }
        APPEND => {
            let a: args::Append = parse(name, args)?;
            let r = engine.notes_append(caller, &a.path, &a.text)?;
            render::appended(&r.note, r.added_bytes, r.created)
        }
        READ => {
            let a: args::Read = parse(name, args)?;
            let r = engine.notes_read(
                caller,
                &a.path,
                a.start_line.map(|w| w.0),
                a.stop_line.map(|w| w.0),
            )?;
            let slice = text::LineSlice {
                start: r.start_line,
                stop: r.stop_line,
                total: r.total_lines,
                text: &r.text,
            };
            render::read(&r.note, &slice)
        }
        LIST => {
            let a: args::List = parse(name, args)?;
            engine
                .notes_list(
                    caller,
                    a.prefix.as_deref(),
                    order(a.file_order_by.as_deref(), a.file_order.as_deref())?,
                    max(a.max_results)?,
                )?
                .text()
        }
        SEARCH => {
            let a: args::Search = parse(name, args)?;
            engine
                .notes_search(caller, &a.query, a.prefix.as_deref(), max(a.max_results)?)?
                .text()
        }
        DELETE => {
            let a: args::Delete = parse(name, args)?;
            render::deleted(&engine.notes_delete(caller, &a.path)?)
        }
        RENAME => {
            let a: args::Rename = parse(name, args)?;
            let r = engine.notes_rename(caller, &a.path, &a.new_path)?;
            render::renamed(&r.from, &r.note)
        }
        MARK_STALE => {
            let a: args::MarkStale = parse(name, args)?;
            render::stale(&engine.notes_mark_stale(caller, &a.path, a.stale.unwrap_or(true))?)
        }
        other => return Err(EngineError::UnknownTool(other.to_owned())),
    })
}

pub(crate) mod args;

#[cfg(test)]
mod tests;
