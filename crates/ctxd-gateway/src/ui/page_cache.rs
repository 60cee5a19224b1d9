//! Built pages by session with bounded freshness: a page is rebuilt when its session changed
//! *and* its copy is at least the refresh interval old, so a session growing ten times a
//! second costs one rebuild per interval however often it is polled. One build at a time per
//! session: a poll arriving during a rebuild gets the copy it replaces (or, with none yet,
//! waits for it).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Pages by key, each the version (entry count) it was built at.
pub struct PageCache<K, V> {
    slots: Mutex<HashMap<K, Slot<V>>>,
    built: Condvar,
    cap: usize,
}

struct Slot<V> {
    copy: Option<Built<V>>,
    building: bool,
}

struct Built<V> {
    version: u64,
    at: Instant,
    value: Arc<V>,
}

/// A page served, and how old its copy is (zero when built for this request).
pub struct Served<V> {
    pub value: Arc<V>,
    pub age: Duration,
}

impl<K: Copy + Eq + Hash, V> PageCache<K, V> {
    /// At most `cap` pages kept (the least recently built dropped first).
    pub fn new(cap: usize) -> Self {
        PageCache {
            slots: Mutex::new(HashMap::new()),
            built: Condvar::new(),
            cap: cap.max(1),
        }
    }

    /// `key`'s page at `version`: the copy when it is that version or younger than `refresh`
    /// (or another call is rebuilding it), else built by `build` here.
    pub fn get<E>(
        &self,
        key: K,
        version: u64,
        refresh: Duration,
        build: impl FnOnce() -> Result<V, E>,
    ) -> Result<Served<V>, E> {
        let mut slots = self.lock();
        loop {
            let slot = slots.entry(key).or_insert(Slot {
                copy: None,
                building: false,
            });
            if let Some(c) = &slot.copy {
                let age = c.at.elapsed();
                if c.version == version || age < refresh || slot.building {
                    return Ok(Served {
                        value: c.value.clone(),
                        age,
                    });
                }
            }
            if !slot.building {
                slot.building = true;
                break;
            }
            // The first build of this page is under way on another thread: wait for it (a
            // failed one leaves `building` false and this call builds).
            slots = self.built.wait(slots).unwrap_or_else(|p| p.into_inner());
        }
        drop(slots);
        let mut guard = Building {
            fresh: self,
            key,
            done: false,
        };
        let value = Arc::new(build()?);
        let mut slots = self.lock();
        slots.insert(
            key,
            Slot {
                copy: Some(Built {
                    version,
                    at: Instant::now(),
                    value: value.clone(),
                }),
                building: false,
            },
        );
        guard.done = true;
        while slots.len() > self.cap && Self::evict(&mut slots, key) {}
        drop(slots);
        self.built.notify_all();
        Ok(Served {
            value,
            age: Duration::ZERO,
        })
    }

    /// Drop the least recently built page but `keep` that no call is building (none: false).
    fn evict(slots: &mut HashMap<K, Slot<V>>, keep: K) -> bool {
        let oldest = slots
            .iter()
            .filter(|(k, s)| !s.building && **k != keep)
            .min_by_key(|(_, s)| s.copy.as_ref().map(|c| c.at))
            .map(|(k, _)| *k);
        oldest.is_some_and(|k| slots.remove(&k).is_some())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Slot<V>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A build under way: if it ends without a page (an error, a panic), the slot is free again
/// and the calls waiting on it wake.
struct Building<'a, K: Copy + Eq + Hash, V> {
    fresh: &'a PageCache<K, V>,
    key: K,
    done: bool,
}

impl<K: Copy + Eq + Hash, V> Drop for Building<'_, K, V> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(slot) = self.fresh.lock().get_mut(&self.key) {
            slot.building = false;
        }
        self.fresh.built.notify_all();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const LONG: Duration = Duration::from_secs(60);

    #[test]
    fn a_changed_page_is_rebuilt_only_once_its_copy_is_old() {
        let f = PageCache::<i64, u64>::new(4);
        let built = |v: u64| move || Ok::<_, ()>(v);
        assert_eq!(*f.get(1, 1, LONG, built(1)).unwrap().value, 1);
        // Changed, but the copy is younger than the interval: served as it is, with its age.
        let served = f.get(1, 2, LONG, built(2)).unwrap();
        assert_eq!(*served.value, 1);
        // With no interval, every change rebuilds (and an unchanged page never does).
        assert_eq!(*f.get(1, 2, Duration::ZERO, built(2)).unwrap().value, 2);
        assert_eq!(*f.get(1, 2, Duration::ZERO, built(3)).unwrap().value, 2);
        std::thread::sleep(Duration::from_millis(20));
        let old = f.get(1, 3, Duration::from_millis(10), built(3)).unwrap();
        assert_eq!((*old.value, old.age), (3, Duration::ZERO));
    }

    #[test]
    fn a_failed_build_leaves_the_slot_free() {
        let f = PageCache::<i64, u64>::new(4);
        assert!(f.get(1, 1, LONG, || Err::<u64, _>("no")).is_err());
        assert_eq!(*f.get(1, 1, LONG, || Ok::<_, ()>(7)).unwrap().value, 7);
    }

    #[test]
    fn concurrent_polls_share_one_build() {
        let f = Arc::new(PageCache::<i64, u64>::new(4));
        let builds = Arc::new(AtomicUsize::new(0));
        let polls: Vec<_> = (0..8)
            .map(|_| {
                let (f, builds) = (f.clone(), builds.clone());
                std::thread::spawn(move || {
                    let served = f.get(1, 1, Duration::ZERO, || {
                        builds.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(50));
                        Ok::<_, ()>(5)
                    });
                    *served.unwrap().value
                })
            })
            .collect();
        for p in polls {
            assert_eq!(p.join().unwrap(), 5);
        }
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        // A rebuild under way: the others get the copy it replaces at once.
        let (f2, started) = (f.clone(), Arc::new(std::sync::Barrier::new(2)));
        let s2 = started.clone();
        let rebuild = std::thread::spawn(move || {
            f2.get(1, 2, Duration::ZERO, || {
                s2.wait();
                std::thread::sleep(Duration::from_millis(100));
                Ok::<_, ()>(6)
            })
            .map(|s| *s.value)
        });
        started.wait();
        let t = Instant::now();
        assert_eq!(
            *f.get(1, 2, Duration::ZERO, || Ok::<_, ()>(9))
                .unwrap()
                .value,
            5
        );
        assert!(t.elapsed() < Duration::from_millis(80));
        assert_eq!(rebuild.join().unwrap(), Ok(6));
    }

    #[test]
    fn keeps_at_most_cap_pages() {
        let f = PageCache::<i64, u64>::new(2);
        for k in 0..5 {
            f.get(k, 1, LONG, || Ok::<_, ()>(k as u64)).unwrap();
        }
        assert_eq!(f.lock().len(), 2);
        assert!(f.lock().contains_key(&4));
    }
}
