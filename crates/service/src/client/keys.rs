//! The handles of the keys a connection registered, by a fingerprint of
//! their material (a keyed digest; the material itself is not kept). The
//! daemon allows a bounded number of keys per connection, so idle handles
//! are released, least recently used first, before that bound is reached;
//! a handle in use by a running job is never released under it.

use std::collections::HashMap;
use std::sync::Mutex;

pub type Fingerprint = [u8; 32];

struct Entry {
    handle: u32,
    users: usize,
    last: u64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Fingerprint, Entry>,
    tick: u64,
}

#[derive(Default)]
pub struct KeyCache {
    inner: Mutex<Inner>,
}

impl KeyCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached handle, counted in use until [`KeyCache::release`].
    pub fn acquire(&self, fp: &Fingerprint) -> Option<u32> {
        let mut i = self.lock();
        i.tick += 1;
        let tick = i.tick;
        let e = i.map.get_mut(fp)?;
        e.users += 1;
        e.last = tick;
        Some(e.handle)
    }

    /// Records a handle just registered, in use. If another thread
    /// registered the same key meanwhile, its handle is kept and the new
    /// one is returned for release.
    pub fn insert(&self, fp: Fingerprint, handle: u32) -> (u32, Option<u32>) {
        let mut i = self.lock();
        i.tick += 1;
        let tick = i.tick;
        if let Some(e) = i.map.get_mut(&fp) {
            e.users += 1;
            e.last = tick;
            return (e.handle, Some(handle));
        }
        i.map.insert(
            fp,
            Entry {
                handle,
                users: 1,
                last: tick,
            },
        );
        (handle, None)
    }

    pub fn release(&self, fp: &Fingerprint) {
        if let Some(e) = self.lock().map.get_mut(fp) {
            e.users = e.users.saturating_sub(1);
        }
    }

    /// Removes idle entries, oldest first, until at most `keep` remain
    /// (or none idle is left); returns their handles for release.
    pub fn evict(&self, keep: usize) -> Vec<u32> {
        let mut i = self.lock();
        if i.map.len() <= keep {
            return Vec::new();
        }
        let mut idle: Vec<(u64, Fingerprint)> = i
            .map
            .iter()
            .filter(|(_, e)| e.users == 0)
            .map(|(fp, e)| (e.last, *fp))
            .collect();
        idle.sort_unstable();
        let excess = i.map.len() - keep;
        idle.iter()
            .take(excess)
            .filter_map(|(_, fp)| i.map.remove(fp).map(|e| e.handle))
            .collect()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_handles_go_oldest_first_and_busy_ones_stay() {
        let c = KeyCache::default();
        for i in 0..4u8 {
            assert_eq!(c.insert([i; 32], i as u32 + 10), (i as u32 + 10, None));
        }
        c.release(&[0; 32]);
        c.release(&[2; 32]);
        c.release(&[3; 32]);
        // [1] is busy; [2] used again most recently.
        assert_eq!(c.acquire(&[2; 32]), Some(12));
        c.release(&[2; 32]);
        assert_eq!(c.evict(2), vec![10, 13]);
        assert_eq!(c.len(), 2);
        assert_eq!(c.evict(0), vec![12], "the busy one stays");
        assert_eq!(c.acquire(&[1; 32]), Some(11));
        assert_eq!(c.acquire(&[0; 32]), None);
        assert_eq!(c.insert([1; 32], 99), (11, Some(99)));
    }
}
