//! Importing an agent's session file into the store.

use std::collections::HashSet;

use ctxd_core::model::Session;
use ctxd_store::{NewEntry, SessionRecord, Store};

use crate::{Engine, EngineError};

/// What an import did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Imported {
    pub session: SessionRecord,
    /// Entries appended by this import.
    pub appended: usize,
    /// Entries already in the store (a re-import of a grown file appends only the new ones).
    pub already_present: usize,
}

impl<S: Store + ?Sized> Engine<S> {
    /// Store `session` under `key` for `tenant`: entries not yet stored are appended in one
    /// atomic batch, in file order, and the leaf follows the file's.
    pub fn import_session(
        &self,
        tenant: &str,
        key: &str,
        session: &Session,
    ) -> Result<Imported, EngineError> {
        let record = self.store.open_session(tenant, key, &session.meta)?;
        let existing = self.store.load(record.id)?;
        let known: HashSet<&str> = existing.entries.iter().map(|e| e.id.as_str()).collect();
        let batch: Vec<NewEntry> = session
            .entries
            .iter()
            .filter(|e| !known.contains(e.id.as_str()))
            .cloned()
            .map(NewEntry::new)
            .collect();
        let leaf = session.leaf.clone().or_else(|| {
            ctxd_core::tree::active_branch(session)
                .last()
                .map(|&p| session.entries[p].id.clone())
        });
        if !batch.is_empty() {
            self.store.append(record.id, &batch, leaf.as_ref())?;
        } else if let Some(leaf) = &leaf {
            self.store.set_leaf(record.id, leaf)?;
        }
        let session_record = self
            .store
            .session(tenant, record.id)?
            .ok_or_else(|| EngineError::invalid("the imported session vanished"))?;
        Ok(Imported {
            appended: batch.len(),
            already_present: session.entries.len() - batch.len(),
            session: session_record,
        })
    }
}
