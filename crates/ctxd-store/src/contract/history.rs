//! The history index's contract: its rows, its queries ([`HistoryStore`]), and what every
//! backend does with a row it reads (the filters, the literal recheck, the window tallies). The
//! rules themselves (what an item is, lanes, windows, filters) are the core's
//! ([`ctxd_core::history`]); the backends store and query.

use std::collections::BTreeMap;

use ctxd_core::history::{find_literal, item_facts, BranchLanes, ItemFilter, ItemRow, RankedQuery};
use ctxd_core::model::{Entry, SessionMeta};

use crate::{SessionId, StoreError};

/// One indexed item with its entry.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryRow {
    pub seq: i64,
    pub lane: i64,
    pub window_seq: i64,
    pub item_key: u64,
    pub kind: String,
    pub role: String,
    pub tools: Vec<String>,
    pub sidechain: bool,
    pub entry: Entry,
    /// Ranked search only: bm25 relevance (higher is better).
    pub score: Option<f64>,
}

/// One window: its opening entry and what it holds (on the branch asked for).
#[derive(Clone, Debug, PartialEq)]
pub struct WindowRow {
    pub window_seq: i64,
    /// The entry that opened the window (a root, or a window marker).
    pub start: Entry,
    pub items: u64,
    pub first_seq: i64,
    pub last_seq: i64,
}

/// How many matches a ranked search ranks together, newest block first. Ranking costs about
/// 5-10 µs a row (bm25 reads each row's length from the index), and a common word matches
/// nearly every item: a block bounds the cost of a page (under 20 ms at a million items).
pub const RANKED_BLOCK: usize = 1_000;

/// A visitor of rows in order; returns `false` to stop.
pub type Visit<'a> = &'a mut dyn FnMut(HistoryRow) -> bool;

/// History queries over the stored log. Every method takes a session the caller already checked
/// belongs to its tenant.
pub trait HistoryStore {
    /// The metadata of `session` when it belongs to `tenant` (a cheap check, without counting
    /// entries as [`crate::Store::session`] does).
    fn history_owned(
        &self,
        tenant: &str,
        session: SessionId,
    ) -> Result<Option<SessionMeta>, StoreError>;

    /// Index the session's entries the derived indexes lack (appended by the gateway, which
    /// leaves indexing to after its commit, or stored by a build that did not index on
    /// append). Every history read calls it first. Returns how many were indexed: 0 once the
    /// indexes are current.
    fn history_sync(&self, session: SessionId) -> Result<u64, StoreError>;

    /// The active branch (from the session's leaf) as lanes.
    fn history_branch(&self, session: SessionId) -> Result<BranchLanes, StoreError>;

    /// Every window opener of the session: (seq, entry id), in order.
    fn history_window_starts(&self, session: SessionId) -> Result<Vec<(i64, String)>, StoreError>;

    /// Windows in order of their opening entry; on `branch` when given.
    fn history_windows(
        &self,
        session: SessionId,
        branch: Option<&BranchLanes>,
    ) -> Result<Vec<WindowRow>, StoreError>;

    /// Items in append order (or the reverse), filtered.
    fn history_items(
        &self,
        session: SessionId,
        filter: &ItemFilter,
        branch: Option<&BranchLanes>,
        recent_first: bool,
        visit: Visit<'_>,
    ) -> Result<(), StoreError>;

    /// The items whose key is `key` (one, or none; more only on a hash collision).
    fn history_item(&self, session: SessionId, key: u64) -> Result<Vec<HistoryRow>, StoreError>;

    /// Items whose text contains `query` (case-sensitive), in order, filtered.
    fn history_search_literal(
        &self,
        session: SessionId,
        query: &str,
        filter: &ItemFilter,
        branch: Option<&BranchLanes>,
        recent_first: bool,
        visit: Visit<'_>,
    ) -> Result<(), StoreError>;

