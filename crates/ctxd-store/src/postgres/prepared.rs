//! Statements prepared once per connection. The driver prepares a statement given as text on
//! every call, a round trip to the server before the one that runs it; a turn's append runs
//! half a dozen statements, so on the write path that doubled the round trips.
//!
//! The cache is thread-local because each connection thread of [`super::pool::Pool`] owns
//! exactly one client, and a statement belongs to the connection that prepared it; the pool
//! empties it whenever its thread's client is replaced ([`forget_all`]). Only code running in
//! a pool job may use these methods. Searches are not cached: their SQL embeds data, or their
//! best plan depends on the words searched (a kept statement gets a generic plan after a few
//! runs), so they go through the driver's own methods and are planned with their values.

use std::cell::RefCell;
use std::collections::HashMap;

use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{GenericClient, Row, Statement};

use super::pg;
use crate::StoreError;

/// More distinct statements than ctxd has: a cache this full holds SQL that varies, and is
/// emptied rather than grown.
const CAPACITY: usize = 256;

thread_local! {
    static STATEMENTS: RefCell<HashMap<String, Statement>> = RefCell::new(HashMap::new());
}

/// Forget this thread's statements: its connection was replaced (they died with the old one).
pub(crate) fn forget_all() {
    STATEMENTS.with(|s| s.borrow_mut().clear());
}

/// The driver's query methods, with the statement prepared at most once per connection.
pub(crate) trait Prepared: GenericClient {
    /// `sql` prepared on this thread's connection (from the cache, or now).
    fn statement(&mut self, sql: &str) -> Result<Statement, StoreError> {
        if let Some(found) = STATEMENTS.with(|s| s.borrow().get(sql).cloned()) {
            return Ok(found);
        }
        let statement = self.prepare(sql).map_err(pg)?;
        STATEMENTS.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() >= CAPACITY {
                s.clear();
            }
            s.insert(sql.to_owned(), statement.clone());
        });
        Ok(statement)
    }

    fn query_cached(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let statement = self.statement(sql)?;
        checked(self.query(&statement, params))
    }

    fn query_one_cached(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, StoreError> {
        let statement = self.statement(sql)?;
        checked(self.query_one(&statement, params))
    }

    fn query_opt_cached(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        let statement = self.statement(sql)?;
        checked(self.query_opt(&statement, params))
    }

    fn execute_cached(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let statement = self.statement(sql)?;
        checked(self.execute(&statement, params))
    }
}

impl<C: GenericClient> Prepared for C {}

/// `result` as a store error; an error saying the cached statements no longer fit the server
/// (a statement it does not know, a plan a schema change made stale) empties the cache, so the
/// next call prepares afresh.
pub(crate) fn checked<T>(result: Result<T, postgres::Error>) -> Result<T, StoreError> {
    result.map_err(|e| {
        if is_stale(&e) {
            forget_all();
        }
        pg(e)
    })
}

fn is_stale(e: &postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::INVALID_SQL_STATEMENT_NAME || *c == SqlState::FEATURE_NOT_SUPPORTED
    )
}
