//! Recording what came back: a response's elements under the entry it answers, the results of
//! ctxd's own calls after it, and, after a hidden exchange, what the client was shown in its
//! place ([`client_view`](super::client_view)). Pure functions over the log; each returns the
//! entries for the store.

use ctxd_core::model::{Entry, EntryId, EntryKind, Message};
use ctxd_store::NewEntry;

use super::client_view::view_events;
use super::hash;
use super::log::SessionLog;

/// One element of a response as the client will send it back: the message of the session
/// model and the wire bytes it was read from.
pub type ResponseElement = (Message, Vec<u8>);

/// The response's elements into the log under `attach` (those already there are found, not
/// appended again): the entries for the store, or, when all were there, the leaf to move to.
/// `now` stamps the new entries.
pub fn record_response(
    log: &mut SessionLog,
    attach: Option<&EntryId>,
    elements: Vec<ResponseElement>,
    now: &str,
) -> (Vec<NewEntry>, Option<EntryId>) {
    let stamp = Some(now.to_owned());
    let mut batch: Vec<NewEntry> = Vec::new();
    let mut cur = attach.and_then(|id| log.position(id));
    for (message, wire) in elements {
        let h = hash::message(&message);
        log.remember_raw(hash::raw(&wire), h);
        // The same answer already there is found, unless it is another response of the
        // provider's (a retry of a request whose answer the client never received): that one
        // was billed too, so it is recorded beside the first, usage and id.
        if let Some(existing) = log
            .find_next(cur, &h)
            .filter(|&p| !other_response(log.entry(p), &message))
        {
            cur = Some(existing);
            continue;
        }
        let entry = Entry {
            id: log.new_id(cur, "message", &h),
            parent: cur.and_then(|p| log.entry(p)).map(|e| e.id.clone()),
            timestamp: stamp.clone(),
            sidechain: false,
            kind: EntryKind::Message(message),
        };
        cur = Some(log.push(entry.clone()));
        batch.push(NewEntry {
            entry,
            raw: Some(wire),
        });
    }
    let mut leaf = None;
    if batch.is_empty() {
        if let Some(p) = cur.filter(|&p| log.leaf() != Some(p)) {
            log.set_leaf(p);
            leaf = log.entry(p).map(|e| e.id.clone());
        }
    }
    (batch, leaf)
}

/// Whether `entry` is an answer of another provider response than `message` (both have ids).
fn other_response(entry: Option<&Entry>, message: &Message) -> bool {
    match (entry.map(|e| &e.kind), &message.response_id) {
        (Some(EntryKind::Message(m)), Some(id)) => m.response_id.as_ref().is_some_and(|e| e != id),
        _ => false,
    }
}

/// The results of ctxd's calls (`results`, as the API's conversation has them) after the
/// leaf, in order: the entries appended, for the store.
pub fn record_results(log: &mut SessionLog, results: Vec<Message>, now: &str) -> Vec<Entry> {
    results
        .into_iter()
        .map(|message| {
            let h = hash::message(&message);
            let parent = log.leaf();
            let kind = EntryKind::Message(message);
            let (_, entry) = log.append_under(parent, "message", &h, kind, Some(now.to_owned()));
            entry
        })
        .collect()
}

/// Records a tool asked for (`find_capability`'s activation, [`crate::tools::ToolOutput::record`])
/// after the leaf, in order: the entries appended, for the store.
pub fn record_events(log: &mut SessionLog, kinds: Vec<EntryKind>, now: &str) -> Vec<Entry> {
    kinds
        .into_iter()
        .map(|kind| {
            let h = hash::text(&serde_json::to_string(&kind).unwrap_or_default());
            let parent = log.leaf();
            let (_, entry) = log.append_under(parent, "event", &h, kind, Some(now.to_owned()));
            entry
        })
        .collect()
}

/// After ctxd's hidden rounds: the last upstream response (`last`, when it is not in the log
/// yet) under `attach`, then one view event per element the client was shown (`shown`), the
/// first covering the hidden entries (`covered`, and `last`'s), so the client's echo finds the
/// exchange. The entries for the store.
pub fn record_view(
    log: &mut SessionLog,
    attach: Option<&EntryId>,
    mut covered: Vec<String>,
    last: Option<Vec<ResponseElement>>,
    shown: Vec<ResponseElement>,
    now: &str,
) -> Vec<NewEntry> {
    let mut batch = Vec::new();
    let mut parent = attach.and_then(|id| log.position(id));
    if let Some(last) = last {
        let start = parent;
        let (entries, _) = record_response(log, attach, last, now);
        batch = entries;
        covered.extend(branch_ids_after(log, start));
        parent = log.leaf();
    }
    let messages: Vec<Message> = shown.iter().map(|(m, _)| m.clone()).collect();
    for (kind, (message, wire)) in view_events(&messages, &covered).into_iter().zip(shown) {
        let h = hash::message(&message);
        log.remember_raw(hash::raw(&wire), h);
        let (pos, entry) = log.append_under(parent, "client_view", &h, kind, Some(now.to_owned()));
        parent = Some(pos);
        batch.push(NewEntry::new(entry));
    }
    batch
}

/// The ids of the branch's entries after `start` (exclusive; `None` or off the branch: from
/// the root) to the leaf.
pub fn branch_ids_after(log: &SessionLog, start: Option<usize>) -> Vec<String> {
    let path = log.branch();
    let from = start
        .and_then(|s| path.iter().position(|&p| p == s))
        .map_or(0, |i| i + 1);
    path[from..]
        .iter()
        .filter_map(|&p| log.entry(p))
        .map(|e| e.id.as_str().to_owned())
        .collect()
}