    /// Items holding every word of `query`, filtered, in blocks of `RANKED_BLOCK` (1,000)
    /// matches, newest block first, each best first. SQLite ranks by bm25: words in most of the store's
    /// items carry no weight there and are left out of the ranking (see
    /// `sqlite/history/ranked.rs`); when every word is that common, the newest come first with a
    /// score of 0. PostgreSQL ranks by `ts_rank` (see `postgres/history/ranked.rs`).
    fn history_search_ranked(
        &self,
        session: SessionId,
        query: &RankedQuery,
        filter: &ItemFilter,
        branch: Option<&BranchLanes>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError>;
}

/// The `history_items` columns of an item, without its entry: enough to filter and to rank, so
/// a search reads an entry's body only for the items it returns.
#[derive(Clone, Debug)]
pub(crate) struct ItemCols {
    pub(crate) seq: i64,
    pub(crate) lane: i64,
    pub(crate) window_seq: i64,
    pub(crate) item_key: i64,
    pub(crate) kind: String,
    pub(crate) role: String,
    pub(crate) tools: Vec<String>,
    pub(crate) sidechain: bool,
}

impl ItemCols {
    pub(crate) fn sidechain(&self) -> bool {
        self.sidechain
    }

    pub(crate) fn accepted(&self, filter: &ItemFilter, branch: Option<&BranchLanes>) -> bool {
        filter.accepts(
            &ItemRow {
                lane: self.lane,
                seq: self.seq,
                window_seq: self.window_seq,
                role: &self.role,
                tools: &self.tools,
                sidechain: self.sidechain,
            },
            branch,
        )
    }

    /// The row a read hands on, or `None`: the filter is applied before `entry` decodes the
    /// item's entry, and a literal search's `literal` is checked on the entry's text.
    pub(crate) fn kept(
        self,
        filter: &ItemFilter,
        branch: Option<&BranchLanes>,
        literal: Option<&str>,
        entry: impl FnOnce(&Self) -> Result<Entry, StoreError>,
    ) -> Result<Option<HistoryRow>, StoreError> {
        if !self.accepted(filter, branch) {
            return Ok(None);
        }
        let entry = entry(&self)?;
        if literal.is_some_and(|q| !holds_literal(&entry, q)) {
            return Ok(None);
        }
        Ok(Some(self.with_entry(entry, None)))
    }

