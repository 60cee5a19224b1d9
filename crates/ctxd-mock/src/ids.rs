//! Response and call ids: unique per server, readable in test output.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Ids are `prefix` + a per-server tag + a counter, so two servers in one test never collide.
#[derive(Debug)]
pub(crate) struct Ids {
    tag: u32,
    next: AtomicU64,
}

impl Ids {
    pub(crate) fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Self {
            tag: nanos ^ std::process::id().rotate_left(16),
            next: AtomicU64::new(1),
        }
    }

    pub(crate) fn next(&self, prefix: &str) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}mock{:08x}{n:012x}", self.tag)
    }
}

/// Seconds since the epoch (`created` fields).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_prefixed() {
        let ids = Ids::new();
        let a = ids.next("msg_");
        let b = ids.next("msg_");
        assert!(a.starts_with("msg_mock"));
        assert_ne!(a, b);
    }
}
