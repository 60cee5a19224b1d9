//! Sessions the gateway is serving: one slot per (tenant, session key) holding the indexed log
//! behind an async lock, so requests of one session are planned one at a time while different
//! sessions proceed in parallel. Least recently used slots are dropped beyond a bound; a dropped
//! or stale slot is reloaded from the store after the writer has drained.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ctxd_engine::Engine;
use ctxd_store::Backend;

use crate::request::PrevRequest;

/// The share of the session cache's byte budget that previous request bodies may take over
/// all sessions (beyond it a session's next request is split from scratch: slower, never
/// wrong).
pub const RETAINED_SHARE: usize = 4;

/// A kept previous request, counted against the retained bodies' budget while it lives.
struct Retained {
    prev: Arc<PrevRequest>,
    counter: Arc<AtomicUsize>,
}

impl Drop for Retained {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.prev.weight(), Ordering::AcqRel);
    }
}

/// A session's record and indexed log, once loaded: the session view the engine runs a turn
/// over.
pub type Loaded = ctxd_engine::turn::SessionView;

/// One session's slot.
pub struct Slot {
    pub state: tokio::sync::Mutex<Option<Loaded>>,
    /// Set by the writer when a write of this session failed: reload before use.
    pub stale: Arc<AtomicBool>,
    /// Responses whose outcome is being written into `state`; the session's next request
    /// waits for them, so it always plans against the complete log.
    pub recording: AtomicUsize,
    pub settled: tokio::sync::Notify,
    /// Distillation passes started at this session's turn ends and not yet over; its next
    /// request waits for them a bounded time (`distill-wait`), then goes without their edits.
    pub distilling: AtomicUsize,
    pub distilled: tokio::sync::Notify,
    /// The session's distillation passes: queued, running, answers waiting.
    passes: Mutex<crate::distill::SlotPasses>,
    /// The session's latest request, for splitting the next one ([`PrevRequest`]).
    last_request: Mutex<Option<Retained>>,
    last_used: AtomicU64,
    /// What the loaded log holds in memory, as last weighed ([`Sessions::weigh`]).
    bytes: AtomicUsize,
}

impl Slot {
    fn new(now: u64) -> Self {
        Slot {
            state: tokio::sync::Mutex::new(None),
            stale: Arc::new(AtomicBool::new(false)),
            recording: AtomicUsize::new(0),
            settled: tokio::sync::Notify::new(),
            distilling: AtomicUsize::new(0),
            distilled: tokio::sync::Notify::new(),
            passes: Mutex::new(crate::distill::SlotPasses::default()),
            last_request: Mutex::new(None),
            last_used: AtomicU64::new(now),
            bytes: AtomicUsize::new(0),
        }
    }

    /// Wait (up to `limit`) until no response of this session is still being recorded.
    pub async fn wait_settled(&self, limit: std::time::Duration) {
        if !wait_zero(&self.recording, &self.settled, limit).await {
            tracing::warn!("a response is still being recorded; planning without it");
        }
    }

    /// Wait (up to `limit`) until no distillation pass of this session is running. `false`
    /// when one still is (the request goes without its edits).
    pub async fn wait_distilled(&self, limit: std::time::Duration) -> bool {
        wait_zero(&self.distilling, &self.distilled, limit).await
    }

    /// The session's distillation passes (a short lock: flags and a hand-over).
    pub fn passes(&self) -> std::sync::MutexGuard<'_, crate::distill::SlotPasses> {
        self.passes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session's latest request, if kept.
    pub fn last_request(&self) -> Option<Arc<PrevRequest>> {
        let kept = self.last_request.lock().unwrap_or_else(|p| p.into_inner());
        kept.as_ref().map(|r| r.prev.clone())
    }

    /// Bytes the session holds in memory with `loaded` as its log: the log and the
    /// distillation's copy of its branch (what the cache's byte budget charges).
    pub fn held_bytes(&self, loaded: &Loaded) -> usize {
        loaded.log.approx_bytes() + self.passes().mirror_bytes()
    }

    /// Whether the loaded copy must be dropped and read again.
    pub fn take_stale(&self) -> bool {
        self.stale.swap(false, Ordering::AcqRel)
    }
}

/// Wait (up to `limit`) until `counter` is zero, woken by `notify`; whether it is.
async fn wait_zero(
    counter: &AtomicUsize,
    notify: &tokio::sync::Notify,
    limit: std::time::Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if counter.load(Ordering::Acquire) == 0 {
            return true;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return counter.load(Ordering::Acquire) == 0;
        }
    }
}