    pub(crate) fn with_entry(self, entry: Entry, score: Option<f64>) -> HistoryRow {
        HistoryRow {
            seq: self.seq,
            lane: self.lane,
            window_seq: self.window_seq,
            item_key: self.item_key as u64,
            kind: self.kind,
            role: self.role,
            tools: self.tools,
            sidechain: self.sidechain,
            entry,
            score,
        }
    }
}

/// Tool names stored one per line.
pub(crate) fn split_tools(text: &str) -> Vec<String> {
    text.split('\n')
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Whether an item's entry holds `query` (case-sensitive): the recheck of a literal search,
/// whose index only narrows the candidates.
pub(crate) fn holds_literal(entry: &Entry, query: &str) -> bool {
    item_facts(&entry.kind, &|_| None)
        .map(|f| f.text)
        .is_some_and(|t| find_literal(&t, query).is_some())
}

/// The active branch as lanes, walked back from the entry at `from` (the leaf's seq).
/// `lane_of(seq)` gives the lane holding `seq` and the parent seq of that lane's first entry;
/// `None` ends the walk (an entry the index does not hold yet). Parents always have smaller
/// seqs, so the walk ends.
pub(crate) fn walk_branch(
    from: Option<i64>,
    mut lane_of: impl FnMut(i64) -> Result<Option<(i64, Option<i64>)>, StoreError>,
) -> Result<BranchLanes, StoreError> {
    let mut lanes = BranchLanes::default();
    let mut at = from;
    while let Some(seq) = at {
        let Some((lane, parent)) = lane_of(seq)? else {
            break;
        };
        lanes.push(lane, seq);
        at = parent.filter(|&p| p < lane);
    }
    Ok(lanes)
}

/// Windows' item counts and seq ranges summed over the per-lane (or whole-session) groups a
/// backend reads: window seq -> (items, first seq, last seq).
#[derive(Debug, Default)]
pub(crate) struct WindowTally(BTreeMap<i64, (u64, i64, i64)>);

impl WindowTally {
    /// One group's row: its window, items, and lowest and highest seq.
    pub(crate) fn add(&mut self, window_seq: i64, items: i64, first: i64, last: i64) {
        let slot = self.0.entry(window_seq).or_insert((0, first, last));
        slot.0 += items as u64;
        slot.1 = slot.1.min(first);
        slot.2 = slot.2.max(last);
    }

    /// The windows in order, each with its opening entry from `start` (a window whose opener
    /// is gone is left out).
    pub(crate) fn rows(
        self,
        mut start: impl FnMut(i64) -> Result<Option<Entry>, StoreError>,
    ) -> Result<Vec<WindowRow>, StoreError> {
        let mut out = Vec::with_capacity(self.0.len());
        for (window_seq, (items, first_seq, last_seq)) in self.0 {
            let Some(entry) = start(window_seq)? else {
                continue;
            };
            out.push(WindowRow {
                window_seq,
                start: entry,
                items,
                first_seq,
                last_seq,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ctxd_core::model::{EntryId, EntryKind, Message, Role};

    fn entry(id: &str, text: &str) -> Entry {
        Entry {
            id: EntryId::new(id),
            parent: None,
            timestamp: None,
            sidechain: false,
            kind: EntryKind::Message(Message::text(Role::User, text)),
        }
    }

    #[test]
    fn a_branch_is_walked_back_lane_by_lane() {
        // seq -> (lane, parent of the lane's first entry): lane 1 holds 1-4, lane 5 forks
        // from 3 and holds 5-7; lane 9 claims a later parent (never followed).
        let lane_of = |seq: i64| -> Result<Option<(i64, Option<i64>)>, StoreError> {
            Ok(match seq {
                1..=4 => Some((1, None)),
                5..=7 => Some((5, Some(3))),
                9 => Some((9, Some(12))),
                _ => None,
            })
        };
        let lanes = walk_branch(Some(7), lane_of).unwrap();
        assert_eq!(lanes.lanes(), [(1, 3), (5, 7)]);
        assert!(lanes.contains(1, 2) && !lanes.contains(1, 4));
        assert_eq!(walk_branch(Some(9), lane_of).unwrap().lanes(), [(9, 9)]);
        assert!(walk_branch(Some(20), lane_of).unwrap().is_empty());
        assert!(walk_branch(None, lane_of).unwrap().is_empty());
    }

    #[test]
    fn windows_sum_their_groups_and_skip_a_lost_opener() {
        let mut tally = WindowTally::default();
        tally.add(5, 2, 6, 9);
        tally.add(1, 3, 1, 4);
        tally.add(5, 1, 5, 12);
        tally.add(20, 1, 20, 20);
        let rows = tally
            .rows(|seq| Ok((seq != 20).then(|| entry(&seq.to_string(), "w"))))
            .unwrap();
        let got: Vec<_> = rows
            .iter()
            .map(|r| (r.window_seq, r.items, r.first_seq, r.last_seq))
            .collect();
        assert_eq!(got, [(1, 3, 1, 4), (5, 3, 5, 12)]);
        assert_eq!(rows[1].start.id.as_str(), "5");
    }

    #[test]
    fn a_row_is_filtered_before_its_entry_is_decoded_and_rechecked_after() {
        let cols = ItemCols {
            seq: 3,
            lane: 1,
            window_seq: 1,
            item_key: 9,
            kind: "message".into(),
            role: "user".into(),
            tools: Vec::new(),
            sidechain: false,
        };
        let assistant = ItemFilter {
            role: Some("assistant".into()),
            ..ItemFilter::default()
        };
        let never = |_: &ItemCols| -> Result<Entry, StoreError> { panic!("decoded") };
        assert_eq!(
            cols.clone().kept(&assistant, None, None, never).unwrap(),
            None
        );
        let all = ItemFilter::default();
        let decode = |_: &ItemCols| Ok(entry("a", "find me"));
        assert_eq!(
            cols.clone().kept(&all, None, Some("lost"), decode).unwrap(),
            None
        );
        let row = cols
            .kept(&all, None, Some("find"), decode)
            .unwrap()
            .unwrap();
        assert_eq!((row.seq, row.item_key, row.score), (3, 9, None));
    }

    #[test]
    fn tools_split_by_line_and_literals_recheck_the_text() {
        assert_eq!(split_tools("a\n\nb"), ["a", "b"]);
        assert!(split_tools("").is_empty());
        assert!(holds_literal(&entry("a", "the Zebra"), "Zebra"));
        assert!(!holds_literal(&entry("a", "the Zebra"), "zebra"));
    }
}
