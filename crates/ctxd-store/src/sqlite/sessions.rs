//! Sessions and entries.

use rusqlite::{params, OptionalExtension, Row};

use ctxd_core::model::{Entry, EntryId, Session, SessionMeta};
use ctxd_core::spend::{Counter, Spend};

use super::history::index::Rows as IndexRows;
use super::{SqliteStore, NOW};
use crate::contract::entry::{
    check_leaf, decode_entry, decode_meta, encode_kind, encode_meta, kind_tag, new_leaf,
    sql_amount, stored_amount, Indexing,
};
use crate::contract::index::Indexer;
use crate::{NewEntry, SessionId, SessionRecord, Store, StoreError};

const SESSION_COLUMNS: &str = "s.id, s.tenant, s.key, s.meta, s.created_at, s.updated_at, s.leaf, \
     (SELECT COUNT(*) FROM entries e WHERE e.session_id = s.id)";

fn session_row(row: &Row<'_>) -> rusqlite::Result<(SessionRecord, String)> {
    let meta: String = row.get(3)?;
    Ok((
        SessionRecord {
            id: row.get(0)?,
            tenant: row.get(1)?,
            key: row.get(2)?,
            meta: SessionMeta::default(),
            created_at: row.get(4)?,
            updated_at: row.get(5)?,
            leaf: row.get::<_, Option<String>>(6)?.map(EntryId),
            entry_count: row.get::<_, i64>(7)? as u64,
        },
        meta,
    ))
}

fn with_meta((mut record, meta): (SessionRecord, String)) -> Result<SessionRecord, StoreError> {
    record.meta = decode_meta(record.id, &meta)?;
    Ok(record)
}

impl Store for SqliteStore {
    fn open_session(
        &self,
        tenant: &str,
        key: &str,
        meta: &SessionMeta,
    ) -> Result<SessionRecord, StoreError> {
        let meta_json = encode_meta(key, meta)?;
        {
            let conn = self.conn();
            conn.execute(
                &format!(
                    "INSERT INTO sessions (tenant, key, agent, meta, created_at, updated_at) \
                     VALUES (?1, ?2, ?3, ?4, {NOW}, {NOW}) ON CONFLICT (tenant, key) DO NOTHING"
                ),
                params![tenant, key, meta.agent.map(|a| a.as_str()), meta_json],
            )?;
        }
        self.find_session(tenant, key)?
            .ok_or_else(|| StoreError::NoSession(key.to_owned()))
    }