/// On a store other gateways write too: bring the cached `loaded` up to the store's log.
/// Another gateway's appends come after everything this cache holds (the client waited for
/// each answer, which was committed before it ended), so they are read as the store's tail
/// and pushed in order, as a fresh load would. `false` when the cache cannot be extended
/// (the store's log forked from it: requests of one session at two gateways at once) or the
/// store could not be read: the caller reloads the session whole.
///
/// Entries this gateway queued and has not committed yet make the cache longer than the
/// store, never unknown to it: that is current.
pub(crate) async fn catch_up(engine: &Arc<Engine<dyn Backend>>, loaded: &mut Loaded) -> bool {
    let session = loaded.record.id;
    let len = loaded.log.len() as u64;
    let reader = engine.clone();
    let (head, tail) =
        match tokio::task::spawn_blocking(move || reader.store().follow(session, len)).await {
            Ok(Ok(read)) => read,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the session's head; reloading it");
                return false;
            }
            Err(_) => return false,
        };
    if head.entries <= len {
        return head
            .last
            .as_ref()
            .is_none_or(|id| loaded.log.position(id).is_some());
    }
    // The store has more: its tail starts at our last entry, which must be the store's
    // `len`th.
    let ours = loaded
        .log
        .entry(loaded.log.len().wrapping_sub(1))
        .map(|e| e.id.clone());
    let mut tail = tail.into_iter();
    if len > 0 && tail.next().map(|e| e.id) != ours {
        return false;
    }
    let mut added = 0u64;
    for entry in tail {
        if loaded.log.position(&entry.id).is_some() {
            return false;
        }
        loaded.log.push(entry);
        added += 1;
    }
    if let Some(pos) = head.leaf.as_ref().and_then(|id| loaded.log.position(id)) {
        loaded.log.set_leaf(pos);
    }
    metrics::counter!("ctxd_session_catch_up_entries_total").increment(added);
    true
}

/// The slots, keyed by tenant and session key. Bounded twice: at most `capacity` sessions,
/// and what they hold (loaded logs, branch copies, kept requests) within `byte_budget` all in
/// (a few large sessions weigh more than many small ones); the least recently used slot nobody
/// holds goes first.
pub struct Sessions {
    slots: Mutex<HashMap<(String, String), Arc<Slot>>>,
    clock: AtomicU64,
    capacity: usize,
    byte_budget: usize,
    /// The slots' bytes as last weighed, summed (kept as they change: no walk per request).
    cached: AtomicUsize,
    /// Bytes of previous request bodies kept (at most `byte_budget / RETAINED_SHARE`).
    retained: Arc<AtomicUsize>,
}

