//! Token counts of whole texts, remembered per session between the dashboard's builds: a live
//! session's page is rebuilt as it grows (once per refresh interval), and a build then counts
//! only the new texts (a page also builds two reports of the same texts: the upstream one and
//! the client's).
//! The counts are the session's own counter's (`ctxd_tokens::for_session`), so the reports
//! are exactly `ctxd report`'s; a session whose tokenizer changes starts a new memo.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use ctxd_core::model::Session;
use ctxd_core::tokens::TokenCounter;
use ctxd_store::SessionId;
use ctxd_tokens::{CachingCounter, Tokenizer};

/// Texts shorter than this are counted directly (the piece memo makes them cheap already).
const MIN_TEXT: usize = 64;
/// Sessions whose memos are kept, and the most texts one keeps.
const SESSIONS: usize = 64;
const TEXTS: usize = 400_000;

/// One session's counts.
pub struct SessionCounts {
    tokenizer: Tokenizer,
    by_text: RefCell<HashMap<u128, u64>>,
}

/// The session's counter over its memo.
pub struct Counter<'a> {
    inner: CachingCounter,
    memo: &'a SessionCounts,
}

impl TokenCounter for Counter<'_> {
    fn count(&self, text: &str) -> u64 {
        if text.len() < MIN_TEXT {
            return self.inner.count(text);
        }
        let key = xxhash_rust::xxh3::xxh3_128(text.as_bytes());
        if let Some(&n) = self.memo.by_text.borrow().get(&key) {
            return n;
        }
        let n = self.inner.count(text);
        let mut map = self.memo.by_text.borrow_mut();
        if map.len() >= TEXTS {
            map.clear();
        }
        map.insert(key, n);
        n
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

impl SessionCounts {
    pub fn counter(&self) -> Counter<'_> {
        Counter {
            inner: CachingCounter::new(self.tokenizer),
            memo: self,
        }
    }
}

/// The memos of recently built sessions.
#[derive(Default)]
pub struct CountsBySession {
    by_session: Mutex<HashMap<SessionId, SessionCounts>>,
}

impl CountsBySession {
    /// Run `f` with `session`'s memo (taken out meanwhile, so builds of two sessions do not
    /// wait on each other), then keep it.
    pub fn with<T>(
        &self,
        id: SessionId,
        session: &Session,
        f: impl FnOnce(&SessionCounts) -> T,
    ) -> T {
        let tokenizer = ctxd_tokens::for_session(session).tokenizer();
        let taken = self.lock().remove(&id);
        let memo = taken
            .filter(|m| m.tokenizer == tokenizer)
            .unwrap_or_else(|| SessionCounts {
                tokenizer,
                by_text: RefCell::new(HashMap::new()),
            });
        let out = f(&memo);
        let mut map = self.lock();
        if map.len() >= SESSIONS {
            // Any one: a dropped memo costs one full count on the next build, nothing more.
            if let Some(&k) = map.keys().next() {
                map.remove(&k);
            }
        }
        map.insert(id, memo);
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, SessionCounts>> {
        self.by_session.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_the_tokenizers_and_remembered() {
        let memos = CountsBySession::default();
        let session = Session::default();
        let text = "fn main() { println!(\"hello\"); } // a line long enough to be remembered";
        let want = ctxd_tokens::for_session(&session).count(text);
        let first = memos.with(1, &session, |m| m.counter().count(text));
        assert_eq!(first, want);
        let remembered = memos.with(1, &session, |m| {
            assert_eq!(m.by_text.borrow().len(), 1);
            m.counter().count(text)
        });
        assert_eq!(remembered, want);
    }
}
