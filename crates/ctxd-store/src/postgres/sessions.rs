//! Sessions and entries on PostgreSQL.

use postgres::{GenericClient, Row, Transaction};

use ctxd_core::model::{Entry, EntryId, Session, SessionMeta};
use ctxd_core::spend::{Counter, Spend};

use super::history::index::{indexed_upto, Indexer};
use super::prepared::Prepared;
use super::{pg, PgStore, NOW};
use crate::contract::entry::{
    check_leaf, decode_entry, decode_meta, encode_kind, encode_meta, kind_tag, new_leaf,
    sql_amount, stored_amount, Indexing,
};
use crate::{NewEntry, SessionId, SessionRecord, Store, StoreError};

const SESSION_COLUMNS: &str = "s.id, s.tenant, s.key, s.meta, s.created_at, s.updated_at, s.leaf, \
     (SELECT COUNT(*) FROM entries e WHERE e.session_id = s.id)";

fn session_row(row: &Row) -> Result<SessionRecord, StoreError> {
    let id: i64 = row.get(0);
    let meta: String = row.get(3);
    Ok(SessionRecord {
        id,
        tenant: row.get(1),
        key: row.get(2),
        meta: decode_meta(id, &meta)?,
        created_at: row.get(4),
        updated_at: row.get(5),
        leaf: row.get::<_, Option<String>>(6).map(EntryId),
        entry_count: row.get::<_, i64>(7) as u64,
    })
}

/// The session's entries with `seq` above `after`, in order.
pub(super) fn entries_after(
    c: &mut impl GenericClient,
    session: SessionId,
    after: i64,
) -> Result<Vec<Entry>, StoreError> {
    c.query_cached(
        "SELECT id, parent, ts, sidechain, body FROM entries \
         WHERE session_id = $1 AND seq > $2 ORDER BY seq",
        &[&session, &after],
    )?
    .iter()
    .map(|row| entry_row(row, 0))
    .collect()
}

/// An entry from the columns `id, parent, ts, sidechain, body` starting at `at`.
pub(super) fn entry_row(row: &Row, at: usize) -> Result<Entry, StoreError> {
    let body: String = row.get(at + 4);
    decode_entry(
        row.get(at),
        row.get(at + 1),
        row.get(at + 2),
        row.get(at + 3),
        &body,
    )
}

impl Store for PgStore {
    fn open_session(
        &self,
        tenant: &str,
        key: &str,
        meta: &SessionMeta,
    ) -> Result<SessionRecord, StoreError> {
        let meta_json = encode_meta(key, meta)?;
        let agent = meta.agent.map(|a| a.as_str().to_owned());
        let (tenant, key) = (tenant.to_owned(), key.to_owned());
        self.pool.run(move |c| {
            // Looked up first: an insert that meets the key still takes a number from the id
            // sequence, and SQLite's ids have no such gaps.
            if let Some(found) = find_session(c, &tenant, &key)? {
                return Ok(found);
            }
            c.execute_cached(
                &format!(
                    "INSERT INTO sessions (tenant, key, agent, meta, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, {NOW}, {NOW}) ON CONFLICT (tenant, key) DO NOTHING"
                ),
                &[&tenant, &key, &agent, &meta_json],
            )?;
            find_session(c, &tenant, &key)?.ok_or(StoreError::NoSession(key))
        })
    }

    fn find_session(&self, tenant: &str, key: &str) -> Result<Option<SessionRecord>, StoreError> {
        let (tenant, key) = (tenant.to_owned(), key.to_owned());
        self.pool.run(move |c| find_session(c, &tenant, &key))
    }

