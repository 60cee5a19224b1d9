//! [`Backend`] on PostgreSQL: several gateways on one database, sharing one pool per process.

use ctxd_core::model::Entry;

use super::PgStore;
use crate::{Backend, GroupResult, GroupStore, GroupWrite, Head, SessionId, StoreError, StoreKind};

impl GroupStore for PgStore {
    fn write_group(&self, writes: &[GroupWrite<'_>]) -> GroupResult {
        PgStore::write_group(self, writes)
    }

    fn try_write_group(&self, writes: &[GroupWrite<'_>]) -> Option<GroupResult> {
        PgStore::try_write_group(self, writes)
    }

    fn index_pending(&self, session: SessionId, limit: u64) -> Result<(u64, bool), StoreError> {
        PgStore::index_pending(self, session, limit)
    }
}

impl Backend for PgStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Postgres
    }

    fn location(&self) -> String {
        PgStore::location(self).to_owned()
    }

    /// The same pool: a long read takes one connection thread and leaves the others.
    fn reader(&self) -> Result<Box<dyn Backend>, StoreError> {
        Ok(Box::new(self.clone()))
    }

    fn integrity_check(&self) -> Result<String, StoreError> {
        PgStore::integrity_check(self)
    }

    /// Several gateways share one database.
    fn shared(&self) -> bool {
        true
    }

    fn follow(&self, session: SessionId, known: u64) -> Result<(Head, Vec<Entry>), StoreError> {
        super::follow(self, session, known)
    }
}