impl Sessions {
    pub fn new(capacity: usize, byte_budget: usize) -> Self {
        Sessions {
            slots: Mutex::new(HashMap::new()),
            clock: AtomicU64::new(0),
            capacity: capacity.max(1),
            byte_budget,
            cached: AtomicUsize::new(0),
            retained: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Record what `slot`'s loaded log holds now (after a request planned against it).
    pub fn weigh(&self, slot: &Slot, bytes: usize) {
        // Under the slots' lock: an eviction subtracting this slot's bytes sees either weight.
        let _slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let old = slot.bytes.swap(bytes, Ordering::Relaxed);
        self.cached.fetch_add(bytes, Ordering::Relaxed);
        self.cached.fetch_sub(old, Ordering::Relaxed);
    }

    /// Bytes the loaded logs of every cached session hold, as last weighed.
    pub fn cached_bytes(&self) -> usize {
        self.cached.load(Ordering::Relaxed)
    }

    /// Keep `prev` as `slot`'s latest request, within the bytes budget.
    pub fn remember(&self, slot: &Slot, prev: PrevRequest) {
        let mut kept = slot.last_request.lock().unwrap_or_else(|p| p.into_inner());
        *kept = None; // the old one no longer counts
        let size = prev.weight();
        let before = self.retained.fetch_add(size, Ordering::AcqRel);
        if before + size > self.byte_budget / RETAINED_SHARE {
            self.retained.fetch_sub(size, Ordering::AcqRel);
            return;
        }
        *kept = Some(Retained {
            prev: Arc::new(prev),
            counter: self.retained.clone(),
        });
    }

    /// Bytes of previous request bodies kept now.
    pub fn retained_bytes(&self) -> usize {
        self.retained.load(Ordering::Acquire)
    }

    /// The slot of `(tenant, key)`, created empty when new.
    pub fn slot(&self, tenant: &str, key: &str) -> Arc<Slot> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slot = match slots.get(&(tenant.to_owned(), key.to_owned())) {
            Some(slot) => {
                slot.last_used.store(now, Ordering::Relaxed);
                slot.clone()
            }
            None => {
                let slot = Arc::new(Slot::new(now));
                slots.insert((tenant.to_owned(), key.to_owned()), slot.clone());
                slot
            }
        };
        self.evict(&mut slots);
        slot
    }

    /// Drop least recently used slots nobody holds while over the count or the byte budget.
    fn evict(&self, slots: &mut HashMap<(String, String), Arc<Slot>>) {
        while slots.len() > self.capacity
            || self.cached_bytes() + self.retained_bytes() > self.byte_budget
        {
            let victim = slots
                .iter()
                .filter(|(_, s)| Arc::strong_count(s) == 1)
                .min_by_key(|(_, s)| s.last_used.load(Ordering::Relaxed))
                .map(|(k, _)| k.clone());
            let Some(k) = victim else {
                return;
            };
            if let Some(gone) = slots.remove(&k) {
                self.cached
                    .fetch_sub(gone.bytes.load(Ordering::Relaxed), Ordering::Relaxed);
                metrics::counter!("ctxd_sessions_evicted_total").increment(1);
            }
        }
        metrics::gauge!("ctxd_session_cache_bytes")
            .set((self.cached_bytes() + self.retained_bytes()) as f64);
    }

    pub fn len(&self) -> usize {
        self.slots.lock().map(|s| s.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_used_free_slots_are_dropped() {
        let sessions = Sessions::new(2, usize::MAX);
        let a = sessions.slot("t", "a");
        drop(sessions.slot("t", "b"));
        let _c = sessions.slot("t", "c");
        assert_eq!(sessions.len(), 2);
        // `a` is held, so `b` went.
        assert!(Arc::ptr_eq(&a, &sessions.slot("t", "a")));
        let tenants_apart = sessions.slot("u", "a");
        assert!(!Arc::ptr_eq(&a, &tenants_apart));
    }

    #[test]
    fn the_cache_stays_within_its_byte_budget() {
        let sessions = Sessions::new(100, 1_000);
        let a = sessions.slot("t", "a");
        sessions.weigh(&a, 600);
        drop(a);
        let b = sessions.slot("t", "b");
        sessions.weigh(&b, 300);
        drop(b);
        assert_eq!(sessions.cached_bytes(), 900);
        // `c` grows past the budget: the least recently used free slot (`a`) goes.
        let c = sessions.slot("t", "c");
        sessions.weigh(&c, 400);
        drop(sessions.slot("t", "c"));
        assert_eq!(sessions.len(), 2);
        assert_eq!(sessions.cached_bytes(), 700);
        // A held slot is never dropped, even over the budget.
        sessions.weigh(&c, 5_000);
        drop(sessions.slot("t", "b"));
        assert!(Arc::ptr_eq(&c, &sessions.slot("t", "c")));
        assert_eq!(sessions.len(), 1, "b went, c is held");
    }

    #[test]
    fn kept_requests_are_counted_until_replaced_or_dropped() {
        let sessions = Sessions::new(4, usize::MAX);
        let prev = |body: &'static [u8]| PrevRequest {
            body: bytes::Bytes::from_static(body),
            parsed: crate::request::ParsedRequest::parse(crate::api::Api::Chat, body).unwrap(),
        };
        let a = sessions.slot("t", "a");
        let first = prev(br#"{"messages":[]}"#);
        let weight = first.weight();
        assert!(weight > first.body.len());
        sessions.remember(&a, first);
        assert_eq!(sessions.retained_bytes(), weight);
        let second = prev(br#"{"messages":[1]}"#);
        let weight = second.weight();
        sessions.remember(&a, second);
        assert_eq!(
            sessions.retained_bytes(),
            weight,
            "the old one no longer counts"
        );
        assert!(a.last_request().is_some());
        drop(a);
        drop(sessions.slot("t", "b"));
        drop(sessions.slot("t", "c"));
        drop(sessions.slot("t", "d"));
        drop(sessions.slot("t", "e")); // evicts `a`, the least recently used
        assert_eq!(sessions.retained_bytes(), 0);
    }

    #[test]
    fn kept_requests_count_toward_the_byte_budget() {
        let body: &'static [u8] = br#"{"messages":[1]}"#;
        let prev = PrevRequest {
            body: bytes::Bytes::from_static(body),
            parsed: crate::request::ParsedRequest::parse(crate::api::Api::Chat, body).unwrap(),
        };
        let kept = prev.weight();
        // The budget holds `a`'s log and its kept request, with room for 100 more bytes.
        let sessions = Sessions::new(100, 4 * kept + 100);
        let a = sessions.slot("t", "a");
        sessions.weigh(&a, 3 * kept);
        sessions.remember(&a, prev);
        drop(a);
        let b = sessions.slot("t", "b");
        sessions.weigh(&b, 100);
        drop(sessions.slot("t", "b"));
        assert_eq!(
            sessions.len(),
            2,
            "within the budget, with the kept request"
        );
        sessions.weigh(&b, 101);
        drop(sessions.slot("t", "b"));
        assert_eq!(
            sessions.len(),
            1,
            "a byte over: `a` goes, its kept request with it"
        );
        assert_eq!(sessions.retained_bytes(), 0);
    }
}