    fn session(&self, tenant: &str, id: SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let tenant = tenant.to_owned();
        self.pool.run(move |c| {
            c.query_opt_cached(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.tenant = $1 AND s.id = $2"
                ),
                &[&tenant, &id],
            )?
            .map(|r| session_row(&r))
            .transpose()
        })
    }

    fn tenants(&self) -> Result<Vec<String>, StoreError> {
        self.pool.run(|c| {
            let rows =
                c.query_cached("SELECT DISTINCT tenant FROM sessions ORDER BY tenant", &[])?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn list_sessions(&self, tenant: &str) -> Result<Vec<SessionRecord>, StoreError> {
        let tenant = tenant.to_owned();
        self.pool.run(move |c| {
            let rows = c.query_cached(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.tenant = $1 \
                         ORDER BY s.updated_at DESC, s.id DESC"
                ),
                &[&tenant],
            )?;
            rows.iter().map(session_row).collect()
        })
    }

    fn append(
        &self,
        session: SessionId,
        batch: &[NewEntry],
        leaf: Option<&EntryId>,
    ) -> Result<i64, StoreError> {
        let batch = batch.to_vec();
        let leaf = leaf.cloned();
        self.pool.run(move |c| {
            let mut tx = c.transaction().map_err(pg)?;
            let batch_no = append_in(
                &mut tx,
                session,
                &batch,
                leaf.as_ref(),
                None,
                Indexing::Inline,
            )?;
            tx.commit().map_err(pg)?;
            Ok(batch_no)
        })
    }

    fn set_leaf(&self, session: SessionId, leaf: &EntryId) -> Result<(), StoreError> {
        let leaf = leaf.clone();
        self.pool.run(move |c| {
            let mut tx = c.transaction().map_err(pg)?;
            set_leaf_in(&mut tx, session, &leaf)?;
            tx.commit().map_err(pg)
        })
    }

    fn load(&self, session: SessionId) -> Result<Session, StoreError> {
        self.pool.run(move |c| {
            let row = c
                .query_opt_cached("SELECT meta, leaf FROM sessions WHERE id = $1", &[&session])?
                .ok_or_else(|| StoreError::NoSession(session.to_string()))?;
            let meta = decode_meta(session, row.get(0))?;
            let leaf: Option<String> = row.get(1);
            // Seq numbers start at 1: the entries after 0 are all of them.
            let entries = entries_after(c, session, 0)?;
            Ok(Session {
                meta,
                entries,
                leaf: leaf.map(EntryId),
            })
        })
    }

    fn entry(&self, session: SessionId, id: &EntryId) -> Result<Option<Entry>, StoreError> {
        let id = id.0.clone();
        self.pool.run(move |c| {
            c.query_opt_cached(
                "SELECT id, parent, ts, sidechain, body FROM entries \
                 WHERE session_id = $1 AND id = $2",
                &[&session, &id],
            )?
            .map(|r| entry_row(&r, 0))
            .transpose()
        })
    }

    fn raw(&self, session: SessionId, id: &EntryId) -> Result<Option<Vec<u8>>, StoreError> {
        let id = id.0.clone();
        self.pool.run(move |c| {
            let row = c.query_opt_cached(
                "SELECT raw FROM entries WHERE session_id = $1 AND id = $2",
                &[&session, &id],
            )?;
            Ok(row.and_then(|r| r.get::<_, Option<Vec<u8>>>(0)))
        })
    }

    fn setting_or_insert(&self, key: &str, value: &[u8]) -> Result<Vec<u8>, StoreError> {
        let (key, value) = (key.to_owned(), value.to_vec());
        self.pool.run(move |c| {
            let mut tx = c.transaction().map_err(pg)?;
            tx.execute_cached(
                "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                &[&key, &value],
            )?;
            let stored: Vec<u8> = tx
                .query_one_cached("SELECT value FROM settings WHERE key = $1", &[&key])?
                .get(0);
            tx.commit().map_err(pg)?;
            Ok(stored)
        })
    }

    fn put_setting(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let (key, value) = (key.to_owned(), value.to_vec());
        self.pool.run(move |c| {
            c.execute_cached(
                "INSERT INTO settings (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&key, &value],
            )?;
            Ok(())
        })
    }

    fn settings_with_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let prefix = prefix.to_owned();
        self.pool.run(move |c| {
            let rows = c.query_cached(
                "SELECT key, value FROM settings WHERE left(key, length($1)) = $1 ORDER BY key",
                &[&prefix],
            )?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn spend(&self, scope: &str, period: &str) -> Result<Counter, StoreError> {
        let (scope, period) = (scope.to_owned(), period.to_owned());
        self.pool.run(move |c| {
            let row = c.query_opt_cached(SPEND_ROW, &[&scope, &period])?;
            Ok(row.map(|r| counter_row(&r)).unwrap_or_default())
        })
    }

    fn spend_reserve(
        &self,
        scope: &str,
        period: &str,
        amount: Spend,
        bound: Spend,
    ) -> Result<(bool, Counter), StoreError> {
        let (scope, period) = (scope.to_owned(), period.to_owned());
        self.pool.run(move |c| {
            c.execute_cached(
                "INSERT INTO spend (scope, period) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&scope, &period],
            )?;
            // The row lock orders racing gateways, and the condition is checked again on
            // the row as the previous holder left it: at most one request past the bound.
            let reserved = c.query_opt_cached(
                "UPDATE spend SET reserved_tokens = reserved_tokens + $3, \
                 reserved_micro_usd = reserved_micro_usd + $4 \
                 WHERE scope = $1 AND period = $2 \
                 AND used_tokens + reserved_tokens < $5 \
                 AND used_micro_usd + reserved_micro_usd < $6 \
                 RETURNING used_tokens, used_micro_usd, reserved_tokens, reserved_micro_usd",
                &[
                    &scope,
                    &period,
                    &sql_amount(amount.tokens),
                    &sql_amount(amount.micro_usd),
                    &sql_amount(bound.tokens),
                    &sql_amount(bound.micro_usd),
                ],
            )?;
            if let Some(r) = reserved {
                return Ok((true, counter_row(&r)));
            }
            let now = c.query_opt_cached(SPEND_ROW, &[&scope, &period])?;
            Ok((false, now.map(|r| counter_row(&r)).unwrap_or_default()))
        })
    }

    fn spend_settle(
        &self,
        scope: &str,
        period: &str,
        used: Spend,
        release: Spend,
    ) -> Result<(), StoreError> {
        let (scope, period) = (scope.to_owned(), period.to_owned());
        self.pool.run(move |c| {
            c.execute_cached(
                "INSERT INTO spend (scope, period, used_tokens, used_micro_usd) \
                 VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (scope, period) DO UPDATE SET \
                 used_tokens = spend.used_tokens + $3, \
                 used_micro_usd = spend.used_micro_usd + $4, \
                 reserved_tokens = GREATEST(0, spend.reserved_tokens - $5), \
                 reserved_micro_usd = GREATEST(0, spend.reserved_micro_usd - $6)",
                &[
                    &scope,
                    &period,
                    &sql_amount(used.tokens),
                    &sql_amount(used.micro_usd),
                    &sql_amount(release.tokens),
                    &sql_amount(release.micro_usd),
                ],
            )?;
            Ok(())
        })
    }
}

/// A spending counter's row (`counter_row` reads it).
const SPEND_ROW: &str = "SELECT used_tokens, used_micro_usd, reserved_tokens, reserved_micro_usd \
                         FROM spend WHERE scope = $1 AND period = $2";

/// A `spend` row's four amounts as a counter.
fn counter_row(r: &Row) -> Counter {
    let amount = |i: usize| stored_amount(r.get::<_, i64>(i));
    Counter {
        used: Spend {
            tokens: amount(0),
            micro_usd: amount(1),
        },
        reserved: Spend {
            tokens: amount(2),
            micro_usd: amount(3),
        },
    }
}

fn find_session(
    c: &mut impl GenericClient,
    tenant: &str,
    key: &str,
) -> Result<Option<SessionRecord>, StoreError> {
    c.query_opt_cached(
        &format!("SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.tenant = $1 AND s.key = $2"),
        &[&tenant, &key],
    )?
    .map(|r| session_row(&r))
    .transpose()
}

/// Lock the session's row for this transaction: appends to one session, from any number of
/// gateways, take their seq numbers one after another. The session's leaf as the lock found
/// it (the latest committed: a locking read waits for the row's writer, then reads its
/// version); `NoSession` when there is none.
pub(super) fn lock_session(
    tx: &mut Transaction<'_>,
    session: SessionId,
) -> Result<Option<String>, StoreError> {
    tx.query_opt_cached(
        "SELECT leaf FROM sessions WHERE id = $1 FOR UPDATE",
        &[&session],
    )?
    .map(|r| r.get(0))
    .ok_or_else(|| StoreError::NoSession(session.to_string()))
}

/// [`Store::append`] inside the caller's transaction, as SQLite's `append_in`, in two round
/// trips whatever the batch's size: the session's row locked, then every entry inserted after
/// the session's last and the leaf moved, in one statement (a round trip per entry and per
/// check made a turn's commit the gateway's largest cost on PostgreSQL). The numbering reads
/// the entries in the second statement, whose snapshot is taken once the lock is held: a
/// statement that waited for the lock would still see the entries as they were before.
pub(super) fn append_in(
    tx: &mut Transaction<'_>,
    session: SessionId,
    batch: &[NewEntry],
    leaf: Option<&EntryId>,
    expect_leaf: Option<&EntryId>,
    indexing: Indexing,
) -> Result<i64, StoreError> {
    check_leaf(expect_leaf, lock_session(tx, session)?)?;
    let columns = Columns::of(batch)?;
    let new_leaf = new_leaf(leaf, batch);
    if let Some(l) = new_leaf.filter(|l| !columns.id.contains(l)) {
        require_entry(tx, session, l)?;
    }
    let rows = tx.query_cached(
        &format!(
            "WITH base AS ( \
               SELECT COALESCE(MAX(seq), 0)::BIGINT AS seq, COALESCE(MAX(batch), 0)::BIGINT + 1 AS batch \
               FROM entries WHERE session_id = $1), \
             new AS ( \
               INSERT INTO entries (session_id, seq, id, parent, ts, sidechain, kind, body, raw, batch) \
               SELECT $1, base.seq + n.ord, n.id, n.parent, n.ts, n.sidechain, n.kind, n.body, n.raw, \
                      base.batch \
               FROM base, unnest($2::TEXT[], $3::TEXT[], $4::TEXT[], $5::BOOLEAN[], $6::TEXT[], \
                                 $7::TEXT[], $8::BYTEA[]) \
                    WITH ORDINALITY AS n(id, parent, ts, sidechain, kind, body, raw, ord) \
               ON CONFLICT (session_id, id) DO NOTHING RETURNING id), \
             moved AS (UPDATE sessions SET leaf = COALESCE($9, leaf), updated_at = {NOW} \
                       WHERE id = $1) \
             SELECT base.seq, base.batch, new.id FROM base LEFT JOIN new ON TRUE"
        ),
        &[
            &session,
            &columns.id,
            &columns.parent,
            &columns.ts,
            &columns.sidechain,
            &columns.kind,
            &columns.body,
            &columns.raw,
            &new_leaf,
        ],
    )?;
    let Some(first) = rows.first() else {
        return Err(StoreError::NoSession(session.to_string()));
    };
    let (last_seq, batch_no): (i64, i64) = (first.get(0), first.get(1));
    let went_in: Vec<String> = rows.iter().filter_map(|r| r.get(2)).collect();
    let skipped = went_in.len() < batch.len();
    if skipped {
        // The same entries already stored (ids derive from content and parent: a retry
        // racing its original through another gateway) are written once. A different entry
        // under a held id, or one the batch repeats, is refused: the caller's transaction is
        // rolled back, so nothing of the batch stays.
        let went_in: std::collections::HashSet<&str> = went_in.iter().map(String::as_str).collect();
        let mut seen = std::collections::HashSet::new();
        if let Some(id) = columns.id.iter().find(|id| !seen.insert(**id)) {
            return Err(StoreError::DuplicateEntry {
                id: (*id).to_owned(),
            });
        }
        let held: Vec<usize> = (0..batch.len())
            .filter(|&i| !went_in.contains(columns.id[i]))
            .collect();
        let ids: Vec<&str> = held.iter().map(|&i| columns.id[i]).collect();
        let stored: std::collections::HashMap<String, (Option<String>, String)> = tx
            .query_cached(
                "SELECT id, parent, body FROM entries WHERE session_id = $1 AND id = ANY($2)",
                &[&session, &ids],
            )?
            .iter()
            .map(|r| (r.get(0), (r.get(1), r.get(2))))
            .collect();
        for &i in &held {
            let same = stored.get(columns.id[i]).is_some_and(|(parent, body)| {
                crate::contract::same::stands_for(
                    parent.as_deref(),
                    body,
                    columns.parent[i],
                    &batch[i].entry.kind,
                )
            });
            if !same {
                return Err(StoreError::DuplicateEntry {
                    id: columns.id[i].to_owned(),
                });
            }
        }
    }
    // Inline indexing numbers the batch from the session's last entry: with entries skipped
    // the numbers differ, and `history_sync` catches the indexes up instead.
    if !skipped && indexing == Indexing::Inline && indexed_upto(tx, session)? == last_seq {
        let mut indexer = Indexer::new(session);
        for (seq, new) in (last_seq + 1..).zip(batch) {
            let e = &new.entry;
            let parent = e.parent.as_ref().map(|p| p.0.as_str());
            indexer.add(tx, seq, &e.id.0, parent, e.sidechain, &e.kind)?;
        }
    }
    Ok(batch_no)
}

/// A batch as one array per column, for `unnest`.
struct Columns<'a> {
    id: Vec<&'a str>,
    parent: Vec<Option<&'a str>>,
    ts: Vec<Option<&'a str>>,
    sidechain: Vec<bool>,
    kind: Vec<&'static str>,
    body: Vec<String>,
    raw: Vec<Option<&'a [u8]>>,
}

impl<'a> Columns<'a> {
    fn of(batch: &'a [NewEntry]) -> Result<Self, StoreError> {
        let mut c = Columns {
            id: Vec::with_capacity(batch.len()),
            parent: Vec::with_capacity(batch.len()),
            ts: Vec::with_capacity(batch.len()),
            sidechain: Vec::with_capacity(batch.len()),
            kind: Vec::with_capacity(batch.len()),
            body: Vec::with_capacity(batch.len()),
            raw: Vec::with_capacity(batch.len()),
        };
        for new in batch {
            let e = &new.entry;
            c.body.push(encode_kind(e)?);
            c.id.push(&e.id.0);
            c.parent.push(e.parent.as_ref().map(|p| p.0.as_str()));
            c.ts.push(e.timestamp.as_deref());
            c.sidechain.push(e.sidechain);
            c.kind.push(kind_tag(&e.kind));
            c.raw.push(new.raw.as_deref());
        }
        Ok(c)
    }
}

fn require_entry(tx: &mut Transaction<'_>, session: SessionId, id: &str) -> Result<(), StoreError> {
    tx.query_opt_cached(
        "SELECT seq FROM entries WHERE session_id = $1 AND id = $2",
        &[&session, &id],
    )?
    .map(|_| ())
    .ok_or_else(|| StoreError::NoEntry(id.to_owned()))
}

/// [`Store::set_leaf`] inside the caller's transaction: one round trip when the entry exists.
pub(super) fn set_leaf_in(
    tx: &mut Transaction<'_>,
    session: SessionId,
    leaf: &EntryId,
) -> Result<(), StoreError> {
    let moved = tx.execute_cached(
        &format!(
            "UPDATE sessions SET leaf = $2, updated_at = {NOW} WHERE id = $1 \
             AND EXISTS (SELECT 1 FROM entries WHERE session_id = $1 AND id = $2)"
        ),
        &[&session, &leaf.0],
    )?;
    // An entry exists only in its session: nothing moved means no such entry there.
    if moved == 0 {
        return Err(StoreError::NoEntry(leaf.0.clone()));
    }
    Ok(())
}
