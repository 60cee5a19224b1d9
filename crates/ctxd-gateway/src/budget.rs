//! The global budget for request bodies in flight: bytes of raw and decoded bodies held by all
//! requests at once. Beyond its first [`FREE_BYTES`] a request's body draws on the budget as it
//! is read and decoded; when the budget is spent, a large body waits (briefly) and is then
//! refused with 503, while small requests and new sessions go on being served. Without it, a
//! few 60 MB bodies (or decompression bombs) took gigabytes and stalled everyone.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Every request's first bytes are free of the budget: ordinary agent requests never wait.
pub const FREE_BYTES: usize = 1 << 20;

/// How long a large body waits for budget before it is refused.
pub const WAIT: Duration = Duration::from_secs(5);

/// The budget was spent (and stayed spent through the wait).
#[derive(Debug)]
pub struct Exhausted;

/// Bytes of one request's bodies counted against the budget, released when dropped.
pub struct Held {
    budget: Arc<Semaphore>,
    permit: Option<OwnedSemaphorePermit>,
    counted: usize,
}

impl Held {
    pub fn new(budget: &Arc<Semaphore>) -> Self {
        Held {
            budget: budget.clone(),
            permit: None,
            counted: 0,
        }
    }

    fn needed(&self, total: usize) -> Option<u32> {
        let want = total.saturating_sub(FREE_BYTES);
        (want > self.counted).then(|| u32::try_from(want - self.counted).unwrap_or(u32::MAX))
    }

    fn add(&mut self, p: OwnedSemaphorePermit) {
        self.counted += p.num_permits();
        match &mut self.permit {
            Some(held) => held.merge(p),
            None => self.permit = Some(p),
        }
    }

    /// The request now holds `total` bytes: wait up to [`WAIT`] for the budget.
    pub async fn grow_to(&mut self, total: usize) -> Result<(), Exhausted> {
        let Some(n) = self.needed(total) else {
            return Ok(());
        };
        let acquire = self.budget.clone().acquire_many_owned(n);
        match tokio::time::timeout(WAIT, acquire).await {
            Ok(Ok(p)) => {
                self.add(p);
                Ok(())
            }
            _ => Err(Exhausted),
        }
    }

    /// [`Held::grow_to`] without waiting (decoding runs synchronously).
    pub fn try_grow_to(&mut self, total: usize) -> Result<(), Exhausted> {
        let Some(n) = self.needed(total) else {
            return Ok(());
        };
        match self.budget.clone().try_acquire_many_owned(n) {
            Ok(p) => {
                self.add(p);
                Ok(())
            }
            Err(_) => Err(Exhausted),
        }
    }
}

/// The budget of `bytes` (at least one maximal body, or nothing large could ever pass).
pub fn budget(bytes: usize, max_body: usize) -> Arc<Semaphore> {
    let permits = bytes
        .max(max_body.saturating_sub(FREE_BYTES))
        .min(Semaphore::MAX_PERMITS);
    Arc::new(Semaphore::new(permits))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn large_bodies_share_the_budget_small_ones_are_free() {
        let b = budget(3 << 20, 0);
        let mut big = Held::new(&b);
        big.grow_to(FREE_BYTES + (2 << 20)).await.unwrap();
        assert_eq!(b.available_permits(), 1 << 20);
        let mut other = Held::new(&b);
        assert!(other.try_grow_to(FREE_BYTES + (2 << 20)).is_err());
        // A small request needs nothing from the budget.
        let mut small = Held::new(&b);
        small.try_grow_to(FREE_BYTES).unwrap();
        drop(big);
        assert_eq!(b.available_permits(), 3 << 20);
        other.try_grow_to(FREE_BYTES + (2 << 20)).unwrap();
    }
}