    fn find_session(&self, tenant: &str, key: &str) -> Result<Option<SessionRecord>, StoreError> {
        let conn = self.conn();
        let row = conn
            .query_row(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.tenant = ?1 AND s.key = ?2"
                ),
                params![tenant, key],
                session_row,
            )
            .optional()?;
        row.map(with_meta).transpose()
    }

    fn session(&self, tenant: &str, id: SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let conn = self.conn();
        let row = conn
            .query_row(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.tenant = ?1 AND s.id = ?2"
                ),
                params![tenant, id],
                session_row,
            )
            .optional()?;
        row.map(with_meta).transpose()
    }

    fn list_sessions(&self, tenant: &str) -> Result<Vec<SessionRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.tenant = ?1 \
             ORDER BY s.updated_at DESC, s.id DESC"
        ))?;
        let rows = stmt
            .query_map(params![tenant], session_row)?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter().map(with_meta).collect()
    }

    fn append(
        &self,
        session: SessionId,
        batch: &[NewEntry],
        leaf: Option<&EntryId>,
    ) -> Result<i64, StoreError> {
        let mut conn = self.conn();
        let tx = super::write_transaction(&mut conn)?;
        let batch_no = append_in(&tx, session, batch, leaf, None, Indexing::Inline)?;
        tx.commit()?;
        Ok(batch_no)
    }

    fn set_leaf(&self, session: SessionId, leaf: &EntryId) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = super::write_transaction(&mut conn)?;
        set_leaf_in(&tx, session, leaf)?;
        tx.commit()?;
        Ok(())
    }

    fn load(&self, session: SessionId) -> Result<Session, StoreError> {
        let conn = self.conn();
        let (meta, leaf): (String, Option<String>) = conn
            .query_row(
                "SELECT meta, leaf FROM sessions WHERE id = ?1",
                params![session],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?
            .ok_or_else(|| StoreError::NoSession(session.to_string()))?;
        let meta = decode_meta(session, &meta)?;
        // Seq numbers start at 1: the tail after 0 is every entry.
        let entries = tail(&conn, session, 0)?;
        Ok(Session {
            meta,
            entries,
            leaf: leaf.map(EntryId),
        })
    }

    fn entry(&self, session: SessionId, id: &EntryId) -> Result<Option<Entry>, StoreError> {
        let conn = self.conn();
        let row = conn
            .query_row(
                "SELECT id, parent, timestamp, sidechain, body FROM entries WHERE session_id = ?1 AND id = ?2",
                params![session, id.0],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get::<_, String>(4)?)),
            )
            .optional()?;
        row.map(|(id, parent, ts, side, body)| decode_entry(id, parent, ts, side, &body))
            .transpose()
    }

    fn raw(&self, session: SessionId, id: &EntryId) -> Result<Option<Vec<u8>>, StoreError> {
        let conn = self.conn();
        let raw: Option<Option<Vec<u8>>> = conn
            .query_row(
                "SELECT raw FROM entries WHERE session_id = ?1 AND id = ?2",
                params![session, id.0],
                |r| r.get(0),
            )
            .optional()?;
        Ok(raw.flatten())
    }

    fn tenants(&self) -> Result<Vec<String>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT DISTINCT tenant FROM sessions ORDER BY tenant")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn setting_or_insert(&self, key: &str, value: &[u8]) -> Result<Vec<u8>, StoreError> {
        let mut conn = self.conn();
        let tx = super::write_transaction(&mut conn)?;
        tx.execute(
            "INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
            params![key, value],
        )?;
        let stored: Vec<u8> = tx.query_row(
            "SELECT value FROM settings WHERE key = ?1",
            params![key],
            |r| r.get(0),
        )?;
        tx.commit()?;
        Ok(stored)
    }

    fn put_setting(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = super::write_transaction(&mut conn)?;
        tx.execute(
            "INSERT INTO settings (key, value) VALUES (?1, ?2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn settings_with_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT key, value FROM settings WHERE substr(key, 1, length(?1)) = ?1 ORDER BY key",
        )?;
        let rows = stmt.query_map(params![prefix], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn spend(&self, scope: &str, period: &str) -> Result<Counter, StoreError> {
        let conn = self.conn();
        let row = conn
            .query_row(SPEND_ROW, params![scope, period], counter_row)
            .optional()?;
        Ok(row.unwrap_or_default())
    }

    fn spend_reserve(
        &self,
        scope: &str,
        period: &str,
        amount: Spend,
        bound: Spend,
    ) -> Result<(bool, Counter), StoreError> {
        let mut conn = self.conn();
        let tx = super::write_transaction(&mut conn)?;
        tx.execute(
            "INSERT INTO spend (scope, period) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
            params![scope, period],
        )?;
        let reserved = tx
            .query_row(
                "UPDATE spend SET reserved_tokens = reserved_tokens + ?3, \
                 reserved_micro_usd = reserved_micro_usd + ?4 \
                 WHERE scope = ?1 AND period = ?2 \
                 AND used_tokens + reserved_tokens < ?5 \
                 AND used_micro_usd + reserved_micro_usd < ?6 \
                 RETURNING used_tokens, used_micro_usd, reserved_tokens, reserved_micro_usd",
                params![
                    scope,
                    period,
                    sql_amount(amount.tokens),
                    sql_amount(amount.micro_usd),
                    sql_amount(bound.tokens),
                    sql_amount(bound.micro_usd)
                ],
                counter_row,
            )
            .optional()?;
        let out = match reserved {
            Some(c) => (true, c),
            None => (
                false,
                tx.query_row(SPEND_ROW, params![scope, period], counter_row)?,
            ),
        };
        tx.commit()?;
        Ok(out)
    }

    fn spend_settle(
        &self,
        scope: &str,
        period: &str,
        used: Spend,
        release: Spend,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = super::write_transaction(&mut conn)?;
        tx.execute(
            "INSERT INTO spend (scope, period) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
            params![scope, period],
        )?;
        tx.execute(
            "UPDATE spend SET used_tokens = used_tokens + ?3, \
             used_micro_usd = used_micro_usd + ?4, \
             reserved_tokens = MAX(0, reserved_tokens - ?5), \
             reserved_micro_usd = MAX(0, reserved_micro_usd - ?6) \
             WHERE scope = ?1 AND period = ?2",
            params![
                scope,
                period,
                sql_amount(used.tokens),
                sql_amount(used.micro_usd),
                sql_amount(release.tokens),
                sql_amount(release.micro_usd)
            ],
        )?;
        tx.commit()?;
        Ok(())
    }
}

/// [`Store::append`] inside the caller's transaction (or savepoint); with `expect_leaf`, only
/// while the session's leaf is that entry ([`crate::GroupWrite::Append`]).
pub(crate) fn append_in(
    conn: &rusqlite::Connection,
    session: SessionId,
    batch: &[NewEntry],
    leaf: Option<&EntryId>,
    expect_leaf: Option<&EntryId>,
    indexing: Indexing,
) -> Result<i64, StoreError> {
    // One statement (this runs before every response the gateway acknowledges): the leaf, and
    // two index probes (`(session_id, seq)`, `entries_batch`); reading `batch` from the last
    // row itself would walk the overflow pages of its `body` and `raw` first.
    let found: Option<(Option<String>, i64, i64)> = conn
        .prepare_cached(
            "SELECT leaf, \
                    COALESCE((SELECT MAX(seq) FROM entries WHERE session_id = ?1), 0), \
                    COALESCE((SELECT MAX(batch) FROM entries WHERE session_id = ?1), 0) + 1 \
             FROM sessions WHERE id = ?1",
        )?
        .query_row(params![session], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((current, mut seq, batch_no)) = found else {
        return Err(StoreError::NoSession(session.to_string()));
    };
    check_leaf(expect_leaf, current)?;
    // The indexes follow in the same transaction when asked and current (not behind: a
    // session stored by an older build, or appended with `Indexing::Deferred`); otherwise
    // `history_sync` catches them up later.
    let index_current =
        indexing == Indexing::Inline && super::history::index::indexed_upto(conn, session)? == seq;
    {
        let mut indexer = Indexer::new(session);
        let mut insert = conn.prepare_cached(
                "INSERT INTO entries (session_id, seq, id, parent, timestamp, sidechain, kind, body, raw, batch) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?;
        for (i, new) in batch.iter().enumerate() {
            seq += 1;
            let e = &new.entry;
            let body = encode_kind(e)?;
            let result = insert.execute(params![
                session,
                seq,
                e.id.0,
                e.parent.as_ref().map(|p| p.0.as_str()),
                e.timestamp,
                e.sidechain,
                kind_tag(&e.kind),
                body,
                new.raw,
                batch_no,
            ]);
            match result {
                Err(rusqlite::Error::SqliteFailure(f, _))
                    if f.code == rusqlite::ErrorCode::ConstraintViolation =>
                {
                    // The same entry already stored (ids derive from content and parent: a
                    // retry racing its original through another writer) is written once; a
                    // different entry under the same id, or one the batch repeats, is refused.
                    let repeated = batch[..i].iter().any(|n| n.entry.id == e.id);
                    if repeated || !stored_as(conn, session, e)? {
                        return Err(StoreError::DuplicateEntry { id: e.id.0.clone() });
                    }
                    seq -= 1;
                    continue;
                }
                other => other?,
            };
            if index_current {
                indexer.add(
                    &mut IndexRows(conn),
                    seq,
                    &e.id.0,
                    e.parent.as_ref().map(|p| p.0.as_str()),
                    e.sidechain,
                    &e.kind,
                )?;
            }
        }
    }
    // A leaf named by the caller must exist; the batch's last entry was just inserted.
    if let Some(l) = leaf {
        let known: Option<i64> = conn
            .prepare_cached("SELECT seq FROM entries WHERE session_id = ?1 AND id = ?2")?
            .query_row(params![session, l.0], |r| r.get(0))
            .optional()?;
        if known.is_none() {
            return Err(StoreError::NoEntry(l.0.clone()));
        }
    }
    let new_leaf = new_leaf(leaf, batch);
    conn.prepare_cached(&format!(
        "UPDATE sessions SET leaf = COALESCE(?2, leaf), updated_at = {NOW} WHERE id = ?1"
    ))?
    .execute(params![session, new_leaf])?;
    Ok(batch_no)
}

/// Whether the session holds `entry` already (`crate::contract::same`).
fn stored_as(
    conn: &rusqlite::Connection,
    session: SessionId,
    entry: &ctxd_core::model::Entry,
) -> Result<bool, StoreError> {
    let found: Option<(Option<String>, String)> = conn
        .prepare_cached("SELECT parent, body FROM entries WHERE session_id = ?1 AND id = ?2")?
        .query_row(params![session, entry.id.0], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(found.is_some_and(|(parent, stored)| {
        crate::contract::same::stands_for(
            parent.as_deref(),
            &stored,
            entry.parent.as_ref().map(|p| p.0.as_str()),
            &entry.kind,
        )
    }))
}

/// [`Store::set_leaf`] inside the caller's transaction (or savepoint).
pub(crate) fn set_leaf_in(
    conn: &rusqlite::Connection,
    session: SessionId,
    leaf: &EntryId,
) -> Result<(), StoreError> {
    let known: Option<i64> = conn
        .prepare_cached("SELECT seq FROM entries WHERE session_id = ?1 AND id = ?2")?
        .query_row(params![session, leaf.0], |r| r.get(0))
        .optional()?;
    if known.is_none() {
        return Err(StoreError::NoEntry(leaf.0.clone()));
    }
    conn.prepare_cached(&format!(
        "UPDATE sessions SET leaf = ?2, updated_at = {NOW} WHERE id = ?1"
    ))?
    .execute(params![session, leaf.0])?;
    Ok(())
}

/// The session's entries with `seq` above `after`, in order.
pub(crate) fn tail(
    conn: &rusqlite::Connection,
    session: SessionId,
    after: u64,
) -> Result<Vec<Entry>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, parent, timestamp, sidechain, body FROM entries \
         WHERE session_id = ?1 AND seq > ?2 ORDER BY seq",
    )?;
    let mut rows = stmt.query(params![session, i64::try_from(after).unwrap_or(i64::MAX)])?;
    let mut entries = Vec::new();
    while let Some(r) = rows.next()? {
        let body: String = r.get(4)?;
        entries.push(decode_entry(
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            &body,
        )?);
    }
    Ok(entries)
}

/// A spending counter's row (`counter_row` reads it).
const SPEND_ROW: &str = "SELECT used_tokens, used_micro_usd, reserved_tokens, reserved_micro_usd \
                         FROM spend WHERE scope = ?1 AND period = ?2";

/// A `spend` row's four amounts as a counter.
fn counter_row(r: &Row) -> rusqlite::Result<Counter> {
    let amount = |i: usize| r.get::<_, i64>(i).map(stored_amount);
    Ok(Counter {
        used: Spend {
            tokens: amount(0)?,
            micro_usd: amount(1)?,
        },
        reserved: Spend {
            tokens: amount(2)?,
            micro_usd: amount(3)?,
        },
    })
}
