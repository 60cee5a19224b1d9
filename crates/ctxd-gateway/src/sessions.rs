//! Sessions the gateway is serving: one slot per (tenant, session key) holding the indexed log
//! behind an async lock, so requests of one session are planned one at a time while different
//! sessions proceed in parallel. Least recently used slots are dropped beyond a bound; a dropped
//! or stale slot is reloaded from the store after the writer has drained.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ctxd_store::SessionRecord;

use crate::log::SessionLog;

/// A session's record and indexed log, once loaded.
pub struct Loaded {
    pub record: SessionRecord,
    pub log: SessionLog,
}

/// One session's slot.
pub struct Slot {
    pub state: tokio::sync::Mutex<Option<Loaded>>,
    /// Set by the writer when a write of this session failed: reload before use.
    pub stale: Arc<AtomicBool>,
    /// Responses whose outcome is being written into `state`; the session's next request
    /// waits for them, so it always plans against the complete log.
    pub recording: AtomicUsize,
    pub settled: tokio::sync::Notify,
    last_used: AtomicU64,
}

impl Slot {
    fn new(now: u64) -> Self {
        Slot {
            state: tokio::sync::Mutex::new(None),
            stale: Arc::new(AtomicBool::new(false)),
            recording: AtomicUsize::new(0),
            settled: tokio::sync::Notify::new(),
            last_used: AtomicU64::new(now),
        }
    }

    /// Wait (up to `limit`) until no response of this session is still being recorded.
    pub async fn wait_settled(&self, limit: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.recording.load(Ordering::Acquire) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                tracing::warn!("a response is still being recorded; planning without it");
                return;
            }
        }
    }

    /// Whether the loaded copy must be dropped and read again.
    pub fn take_stale(&self) -> bool {
        self.stale.swap(false, Ordering::AcqRel)
    }
}

/// The slots, keyed by tenant and session key.
pub struct Sessions {
    slots: Mutex<HashMap<(String, String), Arc<Slot>>>,
    clock: AtomicU64,
    capacity: usize,
}

impl Sessions {
    pub fn new(capacity: usize) -> Self {
        Sessions {
            slots: Mutex::new(HashMap::new()),
            clock: AtomicU64::new(0),
            capacity: capacity.max(1),
        }
    }

    /// The slot of `(tenant, key)`, created empty when new.
    pub fn slot(&self, tenant: &str, key: &str) -> Arc<Slot> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = slots.get(&(tenant.to_owned(), key.to_owned())) {
            slot.last_used.store(now, Ordering::Relaxed);
            return slot.clone();
        }
        if slots.len() >= self.capacity {
            // Drop the least recently used slot nobody else holds.
            let victim = slots
                .iter()
                .filter(|(_, s)| Arc::strong_count(s) == 1)
                .min_by_key(|(_, s)| s.last_used.load(Ordering::Relaxed))
                .map(|(k, _)| k.clone());
            if let Some(k) = victim {
                slots.remove(&k);
            }
        }
        let slot = Arc::new(Slot::new(now));
        slots.insert((tenant.to_owned(), key.to_owned()), slot.clone());
        slot
    }

    pub fn len(&self) -> usize {
        self.slots.lock().map(|s| s.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_used_free_slots_are_dropped() {
        let sessions = Sessions::new(2);
        let a = sessions.slot("t", "a");
        drop(sessions.slot("t", "b"));
        let _c = sessions.slot("t", "c");
        assert_eq!(sessions.len(), 2);
        // `a` is held, so `b` went.
        assert!(Arc::ptr_eq(&a, &sessions.slot("t", "a")));
        let tenants_apart = sessions.slot("u", "a");
        assert!(!Arc::ptr_eq(&a, &tenants_apart));
    }
}
